/*
 * The training-job planner (docs/planner.md, "Planning the training job
 * from the knowledge base"): the data-parallel CPU job of autoinfra.train
 * planned on what the knowledge base measured, each rank's compute profile
 * and the learner's allreduce timings of the same fingerprint, instead of
 * catalogue figures.
 *
 * The model of one step, every term with its source:
 *   compute_i = floor(b_i/m) f_i(m) + f_i(b_i mod m), f_i the rank's
 *       measured forward+backward seconds at a batch (piecewise linear
 *       between the profile's points, the least-squares line
 *       t = a_i + c_i b outside them): kb:profile rank i;
 *   the gradient reduction: DDP's buckets (the first 1 MiB, then
 *       bucket_cap_mb each) reduced in order as the last micro-batch's
 *       backward (MODEL_BWD_FRACTION of its pass) produces them on the
 *       slowest rank, one allreduce after the other; each allreduce's
 *       time the learner's best arm at that size (log-log interpolated
 *       between measured buckets: kb:learner), else an alpha-beta ring
 *       fitted to the measured buckets (model), else a ring on the
 *       cluster spec's slowest NIC, or 10 Gbit/s and 50 us without one
 *       (catalogue);
 *   step = max_i compute_i + what of the reduction is left after the
 *       slowest backward ends + max_i optimizer_i (kb:profile).
 * A pipeline of P stages (ranks grouped by speed, layers in proportion to
 * the stage's speed) is predicted the same way: 1F1B over M micro-batches,
 * activations between stages, each stage's own (smaller) reduction.
 *
 * The plan layer reads the KB through the public section of autoinfra.h
 * only (ai_kb_profile_foreach, ai_kb_foreach).
 */
#include "autoinfra.h"
#include "model/model.h"
#include "util/util.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Catalogue link when the KB has no allreduce timings: 10 Gbit/s, 50 us. */
#define TRAIN_CAT_BPS 1.25e9
#define TRAIN_CAT_ALPHA 50e-6
#define TRAIN_MAX_RANKS 1024
#define TRAIN_MAX_BUCKETS 4096
#define TRAIN_MAX_BATCH 1000000
#define TRAIN_SRC 192
/* How much less a data-parallel plan of smaller micro-batches must predict
 * to be chosen over larger ones: a rank's profile points scatter by up to
 * about 10% around the line through them (3-11% RMS over 16 rank profiles
 * of the tiny model on T5, docs/planner.md). */
#define TRAIN_MB_MARGIN 0.10

/* One rank's compute model. */
typedef struct {
    model_job_rank fit; /* the profile's points and the line through them */
    double opt_s;
    double red_s;  /* compute seconds one allreduce of G beside it takes from
                    * the rank (allreduce_beside_s; 0: not measured) */
    double over_s; /* the step's work outside compute and optimizer */
    char host[64];
} rank_model;

/* The learner's best allreduce arm of one size bucket. */
typedef struct {
    double bytes, s;
    char algo[32];
} ar_point;

typedef struct {
    ar_point *pt;
    int n, cap;
    int nranks;   /* the fingerprint's */
    double A, B;  /* fitted t = A + B bytes (world allreduce); valid when fitted */
    int fitted;   /* 0: fewer than two sizes, or the fit's B (kept) not positive */
    char fp[17];
    double cat_alpha, cat_bps; /* the catalogue link */
    char cat[64];
} ar_model;

typedef struct {
    int R, L, dim, ctx;
    double G;
    rank_model *rk;
    ar_model ar;
    /* scratch of eval_dp: per rank, per bucket */
    model_ddp_rank *rr;
    double *bsz, *bsec;
} train_ctx;

/* One explain term. */
typedef struct {
    char term[128];
    double s;
    char src[TRAIN_SRC];
} term;

typedef struct {
    int *shares;
    int mb;
    double cap_mb;
    int pp;               /* 1: data parallel only */
    int *stage_layers;    /* pp entries */
    int *stage_of;        /* per rank: its stage */
    int *replica_of;      /* per rank: its replica (the j-th rank of every stage is replica j) */
    int micro_batches;    /* pipeline: per replica */
    double step, compute, exposed, opt, over;
    int slow;
    term *terms;
    int nterms, capterms;
} train_eval;

/* One choice the planner made: what won, the runner-up, by how much, and
 * the rule that decided. */
typedef struct {
    char what[32], chosen[64], runner[96];
    double chosen_s, runner_s; /* runner_s NAN: no runner-up */
    char rule[320];
} decision;

#define TRAIN_MAX_DECISIONS 8

struct ai_train_plan {
    char fp[17], preset[32];
    decision dec[TRAIN_MAX_DECISIONS];
    int ndec;
    int R, B;
    train_eval best;
    train_eval best_dp;  /* the best data-parallel plan (for the pipeline's explanation) */
    int has_pipe;
    train_eval best_pipe;
    char *notes;         /* what was considered, one line each */
    size_t nlen, ncap;
};

/* -------------------------------------------------------- compute model */

static double fwd_bwd(const rank_model *r, int m) { return model_job_fwd_bwd(&r->fit, m); }

static double rank_compute(const rank_model *r, int b, int m)
{
    return model_job_compute(&r->fit, b, m);
}

