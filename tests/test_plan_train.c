/*
 * Compute profiles in the knowledge base and the training-job planner
 * (src/tune/kb.c profiles, src/plan/job/plan_train.c), on a KB each test
 * builds in a temporary directory:
 *  - a profile JSON round-trips through the KB; bad files are refused
 *    whole, the message naming the JSON path; a read-only KB takes none;
 *  - the planner says which source every term came from: kb:profile for
 *    compute and optimizer, kb:learner for measured allreduce sizes
 *    (interpolated between buckets), "model" for a size beyond the
 *    measured ones, "catalogue" when the KB has no allreduce timings;
 *  - the terms sum to the predicted step; ranks of different speeds get
 *    uneven shares, equal ranks even ones; --fix pins what it names.
 * The profile figures are a real measurement of autoinfra.train's medium
 * model on one rank of this machine (1 torch thread: fwd+bwd at batch 1,
 * 2, 4, 8, 16 and one AdamW step), the half-speed ranks doubled.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/cmdtest.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FP "00000000000000f5"

static char dir[PATH_MAX];

static const double pts_b[] = {1, 2, 4, 8, 16};
static const double pts_t[] = {0.2688, 0.4869, 0.9955, 2.0035, 6.3561};
/* The profile's seconds at pts_b that profile_json writes (pts_t unless a
 * test sets another). */
static const double *prof_t = pts_t;

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A profile of len(speeds) ranks, rank i at speeds[i] of full speed. */
static json_t *profile_json(const double *speeds, int n)
{
    json_t *ranks = json_array();
    for (int r = 0; r < n; r++) {
        json_t *steps = json_array();
        for (int k = 0; k < 5; k++)
            json_array_append_new(steps, json_pack("{s:i, s:f}", "batch", (int)pts_b[k],
                                                   "fwd_bwd_s", prof_t[k] / speeds[r]));
        char host[16];
        snprintf(host, sizeof host, "n%d", r);
        json_array_append_new(ranks, json_pack("{s:i, s:s, s:f, s:f, s:f, s:o}", "rank", r,
                                               "host", host, "gemm_gflops", 0.673 * speeds[r],
                                               "attention_gflops", 0.712 * speeds[r],
                                               "optimizer_s", 0.0299 / speeds[r], "step", steps));
    }
    return json_pack("{s:s, s:i, s:s, s:{s:s, s:i, s:i, s:i, s:i, s:I, s:I}, s:o}", "kind",
                     "compute-profile", "version", 1, "fingerprint", FP, "model", "preset",
                     "medium", "layers", 4, "dim", 320, "heads", 5, "ctx", 32, "params",
                     (json_int_t)5106560, "grad_bytes", (json_int_t)20426240, "ranks", ranks);
}

static void dump(json_t *j, const char *path)
{
    assert_int_equal(json_dump_file(j, path, 0), 0);
    json_decref(j);
}

/* Learner timings of FP (4 ranks): ring best (rhd 30% slower) at each of
 * n bucket sizes, bytes[i] taking secs[i]. */
static void import_arm_list(ai_kb *kb, int n, const double *bytes, const double *secs)
{
    json_t *arms = json_array();
    for (int k = 0; k < n; k++) {
        double t = secs[k];
        json_array_append_new(arms, json_pack("{s:s, s:I, s:s, s:i, s:f, s:f}", "coll",
                                              "allreduce", "bytes", (json_int_t)bytes[k], "algo",
                                              "ring", "samples", 30, "mean_us", t * 1e6, "std_us",
                                              t * 5e4));
        json_array_append_new(arms, json_pack("{s:s, s:I, s:s, s:i, s:f, s:f}", "coll",
                                              "allreduce", "bytes", (json_int_t)bytes[k], "algo",
                                              "rhd", "samples", 30, "mean_us", t * 1.3e6,
                                              "std_us", t * 5e4));
    }
    char path[PATH_MAX + 16];
    path_in(path, sizeof path, "arms.json");
    dump(json_pack("{s:s, s:i, s:[{s:s, s:i, s:i, s:s, s:o}]}", "format", "autoinfra-kb",
                   "version", 1, "fingerprints", "id", FP, "nranks", 4, "nhosts", 4,
                   "description", "4 ranks on 4 hosts", "arms", arms),
         path);
    assert_int_equal(ai_kb_import_json(kb, path), AI_OK);
}

/* Every power-of-two bucket from lo_log2 to hi_log2, a ring of 6 x 100 us
 * and 1.5 bytes per byte at 117 MB/s. */
static void import_arms(ai_kb *kb, int lo_log2, int hi_log2)
{
    double b[32], t[32];
    int n = 0;
    for (int k = lo_log2; k <= hi_log2; k++, n++) {
        b[n] = (double)(1 << k);
        t[n] = 6 * 100e-6 + 1.5 * b[n] / 117e6;
    }
    import_arm_list(kb, n, b, t);
}

