/*
 * The exporters' view of the knowledge base (export.h): one fingerprint's
 * arms, read through the public ai_kb_foreach.
 */
#include "tune/export/export.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char fp[17];
    long samples;
} fp_total;

typedef struct {
    fp_total *t;
    size_t n, cap;
} fp_totals;

static int total_visit(const ai_kb_arm *a, void *arg)
{
    fp_totals *x = arg;
    if (x->n == 0 || strcmp(x->t[x->n - 1].fp, a->fingerprint)) {
        for (size_t i = 0; i < x->n; i++)
            if (!strcmp(x->t[i].fp, a->fingerprint)) {
                x->t[i].samples += a->samples;
                return 0;
            }
        if (x->n == x->cap) {
            size_t cap = x->cap ? 2 * x->cap : 8;
            fp_total *nt = realloc(x->t, cap * sizeof *nt);
            if (!nt)
                return 1;
            x->t = nt;
            x->cap = cap;
        }
        snprintf(x->t[x->n].fp, sizeof x->t[x->n].fp, "%s", a->fingerprint);
        x->t[x->n++].samples = 0;
    }
    x->t[x->n - 1].samples += a->samples;
    return 0;
}

static int view_visit(const ai_kb_arm *a, void *arg)
{
    kb_view *v = arg;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        ai_kb_arm *na = realloc(v->arm, cap * sizeof *na);
        if (!na) {
            v->nomem = 1;
            return 1;
        }
        v->arm = na;
        v->cap = cap;
    }
    v->arm[v->n++] = *a;
    v->nranks = a->nranks;
    v->nhosts = a->nhosts;
    return 0;
}

static int arm_cmp(const void *pa, const void *pb)
{
    const ai_kb_arm *a = pa, *b = pb;
    if (a->coll != b->coll)
        return a->coll < b->coll ? -1 : 1;
    if (a->bytes != b->bytes)
        return a->bytes < b->bytes ? -1 : 1;
    if (a->mean_us != b->mean_us)
        return a->mean_us < b->mean_us ? -1 : 1;
    return 0;
}

ai_status_t tune_view_load(ai_kb *kb, const char *fingerprint, const char *what, kb_view *v)
{
    memset(v, 0, sizeof *v);
    if (!kb)
        return util_fail(AI_ERR_INVALID, "%s: kb is NULL", what);
    char chosen[17] = "";
    if (fingerprint) {
        snprintf(chosen, sizeof chosen, "%s", fingerprint);
    } else {
        /* Never a guess between several: rules for another job's
         * communicator would be applied silently to this one's. */
        fp_totals t = {0};
        ai_status_t st = ai_kb_foreach(kb, NULL, total_visit, &t);
        if (st == AI_OK && t.n == 1)
            snprintf(chosen, sizeof chosen, "%s", t.t[0].fp);
        char list[512] = "";
        for (size_t i = 0, o = 0; i < t.n && o + 40 < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s (%ld samples)", i ? ", " : "",
                                  t.t[i].fp, t.t[i].samples);
        size_t n = t.n;
        free(t.t);
        if (st != AI_OK)
            return st;
        if (n == 0)
            return util_fail(AI_ERR_NOTFOUND, "%s: the knowledge base holds no measurements", what);
        if (n > 1)
            return util_fail(AI_ERR_INVALID,
                             "%s: the knowledge base holds %zu fingerprints (%s): name one", what,
                             n, list);
    }
    ai_status_t st = ai_kb_foreach(kb, chosen, view_visit, v);
    if (st == AI_OK && v->nomem)
        st = util_fail(AI_ERR_NOMEM, "%s: reading the knowledge base", what);
    if (st == AI_OK && v->n == 0)
        st = util_fail(AI_ERR_NOTFOUND, "%s: no measurements for fingerprint '%s'", what, chosen);
    if (st != AI_OK)
        goto err_arms;
    snprintf(v->fp, sizeof v->fp, "%s", chosen);
    qsort(v->arm, v->n, sizeof *v->arm, arm_cmp);
    return AI_OK;
err_arms:
    free(v->arm);
    v->arm = NULL;
    return st;
}

int tune_view_next_bucket(const kb_view *v, ai_coll coll, size_t *i, size_t *end)
{
    while (*i < v->n && v->arm[*i].coll != coll)
        ++*i;
    if (*i >= v->n)
        return 0;
    size_t j = *i;
    while (j < v->n && v->arm[j].coll == coll && v->arm[j].bytes == v->arm[*i].bytes)
        j++;
    *end = j;
    return 1;
}

int tune_view_enough(const ai_kb_arm *a)
{
    return a->samples >= TUNE_EXPORT_MIN_SAMPLES;
}

int tune_view_exportable(const kb_view *v, size_t i, size_t end, const ai_kb_arm *a, const char *own)
{
    if (!tune_view_enough(a))
        return 0;
    /* The bucket is fastest first: its first arm that counts is the best. */
    for (size_t k = i; k < end; k++) {
        const ai_kb_arm *b = &v->arm[k];
        if (!tune_view_enough(b))
            continue;
        if (a->mean_us > TUNE_EXPORT_MAX_SLOWER * b->mean_us)
            return 0;
        break;
    }
    for (size_t k = i; own && k < end; k++)
        if (!strcmp(v->arm[k].algo, own) && tune_view_enough(&v->arm[k]) &&
            v->arm[k].mean_us < a->mean_us)
            return 0;
    return 1;
}

unsigned long long tune_view_lo_edge(size_t bytes, int mult)
{
    return bytes <= 1 ? 0 : (unsigned long long)bytes * (unsigned)mult;
}

unsigned long long tune_view_hi_edge(size_t bytes, int mult)
{
    return 2ull * bytes * (unsigned)mult;
}

const char *tune_size_name(unsigned long long b, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && b >= 1024 && b % 1024 == 0) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, "%llu %s", b, unit[u]);
    return buf;
}
