/*
 * The knowledge base's compute profiles (schema in kb.c): each rank's
 * measured compute for one model under a fingerprint, written, read back
 * for the training-job planner, and imported from a profile file
 * (docs/formats.md), every field checked.
 */
#include "tune/tune.h"

#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        return util_fail(AI_ERR_INVALID, "profile: fingerprint '%s' is not 16 hex digits",
                         p->fingerprint);
    if (!p->preset[0] || p->rank < 0 || p->layers < 1 || p->dim < 1 || p->heads < 1 ||
        p->ctx < 1 || p->params < 1 || p->grad_bytes < 1)
        return util_fail(AI_ERR_INVALID, "profile of rank %d: want a preset name, rank >= 0 and"
                                       " layers, dim, heads, ctx, params, grad_bytes >= 1",
                       p->rank);
    if (!(isfinite(p->gemm_gflops) && p->gemm_gflops > 0) ||
        !(isfinite(p->attention_gflops) && p->attention_gflops > 0) ||
        !(isfinite(p->optimizer_s) && p->optimizer_s >= 0))
        return util_fail(AI_ERR_INVALID, "profile of rank %d: want gemm_gflops and"
                                       " attention_gflops > 0, optimizer_s >= 0", p->rank);
    for (size_t i = 0; i < NTERMS; i++) {
        double v = *profile_term((ai_kb_profile *)p, i);
        if (!(isfinite(v) && v >= 0))
            return util_fail(AI_ERR_INVALID, "profile of rank %d: %s: want a number >= 0 (0: not"
                                           " measured)", p->rank, PROFILE_TERMS[i].name);
    }
    if (p->npoints < 1 || p->npoints > AI_PROFILE_POINTS)
        return util_fail(AI_ERR_INVALID, "profile of rank %d: %d step points, want 1..%d", p->rank,
                         p->npoints, AI_PROFILE_POINTS);
    for (int i = 0; i < p->npoints; i++) {
        if (p->point[i].batch < 1 || !(isfinite(p->point[i].fwd_bwd_s) &&
                                       p->point[i].fwd_bwd_s > 0))
            return util_fail(AI_ERR_INVALID, "profile of rank %d: step[%d]: want batch >= 1 and"
                                           " fwd_bwd_s > 0", p->rank, i);
        for (int j = 0; j < i; j++)
            if (p->point[j].batch == p->point[i].batch)
                return util_fail(AI_ERR_INVALID, "profile of rank %d: step[%d]: batch %d measured"
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
            st = kb_step_done(kb, q, "writing profile");
    for (size_t i = 0; i < NTERMS && st == AI_OK; i++) {
        double v = *profile_term((ai_kb_profile *)p, i);
        if (v <= 0)
            continue;
        if ((st = profile_stmt(kb, "INSERT INTO profile_terms VALUES(?1, ?2, ?3, ?4, ?5)", p,
                               "writing profile", &q)) != AI_OK)
            return st;
        sqlite3_bind_text(q, 4, PROFILE_TERMS[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_double(q, 5, v);
        st = kb_step_done(kb, q, "writing profile");
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
    if ((st = kb_step_done(kb, q, "writing profile")) != AI_OK)
        return st;
    for (int i = 0; i < p->npoints && st == AI_OK; i++) {
        if ((st = profile_stmt(kb, "INSERT INTO profile_steps VALUES(?1, ?2, ?3, ?4, ?5)", p,
                               "writing profile", &q)) != AI_OK)
            return st;
        sqlite3_bind_int(q, 4, p->point[i].batch);
        sqlite3_bind_double(q, 5, p->point[i].fwd_bwd_s);
        st = kb_step_done(kb, q, "writing profile");
    }
    return st;
}

/* Write n profiles in one transaction. */
static ai_status_t profiles_write(ai_kb *kb, const ai_kb_profile *p, int n)
{
    if (kb->readonly)
        return util_fail(AI_ERR_IO, "knowledge base %s is read-only (%s)", kb->path,
                         kb_readonly_why(kb));
    ai_status_t st = kb->need_setup ? kb_setup(kb) : AI_OK;
    if (st == AI_OK && kb->need_setup)
        return util_fail(AI_ERR_IO, "knowledge base %s is locked by another process", kb->path);
    for (int i = 0; i < n && st == AI_OK; i++)
        st = profile_check(&p[i]);
    if (st != AI_OK || (st = kb_exec(kb, "BEGIN IMMEDIATE")) != AI_OK)
        return st;
    double when = (double)time(NULL);
    for (int i = 0; i < n && st == AI_OK; i++)
        st = profile_write(kb, &p[i], when);
    if (st != AI_OK) {
        sqlite3_exec(kb->db, "ROLLBACK", NULL, NULL, NULL);
        return st;
    }
    return kb_exec(kb, "COMMIT");
}

ai_status_t ai_kb_profile_put(ai_kb *kb, const ai_kb_profile *profile)
{
    if (!kb || !profile)
        return util_fail(AI_ERR_INVALID, "ai_kb_profile_put: kb or profile is NULL");
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
    if (!kb_pragma_int(kb, "SELECT count(*) FROM sqlite_master WHERE name = 'profile_terms'",
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
        return util_fail(AI_ERR_INVALID, "ai_kb_profile_foreach: kb or fn is NULL");
    int have = 0;
    if (!kb_pragma_int(kb, "SELECT count(*) FROM sqlite_master WHERE name = 'profiles'", &have))
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
        return util_fail(AI_ERR_INVALID, "%s: %s: want a number %s %g", path, where,
                         lo_open ? ">" : ">=", lo);
    *out = x;
    return AI_OK;
}

static ai_status_t profile_json_int(const char *path, const char *where, json_t *v, long long lo,
                                    long long hi, long long *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return util_fail(AI_ERR_INVALID, "%s: %s: want an integer in %lld..%lld", path, where, lo,
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
        return util_fail(AI_ERR_INVALID, "%s: %s: want an object", path, where);
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
            return util_fail(AI_ERR_INVALID, "%s: %s%s%s: unknown key", path, where,
                             *where ? "." : "", key);
    }
    for (int i = 0; known[i]; i++)
        if (!json_object_get(o, known[i]))
            return util_fail(AI_ERR_INVALID, "%s: %s%s%s: missing", path, where, *where ? "." : "",
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
        return util_fail(AI_ERR_INVALID, "%s: ranks[%zu].host: want a string of under %zu chars",
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
        return util_fail(AI_ERR_INVALID, "%s: ranks[%zu].step: want an array of 1..%d points", path,
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
                return util_fail(AI_ERR_INVALID, "%s: %s: batch %lld already measured in"
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
        return util_fail(AI_ERR_INVALID, "ai_kb_profile_import: kb or path is NULL");
    json_error_t e;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!root)
        return util_fail(AI_ERR_PARSE, "%s:%d:%d: %s", path, e.line, e.column, e.text);
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
        st = util_fail(AI_ERR_INVALID, "%s: kind: want \"compute-profile\"", path);
        goto out;
    }
    if (!json_is_integer(json_object_get(root, "version")) ||
        json_integer_value(json_object_get(root, "version")) != 1) {
        st = util_fail(AI_ERR_UNSUPPORTED, "%s: version: this build reads version 1", path);
        goto out;
    }
    size_t n = json_is_string(fp) ? strlen(json_string_value(fp)) : 0;
    int hex = n == 16;
    for (size_t i = 0; hex && i < n; i++)
        hex = strchr("0123456789abcdefABCDEF", json_string_value(fp)[i]) != NULL;
    if (!hex) {
        st = util_fail(AI_ERR_INVALID, "%s: fingerprint: want the communicator's fingerprint,"
                                     " 16 hex digits", path);
        goto out;
    }
    snprintf(base.fingerprint, sizeof base.fingerprint, "%s", json_string_value(fp));
    if ((st = profile_json_keys(path, "model", model, mkeys, 0)) != AI_OK)
        goto out;
    json_t *preset = json_object_get(model, "preset");
    if (!json_is_string(preset) || !*json_string_value(preset) ||
        strlen(json_string_value(preset)) >= sizeof base.preset) {
        st = util_fail(AI_ERR_INVALID, "%s: model.preset: want a name of 1..%zu chars", path,
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
        st = util_fail(AI_ERR_INVALID, "%s: ranks: want an array of 1..4096 ranks", path);
        goto out;
    }
    size_t nr = json_array_size(ranks), ri;
    json_t *r;
    if (!(ps = calloc(nr, sizeof *ps))) {
        st = util_fail(AI_ERR_NOMEM, "profile import");
        goto out;
    }
    json_array_foreach(ranks, ri, r)
    {
        ps[ri] = base;
        if ((st = profile_json_rank(path, r, ri, nr, &ps[ri])) != AI_OK)
            goto out;
        for (size_t j = 0; j < ri; j++)
            if (ps[j].rank == ps[ri].rank) {
                st = util_fail(AI_ERR_INVALID, "%s: ranks[%zu].rank: rank %d already in ranks[%zu]",
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