static ai_kb *new_kb(const double *speeds, int n)
{
    char kbp[PATH_MAX + 16], pp[PATH_MAX + 16];
    path_in(kbp, sizeof kbp, "kb.sqlite");
    unlink(kbp);
    char wal[PATH_MAX + 32];
    snprintf(wal, sizeof wal, "%s-wal", kbp);
    unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", kbp);
    unlink(wal);
    ai_kb *kb = NULL;
    assert_int_equal(ai_kb_open(kbp, 0, &kb), AI_OK);
    if (n > 0) {
        path_in(pp, sizeof pp, "profile.json");
        dump(profile_json(speeds, n), pp);
        int got = 0;
        assert_int_equal(ai_kb_profile_import(kb, pp, &got), AI_OK);
        assert_int_equal(got, n);
    }
    return kb;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ai-plantrain-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ profiles */

typedef struct {
    ai_kb_profile p[8];
    int n;
} got_profiles;

static int keep(const ai_kb_profile *p, void *arg)
{
    got_profiles *g = arg;
    if (g->n < 8)
        g->p[g->n++] = *p;
    return 0;
}

static void test_profile_roundtrip(void **state)
{
    (void)state;
    const double sp[] = {1, 0.5};
    ai_kb *kb = new_kb(sp, 2);
    got_profiles g = {0};
    assert_int_equal(ai_kb_profile_foreach(kb, FP, keep, &g), AI_OK);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.p[1].preset, "medium");
    assert_string_equal(g.p[1].host, "n1");
    assert_int_equal(g.p[1].rank, 1);
    assert_int_equal(g.p[1].layers, 4);
    assert_int_equal(g.p[1].grad_bytes, 20426240);
    assert_int_equal(g.p[1].npoints, 5);
    assert_int_equal(g.p[1].point[4].batch, 16);
    assert_true(fabs(g.p[1].point[4].fwd_bwd_s - 2 * 6.3561) < 1e-9);
    assert_true(fabs(g.p[1].optimizer_s - 0.0598) < 1e-9);
    assert_true(fabs(g.p[0].gemm_gflops - 0.673) < 1e-9);
    /* the optional terms absent: 0 (not measured) */
    assert_true(g.p[1].allreduce_beside_s == 0 && g.p[1].step_overhead_s == 0);
    /* another fingerprint sees none */
    g.n = 0;
    assert_int_equal(ai_kb_profile_foreach(kb, "0000000000000000", keep, &g), AI_OK);
    assert_int_equal(g.n, 0);
    /* a put replaces the rank's points */
    ai_kb_profile p = g.p[0];
    assert_int_equal(ai_kb_profile_foreach(kb, FP, keep, &g), AI_OK);
    p = g.p[0];
    p.npoints = 1;
    p.point[0].batch = 3;
    p.point[0].fwd_bwd_s = 0.7;
    assert_int_equal(ai_kb_profile_put(kb, &p), AI_OK);
    g.n = 0;
    assert_int_equal(ai_kb_profile_foreach(kb, FP, keep, &g), AI_OK);
    assert_int_equal(g.p[0].npoints, 1);
    assert_int_equal(g.p[0].point[0].batch, 3);
    /* the optional terms round-trip, and a put without them drops them */
    p.allreduce_beside_s = 0.12;
    p.step_overhead_s = 0.004;
    assert_int_equal(ai_kb_profile_put(kb, &p), AI_OK);
    g.n = 0;
    assert_int_equal(ai_kb_profile_foreach(kb, FP, keep, &g), AI_OK);
    assert_true(fabs(g.p[0].allreduce_beside_s - 0.12) < 1e-12 &&
                fabs(g.p[0].step_overhead_s - 0.004) < 1e-12);
    assert_true(g.p[1].allreduce_beside_s == 0);
    p.step_overhead_s = -0.1;
    assert_int_equal(ai_kb_profile_put(kb, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "step_overhead_s"));
    p.allreduce_beside_s = p.step_overhead_s = 0;
    assert_int_equal(ai_kb_profile_put(kb, &p), AI_OK);
    g.n = 0;
    assert_int_equal(ai_kb_profile_foreach(kb, FP, keep, &g), AI_OK);
    assert_true(g.p[0].allreduce_beside_s == 0 && g.p[0].step_overhead_s == 0);
    p.point[0].fwd_bwd_s = -1;
    assert_int_equal(ai_kb_profile_put(kb, &p), AI_ERR_INVALID);
    ai_kb_close(kb);

    /* read-only: read, never written */
    char kbp[PATH_MAX + 16];
    path_in(kbp, sizeof kbp, "kb.sqlite");
    assert_int_equal(ai_kb_open(kbp, 1, &kb), AI_OK);
    g.n = 0;
    assert_int_equal(ai_kb_profile_foreach(kb, NULL, keep, &g), AI_OK);
    assert_int_equal(g.n, 2);
    p.point[0].fwd_bwd_s = 0.5;
    assert_int_equal(ai_kb_profile_put(kb, &p), AI_ERR_IO);
    assert_non_null(strstr(ai_last_error(), "read-only"));
    ai_kb_close(kb);
}

/* Each bad file: what is changed in the good one, and the path the
 * message must name. */
