/*
 * Mismatched collective calls: ranks that call different collectives, or
 * the same one with a different root, type or op, must all get an error
 * naming both calls, within the timeout, and never a wrong answer.
 *
 * Each case runs on one host over shared memory, on one host with shared
 * memory off (TCP) and with a host id per rank (TCP between "hosts"), on 2
 * to 4 ranks. Each rank makes the mismatched call, then a barrier:
 *  - a call that returns AI_OK must hold the right result for the call as
 *    this rank made it (a broadcast root that only sent keeps its data);
 *  - every rank fails in the mismatched call or in the barrier after it. A
 *    broadcast rank may finish its part first with the right answer for
 *    its own call: a root that only sent, or a rank that got its data from
 *    the root it named while another root's message to it still waits
 *    unread; its next call fails. Where a rank of each side needs data
 *    from the other (allreduce against anything), every rank fails in the
 *    mismatched call itself;
 *  - the error a rank gets names both calls as the ranks made them;
 *  - nobody waits for the timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT 1024
#define TIMEOUT_S 20.0

typedef enum { K_BCAST_ROOTS, K_BCAST_ROOT_LAST, K_DTYPES, K_OPS, K_COLLS } kind;

typedef struct mcase {
    kind k;
    const char *algo;  /* broadcast's algorithm (NULL: auto) */
} mcase;

/* The call rank r of p makes. Rank 0 is the odd one out, or with
 * K_BCAST_ROOT_LAST rank p - 1. */
typedef struct call {
    ai_coll coll;
    ai_dtype dt;
    ai_op op;
    int root;
} call;

static call call_of(kind k, int r, int p)
{
    call x = {AI_ALLREDUCE, AI_F32, AI_SUM, 0};
    switch (k) {
    case K_BCAST_ROOTS:
        x.coll = AI_BROADCAST;
        x.root = r == 0 ? 0 : 1;
        break;
    case K_BCAST_ROOT_LAST:
        x.coll = AI_BROADCAST;
        x.root = r == p - 1 ? 1 : 0;
        break;
    case K_DTYPES:
        x.dt = r == 0 ? AI_F32 : AI_I32;
        break;
    case K_OPS:
        x.op = r == 0 ? AI_SUM : AI_MAX;
        break;
    case K_COLLS:
        x.coll = r == 0 ? AI_ALLREDUCE : AI_BROADCAST;
        break;
    }
    return x;
}

/* How the error messages name a call (comm_call_sig_str). */
static void describe(const call *x, char *buf, size_t n)
{
    if (x->coll == AI_BROADCAST)
        snprintf(buf, n, "broadcast(root %d, %s, %d)", x->root, ai_dtype_name(x->dt), COUNT);
    else
        snprintf(buf, n, "allreduce(%s, %s, %d)", ai_op_name(x->op), ai_dtype_name(x->dt), COUNT);
}

/* Rank r's input at index i: small integers, exact in f32 and i32. */
static double val(int r, size_t i) { return (double)((r * 7 + (int)i) % 13) - 6; }

/* What `x` must leave in rank `me`'s buffer when it succeeds, p ranks all
 * making the same call. */
static double expected(const call *x, int p, int me, size_t i)
{
    if (x->coll == AI_BROADCAST)
        return val(x->root, i);
    (void)me;
    double acc = val(0, i);
    for (int r = 1; r < p; r++)
        acc = x->op == AI_MAX ? (val(r, i) > acc ? val(r, i) : acc) : acc + val(r, i);
    return acc;
}

static int names_both(const char *msg, kind k, int p)
{
    char a[96], b[96];
    call x0 = call_of(k, 0, p), x1 = call_of(k, p - 1, p);
    describe(&x0, a, sizeof a);
    describe(&x1, b, sizeof b);
    return strstr(msg, a) && strstr(msg, b) && strstr(msg, "different collectives or arguments");
}

static int ok_error(ai_status_t st)
{
    return st == AI_ERR_PROTO || st == AI_ERR_PEER || st == AI_ERR_ABORTED;
}

