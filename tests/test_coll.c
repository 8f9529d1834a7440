/*
 * Collectives: every collective x algorithm x dtype x op is checked against
 * a reference, for 1..8 ranks on one host (shared memory) and spread over
 * 2-3 host ids (TCP, and shm + TCP mixed for the hierarchical algorithms),
 * in place and out of place, roots other than 0, counts from 0 (NULL
 * buffers) through odd and uneven splits to several MiB.
 *
 * Inputs are small integers, so every partial result is exact in every
 * dtype (f16/bf16 included) and the expected value does not depend on the
 * reduction order; AVG is checked against the same division coll.c does.
 *
 * One communicator per configuration loops over all cases (forking per case
 * would dominate the run time). Each rank computes the expected result of
 * every case itself from the input formula, so checking needs no
 * communication; the first mismatch prints collective, algorithm, dtype,
 * op, count, rank, index, got and expected.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm/algo/core.h"
#include "comm/algo_registry.h"
#include "comm/transport/transport.h"
#include "support/ranks.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#define GUARD 64                      /* canary bytes after every receive buffer */
#define LARGE_BYTES ((size_t)4 << 20) /* the "several MiB" cases */
#define BUF_BYTES (LARGE_BYTES + 4096)

/* ---------------------------------------------------------- inputs */

static uint32_t mix(uint32_t salt, uint32_t r, uint32_t i)
{
    uint32_t x = salt * 0x9E3779B1u ^ (r + 1) * 0x85EBCA77u ^ (i + 7) * 0xC2B2AE3Du;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    x *= 0x297A2D39u;
    x ^= x >> 15;
    return x;
}

/* Input of rank r at index i. Ranges keep every result exact: sums of up to
 * 8 values in [-5, 5] (u8: [0, 10]); products of +-1/+-2 with at most three
 * 2s (|prod| <= 8); min/max over [-50, 50] (u8: [0, 100]). */
/* Several-MiB cases carry this bit in their salt: their reduction inputs
 * repeat with a prime period, so the expected result is a table of PERIOD
 * entries instead of p inputs per element (checking 6 MiB on 8 ranks
 * sharing 2 cores would otherwise dominate the test). The period is prime
 * so no block or segment boundary is a multiple of it. */
#define LARGE_SALT 0x80000000u
#define PERIOD 1009

static int64_t in_val(ai_dtype dt, ai_op op, uint32_t salt, int r, size_t i)
{
    if (salt & LARGE_SALT)
        i %= PERIOD;
    uint32_t h = mix(salt, (uint32_t)r, (uint32_t)i);
    int u8 = dt == AI_U8;
    switch (op) {
    case AI_PROD: {
        int64_t v = ((i + (size_t)r + (salt & 0xffff)) % 3 == 0) ? 2 : 1;
        return (!u8 && (h & 16)) ? -v : v;
    }
    case AI_MIN:
    case AI_MAX:
        return u8 ? (int64_t)(h % 101) : (int64_t)(h % 101) - 50;
    default:
        return u8 ? (int64_t)(h % 11) : (int64_t)(h % 11) - 5;
    }
}

/* Data for non-reducing collectives: any value exact in every dtype. */
static int64_t data_val(ai_dtype dt, uint32_t salt, int r, size_t i)
{
    uint32_t h = mix(salt, (uint32_t)r, (uint32_t)i);
    return dt == AI_U8 ? (int64_t)(h % 256) : (int64_t)(h % 201) - 100;
}

static void put(ai_dtype dt, void *buf, size_t i, double v)
{
    unsigned char *p = buf;
    switch (dt) {
    case AI_F32: { float f = (float)v; memcpy(p + 4 * i, &f, 4); break; }
    case AI_F64: memcpy(p + 8 * i, &v, 8); break;
    case AI_F16: { uint16_t h = ai_f32_to_f16((float)v); memcpy(p + 2 * i, &h, 2); break; }
    case AI_BF16: { uint16_t h = ai_f32_to_bf16((float)v); memcpy(p + 2 * i, &h, 2); break; }
    case AI_I32: { int32_t x = (int32_t)v; memcpy(p + 4 * i, &x, 4); break; }
    case AI_I64: { int64_t x = (int64_t)v; memcpy(p + 8 * i, &x, 8); break; }
    case AI_U8: p[i] = (uint8_t)v; break;
    default: break;
    }
}

static double get(ai_dtype dt, const void *buf, size_t i)
{
    const unsigned char *p = buf;
    switch (dt) {
    case AI_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case AI_F64: { double d; memcpy(&d, p + 8 * i, 8); return d; }
    case AI_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return ai_f16_to_f32(h); }
    case AI_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return ai_bf16_to_f32(h); }
    case AI_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); return x; }
    case AI_I64: { int64_t x; memcpy(&x, p + 8 * i, 8); return (double)x; }
    case AI_U8: return p[i];
    default: return NAN;
    }
}

