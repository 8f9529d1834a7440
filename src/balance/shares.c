/*
 * Batch shares (docs/planner.md, "Batch shares"): a global batch split over
 * data-parallel ranks of different speeds so that they all reach the
 * gradient reduction together, the gradient weights that keep the update
 * the global-batch mean, and an online model of each rank's step time
 * that re-balances the split as the ranks' speeds change.
 */
#include "autoinfra.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- the split */

ai_status_t ai_shares_split(int nranks, const double *throughput, int global_batch,
                            int *local_batch)
{
    if (nranks < 1 || !throughput || !local_batch)
        return util_fail(AI_ERR_INVALID, "shares: %d ranks, or no arrays", nranks);
    double sum = 0;
    int active = 0;
    for (int i = 0; i < nranks; i++) {
        if (!isfinite(throughput[i]) || throughput[i] < 0)
            return util_fail(AI_ERR_INVALID, "shares: throughput of rank %d is %g, not >= 0", i,
                             throughput[i]);
        sum += throughput[i];
        active += throughput[i] > 0;
    }
    if (active == 0)
        return util_fail(AI_ERR_INVALID, "shares: no rank has a throughput above 0");
    if (global_batch < active)
        return util_fail(AI_ERR_INVALID,
                         "shares: a global batch of %d cannot give each of %d ranks a sample",
                         global_batch, active);
    /* A rank whose quota is under one sample gets exactly one; the others
     * share the rest in proportion (again, until no quota is under one:
     * the free quotas sum to what is left, at least one per free rank, so
     * one rank at least stays free), by largest remainder: floors of the
     * quotas, then one more sample for the largest fractional parts
     * (lower rank first on ties). */
    unsigned char *fixed = calloc((size_t)nranks, 1);
    if (!fixed)
        return util_fail(AI_ERR_NOMEM, "shares");
    int rest = global_batch;
    double rest_thr = sum;
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < nranks; i++)
            if (throughput[i] > 0 && !fixed[i] && rest * (throughput[i] / rest_thr) < 1) {
                fixed[i] = 1;
                rest--;
                rest_thr -= throughput[i];
                again = 1;
            }
    }
    int given = 0;
    for (int i = 0; i < nranks; i++) {
        local_batch[i] = fixed[i] ? 0 : (int)floor(rest * (throughput[i] / rest_thr));
        given += local_batch[i];
    }
    while (given < rest) {
        int best = -1;
        double best_frac = -1;
        for (int i = 0; i < nranks; i++) {
            if (throughput[i] <= 0 || fixed[i])
                continue;
            double frac = rest * (throughput[i] / rest_thr) - local_batch[i];
            if (frac > best_frac) {
                best_frac = frac;
                best = i;
            }
        }
        local_batch[best]++;
        given++;
    }
    for (int i = 0; i < nranks; i++)
        local_batch[i] += fixed[i];
    free(fixed);
    return AI_OK;
}

ai_status_t ai_shares_grad_weights(int nranks, const int *local_batch, double *weights)
{
    if (nranks < 1 || !local_batch || !weights)
        return util_fail(AI_ERR_INVALID, "shares: %d ranks, or no arrays", nranks);
    long total = 0;
    for (int i = 0; i < nranks; i++) {
        if (local_batch[i] < 0)
            return util_fail(AI_ERR_INVALID, "shares: local batch of rank %d is %d", i,
                             local_batch[i]);
        total += local_batch[i];
    }
    if (total == 0)
        return util_fail(AI_ERR_INVALID, "shares: every local batch is 0");
    for (int i = 0; i < nranks; i++)
        weights[i] = (double)local_batch[i] / (double)total;
    return AI_OK;
}

/* ------------------------------------------------ the step-time model */

/* The newest SHARES_WINDOW steps of a rank, weighted SHARES_FORGET^age:
 * about 20 steps of memory, so noise averages out; a change of speed is
 * caught by the change test (two steps in a row off the model the same
 * way), not by forgetting, so it takes two steps, not twenty. */
#define SHARES_WINDOW 32
#define SHARES_FORGET 0.95
/* Residuals beyond OUTLIER_K robust standard deviations (1.4826 x the
 * median absolute residual), and never within OUTLIER_FLOOR of the step
 * time, are outliers: left out of the fit, and a change of speed when two
 * in a row lie on the same side. */
#define OUTLIER_K 4.0
#define OUTLIER_FLOOR 0.05
/* An intercept needs spread in the batch sizes: a relative standard
 * deviation of at least AFFINE_SPREAD over at least 3 kept steps. */