/* Room for one more of n elements in *arr (capacity *cap); -1 if none. */
static int grow(void **arr, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return 0;
    int c = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

/* ---------------------------------------------------- allreduce model */

static int collect_arm(const ai_kb_arm *a, void *arg)
{
    ar_model *ar = arg;
    if (a->coll != AI_ALLREDUCE || !a->best)
        return 0;
    if (grow((void **)&ar->pt, ar->n, &ar->cap, sizeof *ar->pt))
        return 1;
    ar_point *p = &ar->pt[ar->n++];
    p->bytes = (double)a->bytes;
    p->s = a->mean_us * 1e-6;
    snprintf(p->algo, sizeof p->algo, "%s", a->algo);
    ar->nranks = a->nranks;
    return 0;
}

/* t = A + B bytes fitted to the measured sizes (model_fit_line_rel) */
static void ar_fit(ar_model *ar)
{
    double *x = malloc((size_t)(ar->n + 1) * 2 * sizeof *x), *t = x ? x + ar->n + 1 : NULL;
    ar->fitted = 0;
    if (!x)
        return;
    for (int i = 0; i < ar->n; i++) {
        x[i] = ar->pt[i].bytes;
        t[i] = ar->pt[i].s;
    }
    ar->fitted = model_fit_line_rel(ar->n, x, t, &ar->A, &ar->B);
    free(x);
}

static void fmt_size(double bytes, char *buf, size_t len)
{
    if (bytes >= 1 << 20)
        snprintf(buf, len, "%.4g MiB", bytes / (1 << 20));
    else if (bytes >= 1 << 10)
        snprintf(buf, len, "%.4g KiB", bytes / (1 << 10));
    else
        snprintf(buf, len, "%g B", bytes);
}

/* Seconds of an allreduce of `bytes` over `k` ranks (the fingerprint's
 * ranks, or a sub-group of them), and where the figure came from. */
static double ar_time(const ar_model *ar, double bytes, int k, char src[TRAIN_SRC])
{
    char s1[32], s2[32];
    int R = ar->nranks > 1 ? ar->nranks : k;
    if (k <= 1) {
        snprintf(src, TRAIN_SRC, "model (one rank: nothing to reduce)");
        return 0;
    }
    /* A learner bucket of `bytes` holds the calls of [bytes, 2 bytes): the
     * measured range ends at twice the largest bucket. */
    if (k == R && ar->n > 0 && bytes >= ar->pt[0].bytes &&
        bytes < 2 * ar->pt[ar->n - 1].bytes) {
        int i = 0;
        while (i + 1 < ar->n && ar->pt[i + 1].bytes <= bytes)
            i++;
        const ar_point *lo = &ar->pt[i], *hi = &ar->pt[i + 1 < ar->n ? i + 1 : i];
        fmt_size(lo->bytes, s1, sizeof s1);
        if (bytes == lo->bytes) {
            snprintf(src, TRAIN_SRC, "kb:learner %s %s", lo->algo, s1);
            return lo->s;
        }
        if (lo == hi) { /* inside the largest bucket, above its edge: its calls' time */
            fmt_size(2 * lo->bytes, s2, sizeof s2);
            snprintf(src, TRAIN_SRC, "kb:learner %s %s (its bucket: calls of %s..%s)",
                     lo->algo, s1, s1, s2);
            return lo->s;
        }
        fmt_size(hi->bytes, s2, sizeof s2);
        double f = log(bytes / lo->bytes) / log(hi->bytes / lo->bytes);
        snprintf(src, TRAIN_SRC, "kb:learner %s %s..%s %s (interpolated)", lo->algo, s1,
                 hi->algo, s2);
        return exp(log(lo->s) + f * (log(hi->s) - log(lo->s)));
    }
    /* the ring whose world allreduce the fit is, on k ranks */
    double alpha, beta;
    fmt_size(bytes, s1, sizeof s1);
    if (ar->fitted) {
        model_ring_from_line(ar->A, ar->B, R, &alpha, &beta);
        if (k == R)
            snprintf(src, TRAIN_SRC, "model (ring fitted to %d kb:learner sizes; %s not measured)",
                     ar->n, s1);
        else
            snprintf(src, TRAIN_SRC, "model (ring fitted to %d kb:learner sizes, on %d of %d ranks)",
                     ar->n, k, R);
    } else {
        alpha = ar->cat_alpha;
        beta = 1 / ar->cat_bps;
        if (ar->n >= 2) {
            fmt_size(ar->pt[0].bytes, s1, sizeof s1);
            fmt_size(ar->pt[ar->n - 1].bytes, s2, sizeof s2);
            snprintf(src, TRAIN_SRC, "catalogue (ring at %s: the %d kb:learner sizes, %.3g s at"
                                     " %s .. %.3g s at %s, fit a per-byte cost of %.3g ns, not"
                                     " positive)", ar->cat, ar->n, ar->pt[0].s, s1,
                     ar->pt[ar->n - 1].s, s2, ar->B * 1e9);
        } else {
            snprintf(src, TRAIN_SRC, "catalogue (ring at %s: kb:learner has %s)", ar->cat,
                     ar->n ? "one size only" : "no allreduce");
        }
    }
    return model_coll_time(AI_ALLREDUCE, MODEL_ALGO_RING, k, bytes, alpha, beta);
}

/* One message of `bytes` between two ranks: the ring's alpha and beta. */
static double p2p_time(const ar_model *ar, double bytes, char src[TRAIN_SRC])
{
    char tmp[TRAIN_SRC];
    double t2 = ar_time(ar, 2 * bytes, 2, tmp);
    snprintf(src, TRAIN_SRC, "%s", tmp);
    char *p = strstr(src, ", on 2 of");
    if (p)
        snprintf(p, TRAIN_SRC - (size_t)(p - src), ", one message)");
    return model_p2p_from_pair_allreduce(t2);
}

/* ------------------------------------------------------------- terms */

static int add_term(train_eval *e, double s, const char *src, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int add_term(train_eval *e, double s, const char *src, const char *fmt, ...)
{
    if (grow((void **)&e->terms, e->nterms, &e->capterms, sizeof *e->terms))
        return -1;
    term *t = &e->terms[e->nterms++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->term, sizeof t->term, fmt, ap);
    va_end(ap);
    t->s = s;
    snprintf(t->src, sizeof t->src, "%s", src);
    return 0;
}

static void eval_free(train_eval *e)
{
    free(e->shares);
    free(e->stage_layers);
    free(e->stage_of);
    free(e->replica_of);
    free(e->terms);
    memset(e, 0, sizeof *e);
}

static ai_status_t eval_copy(train_eval *dst, const train_eval *src, int R)
{
    eval_free(dst);
    *dst = *src;
    dst->shares = malloc((size_t)R * sizeof *dst->shares);
    dst->stage_of = malloc((size_t)R * sizeof *dst->stage_of);
    dst->replica_of = malloc((size_t)R * sizeof *dst->replica_of);
    dst->stage_layers = malloc((size_t)src->pp * sizeof *dst->stage_layers);
    dst->terms = malloc((size_t)(src->nterms ? src->nterms : 1) * sizeof *dst->terms);
    dst->capterms = src->nterms;
    if (!dst->shares || !dst->stage_of || !dst->replica_of || !dst->stage_layers || !dst->terms) {
        eval_free(dst);
        return util_fail(AI_ERR_NOMEM, "plan train");
    }
    memcpy(dst->shares, src->shares, (size_t)R * sizeof *dst->shares);
    memcpy(dst->stage_of, src->stage_of, (size_t)R * sizeof *dst->stage_of);
    memcpy(dst->replica_of, src->replica_of, (size_t)R * sizeof *dst->replica_of);
    memcpy(dst->stage_layers, src->stage_layers, (size_t)src->pp * sizeof *dst->stage_layers);
    memcpy(dst->terms, src->terms, (size_t)src->nterms * sizeof *dst->terms);
    return AI_OK;
}

/* -------------------------------------------------- data parallel step */

/* The shares that minimise the slowest rank's compute at micro-batch m:
 * one sample at a time to the rank that would finish first with it
 * (optimal for the bottleneck because every compute_i grows with b). */
static void balance(const train_ctx *x, int B, int m, int *b)
{
    for (int i = 0; i < x->R; i++)
        b[i] = 0;
    for (int s = 0; s < B; s++) {
        int arg = 0;
        double best = INFINITY;
        for (int i = 0; i < x->R; i++) {
            double t = rank_compute(&x->rk[i], b[i] + 1, m);
            if (t < best) {
                best = t;
                arg = i;
            }
        }
        b[arg]++;
    }
}

static int bucket_term(train_eval *e, int n, double sz, double t, const char *src)
{
    char s1[32];
    fmt_size(sz, s1, sizeof s1);
    if (n == 1)
        return add_term(e, t, src, "allreduce: a bucket of %s", s1);
    return add_term(e, n * t, src, "allreduce: %d buckets of %s, %.4f s each", n, s1, t);
}

/* The step's overhead outside compute and optimizer (kb:profile
 * step_overhead_s: zero_grad, the batch's windows, the step's bookkeeping),
 * the slowest rank's, as a term of e: its seconds, or -1 out of memory. */
static double overhead_term(const train_ctx *x, train_eval *e)
{
    double vmax = 0;
    int vslow = 0;
    char src[TRAIN_SRC];
    for (int i = 0; i < x->R; i++)
        if (x->rk[i].over_s > vmax) {
            vmax = x->rk[i].over_s;
            vslow = i;
        }
    if (vmax <= 0)
        return 0;
    snprintf(src, sizeof src, "kb:profile rank %d (step_overhead_s)", vslow);
    if (add_term(e, vmax, src, "step overhead: zero_grad, the batch's windows, the step's"
                               " bookkeeping (slowest: rank %d)", vslow))
        return -1;
    return vmax;
}

/* Evaluate data parallelism with shares e->shares, micro-batch e->mb and
 * bucket cap e->cap_mb; fills the step and the terms. */
static ai_status_t eval_dp(const train_ctx *x, train_eval *e)
{
    char src[TRAIN_SRC];
    e->nterms = 0;
    e->pp = 1;
    e->stage_layers[0] = x->L;
    for (int i = 0; i < x->R; i++)
        e->stage_of[i] = 0;
    e->micro_batches = 0;
    /* DDP reduces every bucket but the last while the backward still
     * runs, on the rank's own CPU share: red_s per G of them is compute
     * time lost (kb:profile allreduce_beside_s) */
    double capb = e->cap_mb * 1024 * 1024;
    double beside = model_ddp_beside_fraction(x->G, capb);
    double cmax = 0, omax = 0, cslow = 0;
    int slow = 0, oslow = 0;
    model_ddp_rank *rr = x->rr;
    for (int i = 0; i < x->R; i++) {
        double c0 = rank_compute(&x->rk[i], e->shares[i], e->mb);
        rr[i].compute_s = c0;
        rr[i].last_bwd_s = model_job_last_backward(&x->rk[i].fit, e->shares[i], e->mb);
        rr[i].lost_s = e->shares[i] > 0 ? beside * x->rk[i].red_s : 0;
        double c = c0 + rr[i].lost_s;
        if (c > cmax) {
            cmax = c;
            cslow = c0;
            slow = i;
        }
        if (x->rk[i].opt_s > omax) {
            omax = x->rk[i].opt_s;
            oslow = i;
        }
    }
    snprintf(src, sizeof src, "kb:profile rank %d", slow);
    int sb = e->shares[slow], nmb = (sb + e->mb - 1) / e->mb;
    if (add_term(e, cslow, src, "compute: rank %d (slowest), %d samples as %d x %d", slow, sb,
                 nmb, e->mb < sb ? e->mb : sb))
        return util_fail(AI_ERR_NOMEM, "plan train");
    if (cmax > cslow) {
        char s1[32];
        fmt_size(x->G - model_ddp_last_bucket(x->G, capb), s1, sizeof s1);
        snprintf(src, sizeof src, "kb:profile rank %d (allreduce_beside_s)", slow);
        if (add_term(e, cmax - cslow, src, "compute: rank %d's time lost to the %s of buckets"
                                           " reduced beside its backward", slow, s1))
            return util_fail(AI_ERR_NOMEM, "plan train");
    }
    /* buckets in backward order, each at its measured (or modelled) time;
     * equal consecutive buckets make one term */
    double *sizes = x->bsz, *secs = x->bsec;
    int nb = model_ddp_buckets(x->G, capb, sizes, TRAIN_MAX_BUCKETS), run = 0;
    double total = 0, run_sz = 0, run_t = 0;
    char run_src[TRAIN_SRC] = "";
    for (int k = 0; k < nb; k++) {
        double sz = sizes[k], t = secs[k] = ar_time(&x->ar, sz, x->R, src);
        total += t;
        if (run && sz == run_sz && !strcmp(src, run_src)) {
            run++;
        } else {
            if (run && bucket_term(e, run, run_sz, run_t, run_src))
                return util_fail(AI_ERR_NOMEM, "plan train");
            run = 1;
            run_sz = sz;
            run_t = t;
            snprintf(run_src, sizeof run_src, "%s", src);
        }
    }
    if (run && bucket_term(e, run, run_sz, run_t, run_src))
        return util_fail(AI_ERR_NOMEM, "plan train");
    double end = model_ddp_reduction_end(x->R, rr, beside, nb, sizes, secs, x->G);
    double exposed = fmax(0, end - cmax);
    if (add_term(e, exposed - total, "model (buckets reduced during the last backward)",
                 "overlap: reduction hidden behind the backward") ||
        (snprintf(src, sizeof src, "kb:profile rank %d", oslow),
         add_term(e, omax, src, "optimizer step (slowest: rank %d)", oslow)))
        return util_fail(AI_ERR_NOMEM, "plan train");
    double vmax = overhead_term(x, e);
    if (vmax < 0)
        return util_fail(AI_ERR_NOMEM, "plan train");
    e->compute = cmax;
    e->exposed = exposed;
    e->opt = omax;
    e->over = vmax;
    e->slow = slow;
    e->step = cmax + exposed + omax + vmax;
    return AI_OK;
}

/* ----------------------------------------------------------- pipeline */

/* Evaluate P stages: ranks sorted by speed, stage s = the s-th group of
 * R/P, replica j = the j-th rank of every stage; layers in proportion to
 * the stage's slowest rank; the batch split over the replicas by their
 * bottleneck stage. */
static ai_status_t eval_pipe(const train_ctx *x, int B, int P, train_eval *e)
{
    int R = x->R, k = R / P, order[TRAIN_MAX_RANKS];
    char src[TRAIN_SRC], s1[32];
    double speed[TRAIN_MAX_RANKS];
    for (int i = 0; i < R; i++) { /* fastest (lowest seconds per sample) first, stable */
        int j = i;
        while (j > 0 && x->rk[order[j - 1]].fit.c > x->rk[i].fit.c) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int s = 0; s < P; s++) {
        double cworst = 0;
        for (int j = 0; j < k; j++) {
            e->stage_of[order[s * k + j]] = s;
            e->replica_of[order[s * k + j]] = j;
            cworst = fmax(cworst, x->rk[order[s * k + j]].fit.c);
        }
        speed[s] = 1 / cworst;
    }
    ai_status_t st = ai_shares_split(P, speed, x->L, e->stage_layers);
    if (st != AI_OK)
        return st;
    /* replica j's per-sample time: its bottleneck stage */
    double rthr[TRAIN_MAX_RANKS];
    int rb[TRAIN_MAX_RANKS];
    for (int j = 0; j < k; j++) {
        double worst = 0;
        for (int s = 0; s < P; s++)
            worst = fmax(worst, model_job_stage_share(x->rk[order[s * k + j]].fit.c, e->stage_layers[s], x->L));
        rthr[j] = 1 / worst;
    }
    if ((st = ai_shares_split(k, rthr, B, rb)) != AI_OK)
        return st;
    e->pp = P;
    e->nterms = 0;
    int m = e->mb;
    /* the contract's shares sum to B: a replica's samples are listed at
     * its first-stage rank, which takes them in; later stages get their
     * work from the stage before (0 here) */
    for (int s = 0; s < P; s++)
        for (int j = 0; j < k; j++)
            e->shares[order[s * k + j]] = s == 0 ? rb[j] : 0;
    /* 1F1B, per replica j of M_j micro-batches (model_1f1b_time: M_j x its
     * bottleneck stage + the other stages once), each boundary crossed by
     * activations forward and gradients back (model_1f1b_p2p_time). The
     * step waits for the slowest replica; a
     * replica of fewer micro-batches is not charged the largest count. */
    double act = model_job_act_bytes(m, x->ctx, x->dim);
    double tp2p = p2p_time(&x->ar, act, src), compute = 0, worst = 0, sum = 0, p2p = 0;
    int wslow = order[0], wstage = 0, wrep = 0, wM = 1;
    e->micro_batches = 0; /* the plan's: the most of any replica */
    for (int j = 0; j < k; j++) {
        int Mj = (rb[j] + m - 1) / m;
        e->micro_batches = Mj > e->micro_batches ? Mj : e->micro_batches;
        if (Mj == 0)
            continue;
        double ts[TRAIN_MAX_RANKS], pass = 0;
        int at = 0;
        for (int s = 0; s < P; s++) {
            ts[s] = model_job_stage_share(fwd_bwd(&x->rk[order[s * k + j]], m), e->stage_layers[s],
                                          x->L);
            pass += ts[s];
        }
        double span = model_1f1b_time(Mj, P, ts, 1, &at);
        double links = model_1f1b_p2p_time(Mj, P, tp2p);
        if (span + links > compute + p2p) {
            compute = span;
            p2p = links;
            worst = ts[at];
            sum = pass;
            wslow = order[at * k + j];
            wstage = at;
            wrep = j;
            wM = Mj;
        }
    }
    snprintf(s1, sizeof s1, "kb:profile rank %d", wslow);
    char s4[TRAIN_SRC];
    snprintf(s4, sizeof s4, "kb:profile (replica %d's ranks)", wrep);
    if (add_term(e, (wM - 1) * worst, s1,
                 "pipeline: %d more micro-batches of %d through stage %d (rank %d, %d layers)"
                 " of replica %d, the slowest",
                 wM - 1, m, wstage, wslow, e->stage_layers[wstage], wrep) ||
        add_term(e, sum, s4, "pipeline: one micro-batch through all %d stages", P) ||
        add_term(e, p2p, src, "activations: %d x 2 messages of %.0f KiB", wM + P - 2,
                 act / 1024))
        return util_fail(AI_ERR_NOMEM, "plan train");
    double comm = 0;
    for (int s = 0; s < P; s++) {
        char s2[TRAIN_SRC];
        double t = ar_time(&x->ar, model_job_stage_share(x->G, e->stage_layers[s], x->L), k, s2);
        if (t > comm) {
            comm = t;
            snprintf(src, sizeof src, "%s", s2);
        }
    }
    fmt_size(x->G / P, s1, sizeof s1);
    double omax = 0;
    int oslow = 0;
    for (int i = 0; i < R; i++) {
        double o = model_job_stage_share(x->rk[i].opt_s, e->stage_layers[e->stage_of[i]], x->L);
        if (o > omax) {
            omax = o;
            oslow = i;
        }
    }
    char s3[TRAIN_SRC];
    snprintf(s3, sizeof s3, "kb:profile rank %d", oslow);
    double vmax = -1;
    if (add_term(e, comm, src, "allreduce: each stage's gradients over its %d ranks", k) ||
        add_term(e, omax, s3, "optimizer step of a stage's layers (slowest: rank %d)", oslow) ||
        (vmax = overhead_term(x, e)) < 0)
        return util_fail(AI_ERR_NOMEM, "plan train");
    e->compute = compute;
    e->exposed = p2p + comm;
    e->opt = omax;
    e->slow = wslow;
    e->over = vmax;
    e->step = compute + e->exposed + omax + vmax;
    return AI_OK;
}

/* --------------------------------------------------------- the search */

typedef struct {
    int shares_n, *shares, mb, pp;
    double cap_mb;
} train_fix;

static ai_status_t fix_parse(const char *text, int R, train_fix *f)
{
    f->shares_n = 0;
    f->mb = 0;
    f->pp = 0;
    f->cap_mb = 0;
    if (!text || !*text)
        return AI_OK;
    char buf[4096];
    if (strlen(text) >= sizeof buf)
        return util_fail(AI_ERR_INVALID, "--fix: too long");
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end;
        if (!eq)
            return util_fail(AI_ERR_INVALID, "--fix: '%s' is not key=value", kv);
        *eq = '\0';
        const char *v = eq + 1;
        if (!strcmp(kv, "micro_batch") || !strcmp(kv, "mb")) {
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 1 || n > TRAIN_MAX_BATCH)
                return util_fail(AI_ERR_INVALID, "--fix: micro_batch '%s': want 1..%d", v,
                                 TRAIN_MAX_BATCH);
            f->mb = (int)n;
        } else if (!strcmp(kv, "bucket_cap_mb")) {
            double c = strtod(v, &end);
            if (*end || end == v || !(c > 0) || c > 65536)
                return util_fail(AI_ERR_INVALID, "--fix: bucket_cap_mb '%s': want > 0 (MiB)", v);
            f->cap_mb = c;
        } else if (!strcmp(kv, "pipeline") || !strcmp(kv, "pp")) {
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 1 || n > R || R % n)
                return util_fail(AI_ERR_INVALID, "--fix: pipeline '%s': want stages dividing the"
                                               " %d ranks (1: none)", v, R);
            f->pp = (int)n;
        } else if (!strcmp(kv, "shares")) {
            const char *p = v;
            f->shares_n = 0;
            while (*p) {
                long n = strtol(p, &end, 10);
                if (end == p || n < 0 || n > TRAIN_MAX_BATCH || (*end && *end != '/') ||
                    f->shares_n == R)
                    return util_fail(AI_ERR_INVALID, "--fix: shares '%s': want %d counts >= 0"
                                                   " separated by '/'", v, R);
                f->shares[f->shares_n++] = (int)n;
                p = *end ? end + 1 : end;
            }
            if (f->shares_n != R)
                return util_fail(AI_ERR_INVALID, "--fix: shares '%s': %d counts for %d ranks", v,
                                 f->shares_n, R);
        } else {
            return util_fail(AI_ERR_INVALID, "--fix: unknown key '%s' (shares, micro_batch,"
                                           " bucket_cap_mb, pipeline)", kv);
        }
    }
    return AI_OK;
}