/* Expected reduction over ranks 0..p-1 at index i. */
static double expect_red(ai_dtype dt, ai_op op, uint32_t salt, int p, size_t i)
{
    int64_t acc = in_val(dt, op, salt, 0, i);
    for (int r = 1; r < p; r++) {
        int64_t v = in_val(dt, op, salt, r, i);
        switch (op) {
        case AI_PROD: acc *= v; break;
        case AI_MIN: acc = v < acc ? v : acc; break;
        case AI_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op != AI_AVG)
        return (double)acc;
    /* AVG: the exact sum divided the way comm_scale_div divides */
    switch (dt) {
    case AI_F32: return (float)acc / (float)p;
    case AI_F64: return (double)acc / p;
    case AI_F16: return ai_f16_to_f32(ai_f32_to_f16((float)acc / (float)p));
    case AI_BF16: return ai_bf16_to_f32(ai_f32_to_bf16((float)acc / (float)p));
    default: return (double)(acc / p);
    }
}

/* ---------------------------------------------------------- a case */

typedef struct tcase {
    ai_coll coll;
    const char *algo;
    ai_dtype dt;
    ai_op op;
    size_t count;
    int inplace; /* 0: out of place, 1: AI_IN_PLACE, 2: sendbuf == recvbuf */
    int root;
    size_t chunk;
    int channels;
    uint32_t salt;
} tcase;

typedef struct ctx {
    ai_comm *c;
    int rank, size;
    unsigned char *in, *out;
    long ncases;
    int nhosts_cfg;
} ctx;

/* Expected reduction for a case: from the table for large cases. */
static double want_red(const tcase *t, int p, size_t i, const double *tab)
{
    return tab ? tab[i % PERIOD] : expect_red(t->dt, t->op, t->salt, p, i);
}

static int report(const ctx *x, const tcase *t, const char *what, size_t idx, double got,
                  double want)
{
    fprintf(stderr,
            "FAIL %s/%s %s %s count=%zu inplace=%d root=%d chunk=%zu p=%d rank=%d: %s "
            "index %zu: got %g expected %g\n",
            ai_coll_name(t->coll), t->algo ? t->algo : "auto", ai_dtype_name(t->dt),
            ai_op_name(t->op), t->count, t->inplace, t->root, t->chunk, x->size, x->rank, what,
            idx, got, want);
    return 1;
}

static int report_status(const ctx *x, const tcase *t, ai_status_t st)
{
    fprintf(stderr, "FAIL %s/%s %s %s count=%zu inplace=%d root=%d p=%d rank=%d: %s: %s\n",
            ai_coll_name(t->coll), t->algo ? t->algo : "auto", ai_dtype_name(t->dt),
            ai_op_name(t->op), t->count, t->inplace, t->root, x->size, x->rank,
            ai_strerror(st), ai_last_error());
    return 1;
}

static void fill_garbage(void *p, size_t bytes)
{
    memset(p, 0x5a, bytes + GUARD);
}

static int guard_ok(const ctx *x, const tcase *t, const unsigned char *end)
{
    for (size_t k = 0; k < GUARD; k++)
        if (end[k] != 0x5a)
            return !report(x, t, "guard overwritten", k, end[k], 0x5a);
    return 1;
}

static int run_case(ctx *x, const tcase *t)
{
    int p = x->size, me = x->rank;
    size_t es = ai_dtype_size(t->dt), n = t->count;
    ai_algo_opts opts = {.algo = t->algo, .chunk_bytes = t->chunk, .channels = t->channels};
    unsigned char *in = x->in, *out = x->out;
    /* count 0: pass NULL buffers, which must be accepted */
    int null_bufs = n == 0;
    ai_status_t st = AI_OK;
    double tab_store[PERIOD], *tab = NULL;
    x->ncases++;
    if ((t->salt & LARGE_SALT) && (t->coll == AI_ALLREDUCE || t->coll == AI_REDUCE_SCATTER ||
                                   t->coll == AI_REDUCE)) {
        for (size_t i = 0; i < PERIOD; i++)
            tab_store[i] = expect_red(t->dt, t->op, t->salt, p, i);
        tab = tab_store;
    }

#define SEND(inbuf, recvbuf) (t->inplace == 1 ? AI_IN_PLACE : t->inplace == 2 ? (const void *)(recvbuf) : (const void *)(inbuf))
    switch (t->coll) {
    case AI_ALLREDUCE: {
        unsigned char *buf = t->inplace ? out : in;
        fill_garbage(out, n * es);
        for (size_t i = 0; i < n; i++)
            put(t->dt, buf, i, (double)in_val(t->dt, t->op, t->salt, me, i));
        st = ai_allreduce(x->c, null_bufs ? NULL : SEND(in, out), null_bufs ? NULL : out, n,
                          t->dt, t->op, &opts);
        if (st != AI_OK)
            return report_status(x, t, st);
        for (size_t i = 0; i < n; i++) {
            double want = want_red(t, p, i, tab), got = get(t->dt, out, i);
            if (got != want)
                return report(x, t, "result", i, got, want);
        }
        return !guard_ok(x, t, out + n * es);
    }
    case AI_REDUCE_SCATTER: {
        size_t total = n * (size_t)p;
        unsigned char *buf = t->inplace ? out : in;
        fill_garbage(out, total * es);
        for (size_t j = 0; j < total; j++)
            put(t->dt, buf, j, (double)in_val(t->dt, t->op, t->salt, me, j));
        st = ai_reduce_scatter(x->c, null_bufs ? NULL : SEND(in, out), null_bufs ? NULL : out, n,
                               t->dt, t->op, &opts);
        if (st != AI_OK)
            return report_status(x, t, st);
        unsigned char *res = t->inplace ? out + (size_t)me * n * es : out;
        for (size_t i = 0; i < n; i++) {
            double want = want_red(t, p, (size_t)me * n + i, tab);
            double got = get(t->dt, res, i);
            if (got != want)
                return report(x, t, "result", i, got, want);
        }
        return !guard_ok(x, t, out + (t->inplace ? total : n) * es);
    }
    case AI_ALLGATHER: {
        size_t total = n * (size_t)p;
        fill_garbage(out, total * es);
        unsigned char *mine = t->inplace ? out + (size_t)me * n * es : in;
        for (size_t i = 0; i < n; i++)
            put(t->dt, mine, i, (double)data_val(t->dt, t->salt, me, i));
        st = ai_allgather(x->c, null_bufs ? NULL : SEND(in, out), null_bufs ? NULL : out, n, t->dt,
                          &opts);
        if (st != AI_OK)
            return report_status(x, t, st);
        for (size_t j = 0; j < total; j++) {
            double want = (double)data_val(t->dt, t->salt, (int)(j / n), j % n);
            double got = get(t->dt, out, j);
            if (got != want)
                return report(x, t, "result", j, got, want);
        }
        return !guard_ok(x, t, out + total * es);
    }
    case AI_BROADCAST: {
        fill_garbage(out, n * es);
        if (me == t->root)
            for (size_t i = 0; i < n; i++)
                put(t->dt, out, i, (double)data_val(t->dt, t->salt, t->root, i));
        st = ai_broadcast(x->c, null_bufs ? NULL : out, n, t->dt, t->root, &opts);
        if (st != AI_OK)
            return report_status(x, t, st);
        for (size_t i = 0; i < n; i++) {
            double want = (double)data_val(t->dt, t->salt, t->root, i), got = get(t->dt, out, i);
            if (got != want)
                return report(x, t, "result", i, got, want);
        }
        return !guard_ok(x, t, out + n * es);
    }
    case AI_REDUCE: {
        int ip = me == t->root ? t->inplace : 0; /* in place only at the root */
        unsigned char *buf = ip ? out : in;
        fill_garbage(out, n * es);
        for (size_t i = 0; i < n; i++)
            put(t->dt, buf, i, (double)in_val(t->dt, t->op, t->salt, me, i));
        const void *sb = ip == 1 ? AI_IN_PLACE : ip == 2 ? (const void *)out : (const void *)in;
        /* non-roots pass a NULL recvbuf every other case */
        void *rb = (me == t->root || (t->salt & 1)) ? out : NULL;
        st = ai_reduce(x->c, null_bufs ? NULL : sb, null_bufs ? NULL : rb, n, t->dt, t->op,
                       t->root, &opts);
        if (st != AI_OK)
            return report_status(x, t, st);
        if (me != t->root) {
            for (size_t k = 0; k < n * es; k++) /* untouched at non-roots */
                if (out[k] != 0x5a)
                    return report(x, t, "non-root recvbuf written", k, out[k], 0x5a);
            return !guard_ok(x, t, out + n * es);
        }
        for (size_t i = 0; i < n; i++) {
            double want = want_red(t, p, i, tab), got = get(t->dt, out, i);
            if (got != want)
                return report(x, t, "result", i, got, want);
        }
        return !guard_ok(x, t, out + n * es);
    }
    case AI_ALLTOALL: {
        size_t total = n * (size_t)p;
        unsigned char *buf = t->inplace ? out : in;
        fill_garbage(out, total * es);
        /* block k of rank me goes to rank k */
        for (size_t j = 0; j < total; j++)
            put(t->dt, buf, j, (double)data_val(t->dt, t->salt, me * 1000 + (int)(j / n), j % n));
        st = ai_alltoall(x->c, null_bufs ? NULL : SEND(in, out), null_bufs ? NULL : out, n, t->dt,
                         &opts);
        if (st != AI_OK)
            return report_status(x, t, st);
        for (size_t j = 0; j < total; j++) {
            int from = (int)(j / n);
            double want = (double)data_val(t->dt, t->salt, from * 1000 + me, j % n);
            double got = get(t->dt, out, j);
            if (got != want)
                return report(x, t, "result", j, got, want);
        }
        return !guard_ok(x, t, out + total * es);
    }
    default:
        return 1;
    }
#undef SEND
}

/* ---------------------------------------------------------- the sweep */

typedef struct sweep_cfg {
    int large;      /* several-MiB cases: 0 none, 1 f32 + bf16, 2 f32 only */
    _Atomic long *barrier_counter; /* shared between the ranks (MAP_SHARED) */
    _Atomic long *cases;           /* rank 0's count of cases passed (MAP_SHARED) */
} sweep_cfg;

static int is_reducing(ai_coll k)
{
    return k == AI_ALLREDUCE || k == AI_REDUCE_SCATTER || k == AI_REDUCE;
}

/* Elements per rank so that the whole operation moves about `bytes`. */
static size_t count_for_bytes(ai_coll k, size_t bytes, size_t es, int p)
{
    size_t n = bytes / es;
    if (k == AI_REDUCE_SCATTER || k == AI_ALLGATHER || k == AI_ALLTOALL)
        n /= (size_t)p;
    return n | 1; /* odd: uneven splits everywhere */
}

static int sweep_coll(ctx *x, const sweep_cfg *cfg, ai_coll k, const char *algo, uint32_t *salt)
{
    int p = x->size;
    int nops = is_reducing(k) ? AI_OP_COUNT : 1;
    tcase t = {.coll = k, .algo = algo};
    int roots[3] = {0, p - 1, p / 2};

    /* 1. Full matrix at an odd count that splits unevenly over p. */
    for (int dt = 0; dt < AI_DTYPE_COUNT; dt++) {
        for (int op = 0; op < nops; op++) {
            for (int ip = 0; ip < 2; ip++) {
                t.dt = (ai_dtype)dt, t.op = (ai_op)op, t.count = 2 * (size_t)p + 1;
                t.inplace = ip ? 1 + (int)(*salt % 2) : 0;
                t.root = roots[(dt + op + ip) % 3];
                t.chunk = 0, t.channels = 0, t.salt = ++*salt;
                if (run_case(x, &t))
                    return 1;
            }
        }
    }
    /* 2. Size sweep for two dtypes, with small pipelining segments (many
     * segments per message) and a single TCP channel on half the cases. */
    static const size_t counts[] = {0, 1, 3, 1031, 70001};
    static const ai_dtype dts[] = {AI_F32, AI_I64};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        for (int di = 0; di < 2; di++) {
            for (int ip = 0; ip < 2; ip++) {
                t.dt = dts[di];
                t.op = di == 0 ? AI_SUM : AI_MAX;
                t.count = counts[ci];
                if (k == AI_REDUCE_SCATTER || k == AI_ALLGATHER || k == AI_ALLTOALL)
                    t.count = counts[ci] / (size_t)p + (counts[ci] > 0); /* per rank */
                t.inplace = ip ? 1 + (int)(ci % 2) : 0;
                t.root = roots[(ci + (size_t)ip) % 3];
                t.chunk = (ci + (size_t)di) % 2 ? 1001 : 0; /* not a multiple of any es */
                t.channels = ip ? 1 : 0;
                t.salt = ++*salt;
                if (run_case(x, &t))
                    return 1;
            }
        }
    }
    /* 3. Several MiB: f32 sum and bf16 (max, or data for the others). */
    if (cfg->large) {
        static const ai_dtype big[] = {AI_F32, AI_BF16};
        for (int di = 0; di < (cfg->large == 1 ? 2 : 1); di++) {
            t.dt = big[di];
            t.op = di == 0 ? AI_SUM : AI_MAX;
            t.count = count_for_bytes(k, LARGE_BYTES, ai_dtype_size(t.dt), p);
            t.inplace = di;
            t.root = roots[(di + 1) % 3];
            t.chunk = 0, t.channels = 0, t.salt = ++*salt | LARGE_SALT;
            if (run_case(x, &t))
                return 1;
        }
    }
    return 0;
}

