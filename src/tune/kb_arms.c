/*
 * The knowledge base's arms (schema in kb.c): the learner's buckets, arms,
 * measurements and choices, the fingerprints recognised by their host
 * rates, the posteriors' public views, and ai_kb_foreach, the reading
 * every other user of the arms goes through.
 */
#include "tune/tune.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    if (kb->need_setup && kb_pragma_int(kb, "SELECT count(*) = 0 FROM sqlite_master", &empty) &&
        empty)
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

ai_status_t kb_put_fingerprint(ai_kb *kb, const char *fp, int nranks, int nhosts,
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

ai_status_t kb_put_arm(ai_kb *kb, const char *fp, const char *coll, size_t bytes,
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
    return kb_step_done(kb, q, "writing arm");
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
    return kb_step_done(kb, q, "writing bucket");
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
    return kb_step_done(kb, q, "writing measurement");
}

ai_status_t kb_begin(ai_kb *kb, const char *fp, int nranks, int nhosts, const char *desc)
{
    if (kb->readonly)
        return util_fail(AI_ERR_IO, "knowledge base %s is read-only (%s)", kb->path,
                         kb_readonly_why(kb));
    ai_status_t st = kb->need_setup ? kb_setup(kb) : AI_OK;
    if (st == AI_OK && kb->need_setup)
        return util_fail(AI_ERR_IO, "knowledge base %s is locked by another process", kb->path);
    int rc = st == AI_OK ? sqlite3_exec(kb->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) : SQLITE_OK;
    kb->busy = kb_is_busy_rc(rc);
    if (st == AI_OK && rc != SQLITE_OK)
        st = kb_err(kb, kb->busy ? "locked by another process" : "cannot begin a write");
    if (st == AI_OK && (st = kb_put_fingerprint(kb, fp, nranks, nhosts, desc)) != AI_OK)
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
            st = kb_put_arm(kb, fp, cn, bytes, &arms[i]);
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
    return kb_step_done(kb, q, "writing choice");
}

ai_status_t ai_kb_log_foreach(ai_kb *kb, const char *fingerprint, ai_kb_choice_fn fn, void *arg)
{
    if (!kb || !fn)
        return util_fail(AI_ERR_INVALID, "ai_kb_log_foreach: kb or fn is NULL");
    int have = 0;
    if (!kb_pragma_int(kb, "SELECT count(*) FROM sqlite_master WHERE name = 'choices'", &have))
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
        kb->busy = kb_is_busy_rc(rc);
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
    ai_status_t st = kb_exec(kb, "BEGIN IMMEDIATE");
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
        st = kb_step_done(kb, q, "writing rates");
    }
    if (st != AI_OK) {
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    return kb_exec(kb, "COMMIT");
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
        return util_fail(AI_ERR_INVALID, "ai_kb_foreach: kb or fn is NULL");
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
                st = util_fail(AI_ERR_NOMEM, "knowledge base walk");
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
