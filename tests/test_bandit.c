/*
 * The learner's statistics (src/tune/bandit.c), without ranks:
 *  - exploration never draws an arm expected more than `bound` times slower
 *    than the best measured arm, and does draw the ones within it;
 *  - the model's error shared by the arms moves the priors of the arms
 *    nobody measured yet, not those the knowledge base supplied;
 *  - arms without a prediction are assumed as fast as the best measured;
 *  - confidence: a clear winner settles, a near-tie does not;
 *  - one slow call moves an arm's estimate only so far; slow calls that
 *    keep coming move it all the way; once settled, one slow window of
 *    calls does not reorder two arms, two in a row do;
 *  - refining: a near tie measured once is worth another look, a clearly
 *    slower arm and an arm never measured are not, and nor is the near
 *    tie once measured often enough to show it is slower;
 *  - bimodal noise: arms are judged by the bulk of their calls (the
 *    median), not by a mean that descheduled calls drag, either way, and
 *    a lasting change still moves the estimate;
 *  - drift: a settled window is tested against the spread of the windows
 *    themselves, so a window within the windows' noise is no drift, one
 *    beyond it is, and on a quiet machine the limit alone decides.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MS 1e-3

/* A bandit of n arms with model predictions (seconds), all algorithm
 * defaults (not variants). */
static void make(tune_bandit *b, const double *pred, int n)
{
    memset(b, 0, sizeof *b);
    b->narms = n;
    for (int i = 0; i < n; i++) {
        snprintf(b->arm[i].algo, sizeof b->arm[i].algo, "a%d", i);
        bandit_prior(b, i, pred[i], 0);
    }
    bandit_update(b);
    util_rng_seed(&b->rng, 42);
}

static void observe(tune_bandit *b, int i, double seconds, int times)
{
    for (int k = 0; k < times; k++)
        bandit_observe(b, i, log(seconds), 1);
}

/* Six calls each of a0 at 1 ms and a1 at `ratio` ms, with a little noise,
 * the same for both. */
static void observe_pair(tune_bandit *b, double ratio)
{
    for (int k = 0; k < 6; k++) {
        double e = k % 2 ? 1.02 : 0.98;
        observe(b, 0, e * 1 * MS, 1);
        observe(b, 1, e * ratio * MS, 1);
    }
}

/* How often each arm is drawn in `draws` exploration decisions. */
static void count_draws(tune_bandit *b, double bound, int draws, int *count)
{
    for (int i = 0; i < b->narms; i++)
        count[i] = 0;
    for (int k = 0; k < draws; k++) {
        int a = bandit_next(b, bound);
        assert_true(a >= 0 && a < b->narms);
        count[a]++;
    }
}

static void test_bound(void **state)
{
    (void)state;
    /* a0 measured at 1 ms; a1 predicted 1.2x, a2 1.7x, a3 3x slower. */
    const double pred[] = {1 * MS, 1.2 * MS, 1.7 * MS, 3 * MS};
    tune_bandit b;
    int count[4];
    make(&b, pred, 4);
    observe(&b, 0, 1 * MS, 4);
    count_draws(&b, 1.5, 4000, count);
    assert_true(count[0] > 0);
    assert_true(count[1] > 0);
    assert_int_equal(count[2], 0);
    assert_int_equal(count[3], 0);
    /* A looser bound lets a2 in (sd 0.25: its draws beat a0's sometimes),
     * never a3 at 2x. */
    count_draws(&b, 2.0, 4000, count);
    assert_true(count[2] > 0);
    assert_int_equal(count[3], 0);
}

