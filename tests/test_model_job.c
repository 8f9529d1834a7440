/* model layer: the pipeline schedule and the step of a measured job
 * (src/model/model_job.c), each against its closed form worked by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"

#include <math.h>
#include <string.h>

#define assert_close(a, b, rel)                                                                    \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (rel) * fabs(b_))) {                                                \
            print_error("%s = %.12g, expected %.12g (rel %g)\n", #a, a_, b_, (double)(rel));       \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

/* 1F1B: M t_crit + (sum - t_crit) / v; messages 2 (M + P - 2) t_msg. */
static void test_1f1b(void **state)
{
    (void)state;
    const double t[] = {1.0, 3.0, 2.0, 3.0};
    int crit = -1;
    /* 8 x 3 + (9 - 3) = 30 */
    assert_close(model_1f1b_time(8, 4, t, 1, &crit), 30.0, 1e-15);
    assert_int_equal(crit, 1); /* the first of the two slowest */
    /* interleaved by 2: the fill and drain halve: 24 + 3 */
    assert_close(model_1f1b_time(8, 4, t, 2, NULL), 27.0, 1e-15);
    /* one stage: M t */
    assert_close(model_1f1b_time(5, 1, t + 1, 1, NULL), 15.0, 1e-15);
    /* 4 stages, 8 micro-batches: 2 (8 + 2) messages; one stage sends none */
    assert_close(model_1f1b_p2p_time(8, 4, 0.5), 10.0, 1e-15);
    assert_true(model_1f1b_p2p_time(8, 1, 0.5) == 0);
    /* the inverse on equal stages: by tau = (M + pp - 1) t exactly M */
    assert_int_equal(model_1f1b_micro_within(11 * 0.25, 0.25, 4), 8);
    assert_int_equal(model_1f1b_micro_within(10.9 * 0.25, 0.25, 4), 7);
    assert_int_equal(model_1f1b_micro_within(0.1, 0.25, 4), 0);
    /* bound: 4 micro-batches, 12 layers on stages of 1 and 2 s/layer:
     * 4 x 12 / (1 + 1/2) = 32 */
    const double c[] = {1.0, 2.0};
    assert_close(model_1f1b_bound(4, 12, 2, c), 32.0, 1e-15);
    /* uniform: 10 layers over 4 stages, the critical one holds 3 */
    assert_close(model_1f1b_uniform_bound(4, 10, 4, 0.5), 6.0, 1e-15);
}

/* A rank's measured points: linear between them, the least-squares line
 * outside; a share in micro-batches is floor(b/m) f(m) + f(b mod m). */
static void test_job_rank(void **state)
{
    (void)state;
    model_job_rank r = {.n = 3, .b = {1, 2, 4}, .t = {0.3, 0.5, 0.9}};
    model_job_rank_fit(&r);
    /* exact line t = 0.1 + 0.2 b */
    assert_close(r.a, 0.1, 1e-12);
    assert_close(r.c, 0.2, 1e-12);
    assert_close(model_job_fwd_bwd(&r, 3), 0.7, 1e-12);
    assert_close(model_job_fwd_bwd(&r, 8), 1.7, 1e-12);
    assert_true(model_job_fwd_bwd(&r, 0) == 0);
    /* 10 samples as 2 x 4 + 2: 2 x 0.9 + 0.5 */
    assert_close(model_job_compute(&r, 10, 4), 2.3, 1e-12);
    /* its last micro-batch is the 2: two thirds of 0.5 */
    assert_close(model_job_last_backward(&r, 10, 4), 0.5 * 2 / 3, 1e-12);
    /* a full last micro-batch: two thirds of f(4) */
    assert_close(model_job_last_backward(&r, 8, 4), 0.9 * 2 / 3, 1e-12);
    /* a line with a negative intercept goes through the origin */
    model_job_rank q = {.n = 2, .b = {1, 2}, .t = {0.1, 0.4}};
    model_job_rank_fit(&q);
    assert_true(q.a == 0);
    assert_close(q.c, 0.5 / 3, 1e-12);
}

/* A stage's share, the activations across a boundary, one message from
 * a pair allreduce. */
static void test_job_pipeline_terms(void **state)
{
    (void)state;
    assert_close(model_job_stage_share(2.0, 3, 4), 1.5, 1e-15);
    /* 2 samples x 32 positions x 320 wide in fp32 */
    assert_close(model_job_act_bytes(2, 32, 320), 81920.0, 1e-15);
    /* a 2-rank ring allreduce of 2n: 2 alpha + 2n beta; one message alpha + n beta */
    double a = 50e-6, b = 1e-9, n = 1e6;
    assert_close(model_p2p_from_pair_allreduce(
                     model_coll_time(AI_ALLREDUCE, MODEL_ALGO_RING, 2, 2 * n, a, b)),
                 a + n * b, 1e-14);
}

