/*
 * Session 9: does a first job that goes on past its 32 learning calls
 * settle on a better arm if its settled windows sometimes re-measure a
 * near tie ("refining")? Offline, with src/tune/bandit.c linked in, on the
 * synthetic buckets of session8/sim/sim.c (14 arms, seven within 1.05x of
 * the best; per-call log noise N(0, CLEAN), spikes of +0.08-0.25 with
 * probability SPIKE; the model off by N(0, MODERR)).
 *
 * Phase 1 is main's exploration (31 learned calls, cap while exploring).
 * Phase 2: MORE calls in settled windows of 4 calls; the incumbent changes
 * only for an arm > 2% faster (TUNE_SWITCH). With REFINE > 0, every other
 * window runs bandit_rival(DELTA, PMIN) (the arm most likely to be DELTA,
 * log, faster than the incumbent, if that chance is at least PMIN), until
 * REFINE refining calls are spent. Reported: how often the incumbent at 32 calls and at the end
 * is > 1.03x / 1.05x the true best, and phase 2's mean extra time per call.
 *
 *   refine RUNS SPIKE CLEAN MODERR MORE REFINE DELTA PMIN [SWITCH]
 */
#include "tune/tune.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static double gs(ai_rng *r){double u=ai_rng_uniform(r),v=ai_rng_uniform(r);return sqrt(-2*log(1-u))*cos(2*M_PI*v);}
static double call_y(ai_rng *w, double t, double clean, double spike_p)
{
    double y = log(t * 1e-3) + clean * gs(w);
    if (ai_rng_uniform(w) < spike_p) y += 0.08 + 0.17 * ai_rng_uniform(w);
    return y;
}
int main(int argc, char **argv)
{
    if (argc < 9) { fprintf(stderr, "refine RUNS SPIKE CLEAN MODERR MORE REFINE DELTA PMIN\n"); return 2; }
    double truth[] = {1.00, 1.00, 1.01, 1.02, 1.035, 1.035, 1.05, 1.1, 1.15, 1.3, 1.6, 2.0, 1.04, 1.08};
    int na = 14, runs = atoi(argv[1]), more = atoi(argv[5]), refine = atoi(argv[6]);
    double spike_p = atof(argv[2]), clean = atof(argv[3]), moderr = atof(argv[4]);
    double delta = atof(argv[7]), pmin = atof(argv[8]), sw = argc > 9 ? atof(argv[9]) : 0.02;
    long budget = 24;
    int m3a = 0, m5a = 0, m3b = 0, m5b = 0; double extra2 = 0, refined = 0;
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
            double y = call_y(&w, tt[cur], clean, spike_p);
            if (!settled) y = bandit_cap(&b, cur, y, 1);
            bandit_observe(&b, cur, y, 1);
            int best = bandit_best_measured(&b);
            if (!settled) {
                int s = explored >= budget || call + 1 >= 32 || bandit_confident(&b, best);
                int next = s ? best : bandit_next(&b, 1.5);
                if (next != best) explored++;
                if (next == best && s) settled = 1;
                cur = next;
            } else cur = best;
        }
        int inc = bandit_best_measured(&b);
        m3a += tt[inc] / best_t > 1.03; m5a += tt[inc] / best_t > 1.05;
        int left = refine, win = 0;
        for (int c = 0; c + 4 <= more; c += 4, win++) {
            int arm = inc, k = (win & 1) && left > 0 ? bandit_rival(&b, inc, delta, pmin) : -1;
            if (k >= 0) { arm = k; left -= 4; refined += 4; }
            double s = 0;
            for (int q = 0; q < 4; q++) { double y = call_y(&w, tt[arm], clean, spike_p); s += exp(y); extra2 += exp(y) * 1e3 / best_t - 1; }
            bandit_observe(&b, arm, log(s / 4), 4);
            int best = bandit_best_measured(&b);
            if (b.arm[inc].m - b.arm[best].m >= sw) inc = best;
        }
        m3b += tt[inc] / best_t > 1.03; m5b += tt[inc] / best_t > 1.05;
    }
    printf("at 32: >1.03x %.3f >1.05x %.3f | after %d more: >1.03x %.3f >1.05x %.3f | extra per call %.4f, refining %.1f calls\n",
           (double)m3a / runs, (double)m5a / runs, more, (double)m3b / runs, (double)m5b / runs,
           more ? extra2 / runs / (more / 4 * 4) : 0, refined / runs);
    return 0;
}