#define AFFINE_SPREAD 0.05
#define SHARES_MIN_STEPS 3

typedef struct step_model {
    double b[SHARES_WINDOW], t[SHARES_WINDOW]; /* ring; k-th newest at (head-1-k) mod W */
    int n, head;
    int last_side; /* +1 / -1: the newest step was an outlier above / below; 0 not */
    int fitted, affine;
    double a, c;
    double thresh_rel; /* outlier threshold of the last fit, relative to t */
    double sigma_rel;  /* robust standard deviation of a step, relative */
    double mean_b, var_b, neff; /* of the steps kept: weighted mean, variance, (sum w)^2 / sum w^2 */
} step_model;

static int ring_at(const step_model *m, int k)
{
    return ((m->head - 1 - k) % SHARES_WINDOW + SHARES_WINDOW) % SHARES_WINDOW;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Weighted least squares of t = a + c b over the kept steps; falls back
 * to t = c b (a = 0) without spread in b or when the line is unphysical
 * (c <= 0, or a < 0). */
static void model_fit_kept(step_model *m, const int *keep)
{
    double sw = 0, sww = 0, sb = 0, st = 0, sbb = 0, sbt = 0, w = 1;
    int kept = 0;
    for (int k = 0; k < m->n; k++, w *= SHARES_FORGET) {
        if (!keep[k])
            continue;
        int j = ring_at(m, k);
        sw += w;
        sww += w * w;
        sb += w * m->b[j];
        st += w * m->t[j];
        sbb += w * m->b[j] * m->b[j];
        sbt += w * m->b[j] * m->t[j];
        kept++;
    }
    double mb = sb / sw, mt = st / sw;
    double var = fmax(0, sbb / sw - mb * mb);
    m->mean_b = mb;
    m->var_b = var;
    m->neff = sw * sw / sww;
    m->affine = 0;
    if (kept >= 3 && var > 0 && sqrt(var) >= AFFINE_SPREAD * mb) {
        double c = (sbt / sw - mb * mt) / var;
        double a = mt - c * mb;
        if (c > 0 && a >= 0) {
            m->a = a;
            m->c = c;
            m->affine = 1;
        }
    }
    if (!m->affine) {
        m->a = 0;
        m->c = st / sb;
    }
}

static void model_fit(step_model *m)
{
    int keep[SHARES_WINDOW];
    double res[SHARES_WINDOW], rel[SHARES_WINDOW];
    for (int k = 0; k < SHARES_WINDOW; k++)
        keep[k] = 1;
    model_fit_kept(m, keep);
    /* One pass of rejection: residuals relative to the prediction, their
     * robust spread, and the fit again without the outliers. */
    for (int k = 0; k < m->n; k++) {
        int j = ring_at(m, k);
        double p = m->a + m->c * m->b[j];
        rel[k] = (m->t[j] - p) / p;
        res[k] = fabs(rel[k]);
    }
    qsort(res, (size_t)m->n, sizeof res[0], cmp_double);
    double mad = m->n % 2 ? res[m->n / 2] : 0.5 * (res[m->n / 2 - 1] + res[m->n / 2]);
    m->thresh_rel = fmax(OUTLIER_K * 1.4826 * mad, OUTLIER_FLOOR);
    int kept = 0;
    for (int k = 0; k < m->n; k++)
        kept += keep[k] = fabs(rel[k]) <= m->thresh_rel;
    if (kept > 0 && kept < m->n)
        model_fit_kept(m, keep);
    m->sigma_rel = 1.4826 * mad;
    m->fitted = 1;
}

/* Relative standard error of the prediction at b: the noise of a step
 * over the steps kept, growing away from their mean batch as a fitted
 * line's does (sigma^2 / neff x (1 + (b - mean)^2 / var)). A line fitted
 * to steps of nearly one size is trusted near that size only. */
static double model_se_rel(const step_model *m, double b)
{
    double d = b - m->mean_b;
    double spread = m->affine && m->var_b > 0 ? d * d / m->var_b : 0;
    return m->sigma_rel * sqrt((1 + spread) / m->neff);
}

/* Where the model's prediction can be held against a step: everywhere
 * for a fitted line, near the batch sizes seen for t = c b (which is only
 * a guess elsewhere: a step at a new size is information, not a change). */
static int model_trusted_at(const step_model *m, double b)
{
    if (m->affine)
        return 1;
    double sw = 0, sb = 0, w = 1;
    for (int k = 0; k < m->n; k++, w *= SHARES_FORGET) {
        sw += w;
        sb += w * m->b[ring_at(m, k)];
    }
    return fabs(b - sb / sw) <= AFFINE_SPREAD * (sb / sw);
}

static void model_observe(step_model *m, double b, double t)
{
    /* Change of speed: this step and the one before lie off the model on
     * the same side; the model restarts from those two. */
    int side = 0;
    if (m->fitted && m->n >= 3 && model_trusted_at(m, b)) {
        double p = m->a + m->c * b;
        double r = (t - p) / p;
        if (fabs(r) > m->thresh_rel)
            side = r > 0 ? 1 : -1;
    }
    m->b[m->head] = b;
    m->t[m->head] = t;
    m->head = (m->head + 1) % SHARES_WINDOW;
    if (m->n < SHARES_WINDOW)
        m->n++;
    if (side != 0 && side == m->last_side)
        m->n = 2;
    m->last_side = side;
    model_fit(m);
}

/* ----------------------------------------------------- the balancer */

struct ai_shares {
    int nranks, global;
    double hysteresis;
    int *cur;
    step_model *model;
};

ai_status_t ai_shares_create(int nranks, int global_batch, double hysteresis, ai_shares **out)
{
    if (!out)
        return util_fail(AI_ERR_INVALID, "shares: no output pointer");
    *out = NULL;
    if (nranks < 1 || nranks > 1000000)
        return util_fail(AI_ERR_INVALID, "shares: %d ranks is not in 1..1000000", nranks);
    if (global_batch < nranks)
        return util_fail(AI_ERR_INVALID, "shares: a global batch of %d cannot give each of %d ranks a sample",
                         global_batch, nranks);
    if (!(hysteresis >= 0 && hysteresis < 1))
        return util_fail(AI_ERR_INVALID, "shares: hysteresis %g is not in [0, 1)", hysteresis);
    ai_shares *s = calloc(1, sizeof *s);
    if (!s)
        return util_fail(AI_ERR_NOMEM, "shares");
    s->nranks = nranks;
    s->global = global_batch;
    s->hysteresis = hysteresis;
    s->cur = calloc((size_t)nranks, sizeof *s->cur);
    s->model = calloc((size_t)nranks, sizeof *s->model);
    double *even = malloc((size_t)nranks * sizeof *even);
    ai_status_t st = AI_ERR_NOMEM;
    if (!s->cur || !s->model || !even) {
        util_fail(AI_ERR_NOMEM, "shares");
        goto err;
    }
    for (int i = 0; i < nranks; i++)
        even[i] = 1;
    if ((st = ai_shares_split(nranks, even, global_batch, s->cur)) != AI_OK)
        goto err;
    free(even);
    *out = s;
    return AI_OK;
err:
    free(even);
    ai_shares_destroy(s);
    return st;
}

void ai_shares_destroy(ai_shares *s)
{
    if (!s)
        return;
    free(s->cur);
    free(s->model);
    free(s);
}

ai_status_t ai_shares_observe(ai_shares *s, int rank, int batch, double seconds)
{
    if (!s || rank < 0 || rank >= s->nranks)
        return util_fail(AI_ERR_INVALID, "shares: rank %d is not in 0..%d", rank, s ? s->nranks - 1 : -1);
    if (batch < 1)
        return util_fail(AI_ERR_INVALID, "shares: rank %d: batch %d is not >= 1", rank, batch);
    if (!isfinite(seconds) || seconds <= 0)
        return util_fail(AI_ERR_INVALID, "shares: rank %d: step time %g s is not > 0", rank, seconds);
    model_observe(&s->model[rank], batch, seconds);
    return AI_OK;
}

ai_status_t ai_shares_model(const ai_shares *s, int rank, double *fixed_s, double *per_sample_s,
                            int *affine)
{
    if (!s || rank < 0 || rank >= s->nranks)
        return util_fail(AI_ERR_INVALID, "shares: rank %d is not in 0..%d", rank, s ? s->nranks - 1 : -1);
    const step_model *m = &s->model[rank];
    if (!m->fitted)
        return util_fail(AI_ERR_INVALID, "shares: rank %d has not been observed yet", rank);
    if (fixed_s)
        *fixed_s = m->a;
    if (per_sample_s)
        *per_sample_s = m->c;
    if (affine)
        *affine = m->affine;
    return AI_OK;
}

static double predicted_max(const ai_shares *s, const int *b)
{
    double worst = 0;
    for (int i = 0; i < s->nranks; i++)
        worst = fmax(worst, s->model[i].a + s->model[i].c * b[i]);
    return worst;
}

/* Shares minimising the largest predicted step time: the level T at which
 * b_i = max(1, (T - a_i) / c_i) sum to B (bisection; the sum grows with
 * T), floors of those, and the samples left one by one to the rank that
 * would finish first with one more (which keeps the maximum least). */
static void shares_balance(const ai_shares *s, int *b)
{
    int n = s->nranks;
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++)
        hi = fmax(hi, s->model[i].a + s->model[i].c * s->global);
    for (int it = 0; it < 200; it++) {
        double mid = 0.5 * (lo + hi), sum = 0;
        for (int i = 0; i < n; i++)
            sum += fmax(1, (mid - s->model[i].a) / s->model[i].c);
        if (sum > s->global)
            hi = mid;
        else
            lo = mid;
    }
    int given = 0;
    for (int i = 0; i < n; i++) {
        double x = fmax(1, (lo - s->model[i].a) / s->model[i].c);
        b[i] = x > s->global ? s->global : (int)floor(x);
        given += b[i];
    }
    /* lo is at or below the level: the floors never exceed B, except
     * through the clamp at 1, which B >= n leaves room for. */
    while (given > s->global) {
        int j = -1;
        double worst = -1;
        for (int i = 0; i < n; i++) {
            double t = s->model[i].a + s->model[i].c * b[i];
            if (b[i] > 1 && t > worst) {
                worst = t;
                j = i;
            }
        }
        b[j]--;
        given--;
    }
    while (given < s->global) {
        int j = 0;
        double best = INFINITY;
        for (int i = 0; i < n; i++) {
            double t = s->model[i].a + s->model[i].c * (b[i] + 1);
            if (t < best) {
                best = t;
                j = i;
            }
        }
        b[j]++;
        given++;
    }
}

