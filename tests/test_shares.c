/*
 * Batch shares (src/balance/shares.c): the split sums to the global batch and
 * follows the throughputs, the gradient weights make the update the
 * global-batch mean exactly, the step-time model recovers a and c from
 * noisy steps with an outlier, and the balancer re-equalises the ranks'
 * step times after one slows down, without flapping on noise.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Deterministic noise: xorshift64 and Box-Muller. */
static uint64_t rng_state;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static double nrand(void)
{
    return sqrt(-2 * log(urand())) * cos(2 * M_PI * urand());
}

static int sum_of(const int *b, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += b[i];
    return s;
}

static void test_split(void **state)
{
    (void)state;
    int b[8];
    const double t4[] = {1, 1, 0.5, 0.5};
    assert_int_equal(ai_shares_split(4, t4, 64, b), AI_OK);
    /* quotas 21.33, 21.33, 10.67, 10.67: floors 62, the two largest
     * remainders get the last two */
    assert_int_equal(b[0], 21);
    assert_int_equal(b[1], 21);
    assert_int_equal(b[2], 11);
    assert_int_equal(b[3], 11);

    /* An excluded rank gets 0; a tiny one still gets its sample. */
    const double tz[] = {1000, 0, 1e-6};
    assert_int_equal(ai_shares_split(3, tz, 10, b), AI_OK);
    assert_int_equal(b[0], 9);
    assert_int_equal(b[1], 0);
    assert_int_equal(b[2], 1);

    /* Random throughputs and batches: the sum is exact, every share is
     * within one sample of its quota (largest remainder) and >= 1. */
    rng_state = 42;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)(urand() * 8);
        double t[8], tot = 0;
        for (int i = 0; i < n; i++)
            tot += t[i] = urand() < 0.1 ? 0 : 0.05 + urand() * 4;
        if (tot == 0)
            t[0] = tot = 1;
        int B = n + (int)(urand() * 5000);
        assert_int_equal(ai_shares_split(n, t, B, b), AI_OK);
        assert_int_equal(sum_of(b, n), B);
        /* With every quota at least one sample, each share is its quota
         * rounded up or down; ranks lifted to one sample take at most one
         * more from the others. */
        int lifted = 0;
        for (int i = 0; i < n; i++)
            lifted += t[i] > 0 && B * t[i] / tot < 1;
        for (int i = 0; i < n; i++) {
            double q = B * t[i] / tot;
            if (t[i] == 0)
                assert_int_equal(b[i], 0);
            else
                assert_true(b[i] >= 1);
            if (q >= 1 && fabs(b[i] - q) >= (lifted ? 2 : 1))
                fail_msg("trial %d: rank %d has %d samples for a quota of %.3f", trial, i, b[i], q);
        }
    }

    const double neg[] = {1, -1};
    assert_int_equal(ai_shares_split(2, neg, 10, b), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "throughput of rank 1 is -1"));
    const double zero[] = {0, 0};
    assert_int_equal(ai_shares_split(2, zero, 10, b), AI_ERR_INVALID);
    const double nan2[] = {1, NAN};
    assert_int_equal(ai_shares_split(2, nan2, 10, b), AI_ERR_INVALID);
    assert_int_equal(ai_shares_split(4, t4, 3, b), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "global batch of 3 cannot give each of 4 ranks"));
}

/* sum_i w_i mean_i over uneven shares equals the mean over all samples in
 * float64 up to rounding; the even weighting (1/P) does not. */
static void test_grad_weights_exact(void **state)
{
    (void)state;
    enum { D = 64, B = 203, P = 5 };
    static double g[B][D];
    rng_state = 7;
    double gmax = 0;
    for (int s = 0; s < B; s++)
        for (int d = 0; d < D; d++) {
            g[s][d] = nrand() * (1 + s % 7);
            gmax = fmax(gmax, fabs(g[s][d]));
        }
    const double thr[P] = {1, 1, 0.5, 0.25, 0.5};
    int b[P];
    double w[P];
    assert_int_equal(ai_shares_split(P, thr, B, b), AI_OK);
    assert_int_equal(ai_shares_grad_weights(P, b, w), AI_OK);
    double wsum = 0;
    for (int i = 0; i < P; i++)
        wsum += w[i];
    assert_true(fabs(wsum - 1) < 1e-15);
    double worst = 0, worst_even = 0;
    for (int d = 0; d < D; d++) {
        double global = 0, weighted = 0, even = 0;
        for (int s = 0; s < B; s++)
            global += g[s][d];
        global /= B;
        int s0 = 0;
        for (int i = 0; i < P; i++) {
            double mean = 0;
            for (int s = s0; s < s0 + b[i]; s++)
                mean += g[s][d];
            mean /= b[i];
            s0 += b[i];
            weighted += w[i] * mean;
            even += mean / P;
        }
        worst = fmax(worst, fabs(weighted - global));
        worst_even = fmax(worst_even, fabs(even - global));
    }
    fprintf(stderr, "test_shares: weighted mean off by %.2e (of |g| <= %.1f); even weights by %.2e\n",
            worst, gmax, worst_even);
    /* float64: a few hundred additions of values up to gmax */
    assert_true(worst <= 1e-13 * gmax);
    assert_true(worst_even > 1e-3);

    int bad[] = {3, -1};
    assert_int_equal(ai_shares_grad_weights(2, bad, w), AI_ERR_INVALID);
    int none[] = {0, 0};
    assert_int_equal(ai_shares_grad_weights(2, none, w), AI_ERR_INVALID);
}