static const char *shares_str(const int *b, int n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o + 12 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "/" : "", b[i]);
    return buf;
}

static void note(ai_train_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(ai_train_plan *p, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = strlen(line);
    if (p->nlen + len + 2 > p->ncap) {
        size_t cap = p->ncap ? 2 * p->ncap + len : 1024 + len;
        char *nn = realloc(p->notes, cap);
        if (!nn)
            return;
        p->notes = nn;
        p->ncap = cap;
    }
    memcpy(p->notes + p->nlen, line, len);
    p->nlen += len;
    p->notes[p->nlen++] = '\n';
    p->notes[p->nlen] = '\0';
}

typedef struct {
    const char *fp, *preset;
    char fps[8][17];
    int nfps;
    char presets[8][32];
    int npresets;
    ai_kb_profile *prof;
    int n, cap;
} prof_collect;

static int collect_profile(const ai_kb_profile *pr, void *arg)
{
    prof_collect *c = arg;
    int seen = 0;
    for (int i = 0; i < c->nfps && !seen; i++)
        seen = !strcmp(c->fps[i], pr->fingerprint);
    if (!seen && c->nfps < 8)
        snprintf(c->fps[c->nfps++], 17, "%s", pr->fingerprint);
    if (c->fp && strcmp(c->fp, pr->fingerprint))
        return 0;
    seen = 0;
    for (int i = 0; i < c->npresets && !seen; i++)
        seen = !strcmp(c->presets[i], pr->preset);
    if (!seen && c->npresets < 8)
        snprintf(c->presets[c->npresets++], 32, "%s", pr->preset);
    if (grow((void **)&c->prof, c->n, &c->cap, sizeof *c->prof))
        return 1;
    c->prof[c->n++] = *pr;
    return 0;
}

/* The profiles of one fingerprint and preset, ranks 0..R-1, into x. */
static ai_status_t load_profiles(ai_kb *kb, const ai_train_plan_options *o, ai_train_plan *p,
                                 train_ctx *x)
{
    prof_collect c = {.fp = o->fingerprint, .preset = o->model};
    ai_status_t st = ai_kb_profile_foreach(kb, NULL, collect_profile, &c);
    if (st != AI_OK)
        goto out;
    if (!c.nfps) {
        st = util_fail(AI_ERR_NOTFOUND, "the knowledge base holds no compute profile: run the"
                                      " training job with --profile-out FILE, then"
                                      " `autoinfra profile import FILE`");
        goto out;
    }
    if (!o->fingerprint && c.nfps > 1) {
        st = util_fail(AI_ERR_INVALID, "profiles of %d fingerprints (%s, %s%s): say which with"
                                     " --fingerprint", c.nfps, c.fps[0], c.fps[1],
                     c.nfps > 2 ? ", ..." : "");
        goto out;
    }
    const char *fp = o->fingerprint ? o->fingerprint : c.fps[0];
    if (!c.npresets) {
        st = util_fail(AI_ERR_NOTFOUND, "no compute profile under fingerprint %s", fp);
        goto out;
    }
    const char *preset = o->model;
    if (!preset && c.npresets > 1) {
        st = util_fail(AI_ERR_INVALID, "profiles of %d models under %s (%s, %s%s): say which with"
                                     " --model", c.npresets, fp, c.presets[0], c.presets[1],
                     c.npresets > 2 ? ", ..." : "");
        goto out;
    }
    if (!preset)
        preset = c.presets[0];
    snprintf(p->fp, sizeof p->fp, "%s", fp);
    snprintf(p->preset, sizeof p->preset, "%s", preset);
    int have = 0;
    for (int i = 0; i < c.n; i++)
        have += !strcmp(c.prof[i].preset, preset);
    if (!have) {
        st = util_fail(AI_ERR_NOTFOUND, "no profile of model '%s' under fingerprint %s", preset, fp);
        goto out;
    }
    int R = o->ranks > 0 ? o->ranks : have;
    if (R > TRAIN_MAX_RANKS) {
        st = util_fail(AI_ERR_INVALID, "%d ranks: at most %d", R, TRAIN_MAX_RANKS);
        goto out;
    }
    x->R = R;
    if (!(x->rk = calloc((size_t)R, sizeof *x->rk))) {
        st = util_fail(AI_ERR_NOMEM, "plan train");
        goto out;
    }
    int *got = calloc((size_t)R, sizeof *got);
    if (!got) {
        st = util_fail(AI_ERR_NOMEM, "plan train");
        goto out;
    }
    for (int i = 0; i < c.n; i++) {
        const ai_kb_profile *pr = &c.prof[i];
        if (strcmp(pr->preset, preset) || pr->rank >= R)
            continue;
        rank_model *r = &x->rk[pr->rank];
        r->fit.n = pr->npoints;
        for (int j = 0; j < r->fit.n; j++) {
            r->fit.b[j] = pr->point[j].batch;
            r->fit.t[j] = pr->point[j].fwd_bwd_s;
        }
        r->opt_s = pr->optimizer_s;
        r->red_s = pr->allreduce_beside_s;
        r->over_s = pr->step_overhead_s;
        snprintf(r->host, sizeof r->host, "%s", pr->host);
        model_job_rank_fit(&r->fit);
        got[pr->rank] = 1;
        x->L = pr->layers;
        x->dim = pr->dim;
        x->ctx = pr->ctx;
        x->G = (double)pr->grad_bytes;
    }
    for (int i = 0; i < R && st == AI_OK; i++)
        if (!got[i])
            st = util_fail(AI_ERR_NOTFOUND, "no profile of rank %d (model '%s', fingerprint %s):"
                                          " %d ranks asked, %d profiled", i, preset, fp, R, have);
    free(got);
out:
    free(c.prof);
    return st;
}

static void decide(ai_train_plan *p, const char *what, const char *chosen, double chosen_s,
                   const char *runner, double runner_s, const char *rule, ...)
    __attribute__((format(printf, 7, 8)));
static void decide(ai_train_plan *p, const char *what, const char *chosen, double chosen_s,
                   const char *runner, double runner_s, const char *rule, ...)
{
    if (p->ndec >= TRAIN_MAX_DECISIONS)
        return;
    decision *d = &p->dec[p->ndec++];
    snprintf(d->what, sizeof d->what, "%s", what);
    snprintf(d->chosen, sizeof d->chosen, "%s", chosen);
    snprintf(d->runner, sizeof d->runner, "%s", runner ? runner : "");
    d->chosen_s = chosen_s;
    d->runner_s = runner ? runner_s : NAN;
    va_list ap;
    va_start(ap, rule);
    vsnprintf(d->rule, sizeof d->rule, rule, ap);
    va_end(ap);
}

static ai_status_t eval_alloc(train_eval *e, int R)
{
    memset(e, 0, sizeof *e);
    e->shares = calloc((size_t)R, sizeof *e->shares);
    e->stage_of = calloc((size_t)R, sizeof *e->stage_of);
    e->replica_of = calloc((size_t)R, sizeof *e->replica_of);
    e->stage_layers = calloc((size_t)R, sizeof *e->stage_layers);
    if (!e->shares || !e->stage_of || !e->replica_of || !e->stage_layers) {
        eval_free(e);
        return util_fail(AI_ERR_NOMEM, "plan train");
    }
    return AI_OK;
}

void ai_train_plan_destroy(ai_train_plan *p)
{
    if (!p)
        return;
    eval_free(&p->best);
    eval_free(&p->best_dp);
    eval_free(&p->best_pipe);
    free(p->notes);
    free(p);
}

/* The decisions behind p->best: data parallel or a pipeline, the
 * micro-batch, the bucket cap and the shares, each with its runner-up
 * (what it predicted, from the candidates evaluated) and the rule. */
static ai_status_t explain_choices(ai_train_plan *p, const train_ctx *x, const train_fix *fix,
                                   train_eval *e, int B, int ntried, const int *tried_mb,
                                   const double *tried_s, const double *tried_cap,
                                   const double *caps, int ncaps,
                                   double (*cap_s)[9])
{
    char a[96], b[96];
    const train_eval *w = &p->best;
    int R = p->R;
    /* pipeline or data parallel */
    if (p->has_pipe && isfinite(p->best_dp.step)) {
        int pipe = w->pp > 1;
        const train_eval *o = pipe ? &p->best_dp : &p->best_pipe;
        snprintf(a, sizeof a, pipe ? "pipeline of %d stages" : "data parallel", w->pp);
        snprintf(b, sizeof b, pipe ? "data parallel" : "pipeline of %d stages", o->pp);
        decide(p, "layout", a, w->step, b, o->step, "the fastest predicted step (data parallel on"
               " a tie)");
    } else if (w->pp > 1) {
        snprintf(a, sizeof a, "pipeline of %d stages", w->pp);
        decide(p, "layout", a, w->step, NULL, 0, "pinned by --fix pipeline=%d", w->pp);
    } else {
        decide(p, "layout", "data parallel", w->step, NULL, 0, "%s",
               fix->shares_n ? "--fix shares excludes a pipeline"
               : fix->pp == 1 ? "pinned by --fix pipeline=1"
               : x->L < 2     ? "the model has one layer: no pipeline"
                              : "no pipeline stage count divides the ranks");
    }
    if (w->pp > 1) {
        snprintf(a, sizeof a, "%d", w->mb);
        decide(p, "micro_batch", a, w->step, NULL, 0, "the fastest predicted pipeline step of"
               " the candidate micro-batches");
        return AI_OK;
    }
    /* micro-batch: the chosen one against the fastest other */
    int ru = -1;
    for (int i = 0; i < ntried; i++)
        if (tried_mb[i] != w->mb && (ru < 0 || tried_s[i] < tried_s[ru]))
            ru = i;
    snprintf(a, sizeof a, "%d", w->mb);
    if (fix->mb) {
        decide(p, "micro_batch", a, w->step, NULL, 0, "pinned by --fix micro_batch=%d", fix->mb);
    } else if (ru < 0) {
        decide(p, "micro_batch", a, w->step, NULL, 0, "the only candidate (every share is at most"
               " %d samples)", w->mb);
    } else {
        snprintf(b, sizeof b, "%d", tried_mb[ru]);
        if (tried_s[ru] < w->step)
            decide(p, "micro_batch", a, w->step, b, tried_s[ru],
                   "a smaller micro-batch is taken only if it predicts at least %.0f%% less than"
                   " the best larger one; micro-batch %d predicts %.1f%% less (a rank's profile"
                   " points scatter by up to about 10%% around their line, and each micro-batch"
                   " costs a pass)", 100 * TRAIN_MB_MARGIN, tried_mb[ru],
                   100 * (1 - tried_s[ru] / w->step));
        else
            decide(p, "micro_batch", a, w->step, b, tried_s[ru], "the fastest predicted step");
    }
    /* bucket cap at the chosen micro-batch */
    int at = -1;
    for (int i = 0; i < ntried; i++)
        if (tried_mb[i] == w->mb && tried_cap[i] == w->cap_mb)
            at = i;
    snprintf(a, sizeof a, "%g MiB", w->cap_mb);
    if (fix->cap_mb > 0) {
        decide(p, "bucket_cap_mb", a, w->step, NULL, 0, "pinned by --fix bucket_cap_mb=%g",
               w->cap_mb);
    } else if (at < 0 || ncaps < 2) {
        decide(p, "bucket_cap_mb", a, w->step, NULL, 0, "the only candidate");
    } else {
        int rc = -1;
        for (int c = 0; c < ncaps; c++)
            if (caps[c] != w->cap_mb && (rc < 0 || cap_s[at][c] < cap_s[at][rc]))
                rc = c;
        snprintf(b, sizeof b, "%g MiB", caps[rc]);
        decide(p, "bucket_cap_mb", a, w->step, b, cap_s[at][rc], "the fastest predicted step"
               " (the smallest cap on a tie)");
    }
    /* shares: against even ones at the same micro-batch and cap */
    shares_str(w->shares, R, a, sizeof a);
    if (fix->shares_n) {
        decide(p, "shares", a, w->step, NULL, 0, "pinned by --fix shares");
    } else if (R > 1) {
        int even = 1;
        for (int i = 0; i < R; i++) {
            e->shares[i] = B / R + (i < B % R);
            even &= e->shares[i] == w->shares[i];
        }
        if (even) {
            decide(p, "shares", a, w->step, NULL, 0, "the ranks are equally fast: even shares"
                   " minimise the slowest compute");
        } else {
            e->mb = w->mb;
            e->cap_mb = w->cap_mb;
            ai_status_t st = eval_dp(x, e);
            if (st != AI_OK)
                return st;
            shares_str(e->shares, R, b, sizeof b);
            decide(p, "shares", a, w->step, b, e->step, "samples one at a time to the rank that"
                   " would finish its compute first with it: the slowest compute is the"
                   " smallest possible");
        }
    }
    return AI_OK;
}

/* The --fix shares cover the global batch, and exclude a pipeline. */
static ai_status_t check_fix(const train_fix *fix, int R, int B)
{
    if (!fix->shares_n)
        return AI_OK;
    long sum = 0;
    for (int i = 0; i < R; i++)
        sum += fix->shares[i];
    if (sum != B)
        return util_fail(AI_ERR_INVALID, "--fix shares sum to %ld, not the global batch %d", sum, B);
    if (fix->pp > 1)
        return util_fail(AI_ERR_INVALID, "--fix: shares and a pipeline exclude each other (a"
                                       " pipeline's replicas split the batch)");
    return AI_OK;
}

/* The allreduce model: the catalogue link (the cluster spec's slowest NIC
 * when one is given), the learner's timings of the fingerprint and the
 * ring fitted to them; the notes say which the plan stands on. */
static ai_status_t load_allreduce(ai_kb *kb, const ai_train_plan_options *o, ai_train_plan *p,
                                  train_ctx *x)
{
    int R = x->R;
    snprintf(x->ar.fp, sizeof x->ar.fp, "%s", p->fp);
    x->ar.cat_alpha = TRAIN_CAT_ALPHA;
    x->ar.cat_bps = TRAIN_CAT_BPS;
    snprintf(x->ar.cat, sizeof x->ar.cat, "10 Gbit/s, 50 us");
    for (int i = 0; o->cluster && i < ai_cluster_node_count(o->cluster); i++) {
        ai_node_info ni;
        if (ai_cluster_node(o->cluster, i, &ni) != AI_OK || !(ni.nic_Gbps > 0))
            continue;
        if (i == 0 || ni.nic_Gbps * 0.125e9 < x->ar.cat_bps)
            x->ar.cat_bps = ni.nic_Gbps * 0.125e9;
        if (i == 0 || ni.nic_latency_us * 1e-6 > x->ar.cat_alpha)
            x->ar.cat_alpha = ni.nic_latency_us * 1e-6;
        snprintf(x->ar.cat, sizeof x->ar.cat, "%.3g Gbit/s, %.3g us, the cluster's slowest NIC",
                 x->ar.cat_bps * 8e-9, x->ar.cat_alpha * 1e6);
    }
    ai_status_t st = ai_kb_foreach(kb, p->fp, collect_arm, &x->ar);
    if (st != AI_OK)
        return st;
    if (x->ar.n && x->ar.nranks != R)
        note(p, "kb:learner timings of %s are of %d ranks, the plan has %d: scaled by the ring"
                " model", p->fp, x->ar.nranks, R);
    if (!x->ar.n)
        x->ar.nranks = R;
    ar_fit(&x->ar);
    if (x->ar.fitted)
        note(p, "allreduce model: %d measured sizes (%s), ring fit %.1f us + %.3f ns/B",
             x->ar.n, p->fp, x->ar.A * 1e6, x->ar.B * 1e9);
    else if (x->ar.n >= 2)
        note(p, "allreduce model: %d measured sizes (%s) fit a per-byte cost of %.3g ns, not"
                " positive: sizes outside them from the catalogue", x->ar.n, p->fp, x->ar.B * 1e9);
    else
        note(p, "allreduce model: %s", x->ar.n ? "one measured size: other sizes from the"
                                                 " catalogue" : "no kb:learner allreduce timings"
                                                                " for this fingerprint: catalogue");
    return AI_OK;
}

/* One note per rank: the compute model its profile gave. */
static void note_ranks(ai_train_plan *p, const train_ctx *x)
{
    for (int i = 0; i < x->R; i++)
        note(p, "rank %d (%s): t(b) = %.4f + %.4f b s fitted to %d points, optimizer %.4f s,"
                " compute lost per gradient allreduce %.4f s, step overhead %.4f s (kb:profile"
                " rank %d)", i, x->rk[i].host, x->rk[i].fit.a, x->rk[i].fit.c, x->rk[i].fit.n, x->rk[i].opt_s,
             x->rk[i].red_s, x->rk[i].over_s, i);
}

/* Bucket caps around DDP's default. */
static const double train_caps[] = {1, 2, 4, 8, 16, 25, 32, 64, 128};
#define TRAIN_NCAPS ((int)(sizeof train_caps / sizeof train_caps[0]))

/* The search's candidates, and what each predicted, for the decisions:
 * per micro-batch its best step and cap, and every cap's step. */
typedef struct {
    int mbs[AI_PROFILE_POINTS + 2], nmb;
    int ncaps;
    int tried_mb[AI_PROFILE_POINTS + 2], ntried;
    double tried_s[AI_PROFILE_POINTS + 2], tried_cap[AI_PROFILE_POINTS + 2];
    double cap_s[AI_PROFILE_POINTS + 2][TRAIN_NCAPS];
} train_search;

/* candidates: no accumulation (one micro-batch), then the measured
 * points from the largest down; bucket caps around DDP's default. A
 * micro-batch below the best one so far must predict TRAIN_MB_MARGIN
 * less: the profile's points scatter by that much (above), and
 * accumulating gradients on noise costs a pass per micro-batch. */
static void search_candidates(const train_ctx *x, const train_fix *fix, int B, train_search *sr)
{
    sr->nmb = 0;
    sr->ntried = 0;
    if (fix->mb) {
        sr->mbs[sr->nmb++] = fix->mb;
    } else {
        sr->mbs[sr->nmb++] = B;
        for (int j = x->rk[0].fit.n - 1; j >= 0; j--)
            sr->mbs[sr->nmb++] = x->rk[0].fit.b[j];
    }
    sr->ncaps = fix->cap_mb > 0 ? 1 : TRAIN_NCAPS;
}

/* Data parallel: each micro-batch candidate with its shares, at every
 * bucket cap; the best into p->best_dp. */
static ai_status_t search_dp(ai_train_plan *p, const train_ctx *x, const train_fix *fix,
                             train_eval *e, int B, train_search *sr)
{
    int R = x->R, last_mb = 0;
    char sbuf[256];
    ai_status_t st;
    for (int mi = 0; mi < sr->nmb && fix->pp <= 1; mi++) {
        e->mb = sr->mbs[mi];
        if (fix->shares_n)
            memcpy(e->shares, fix->shares, (size_t)R * sizeof *e->shares);
        else
            balance(x, B, e->mb, e->shares);
        int maxb = 1;
        for (int i = 0; i < R; i++)
            maxb = e->shares[i] > maxb ? e->shares[i] : maxb;
        e->mb = e->mb < maxb ? e->mb : maxb; /* above the largest share: no accumulation */
        if (e->mb == last_mb)
            continue; /* the candidates above the largest share, once */
        last_mb = e->mb;
        double mb_best = INFINITY, mb_cap = 0;
        for (int ci = 0; ci < sr->ncaps; ci++) {
            e->cap_mb = fix->cap_mb > 0 ? fix->cap_mb : train_caps[ci];
            if ((st = eval_dp(x, e)) != AI_OK)
                return st;
            if (e->step < mb_best) {
                mb_best = e->step;
                mb_cap = e->cap_mb;
            }
            sr->cap_s[sr->ntried][ci] = e->step;
            double need = e->mb < p->best_dp.mb ? 1 - TRAIN_MB_MARGIN : 1;
            if (e->step < need * p->best_dp.step && (st = eval_copy(&p->best_dp, e, R)) != AI_OK)
                return st;
        }
        note(p, "data parallel, micro-batch %d (shares %s): best bucket cap %g MiB, %.4f s",
             e->mb, shares_str(e->shares, R, sbuf, sizeof sbuf), mb_cap, mb_best);
        sr->tried_mb[sr->ntried] = e->mb;
        sr->tried_s[sr->ntried] = mb_best;
        sr->tried_cap[sr->ntried++] = mb_cap;
    }
    return AI_OK;
}

/* Pipelines of 2+ stages, R divisible; the best into p->best_pipe, and a
 * note on why it wins or not. */
static ai_status_t search_pipe(ai_train_plan *p, const train_ctx *x, const train_fix *fix,
                               train_eval *e, int B, const train_search *sr)
{
    int R = x->R;
    ai_status_t st;
    for (int P = 2; P <= R && P <= x->L && (fix->pp == 0 || fix->pp > 1) && !fix->shares_n; P++) {
        if (R % P || (fix->pp && P != fix->pp))
            continue;
        for (int mi = 0; mi < sr->nmb; mi++) {
            e->mb = sr->mbs[mi] < B ? sr->mbs[mi] : B;
            e->cap_mb = fix->cap_mb > 0 ? fix->cap_mb : 25;
            if ((st = eval_pipe(x, B, P, e)) != AI_OK)
                return st;
            if (e->step < p->best_pipe.step && (st = eval_copy(&p->best_pipe, e, R)) != AI_OK)
                return st;
            p->has_pipe = 1;
        }
    }
    if (p->has_pipe) {
        char lay[256];
        int n = 0;
        for (int s = 0; s < p->best_pipe.pp && n < (int)sizeof lay - 8; s++)
            n += snprintf(lay + n, sizeof lay - (size_t)n, "%s%d", s ? "+" : "",
                          p->best_pipe.stage_layers[s]);
        note(p, "best pipeline: %d stages, layers %s, micro-batch %d x %d: %.4f s", p->best_pipe.pp,
             lay, p->best_pipe.mb, p->best_pipe.micro_batches, p->best_pipe.step);
        if (p->best_dp.step <= p->best_pipe.step)
            note(p, "no pipeline: data parallel %.4f s beats it; the pipeline's bubble and"
                    " activations (%.4f s compute, %.4f s messages and reduction) cost more than"
                    " the reduction it shrinks (data parallel exposes %.4f s)",
                 p->best_dp.step, p->best_pipe.compute, p->best_pipe.exposed,
                 p->best_dp.exposed);
    } else if (!fix->shares_n && fix->pp != 1) {
        note(p, "no pipeline: %s", x->L < 2 ? "the model has one layer" : "no stage count divides"
                                                                         " the ranks");
    }
    return AI_OK;
}

ai_status_t ai_plan_train(ai_kb *kb, const ai_train_plan_options *o, ai_train_plan **out)
{
    if (!kb || !o || !out)
        return util_fail(AI_ERR_INVALID, "ai_plan_train: kb, options or out is NULL");
    if (o->global_batch < 1 || o->global_batch > TRAIN_MAX_BATCH)
        return util_fail(AI_ERR_INVALID, "global batch %d: want 1..%d", o->global_batch,
                         TRAIN_MAX_BATCH);
    if (o->ranks < 0)
        return util_fail(AI_ERR_INVALID, "%d ranks", o->ranks);
    ai_train_plan *p = calloc(1, sizeof *p);
    train_ctx x = {0};
    train_eval e = {0};
    int fixed_shares[TRAIN_MAX_RANKS];
    train_fix fix = {.shares = fixed_shares};
    train_search sr;
    if (!p)
        return util_fail(AI_ERR_NOMEM, "plan train");
    ai_status_t st = load_profiles(kb, o, p, &x);
    if (st != AI_OK)
        goto fail;
    int R = x.R, B = o->global_batch;
    x.rr = malloc((size_t)R * sizeof *x.rr);
    x.bsz = malloc(2 * TRAIN_MAX_BUCKETS * sizeof *x.bsz);
    x.bsec = x.bsz ? x.bsz + TRAIN_MAX_BUCKETS : NULL;
    if (!x.rr || !x.bsz) {
        st = util_fail(AI_ERR_NOMEM, "plan train");
        goto fail;
    }
    p->R = R;
    p->B = B;
    if ((st = fix_parse(o->fix, R, &fix)) != AI_OK || (st = check_fix(&fix, R, B)) != AI_OK ||
        (st = load_allreduce(kb, o, p, &x)) != AI_OK)
        goto fail;
    note_ranks(p, &x);
    if ((st = eval_alloc(&e, R)) != AI_OK || (st = eval_alloc(&p->best, R)) != AI_OK ||
        (st = eval_alloc(&p->best_dp, R)) != AI_OK || (st = eval_alloc(&p->best_pipe, R)) != AI_OK)
        goto fail;
    p->best.step = p->best_dp.step = p->best_pipe.step = INFINITY;

    search_candidates(&x, &fix, B, &sr);
    if ((st = search_dp(p, &x, &fix, &e, B, &sr)) != AI_OK ||
        (st = search_pipe(p, &x, &fix, &e, B, &sr)) != AI_OK)
        goto fail;
    const train_eval *win = p->best_dp.step <= p->best_pipe.step ? &p->best_dp : &p->best_pipe;
    if (!isfinite(win->step)) {
        st = util_fail(AI_ERR_INFEASIBLE, "no plan could be evaluated");
        goto fail;
    }
    if ((st = eval_copy(&p->best, win, R)) != AI_OK)
        goto fail;
    if ((st = explain_choices(p, &x, &fix, &e, B, sr.ntried, sr.tried_mb, sr.tried_s,
                              sr.tried_cap, train_caps, sr.ncaps, sr.cap_s)) != AI_OK)
        goto fail;
    eval_free(&e);
    free(x.rk);
    free(x.ar.pt);
    free(x.rr);
    free(x.bsz);
    *out = p;
    return AI_OK;
fail:
    eval_free(&e);
    free(x.rk);
    free(x.ar.pt);
    free(x.rr);
    free(x.bsz);
    ai_train_plan_destroy(p);
    return st;
}

double ai_train_plan_step_time(const ai_train_plan *p)
{
    return p ? p->best.step : NAN;
}

static json_t *plan_json(const ai_train_plan *p)
{
    const train_eval *e = &p->best;
    json_t *shares = json_array(), *explain = json_array(), *pipe = json_null();
    for (int i = 0; i < p->R; i++)
        json_array_append_new(shares, json_integer(e->shares[i]));
    for (int i = 0; i < e->nterms; i++)
        json_array_append_new(explain, json_pack("{s:s, s:f, s:s}", "term", e->terms[i].term,
                                                 "seconds", e->terms[i].s, "source",
                                                 e->terms[i].src));
    if (e->pp > 1) {
        /* a stage's ranks by replica: the job pairs the j-th rank of
         * every stage into replica j, as the prediction did */
        json_t *stages = json_array();
        int k = p->R / e->pp;
        for (int s = 0; s < e->pp; s++) {
            json_t *ranks = json_array();
            for (int j = 0; j < k; j++)
                for (int i = 0; i < p->R; i++)
                    if (e->stage_of[i] == s && e->replica_of[i] == j)
                        json_array_append_new(ranks, json_integer(i));
            json_array_append_new(stages, json_pack("{s:o, s:i}", "ranks", ranks, "layers",
                                                    e->stage_layers[s]));
        }
        pipe = json_pack("{s:o, s:i}", "stages", stages, "micro_batches", e->micro_batches);
    }
    json_t *dec = json_array();
    for (int i = 0; i < p->ndec; i++) {
        const decision *d = &p->dec[i];
        json_t *o = json_pack("{s:s, s:s, s:f}", "choice", d->what, "chosen", d->chosen,
                              "step_time_s", d->chosen_s);
        if (!isnan(d->runner_s)) {
            json_object_set_new(o, "runner_up", json_string(d->runner));
            json_object_set_new(o, "runner_up_step_time_s", json_real(d->runner_s));
            json_object_set_new(o, "runner_up_vs_chosen",
                                json_real(d->runner_s / d->chosen_s - 1));
        }
        json_object_set_new(o, "rule", json_string(d->rule));
        json_array_append_new(dec, o);
    }
    return json_pack("{s:s, s:i, s:s, s:i, s:i, s:o, s:i, s:f, s:o, s:f, s:o, s:o}", "kind",
                     "train-plan", "version", 1, "fingerprint", p->fp, "ranks", p->R,
                     "global_batch", p->B, "shares", shares, "micro_batch", e->mb,
                     "bucket_cap_mb", e->cap_mb, "pipeline", pipe, "predicted_step_time_s",
                     e->step, "explain", explain, "decisions", dec);
}

ai_status_t ai_train_plan_json(const ai_train_plan *p, char **out)
{
    if (!p || !out)
        return util_fail(AI_ERR_INVALID, "ai_train_plan_json: plan or out is NULL");
    json_t *j = plan_json(p);
    char *s = j ? json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!s)
        return util_fail(AI_ERR_NOMEM, "plan train: JSON");
    *out = s;
    return AI_OK;
}

