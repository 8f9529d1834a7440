/*
 * The learner's statistics (docs/learner.md, "Choosing"): per arm a normal
 * posterior on the log of its call time, and top-two Thompson sampling to
 * pick the next arm while a bucket explores. No ranks, no knowledge base:
 * learn.c runs the protocol around it, tests/test_bandit.c checks it.
 *
 * Log time makes the noise roughly proportional (a few percent at any
 * size) and the model's errors multiplicative.
 *
 * Robustness: an arm's evidence is located by the median of its last
 * TUNE_SAMPLES observations, not their mean, and the noise measured by
 * their median absolute deviation. Timing noise is one-sided and, with
 * ranks sharing cores, bimodal: a rank descheduled for a time slice makes
 * a call several times slower, and with 4 ranks on 2 cores that hits a
 * large share of calls, unevenly between arms that ran at different
 * moments. A mean follows those spikes (on one host at 256 KiB the learner
 * had settled on an arm 2.4x slower than the ring), a median follows the
 * bulk of the calls. A lasting change still moves the median: a settled
 * window far above it twice running restarts the arm's samples. Drift is
 * judged apart (bandit_drifted), against the decayed mean and variance of
 * all the observations: a drift must stand out from all of the noise,
 * spikes included, or a machine with bimodal noise would see drifts in
 * its spikes (test_tune's warm job, with the median's spread there, saw a
 * drift before its drift in 4 of 4 runs at a load of 23 on 2 cores).
 */
#include "tune/tune.h"

#include <math.h>

/* Prior spreads, from the sweeps of bench/learn-eval on T1-T4 (docs/learner.md,
 * "How good the prior is"): the sd of the model's log error on an arm's
 * time relative to its favourite's is 0.11-0.22 per scenario; chunk and
 * channel variants differ from their algorithm's default by 0.06-0.12. */
#define TUNE_PRIOR_MODEL 0.25  /* sd of the model's log prediction */
#define TUNE_PRIOR_VARIANT 0.3 /* chunk / channel variants the model ignores */
#define TUNE_PRIOR_BLIND 0.7   /* arms without a model prediction */
#define TUNE_BIAS_WEIGHT 2     /* the model's shared error is shrunk toward 0
                                * with the weight of this many calls */
#define TUNE_NOISE 0.12        /* prior guess of the sd of one call's log
                                * time; the bucket's own spread replaces it
                                * as calls come in */
#define TUNE_NOISE_WEIGHT 4    /* ... with the weight of this many calls */
#define TUNE_MEMORY 16         /* evidence decays by 1 - 1/TUNE_MEMORY per
                                * call, so drift can move an estimate */
#define TUNE_CONFIDENT 0.95    /* stop exploring at this P(best) ... */
#define TUNE_SETTLE_SAMPLES 3  /* ... with the best arm measured this often */
#define TUNE_CHALLENGER_DRAWS 16 /* draws to find a challenger to the leader */
#define TUNE_CAP 1.5           /* an exploratory observation counts at most
                                * this many sd of noise above its arm's mean
                                * so far */
#define TUNE_SPIKE 3           /* a settled window, this many sd of a
                                * window's noise, unless it lasts */

static double gauss(ai_rng *r)
{
    double u = util_rng_uniform(r), v = util_rng_uniform(r);
    return sqrt(-2 * log(1 - u)) * cos(2 * M_PI * v);
}

static void samples_clear(tune_bandit *b, int i)
{
    b->nsamples[i] = b->sample_at[i] = 0;
}

void bandit_prior(tune_bandit *b, int i, double seconds, int variant)
{
    tune_arm_stat *a = &b->arm[i];
    int known = isfinite(seconds) && seconds > 0;
    double sd = !known ? TUNE_PRIOR_BLIND : variant ? TUNE_PRIOR_VARIANT : TUNE_PRIOR_MODEL;
    b->source[i] = known ? PRIOR_MODEL : PRIOR_BLIND;
    a->m = a->m0 = known ? log(seconds) : 0;
    a->v = a->v0 = sd * sd;
    a->n = 0;
    a->w = a->sy = a->syy = 0;
    b->high[i] = 0;
    samples_clear(b, i);
}

void bandit_prior_known(tune_bandit *b, int i, const tune_arm_stat *known)
{
    tune_arm_stat *a = &b->arm[i];
    a->n = known->n;
    a->m = a->m0 = known->m;
    a->v = a->v0 = fmax(known->v, 1e-6);
    b->source[i] = PRIOR_KB;
    b->high[i] = 0;
    a->w = a->sy = a->syy = 0;
    samples_clear(b, i);
}

/* Weighted median of n values: the smallest value whose cumulative weight
 * reaches half the total (the mean of the two middle ones on a tie). */
