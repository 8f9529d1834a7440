/*
 * The knowledge base: an embedded SQLite database of what the learner
 * measured and concluded, per communicator fingerprint.
 *
 * Tables (schema version 2):
 *   fingerprints(id, nranks, nhosts, description, first_seen, last_seen)
 *   arms(fp, coll, bytes, algo, chunk, channels, samples, mean_log, var_log)
 *        the posterior of each measured arm, on log seconds at `bytes`
 *   buckets(fp, coll, bytes, explored, explore_s, settled)
 *   fingerprint_rates(fp, shape, host, bps)
 *        the measured host rates behind a fingerprint, to recognise it
 *        again when a probe lands on the other side of a rounding boundary
 *   measurements(fp, coll, bytes, algo, chunk, channels, seconds, phase, at)
 *        every agreed timing the learner used, and why the arm ran
 *        ("explore", "refine", "exploit"): the decision log; indexed by
 *        bucket, whose newest "exploit" row names the arm a warm job
 *        starts on.
 *   profiles(fp, preset, rank, host, layers, dim, heads, ctx, params,
 *            grad_bytes, gemm_gflops, attention_gflops, optimizer_s, at)
 *   profile_steps(fp, preset, rank, batch, fwd_bwd_s)
 *   profile_terms(fp, preset, rank, name, value)
 *        each rank's measured compute for one model under a fingerprint
 *        (the training job's compute profile, docs/formats.md), which the
 *        training-job planner reads beside the arms, and the optional
 *        terms of a job step by name (PROFILE_TERMS); added to schema 1
 *        with CREATE IF NOT EXISTS, so a KB made before them is still
 *        read (without profiles) and gets them at its next writable open.
 *   choices(fp, coll, bytes, algo, chunk, channels, mean_log, samples,
 *           confidence, runner_algo, runner_chunk, runner_channels,
 *           runner_mean_log, runner_samples, reason, at)
 *        what `auto` settled on in a bucket and when, with the runner-up
 *        (the next measured arm by posterior mean, runner_algo '' if
 *        none): one row when a bucket settles ("settled"), when a settled
 *        bucket changes arm ("switched") and when a job starts warm from
 *        the KB ("warm"); `autoinfra kb log` prints them. Schema 2.
 *
 * Versions: a KB of a newer schema than KB_SCHEMA_VERSION is refused; an
 * older one is read as it is, and upgraded (its missing tables created,
 * the version raised) at its first writable open.
 *
 * Crash safety: WAL journal, every update one transaction; a process
 * killed mid-write leaves the last committed state (SQLite's guarantee).
 * One writer per job (rank 0). Opened by the learner (kb_open_writer_wait)
 * the KB waits for a lock at most as long as the learner says: it opens
 * and reads it inside a collective, where a wait would stall every rank,
 * so a KB another process holds locked is set up and written later
 * (kb_is_busy; the learner keeps what it learned and retries), and one
 * locked even against reading fails the open with AI_ERR_TIMEOUT (the
 * learner opens it again at a later save). Other users (the CLI) wait up
 * to KB_BUSY_MS.
 *
 * Ownership: a KB is stamped with PRAGMA application_id KB_APP_ID and
 * user_version KB_SCHEMA_VERSION when it is created. A non-empty database
 * with another application id is refused and left untouched; one without
 * an id is taken only when every object in it is one of ours (a KB made
 * before the stamp), and stamped at its next write.
 *
 * Read-only files or directories, and a KB that cannot be written when
 * opened (a full disk, an I/O error on write): the KB is read (immutable
 * when SQLite cannot create its shared-memory file next to it),
 * kb_is_readonly says so and kb_readonly_why why; nothing is written.
 */
#include "tune/tune.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KB_SCHEMA_VERSION 2
#define KB_SCHEMA_VERSION_S "2"
#define KB_APP_ID 0x41494b42 /* "AIKB" */
#define KB_BUSY_MS 10000

struct ai_kb {
    sqlite3 *db;
    char path[1024];
    int readonly;   /* opened read-only: nothing is written */
    int need_setup; /* schema, stamp or WAL still to be written (was busy) */
    int busy;       /* the last write found the KB locked by another process */
    int setup_rc;   /* what the last kb_setup's SQLite call returned */
    char why_ro[256]; /* readonly: why */
};

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS fingerprints(id TEXT PRIMARY KEY, nranks INTEGER NOT NULL,"
    " nhosts INTEGER NOT NULL, description TEXT NOT NULL DEFAULT '', first_seen REAL,"
    " last_seen REAL);"
    "CREATE TABLE IF NOT EXISTS arms(fp TEXT NOT NULL, coll TEXT NOT NULL, bytes INTEGER NOT NULL,"
    " algo TEXT NOT NULL, chunk INTEGER NOT NULL, channels INTEGER NOT NULL,"
    " samples INTEGER NOT NULL, mean_log REAL NOT NULL, var_log REAL NOT NULL,"
    " PRIMARY KEY(fp, coll, bytes, algo, chunk, channels));"
    "CREATE TABLE IF NOT EXISTS buckets(fp TEXT NOT NULL, coll TEXT NOT NULL,"
    " bytes INTEGER NOT NULL, explored INTEGER NOT NULL, explore_s REAL NOT NULL,"
    " settled INTEGER NOT NULL, PRIMARY KEY(fp, coll, bytes));"
    "CREATE TABLE IF NOT EXISTS measurements(fp TEXT NOT NULL, coll TEXT NOT NULL,"
    " bytes INTEGER NOT NULL, algo TEXT NOT NULL, chunk INTEGER NOT NULL,"
    " channels INTEGER NOT NULL, seconds REAL NOT NULL, phase TEXT NOT NULL, at REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS measurements_bucket ON measurements(fp, coll, bytes);"
    "CREATE TABLE IF NOT EXISTS fingerprint_rates(fp TEXT NOT NULL, shape TEXT NOT NULL,"
    " host INTEGER NOT NULL, bps REAL NOT NULL, PRIMARY KEY(fp, host));"
    "CREATE TABLE IF NOT EXISTS profiles(fp TEXT NOT NULL, preset TEXT NOT NULL,"
    " rank INTEGER NOT NULL, host TEXT NOT NULL, layers INTEGER NOT NULL, dim INTEGER NOT NULL,"
    " heads INTEGER NOT NULL, ctx INTEGER NOT NULL, params INTEGER NOT NULL,"
    " grad_bytes INTEGER NOT NULL, gemm_gflops REAL NOT NULL, attention_gflops REAL NOT NULL,"
    " optimizer_s REAL NOT NULL, at REAL NOT NULL, PRIMARY KEY(fp, preset, rank));"
    "CREATE TABLE IF NOT EXISTS profile_steps(fp TEXT NOT NULL, preset TEXT NOT NULL,"
    " rank INTEGER NOT NULL, batch INTEGER NOT NULL, fwd_bwd_s REAL NOT NULL,"
    " PRIMARY KEY(fp, preset, rank, batch));"
    "CREATE TABLE IF NOT EXISTS profile_terms(fp TEXT NOT NULL, preset TEXT NOT NULL,"
    " rank INTEGER NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,"
    " PRIMARY KEY(fp, preset, rank, name));"
    "CREATE TABLE IF NOT EXISTS choices(fp TEXT NOT NULL, coll TEXT NOT NULL,"
    " bytes INTEGER NOT NULL, algo TEXT NOT NULL, chunk INTEGER NOT NULL,"
    " channels INTEGER NOT NULL, mean_log REAL NOT NULL, samples INTEGER NOT NULL,"
    " confidence REAL NOT NULL, runner_algo TEXT NOT NULL, runner_chunk INTEGER NOT NULL,"
    " runner_channels INTEGER NOT NULL, runner_mean_log REAL, runner_samples INTEGER NOT NULL,"
    " reason TEXT NOT NULL, at REAL NOT NULL);"
    "INSERT OR REPLACE INTO meta VALUES('schema_version', '" KB_SCHEMA_VERSION_S "');";

static ai_status_t kb_err(const ai_kb *kb, const char *what)
{
    return ai_fail(AI_ERR_IO, "knowledge base %s: %s: %s", kb->path, what, sqlite3_errmsg(kb->db));
}

ai_status_t ai_kb_default_path(char *buf, size_t len)
{
    util_param_refresh();
    return kb_default_path(buf, len);
}

ai_status_t kb_default_path(char *buf, size_t len)
{
    const char *env = util_param_str(UTIL_PARAM_KB), *xdg = util_env_outside("XDG_CACHE_HOME"),
               *home = util_env_outside("HOME");
    int w;
    if (env && *env)
        w = snprintf(buf, len, "%s", env);
    else if (xdg && *xdg)
        w = snprintf(buf, len, "%s/autoinfra/kb.sqlite", xdg);
    else if (home && *home)
        w = snprintf(buf, len, "%s/.cache/autoinfra/kb.sqlite", home);
    else
        return ai_fail(AI_ERR_INVALID, "no knowledge base path: set AUTOINFRA_KB (HOME is unset)");
    if (w < 0 || (size_t)w >= len)
        return ai_fail(AI_ERR_INVALID, "knowledge base path is too long");
    return AI_OK;
}

/* mkdir -p of the directory part of path. */
static ai_status_t make_parents(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return ai_fail(AI_ERR_IO, "knowledge base: cannot create directory %s: %s", dir,
                           strerror(errno));
        *p = '/';
    }
    return AI_OK;
}

