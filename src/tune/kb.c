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
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_SCHEMA_VERSION 2
#define KB_SCHEMA_VERSION_S "2"
#define KB_APP_ID 0x41494b42 /* "AIKB" */
#define KB_BUSY_MS 10000

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

ai_status_t kb_err(const ai_kb *kb, const char *what)
{
    return util_fail(AI_ERR_IO, "knowledge base %s: %s: %s", kb->path, what, sqlite3_errmsg(kb->db));
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
        return util_fail(AI_ERR_INVALID, "no knowledge base path: set AUTOINFRA_KB (HOME is unset)");
    if (w < 0 || (size_t)w >= len)
        return util_fail(AI_ERR_INVALID, "knowledge base path is too long");
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
            return util_fail(AI_ERR_IO, "knowledge base: cannot create directory %s: %s", dir,
                             strerror(errno));
        *p = '/';
    }
    return AI_OK;
}

ai_status_t kb_exec(ai_kb *kb, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(kb->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        ai_status_t st = util_fail(AI_ERR_IO, "knowledge base %s: %s", kb->path,
                                   msg ? msg : sqlite3_errmsg(kb->db));
        sqlite3_free(msg);
        return st;
    }
    return AI_OK;
}

/* A lock held by another connection. */
int kb_is_busy_rc(int rc)
{
    rc &= 0xff;
    return rc == SQLITE_BUSY || rc == SQLITE_LOCKED;
}

/* Create the schema, stamp the file as ours and switch it to WAL; all
 * idempotent. A lock held elsewhere leaves it for the next write. */
ai_status_t kb_setup(ai_kb *kb)
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
    kb->busy = kb_is_busy_rc(rc);
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

int kb_pragma_int(ai_kb *kb, const char *sql, int *out)
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
    return util_fail(AI_ERR_PROTO,
                     "knowledge base %s has schema version %d, newer than this build's %d: "
                     "refusing to read or change it (use a newer autoinfra, or another --kb)",
                     kb->path, ver, KB_SCHEMA_VERSION);
}

/* Is the open database ours (see the top)? *empty: no objects yet. */
static ai_status_t kb_check_owner(ai_kb *kb, int *empty)
{
    int app = 0, ver = 0, nobj = 0;
    if (!kb_pragma_int(kb, "PRAGMA application_id", &app) ||
        !kb_pragma_int(kb, "PRAGMA user_version", &ver) ||
        !kb_pragma_int(kb, "SELECT count(*) FROM sqlite_master", &nobj)) {
        if (kb_is_busy_rc(sqlite3_errcode(kb->db)))
            return util_fail(AI_ERR_TIMEOUT, "knowledge base %s is locked by another process",
                             kb->path);
        return kb_err(kb, "not a readable SQLite database");
    }
    *empty = nobj == 0 && app == 0;
    if (*empty)
        return AI_OK;
    if (app != KB_APP_ID && (app != 0 || !only_our_objects(kb)))
        return util_fail(AI_ERR_PROTO,
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
        kb_pragma_int(kb, "SELECT count(*) FROM sqlite_master", &dummy))
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
        return util_fail(AI_ERR_NOMEM, "knowledge base");
    ai_status_t st = AI_OK;
    if (path && *path) {
        if (strlen(path) >= sizeof kb->path)
            st = util_fail(AI_ERR_INVALID, "knowledge base path is too long");
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
        st = util_fail(AI_ERR_INVALID, "knowledge base %s is not a regular file", kb->path);
        free(kb);
        return st;
    }
    if (readonly && !exists) {
        st = util_fail(AI_ERR_NOTFOUND, "knowledge base %s does not exist", kb->path);
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
        st = util_fail(AI_ERR_IO, "knowledge base %s does not exist and its directory is not "
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
            st = util_fail(AI_ERR_NOTFOUND, "knowledge base %s is empty%s%s", kb->path,
                           kb->why_ro[0] && !readonly ? ", and cannot be written: " : "",
                           kb->why_ro[0] && !readonly ? kb->why_ro : "");
            goto fail;
        }
        if (kb->readonly)
            break;
        st = kb_setup(kb);
        int wrc = st == AI_OK ? SQLITE_OK : kb->setup_rc;
        if (st == AI_OK && (st = kb_exec(kb, "PRAGMA synchronous=NORMAL")) != AI_OK)
            wrc = sqlite3_extended_errcode(kb->db);
        /* The writer's first write: see kb_open_writer. */
        if (st == AI_OK && writer && !kb->need_setup &&
            (wrc = sqlite3_exec(kb->db, "INSERT OR REPLACE INTO meta VALUES('last_writer', "
                                        "strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                                NULL, NULL, NULL)) != SQLITE_OK) {
            wrc = sqlite3_extended_errcode(kb->db);
            kb->busy = kb_is_busy_rc(wrc);
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
                     : util_fail(AI_ERR_PROTO, "knowledge base %s has schema version %d; this "
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

/* Run a write statement to completion and release it. */
ai_status_t kb_step_done(ai_kb *kb, sqlite3_stmt *q, const char *what)
{
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? AI_OK : kb_err(kb, what);
}