static double weighted_median(double *y, double *wt, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n <= TUNE_SAMPLES */
        for (int j = i; j > 0 && y[j] < y[j - 1]; j--) {
            double t = y[j]; y[j] = y[j - 1]; y[j - 1] = t;
            t = wt[j]; wt[j] = wt[j - 1]; wt[j - 1] = t;
        }
    double total = 0, acc = 0;
    for (int i = 0; i < n; i++)
        total += wt[i];
    for (int i = 0; i < n; i++) {
        acc += wt[i];
        if (acc > total / 2 + 1e-12)
            return y[i];
        if (acc >= total / 2 - 1e-12)
            return i + 1 < n ? (y[i] + y[i + 1]) / 2 : y[i];
    }
    return n ? y[n - 1] : NAN;
}

double bandit_location(const tune_bandit *b, int i)
{
    double y[TUNE_SAMPLES], wt[TUNE_SAMPLES];
    int n = b->nsamples[i];
    for (int k = 0; k < n; k++) {
        y[k] = b->sample_y[i][k];
        wt[k] = b->sample_calls[i][k];
    }
    return n ? weighted_median(y, wt, n) : NAN;
}

/* Arm i's robust spread: 1.4826 times the median absolute deviation of its
 * samples from `loc` (the sd, for normal noise), unweighted. */
static double spread(const tune_bandit *b, int i, double loc)
{
    double d[TUNE_SAMPLES], one[TUNE_SAMPLES];
    int n = b->nsamples[i];
    for (int k = 0; k < n; k++) {
        d[k] = fabs(b->sample_y[i][k] - loc);
        one[k] = 1;
    }
    return 1.4826 * weighted_median(d, one, n);
}

/* Posteriors from the priors and the decayed sums, with the bucket's noise
 * pooled over all measured arms (normal model, known variance). The model's
 * error is mostly shared by a bucket's arms (it misjudges the cluster, e.g.
 * CPU contention with 8 ranks on 2 cores, more than one algorithm against
 * another), so the measured arms' mean residual, shrunk toward 0, moves the
 * prior of every arm the model costs. Likewise what the KB knew is right
 * about arms against each other more than about the level: another job
 * calls back to back where the KB learned calls apart, or shares the
 * machine. So the residual of the known arms this job ran moves the prior
 * of every known arm, as the model's shared error moves every arm the
 * model costs. The arm the job ran moves with the others: held near the
 * KB's tight prior while the level moved the rest, a warm job running 5%
 * faster than the KB would see the arms it had not run ahead of its own
 * and switch to a near tie it never measured. Drift still
 * shows: a window is tested against the arm's posterior before it is
 * counted, and the level follows the job's calls only as fast as the
 * decayed sums do. Arms nobody can cost and nobody has
 * measured yet are assumed as fast as the best measured arm, with a wide
 * spread: optimism that gets each of them tried early. */
void bandit_update(tune_bandit *b)
{
    double rs[PRIOR_KB + 1] = {0}, rw[PRIOR_KB + 1] = {0}; /* residuals and weights by source */
    double rs_all[PRIOR_KB + 1] = {0};                      /* ... by the mean */
    double ss = TUNE_NOISE_WEIGHT * TUNE_NOISE * TUNE_NOISE, dof = TUNE_NOISE_WEIGHT;
    double loc[TUNE_MAX_ARMS];
    double ss_all = ss, dof_all = dof;
    for (int i = 0; i < b->narms; i++) {
        const tune_arm_stat *a = &b->arm[i];
        loc[i] = b->nsamples[i] ? bandit_location(b, i) : 0;
        if (a->w > 1) {
            ss_all += fmax(0, a->syy - a->sy * a->sy / a->w);
            dof_all += a->w - 1;
        }
        if (a->w > 0) {
            rs[b->source[i]] += a->w * (loc[i] - a->m0);
            rs_all[b->source[i]] += a->sy - a->w * a->m0;
            rw[b->source[i]] += a->w;
        }
        /* The spread of an arm's samples, whether one call or a window
         * each: on a shared machine the noise that matters comes in time
         * slices, so a window's calls are slow together and a window's
         * mean varies about as much as one call does. */
        int n = b->nsamples[i];
        if (n >= 3) {
            double s = spread(b, i, loc[i]);
            ss += (n - 1) * s * s;
            dof += n - 1;
        }
    }
    b->bias = rs[PRIOR_MODEL] / (rw[PRIOR_MODEL] + TUNE_BIAS_WEIGHT);
    b->level = rs[PRIOR_KB] / (rw[PRIOR_KB] + TUNE_BIAS_WEIGHT);
    double bias_all = rs_all[PRIOR_MODEL] / (rw[PRIOR_MODEL] + TUNE_BIAS_WEIGHT);
    double level_all = rs_all[PRIOR_KB] / (rw[PRIOR_KB] + TUNE_BIAS_WEIGHT);
    b->noise2 = ss / dof;
    b->mean_noise2 = ss_all / dof_all;
    for (int i = 0; i < b->narms; i++) {
        tune_arm_stat *a = &b->arm[i];
        double m0 = a->m0 + (b->source[i] == PRIOR_MODEL ? b->bias
                             : b->source[i] == PRIOR_KB  ? b->level
                                                         : 0);
        a->v = 1 / (1 / a->v0 + a->w / b->noise2);
        a->m = a->v * (m0 / a->v0 + a->w * loc[i] / b->noise2);
        /* The drift test's posterior: the mean's own shared offsets too,
         * so it moves with the job's calls no faster than the sums do. */
        double m0_all = a->m0 + (b->source[i] == PRIOR_MODEL ? bias_all
                                 : b->source[i] == PRIOR_KB  ? level_all
                                                             : 0);
        b->mean_v[i] = 1 / (1 / a->v0 + a->w / b->mean_noise2);
        b->mean_m[i] = b->mean_v[i] * (m0_all / a->v0 + a->sy / b->mean_noise2);
    }
    int best = bandit_best_measured(b);
    for (int j = 0; best >= 0 && j < b->narms; j++)
        if (b->source[j] == PRIOR_BLIND)
            b->arm[j].m = b->arm[j].m0 = b->arm[best].m;
}