static void test_shared_model_error(void **state)
{
    (void)state;
    const double pred[] = {1 * MS, 2 * MS, 4 * MS};
    tune_bandit b;
    make(&b, pred, 3);
    tune_arm_stat known = {.n = 5, .m = log(4 * MS), .v = 1e-4};
    bandit_prior_known(&b, 2, &known); /* what the KB knew: not the model's */
    bandit_update(&b);
    /* Every call of a0 takes 1.3x the prediction. */
    observe(&b, 0, 1.3 * MS, 8);
    assert_true(b.bias > 0.7 * log(1.3) && b.bias < log(1.3)); /* shrunk by w / (w + 2) */
    double a1 = exp(b.arm[1].m) / (2 * MS);
    assert_true(a1 > 1.2 && a1 < 1.3);
    assert_float_equal(exp(b.arm[2].m), 4 * MS, 1e-9);
    /* An arm measured faster than predicted pulls the others down. */
    make(&b, pred, 3);
    observe(&b, 0, 0.8 * MS, 8);
    assert_true(b.bias < 0 && exp(b.arm[1].m) / (2 * MS) < 0.85);
}

/* What the KB knew sets the arms' order, this job's calls the level: a
 * known arm that runs 5% slower or faster than the KB said takes every
 * known arm along, so a near tie does not flip on the offset. */
static void known_level(double offset, int calls)
{
    const double pred[] = {1 * MS, 1 * MS, 1 * MS};
    tune_bandit b;
    make(&b, pred, 3);
    tune_arm_stat ka = {.n = 30, .m = log(1.00 * MS), .v = 1e-4};
    tune_arm_stat kb = {.n = 30, .m = log(1.01 * MS), .v = 1e-4};
    bandit_prior_known(&b, 0, &ka);
    bandit_prior_known(&b, 1, &kb);
    bandit_update(&b);
    assert_int_equal(bandit_best_measured(&b), 0);
    bandit_observe(&b, 0, log(offset * MS), calls); /* one window */
    bandit_update(&b);
    double lo = fmin(0.5 * log(offset), log(offset)), hi = fmax(0.5 * log(offset), log(offset));
    assert_true(b.level > lo && b.level < hi);
    double m0 = exp(b.arm[0].m) / MS, m1 = exp(b.arm[1].m) / MS;
    /* Both known arms moved the same way, toward the job's level, and
     * kept their order: no flip to a1. */
    assert_true(offset > 1 ? m0 > 1.00 && m1 > 1.01 : m0 < 1.00 && m1 < 1.01);
    assert_true(m0 < m1);
    assert_int_equal(bandit_best_measured(&b), 0);
    assert_true(fabs(b.bias) < 1e-12); /* the model's arm a2 is untouched */
    assert_float_equal(exp(b.arm[2].m), 1 * MS, 1e-9);
}

static void test_known_level(void **state)
{
    (void)state;
    known_level(1.05, 32); /* one long window, back to back */
    known_level(0.95, 32);
    known_level(0.95, 4); /* a warm job's first window: a1 must not win here */
    known_level(1.05, 4);
}

static void test_blind_arms(void **state)
{
    (void)state;
    const double pred[] = {NAN, NAN, NAN};
    tune_bandit b;
    int count[3];
    make(&b, pred, 3);
    observe(&b, 1, 2 * MS, 2);
    assert_float_equal(b.arm[0].m, b.arm[1].m, 1e-12);
    assert_float_equal(b.arm[2].m, b.arm[1].m, 1e-12);
    assert_int_equal(bandit_best_measured(&b), 1);
    /* Unmeasured, they are tried. */
    count_draws(&b, 1.5, 1000, count);
    assert_true(count[0] > 0 && count[2] > 0);
}

static void test_confidence(void **state)
{
    (void)state;
    const double pred[] = {1 * MS, 1 * MS};
    tune_bandit b;
    make(&b, pred, 2);
    observe_pair(&b, 1.5);
    assert_int_equal(bandit_best_measured(&b), 0);
    assert_true(bandit_confident(&b, 0));
    assert_false(bandit_confident(&b, 1));
    make(&b, pred, 2);
    observe_pair(&b, 1.01);
    assert_false(bandit_confident(&b, bandit_best_measured(&b)));
    /* Two calls are not enough, however clear. */
    make(&b, pred, 2);
    observe(&b, 0, 1 * MS, 2);
    observe(&b, 1, 3 * MS, 2);
    assert_false(bandit_confident(&b, 0));
}