/* t = a + c b with 1% noise, batch sizes 8..64, one step 3x as long: a
 * and c within 5%, for every seed. */
static void test_predictor_recovers(void **state)
{
    (void)state;
    const double a = 0.05, c = 0.002;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        ai_shares *s = NULL;
        assert_int_equal(ai_shares_create(1, 64, 0.02, &s), AI_OK);
        rng_state = seed * 7919;
        for (int step = 0; step < 40; step++) {
            int b = 8 + (int)(urand() * 57);
            double t = (a + c * b) * (1 + 0.01 * nrand());
            if (step == 30)
                t *= 3; /* a stalled step */
            assert_int_equal(ai_shares_observe(s, 0, b, t), AI_OK);
        }
        double fa, fc;
        int affine;
        assert_int_equal(ai_shares_model(s, 0, &fa, &fc, &affine), AI_OK);
        if (!affine || fabs(fa / a - 1) > 0.05 || fabs(fc / c - 1) > 0.05)
            fail_msg("seed %d: fitted a %.4f c %.6f (affine %d), true %.4f %.6f", (int)seed, fa, fc,
                     affine, a, c);
        ai_shares_destroy(s);
    }

    /* One batch size only: t = c b. */
    ai_shares *s = NULL;
    assert_int_equal(ai_shares_create(2, 64, 0.02, &s), AI_OK);
    double fa, fc;
    int affine;
    assert_int_equal(ai_shares_model(s, 0, &fa, &fc, &affine), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "rank 0 has not been observed"));
    for (int step = 0; step < 10; step++)
        assert_int_equal(ai_shares_observe(s, 0, 32, 0.05 + 0.002 * 32), AI_OK);
    assert_int_equal(ai_shares_model(s, 0, &fa, &fc, &affine), AI_OK);
    assert_int_equal(affine, 0);
    assert_true(fa == 0);
    assert_true(fabs(fc - (0.05 + 0.002 * 32) / 32) < 1e-12);

    assert_int_equal(ai_shares_observe(s, 2, 32, 0.1), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "rank 2 is not in 0..1"));
    assert_int_equal(ai_shares_observe(s, 0, 0, 0.1), AI_ERR_INVALID);
    assert_int_equal(ai_shares_observe(s, 0, 4, -1), AI_ERR_INVALID);
    assert_int_equal(ai_shares_observe(s, 0, 4, NAN), AI_ERR_INVALID);
    ai_shares_destroy(s);

    assert_int_equal(ai_shares_create(4, 3, 0.02, &s), AI_ERR_INVALID);
    assert_null(s);
    assert_int_equal(ai_shares_create(4, 64, 1.5, &s), AI_ERR_INVALID);
    assert_int_equal(ai_shares_create(0, 64, 0.02, &s), AI_ERR_INVALID);
}

/* The true step time of rank i under b samples (no noise). */
static double true_time(const double *a, const double *c, int i, int b)
{
    return a[i] + c[i] * b;
}

static double spread(const double *a, const double *c, const int *b, int n)
{
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++) {
        double t = true_time(a, c, i, b[i]);
        lo = fmin(lo, t);
        hi = fmax(hi, t);
    }
    return hi / lo;
}

/* Four ranks with 2% noise, re-balanced every step: even shares hold
 * while the ranks are equal (no flapping); after rank 3 slows to half
 * speed the shares equalise the step times within 5% in at most
 * SETTLE_STEPS steps and then stay put. */