/* A call can be a spike: another process on the core, a retransmit. In
 * the explorations of bench/learn-eval 1.4-7.4% of calls take over 1.08x
 * their arm's median, up to 2.8% over 1.15x. With 14-18 arms in 24
 * exploratory calls most arms run once or twice, so one spike could rank
 * the fastest arm behind the others for good (on T1 at 4 MiB the ring's
 * only call took 1.18x its time). Replayed offline on recorded timings,
 * capping exploratory observations at TUNE_CAP sd of noise above the
 * arm's mean so far takes the share of buckets settling more than 3% off
 * from 5.5% to 4.3% with 5% spiky calls, and changes nothing without
 * spikes. That was for a mean; the median needs the cap only while an arm
 * has fewer than 3 samples. */
static double cap_at(const tune_bandit *b, int i, double y, int calls, double sds)
{
    return b->nsamples[i] ? fmin(y, bandit_location(b, i) + sds * sqrt(b->noise2 / calls)) : y;
}

double bandit_cap(const tune_bandit *b, int i, double y, int calls)
{
    /* From 3 samples on the median passes over a spike by itself, and a
     * cap would pull a bimodal arm's samples toward whichever mode it
     * happened to meet first. */
    return b->nsamples[i] >= 3 ? y : cap_at(b, i, y, calls, TUNE_CAP);
}

/* Settled windows are several calls, and a slowdown that lasts must move
 * the estimate at once (capping them as exploration is capped hides T1's
 * drift at 1 MiB for 64 calls). But one spike in a window must not: on
 * T1 at 4 MiB the settled ring's windows take 103-109 ms, and one of
 * 130 ms counted in full moves its estimate past a `weighted` 5% slower,
 * to which the job would switch for good. So a window
 * more than TUNE_SPIKE sd of a window's noise above its arm's mean so far
 * counts at that bound, and in full only when the arm's window before was
 * beyond it too: a lasting change shows one window later, and then the
 * arm's location starts again from it (a median over windows from before
 * the change would hold on to the old level for half of them). */
int bandit_settled_spike(const tune_bandit *b, int i, double y, int calls)
{
    return cap_at(b, i, y, calls, TUNE_SPIKE) < y && !b->high[i];
}

void bandit_observe_settled(tune_bandit *b, int i, double y, int calls)
{
    double capped = cap_at(b, i, y, calls, TUNE_SPIKE);
    int high = capped < y;
    if (high && !b->high[i])
        y = capped;
    else if (high) /* it lasts: the arm's recent samples are history */
        samples_clear(b, i);
    b->high[i] = (unsigned char)high;
    bandit_observe(b, i, y, calls);
}

void bandit_observe(tune_bandit *b, int i, double y, int calls)
{
    tune_arm_stat *a = &b->arm[i];
    if (b->source[i] == PRIOR_BLIND) {
        a->m0 = y;
        b->source[i] = PRIOR_SEEN;
    }
    double keep = pow(1 - 1.0 / TUNE_MEMORY, calls);
    a->w = keep * a->w + calls;
    a->sy = keep * a->sy + calls * y;
    a->syy = keep * a->syy + calls * y * y;
    a->n += calls;
    int at = b->sample_at[i];
    b->sample_y[i][at] = (float)y;
    b->sample_calls[i][at] = (unsigned short)AI_MIN(calls, 65535);
    b->sample_at[i] = (unsigned char)((at + 1) % TUNE_SAMPLES);
    if (b->nsamples[i] < TUNE_SAMPLES)
        b->nsamples[i]++;
    bandit_update(b);
}