static void test_spike(void **state)
{
    (void)state;
    const double pred[] = {1 * MS, 1 * MS};
    tune_bandit b;
    make(&b, pred, 2);
    observe_pair(&b, 1.03); /* a0 at 1 ms, a1 at 1.03 ms, 2% noise */
    assert_int_equal(bandit_best_measured(&b), 0);
    double sd = sqrt(b.noise2);
    /* a spike: the median over a0's 6 calls passes over it, a0 stays ahead */
    bandit_observe(&b, 0, bandit_cap(&b, 0, log(1.3 * MS), 1), 1);
    assert_int_equal(bandit_best_measured(&b), 0);
    assert_true(b.arm[0].m < log(1 * MS) + 2 * sd);
    for (int k = 0; k < 24; k++) /* it really is slower now */
        bandit_observe(&b, 0, bandit_cap(&b, 0, log(1.3 * MS), 1), 1);
    assert_int_equal(bandit_best_measured(&b), 1);
    assert_true(b.arm[0].m > log(1.2 * MS));
    /* An arm measured once has no median yet: its second call is capped. */
    make(&b, pred, 2);
    observe(&b, 0, 1 * MS, 1);
    observe(&b, 1, 1.03 * MS, 1);
    double y = bandit_cap(&b, 0, log(1.3 * MS), 1);
    assert_true(y < log(1.3 * MS) - 0.05);
}

static void test_settled_spike(void **state)
{
    (void)state;
    const double pred[] = {1 * MS, 1 * MS};
    tune_bandit b, plain;
    make(&b, pred, 2);
    for (int k = 0; k < 3; k++)
        observe_pair(&b, 1.04); /* a0 at 1 ms, a1 at 1.04 ms, 2% noise */
    assert_int_equal(bandit_best_measured(&b), 0);
    plain = b; /* by the median, even counted in full one slow window does not reorder them */
    bandit_observe(&plain, 0, log(1.3 * MS), 4);
    assert_int_equal(bandit_best_measured(&plain), 0);
    bandit_observe_settled(&b, 0, log(1.3 * MS), 4);
    assert_int_equal(bandit_best_measured(&b), 0);
    bandit_observe_settled(&b, 1, log(1.04 * MS), 4); /* another arm between */
    bandit_observe_settled(&b, 0, log(1.3 * MS), 4);  /* a0 again: it lasts */
    assert_int_equal(bandit_best_measured(&b), 1);
    bandit_observe_settled(&b, 0, log(1 * MS), 4); /* back: counts in full */
    assert_false(b.high[0]);
}

static void test_rival(void **state)
{
    (void)state;
    const double pred[] = {1 * MS, 1 * MS, 1 * MS, 1 * MS};
    tune_bandit b;
    make(&b, pred, 4);
    for (int k = 0; k < 8; k++) /* a0: 1 ms, 2.5% noise */
        observe(&b, 0, (k % 2 ? 1.025 : 0.975) * MS, 1);
    observe(&b, 1, 1.005 * MS, 1); /* a1: a near tie, once */
    observe(&b, 2, 1.2 * MS, 1);   /* a2: 1.2x slower; a3 never ran */
    assert_int_equal(bandit_best_measured(&b), 0);
    assert_int_equal(bandit_rival(&b, 0, 0.02, 0.1), 1);
    assert_int_equal(bandit_rival(&b, 0, 0.02, 0.5), -1); /* not that likely */
    for (int k = 0; k < 24; k++) { /* both measured often: a1 is 1.5% slower */
        observe(&b, 0, (k % 2 ? 1.025 : 0.975) * MS, 1);
        observe(&b, 1, (k % 2 ? 1.04 : 0.99) * MS, 1);
    }
    assert_int_equal(bandit_rival(&b, bandit_best_measured(&b), 0.02, 0.1), -1);
}

/* Bimodal noise (ranks sharing cores: a descheduled rank makes a call
 * several times slower, and such calls hit arms unevenly). The statistic
 * must judge arms by the bulk of their calls, not by a mean that the
 * spikes drag. Observations go in as the learner's exploration feeds them
 * (bandit_cap). */