#define SETTLE_STEPS 10
static void test_rebalance_after_slowdown(void **state)
{
    (void)state;
    enum { P = 4, B = 512 }; /* one sample of the slow rank: 1.2% of its step */
    for (uint64_t seed = 1; seed <= 10; seed++) {
        double a[P] = {0.02, 0.02, 0.02, 0.02}, c[P] = {0.001, 0.001, 0.001, 0.001};
        ai_shares *s = NULL;
        assert_int_equal(ai_shares_create(P, B, 0.02, &s), AI_OK);
        rng_state = seed * 104729;
        int b[P], changed, changes = 0, settled_at = -1, late = 0;
        double pred;
        assert_int_equal(ai_shares_rebalance(s, b, &changed, &pred), AI_OK);
        assert_int_equal(changed, 0);
        assert_true(pred == 0); /* nothing observed yet */
        for (int i = 0; i < P; i++)
            assert_int_equal(b[i], B / P);
        for (int step = 0; step < 100; step++) {
            if (step == 40) {
                a[3] *= 2; /* half speed: every part of its step */
                c[3] *= 2;
                changes = 0;
            }
            if (step == 70)
                late = changes;
            for (int i = 0; i < P; i++) {
                double t = true_time(a, c, i, b[i]) * (1 + 0.02 * nrand());
                if (step == 75 && i == 1)
                    t *= 3; /* one stalled step moves nothing */
                assert_int_equal(ai_shares_observe(s, i, b[i], t), AI_OK);
            }
            assert_int_equal(ai_shares_rebalance(s, b, &changed, &pred), AI_OK);
            assert_int_equal(sum_of(b, P), B);
            for (int i = 0; i < P; i++)
                assert_true(b[i] >= 1);
            changes += changed;
            if (step < 40) {
                if (changes)
                    fail_msg("seed %d step %d: equal ranks, but the shares moved to %d %d %d %d",
                             (int)seed, step, b[0], b[1], b[2], b[3]);
                continue;
            }
            double sp = spread(a, c, b, P);
            if (settled_at < 0 && sp <= 1.05)
                settled_at = step;
            if (settled_at >= 0 && sp > 1.05)
                fail_msg("seed %d step %d: settled at step %d, then step times %.3fx apart (%d %d %d %d)",
                         (int)seed, step, settled_at, sp, b[0], b[1], b[2], b[3]);
        }
        if (settled_at < 0 || settled_at >= 40 + SETTLE_STEPS)
            fail_msg("seed %d: step times within 5%% only from step %d (slowdown at 40)", (int)seed,
                     settled_at);
        /* The predicted times agree with each other too. */
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < P; i++) {
            double fa, fc;
            assert_int_equal(ai_shares_model(s, i, &fa, &fc, NULL), AI_OK);
            lo = fmin(lo, fa + fc * b[i]);
            hi = fmax(hi, fa + fc * b[i]);
        }
        fprintf(stderr, "test_shares: seed %d: settled %d steps after the slowdown at %d %d %d %d, "
                        "%d changes, predicted %.3fx apart\n",
                (int)seed, settled_at - 40 + 1, b[0], b[1], b[2], b[3], changes, hi / lo);
        assert_true(hi / lo <= 1.05);
        if (changes > 6)
            fail_msg("seed %d: %d changes of shares after the slowdown", (int)seed, changes);
        if (changes != late)
            fail_msg("seed %d: the shares moved %d times in the last 30 steps (a stalled step at 75)",
                     (int)seed, changes - late);
        ai_shares_destroy(s);
    }
}

/* Shares set from outside (a plan's) are what re-balancing keeps until
 * the models say otherwise; bad shares are refused. */
static void test_set(void **state)
{
    (void)state;
    ai_shares *s = NULL;
    int b[3];
    assert_int_equal(ai_shares_create(3, 8, 0.02, &s), AI_OK);
    assert_int_equal(ai_shares_set(s, (const int[]){5, 2, 1}), AI_OK);
    assert_int_equal(ai_shares_rebalance(s, b, NULL, NULL), AI_OK);
    assert_int_equal(b[0], 5);
    assert_int_equal(b[1], 2);
    assert_int_equal(b[2], 1);
    /* Observations that the set shares balance exactly leave them. */
    for (int step = 0; step < 6; step++)
        for (int i = 0; i < 3; i++)
            assert_int_equal(ai_shares_observe(s, i, b[i], 0.4 * (i == 0 ? 1 : i == 1 ? 2.5 : 5)), AI_OK);
    int changed = -1;
    assert_int_equal(ai_shares_rebalance(s, b, &changed, NULL), AI_OK);
    assert_int_equal(changed, 0);
    assert_int_equal(b[0], 5);
    assert_int_equal(ai_shares_set(s, (const int[]){5, 2, 2}), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "sum to 9, not the global batch 8"));
    assert_int_equal(ai_shares_set(s, (const int[]){8, 0, 0}), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "rank 1's share is 0"));
    ai_shares_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_grad_weights_exact),
        cmocka_unit_test(test_predictor_recovers),
        cmocka_unit_test(test_rebalance_after_slowdown),
        cmocka_unit_test(test_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