ai_status_t ai_shares_rebalance(ai_shares *s, int *local_batch, int *changed, double *predicted_s)
{
    if (!s || !local_batch)
        return util_fail(AI_ERR_INVALID, "shares: no balancer or no output array");
    int moved = 0;
    double pred = 0;
    /* A model needs SHARES_MIN_STEPS steps (since it last restarted)
     * before it moves shares: one step says nothing of its noise. */
    int all = 1;
    for (int i = 0; i < s->nranks; i++)
        all &= s->model[i].fitted && s->model[i].n >= SHARES_MIN_STEPS;
    if (all) {
        int *next = malloc((size_t)s->nranks * sizeof *next);
        if (!next)
            return util_fail(AI_ERR_NOMEM, "shares");
        shares_balance(s, next);
        double now = predicted_max(s, s->cur), then = predicted_max(s, next);
        /* Hysteresis: noise in the models moves the optimum a little
         * every step; a new split must win by more than the hysteresis
         * even when its predictions err by two standard errors. */
        double se = 0;
        for (int i = 0; i < s->nranks; i++)
            se = fmax(se, model_se_rel(&s->model[i], next[i]));
        if (then * (1 + 2 * se) < now * (1 - s->hysteresis) &&
            memcmp(next, s->cur, (size_t)s->nranks * sizeof *next) != 0) {
            memcpy(s->cur, next, (size_t)s->nranks * sizeof *next);
            moved = 1;
        }
        free(next);
        pred = predicted_max(s, s->cur);
    }
    memcpy(local_batch, s->cur, (size_t)s->nranks * sizeof *local_batch);
    if (changed)
        *changed = moved;
    if (predicted_s)
        *predicted_s = pred;
    return AI_OK;
}

ai_status_t ai_shares_set(ai_shares *s, const int *local_batch)
{
    if (!s || !local_batch)
        return util_fail(AI_ERR_INVALID, "shares: no balancer or no shares");
    long sum = 0;
    for (int i = 0; i < s->nranks; i++) {
        if (local_batch[i] < 1)
            return util_fail(AI_ERR_INVALID, "shares: rank %d's share is %d, not >= 1", i,
                             local_batch[i]);
        sum += local_batch[i];
    }
    if (sum != s->global)
        return util_fail(AI_ERR_INVALID, "shares: the shares sum to %ld, not the global batch %d", sum,
                         s->global);
    memcpy(s->cur, local_batch, (size_t)s->nranks * sizeof *local_batch);
    return AI_OK;
}