static int barrier_check(ctx *x, const sweep_cfg *cfg, const char *algo, long *round)
{
    ai_algo_opts o = {.algo = algo};
    for (int it = 0; it < 5; it++, (*round)++) {
        atomic_fetch_add(cfg->barrier_counter, 1);
        ai_status_t st = ai_barrier(x->c, algo ? &o : NULL);
        if (st != AI_OK) {
            fprintf(stderr, "FAIL barrier/%s rank %d: %s\n", algo ? algo : "auto", x->rank,
                    ai_last_error());
            return 1;
        }
        /* after round k's barrier every rank has arrived k + 1 times */
        long seen = atomic_load(cfg->barrier_counter);
        if (seen < (*round + 1) * x->size) {
            fprintf(stderr, "FAIL barrier/%s p=%d rank %d round %ld: counter %ld, want >= %ld\n",
                    algo ? algo : "auto", x->size, x->rank, *round, seen,
                    (*round + 1) * x->size);
            return 1;
        }
    }
    return 0;
}

static int sweep_body(ai_comm *c, void *arg)
{
    const sweep_cfg *cfg = arg;
    ctx x = {.c = c, .rank = ai_comm_rank(c), .size = ai_comm_size(c)};
    x.in = malloc(BUF_BYTES + GUARD);
    x.out = malloc(BUF_BYTES + GUARD);
    int rc = 1;
    if (!x.in || !x.out)
        goto out;
    uint32_t salt = 1;
    for (int k = 0; k < AI_COLL_COUNT; k++) {
        if (k == AI_BARRIER)
            continue;
        for (int a = 0; a < ai_coll_algo_count((ai_coll)k); a++)
            if (sweep_coll(&x, cfg, (ai_coll)k, ai_coll_algo_name((ai_coll)k, a), &salt))
                goto out;
        /* "auto" (NULL options) at a small and a larger size */
        for (int s = 0; s < 2; s++) {
            tcase t = {.coll = (ai_coll)k, .dt = AI_F32, .op = AI_AVG,
                       .count = s ? 50001 : 5, .salt = ++salt, .root = x.size - 1};
            if (run_case(&x, &t))
                goto out;
        }
    }
    long round = 0;
    for (int a = 0; a < ai_coll_algo_count(AI_BARRIER); a++)
        if (barrier_check(&x, cfg, ai_coll_algo_name(AI_BARRIER, a), &round))
            goto out;
    if (barrier_check(&x, cfg, NULL, &round))
        goto out;
    rc = 0;
    if (x.rank == 0)
        atomic_store(cfg->cases, x.ncases);
out:
    free(x.in);
    free(x.out);
    return rc;
}

