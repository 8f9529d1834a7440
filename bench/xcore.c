/*
 * The cost of handing cache lines between two cores: two threads, pinned
 * to CPUs 0 and 1, run a 64 KiB allreduce of floats the way `direct` does
 * (each copies its input into its slot, raises a flag, waits for the
 * other's, and adds the other's slot to its input), with the slots in two
 * alternating sets ("two") or taken in turn from a pool of --pool-mib MiB
 * ("pool"). Prints the mean microseconds per allreduce of each.
 *
 * On the 2-vCPU test machine "two" took 10-12 us in most spells and
 * 35-45 us in others, "pool" 4.4 us in the first (docs/runtime.md, "The
 * slot pool"); bench/results/one-host/pool records it before and after
 * each run as the machine's state; bench/regime-ab --probe before each
 * round. --nt writes the slots with non-temporal stores (through memory,
 * not the writer's cache; x86-64 only): in a slow spell of the test
 * machine the cache-line runs took 27-44 us and the non-temporal ones
 * 8-10 us (docs/runtime.md, "Slow spells").
 *
 * Build: cc -O3 -march=native -pthread bench/xcore.c -o xcore.
 * Usage: xcore [--pool-mib N] [--iters N] [--nt 0|1].
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define N (64 * 1024 / sizeof(float))

static float *pool, *in[2], *out[2];
static size_t nsets;
static long iters = 20000;
static _Atomic unsigned flag[2][16]; /* one cache line per thread */
static double result_us;
static int nt; /* --nt: the slots written with non-temporal stores */

/* n bytes (a multiple of 16, both 16-byte aligned) to dst, past the cache. */
static void copy_slot(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    if (nt) {
        __m128i *d = dst;
        const __m128i *s = src;
        for (size_t i = 0; i < n / 16; i++)
            _mm_stream_si128(d + i, _mm_load_si128(s + i));
        _mm_sfence(); /* before the flag that publishes them */
        return;
    }
#endif
    memcpy(dst, src, n);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
    int me = (int)(long)arg, peer = 1 - me;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(me, &cs);
    pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
    double t0 = 0;
    for (unsigned call = 1; call <= (unsigned)(iters + 1000); call++) {
        if (call == 1001)
            t0 = now();
        float *set = pool + (size_t)(call % nsets) * 2 * N;
        copy_slot(set + (size_t)me * N, in[me], N * sizeof(float));
        atomic_store_explicit(&flag[me][0], call, memory_order_release);
        while (atomic_load_explicit(&flag[peer][0], memory_order_acquire) < call)
            ;
        const float *theirs = set + (size_t)peer * N;
        for (size_t i = 0; i < N; i++)
            out[me][i] = in[me][i] + theirs[i];
        /* Seeing the other's flag at call means it has read call - 1's
         * slots, so set (call + 1) % nsets, last used by call - 1 or
         * earlier, is free to write (as in direct). */
    }
    if (me == 0)
        result_us = (now() - t0) / (double)iters * 1e6;
    return NULL;
}

static double measure(size_t sets)
{
    nsets = sets;
    memset(flag, 0, sizeof flag);
    pthread_t t[2];
    for (long r = 0; r < 2; r++)
        pthread_create(&t[r], NULL, run, (void *)r);
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    return result_us;
}

int main(int argc, char **argv)
{
    size_t pool_mib = 4;
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        printf("usage: xcore [--pool-mib N] [--iters N] [--nt 0|1]\n"
               "  --pool-mib N  MiB of slots the pooled run takes in turn (default 4)\n"
               "  --iters N     timed allreduces per run, after 1000 untimed (default 20000)\n"
               "  --nt 0|1      1: write the slots with non-temporal stores (x86-64; default 0)\n");
        return 0;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--pool-mib"))
            pool_mib = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--iters"))
            iters = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--nt"))
            nt = (int)strtol(argv[i + 1], NULL, 10);
        else
            pool_mib = 0; /* an unknown option: usage below */
    }
#if !defined(__x86_64__)
    if (nt) {
        fprintf(stderr, "xcore: --nt 1 needs x86-64\n");
        return 2;
    }
#endif
    if (argc % 2 == 0 || pool_mib < 1 || iters < 1 || (nt != 0 && nt != 1)) {
        fprintf(stderr, "usage: xcore [--pool-mib N (>= 1)] [--iters N (>= 1)] [--nt 0|1]\n");
        return 2;
    }
    size_t sets = pool_mib * 1024 * 1024 / (2 * N * sizeof(float));
    sets = sets < 2 ? 2 : sets & ~(size_t)1;
    pool = aligned_alloc(64, sets * 2 * N * sizeof(float));
    for (int r = 0; r < 2; r++) {
        in[r] = aligned_alloc(64, N * sizeof(float));
        out[r] = aligned_alloc(64, N * sizeof(float));
        if (!in[r] || !out[r])
            return 1;
        for (size_t i = 0; i < N; i++)
            in[r][i] = (float)(r + 1);
    }
    if (!pool)
        return 1;
    memset(pool, 0, sets * 2 * N * sizeof(float));
    double two = measure(2), pooled = measure(sets);
    printf("xcore: 64 KiB allreduce, 2 threads on CPUs 0 and 1%s: two sets %.2f us, a pool of %zu "
           "MiB %.2f us\n",
           nt ? ", non-temporal slot writes" : "", two, pool_mib, pooled);
    return out[0][0] == 3 && out[1][N - 1] == 3 ? 0 : 1;
}