static void test_profile_refused(void **state)
{
    (void)state;
    static const struct {
        const char *edit, *want;
    } bad[] = {
        {"kind=\"train-plan\"", "kind"},
        {"version=2", "version"},
        {"fingerprint=\"xyz\"", "fingerprint"},
        {"model.layers=0", "model.layers"},
        {"model.preset=", "model.preset"},
        {"model.extra=1", "model.extra: unknown key"},
        {"ranks[1].gemm_gflops=-1", "ranks[1].gemm_gflops"},
        {"ranks[1].step[2].fwd_bwd_s=0", "ranks[1].step[2].fwd_bwd_s"},
        {"ranks[0].step[1].batch=1", "ranks[0].step[1].batch: batch 1 already"},
        {"ranks[1].rank=0", "ranks[1].rank: rank 0 already"},
        {"ranks[1].rank=7", "ranks[1].rank"},
        {"ranks[0].host=", "ranks[0].host: missing"},
        {"ranks=[]", "ranks"},
        {"ranks[1].allreduce_beside_s=-1", "ranks[1].allreduce_beside_s: want a number >= 0"},
        {"syntax", ":1:"},
    };
    const double sp[] = {1, 1};
    char kbp[PATH_MAX + 16], pp[PATH_MAX + 16];
    ai_kb *kb = new_kb(sp, 0);
    path_in(kbp, sizeof kbp, "kb.sqlite");
    path_in(pp, sizeof pp, "bad.json");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = profile_json(sp, 2), *r1 = json_array_get(json_object_get(j, "ranks"), 1),
               *r0 = json_array_get(json_object_get(j, "ranks"), 0),
               *m = json_object_get(j, "model");
        const char *e = bad[i].edit;
        if (!strcmp(e, "kind=\"train-plan\""))
            json_object_set_new(j, "kind", json_string("train-plan"));
        else if (!strcmp(e, "version=2"))
            json_object_set_new(j, "version", json_integer(2));
        else if (!strcmp(e, "fingerprint=\"xyz\""))
            json_object_set_new(j, "fingerprint", json_string("xyz"));
        else if (!strcmp(e, "model.layers=0"))
            json_object_set_new(m, "layers", json_integer(0));
        else if (!strcmp(e, "model.preset="))
            json_object_set_new(m, "preset", json_string(""));
        else if (!strcmp(e, "model.extra=1"))
            json_object_set_new(m, "extra", json_integer(1));
        else if (!strcmp(e, "ranks[1].gemm_gflops=-1"))
            json_object_set_new(r1, "gemm_gflops", json_real(-1));
        else if (!strcmp(e, "ranks[1].step[2].fwd_bwd_s=0"))
            json_object_set_new(json_array_get(json_object_get(r1, "step"), 2), "fwd_bwd_s",
                                json_real(0));
        else if (!strcmp(e, "ranks[0].step[1].batch=1"))
            json_object_set_new(json_array_get(json_object_get(r0, "step"), 1), "batch",
                                json_integer(1));
        else if (!strcmp(e, "ranks[1].rank=0"))
            json_object_set_new(r1, "rank", json_integer(0));
        else if (!strcmp(e, "ranks[1].rank=7"))
            json_object_set_new(r1, "rank", json_integer(7));
        else if (!strcmp(e, "ranks[0].host="))
            json_object_del(r0, "host");
        else if (!strcmp(e, "ranks=[]"))
            json_object_set_new(j, "ranks", json_array());
        else if (!strcmp(e, "ranks[1].allreduce_beside_s=-1"))
            json_object_set_new(r1, "allreduce_beside_s", json_real(-1));
        if (!strcmp(e, "syntax")) {
            json_decref(j);
            write_file(pp, "{\"kind\": \"compute-profile\",");
        } else {
            dump(j, pp);
        }
        ai_status_t st = ai_kb_profile_import(kb, pp, NULL);
        if (st == AI_OK || !strstr(ai_last_error(), bad[i].want) ||
            !strstr(ai_last_error(), pp))
            fail_msg("%s: got %s '%s', want the message to name '%s' and the file", e,
                     ai_strerror(st), ai_last_error(), bad[i].want);
        /* refused whole: rank 0's good entry is not stored either */
        got_profiles g = {0};
        assert_int_equal(ai_kb_profile_foreach(kb, NULL, keep, &g), AI_OK);
        assert_int_equal(g.n, 0);
    }
    ai_kb_close(kb);
}

/* ------------------------------------------------------------- planner */

typedef struct {
    double step, sum;
    int shares[8], n, mb;
    double cap;
    json_t *root;
} plan_out;