static _Atomic long *shared_counter; /* [0]: the barrier check's, [1]: cases passed */

static void run_sweep(int n, int nhosts, int round_robin, int large)
{
    atomic_store(&shared_counter[0], 0);
    atomic_store(&shared_counter[1], 0);
    sweep_cfg cfg = {.large = large, .barrier_counter = &shared_counter[0],
                     .cases = &shared_counter[1]};
    ranks_opts o = {.nhosts = nhosts, .round_robin = round_robin, .timeout_s = 20,
                    .deadline_s = 150};
    double t0 = ai_now();
    assert_int_equal(ranks_run(n, &o, sweep_body, &cfg), 0);
    fprintf(stderr, "  p=%d nhosts=%d%s: %ld cases passed, %.1f s\n", n, nhosts,
            round_robin ? " (round robin)" : "", atomic_load(&shared_counter[1]), ai_now() - t0);
}

/* One host, shared memory. The several-MiB cases (the last argument) run
 * on a few shapes only: moving MiBs between 8 processes on 2 shared cores
 * under ASan costs about a second per call. */
static void test_shm_1(void **s) { (void)s; run_sweep(1, 0, 0, 0); }
static void test_shm_2(void **s) { (void)s; run_sweep(2, 0, 0, 0); }
static void test_shm_3(void **s) { (void)s; run_sweep(3, 0, 0, 1); }
static void test_shm_4(void **s) { (void)s; run_sweep(4, 0, 0, 0); }
static void test_shm_5(void **s) { (void)s; run_sweep(5, 0, 0, 0); }
static void test_shm_6(void **s) { (void)s; run_sweep(6, 0, 0, 0); }
static void test_shm_7(void **s) { (void)s; run_sweep(7, 0, 0, 0); }
static void test_shm_8(void **s) { (void)s; run_sweep(8, 0, 0, 2); }
/* The sender's watch for slow spells, on the rates measured on the 2-vCPU
 * machine (seconds a byte): a copy within the core 0.018e-9, the ring's
 * copies 0.034e-9 outside a spell, 0.28-0.46e-9 in one. A window (8
 * timed copies) counts by its fastest copy. */