static ai_status_t exec_sql(ai_kb *kb, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(kb->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        ai_status_t st = ai_fail(AI_ERR_IO, "knowledge base %s: %s", kb->path,
                                 msg ? msg : sqlite3_errmsg(kb->db));
        sqlite3_free(msg);
        return st;
    }
    return AI_OK;
}

/* A lock held by another connection. */
static int is_busy_rc(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

/* Create the schema, stamp the file as ours and switch it to WAL; all
 * idempotent. A lock held elsewhere leaves it for the next write. */
static ai_status_t kb_setup(ai_kb *kb)
{
    char sql[160];
    int rc = sqlite3_exec(kb->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(kb->db, schema, NULL, NULL, NULL);
    snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d; COMMIT;",
             KB_APP_ID, KB_SCHEMA_VERSION);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(kb->db, sql, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(kb->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    kb->setup_rc = rc;
    kb->busy = is_busy_rc(rc);
    kb->need_setup = rc != SQLITE_OK;
    ai_status_t st = rc != SQLITE_OK && !kb->busy ? kb_err(kb, "cannot set up") : AI_OK;
    if (rc != SQLITE_OK && !sqlite3_get_autocommit(kb->db))
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

/* Every object in the database is one of a knowledge base's. */
static int only_our_objects(ai_kb *kb)
{
    static const char *const ours[] = {"meta", "fingerprints", "arms", "buckets", "measurements",
                                       "measurements_bucket", "fingerprint_rates", "profiles",
                                       "profile_steps", "profile_terms", "choices"};
    sqlite3_stmt *q = NULL;
    int ok = sqlite3_prepare_v2(kb->db, "SELECT name FROM sqlite_master", -1, &q, NULL) ==
             SQLITE_OK;
    while (ok && sqlite3_step(q) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        int known = name && !strncmp(name, "sqlite_", 7);
        for (size_t i = 0; name && !known && i < sizeof ours / sizeof ours[0]; i++)
            known = !strcmp(name, ours[i]);
        ok = known;
    }
    sqlite3_finalize(q);
    return ok;
}

static int pragma_int(ai_kb *kb, const char *sql, int *out)
{
    sqlite3_stmt *q = NULL;
    int ok = sqlite3_prepare_v2(kb->db, sql, -1, &q, NULL) == SQLITE_OK &&
             sqlite3_step(q) == SQLITE_ROW;
    if (ok)
        *out = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return ok;
}

static ai_status_t newer_schema(const ai_kb *kb, int ver)
{
    return ai_fail(AI_ERR_PROTO,
                   "knowledge base %s has schema version %d, newer than this build's %d: "
                   "refusing to read or change it (use a newer autoinfra, or another --kb)",
                   kb->path, ver, KB_SCHEMA_VERSION);
}

/* Is the open database ours (see the top)? *empty: no objects yet. */
static ai_status_t kb_check_owner(ai_kb *kb, int *empty)
{
    int app = 0, ver = 0, nobj = 0;
    if (!pragma_int(kb, "PRAGMA application_id", &app) ||
        !pragma_int(kb, "PRAGMA user_version", &ver) ||
        !pragma_int(kb, "SELECT count(*) FROM sqlite_master", &nobj)) {
        if (is_busy_rc(sqlite3_errcode(kb->db)))
            return ai_fail(AI_ERR_TIMEOUT, "knowledge base %s is locked by another process",
                           kb->path);
        return kb_err(kb, "not a readable SQLite database");
    }
    *empty = nobj == 0 && app == 0;
    if (*empty)
        return AI_OK;
    if (app != KB_APP_ID && (app != 0 || !only_our_objects(kb)))
        return ai_fail(AI_ERR_PROTO,
                       "%s is not an autoinfra knowledge base (SQLite application_id 0x%08x, "
                       "%d objects, not autoinfra's 0x%08x); refusing to change it: point "
                       "AUTOINFRA_KB (or --kb) at another file",
                       kb->path, (unsigned)app, nobj, (unsigned)KB_APP_ID);
    if (app == KB_APP_ID && ver > KB_SCHEMA_VERSION)
        return newer_schema(kb, ver);
    return AI_OK;
}

/* sqlite3 URI for path with the given query ("mode=ro", "immutable=1"). */
static void kb_uri(const char *path, const char *query, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "file:");
    for (const unsigned char *p = (const unsigned char *)path; *p && o + 4 < len; p++)
        o += (size_t)(strchr("?#%", *p) || *p < 0x20 ? snprintf(buf + o, len - o, "%%%02x", *p)
                                                    : snprintf(buf + o, len - o, "%c", *p));
    snprintf(buf + o, len - o, "?%s", query);
}

/* Open read-only; a WAL file in a directory this process cannot write to
 * (no shared-memory file can be created) is opened immutable. */
static int open_readonly(ai_kb *kb)
{
    char uri[3200];
    int fl = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, dummy;
    kb_uri(kb->path, "mode=ro", uri, sizeof uri);
    if (sqlite3_open_v2(uri, &kb->db, fl, NULL) == SQLITE_OK &&
        pragma_int(kb, "SELECT count(*) FROM sqlite_master", &dummy))
        return SQLITE_OK;
    sqlite3_close(kb->db);
    kb->db = NULL;
    kb_uri(kb->path, "immutable=1", uri, sizeof uri);
    return sqlite3_open_v2(uri, &kb->db, fl, NULL);
}

/* The KB could not be written (rc): a full disk, an I/O error, a
 * read-only file system; not a lock held elsewhere. */
static int write_failed(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
        return 1;
    default:
        return 0;
    }
}

/* Close the writable connection that failed with rc; the next open is
 * read-only, and kb_readonly_why says why. */
static void read_only_after(ai_kb *kb, int rc)
{
    int e = kb->db ? sqlite3_system_errno(kb->db) : 0;
    int full = e == ENOSPC || (rc & 0xff) == SQLITE_FULL;
    snprintf(kb->why_ro, sizeof kb->why_ro, "writing it failed%s: %s%s%s%s",
             full ? ", the disk is full" : "", sqlite3_errstr(rc), e ? " (" : "",
             e ? strerror(e) : "", e ? ")" : "");
    sqlite3_close(kb->db);
    kb->db = NULL;
    kb->readonly = 1;
    kb->need_setup = 0;
    kb->busy = 0;
}

/* Open path (NULL or "": the default) as a KB; busy_ms: how long a lock
 * held elsewhere is waited for; writer: the learner's (kb_open_writer). */
static ai_status_t kb_open_wait(const char *path, int readonly, int busy_ms, int writer,
                                ai_kb **out)
{
    ai_kb *kb = calloc(1, sizeof *kb);
    if (!kb)
        return ai_fail(AI_ERR_NOMEM, "knowledge base");
    ai_status_t st = AI_OK;
    if (path && *path) {
        if (strlen(path) >= sizeof kb->path)
            st = ai_fail(AI_ERR_INVALID, "knowledge base path is too long");
        else
            snprintf(kb->path, sizeof kb->path, "%s", path);
    } else {
        st = ai_kb_default_path(kb->path, sizeof kb->path);
    }
    if (st != AI_OK) {
        free(kb);
        return st;
    }
    /* stat before open: opening a FIFO or a device would block or read
     * what is not a file */
    struct stat sb;
    int exists = stat(kb->path, &sb) == 0;
    if (exists && !S_ISREG(sb.st_mode)) {
        st = ai_fail(AI_ERR_INVALID, "knowledge base %s is not a regular file", kb->path);
        free(kb);
        return st;
    }
    if (readonly && !exists) {
        st = ai_fail(AI_ERR_NOTFOUND, "knowledge base %s does not exist", kb->path);
        free(kb);
        return st;
    }
    if (!readonly && (st = make_parents(kb->path)) != AI_OK) {
        free(kb);
        return st;
    }
    /* Writable only if the file (or, to create it and its WAL files, the
     * directory) can be written: otherwise read what is there. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", kb->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    int dir_ok = access(slash ? dir : ".", W_OK) == 0;
    if (!readonly && exists && (access(kb->path, W_OK) != 0 || !dir_ok))
        kb->readonly = 1;
    else if (!readonly && !dir_ok) {
        st = ai_fail(AI_ERR_IO, "knowledge base %s does not exist and its directory is not "
                                "writable", kb->path);
        free(kb);
        return st;
    }
    if (kb->readonly)
        snprintf(kb->why_ro, sizeof kb->why_ro,
                 "the file or its directory is not writable by this process");
    kb->readonly |= readonly;
    /* A KB that exists but cannot be written now (a full disk, an I/O
     * error on write) is opened again read-only: what it knows is still
     * worth reading. */
    for (;;) {
        int rc = kb->readonly ? open_readonly(kb)
                              : sqlite3_open_v2(kb->path, &kb->db,
                                                SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                                    SQLITE_OPEN_NOMUTEX, NULL);
        if (rc != SQLITE_OK) {
            if (!kb->readonly && exists && write_failed(rc)) {
                read_only_after(kb, rc);
                continue;
            }
            st = kb_err(kb, "cannot open");
            goto fail;
        }
        sqlite3_busy_timeout(kb->db, busy_ms);
        int empty = 0;
        if ((st = kb_check_owner(kb, &empty)) != AI_OK) {
            if (!kb->readonly && exists && write_failed(sqlite3_extended_errcode(kb->db))) {
                read_only_after(kb, sqlite3_extended_errcode(kb->db));
                continue;
            }
            goto fail;
        }
        if (kb->readonly && empty) {
            st = ai_fail(AI_ERR_NOTFOUND, "knowledge base %s is empty%s%s", kb->path,
                         kb->why_ro[0] && !readonly ? ", and cannot be written: " : "",
                         kb->why_ro[0] && !readonly ? kb->why_ro : "");
            goto fail;
        }
        if (kb->readonly)
            break;
        st = kb_setup(kb);
        int wrc = st == AI_OK ? SQLITE_OK : kb->setup_rc;
        if (st == AI_OK && (st = exec_sql(kb, "PRAGMA synchronous=NORMAL")) != AI_OK)
            wrc = sqlite3_extended_errcode(kb->db);
        /* The writer's first write: see kb_open_writer. */
        if (st == AI_OK && writer && !kb->need_setup &&
            (wrc = sqlite3_exec(kb->db, "INSERT OR REPLACE INTO meta VALUES('last_writer', "
                                        "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                                NULL, NULL, NULL)) != SQLITE_OK) {
            wrc = sqlite3_extended_errcode(kb->db);
            kb->busy = is_busy_rc(wrc);
            if (!kb->busy)
                st = kb_err(kb, "cannot write");
        }
        if (st != AI_OK && exists && write_failed(wrc)) {
            read_only_after(kb, wrc);
            continue;
        }
        if (st != AI_OK)
            goto fail;
        break;
    }
    if (!kb->need_setup) {
        /* a KB made before the stamp: the schema version from its table */
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(kb->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
                               &q, NULL) != SQLITE_OK) {
            st = kb_err(kb, "not an autoinfra knowledge base");
            goto fail;
        }
        int ver = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
        sqlite3_finalize(q);
        if (ver < 1 || ver > KB_SCHEMA_VERSION ||
            (!kb->readonly && ver != KB_SCHEMA_VERSION)) {
            st = ver > KB_SCHEMA_VERSION
                     ? newer_schema(kb, ver)
                     : ai_fail(AI_ERR_PROTO, "knowledge base %s has schema version %d; this "
                                             "build reads 1 to %d", kb->path, ver,
                               KB_SCHEMA_VERSION);
            goto fail;
        }
    }
    *out = kb;
    return AI_OK;
fail:
    sqlite3_close(kb->db);
    free(kb);
    return st;
}

ai_status_t ai_kb_open(const char *path, int readonly, ai_kb **out)
{
    return kb_open_wait(path, readonly, KB_BUSY_MS, 0, out);
}

ai_status_t kb_open_writer(const char *path, ai_kb **out)
{
    return kb_open_writer_wait(path, 0, out);
}

ai_status_t kb_open_writer_wait(const char *path, int busy_ms, ai_kb **out)
{
    /* The first write after opening starts the (empty) write-ahead log:
     * 10 ms on the test machine's disk, 2.5% of a 30-call run of 64 KiB
     * allreduces when it fell in the middle of them. kb_open_wait pays it
     * here, at the learner's first call of the job (unless the KB is busy
     * or read-only: then at the first save). */
    ai_status_t st = kb_open_wait(path, 0, busy_ms, 1, out);
    /* busy_ms is for the open alone: the writes that follow run inside
     * collectives and never wait (kb_set_wait changes that). */
    if (st == AI_OK)
        sqlite3_busy_timeout((*out)->db, 0);
    return st;
}

const char *kb_readonly_why(const ai_kb *kb)
{
    return kb->why_ro[0] ? kb->why_ro : "opened read-only";
}

const char *kb_path(const ai_kb *kb)
{
    return kb->path;
}

int kb_is_readonly(const ai_kb *kb)
{
    return kb->readonly;
}

int kb_is_busy(const ai_kb *kb)
{
    return kb->busy;
}

void kb_set_wait(ai_kb *kb, int busy_ms)
{
    sqlite3_busy_timeout(kb->db, busy_ms);
}

void ai_kb_close(ai_kb *kb)
{
    if (!kb)
        return;
    sqlite3_close(kb->db);
    free(kb);
}

/* Prepare a statement whose first three parameters are fingerprint,
 * collective and bucket. */
static ai_status_t prepare_keyed(ai_kb *kb, const char *sql, const char *fp, const char *coll,
                                 size_t bytes, const char *what, sqlite3_stmt **q)
{
    if (sqlite3_prepare_v2(kb->db, sql, -1, q, NULL) != SQLITE_OK)
        return kb_err(kb, what);
    sqlite3_bind_text(*q, 1, fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(*q, 2, coll, -1, SQLITE_STATIC);
    sqlite3_bind_int64(*q, 3, (sqlite3_int64)bytes);
    return AI_OK;
}

/* Run a write statement to completion and release it. */
static ai_status_t step_done(ai_kb *kb, sqlite3_stmt *q, const char *what)
{
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? AI_OK : kb_err(kb, what);
}

/* Binds an arm's algorithm, chunk and channels from parameter `at` on. */
static void bind_arm(sqlite3_stmt *q, int at, const tune_arm_stat *a)
{
    sqlite3_bind_text(q, at, a->algo, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, at + 1, (sqlite3_int64)a->chunk);
    sqlite3_bind_int(q, at + 2, a->channels);
}

/* ------------------------------------------------------------ learner I/O */

ai_status_t kb_load_bucket(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                           tune_arm_stat *arms, int max, int *n, tune_bucket_info *info)
{
    sqlite3_stmt *q;
    const char *cn = ai_coll_name(coll);
    *n = 0;
    memset(info, 0, sizeof *info);
    int empty = 0;
    if (kb->need_setup && pragma_int(kb, "SELECT count(*) = 0 FROM sqlite_master", &empty) && empty)
        return AI_OK; /* created at its first write */
    ai_status_t st = prepare_keyed(kb,
                                   "SELECT algo, chunk, channels, samples, mean_log, var_log FROM"
                                   " arms WHERE fp = ?1 AND coll = ?2 AND bytes = ?3 AND samples > 0",
                                   fp, cn, bytes, "reading arms", &q);
    if (st != AI_OK)
        return st;
    while (*n < max && sqlite3_step(q) == SQLITE_ROW) {
        tune_arm_stat *a = &arms[*n];
        snprintf(a->algo, sizeof a->algo, "%s", (const char *)sqlite3_column_text(q, 0));
        a->chunk = (size_t)sqlite3_column_int64(q, 1);
        a->channels = sqlite3_column_int(q, 2);
        a->n = (long)sqlite3_column_int64(q, 3);
        a->m = sqlite3_column_double(q, 4);
        a->v = sqlite3_column_double(q, 5);
        (*n)++;
    }
    sqlite3_finalize(q);
    st = prepare_keyed(kb,
                       "SELECT explored, explore_s, settled FROM buckets"
                       " WHERE fp = ?1 AND coll = ?2 AND bytes = ?3",
                       fp, cn, bytes, "reading buckets", &q);
    if (st != AI_OK)
        return st;
    if (sqlite3_step(q) == SQLITE_ROW) {
        info->explored = (long)sqlite3_column_int64(q, 0);
        info->explore_s = sqlite3_column_double(q, 1);
        info->settled = sqlite3_column_int(q, 2);
    }
    sqlite3_finalize(q);
    st = prepare_keyed(kb,
                       "SELECT algo, chunk, channels FROM measurements"
                       " WHERE fp = ?1 AND coll = ?2 AND bytes = ?3 AND phase = 'exploit'"
                       " ORDER BY rowid DESC LIMIT 1",
                       fp, cn, bytes, "reading measurements", &q);
    if (st != AI_OK)
        return st;
    if (sqlite3_step(q) == SQLITE_ROW) {
        snprintf(info->algo, sizeof info->algo, "%s", (const char *)sqlite3_column_text(q, 0));
        info->chunk = (size_t)sqlite3_column_int64(q, 1);
        info->channels = sqlite3_column_int(q, 2);
    }
    sqlite3_finalize(q);
    return AI_OK;
}

static ai_status_t put_fingerprint(ai_kb *kb, const char *fp, int nranks, int nhosts,
                                   const char *desc)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(kb->db,
                           "INSERT INTO fingerprints VALUES(?1, ?2, ?3, ?4, ?5, ?5)"
                           " ON CONFLICT(id) DO UPDATE SET last_seen = ?5,"
                           " description = CASE WHEN ?4 = '' THEN description ELSE ?4 END",
                           -1, &q, NULL) != SQLITE_OK)
        return kb_err(kb, "writing fingerprint");
    sqlite3_bind_text(q, 1, fp, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, nranks);
    sqlite3_bind_int(q, 3, nhosts);
    sqlite3_bind_text(q, 4, desc ? desc : "", -1, SQLITE_STATIC);
    sqlite3_bind_double(q, 5, (double)time(NULL));
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? AI_OK : kb_err(kb, "writing fingerprint");
}

static ai_status_t put_arm(ai_kb *kb, const char *fp, const char *coll, size_t bytes,
                           const tune_arm_stat *a)
{
    sqlite3_stmt *q;
    ai_status_t st = prepare_keyed(kb, "INSERT OR REPLACE INTO arms VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                                   fp, coll, bytes, "writing arm", &q);
    if (st != AI_OK)
        return st;
    bind_arm(q, 4, a);
    sqlite3_bind_int64(q, 7, a->n);
    sqlite3_bind_double(q, 8, a->m);
    sqlite3_bind_double(q, 9, a->v);
    return step_done(kb, q, "writing arm");
}

static ai_status_t put_bucket(ai_kb *kb, const char *fp, const char *coll, size_t bytes,
                              const tune_bucket_info *info)
{
    sqlite3_stmt *q;
    ai_status_t st = prepare_keyed(kb, "INSERT OR REPLACE INTO buckets VALUES(?1,?2,?3,?4,?5,?6)",
                                   fp, coll, bytes, "writing bucket", &q);
    if (st != AI_OK)
        return st;
    sqlite3_bind_int64(q, 4, info->explored);
    sqlite3_bind_double(q, 5, info->explore_s);
    sqlite3_bind_int(q, 6, info->settled);
    return step_done(kb, q, "writing bucket");
}

ai_status_t kb_put_measurement(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                               const tune_arm_stat *a, double seconds, const char *phase,
                               double when)
{
    sqlite3_stmt *q;
    ai_status_t st = prepare_keyed(kb, "INSERT INTO measurements VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                                   fp, ai_coll_name(coll), bytes, "writing measurement", &q);
    if (st != AI_OK)
        return st;
    bind_arm(q, 4, a);
    sqlite3_bind_double(q, 7, seconds);
    sqlite3_bind_text(q, 8, phase, -1, SQLITE_STATIC);
    sqlite3_bind_double(q, 9, when);
    return step_done(kb, q, "writing measurement");
}

ai_status_t kb_begin(ai_kb *kb, const char *fp, int nranks, int nhosts, const char *desc)
{
    if (kb->readonly)
        return ai_fail(AI_ERR_IO, "knowledge base %s is read-only (%s)", kb->path,
                       kb_readonly_why(kb));
    ai_status_t st = kb->need_setup ? kb_setup(kb) : AI_OK;
    if (st == AI_OK && kb->need_setup)
        return ai_fail(AI_ERR_IO, "knowledge base %s is locked by another process", kb->path);
    int rc = st == AI_OK ? sqlite3_exec(kb->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) : SQLITE_OK;
    kb->busy = is_busy_rc(rc);
    if (st == AI_OK && rc != SQLITE_OK)
        st = kb_err(kb, kb->busy ? "locked by another process" : "cannot begin a write");
    if (st == AI_OK && (st = put_fingerprint(kb, fp, nranks, nhosts, desc)) != AI_OK)
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

ai_status_t kb_put_bucket(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                          const tune_arm_stat *arms, int n, const tune_bucket_info *info)
{
    const char *cn = ai_coll_name(coll);
    ai_status_t st = AI_OK;
    for (int i = 0; i < n && st == AI_OK; i++)
        if (arms[i].n > 0)
            st = put_arm(kb, fp, cn, bytes, &arms[i]);
    return st == AI_OK ? put_bucket(kb, fp, cn, bytes, info) : st;
}

ai_status_t kb_put_choice(ai_kb *kb, const char *fp, ai_coll coll, size_t bytes,
                          const tune_arm_stat *chosen, const tune_arm_stat *runner,
                          double confidence, const char *reason, double when)
{
    sqlite3_stmt *q;
    ai_status_t st = prepare_keyed(kb, "INSERT INTO choices VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,"
                                       "?10,?11,?12,?13,?14,?15,?16)",
                                   fp, ai_coll_name(coll), bytes, "writing choice", &q);
    if (st != AI_OK)
        return st;
    bind_arm(q, 4, chosen);
    sqlite3_bind_double(q, 7, chosen->m);
    sqlite3_bind_int64(q, 8, chosen->n);
    sqlite3_bind_double(q, 9, confidence);
    static const tune_arm_stat none = {.algo = ""};
    bind_arm(q, 10, runner ? runner : &none);
    if (runner)
        sqlite3_bind_double(q, 13, runner->m);
    else
        sqlite3_bind_null(q, 13);
    sqlite3_bind_int64(q, 14, runner ? runner->n : 0);
    sqlite3_bind_text(q, 15, reason, -1, SQLITE_STATIC);
    sqlite3_bind_double(q, 16, when);
    return step_done(kb, q, "writing choice");
}

ai_status_t ai_kb_log_foreach(ai_kb *kb, const char *fingerprint, ai_kb_choice_fn fn, void *arg)
{
    if (!kb || !fn)
        return ai_fail(AI_ERR_INVALID, "ai_kb_log_foreach: kb or fn is NULL");
    int have = 0;
    if (!pragma_int(kb, "SELECT count(*) FROM sqlite_master WHERE name = 'choices'", &have))
        return kb_err(kb, "reading choices");
    if (!have)
        return AI_OK; /* a KB of schema 1, opened read-only */
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(kb->db,
                           "SELECT c.fp, f.nranks, f.nhosts, c.coll, c.bytes, c.algo, c.chunk,"
                           " c.channels, c.mean_log, c.samples, c.confidence, c.runner_algo,"
                           " c.runner_chunk, c.runner_channels, c.runner_mean_log,"
                           " c.runner_samples, c.reason, c.at"
                           " FROM choices c LEFT JOIN fingerprints f ON f.id = c.fp"
                           " WHERE (?1 IS NULL OR c.fp = ?1) ORDER BY c.at, c.rowid",
                           -1, &q, NULL) != SQLITE_OK)
        return kb_err(kb, "reading choices");
    if (fingerprint)
        sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
        ai_kb_choice ch = {0};
        const unsigned char *t;
        snprintf(ch.fingerprint, sizeof ch.fingerprint, "%s", sqlite3_column_text(q, 0));
        ch.nranks = sqlite3_column_int(q, 1);
        ch.nhosts = sqlite3_column_int(q, 2);
        if (ai_coll_parse((const char *)sqlite3_column_text(q, 3), &ch.coll) != AI_OK)
            continue; /* a collective this build does not know */
        ch.bytes = (size_t)sqlite3_column_int64(q, 4);
        t = sqlite3_column_text(q, 5);
        snprintf(ch.algo, sizeof ch.algo, "%s", t ? (const char *)t : "");
        ch.chunk_bytes = (size_t)sqlite3_column_int64(q, 6);
        ch.channels = sqlite3_column_int(q, 7);
        ch.mean_us = exp(sqlite3_column_double(q, 8)) * 1e6;
        ch.samples = (long)sqlite3_column_int64(q, 9);
        ch.confidence = sqlite3_column_double(q, 10);
        t = sqlite3_column_text(q, 11);
        snprintf(ch.runner_algo, sizeof ch.runner_algo, "%s", t ? (const char *)t : "");
        ch.runner_chunk_bytes = (size_t)sqlite3_column_int64(q, 12);
        ch.runner_channels = sqlite3_column_int(q, 13);
        ch.runner_mean_us = ch.runner_algo[0] ? exp(sqlite3_column_double(q, 14)) * 1e6 : 0;
        ch.runner_samples = (long)sqlite3_column_int64(q, 15);
        t = sqlite3_column_text(q, 16);
        snprintf(ch.reason, sizeof ch.reason, "%s", t ? (const char *)t : "");
        ch.at = sqlite3_column_double(q, 17);
        if (fn(&ch, arg))
            break;
    }
    sqlite3_finalize(q);
    return AI_OK;
}

ai_status_t kb_end(ai_kb *kb, ai_status_t st)
{
    if (st == AI_OK) {
        int rc = sqlite3_exec(kb->db, "COMMIT", NULL, NULL, NULL);
        kb->busy = is_busy_rc(rc);
        if (rc == SQLITE_OK)
            return AI_OK;
        st = kb_err(kb, kb->busy ? "locked by another process" : "cannot commit");
    }
    if (!sqlite3_get_autocommit(kb->db))
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

/* ------------------------------------------------ fingerprints by rates */

ai_status_t kb_note_rates(ai_kb *kb, const char *fp, const char *shape, int nhosts,
                          const double *bps)
{
    ai_status_t st = exec_sql(kb, "BEGIN IMMEDIATE");
    for (int h = 0; st == AI_OK && h < nhosts; h++) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(kb->db, "INSERT OR IGNORE INTO fingerprint_rates VALUES(?1,?2,?3,?4)",
                               -1, &q, NULL) != SQLITE_OK) {
            st = kb_err(kb, "writing rates");
            break;
        }
        sqlite3_bind_text(q, 1, fp, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, shape, -1, SQLITE_STATIC);
        sqlite3_bind_int(q, 3, h);
        sqlite3_bind_double(q, 4, bps[h]);
        st = step_done(kb, q, "writing rates");
    }
    if (st != AI_OK) {
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    return exec_sql(kb, "COMMIT");
}

ai_status_t kb_match_rates(ai_kb *kb, const char *shape, int nhosts, const double *bps,
                           double tol, char out[17])
{
    sqlite3_stmt *q;
    out[0] = '\0';
    if (sqlite3_prepare_v2(kb->db,
                           "SELECT fp, host, bps FROM fingerprint_rates WHERE shape = ?1"
                           " ORDER BY fp, host",
                           -1, &q, NULL) != SQLITE_OK)
        return kb_err(kb, "reading rates");
    sqlite3_bind_text(q, 1, shape, -1, SQLITE_STATIC);
    char cur[17] = "";
    double worst = 0, best = tol;
    int seen = 0;
    for (int rc = sqlite3_step(q);; rc = sqlite3_step(q)) {
        const char *fp = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
        if (cur[0] && (!fp || strcmp(fp, cur))) { /* one fingerprint complete */
            if (seen == nhosts && worst <= best) {
                best = worst;
                memcpy(out, cur, sizeof cur);
            }
            cur[0] = '\0';
        }
        if (!fp)
            break;
        if (!cur[0]) {
            snprintf(cur, sizeof cur, "%s", fp);
            worst = 0;
            seen = 0;
        }
        int h = sqlite3_column_int(q, 1);
        double b = sqlite3_column_double(q, 2);
        if (h >= 0 && h < nhosts && b > 0 && bps[h] > 0) {
            worst = fmax(worst, fabs(log2(bps[h] / b)));
            seen++;
        }
    }
    sqlite3_finalize(q);
    return AI_OK;
}

/* ---------------------------------------------------------- posteriors */

double tune_arm_mean_us(const tune_arm_stat *a)
{
    return exp(a->m) * 1e6;
}

double tune_arm_std_us(const tune_arm_stat *a)
{
    return exp(a->m) * sqrt(a->v) * 1e6;
}

/* -------------------------------------------------------------- reading */

typedef struct {
    ai_kb_arm *a;
    tune_arm_stat *s;
    int n, cap;
} arm_buf;

static int flush_bucket(arm_buf *b, ai_kb_visit_fn fn, void *arg)
{
    int best = -1;
    for (int i = 0; i < b->n; i++)
        if (b->s[i].n > 0 && (best < 0 || b->s[i].m < b->s[best].m))
            best = i;
    int stop = 0;
    for (int i = 0; i < b->n && !stop; i++) {
        b->a[i].best = i == best;
        b->a[i].confidence = i == best ? tune_confidence(b->s, b->n, best) : 0;
        stop = fn(&b->a[i], arg);
    }
    b->n = 0;
    return stop;
}

ai_status_t ai_kb_foreach(ai_kb *kb, const char *fingerprint, ai_kb_visit_fn fn, void *arg)
{
    if (!kb || !fn)
        return ai_fail(AI_ERR_INVALID, "ai_kb_foreach: kb or fn is NULL");
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(kb->db,
                           "SELECT a.fp, f.nranks, f.nhosts, a.coll, a.bytes, a.algo, a.chunk,"
                           " a.channels, a.samples, a.mean_log, a.var_log, f.description"
                           " FROM arms a JOIN fingerprints f ON f.id = a.fp"
                           " WHERE (?1 IS NULL OR a.fp = ?1) AND a.samples > 0"
                           " ORDER BY a.fp, a.coll, a.bytes, a.mean_log",
                           -1, &q, NULL) != SQLITE_OK)
        return kb_err(kb, "reading arms");
    if (fingerprint)
        sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_STATIC);
    arm_buf b = {0};
    ai_status_t st = AI_OK;
    int rc, stop = 0;
    while (!stop && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        ai_kb_arm a = {0};
        snprintf(a.fingerprint, sizeof a.fingerprint, "%s", (const char *)sqlite3_column_text(q, 0));
        a.nranks = sqlite3_column_int(q, 1);
        a.nhosts = sqlite3_column_int(q, 2);
        const unsigned char *desc = sqlite3_column_text(q, 11);
        snprintf(a.description, sizeof a.description, "%s", desc ? (const char *)desc : "");
        if (ai_coll_parse((const char *)sqlite3_column_text(q, 3), &a.coll) != AI_OK)
            continue; /* a collective this build does not know */
        a.bytes = (size_t)sqlite3_column_int64(q, 4);
        snprintf(a.algo, sizeof a.algo, "%s", (const char *)sqlite3_column_text(q, 5));
        a.chunk_bytes = (size_t)sqlite3_column_int64(q, 6);
        a.channels = sqlite3_column_int(q, 7);
        tune_arm_stat s = {.n = (long)sqlite3_column_int64(q, 8),
                           .m = sqlite3_column_double(q, 9),
                           .v = sqlite3_column_double(q, 10)};
        a.samples = s.n;
        a.mean_us = tune_arm_mean_us(&s);
        a.std_us = tune_arm_std_us(&s);
        if (b.n > 0 && (strcmp(b.a[0].fingerprint, a.fingerprint) || b.a[0].coll != a.coll ||
                        b.a[0].bytes != a.bytes))
            stop = flush_bucket(&b, fn, arg);
        if (stop)
            break;
        if (b.n == b.cap) {
            int cap = b.cap ? 2 * b.cap : 16;
            ai_kb_arm *na = realloc(b.a, (size_t)cap * sizeof *na);
            if (na)
                b.a = na;
            tune_arm_stat *ns = na ? realloc(b.s, (size_t)cap * sizeof *ns) : NULL;
            if (!ns) {
                st = ai_fail(AI_ERR_NOMEM, "knowledge base walk");
                break;
            }
            b.s = ns;
            b.cap = cap;
        }
        b.a[b.n] = a;
        b.s[b.n] = s;
        b.n++;
    }
    if (st == AI_OK && !stop && b.n > 0)
        flush_bucket(&b, fn, arg);
    sqlite3_finalize(q);
    free(b.a);
    free(b.s);
    return st;
}

/* ------------------------------------------------------- JSON exchange */

typedef struct {
    json_t *fps;     /* array of fingerprint objects */
    json_t *cur;     /* current fingerprint's arms array */
    char cur_id[17];
    ai_status_t st;
} export_ctx;

static int export_arm(const ai_kb_arm *a, void *arg)
{
    export_ctx *x = arg;
    if (!x->cur || strcmp(x->cur_id, a->fingerprint)) {
        json_t *f = json_pack("{s:s, s:i, s:i, s:s, s:[]}", "id", a->fingerprint, "nranks",
                              a->nranks, "nhosts", a->nhosts, "description", a->description,
                              "arms");
        if (!f || json_array_append_new(x->fps, f) != 0) {
            x->st = ai_fail(AI_ERR_NOMEM, "knowledge base export");
            return 1;
        }
        x->cur = json_object_get(f, "arms");
        snprintf(x->cur_id, sizeof x->cur_id, "%s", a->fingerprint);
    }
    json_t *o = json_pack("{s:s, s:I, s:s, s:I, s:i, s:I, s:f, s:f}", "coll", ai_coll_name(a->coll),
                          "bytes", (json_int_t)a->bytes, "algo", a->algo, "chunk_bytes",
                          (json_int_t)a->chunk_bytes, "channels", a->channels, "samples",
                          (json_int_t)a->samples, "mean_us", a->mean_us, "std_us", a->std_us);
    if (!o || json_array_append_new(x->cur, o) != 0) {
        x->st = ai_fail(AI_ERR_NOMEM, "knowledge base export");
        return 1;
    }
    return 0;
}

ai_status_t ai_kb_export_json(ai_kb *kb, const char *fingerprint, const char *path)
{
    if (!kb || !path)
        return ai_fail(AI_ERR_INVALID, "ai_kb_export_json: kb or path is NULL");
    export_ctx x = {.fps = json_array()};
    json_t *root = json_pack("{s:s, s:i, s:o}", "format", "autoinfra-kb", "version", 1,
                             "fingerprints", x.fps);
    if (!root)
        return ai_fail(AI_ERR_NOMEM, "knowledge base export");
    ai_status_t st = ai_kb_foreach(kb, fingerprint, export_arm, &x);
    if (st == AI_OK)
        st = x.st;
    if (st == AI_OK && json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
        st = ai_fail(AI_ERR_IO, "cannot write %s", path);
    json_decref(root);
    return st;
}

/* Read one arm object of fingerprint fi, arm ai. */
static ai_status_t import_arm(const char *path, size_t fi, size_t ai, json_t *o, tune_arm_stat *s,
                              ai_coll *coll, size_t *bytes)
{
    const char *cn = NULL, *algo = NULL;
    json_int_t b = 0, chunk = 0, ch = 0, n = 0;
    double mean = 0, sd = 0;
    json_error_t e;
    if (json_unpack_ex(o, &e, 0, "{s:s, s:I, s:s, s?I, s?I, s:I, s:F, s?F}", "coll", &cn, "bytes",
                       &b, "algo", &algo, "chunk_bytes", &chunk, "channels", &ch, "samples", &n,
                       "mean_us", &mean, "std_us", &sd) != 0)
        return ai_fail(AI_ERR_PARSE, "%s: fingerprints[%zu].arms[%zu]: %s", path, fi, ai, e.text);
    if (ai_coll_parse(cn, coll) != AI_OK)
        return ai_fail(AI_ERR_INVALID, "%s: fingerprints[%zu].arms[%zu].coll: unknown '%s'", path,
                       fi, ai, cn);
    if (b < 1 || (b & (b - 1)) || chunk < 0 || ch < 0 || n < 0 || !(mean > 0) || sd < 0 ||
        strlen(algo) >= TUNE_ALGO_MAX)
        return ai_fail(AI_ERR_INVALID,
                       "%s: fingerprints[%zu].arms[%zu]: want bytes a power of two, chunk_bytes,"
                       " channels, samples >= 0, mean_us > 0, std_us >= 0, algo < %d chars",
                       path, fi, ai, TUNE_ALGO_MAX);
    memset(s, 0, sizeof *s);
    snprintf(s->algo, sizeof s->algo, "%s", algo);
    s->chunk = (size_t)chunk;
    s->channels = (int)ch;
    s->n = (long)n;
    s->m = log(mean * 1e-6);
    s->v = (sd / mean) * (sd / mean);
    *bytes = (size_t)b;
    return AI_OK;
}

ai_status_t ai_kb_import_json(ai_kb *kb, const char *path)
{
    if (!kb || !path)
        return ai_fail(AI_ERR_INVALID, "ai_kb_import_json: kb or path is NULL");
    json_error_t e;
    json_t *root = json_load_file(path, 0, &e);
    if (!root)
        return ai_fail(AI_ERR_PARSE, "%s:%d:%d: %s", path, e.line, e.column, e.text);
    ai_status_t st = AI_OK;
    const char *format = NULL;
    json_int_t version = 0;
    json_t *fps = NULL;
    if (json_unpack_ex(root, &e, 0, "{s:s, s:I, s:o}", "format", &format, "version", &version,
                       "fingerprints", &fps) != 0 ||
        strcmp(format, "autoinfra-kb") || version != 1 || !json_is_array(fps)) {
        json_decref(root);
        return ai_fail(AI_ERR_PARSE,
                       "%s: not an autoinfra knowledge base export (want format \"autoinfra-kb\","
                       " version 1, a fingerprints array)",
                       path);
    }
    if (kb->readonly)
        st = ai_fail(AI_ERR_IO, "knowledge base %s is read-only (%s)", kb->path,
                     kb_readonly_why(kb));
    if (st != AI_OK || (st = exec_sql(kb, "BEGIN IMMEDIATE")) != AI_OK) {
        json_decref(root);
        return st;
    }
    size_t fi, ai;
    json_t *f, *o;
    json_array_foreach(fps, fi, f)
    {
        const char *id = NULL, *desc = "";
        json_int_t nr = 0, nh = 0;
        json_t *arms = NULL;
        if (json_unpack_ex(f, &e, 0, "{s:s, s:I, s:I, s?s, s:o}", "id", &id, "nranks", &nr,
                           "nhosts", &nh, "description", &desc, "arms", &arms) != 0 ||
            !json_is_array(arms) || strlen(id) != 16 || nr < 1 || nh < 1) {
            st = ai_fail(AI_ERR_PARSE,
                         "%s: fingerprints[%zu]: want id (16 hex digits), nranks, nhosts >= 1 and"
                         " an arms array",
                         path, fi);
            break;
        }
        if ((st = put_fingerprint(kb, id, (int)nr, (int)nh, desc)) != AI_OK)
            break;
        json_array_foreach(arms, ai, o)
        {
            tune_arm_stat s;
            ai_coll coll = AI_ALLREDUCE;
            size_t bytes = 0;
            if ((st = import_arm(path, fi, ai, o, &s, &coll, &bytes)) != AI_OK ||
                (st = put_arm(kb, id, ai_coll_name(coll), bytes, &s)) != AI_OK)
                break;
        }
        if (st != AI_OK)
            break;
    }
    json_decref(root);
    if (st != AI_OK) {
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    return exec_sql(kb, "COMMIT");
}

/* ---------------------------------------------------- compute profiles */

/* The optional terms of a profile: their JSON key (and profile_terms
 * name) and place in ai_kb_profile. 0 in the struct: not measured. */
static const struct {
    const char *name;
    size_t off;
} PROFILE_TERMS[] = {
    {"allreduce_beside_s", offsetof(ai_kb_profile, allreduce_beside_s)},
    {"step_overhead_s", offsetof(ai_kb_profile, step_overhead_s)},
};
#define NTERMS (sizeof PROFILE_TERMS / sizeof PROFILE_TERMS[0])

static double *profile_term(ai_kb_profile *p, size_t i)
{
    return (double *)((char *)p + PROFILE_TERMS[i].off);
}

/* A profile's own figures are sane (the JSON import names the path; this
 * is the C callers' check). */
static ai_status_t profile_check(const ai_kb_profile *p)
{
    size_t n = strlen(p->fingerprint);
    int hex = n == 16;
    for (size_t i = 0; hex && i < n; i++)
        hex = strchr("0123456789abcdefABCDEF", p->fingerprint[i]) != NULL;
    if (!hex)
        return ai_fail(AI_ERR_INVALID, "profile: fingerprint '%s' is not 16 hex digits",
                       p->fingerprint);
    if (!p->preset[0] || p->rank < 0 || p->layers < 1 || p->dim < 1 || p->heads < 1 ||
        p->ctx < 1 || p->params < 1 || p->grad_bytes < 1)
        return ai_fail(AI_ERR_INVALID, "profile of rank %d: want a preset name, rank >= 0 and"
                                       " layers, dim, heads, ctx, params, grad_bytes >= 1",
                       p->rank);
    if (!(isfinite(p->gemm_gflops) && p->gemm_gflops > 0) ||
        !(isfinite(p->attention_gflops) && p->attention_gflops > 0) ||
        !(isfinite(p->optimizer_s) && p->optimizer_s >= 0))
        return ai_fail(AI_ERR_INVALID, "profile of rank %d: want gemm_gflops and"
                                       " attention_gflops > 0, optimizer_s >= 0", p->rank);
    for (size_t i = 0; i < NTERMS; i++) {
        double v = *profile_term((ai_kb_profile *)p, i);
        if (!(isfinite(v) && v >= 0))
            return ai_fail(AI_ERR_INVALID, "profile of rank %d: %s: want a number >= 0 (0: not"
                                           " measured)", p->rank, PROFILE_TERMS[i].name);
    }
    if (p->npoints < 1 || p->npoints > AI_PROFILE_POINTS)
        return ai_fail(AI_ERR_INVALID, "profile of rank %d: %d step points, want 1..%d", p->rank,
                       p->npoints, AI_PROFILE_POINTS);
    for (int i = 0; i < p->npoints; i++) {
        if (p->point[i].batch < 1 || !(isfinite(p->point[i].fwd_bwd_s) &&
                                       p->point[i].fwd_bwd_s > 0))
            return ai_fail(AI_ERR_INVALID, "profile of rank %d: step[%d]: want batch >= 1 and"
                                           " fwd_bwd_s > 0", p->rank, i);
        for (int j = 0; j < i; j++)
            if (p->point[j].batch == p->point[i].batch)
                return ai_fail(AI_ERR_INVALID, "profile of rank %d: step[%d]: batch %d measured"
                                               " twice", p->rank, i, p->point[i].batch);
    }
    return AI_OK;
}

/* Prepare sql with ?1..?3 bound to p's fingerprint, preset and rank. */
static ai_status_t profile_stmt(ai_kb *kb, const char *sql, const ai_kb_profile *p,
                                const char *what, sqlite3_stmt **q)
{
    if (sqlite3_prepare_v2(kb->db, sql, -1, q, NULL) != SQLITE_OK)
        return kb_err(kb, what);
    sqlite3_bind_text(*q, 1, p->fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(*q, 2, p->preset, -1, SQLITE_STATIC);
    sqlite3_bind_int(*q, 3, p->rank);
    return AI_OK;
}

/* Replace one rank's profile, inside the caller's transaction. */
static ai_status_t profile_write(ai_kb *kb, const ai_kb_profile *p, double when)
{
    sqlite3_stmt *q = NULL;
    static const char *const del[] = {
        "DELETE FROM profile_steps WHERE fp = ?1 AND preset = ?2 AND rank = ?3",
        "DELETE FROM profile_terms WHERE fp = ?1 AND preset = ?2 AND rank = ?3"};
    ai_status_t st = AI_OK;
    for (int i = 0; i < 2 && st == AI_OK; i++)
        if ((st = profile_stmt(kb, del[i], p, "writing profile", &q)) == AI_OK)
            st = step_done(kb, q, "writing profile");
    for (size_t i = 0; i < NTERMS && st == AI_OK; i++) {
        double v = *profile_term((ai_kb_profile *)p, i);
        if (v <= 0)
            continue;
        if ((st = profile_stmt(kb, "INSERT INTO profile_terms VALUES(?1, ?2, ?3, ?4, ?5)", p,
                               "writing profile", &q)) != AI_OK)
            return st;
        sqlite3_bind_text(q, 4, PROFILE_TERMS[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_double(q, 5, v);
        st = step_done(kb, q, "writing profile");
    }
    if (st != AI_OK)
        return st;
    if ((st = profile_stmt(kb, "INSERT OR REPLACE INTO profiles VALUES(?1, ?2, ?3, ?4, ?5, ?6,"
                               " ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)", p, "writing profile",
                           &q)) != AI_OK)
        return st;
    sqlite3_bind_text(q, 4, p->host, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 5, p->layers);
    sqlite3_bind_int(q, 6, p->dim);
    sqlite3_bind_int(q, 7, p->heads);
    sqlite3_bind_int(q, 8, p->ctx);
    sqlite3_bind_int64(q, 9, p->params);
    sqlite3_bind_int64(q, 10, p->grad_bytes);
    sqlite3_bind_double(q, 11, p->gemm_gflops);
    sqlite3_bind_double(q, 12, p->attention_gflops);
    sqlite3_bind_double(q, 13, p->optimizer_s);
    sqlite3_bind_double(q, 14, when);
    if ((st = step_done(kb, q, "writing profile")) != AI_OK)
        return st;
    for (int i = 0; i < p->npoints && st == AI_OK; i++) {
        if ((st = profile_stmt(kb, "INSERT INTO profile_steps VALUES(?1, ?2, ?3, ?4, ?5)", p,
                               "writing profile", &q)) != AI_OK)
            return st;
        sqlite3_bind_int(q, 4, p->point[i].batch);
        sqlite3_bind_double(q, 5, p->point[i].fwd_bwd_s);
        st = step_done(kb, q, "writing profile");
    }
    return st;
}

/* Write n profiles in one transaction. */
static ai_status_t profiles_write(ai_kb *kb, const ai_kb_profile *p, int n)
{
    if (kb->readonly)
        return ai_fail(AI_ERR_IO, "knowledge base %s is read-only (%s)", kb->path,
                       kb_readonly_why(kb));
    ai_status_t st = kb->need_setup ? kb_setup(kb) : AI_OK;
    if (st == AI_OK && kb->need_setup)
        return ai_fail(AI_ERR_IO, "knowledge base %s is locked by another process", kb->path);
    for (int i = 0; i < n && st == AI_OK; i++)
        st = profile_check(&p[i]);
    if (st != AI_OK || (st = exec_sql(kb, "BEGIN IMMEDIATE")) != AI_OK)
        return st;
    double when = (double)time(NULL);
    for (int i = 0; i < n && st == AI_OK; i++)
        st = profile_write(kb, &p[i], when);
    if (st != AI_OK) {
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    return exec_sql(kb, "COMMIT");
}

ai_status_t ai_kb_profile_put(ai_kb *kb, const ai_kb_profile *profile)
{
    if (!kb || !profile)
        return ai_fail(AI_ERR_INVALID, "ai_kb_profile_put: kb or profile is NULL");
    return profiles_write(kb, profile, 1);
}

/* The step points of one profile, batch ascending. */
static ai_status_t profile_read_points(ai_kb *kb, ai_kb_profile *p)
{
    sqlite3_stmt *q = NULL;
    ai_status_t st = profile_stmt(kb, "SELECT batch, fwd_bwd_s FROM profile_steps WHERE fp = ?1"
                                      " AND preset = ?2 AND rank = ?3 ORDER BY batch", p,
                                  "reading profile", &q);
    if (st != AI_OK)
        return st;
    p->npoints = 0;
    while (p->npoints < AI_PROFILE_POINTS && sqlite3_step(q) == SQLITE_ROW) {
        p->point[p->npoints].batch = sqlite3_column_int(q, 0);
        p->point[p->npoints].fwd_bwd_s = sqlite3_column_double(q, 1);
        p->npoints++;
    }
    sqlite3_finalize(q);
    int have = 0; /* a KB opened read-only before the terms table */
    if (!pragma_int(kb, "SELECT count(*) FROM sqlite_master WHERE name = 'profile_terms'",
                    &have))
        return kb_err(kb, "reading profile");
    if (!have)
        return AI_OK;
    if ((st = profile_stmt(kb, "SELECT name, value FROM profile_terms WHERE fp = ?1"
                               " AND preset = ?2 AND rank = ?3", p, "reading profile", &q)) !=
        AI_OK)
        return st;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        for (size_t i = 0; name && i < NTERMS; i++) /* unknown names: a later build's */
            if (!strcmp(name, PROFILE_TERMS[i].name))
                *profile_term(p, i) = sqlite3_column_double(q, 1);
    }
    sqlite3_finalize(q);
    return AI_OK;
}

ai_status_t ai_kb_profile_foreach(ai_kb *kb, const char *fingerprint, ai_kb_profile_fn fn,
                                  void *arg)
{
    if (!kb || !fn)
        return ai_fail(AI_ERR_INVALID, "ai_kb_profile_foreach: kb or fn is NULL");
    int have = 0;
    if (!pragma_int(kb, "SELECT count(*) FROM sqlite_master WHERE name = 'profiles'", &have))
        return kb_err(kb, "reading profiles");
    if (!have)
        return AI_OK; /* a KB made before the profile tables, opened read-only */
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(kb->db,
                           "SELECT fp, preset, rank, host, layers, dim, heads, ctx, params,"
                           " grad_bytes, gemm_gflops, attention_gflops, optimizer_s, at"
                           " FROM profiles WHERE (?1 IS NULL OR fp = ?1) ORDER BY fp, preset, rank",
                           -1, &q, NULL) != SQLITE_OK)
        return kb_err(kb, "reading profiles");
    if (fingerprint)
        sqlite3_bind_text(q, 1, fingerprint, -1, SQLITE_STATIC);
    ai_status_t st = AI_OK;
    while (st == AI_OK && sqlite3_step(q) == SQLITE_ROW) {
        ai_kb_profile p = {0};
        const unsigned char *t;
        snprintf(p.fingerprint, sizeof p.fingerprint, "%s", sqlite3_column_text(q, 0));
        snprintf(p.preset, sizeof p.preset, "%s", sqlite3_column_text(q, 1));
        p.rank = sqlite3_column_int(q, 2);
        t = sqlite3_column_text(q, 3);
        snprintf(p.host, sizeof p.host, "%s", t ? (const char *)t : "");
        p.layers = sqlite3_column_int(q, 4);
        p.dim = sqlite3_column_int(q, 5);
        p.heads = sqlite3_column_int(q, 6);
        p.ctx = sqlite3_column_int(q, 7);
        p.params = sqlite3_column_int64(q, 8);
        p.grad_bytes = sqlite3_column_int64(q, 9);
        p.gemm_gflops = sqlite3_column_double(q, 10);
        p.attention_gflops = sqlite3_column_double(q, 11);
        p.optimizer_s = sqlite3_column_double(q, 12);
        p.measured_at = sqlite3_column_double(q, 13);
        if ((st = profile_read_points(kb, &p)) == AI_OK && fn(&p, arg))
            break;
    }
    sqlite3_finalize(q);
    return st;
}

/* Figures of the profile JSON: every key known, numbers in range; errors
 * name the file and the JSON path. */
static ai_status_t profile_json_number(const char *path, const char *where, json_t *v, double lo,
                                       int lo_open, double *out)
{
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(x) || x < lo || (lo_open && x == lo))
        return ai_fail(AI_ERR_INVALID, "%s: %s: want a number %s %g", path, where,
                       lo_open ? ">" : ">=", lo);
    *out = x;
    return AI_OK;
}

static ai_status_t profile_json_int(const char *path, const char *where, json_t *v, long long lo,
                                    long long hi, long long *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return ai_fail(AI_ERR_INVALID, "%s: %s: want an integer in %lld..%lld", path, where, lo,
                       hi);
    *out = json_integer_value(v);
    return AI_OK;
}

/* Every key of object o is one of the NULL-terminated list known, all
 * present, or an optional term of a rank (PROFILE_TERMS, with terms). */
static ai_status_t profile_json_keys(const char *path, const char *where, json_t *o,
                                     const char *const *known, int terms)
{
    if (!json_is_object(o))
        return ai_fail(AI_ERR_INVALID, "%s: %s: want an object", path, where);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = !strcmp(key, known[i]);
        for (size_t i = 0; terms && i < NTERMS && !ok; i++)
            ok = !strcmp(key, PROFILE_TERMS[i].name);
        if (!ok)
            return ai_fail(AI_ERR_INVALID, "%s: %s%s%s: unknown key", path, where,
                           *where ? "." : "", key);
    }
    for (int i = 0; known[i]; i++)
        if (!json_object_get(o, known[i]))
            return ai_fail(AI_ERR_INVALID, "%s: %s%s%s: missing", path, where, *where ? "." : "",
                           known[i]);
    return AI_OK;
}

static ai_status_t profile_json_rank(const char *path, json_t *r, size_t ri, size_t nranks,
                                     ai_kb_profile *p)
{
    static const char *const keys[] = {"rank", "host", "gemm_gflops", "attention_gflops",
                                       "optimizer_s", "step", NULL};
    char w[96];
    long long v = 0;
    snprintf(w, sizeof w, "ranks[%zu]", ri);
    ai_status_t st = profile_json_keys(path, w, r, keys, 1);
    json_t *host = json_object_get(r, "host"), *steps = json_object_get(r, "step");
    if (st != AI_OK)
        return st;
    snprintf(w, sizeof w, "ranks[%zu].rank", ri);
    if ((st = profile_json_int(path, w, json_object_get(r, "rank"), 0, (long long)nranks - 1,
                               &v)) != AI_OK)
        return st;
    p->rank = (int)v;
    if (!json_is_string(host) || strlen(json_string_value(host)) >= sizeof p->host)
        return ai_fail(AI_ERR_INVALID, "%s: ranks[%zu].host: want a string of under %zu chars",
                       path, ri, sizeof p->host);
    snprintf(p->host, sizeof p->host, "%s", json_string_value(host));
    snprintf(w, sizeof w, "ranks[%zu].gemm_gflops", ri);
    if ((st = profile_json_number(path, w, json_object_get(r, "gemm_gflops"), 0, 1,
                                  &p->gemm_gflops)) != AI_OK)
        return st;
    snprintf(w, sizeof w, "ranks[%zu].attention_gflops", ri);
    if ((st = profile_json_number(path, w, json_object_get(r, "attention_gflops"), 0, 1,
                                  &p->attention_gflops)) != AI_OK)
        return st;
    snprintf(w, sizeof w, "ranks[%zu].optimizer_s", ri);
    if ((st = profile_json_number(path, w, json_object_get(r, "optimizer_s"), 0, 0,
                                  &p->optimizer_s)) != AI_OK)
        return st;
    for (size_t i = 0; i < NTERMS; i++) {
        json_t *t = json_object_get(r, PROFILE_TERMS[i].name);
        snprintf(w, sizeof w, "ranks[%zu].%s", ri, PROFILE_TERMS[i].name);
        if (t && (st = profile_json_number(path, w, t, 0, 0, profile_term(p, i))) != AI_OK)
            return st;
    }
    if (!json_is_array(steps) || json_array_size(steps) < 1 ||
        json_array_size(steps) > AI_PROFILE_POINTS)
        return ai_fail(AI_ERR_INVALID, "%s: ranks[%zu].step: want an array of 1..%d points", path,
                       ri, AI_PROFILE_POINTS);
    static const char *const pkeys[] = {"batch", "fwd_bwd_s", NULL};
    size_t si;
    json_t *s;
    json_array_foreach(steps, si, s)
    {
        snprintf(w, sizeof w, "ranks[%zu].step[%zu]", ri, si);
        if ((st = profile_json_keys(path, w, s, pkeys, 0)) != AI_OK)
            return st;
        snprintf(w, sizeof w, "ranks[%zu].step[%zu].batch", ri, si);
        if ((st = profile_json_int(path, w, json_object_get(s, "batch"), 1, 1 << 20, &v)) != AI_OK)
            return st;
        p->point[si].batch = (int)v;
        for (size_t j = 0; j < si; j++)
            if (p->point[j].batch == (int)v)
                return ai_fail(AI_ERR_INVALID, "%s: %s: batch %lld already measured in"
                                               " ranks[%zu].step[%zu]", path, w, v, ri, j);
        snprintf(w, sizeof w, "ranks[%zu].step[%zu].fwd_bwd_s", ri, si);
        if ((st = profile_json_number(path, w, json_object_get(s, "fwd_bwd_s"), 0, 1,
                                      &p->point[si].fwd_bwd_s)) != AI_OK)
            return st;
    }
    p->npoints = (int)json_array_size(steps);
    return AI_OK;
}

ai_status_t ai_kb_profile_import(ai_kb *kb, const char *path, int *nranks)
{
    if (!kb || !path)
        return ai_fail(AI_ERR_INVALID, "ai_kb_profile_import: kb or path is NULL");
    json_error_t e;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return ai_fail(AI_ERR_PARSE, "%s:%d:%d: %s", path, e.line, e.column, e.text);
    static const char *const keys[] = {"kind", "version", "fingerprint", "model", "ranks", NULL};
    static const char *const mkeys[] = {"preset", "layers", "dim", "heads", "ctx", "params",
                                        "grad_bytes", NULL};
    ai_kb_profile *ps = NULL, base = {0};
    json_t *kind = json_object_get(root, "kind"), *fp = json_object_get(root, "fingerprint"),
           *model = json_object_get(root, "model"), *ranks = json_object_get(root, "ranks");
    ai_status_t st = profile_json_keys(path, "", root, keys, 0);
    long long v = 0;
    if (st != AI_OK)
        goto out;
    if (!json_is_string(kind) || strcmp(json_string_value(kind), "compute-profile")) {
        st = ai_fail(AI_ERR_INVALID, "%s: kind: want \"compute-profile\"", path);
        goto out;
    }
    if (!json_is_integer(json_object_get(root, "version")) ||
        json_integer_value(json_object_get(root, "version")) != 1) {
        st = ai_fail(AI_ERR_UNSUPPORTED, "%s: version: this build reads version 1", path);
        goto out;
    }
    size_t n = json_is_string(fp) ? strlen(json_string_value(fp)) : 0;
    int hex = n == 16;
    for (size_t i = 0; hex && i < n; i++)
        hex = strchr("0123456789abcdefABCDEF", json_string_value(fp)[i]) != NULL;
    if (!hex) {
        st = ai_fail(AI_ERR_INVALID, "%s: fingerprint: want the communicator's fingerprint,"
                                     " 16 hex digits", path);
        goto out;
    }
    snprintf(base.fingerprint, sizeof base.fingerprint, "%s", json_string_value(fp));
    if ((st = profile_json_keys(path, "model", model, mkeys, 0)) != AI_OK)
        goto out;
    json_t *preset = json_object_get(model, "preset");
    if (!json_is_string(preset) || !*json_string_value(preset) ||
        strlen(json_string_value(preset)) >= sizeof base.preset) {
        st = ai_fail(AI_ERR_INVALID, "%s: model.preset: want a name of 1..%zu chars", path,
                     sizeof base.preset - 1);
        goto out;
    }
    snprintf(base.preset, sizeof base.preset, "%s", json_string_value(preset));
    static const char *const dims[] = {"layers", "dim", "heads", "ctx"};
    int *dimv[] = {&base.layers, &base.dim, &base.heads, &base.ctx};
    char w[64];
    for (int i = 0; i < 4; i++) {
        snprintf(w, sizeof w, "model.%s", dims[i]);
        if ((st = profile_json_int(path, w, json_object_get(model, dims[i]), 1, 1 << 24, &v)) !=
            AI_OK)
            goto out;
        *dimv[i] = (int)v;
    }
    if ((st = profile_json_int(path, "model.params", json_object_get(model, "params"), 1,
                               (long long)1 << 50, &base.params)) != AI_OK ||
        (st = profile_json_int(path, "model.grad_bytes", json_object_get(model, "grad_bytes"), 1,
                               (long long)1 << 52, &base.grad_bytes)) != AI_OK)
        goto out;
    if (!json_is_array(ranks) || json_array_size(ranks) < 1 || json_array_size(ranks) > 4096) {
        st = ai_fail(AI_ERR_INVALID, "%s: ranks: want an array of 1..4096 ranks", path);
        goto out;
    }
    size_t nr = json_array_size(ranks), ri;
    json_t *r;
    if (!(ps = calloc(nr, sizeof *ps))) {
        st = ai_fail(AI_ERR_NOMEM, "profile import");
        goto out;
    }
    json_array_foreach(ranks, ri, r)
    {
        ps[ri] = base;
        if ((st = profile_json_rank(path, r, ri, nr, &ps[ri])) != AI_OK)
            goto out;
        for (size_t j = 0; j < ri; j++)
            if (ps[j].rank == ps[ri].rank) {
                st = ai_fail(AI_ERR_INVALID, "%s: ranks[%zu].rank: rank %d already in ranks[%zu]",
                             path, ri, ps[ri].rank, j);
                goto out;
            }
    }
    if ((st = profiles_write(kb, ps, (int)nr)) == AI_OK && nranks)
        *nranks = (int)nr;
out:
    free(ps);
    json_decref(root);
    return st;
}
