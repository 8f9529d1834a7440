/*
 * The network cost model against closed forms: ring (lock-step and
 * streamed) and recursive algorithms on a uniform switch, cut bounds on
 * uniform and heterogeneous clusters, rack uplinks, and the weighted
 * shards.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model_net.h"

#include <math.h>

#define NEAR(a, b) assert_true(fabs((a) - (b)) <= 1e-9 + 1e-9 * fabs(b))

/* p hosts, one rank each, NIC B bytes/s, latency a. */
static void uniform(model_net *n, int p, double B, double a)
{
    assert_int_equal(model_net_alloc(n, p, p, 0), AI_OK);
    for (int i = 0; i < p; i++) {
        n->host_of[i] = i;
        n->nic_Bps[i] = B;
        n->lat_s[i] = a;
    }
}

static void test_ring_closed_form(void **state)
{
    const double B = 62.5e6, a = 50e-6, bytes = 16 << 20;
    for (int p = 2; p <= 8; p++) {
        model_net n;
        uniform(&n, p, B, a);
        /* ring allreduce, streamed (blocks of 2 MiB or more: 16 pieces,
         * each a step's block time W / 16 > alpha behind): the links never
         * idle between steps, 2(p-1)/p n beta + alpha */
        NEAR(model_net_algo_time(&n, AI_ALLREDUCE, "ring", bytes),
             a + 2.0 * (p - 1) / p * bytes / B);
        /* blocks under 64 KiB run lock-step: 2(p-1) alpha + 2(p-1)/p n beta */
        double small = 40e3 * p;
        NEAR(model_net_algo_time(&n, AI_ALLREDUCE, "ring", small),
             2 * (p - 1) * a + 2.0 * (p - 1) / p * small / B);
        /* ring allgather / reduce-scatter = (p-1) alpha + (p-1)/p n beta */
        NEAR(model_net_algo_time(&n, AI_ALLGATHER, "ring", bytes), (p - 1) * a + (p - 1.0) / p * bytes / B);
        NEAR(model_net_algo_time(&n, AI_REDUCE_SCATTER, "ring", bytes), (p - 1) * a + (p - 1.0) / p * bytes / B);
        /* the bound on a uniform switch is the ring's bandwidth term */
        NEAR(model_net_bound(&n, AI_ALLREDUCE, bytes),
             fmax(2.0 * (p - 1) / p * bytes / B, ceil(log2(p)) * a));
        NEAR(model_net_bound(&n, AI_ALLGATHER, bytes), fmax((p - 1.0) / p * bytes / B, ceil(log2(p)) * a));
        model_net_free(&n);
    }
}

/* The streamed ring where a piece's trip outlasts a block: 64 KiB blocks
 * (two pieces) behind 1 ms of latency, so every step waits on its first
 * piece: 2(p-1) (alpha + W/2) + alpha, W = 64 KiB beta. */
static void test_ring_stream_latency(void **state)
{
    const double B = 62.5e6, a = 1e-3, W = 65536 / B;
    for (int p = 2; p <= 8; p++) {
        model_net n;
        uniform(&n, p, B, a);
        NEAR(model_net_algo_time(&n, AI_ALLREDUCE, "ring", 65536.0 * p),
             2 * (p - 1) * (a + W / 2) + a);
        model_net_free(&n);
    }
}

static void test_recursive_closed_form(void **state)
{
    const double B = 1e9, a = 10e-6, bytes = 1 << 20;
    for (int p = 2; p <= 16; p *= 2) {
        model_net n;
        uniform(&n, p, B, a);
        double lg = log2(p);
        /* recursive doubling allreduce = log p (alpha + n beta) */
        NEAR(model_net_algo_time(&n, AI_ALLREDUCE, "recursive_doubling", bytes), lg * (a + bytes / B));
        /* Rabenseifner = 2 log p alpha + 2 (p-1)/p n beta */
        NEAR(model_net_algo_time(&n, AI_ALLREDUCE, "rabenseifner", bytes),
             2 * lg * a + 2.0 * (p - 1) / p * bytes / B);
        /* binomial broadcast = log p (alpha + n beta) */
        NEAR(model_net_algo_time(&n, AI_BROADCAST, "binomial", bytes), lg * (a + bytes / B));
        model_net_free(&n);
    }
    model_net n;
    uniform(&n, 4, B, a);
    assert_true(isinf(model_net_algo_time(&n, AI_ALLREDUCE, "no_such_algo", bytes)));
    model_net_free(&n);
}

