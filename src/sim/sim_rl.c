/*
 * The action policy and its training (sim.h, docs/sim.md "The rl
 * policy").
 *
 * The policy is a handful of thresholds over what a job controller sees
 * when a warning arrives: the warning's score, the share of spares free,
 * the compute at stake since the last checkpoint; and a multiplier on the
 * periodic checkpoint interval. It is trained by the cross-entropy method
 * (policy search: Rubinstein 1999; Szita and Lorincz 2006 for control):
 * sample parameter vectors from a Gaussian, run each on the same training
 * runs (common random numbers: candidates differ by their policy, not by
 * their luck), refit the Gaussian to the best few, repeat. The return of
 * a run is its ETTR; the method needs no gradient, no value function over
 * a state the simulator does not expose step by step, and is
 * deterministic for a seed.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sim_rl_decode(const double *theta, sim_rl_policy *out)
{
    double t[SIM_RL_NPARAM];
    for (int i = 0; i < SIM_RL_NPARAM; i++)
        t[i] = theta[i] < 0 ? 0 : theta[i] > 1 ? 1 : theta[i];
    /* Thresholds on a score in [0, 1]; past 1 an action is never taken. */
    out->drain_score = 1.05 * t[0];
    out->reserve = t[1];
    out->exclude_score = 1.05 * t[2];
    out->ckpt_score = 1.05 * t[3];
    out->ckpt_stake = pow(10, 3 * t[4] - 1);    /* 0.1 to 100 checkpoint costs */
    out->interval_mult = pow(2, 4 * t[5] - 2); /* a quarter to four times the base */
}

/* Mean ETTR of theta over the training runs. */
static ai_status_t evaluate(sim_params *p, const double *theta, const sim_rl_train_opts *o,
                            double *ettr)
{
    memcpy(p->rl_theta, theta, sizeof(double) * SIM_RL_NPARAM);
    double sum = 0;
    for (int i = 0; i < o->runs; i++) {
        uint64_t key[3] = {o->seed, (uint64_t)i, 1};
        ai_rng rng;
        util_rng_seed(&rng, util_hash64(key, sizeof key, 0));
        sim_result r;
        ai_status_t st = sim_run(p, &rng, &r);
        if (st != AI_OK)
            return st;
        sum += r.wall_s > 0 ? r.useful_s / r.wall_s : 1;
    }
    *ettr = sum / o->runs;
    return AI_OK;
}

static double gauss(ai_rng *rng)
{
    double u = util_rng_uniform(rng), v = util_rng_uniform(rng);
    return sqrt(-2 * log1p(-u)) * cos(2 * M_PI * v);
}

typedef struct cand {
    double th[SIM_RL_NPARAM];
    double score;
} cand;

static int by_score(const void *a, const void *b)
{
    double x = ((const cand *)a)->score, y = ((const cand *)b)->score;
    return x > y ? -1 : x < y ? 1 : 0;
}

ai_status_t sim_rl_train(sim_params *p, const sim_rl_train_opts *o, double *train_ettr,
                         double *baseline_ettr)
{
    if (!p || !o || o->runs < 1 || o->iters < 1 || o->pop < 2 || o->elite < 1 ||
        o->elite > o->pop)
        return util_fail(AI_ERR_INVALID, "sim_rl_train: bad options");
    p->rl = 1;
    cand *c = calloc((size_t)o->pop, sizeof *c);
    if (!c)
        return util_fail(AI_ERR_NOMEM, "sim_rl_train: %d candidates", o->pop);
    /* The start, and the first generation's first candidate: Young/Daly
     * as it is (no action on warnings, the base interval). */
    double base[SIM_RL_NPARAM] = {1, 1, 1, 1, 1, 0.5};
    double mean[SIM_RL_NPARAM], sd[SIM_RL_NPARAM];
    for (int k = 0; k < SIM_RL_NPARAM; k++) {
        mean[k] = 0.5;
        sd[k] = 0.3;
    }
    cand best;
    memcpy(best.th, base, sizeof base);
    ai_status_t st = evaluate(p, base, o, &best.score);
    if (st != AI_OK)
        goto out;
    if (baseline_ettr)
        *baseline_ettr = best.score;
    uint64_t key[2] = {o->seed, 0x63656d};
    ai_rng rng;
    util_rng_seed(&rng, util_hash64(key, sizeof key, 0));
    for (int it = 0; it < o->iters; it++) {
        for (int j = 0; j < o->pop; j++) {
            for (int k = 0; k < SIM_RL_NPARAM; k++) {
                double v = mean[k] + sd[k] * gauss(&rng);
                c[j].th[k] = v < 0 ? 0 : v > 1 ? 1 : v;
            }
            if (j == 0) /* keep the best so far in the race */
                memcpy(c[j].th, best.th, sizeof best.th);
            if ((st = evaluate(p, c[j].th, o, &c[j].score)) != AI_OK)
                goto out;
        }
        qsort(c, (size_t)o->pop, sizeof *c, by_score);
        if (c[0].score > best.score)
            best = c[0];
        /* Refit to the elite; a floor on the spread (noisy CEM) keeps the
         * search from collapsing onto one lucky candidate. */
        for (int k = 0; k < SIM_RL_NPARAM; k++) {
            double m = 0, v = 0;
            for (int j = 0; j < o->elite; j++)
                m += c[j].th[k];
            m /= o->elite;
            for (int j = 0; j < o->elite; j++)
                v += (c[j].th[k] - m) * (c[j].th[k] - m);
            v /= o->elite;
            mean[k] = 0.3 * mean[k] + 0.7 * m;
            sd[k] = 0.3 * sd[k] + 0.7 * sqrt(v) + 0.02;
        }
    }
    memcpy(p->rl_theta, best.th, sizeof best.th);
    if (train_ettr)
        *train_ettr = best.score;
out:
    free(c);
    return st;
}