ai_status_t ai_train_plan_text(const ai_train_plan *p, int explain, char **out)
{
    if (!p || !out)
        return util_fail(AI_ERR_INVALID, "ai_train_plan_text: plan or out is NULL");
    const train_eval *e = &p->best;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return util_fail(AI_ERR_NOMEM, "plan train: text");
    fprintf(f, "training plan: fingerprint %s, model %s, %d ranks, global batch %d\n", p->fp,
            p->preset, p->R, p->B);
    fprintf(f, "  shares      ");
    for (int i = 0; i < p->R; i++)
        fprintf(f, "%s%d", i ? "/" : "", e->shares[i]);
    fprintf(f, "\n  micro-batch %d\n  bucket cap  %g MiB\n", e->mb, e->cap_mb);
    if (e->pp > 1) {
        fprintf(f, "  pipeline    %d stages, %d micro-batches per replica, layers", e->pp,
                e->micro_batches);
        for (int s = 0; s < e->pp; s++)
            fprintf(f, "%s%d", s ? "+" : " ", e->stage_layers[s]);
        fputc('\n', f);
    } else {
        fprintf(f, "  pipeline    none\n");
    }
    fprintf(f, "  predicted   %.4f s per step (compute %.4f + exposed communication %.4f +"
               " optimizer %.4f + step overhead %.4f)\n", e->step, e->compute, e->exposed,
            e->opt, e->over);
    if (explain) {
        fprintf(f, "\nterms (they sum to the step):\n");
        for (int i = 0; i < e->nterms; i++)
            fprintf(f, "  %+10.4f s  %-58s %s\n", e->terms[i].s, e->terms[i].term,
                    e->terms[i].src);
        fprintf(f, "\nwhy:\n");
        for (int i = 0; i < p->ndec; i++) {
            const decision *d = &p->dec[i];
            fprintf(f, "  %s %s (%.4f s)", d->what, d->chosen, d->chosen_s);
            if (!isnan(d->runner_s))
                fprintf(f, " over %s (%.4f s, %.1f%% %s)", d->runner, d->runner_s,
                        100 * fabs(d->runner_s / d->chosen_s - 1),
                        d->runner_s < d->chosen_s ? "less" : "more");
            fprintf(f, ": %s\n", d->rule);
        }
        fprintf(f, "\nconsidered:\n");
        const char *n = p->notes ? p->notes : "";
        while (*n) {
            const char *nl = strchr(n, '\n');
            fprintf(f, "  %.*s\n", (int)(nl ? nl - n : (long)strlen(n)), n);
            n = nl ? nl + 1 : n + strlen(n);
        }
    }
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return util_fail(AI_ERR_NOMEM, "plan train: text");
    }
    *out = buf;
    return AI_OK;
}
