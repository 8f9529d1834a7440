/*
 * Session 8: the learner's exploration (src/tune/bandit.c, linked in) on
 * synthetic buckets, offline. 14 arms, true times 1.00-2.00 (seven within
 * 1.05x of the best, as on T1), each jittered by 2% per bucket; the model's
 * predictions off by N(0, MODERR) in log; a call's log time has N(0, CLEAN)
 * noise and, with probability SPIKE, a spike of +0.08-0.25. learn.c's
 * protocol, simplified: 31 learned calls (the first is not learned from),
 * exploration until the budget (24) is spent, the horizon (32) is reached
 * or the best is confident; then the best measured arm. Reported: how often
 * that arm is more than 1.03x / 1.05x the true best, and the mean extra time
 * per call. run.sh builds and runs it.
 *
 *   sim RUNS SPIKE CLEAN MODERR [BUDGET]
 */
#include "tune/tune.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#ifdef OLD
#define NEXT(b, bound, left) bandit_next_old(b, bound)
int bandit_next_old(tune_bandit *b, double bound);
#elif defined(CAP_EXPLORING) /* the library's own bandit.c */
#define NEXT(b, bound, left) bandit_next(b, bound)
#else
#define NEXT(b, bound, left) bandit_next(b, bound, left)
#endif
static double gs(ai_rng *r){double u=ai_rng_uniform(r),v=ai_rng_uniform(r);return sqrt(-2*log(1-u))*cos(2*M_PI*v);}
int main(int argc, char **argv)
{
    double truth[] = {1.00, 1.00, 1.01, 1.02, 1.035, 1.035, 1.05, 1.1, 1.15, 1.3, 1.6, 2.0, 1.04, 1.08};
    int na = 14, runs = atoi(argv[1]); long budget = argc > 5 ? atol(argv[5]) : 24;
    double spike_p = atof(argv[2]), clean = atof(argv[3]), moderr = atof(argv[4]);
    int miss3 = 0, miss5 = 0; double extra = 0, sumratio = 0;
    ai_rng w; ai_rng_seed(&w, 7);
    for (int r = 0; r < runs; r++) {
        tune_bandit b; memset(&b, 0, sizeof b); b.narms = na;
        double tt[14];
        for (int i = 0; i < na; i++) { tt[i] = truth[i] * exp(0.02 * gs(&w)); snprintf(b.arm[i].algo, 32, "a%d", i);
            bandit_prior(&b, i, tt[i] * 1e-3 * exp(moderr * gs(&w)), 0); }
        bandit_update(&b); ai_rng_seed(&b.rng, 1000 + r);
        double best_t = 1e9; for (int i = 0; i < na; i++) if (tt[i] < best_t) best_t = tt[i];
        int cur = bandit_best_prior(&b), settled = 0; long explored = 0;
        for (int call = 1; call < 32; call++) {
            double y = log(tt[cur] * 1e-3) + clean * gs(&w);
            if (ai_rng_uniform(&w) < spike_p) y += 0.08 + 0.17 * ai_rng_uniform(&w);
            extra += exp(y) * 1e3 / best_t - 1;
            int exploring = 0;
#ifdef CAP_EXPLORING /* main since session 8: the cap while exploring */
            if (!settled)
                y = bandit_cap(&b, cur, y, 1);
#endif
            bandit_observe(&b, cur, y, 1);
            int best = bandit_best_measured(&b);
            if (!settled) {
                int s = explored >= budget || call + 1 >= 32 || bandit_confident(&b, best);
                int next = s ? best : NEXT(&b, 1.5, (long)(budget - explored) < 32 - call - 1 ? budget - explored : 32 - call - 1);
                exploring = next != best;
                if (exploring) explored++;
                if (next == best && s) settled = 1;
                cur = next;
            } else cur = best;
            (void)exploring;
        }
        int ch = bandit_best_measured(&b);
        double ratio = tt[ch] / best_t;
        sumratio += ratio;
        miss3 += ratio > 1.03; miss5 += ratio > 1.05;
    }
    printf("runs %d: choice >1.03x %.3f, >1.05x %.3f, mean ratio %.4f, mean extra per call %.4f\n", runs,
           (double)miss3 / runs, (double)miss5 / runs, sumratio / runs, extra / runs / 31);
    return 0;
}