static void plan(ai_kb *kb, int B, const char *fix, plan_out *o)
{
    ai_train_plan_options opt = {.global_batch = B, .fix = fix};
    ai_train_plan *p = NULL;
    ai_status_t st = ai_plan_train(kb, &opt, &p);
    if (st != AI_OK)
        fail_msg("ai_plan_train: %s", ai_last_error());
    char *js = NULL;
    assert_int_equal(ai_train_plan_json(p, &js), AI_OK);
    json_error_t e;
    o->root = json_loads(js, 0, &e);
    assert_non_null(o->root);
    free(js);
    o->step = ai_train_plan_step_time(p);
    ai_train_plan_destroy(p);
    assert_string_equal(json_string_value(json_object_get(o->root, "kind")), "train-plan");
    assert_int_equal(json_integer_value(json_object_get(o->root, "global_batch")), B);
    assert_true(fabs(json_number_value(json_object_get(o->root, "predicted_step_time_s")) -
                     o->step) < 1e-9);
    json_t *sh = json_object_get(o->root, "shares"), *v;
    size_t i;
    int sum = 0;
    o->n = (int)json_array_size(sh);
    json_array_foreach(sh, i, v)
    {
        o->shares[i] = (int)json_integer_value(v);
        sum += o->shares[i];
    }
    assert_int_equal(sum, B);
    o->mb = (int)json_integer_value(json_object_get(o->root, "micro_batch"));
    o->cap = json_number_value(json_object_get(o->root, "bucket_cap_mb"));
    o->sum = 0;
    json_array_foreach(json_object_get(o->root, "explain"), i, v)
    {
        o->sum += json_number_value(json_object_get(v, "seconds"));
        assert_non_null(json_string_value(json_object_get(v, "source")));
    }
    assert_true(fabs(o->sum - o->step) < 1e-6 * o->step);
}

/* How many explain terms have a source starting with `prefix` and a term
 * containing `term` (NULL: any). */
static int count_src(const plan_out *o, const char *prefix, const char *term)
{
    json_t *v;
    size_t i;
    int n = 0;
    json_array_foreach(json_object_get(o->root, "explain"), i, v)
    {
        const char *s = json_string_value(json_object_get(v, "source")),
                   *t = json_string_value(json_object_get(v, "term"));
        n += !strncmp(s, prefix, strlen(prefix)) && (!term || strstr(t, term));
    }
    return n;
}

static void test_plan_sources(void **state)
{
    (void)state;
    const double sp[] = {1, 1, 0.5, 0.5};
    ai_kb *kb = new_kb(sp, 4);
    import_arms(kb, 16, 24); /* 64 KiB .. 16 MiB measured */
    plan_out o;
    plan(kb, 32, "bucket_cap_mb=8", &o);
    /* compute from the slowest rank's profile, optimizer from the slowest
     * optimizer (a half-speed rank) */
    assert_int_equal(count_src(&o, "kb:profile rank", "compute"), 1);
    assert_int_equal(count_src(&o, "kb:profile rank 2", "optimizer") +
                         count_src(&o, "kb:profile rank 3", "optimizer"),
                     1);
    /* 1 MiB first bucket measured exactly; 8 MiB exactly; the 2.48 MiB
     * rest interpolated; nothing from the model or the catalogue */
    assert_int_equal(count_src(&o, "kb:learner ring 1 MiB", "1 MiB"), 1);
    assert_int_equal(count_src(&o, "kb:learner ring 8 MiB", "8 MiB"), 1);
    assert_int_equal(count_src(&o, "kb:learner ring 2 MiB..ring 4 MiB (interpolated)", NULL), 1);
    assert_int_equal(count_src(&o, "catalogue", NULL), 0);
    assert_int_equal(count_src(&o, "model (ring", NULL), 0);
    json_decref(o.root);

    /* a 64 MiB cap: an 18.48 MiB bucket, inside the largest measured
     * bucket (calls of 16..32 MiB): that bucket's time */
    plan(kb, 32, "bucket_cap_mb=64", &o);
    assert_int_equal(count_src(&o, "kb:learner ring 16 MiB (its bucket: calls of 16 MiB..32"
                                   " MiB)", "18.48 MiB"), 1);
    assert_int_equal(count_src(&o, "kb:learner ring 1 MiB", NULL), 1);
    json_decref(o.root);
    ai_kb_close(kb);

    /* measured up to the 8 MiB bucket: 18.48 MiB is beyond, from the
     * ring fitted to them */
    kb = new_kb(sp, 4);
    import_arms(kb, 16, 23);
    plan(kb, 32, "bucket_cap_mb=64", &o);
    assert_int_equal(count_src(&o, "model (ring fitted to 8 kb:learner sizes; 18.48 MiB not"
                                   " measured)", "18.48 MiB"), 1);
    json_decref(o.root);
    ai_kb_close(kb);

    /* no allreduce timings at all: the catalogue, marked */
    kb = new_kb(sp, 4);
    plan(kb, 32, "bucket_cap_mb=25", &o);
    assert_int_equal(count_src(&o, "kb:learner", NULL), 0);
    assert_int_equal(count_src(&o, "catalogue (ring at 10 Gbit/s, 50 us: kb:learner has no"
                                   " allreduce)", "allreduce"), 2);
    json_decref(o.root);
    ai_kb_close(kb);
}

/* Two gaps of the sources: sizes measured in two buckets whose times fall
 * with size (no ring fits them) say so, not "one size only"; a size above
 * the largest bucket's edge but inside its range is that bucket's
 * measurement (as T6's learning job measured 2.34 MiB calls into the 2 MiB
 * bucket). */