static void feed(tune_bandit *b, int i, double seconds)
{
    bandit_observe(b, i, bandit_cap(b, i, log(seconds), 1), 1);
}

static void test_bimodal(void **state)
{
    (void)state;
    const double pred[] = {1 * MS, 1 * MS};
    tune_bandit b;
    /* a0 takes 1 ms, but 6 of its 15 calls were descheduled (3 ms); a1
     * takes 1.2 ms and was hit once. By mean log time a1 looks faster
     * (1.34 against 1.55 ms); by its calls' bulk a0 is. */
    make(&b, pred, 2);
    for (int k = 0; k < 15; k++) {
        double e = k % 2 ? 1.01 : 0.99;
        feed(&b, 0, (k % 5 == 1 || k % 5 == 3 ? 3 : 1) * e * MS);
        feed(&b, 1, (k == 7 ? 3.6 : 1.2) * e * MS);
    }
    assert_int_equal(bandit_best_measured(&b), 0);
    assert_true(fabs(b.arm[0].m - log(1 * MS)) < 0.05);
    /* The slower arm's samples bimodal the other way: a1's median is
     * 1.3 ms, with 6 of 15 calls in a fast mode (0.6 ms) that drags its
     * mean log time to 0.95 ms, below a0's steady 1.1 ms. a0 is faster. */
    make(&b, pred, 2);
    for (int k = 0; k < 15; k++) {
        double e = k % 2 ? 1.01 : 0.99;
        feed(&b, 0, 1.1 * e * MS);
        feed(&b, 1, (k % 5 == 1 || k % 5 == 3 ? 0.6 : 1.3) * e * MS);
    }
    assert_int_equal(bandit_best_measured(&b), 0);
    /* ... and a lasting change still moves the estimate: a0 turns 1.5x
     * slower for good, and within TUNE_SAMPLES calls a1 leads. */
    for (int k = 0; k < TUNE_SAMPLES && bandit_best_measured(&b) == 0; k++)
        feed(&b, 0, 1.65 * MS);
    assert_int_equal(bandit_best_measured(&b), 1);
}

/* Settled windows of 4 calls of arm 0 (ms); then is a window `off` (log)
 * above the arm's mean a drift at a 1.5x limit (the learner's on one
 * host)? */
static int drifts(const double *ms, int n, double off)
{
    const double pred[] = {10 * MS};
    tune_bandit b;
    make(&b, pred, 1);
    for (int k = 0; k < n; k++)
        bandit_observe_settled(&b, 0, log(ms[k] * MS), 4);
    return bandit_drifted(&b, 0, b.mean_m[0] + off, 0.4);
}

static void test_drift_noise(void **state)
{
    (void)state;
    /* A loaded machine: the windows of test_tune's warm job at a load
     * average of 8-13 on 2 cores, 10-22 ms (sd 0.27 in log). A window 1.65x off their
     * mean is within their noise (tested against the noise of a mean of
     * 4 independent calls, it was a strike); one 3x off is beyond. */
    const double loaded[] = {12.3, 12.6, 14.8, 19.7, 10.6, 21.3, 16.0, 13.9, 20.9,
                             10.0, 16.7, 12.2, 22.2, 11.7, 10.4, 17.3, 22.4};
    assert_false(drifts(loaded, 17, 0.5));
    assert_true(drifts(loaded, 17, 1.1));
    /* Quiet (2%): the 1.5x limit decides, either way. */
    const double quiet[] = {9.8, 10.2, 9.9, 10.1, 9.8, 10.2, 10.0, 9.9, 10.1, 10.0};
    assert_true(drifts(quiet, 10, 0.45));
    assert_false(drifts(quiet, 10, 0.35));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_shared_model_error),
        cmocka_unit_test(test_known_level),
        cmocka_unit_test(test_blind_arms),
        cmocka_unit_test(test_confidence),
        cmocka_unit_test(test_spike),
        cmocka_unit_test(test_settled_spike),
        cmocka_unit_test(test_rival),
        cmocka_unit_test(test_bimodal),
        cmocka_unit_test(test_drift_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