static int body(ai_comm *c, void *arg)
{
    const mcase *m = arg;
    int me = ai_comm_rank(c), p = ai_comm_size(c);
    call x = call_of(m->k, me, p);
    void *buf = calloc(COUNT, 8);
    if (!buf)
        return 90;
    for (size_t i = 0; i < COUNT; i++)
        ai_elem_set(buf, x.dt, i, val(me, i));
    ai_algo_opts o = {.algo = m->algo};
    double t0 = ai_now();
    ai_status_t st = x.coll == AI_BROADCAST
                         ? ai_broadcast(c, buf, COUNT, x.dt, x.root, &o)
                         : ai_allreduce(c, AI_IN_PLACE, buf, COUNT, x.dt, x.op, NULL);
    char err1[1024];
    snprintf(err1, sizeof err1, "%s", ai_last_error());
    int rc = 0;
    if (st == AI_OK) {
        for (size_t i = 0; i < COUNT && !rc; i++)
            if (ai_elem_get(buf, x.dt, i) != expected(&x, p, me, i)) {
                fprintf(stderr, "rank %d: call returned AI_OK with a wrong answer at [%zu]: "
                        "%g, expected %g\n", me, i, ai_elem_get(buf, x.dt, i),
                        expected(&x, p, me, i));
                rc = 10;
            }
        if (!rc && x.coll != AI_BROADCAST) {
            fprintf(stderr, "rank %d: a call that received data returned AI_OK\n", me);
            rc = 11;
        }
    }
    /* With K_BCAST_ROOT_LAST, the ranks that finished hold back their
     * next call, so the rank still waiting has to find the mismatch in
     * what it has (not in the next call's messages). */
    if (st == AI_OK && m->k == K_BCAST_ROOT_LAST)
        usleep(300 * 1000);
    ai_status_t st2 = ai_barrier(c, NULL);
    double took = ai_now() - t0;
    const char *msg = st != AI_OK ? err1 : ai_last_error();
    ai_status_t got = st != AI_OK ? st : st2;
    fprintf(stderr, "rank %d: call %s, barrier %s (%.2f s): %s\n", me, ai_strerror(st),
            ai_strerror(st2), took, got != AI_OK ? msg : "");
    if (!rc && got == AI_OK)
        rc = 12; /* nobody told this rank */
    if (!rc && !ok_error(got))
        rc = 13; /* a timeout or another error, not the mismatch */
    if (!rc && !names_both(msg, m->k, p))
        rc = 14;
    if (!rc && took > TIMEOUT_S / 2)
        rc = 15;
    free(buf);
    return rc;
}

typedef enum { T_SHM, T_TCP_NO_SHM, T_TCP_HOSTS } transport;

static void run(const mcase *m, transport t, int n)
{
    int status[8] = {0};
    ranks_opts o = {.timeout_s = TIMEOUT_S, .deadline_s = 60, .keep_going = 1, .status = status};
    if (t == T_TCP_NO_SHM)
        o.no_shm = 1;
    if (t == T_TCP_HOSTS)
        o.nhosts = n;
    static const char *const tname[] = {"shared memory", "TCP (no_shm)", "TCP (a host per rank)"};
    fprintf(stderr, "-- %d ranks, %s\n", n, tname[t]);
    int rc = ranks_run(n, &o, body, (void *)m);
    for (int r = 0; r < n; r++)
        if (status[r] != 0)
            fprintf(stderr, "rank %d: outcome %d\n", r, status[r]);
    assert_int_equal(rc, 0);
}

static void run_all(const mcase *m)
{
    for (int n = 2; n <= 4; n++)
        for (int t = T_SHM; t <= T_TCP_HOSTS; t++)
            run(m, (transport)t, n);
}

static void test_broadcast_roots(void **s)
{
    (void)s;
    mcase m = {K_BCAST_ROOTS, NULL};
    run_all(&m);
}

/* scatter_allgather's exchange puts another root's scatter message where
 * the root expects allgather data: a wrong answer at the root before. */
static void test_broadcast_roots_scatter(void **s)
{
    (void)s;
    mcase m = {K_BCAST_ROOTS, "scatter_allgather"};
    run_all(&m);
}

/* The last rank names root 1, the others root 0: with 3 or 4 ranks it
 * waits for a message from a rank that, in the others' tree, is a leaf
 * and sends none, while root 0's tree sends it a message it never reads.
 * The others hold back their next call, so only looking at that unread
 * message ends the wait before the timeout. */
static void test_broadcast_root_last(void **s)
{
    (void)s;
    mcase m = {K_BCAST_ROOT_LAST, NULL};
    run_all(&m);
}

static void test_dtypes(void **s)
{
    (void)s;
    mcase m = {K_DTYPES, NULL};
    run_all(&m);
}

static void test_ops(void **s)
{
    (void)s;
    mcase m = {K_OPS, NULL};
    run_all(&m);
}

static void test_allreduce_vs_broadcast(void **s)
{
    (void)s;
    mcase m = {K_COLLS, NULL};
    run_all(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast_roots),
        cmocka_unit_test(test_broadcast_roots_scatter),
        cmocka_unit_test(test_broadcast_root_last),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_allreduce_vs_broadcast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