static void test_heterogeneous_bound_and_shards(void **state)
{
    /* T2: four hosts at 500 Mbit/s, one at 125. */
    model_net n;
    const double fast = 0.5e9 / 8, slow = 0.125e9 / 8, bytes = 64 << 20;
    uniform(&n, 4, fast, 0);
    n.nic_Bps[2] = slow;
    /* the slow host must send and receive the whole vector: n / B_slow */
    NEAR(model_net_bound(&n, AI_ALLREDUCE, bytes), bytes / slow);
    double frac[4];
    model_net_weighted_shards(4, n.nic_Bps, frac);
    NEAR(frac[0] + frac[1] + frac[2] + frac[3], 1.0);
    NEAR(frac[2], 0.0); /* the slow host owns nothing */
    NEAR(frac[0], 1.0 / 3);
    /* weighted allreduce reaches the bound (no latency here); the ring
     * pays 2(p-1)/p = 1.5 times it */
    double w = model_net_algo_time(&n, AI_ALLREDUCE, "weighted", bytes);
    double r = model_net_algo_time(&n, AI_ALLREDUCE, "ring", bytes);
    NEAR(r, 1.5 * bytes / slow);
    /* pipelined over m segments: (m + 1) / m times the bound */
    int m = model_net_weighted_segments(bytes, 0);
    assert_int_equal(m, 32);
    NEAR(w, (m + 1.0) / m * bytes / slow);
    model_net_free(&n);

    /* Uniform: equal shards. */
    double bw[5] = {1, 1, 1, 1, 1}, f5[5];
    model_net_weighted_shards(5, bw, f5);
    for (int i = 0; i < 5; i++)
        NEAR(f5[i], 0.2);

    /* Probe noise on equal NICs (T1 as measured): still equal shards. */
    const double t1[4] = {0.53, 0.55, 0.51, 0.49};
    double f4[4];
    model_net_weighted_shards(4, t1, f4);
    for (int i = 0; i < 4; i++)
        NEAR(f4[i], 0.25);
    /* ... and on T2 (one NIC at a quarter): the three equal, the slow one
     * as with exact rates. */
    const double t2[4] = {0.53, 0.13, 0.49, 0.55}, exact[4] = {0.5, 0.125, 0.5, 0.5};
    double g4[4];
    model_net_weighted_shards(4, t2, f4);
    model_net_weighted_shards(4, exact, g4);
    for (int i = 0; i < 4; i++)
        NEAR(f4[i], g4[i]);
    assert_true(f4[1] < f4[0]);
    /* Rates 2x apart are different NICs (T4). */
    const double t4[4] = {1.0, 0.5, 1.0, 0.5};
    model_net_weighted_shards(4, t4, f4);
    assert_true(f4[1] < 0.9 * f4[0]);
}

static void test_rack_uplink_bound(void **state)
{
    /* T3: 4 hosts x 2 ranks, two racks, uplink = one NIC (2:1). */
    model_net n;
    const double B = 0.5e9 / 8, bytes = 16 << 20;
    assert_int_equal(model_net_alloc(&n, 8, 4, 2), AI_OK);
    for (int r = 0; r < 8; r++)
        n.host_of[r] = r / 2;
    for (int h = 0; h < 4; h++) {
        n.nic_Bps[h] = B;
        n.rack_of[h] = h / 2;
    }
    n.up_Bps[0] = n.up_Bps[1] = B;
    n.mem_lat_s = 0;
    /* max(host cut n/B, rack cut n/B, total 2*3*n/(4B)) */
    NEAR(model_net_bound(&n, AI_ALLREDUCE, bytes), 1.5 * bytes / B);
    /* The ring over 8 ranks sends n/8 per step through each rack uplink,
     * 14 steps; host NICs carry one flow per step too. */
    NEAR(model_net_algo_time(&n, AI_ALLREDUCE, "ring", bytes), 14 * (bytes / 8) / B);
    model_net_free(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_closed_form),
        cmocka_unit_test(test_ring_stream_latency),
        cmocka_unit_test(test_recursive_closed_form),
        cmocka_unit_test(test_heterogeneous_bound_and_shards),
        cmocka_unit_test(test_rack_uplink_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