static void test_plan_sources_edges(void **state)
{
    (void)state;
    const double sp[] = {1, 1, 0.5, 0.5};
    const double b[] = {1 << 20, 2 << 20}, t[] = {0.329, 0.252};
    ai_kb *kb = new_kb(sp, 4);
    import_arm_list(kb, 2, b, t);
    plan_out o;
    /* 19.48 MiB of gradients at a 4 MiB cap: 1 MiB, 4 x 4 MiB, 2.48 MiB */
    plan(kb, 32, "bucket_cap_mb=4", &o);
    assert_int_equal(count_src(&o, "kb:learner ring 1 MiB", "1 MiB"), 1);
    assert_int_equal(count_src(&o, "kb:learner ring 2 MiB (its bucket: calls of 2 MiB..4 MiB)",
                               "2.48 MiB"), 1);
    assert_int_equal(count_src(&o, "catalogue (ring at 10 Gbit/s, 50 us: the 2 kb:learner"
                                   " sizes, 0.329 s at 1 MiB .. 0.252 s at 2 MiB, fit a per-byte"
                                   " cost of", "4 MiB"), 1);
    assert_int_equal(count_src(&o, "catalogue (ring at 10 Gbit/s, 50 us: kb:learner has one"
                                   " size only", NULL), 0);
    json_t *v;
    size_t i;
    json_array_foreach(json_object_get(o.root, "explain"), i, v)
    {
        const char *src = json_string_value(json_object_get(v, "source"));
        if (!strncmp(src, "kb:learner ring 2 MiB (its", 25))
            assert_true(fabs(json_number_value(json_object_get(v, "seconds")) - 0.252) < 1e-9);
        if (!strncmp(src, "catalogue", 9))
            assert_non_null(strstr(src, "not positive)"));
    }
    json_decref(o.root);
    ai_kb_close(kb);

    /* one size only is still said so */
    kb = new_kb(sp, 4);
    import_arm_list(kb, 1, b, t);
    plan(kb, 32, "bucket_cap_mb=4", &o);
    assert_int_equal(count_src(&o, "catalogue (ring at 10 Gbit/s, 50 us: kb:learner has one"
                                   " size only)", "4 MiB"), 1);
    json_decref(o.root);
    ai_kb_close(kb);
}

/* The measured terms of a job step (the profile's allreduce_beside_s,
 * step_overhead_s): the slowest rank loses allreduce_beside_s per
 * gradient's worth of buckets reduced beside its backward, and the step
 * pays the slowest rank's overhead, each a kb:profile term; a profile
 * without them predicts as before. */
static void test_plan_step_terms(void **state)
{
    (void)state;
    const double sp[] = {1, 1, 0.5, 0.5};
    ai_kb *kb = new_kb(sp, 4);
    import_arms(kb, 16, 24);
    plan_out o;
    plan(kb, 32, "bucket_cap_mb=4,micro_batch=4,shares=11/11/5/5", &o);
    double before = o.step;
    assert_int_equal(count_src(&o, "kb:profile rank 0 (allreduce_beside_s", NULL) +
                         count_src(&o, "kb:profile rank 1 (allreduce_beside_s", NULL),
                     0);
    assert_int_equal(count_src(&o, "kb:profile", "step overhead"), 0);
    json_decref(o.root);
    got_profiles g = {0};
    assert_int_equal(ai_kb_profile_foreach(kb, FP, keep, &g), AI_OK);
    for (int i = 0; i < 4; i++) {
        g.p[i].allreduce_beside_s = 0.1;
        g.p[i].step_overhead_s = i == 3 ? 0.02 : 0.01;
        assert_int_equal(ai_kb_profile_put(kb, &g.p[i]), AI_OK);
    }
    plan(kb, 32, "bucket_cap_mb=4,micro_batch=4,shares=11/11/5/5", &o);
    /* 19.48 MiB as 1 MiB + 4 x 4 MiB + 2.48 MiB: all but the last 2.48
     * MiB beside the backward; a full-speed rank is the slowest at 11
     * samples against 5 at half speed */
    double lost = 0.1 * (20426240.0 - (20426240.0 - 1048576 - 4 * 4194304)) / 20426240.0;
    json_t *v;
    size_t i;
    int seen = 0;
    json_array_foreach(json_object_get(o.root, "explain"), i, v)
    {
        const char *src = json_string_value(json_object_get(v, "source"));
        double sec = json_number_value(json_object_get(v, "seconds"));
        if (strstr(src, "(allreduce_beside_s)")) {
            assert_true(!strncmp(src, "kb:profile rank 0", 17) ||
                        !strncmp(src, "kb:profile rank 1", 17));
            assert_true(fabs(sec - lost) < 1e-9);
            seen |= 1;
        }
        if (!strcmp(src, "kb:profile rank 3 (step_overhead_s)")) {
            assert_true(fabs(sec - 0.02) < 1e-12);
            seen |= 2;
        }
    }
    assert_int_equal(seen, 3);
    /* the step grows by at least the overhead and the lost compute (less
     * what the later ready buckets hide) */
    assert_true(o.step > before + 0.02 + 0.5 * lost);
    assert_true(o.step < before + 0.02 + lost + 1e-9);
    json_decref(o.root);
    ai_kb_close(kb);
}

/* The micro-batch: accumulation is chosen where the profile's points show
 * it pays (the medium model's points, 3.2x the seconds from 8 to 16
 * samples), not where it rests on one point's scatter below a line. */