static void test_shm_watch(void **s)
{
    (void)s;
    comm_spell w = {.mode = 2, .local = 0.018e-9};
    const double fast = 0.034e-9, spell = 0.3e-9;
    for (int i = 0; i < 8; i++) /* a fast window: the best */
        comm_shm_watch(&w, i == 5 ? fast : 3 * fast, 1.0);
    assert_true(w.until == 0 && w.best == fast);
    for (int i = 0; i < 7; i++) /* a window is judged at its end only */
        comm_shm_watch(&w, spell, 2.0);
    assert_true(w.until == 0);
    comm_shm_watch(&w, 2.5 * fast, 2.0); /* its fastest 2.5x the best: no spell */
    assert_true(w.until == 0 && w.best == fast);
    for (int i = 0; i < 8; i++) /* a window in a spell: past the cache for a while */
        comm_shm_watch(&w, spell + i * 1e-12, 3.0);
    assert_true(w.until > 3.0 && w.until < 3.1);
    /* A job that starts in a spell has no fast window: the copy within the
     * core tells it. */
    comm_spell cold = {.mode = 2, .local = 0.018e-9};
    for (int i = 0; i < 8; i++)
        comm_shm_watch(&cold, spell, 5.0);
    assert_true(cold.until > 5.0);
    /* Without a reference (not measured), only the job's own best. */
    comm_spell blind = {.mode = 2};
    for (int i = 0; i < 8; i++)
        comm_shm_watch(&blind, spell, 5.0);
    assert_true(blind.until == 0 && blind.best == spell);
}

/* Every collective and algorithm with shared memory written past the
 * cache (non-temporal stores: ring sends and `direct`'s slots) wherever a
 * copy is COMM_SPELL_MIN bytes or more, as in a slow spell (shm.c). */
static void test_shm_past_cache(void **s)
{
    (void)s;
    setenv("AUTOINFRA_SHM_NT", "1", 1);
    run_sweep(2, 0, 0, 0); /* direct as one reduction of every slot */
    run_sweep(4, 0, 0, 0); /* ... and as a reduce-scatter */
    unsetenv("AUTOINFRA_SHM_NT");
}
/* Several host ids: TCP between them, shm within (mixed). */
static void test_tcp_2x2(void **s) { (void)s; run_sweep(2, 2, 0, 2); }
static void test_mixed_4_rr(void **s) { (void)s; run_sweep(4, 2, 1, 1); }
static void test_mixed_5_rr(void **s) { (void)s; run_sweep(5, 2, 1, 0); }
static void test_mixed_7_3hosts(void **s) { (void)s; run_sweep(7, 3, 0, 0); }
/* Two ranks on each of three hosts: the streamed hierarchical allreduce
 * (core_ring.c) with a ring of three hosts. */
static void test_mixed_6_3hosts_rr(void **s) { (void)s; run_sweep(6, 3, 1, 0); }
static void test_tcp_3x3(void **s) { (void)s; run_sweep(3, 3, 0, 0); }

/* ------------------------------------------------ API without ranks */

static void test_names(void **s)
{
    (void)s;
    static const char *const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                        "reduce",    "alltoall",       "barrier"};
    static const char *const must[][7] = {
        {"ring", "recursive_doubling", "rabenseifner", "reduce_bcast", "hierarchical", "direct",
         "single_copy"},
        {"ring", "recursive_halving", "pairwise"},
        {"ring", "recursive_doubling", "bruck", "hierarchical"},
        {"binomial", "binary_tree", "chain", "scatter_allgather", "hierarchical"},
        {"binomial", "binary_tree", "rabenseifner", "hierarchical"},
        {"pairwise", "linear", "bruck"},
        {"dissemination", "tree"},
    };
    for (int k = 0; k < AI_COLL_COUNT; k++) {
        ai_coll got;
        assert_string_equal(ai_coll_name((ai_coll)k), names[k]);
        assert_int_equal(ai_coll_parse(names[k], &got), AI_OK);
        assert_int_equal(got, k);
        int n = ai_coll_algo_count((ai_coll)k);
        for (int j = 0; j < 7 && must[k][j]; j++) {
            int found = 0;
            for (int a = 0; a < n; a++)
                found |= !strcmp(ai_coll_algo_name((ai_coll)k, a), must[k][j]);
            if (!found)
                fail_msg("%s lacks algorithm %s", names[k], must[k][j]);
            assert_non_null(comm_algo_find((ai_coll)k, must[k][j]));
        }
        assert_null(ai_coll_algo_name((ai_coll)k, n));
        assert_null(ai_coll_algo_name((ai_coll)k, -1));
        assert_null(comm_algo_find((ai_coll)k, "nope"));
    }
    ai_coll got = AI_BARRIER;
    assert_int_equal(ai_coll_parse("ALLREDUCE", &got), AI_OK);
    assert_int_equal(got, AI_ALLREDUCE);
    assert_int_equal(ai_coll_parse("allgatherv", &got), AI_ERR_INVALID);
    assert_int_equal(ai_coll_algo_count(AI_COLL_COUNT), 0);
    assert_string_equal(ai_coll_name(AI_COLL_COUNT), "unknown");
}