/* The noise a window's mean carries is mean_noise2 itself, not a share of
 * it: the decayed sums weight each observation by its calls, so over
 * settled windows mean_noise2 is already the variance of a window's mean,
 * and on a shared machine that is about a call's (time slices of other
 * processes slow a window's calls together). Divided by the window's
 * calls again, the 3 sd came to 1.5 sd of the windows' real spread at 4
 * calls and 0.5 sd at 32: test_tune's warm job at a load average of 8-13
 * on 2 cores, its windows 10-22 ms, saw a drift before its drift in 2 of
 * 6 runs. */
int bandit_drifted(const tune_bandit *b, int i, double y, double limit)
{
    double off = fabs(y - b->mean_m[i]);
    return off > limit && off > 3 * sqrt(b->mean_noise2 + b->mean_v[i]);
}

int bandit_best_measured(const tune_bandit *b)
{
    int best = -1;
    for (int i = 0; i < b->narms; i++)
        if (b->arm[i].n > 0 && (best < 0 || b->arm[i].m < b->arm[best].m))
            best = i;
    return best;
}

int bandit_best_prior(const tune_bandit *b)
{
    int best = 0;
    for (int i = 1; i < b->narms; i++)
        if (b->arm[i].m < b->arm[best].m)
            best = i;
    return best;
}

int bandit_confident(const tune_bandit *b, int best)
{
    return b->arm[best].n >= TUNE_SETTLE_SAMPLES &&
           tune_confidence(b->arm, b->narms, best) >= TUNE_CONFIDENT;
}

double tune_confidence(const tune_arm_stat *arms, int n, int best)
{
    double p = 1;
    for (int j = 0; j < n; j++) {
        if (j == best)
            continue;
        double s = sqrt(arms[j].v + arms[best].v);
        /* P(x_j > x_best) for independent normals: Phi((m_j - m_b) / s). */
        p *= s > 0 ? 0.5 * erfc(-(arms[j].m - arms[best].m) / (s * sqrt(2.0)))
                   : (arms[j].m > arms[best].m ? 1.0 : 0.5);
    }
    return p;
}

/* A settled bucket whose first job goes on can tell its near ties apart
 * with the calls it does not need for exploring: replayed offline on
 * recorded timings, running the arm most likely to be 2% faster than the
 * incumbent every other window, while that chance is at least 0.1, for at
 * most 32 calls, takes the buckets more than 3% off after 128 calls from
 * 4.3% to 1.6% (3.2% without it), for 0.13% more time over those calls. */
int bandit_rival(const tune_bandit *b, int best, double gain, double p)
{
    int rival = -1;
    for (int j = 0; j < b->narms; j++) {
        if (j == best || b->arm[j].n == 0)
            continue;
        double s = sqrt(b->arm[j].v + b->arm[best].v);
        /* P(x_j < x_best - gain) for independent normals. */
        double pj = s > 0 ? 0.5 * erfc((b->arm[j].m - b->arm[best].m + gain) / (s * sqrt(2.0)))
                          : b->arm[j].m < b->arm[best].m - gain;
        if (pj >= p) {
            p = pj;
            rival = j;
        }
    }
    return rival;
}

/* One Thompson draw among the arms whose expected log time is at most
 * `limit`; the arm with the smallest draw (or `pick`). */
static int draw_fastest(tune_bandit *b, double limit, int pick)
{
    double pick_draw = INFINITY;
    for (int i = 0; i < b->narms; i++) {
        const tune_arm_stat *a = &b->arm[i];
        if (a->m > limit)
            continue;
        double draw = a->m + sqrt(a->v) * gauss(&b->rng);
        if (draw < pick_draw) {
            pick_draw = draw;
            pick = i;
        }
    }
    return pick;
}

/* Top-two Thompson sampling (Russo, "Simple Bayesian algorithms for best
 * arm identification", 2016): half the time the winner of a Thompson draw
 * runs, otherwise draws go on until another arm wins, and that one runs.
 * Plain Thompson sampling keeps running a leader it is already fairly sure
 * of; measuring its closest challenger is what tells near-ties apart
 * within the horizon. */
int bandit_next(tune_bandit *b, double bound)
{
    int best = bandit_best_measured(b);
    int first = best >= 0 ? best : bandit_best_prior(b);
    double limit = b->arm[first].m + log(bound);
    int leader = draw_fastest(b, limit, first);
    if (util_rng_uniform(&b->rng) < 0.5)
        return leader;
    for (int k = 0; k < TUNE_CHALLENGER_DRAWS; k++) {
        int other = draw_fastest(b, limit, first);
        if (other != leader)
            return other;
    }
    return leader;
}