static void test_plan_micro_batch(void **state)
{
    (void)state;
    const double sp[] = {1, 1, 1, 1};
    /* t = 0.1 + 0.3 b (compute, not the reduction, sets the step), the
     * point at 4 samples 8% low: 4 micro-batches of 4 predict less than
     * one of 16, by less than the margin */
    const double line[] = {0.4, 0.7, 1.3 * 0.92, 2.5, 4.9};
    prof_t = line;
    ai_kb *kb = new_kb(sp, 4);
    prof_t = pts_t;
    import_arms(kb, 16, 24);
    plan_out o, acc;
    plan(kb, 64, "bucket_cap_mb=4", &o);
    plan(kb, 64, "bucket_cap_mb=4,micro_batch=4", &acc);
    assert_int_equal(o.shares[0], 16);
    assert_int_equal(o.mb, 16);
    assert_int_equal(acc.mb, 4);
    assert_true(acc.step < o.step);
    assert_true(acc.step > 0.9 * o.step);
    json_decref(o.root);
    json_decref(acc.root);
    ai_kb_close(kb);
    /* the cliff: two micro-batches of 8 beat one of 16 by far; 4 and 2
     * predict within the margin of 8 */
    kb = new_kb(sp, 4);
    import_arms(kb, 16, 24);
    plan(kb, 64, "bucket_cap_mb=4", &o);
    assert_int_equal(o.mb, 8);
    plan(kb, 64, "bucket_cap_mb=4,micro_batch=2", &acc);
    assert_true(acc.step < o.step);
    json_decref(o.root);
    json_decref(acc.root);
    ai_kb_close(kb);
}


/* The decision of field `what` in a plan's JSON (fails if absent). */
static json_t *decision_of(json_t *root, const char *what)
{
    json_t *d = json_object_get(root, "decisions"), *v;
    size_t i;
    json_array_foreach(d, i, v)
    {
        if (!strcmp(json_string_value(json_object_get(v, "choice")), what))
            return v;
    }
    fail_msg("no decision '%s' in the plan", what);
    return NULL;
}

/* Every choice comes with its runner-up, by how much, and the rule: a
 * micro-batch that loses to a smaller one's prediction names the margin
 * rule; uneven shares name even ones as the runner-up; the text of
 * --explain says the same. */
static void test_plan_decisions(void **state)
{
    (void)state;
    const double sp[] = {1, 1, 1, 1};
    const double line[] = {0.4, 0.7, 1.3 * 0.92, 2.5, 4.9};
    prof_t = line;
    ai_kb *kb = new_kb(sp, 4);
    prof_t = pts_t;
    import_arms(kb, 16, 24);
    plan_out o, acc;
    plan(kb, 64, "bucket_cap_mb=4", &o);
    plan(kb, 64, "bucket_cap_mb=4,micro_batch=4", &acc);
    assert_int_equal(o.mb, 16);
    json_t *d = decision_of(o.root, "micro_batch");
    assert_string_equal(json_string_value(json_object_get(d, "chosen")), "16");
    assert_string_equal(json_string_value(json_object_get(d, "runner_up")), "4");
    double ru = json_number_value(json_object_get(d, "runner_up_step_time_s"));
    assert_true(fabs(ru - acc.step) < 1e-9);
    assert_true(ru < o.step);
    assert_true(fabs(json_number_value(json_object_get(d, "runner_up_vs_chosen")) -
                     (acc.step / o.step - 1)) < 1e-9);
    assert_non_null(strstr(json_string_value(json_object_get(d, "rule")), "at least 10% less"));
    d = decision_of(o.root, "bucket_cap_mb");
    assert_null(json_object_get(d, "runner_up"));
    assert_non_null(strstr(json_string_value(json_object_get(d, "rule")), "--fix"));
    d = decision_of(o.root, "shares");
    assert_non_null(strstr(json_string_value(json_object_get(d, "rule")), "equally fast"));
    d = decision_of(o.root, "layout");
    assert_string_equal(json_string_value(json_object_get(d, "chosen")), "data parallel");
    assert_true(json_number_value(json_object_get(d, "runner_up_step_time_s")) >= o.step);
    json_decref(o.root);
    json_decref(acc.root);
    /* the text of --explain */
    ai_train_plan_options opt = {.global_batch = 64, .fix = "bucket_cap_mb=4"};
    ai_train_plan *p = NULL;
    assert_int_equal(ai_plan_train(kb, &opt, &p), AI_OK);
    char *txt = NULL;
    assert_int_equal(ai_train_plan_text(p, 1, &txt), AI_OK);
    assert_non_null(strstr(txt, "\nwhy:\n"));
    assert_non_null(strstr(txt, "micro_batch 16 ("));
    assert_non_null(strstr(txt, "over 4 ("));
    free(txt);
    ai_train_plan_destroy(p);
    ai_kb_close(kb);
    /* half-speed ranks: the balanced shares against even ones, which
     * predict more; the free bucket cap against the next best cap */
    const double half[] = {1, 1, 0.5, 0.5};
    kb = new_kb(half, 4);
    import_arms(kb, 10, 24);
    plan(kb, 24, NULL, &o);
    d = decision_of(o.root, "shares");
    assert_string_equal(json_string_value(json_object_get(d, "runner_up")), "6/6/6/6");
    assert_true(json_number_value(json_object_get(d, "runner_up_step_time_s")) > o.step);
    d = decision_of(o.root, "bucket_cap_mb");
    assert_non_null(json_object_get(d, "runner_up"));
    assert_true(json_number_value(json_object_get(d, "runner_up_step_time_s")) >= o.step);
    json_decref(o.root);
    ai_kb_close(kb);
}