/* The ring behind a fitted allreduce line, and the line's fit: a ring of
 * alpha 50 us, beta 1 ns/B on 4 ranks measured at 4 sizes fits
 * A = 2(p-1) alpha, B = 2(p-1)/p beta, and maps back to the same ring. */
static void test_ring_fit(void **state)
{
    (void)state;
    const int p = 4;
    const double alpha = 50e-6, beta = 1e-9;
    double x[4], t[4];
    for (int i = 0; i < 4; i++) {
        x[i] = (double)(1 << (16 + 2 * i));
        t[i] = model_coll_time(AI_ALLREDUCE, MODEL_ALGO_RING, p, x[i], alpha, beta);
        /* 2(p-1) alpha + 2(p-1)/p n beta */
        assert_close(t[i], 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * x[i] * beta, 1e-14);
    }
    double A = 0, B = 0, a2, b2;
    assert_int_equal(model_fit_line_rel(4, x, t, &A, &B), 1);
    assert_close(A, 6 * alpha, 1e-9);
    assert_close(B, 1.5 * beta, 1e-9);
    model_ring_from_line(A, B, p, &a2, &b2);
    assert_close(a2, alpha, 1e-9);
    assert_close(b2, beta, 1e-9);
    /* time falling with size: no fit */
    const double tf[] = {4e-3, 3e-3, 2e-3, 1e-3};
    assert_int_equal(model_fit_line_rel(4, x, tf, &A, &B), 0);
    assert_true(B < 0);
    assert_int_equal(model_fit_line_rel(1, x, t, &A, &B), 0);
}

/* DDP's buckets: 1 MiB first, then the cap; the last one is reduced after
 * the backward, the others beside it. */
static void test_ddp_buckets(void **state)
{
    (void)state;
    const double MiB = 1024.0 * 1024.0;
    double sz[16];
    /* 10.5 MiB at a 4 MiB cap: 1, 4, 4, 1.5 */
    int n = model_ddp_buckets(10.5 * MiB, 4 * MiB, sz, 16);
    assert_int_equal(n, 4);
    assert_true(sz[0] == MiB && sz[1] == 4 * MiB && sz[2] == 4 * MiB && sz[3] == 1.5 * MiB);
    assert_close(model_ddp_last_bucket(10.5 * MiB, 4 * MiB), 1.5 * MiB, 1e-15);
    assert_close(model_ddp_beside_fraction(10.5 * MiB, 4 * MiB), 9.0 / 10.5, 1e-15);
    /* 9 MiB: 1, 4, 4 (the last bucket full) */
    assert_close(model_ddp_last_bucket(9 * MiB, 4 * MiB), 4 * MiB, 1e-15);
    /* under 1 MiB: one bucket, nothing beside the backward */
    assert_int_equal(model_ddp_buckets(0.5 * MiB, 4 * MiB, sz, 16), 1);
    assert_true(model_ddp_beside_fraction(0.5 * MiB, 4 * MiB) == 0);
    /* capped count */
    assert_int_equal(model_ddp_buckets(100 * MiB, MiB, sz, 16), 16);
}

/* The reduction schedule: bucket k starts when every rank's backward has
 * produced it and bucket k-1 is done. */
static void test_ddp_reduction(void **state)
{
    (void)state;
    /* two buckets of half the gradients each, 1 s each; one rank,
     * compute 10 s whose last backward is 2 s: bucket 0 is ready at
     * 10 - 0.5 x 2 = 9, ends at 10; bucket 1 ready at 10, ends at 11:
     * 1 s exposed */
    model_ddp_rank r[2] = {{10, 2, 0}, {0, 0, 0}};
    const double sz[] = {1, 1}, t1[] = {1, 1};
    assert_close(model_ddp_reduction_end(1, r, 0.5, 2, sz, t1, 2), 11.0, 1e-15);
    /* a slow first bucket (3 s) delays the second: 9 + 3 + 1 = 13 */
    const double t2[] = {3, 1};
    assert_close(model_ddp_reduction_end(1, r, 0.5, 2, sz, t2, 2), 13.0, 1e-15);
    /* a second rank that finishes later (12 s, last backward 4 s) sets
     * the readiness: bucket 0 at 12 - 2 = 10 ends 11, bucket 1 at 12, 13 */
    r[1] = (model_ddp_rank){12, 4, 0};
    assert_close(model_ddp_reduction_end(2, r, 0.5, 2, sz, t1, 2), 13.0, 1e-15);
    /* compute lost beside the backward (1 s, all of it spent by the end of
     * the beside buckets): rank 1's bucket 0 is ready at 10 + 1 = 11 */
    r[1].lost_s = 1;
    assert_close(model_ddp_reduction_end(2, r, 0.5, 2, sz, t1, 2), 14.0, 1e-15);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b),
        cmocka_unit_test(test_job_rank),
        cmocka_unit_test(test_job_pipeline_terms),
        cmocka_unit_test(test_ring_fit),
        cmocka_unit_test(test_ddp_buckets),
        cmocka_unit_test(test_ddp_reduction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