/* auto picks a registered algorithm for every collective, size and shape. */
static void test_auto_rule(void **s)
{
    (void)s;
    struct ai_comm fake;
    memset(&fake, 0, sizeof fake);
    for (int size = 1; size <= 64; size++) {
        for (int nh = 1; nh <= size; nh += (size > 8 ? 7 : 1)) {
            fake.size = size, fake.nhosts = nh;
            for (int k = 0; k < AI_COLL_COUNT; k++) {
                for (size_t b = 0; b <= ((size_t)64 << 20); b = b ? b * 4 : 1) {
                    const char *a = ai_coll_auto_algo(&fake, (ai_coll)k, b);
                    assert_non_null(a);
                    assert_non_null(comm_algo_find((ai_coll)k, a));
                }
            }
        }
    }
    fake.size = 8, fake.nhosts = 1;
    assert_string_equal(ai_coll_auto_algo(&fake, AI_ALLREDUCE, 64), "recursive_doubling");
    assert_string_equal(ai_coll_auto_algo(&fake, AI_ALLREDUCE, (size_t)64 << 20), "ring");
    fake.nhosts = 2;
    assert_string_equal(ai_coll_auto_algo(&fake, AI_ALLREDUCE, (size_t)1 << 20), "hierarchical");
    assert_non_null(ai_coll_auto_algo(NULL, AI_BROADCAST, 100));
    /* every rank on one host with its slot board: direct on 2 ranks, on
     * more while it reads at most 64 KiB per rank ((p - 1) x bytes), and
     * always up to 8 KiB; as a reduce-scatter from 8 MiB, and on 8 or more
     * ranks up to 64 KiB, where the pool has room for its pieces (up to
     * 64 ranks) */
    struct comm_transport tp;
    memset(&tp, 0, sizeof tp);
    tp.slots = (unsigned char *)&tp; /* only tested for NULL */
    fake.tp = &tp, fake.nhosts = 1;
    static const struct {
        int p;
        size_t direct, not_direct;
    } rule[] = {{2, (size_t)64 << 20, 0},
                {4, 16 << 10, 32 << 10},
                {4, (size_t)8 << 20, (size_t)4 << 20},
                {16, 64 << 10, 128 << 10},
                {16, (size_t)8 << 20, (size_t)4 << 20},
                {128, 8 << 10, 16 << 10},
                {128, 8 << 10, (size_t)8 << 20}};
    for (size_t i = 0; i < AI_ARRAY_LEN(rule); i++) {
        fake.size = fake.local_size = rule[i].p;
        tp.slot_sets = comm_slot_sets(rule[i].p, 1);
        assert_string_equal(ai_coll_auto_algo(&fake, AI_ALLREDUCE, rule[i].direct), "direct");
        if (rule[i].not_direct)
            assert_string_not_equal(ai_coll_auto_algo(&fake, AI_ALLREDUCE, rule[i].not_direct),
                                    "direct");
    }
}

/* ------------------------------------------- validation on one rank */

#define EXPECT(call, want, needle)                                                            \
    do {                                                                                      \
        ai_status_t st_ = (call);                                                             \
        if (st_ != (want) || ((needle) && !strstr(ai_last_error(), (needle) ? (needle) : ""))) { \
            fprintf(stderr, "line %d: %s returned %d (%s), want %d containing '%s'\n",       \
                    __LINE__, #call, st_, ai_last_error(), (want), (needle) ? (needle) : "");  \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

static int validation_body(ai_comm *c, void *arg)
{
    (void)arg;
    float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
    ai_algo_opts bad = {.algo = "warp_speed"};
    ai_algo_opts autoo = {.algo = "AUTO"};
    const char *none = NULL;

    EXPECT(ai_allreduce(NULL, in, out, 8, AI_F32, AI_SUM, NULL), AI_ERR_INVALID, "NULL");
    EXPECT(ai_allreduce(c, in, out, 8, (ai_dtype)42, AI_SUM, NULL), AI_ERR_INVALID, "dtype");
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, (ai_op)42, NULL), AI_ERR_INVALID, "op");
    EXPECT(ai_allreduce(c, in, NULL, 8, AI_F32, AI_SUM, NULL), AI_ERR_INVALID, "recvbuf");
    EXPECT(ai_allreduce(c, NULL, out, 8, AI_F32, AI_SUM, NULL), AI_ERR_INVALID, "sendbuf");
    EXPECT(ai_allreduce(c, NULL, NULL, 0, AI_F32, AI_SUM, NULL), AI_OK, none);
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, &bad), AI_ERR_NOTFOUND, "allreduce");
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, &bad), AI_ERR_NOTFOUND, "warp_speed");
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, &bad), AI_ERR_NOTFOUND, "rabenseifner");
    EXPECT(ai_broadcast(c, out, 8, AI_F32, 0, &bad), AI_ERR_NOTFOUND, "scatter_allgather");
    EXPECT(ai_barrier(c, &bad), AI_ERR_NOTFOUND, "dissemination");
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, &autoo), AI_OK, none);
    EXPECT(ai_broadcast(c, out, 8, AI_F32, 1, NULL), AI_ERR_INVALID, "root");
    EXPECT(ai_broadcast(c, out, 8, AI_F32, -1, NULL), AI_ERR_INVALID, "root");
    EXPECT(ai_reduce(c, in, out, 8, AI_F32, AI_SUM, 3, NULL), AI_ERR_INVALID, "root");
    EXPECT(ai_reduce(c, in, NULL, 8, AI_F32, AI_SUM, 0, NULL), AI_ERR_INVALID, "recvbuf");
    EXPECT(ai_broadcast(c, NULL, 8, AI_F32, 0, NULL), AI_ERR_INVALID, "buf");
    EXPECT(ai_allgather(c, in, out, 8, AI_DTYPE_COUNT, NULL), AI_ERR_INVALID, "dtype");
    EXPECT(ai_alltoall(c, in, NULL, 8, AI_F32, NULL), AI_ERR_INVALID, "recvbuf");
    EXPECT(ai_reduce_scatter(c, in, out, SIZE_MAX / 2, AI_F64, AI_SUM, NULL), AI_ERR_INVALID,
           "too large");

    /* channels are clamped to the communicator's */
    ai_algo_opts ch = {.channels = 1000};
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, &ch), AI_OK, none);
    if (c->active_channels != c->channels)
        return 10;
    ch.channels = 1;
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, &ch), AI_OK, none);
    if (c->active_channels != 1)
        return 11;
    /* every call counts */
    uint32_t seq = c->call_seq;
    EXPECT(ai_barrier(c, NULL), AI_OK, none);
    if (c->call_seq != seq + 1)
        return 12;

    /* a failed communicator refuses */
    ai_status_t saved = c->state;
    c->state = AI_ERR_PEER;
    EXPECT(ai_allreduce(c, in, out, 8, AI_F32, AI_SUM, NULL), AI_ERR_ABORTED, "failed earlier");
    EXPECT(ai_barrier(c, NULL), AI_ERR_ABORTED, none);
    c->state = saved;

    /* AVG of one rank is the identity; in place works */
    EXPECT(ai_allreduce(c, AI_IN_PLACE, in, 8, AI_F32, AI_AVG, NULL), AI_OK, none);
    for (int i = 0; i < 8; i++)
        if (in[i] != (float)(i + 1))
            return 13;
    return 0;
}