static void test_plan_shares(void **state)
{
    (void)state;
    const double mixed[] = {1, 1, 0.5, 0.5}, even[] = {1, 1, 1, 1};
    ai_kb *kb = new_kb(mixed, 4);
    import_arms(kb, 16, 24);
    plan_out o;
    plan(kb, 48, NULL, &o);
    assert_int_equal(o.n, 4);
    /* the full-speed ranks take more, about twice the half-speed ones' */
    assert_int_equal(o.shares[0], o.shares[1]);
    assert_int_equal(o.shares[2], o.shares[3]);
    assert_true(o.shares[0] >= (int)(1.6 * o.shares[2]));
    assert_true(o.shares[0] <= (int)(2.4 * o.shares[2]) + 1);
    double mixed_step = o.step;
    json_decref(o.root);
    /* even shares pinned: the half-speed ranks set a longer step */
    plan(kb, 48, "shares=12/12/12/12", &o);
    assert_int_equal(o.shares[2], 12);
    assert_true(o.step > 1.2 * mixed_step);
    json_decref(o.root);
    /* pinned micro-batch and bucket cap are what the plan says */
    plan(kb, 48, "micro_batch=2,bucket_cap_mb=4", &o);
    assert_int_equal(o.mb, 2);
    assert_true(o.cap == 4);
    assert_true(json_is_null(json_object_get(o.root, "pipeline")));
    json_decref(o.root);
    /* a pinned pipeline: 2 stages, the fast ranks' stage with more layers */
    plan(kb, 48, "pipeline=2", &o);
    json_t *stages = json_object_get(json_object_get(o.root, "pipeline"), "stages");
    assert_int_equal(json_array_size(stages), 2);
    json_t *s0 = json_array_get(stages, 0), *s1 = json_array_get(stages, 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(s0, "ranks"), 0)), 0);
    assert_true(json_integer_value(json_object_get(s0, "layers")) >
                json_integer_value(json_object_get(s1, "layers")));
    assert_int_equal(json_integer_value(json_object_get(s0, "layers")) +
                         json_integer_value(json_object_get(s1, "layers")),
                     4);
    json_decref(o.root);
    ai_kb_close(kb);

    /* a stage lists its ranks by replica, fastest first as the prediction
     * paired them (not by rank index): speeds 0.9/1/0.4/0.5 make stage 0
     * ranks 1,0 and stage 1 ranks 3,2; replica 0 (ranks 1 and 3) gets the
     * larger share, at its first-stage rank */
    const double skew[] = {0.9, 1, 0.4, 0.5};
    kb = new_kb(skew, 4);
    import_arms(kb, 16, 24);
    plan(kb, 48, "pipeline=2", &o);
    stages = json_object_get(json_object_get(o.root, "pipeline"), "stages");
    const int want[2][2] = {{1, 0}, {3, 2}};
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < 2; j++)
            assert_int_equal(json_integer_value(json_array_get(
                                 json_object_get(json_array_get(stages, s), "ranks"), j)),
                             want[s][j]);
    assert_true(o.shares[1] >= o.shares[0] && o.shares[0] > 0);
    assert_int_equal(o.shares[2] + o.shares[3], 0);
    json_decref(o.root);

    /* 1F1B per replica: replica j's M_j micro-batches cost (M_j - 1) x
     * its bottleneck stage + one pass through its stages, and the step's
     * pipeline compute is the slowest replica's, not the largest M_j times
     * the slowest rank of any replica */
    plan(kb, 48, "pipeline=2,micro_batch=2", &o);
    stages = json_object_get(json_object_get(o.root, "pipeline"), "stages");
    double want_span = 0, naive_bott = 0, naive_pass = 0;
    int naive_m = 0;
    for (int j = 0; j < 2; j++) {
        int first = (int)json_integer_value(
            json_array_get(json_object_get(json_array_get(stages, 0), "ranks"), j));
        int mj = (o.shares[first] + 1) / 2;
        double bott = 0, pass = 0;
        for (int s = 0; s < 2; s++) {
            json_t *st = json_array_get(stages, s);
            int r = (int)json_integer_value(json_array_get(json_object_get(st, "ranks"), j));
            double t = pts_t[1] / skew[r] * (double)json_integer_value(json_object_get(st, "layers")) / 4;
            bott = fmax(bott, t);
            pass += t;
            naive_bott = fmax(naive_bott, t);
        }
        want_span = fmax(want_span, (mj - 1) * bott + pass);
        naive_m = mj > naive_m ? mj : naive_m;
    }
    for (int s = 0; s < 2; s++) {
        json_t *st = json_array_get(stages, s);
        double ts = 0;
        for (int j = 0; j < 2; j++) {
            int r = (int)json_integer_value(json_array_get(json_object_get(st, "ranks"), j));
            ts = fmax(ts, pts_t[1] / skew[r] * (double)json_integer_value(json_object_get(st, "layers")) / 4);
        }
        naive_pass += ts;
    }
    double got_span = 0;
    json_t *terms = json_object_get(o.root, "explain"), *t;
    size_t ti;
    json_array_foreach(terms, ti, t) {
        if (!strncmp(json_string_value(json_object_get(t, "term")), "pipeline:", 9))
            got_span += json_real_value(json_object_get(t, "seconds"));
    }
    assert_true(fabs(got_span - want_span) < 1e-9);
    /* the shares differ, so the naive span is longer: the test tells them apart */
    assert_true((naive_m - 1) * naive_bott + naive_pass > want_span + 1e-3);
    json_decref(o.root);
    ai_kb_close(kb);

    kb = new_kb(even, 4);
    import_arms(kb, 16, 24);
    plan(kb, 48, NULL, &o);
    for (int i = 0; i < 4; i++)
        assert_int_equal(o.shares[i], 12);
    json_decref(o.root);

    /* bad pins and missing profiles are refused with the reason */
    ai_train_plan *p = NULL;
    ai_train_plan_options opt = {.global_batch = 48, .fix = "shares=1/2/3"};
    assert_int_equal(ai_plan_train(kb, &opt, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "3 counts for 4 ranks"));
    opt.fix = "shares=12/12/12/11";
    assert_int_equal(ai_plan_train(kb, &opt, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "sum to 47"));
    opt.fix = "tp=2";
    assert_int_equal(ai_plan_train(kb, &opt, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "unknown key 'tp'"));
    opt.fix = NULL;
    opt.ranks = 6;
    assert_int_equal(ai_plan_train(kb, &opt, &p), AI_ERR_NOTFOUND);
    assert_non_null(strstr(ai_last_error(), "no profile of rank 4"));
    ai_kb_close(kb);
    kb = new_kb(even, 0);
    opt.ranks = 0;
    assert_int_equal(ai_plan_train(kb, &opt, &p), AI_ERR_NOTFOUND);
    assert_non_null(strstr(ai_last_error(), "no compute profile"));
    ai_kb_close(kb);
}

