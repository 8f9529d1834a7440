/*
 * The knowledge base's JSON exchange (docs/formats.md): every arm of one
 * fingerprint or all of them out, through ai_kb_foreach; a file of them
 * in, each value checked, in one transaction.
 */
#include "tune/tune.h"

#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            x->st = util_fail(AI_ERR_NOMEM, "knowledge base export");
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
        x->st = util_fail(AI_ERR_NOMEM, "knowledge base export");
        return 1;
    }
    return 0;
}

ai_status_t ai_kb_export_json(ai_kb *kb, const char *fingerprint, const char *path)
{
    if (!kb || !path)
        return util_fail(AI_ERR_INVALID, "ai_kb_export_json: kb or path is NULL");
    export_ctx x = {.fps = json_array()};
    json_t *root = json_pack("{s:s, s:i, s:o}", "format", "autoinfra-kb", "version", 1,
                             "fingerprints", x.fps);
    if (!root)
        return util_fail(AI_ERR_NOMEM, "knowledge base export");
    ai_status_t st = ai_kb_foreach(kb, fingerprint, export_arm, &x);
    if (st == AI_OK)
        st = x.st;
    if (st == AI_OK && json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
        st = util_fail(AI_ERR_IO, "cannot write %s", path);
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
        return util_fail(AI_ERR_PARSE, "%s: fingerprints[%zu].arms[%zu]: %s", path, fi, ai, e.text);
    if (ai_coll_parse(cn, coll) != AI_OK)
        return util_fail(AI_ERR_INVALID, "%s: fingerprints[%zu].arms[%zu].coll: unknown '%s'", path,
                         fi, ai, cn);
    if (b < 1 || (b & (b - 1)) || chunk < 0 || ch < 0 || n < 0 || !(mean > 0) || sd < 0 ||
        strlen(algo) >= TUNE_ALGO_MAX)
        return util_fail(AI_ERR_INVALID,
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
        return util_fail(AI_ERR_INVALID, "ai_kb_import_json: kb or path is NULL");
    json_error_t e;
    json_t *root = json_load_file(path, 0, &e);
    if (!root)
        return util_fail(AI_ERR_PARSE, "%s:%d:%d: %s", path, e.line, e.column, e.text);
    ai_status_t st = AI_OK;
    const char *format = NULL;
    json_int_t version = 0;
    json_t *fps = NULL;
    if (json_unpack_ex(root, &e, 0, "{s:s, s:I, s:o}", "format", &format, "version", &version,
                       "fingerprints", &fps) != 0 ||
        strcmp(format, "autoinfra-kb") || version != 1 || !json_is_array(fps)) {
        json_decref(root);
        return util_fail(AI_ERR_PARSE,
                         "%s: not an autoinfra knowledge base export (want format \"autoinfra-kb\","
                         " version 1, a fingerprints array)",
                         path);
    }
    if (kb->readonly)
        st = util_fail(AI_ERR_IO, "knowledge base %s is read-only (%s)", kb->path,
                       kb_readonly_why(kb));
    if (st != AI_OK || (st = kb_exec(kb, "BEGIN IMMEDIATE")) != AI_OK) {
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
            st = util_fail(AI_ERR_PARSE,
                           "%s: fingerprints[%zu]: want id (16 hex digits), nranks, nhosts >= 1 and"
                           " an arms array",
                           path, fi);
            break;
        }
        if ((st = kb_put_fingerprint(kb, id, (int)nr, (int)nh, desc)) != AI_OK)
            break;
        json_array_foreach(arms, ai, o)
        {
            tune_arm_stat s;
            ai_coll coll = AI_ALLREDUCE;
            size_t bytes = 0;
            if ((st = import_arm(path, fi, ai, o, &s, &coll, &bytes)) != AI_OK ||
                (st = kb_put_arm(kb, id, ai_coll_name(coll), bytes, &s)) != AI_OK)
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
    return kb_exec(kb, "COMMIT");
}