static void test_validation(void **s)
{
    (void)s;
    assert_int_equal(ranks_run(1, NULL, validation_body, NULL), 0);
}

/* ------------------------------------ direct: the rank-order bits */

/* f32 values whose sums round: the order of the additions shows in the
 * bits. */
static float odd_val(int r, size_t i)
{
    return (float)((double)(r + 1) * 0.1 + (double)(i % 977) * 1e-3 + 1.0 / (double)(i + 3));
}

/* The shared-slot allreduce gives every rank the bits of the left fold
 * in rank order, ((x0 + x1) + x2) + ..., whether every rank reduces
 * every slot (8 and 16 KiB) or the ranks reduce a segment each and copy
 * the others' (160 KB: one piece; 1.2 MB: several, a count that splits
 * unevenly), in place or not. */
static int direct_bits_body(ai_comm *c, void *arg)
{
    (void)arg;
    static const size_t counts[] = {2048, 4099, 40000, 300007};
    int p = ai_comm_size(c), me = ai_comm_rank(c), rc = 0;
    ai_algo_opts o = {.algo = "direct"};
    float *in = malloc(300007 * sizeof *in), *out = malloc(300007 * sizeof *out);
    if (!in || !out) {
        rc = 2;
        goto out;
    }
    for (size_t ci = 0; ci < AI_ARRAY_LEN(counts) && !rc; ci++) {
        for (int inplace = 0; inplace < 2 && !rc; inplace++) {
            size_t n = counts[ci];
            for (size_t i = 0; i < n; i++)
                (inplace ? out : in)[i] = odd_val(me, i);
            if (ai_allreduce(c, inplace ? AI_IN_PLACE : in, out, n, AI_F32, AI_SUM, &o) != AI_OK) {
                fprintf(stderr, "direct, %zu floats: %s\n", n, ai_last_error());
                rc = 3;
                break;
            }
            for (size_t i = 0; i < n; i++) {
                float want = odd_val(0, i);
                for (int r = 1; r < p; r++)
                    want += odd_val(r, i);
                if (memcmp(&want, &out[i], sizeof want)) {
                    fprintf(stderr, "direct p=%d rank %d, %zu floats%s: [%zu] %.9g, want %.9g\n", p,
                            me, n, inplace ? " in place" : "", i, out[i], want);
                    rc = 4;
                    break;
                }
            }
        }
    }
out:
    free(in);
    free(out);
    return rc;
}

static void test_direct_bits(void **s)
{
    (void)s;
    for (int p = 3; p <= 5; p++)
        assert_int_equal(ranks_run(p, NULL, direct_bits_body, NULL), 0);
}

/* The streamed ring across hosts and the streamed hierarchical allreduce
 * (core_ring.c) give the bits of the lock-step versions: the same blocks,
 * the same chain of reductions. A chunk size as large as a block keeps
 * the lock-step ring, in one pass; on the hierarchical allreduce any
 * chunk size keeps the host steps and the ring one after another (on hosts
 * of two ranks: the rails below 1 MiB, the leaders' ring from 1 MiB, as
 * the streamed version splits the work). Both must also be the sum. */