/* The CLI: profile import refuses a bad file (exit 1, the path named) and
 * stores a good one; plan train --out writes what --json prints. */
static void test_cli(void **state)
{
    (void)state;
    const char *bin = getenv("AUTOINFRA_BIN");
    if (!bin)
        skip();
    static char out[1 << 16], err[1 << 16], out2[1 << 16];
    const double sp[] = {1, 0.5};
    char kbp[PATH_MAX + 16], pp[PATH_MAX + 16], planp[PATH_MAX + 16];
    ai_kb_close(new_kb(sp, 0));
    path_in(kbp, sizeof kbp, "kb.sqlite");
    path_in(pp, sizeof pp, "cli.json");
    path_in(planp, sizeof planp, "plan.json");
    json_t *j = profile_json(sp, 2);
    json_object_set_new(json_array_get(json_object_get(j, "ranks"), 1), "optimizer_s",
                        json_string("fast"));
    dump(j, pp);
    char *imp[] = {(char *)bin, "profile", "import", pp, "--kb", kbp, NULL};
    assert_int_equal(cmdtest_run(imp, 30, out, sizeof out, err, sizeof err), 1);
    assert_non_null(strstr(err, "ranks[1].optimizer_s: want a number >= 0"));
    dump(profile_json(sp, 2), pp);
    assert_int_equal(cmdtest_run(imp, 30, out, sizeof out, err, sizeof err), 0);
    char *show[] = {(char *)bin, "profile", "show", "--kb", kbp, "--json", NULL};
    assert_int_equal(cmdtest_run(show, 30, out, sizeof out, err, sizeof err), 0);
    json_error_t e;
    json_t *root = json_loads(out, 0, &e);
    assert_non_null(root);
    assert_int_equal(json_array_size(json_object_get(root, "profiles")), 2);
    json_decref(root);
    char *pl[] = {(char *)bin, "plan", "train", "--kb", kbp, "--global-batch", "24",
                  "--json", "--out", planp, NULL};
    assert_int_equal(cmdtest_run(pl, 30, out, sizeof out, err, sizeof err), 0);
    FILE *f = fopen(planp, "r");
    assert_non_null(f);
    size_t n = fread(out2, 1, sizeof out2 - 1, f);
    fclose(f);
    out2[n] = '\0';
    assert_string_equal(out, out2);
    char *bad[] = {(char *)bin, "plan", "train", "--kb", kbp, "--global-batch", "24", "--fix",
                   "shares=1/2", NULL};
    assert_int_equal(cmdtest_run(bad, 30, out, sizeof out, err, sizeof err), 2);
    assert_non_null(strstr(err, "sum to 3, not the global batch 24"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_roundtrip),
        cmocka_unit_test(test_profile_refused),
        cmocka_unit_test(test_plan_sources),
        cmocka_unit_test(test_plan_sources_edges),
        cmocka_unit_test(test_plan_step_terms),
        cmocka_unit_test(test_plan_micro_batch),
        cmocka_unit_test(test_plan_decisions),
        cmocka_unit_test(test_plan_shares),
        cmocka_unit_test_setup_teardown(test_cli, cmdtest_setup, cmdtest_teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