static int stream_bits_body(ai_comm *c, void *arg)
{
    const char *algo = arg;
    static const size_t counts[] = {70001, 1000003};
    int me = ai_comm_rank(c), rc = 0;
    float *in = malloc(1000003 * sizeof *in), *out[2] = {malloc(1000003 * sizeof(float)),
                                                          malloc(1000003 * sizeof(float))};
    if (!in || !out[0] || !out[1]) {
        rc = 2;
        goto out;
    }
    for (size_t ci = 0; ci < AI_ARRAY_LEN(counts) && !rc; ci++) {
        size_t n = counts[ci];
        for (size_t i = 0; i < n; i++)
            in[i] = odd_val(me, i);
        for (int lock = 0; lock < 2 && !rc; lock++) {
            ai_algo_opts o = {.algo = algo, .chunk_bytes = lock ? n * sizeof(float) : 0};
            if (ai_allreduce(c, in, out[lock], n, AI_F32, AI_SUM, &o) != AI_OK) {
                fprintf(stderr, "%s, %zu floats: %s\n", algo, n, ai_last_error());
                rc = 3;
            }
        }
        for (size_t i = 0; i < n && !rc; i++) {
            double want = 0; /* the sum, to within float rounding */
            for (int r = 0; r < ai_comm_size(c); r++)
                want += odd_val(r, i);
            if (memcmp(&out[0][i], &out[1][i], sizeof(float))) {
                fprintf(stderr, "%s rank %d, %zu floats: [%zu] streamed %.9g, lock-step %.9g\n",
                        algo, me, n, i, out[0][i], out[1][i]);
                rc = 4;
            } else if (fabs(out[0][i] - want) > 1e-5 * fabs(want)) {
                fprintf(stderr, "%s rank %d, %zu floats: [%zu] %.9g, the sum is %.9g\n", algo,
                        me, n, i, out[0][i], want);
                rc = 5;
            }
        }
    }
out:
    free(in);
    free(out[0]);
    free(out[1]);
    return rc;
}

static void test_stream_bits(void **s)
{
    (void)s;
    ranks_opts three = {.nhosts = 3}, pairs = {.nhosts = 3, .round_robin = 1};
    assert_int_equal(ranks_run(3, &three, stream_bits_body, "ring"), 0);
    assert_int_equal(ranks_run(6, &pairs, stream_bits_body, "hierarchical"), 0);
}

/* A flow whose ops wait on a zero-byte request in a later lane: such a
 * request is done when posted, so the op waiting on it must be posted in
 * the same round, not reported as waiting on an op never posted (the
 * streamed hierarchical allreduce of a few elements has such pieces, and
 * met this once every other request happened to be done). */
static int flow_zero_body(ai_comm *c, void *arg)
{
    (void)arg;
    char a[8] = "flowing", b[8] = {0};
    /* rank 0: a send waiting on a zero-byte receive in the lane after it;
     * rank 1: the matching receive */
    comm_flow_op ops[] = {
        {.kind = COMM_REQ_SEND, .peer = 1, .dep = 1, .sbuf = a, .bytes = sizeof a},
        {.kind = COMM_REQ_RECV, .peer = 1, .dep = -1, .rbuf = b, .bytes = 0},
    }, recv = {.kind = COMM_REQ_RECV, .peer = 0, .dep = -1, .rbuf = b, .bytes = sizeof b};
    int two[] = {0, 1, 2}, one[] = {0, 1};
    ai_status_t st = ai_comm_rank(c) == 0 ? comm_core_flow(c, ops, 2, two, 2, AI_U8, AI_SUM)
                                          : comm_core_flow(c, &recv, 1, one, 1, AI_U8, AI_SUM);
    if (st != AI_OK) {
        fprintf(stderr, "flow, rank %d: %s\n", ai_comm_rank(c), ai_last_error());
        return 1;
    }
    return ai_comm_rank(c) == 1 && memcmp(a, b, sizeof a) ? 2 : 0;
}

static void test_flow_zero(void **s)
{
    (void)s;
    assert_int_equal(ranks_run(2, NULL, flow_zero_body, NULL), 0);
}

/* ------------------------------------------------------- harness */

static int hook_mark = -1;

static void mark_rank(int rank, void *arg)
{
    hook_mark = rank + *(int *)arg;
}

static int codes_body(ai_comm *c, void *arg)
{
    (void)arg;
    int r = ai_comm_rank(c);
    if (hook_mark != r + 100) /* before_create ran in this child */
        return 50;
    return r == 1 ? 7 : r == 2 ? (int)AI_ERR_TIMEOUT : 0;
}

static int sleepy_body(ai_comm *c, void *arg)
{
    (void)arg;
    if (ai_comm_rank(c) == 0)
        util_sleep_us(30 * 1000 * 1000);
    return 0;
}

static void test_harness(void **s)
{
    (void)s;
    int status[3], offset = 100;
    ranks_opts o = {.keep_going = 1, .status = status, .before_create = mark_rank,
                    .hook_arg = &offset};
    assert_int_equal(ranks_run(3, &o, codes_body, NULL), 1);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], 7);
    assert_int_equal(status[2], AI_ERR_TIMEOUT);
    /* the deadline kills a hung rank promptly */
    ranks_opts d = {.deadline_s = 1, .status = status};
    double t0 = ai_now();
    assert_int_equal(ranks_run(2, &d, sleepy_body, NULL), 1);
    assert_true(ai_now() - t0 < 10);
    assert_int_equal(status[0], RANKS_KILLED);
}

int main(void)
{
    shared_counter = mmap(NULL, 2 * sizeof *shared_counter, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_counter == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_auto_rule),
        cmocka_unit_test(test_harness),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_shm_1),
        cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3),
        cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_5),
        cmocka_unit_test(test_shm_6),
        cmocka_unit_test(test_shm_7),
        cmocka_unit_test(test_shm_8),
        cmocka_unit_test(test_shm_past_cache),
        cmocka_unit_test(test_shm_watch),
        cmocka_unit_test(test_direct_bits),
        cmocka_unit_test(test_stream_bits),
        cmocka_unit_test(test_flow_zero),
        cmocka_unit_test(test_tcp_2x2),
        cmocka_unit_test(test_tcp_3x3),
        cmocka_unit_test(test_mixed_4_rr),
        cmocka_unit_test(test_mixed_5_rr),
        cmocka_unit_test(test_mixed_7_3hosts),
        cmocka_unit_test(test_mixed_6_3hosts_rr),
    };
    /* TEST_FILTER=name: run the tests whose names match (cmocka's pattern). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    munmap((void *)shared_counter, 2 * sizeof *shared_counter);
    return rc;
}
