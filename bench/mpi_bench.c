/*
 * The peer side of our comparisons: times MPI collectives exactly the way
 * `autoinfra bench` times ours (warm-up calls, a barrier, then `iters` calls
 * back to back; each rank's mean per call; the slowest rank's mean is the
 * time), checks the result with the same kind of exact small-integer data,
 * and prints the same JSON lines. Built against whichever MPI's mpicc
 * compiles it (Open MPI's `mpicc`, MPICH's `mpicc.mpich`); the "system"
 * field says which. Not part of libautoinfra.
 *
 *   mpi_bench [--coll allreduce|allgather|reduce_scatter|broadcast|reduce|alltoall]
 *             [--bytes MIN[:MAX]] [--iters N] [--warmup N] [--algo LABEL]
 *             [--system NAME] [--no-finalize 0|1] [--alternate ROUNDS]
 *
 * `bytes` follows nccl-tests / `autoinfra bench` (docs/cli.md): the vector
 * for allreduce, reduce, broadcast; the whole input for reduce_scatter; the
 * gathered output for allgather; the whole send buffer for alltoall. Counts
 * round down to a multiple of the rank count where the buffer is split, and
 * the reported size is the rounded one. `bcast` is accepted for broadcast.
 * --algo only labels the output (the algorithm is chosen through the MPI's
 * own environment or MCA parameters). Every result is checked after timing
 * (receive buffer preset to 251 first); `wrong` is the number of wrong
 * elements summed over the ranks, and the exit status is 1 if any is wrong.
 * --no-finalize 1 ends with a barrier and _exit() instead of MPI_Finalize
 * (bench/compare uses it for MPICH, whose finalize hangs on the testbed).
 *
 * --alternate R times two ways of making the same call in one job: the
 * MPI_X entry point (the MPI shim's, docs/mpi-shim.md, when the shim is
 * preloaded) and the MPI library's own PMPI_X, in R rounds of `iters`
 * calls each, the two alternating and which goes first alternating
 * between rounds, so that both see the same machine. Each round's figure
 * is the slowest rank's mean; per size two JSON lines come out, systems
 * "shim" (MPI_X) and "mpi" (PMPI_X), with the median over rounds as
 * time_us, the rounds in "rounds_us" and, on the "shim" line, "ratio": the
 * median over rounds of the round's shim / mpi. A round makes `iters`
 * calls, or fewer where two probe calls of the slowest rank say they would
 * take over 0.25 s (at least 8; "iters" in the output is what ran).
 * The warm-up makes --warmup calls of MPI_X but at most 50 of PMPI_X.
 *
 * Built with -DMPI_BENCH_CCL and bench/ccl_bench.cpp it times oneCCL's
 * collectives instead (system "oneccl"; MPI only starts the job).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(MPI_BENCH_CCL)
#define DEFAULT_SYSTEM "oneccl"
void ccl_bench_setup(int rank, int size);
void ccl_bench_run(int coll, float *in, float *out, size_t count, size_t per);
void ccl_bench_finish(void);
#elif defined(OPEN_MPI)
#define DEFAULT_SYSTEM "ompi"
#elif defined(MPICH)
#define DEFAULT_SYSTEM "mpich"
#else
#define DEFAULT_SYSTEM "mpi"
#endif

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

enum coll { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALLTOALL };

/* Data patterns: small integers, exact in float for any reduction order. */
static float v_sum(int rank, size_t i) { return (float)((rank + (int)(i % 7)) % 4); }
static float v_src(int rank, size_t i) { return (float)((rank * 37 + (int)(i % 101)) % 101); }
static float v_a2a(int src, int dst, size_t i)
{
    return (float)((src * 13 + dst * 29 + (int)(i % 101)) % 101);
}

static void fill(enum coll c, int rank, int size, float *in, size_t count, size_t per)
{
    switch (c) {
    case ALLREDUCE: case REDUCE: case REDUCE_SCATTER:
        for (size_t i = 0; i < count; i++) in[i] = v_sum(rank, i);
        break;
    case ALLGATHER:
        for (size_t i = 0; i < per; i++) in[i] = v_src(rank, i);
        break;
    case BROADCAST:
        for (size_t i = 0; i < count; i++) in[i] = rank == 0 ? v_src(0, i) : 251.0f;
        break;
    case ALLTOALL:
        for (int d = 0; d < size; d++)
            for (size_t i = 0; i < per; i++) in[(size_t)d * per + i] = v_a2a(rank, d, i);
        break;
    }
}

/* MPI's own collective, under the shim's MPI_X (--alternate). */
static void run_pmpi(enum coll c, float *in, float *out, size_t count, size_t per)
{
    switch (c) {
    case ALLREDUCE:
        PMPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case REDUCE:
        PMPI_Reduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        PMPI_Allgather(in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case REDUCE_SCATTER:
        PMPI_Reduce_scatter_block(in, out, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case BROADCAST:
        PMPI_Bcast(in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        PMPI_Alltoall(in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    }
}

static void run(enum coll c, float *in, float *out, size_t count, size_t per)
{
#ifdef MPI_BENCH_CCL
    ccl_bench_run((int)c, in, out, count, per);
    return;
#endif
    switch (c) {
    case ALLREDUCE:
        MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case REDUCE:
        MPI_Reduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        MPI_Allgather(in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case REDUCE_SCATTER:
        MPI_Reduce_scatter_block(in, out, (int)per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case BROADCAST:
        MPI_Bcast(in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        MPI_Alltoall(in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    }
}

static long check(enum coll c, int rank, int size, const float *in, const float *out,
                  size_t count, size_t per)
{
    long wrong = 0;
    switch (c) {
    case ALLREDUCE: case REDUCE:
        if (c == REDUCE && rank != 0) break;
        for (size_t i = 0; i < count; i++) {
            float e = 0;
            for (int r = 0; r < size; r++) e += v_sum(r, i);
            wrong += out[i] != e;
        }
        break;
    case REDUCE_SCATTER:
        for (size_t i = 0; i < per; i++) {
            float e = 0;
            for (int r = 0; r < size; r++) e += v_sum(r, (size_t)rank * per + i);
            wrong += out[i] != e;
        }
        break;
    case ALLGATHER:
        for (int r = 0; r < size; r++)
            for (size_t i = 0; i < per; i++) wrong += out[(size_t)r * per + i] != v_src(r, i);
        break;
    case BROADCAST:
        for (size_t i = 0; i < count; i++) wrong += in[i] != v_src(0, i);
        break;
    case ALLTOALL:
        for (int s = 0; s < size; s++)
            for (size_t i = 0; i < per; i++)
                wrong += out[(size_t)s * per + i] != v_a2a(s, rank, i);
        break;
    }
    return wrong;
}

/* The slowest rank's mean (rank 0 only) and the wrong elements of all ranks
 * (every rank). Point to point on purpose: a forced algorithm (Open MPI's
 * coll_tuned_*_algorithm, MPICH's MPIR_CVAR_*_INTRA_ALGORITHM) applies to
 * every call of that collective, and some refuse a count of 1 (MPICH's
 * reduce_scatter_allgather needs count >= ranks), which would make the
 * bookkeeping fail instead of the measured call. */
static void stats(int rank, int size, double mean, long wrong, double *worst, long *total)
{
    double m[2] = {mean, (double)wrong};
    if (rank == 0) {
        *worst = mean;
        *total = wrong;
        for (int r = 1; r < size; r++) {
            MPI_Recv(m, 2, MPI_DOUBLE, r, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (m[0] > *worst) *worst = m[0];
            *total += (long)m[1];
        }
        for (int r = 1; r < size; r++) MPI_Send(total, 1, MPI_LONG, r, 78, MPI_COMM_WORLD);
    } else {
        MPI_Send(m, 2, MPI_DOUBLE, 0, 77, MPI_COMM_WORLD);
        MPI_Recv(total, 1, MPI_LONG, 0, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        *worst = mean;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* --alternate: at most this many seconds per round and side, but at
 * least this many calls (the output's iters says how many ran). */
#define ALTERNATE_ROUND_S 0.25
#define ALTERNATE_MIN_CALLS 8
/* --alternate: warm-up calls of PMPI_X (MPI_X gets all of --warmup) */
#define ALTERNATE_MPI_WARMUP 50

/* --alternate: one size, MPI_X against PMPI_X; returns the wrong elements
 * of both checks (all ranks). */
static long alternate_size(enum coll c, int rank, int size, float *in, float *out, size_t count,
                           size_t per, int iters, int warmup, int rounds, const char *coll,
                           double bus)
{
    double *t[2], *ratio;
    t[0] = malloc(sizeof(double) * (size_t)rounds);
    t[1] = malloc(sizeof(double) * (size_t)rounds);
    ratio = malloc(sizeof(double) * (size_t)rounds);
    if (!t[0] || !t[1] || !ratio) {
        fprintf(stderr, "mpi_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fill(c, rank, size, in, count, per);
    /* The shim's side needs its warm-up calls (its learner and its first
     * comparison count calls); MPI's own needs a few, and where its calls
     * take milliseconds (oversubscribed) the full count would outlast the
     * job's timeout. */
    for (int w = 0; w < warmup; w++) {
        run(c, in, out, count, per);
        if (w < ALTERNATE_MPI_WARMUP)
            run_pmpi(c, in, out, count, per);
    }
    /* Rounds sized to the call: the counts assume calls of microseconds,
     * and an oversubscribed MPI (4 ranks polling on 2 busy cores) takes
     * milliseconds per call, so that rounds x 2 sides x 1000 calls of each
     * size outlast any job's timeout. Two calls of each side are timed and
     * every rank takes the slowest rank's figure (PMPI, not the shim's). */
    double p0 = MPI_Wtime(), probe, slowest = 0;
    for (int k = 0; k < 2; k++) {
        run(c, in, out, count, per);
        run_pmpi(c, in, out, count, per);
    }
    probe = (MPI_Wtime() - p0) / 4;
    PMPI_Allreduce(&probe, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (slowest * iters > ALTERNATE_ROUND_S)
        iters = slowest * ALTERNATE_MIN_CALLS > ALTERNATE_ROUND_S ? ALTERNATE_MIN_CALLS
                                                                  : (int)(ALTERNATE_ROUND_S / slowest);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int which = (r + k) % 2; /* 0: MPI_X, 1: PMPI_X */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int it = 0; it < iters; it++)
                (which ? run_pmpi : run)(c, in, out, count, per);
            double mean = (MPI_Wtime() - t0) / iters, worst;
            long none;
            stats(rank, size, mean, 0, &worst, &none);
            t[which][r] = worst;
        }
        ratio[r] = t[1][r] > 0 ? t[0][r] / t[1][r] : 0;
    }
    long total_wrong = 0;
    for (int which = 0; which < 2; which++) {
        fill(c, rank, size, in, count, per);
        for (size_t i = 0; i < count; i++) out[i] = 251.0f;
        (which ? run_pmpi : run)(c, in, out, count, per);
        long wrong = check(c, rank, size, in, out, count, per), total;
        double worst;
        stats(rank, size, 0, wrong, &worst, &total);
        total_wrong += total;
        if (!rank) {
            size_t bytes = count * sizeof(float);
            printf("{\"system\":\"%s\",\"algo\":\"default\",\"coll\":\"%s\",\"bytes\":%zu,"
                   "\"count\":%zu,\"ranks\":%d,\"wrong\":%ld,\"iters\":%d,\"warmup\":%d,"
                   "\"rounds_us\":[",
                   which ? "mpi" : "shim", coll, bytes, count, size, total, iters, warmup);
            for (int r = 0; r < rounds; r++) printf("%s%.3f", r ? "," : "", t[which][r] * 1e6);
            double med = median(t[which], rounds);
            double algbw = med > 0 ? bytes / med / 1e9 : 0;
            printf("],\"time_us\":%.3f,\"algbw_GBps\":%.6g,\"busbw_GBps\":%.6g", med * 1e6,
                   algbw, algbw * bus);
            if (!which) printf(",\"ratio\":%.4f", median(ratio, rounds));
            printf("}\n");
            fflush(stdout);
        }
    }
    free(t[0]);
    free(t[1]);
    free(ratio);
    return total_wrong;
}

static const char usage_text[] =
    "usage: mpi_bench [--coll C] [--bytes MIN[:MAX]] [--iters N] [--warmup N] [--algo LABEL]\n"
    "                 [--system NAME] [--no-finalize 0|1] [--alternate ROUNDS]\n"
    "One MPI collective timed per size, checked, one JSON line per size.\n"
    "  --coll C           allreduce|allgather|reduce_scatter|broadcast|reduce|alltoall\n"
    "                     (default allreduce)\n"
    "  --bytes MIN[:MAX]  sizes, doubling, nccl-tests conventions (default 8:64M)\n"
    "  --iters N          timed calls per size (default 20)\n"
    "  --warmup N         untimed calls per size first (default 5)\n"
    "  --algo LABEL       only labels the output; the MPI's own settings choose (default\n"
    "                     default)\n"
    "  --system NAME      the output's system field (default: the MPI this was built with)\n"
    "  --no-finalize 0|1  1: end with a barrier and _exit() instead of MPI_Finalize\n"
    "                     (default 0)\n"
    "  --alternate R      R rounds alternating MPI_X (the shim's, when preloaded) and\n"
    "                     PMPI_X, iters calls each; systems shim and mpi (default 0: off)\n"
    "  -h, --help         this text\n";

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage_text, stdout);
            return 0;
        }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *coll = "allreduce", *algo = "default", *system = DEFAULT_SYSTEM;
    size_t lo = 8, hi = 64 << 20;
    int iters = 20, warmup = 5, no_finalize = 0, alternate = 0;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            if (!rank) fprintf(stderr, "mpi_bench: %s needs a value\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (!strcmp(argv[i], "--coll")) coll = argv[i + 1];
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--algo")) algo = argv[i + 1];
        else if (!strcmp(argv[i], "--system")) system = argv[i + 1];
        else if (!strcmp(argv[i], "--no-finalize")) no_finalize = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--alternate")) alternate = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--bytes")) {
            char *colon = strchr(argv[i + 1], ':');
            lo = parse_size(argv[i + 1]);
            hi = colon ? parse_size(colon + 1) : lo;
        } else {
            if (!rank) fprintf(stderr, "mpi_bench: unknown flag %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (iters < 1 || warmup < 0 || lo > hi || alternate < 0 || alternate > 10000) {
        if (!rank) fprintf(stderr, "mpi_bench: bad --iters/--warmup/--bytes/--alternate\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
#ifdef MPI_BENCH_CCL
    if (alternate) {
        if (!rank) fprintf(stderr, "mpi_bench: --alternate is for MPI builds, not oneCCL\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ccl_bench_setup(rank, size);
#endif
    enum coll c;
    double bus;
    if (!strcmp(coll, "allreduce")) c = ALLREDUCE, bus = 2.0 * (size - 1) / size;
    else if (!strcmp(coll, "allgather")) c = ALLGATHER, bus = (double)(size - 1) / size;
    else if (!strcmp(coll, "reduce_scatter")) c = REDUCE_SCATTER, bus = (double)(size - 1) / size;
    else if (!strcmp(coll, "broadcast") || !strcmp(coll, "bcast")) c = BROADCAST, bus = 1, coll = "broadcast";
    else if (!strcmp(coll, "reduce")) c = REDUCE, bus = 1;
    else if (!strcmp(coll, "alltoall")) c = ALLTOALL, bus = (double)(size - 1) / size;
    else {
        if (!rank) fprintf(stderr, "mpi_bench: unknown collective %s\n", coll);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    int split = c == ALLGATHER || c == REDUCE_SCATTER || c == ALLTOALL;
    float *in = malloc(hi + 64), *out = malloc(hi + 64);
    if (!in || !out) {
        fprintf(stderr, "mpi_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long any_wrong = 0;
    for (size_t req = lo; req <= hi; req *= 2) {
        size_t count = req / sizeof(float);
        if (split) count -= count % (size_t)size;
        size_t per = split ? count / (size_t)size : count;
        size_t bytes = count * sizeof(float);

        if (alternate) {
            any_wrong += alternate_size(c, rank, size, in, out, count, per, iters, warmup,
                                        alternate, coll, bus);
            if (req == 0) break;
            continue;
        }
        fill(c, rank, size, in, count, per);
        for (int w = 0; w < warmup; w++) run(c, in, out, count, per);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int it = 0; it < iters; it++) run(c, in, out, count, per);
        double mean = (MPI_Wtime() - t0) / iters, worst;

        fill(c, rank, size, in, count, per);
        for (size_t i = 0; i < count; i++) out[i] = 251.0f;
        run(c, in, out, count, per);
        long wrong = check(c, rank, size, in, out, count, per), total;

        stats(rank, size, mean, wrong, &worst, &total);
        any_wrong += total;
        if (!rank) {
            double algbw = worst > 0 ? bytes / worst / 1e9 : 0;
            printf("{\"system\":\"%s\",\"algo\":\"%s\",\"coll\":\"%s\",\"bytes\":%zu,"
                   "\"count\":%zu,\"call_count\":%zu,\"dtype\":\"f32\",\"op\":\"%s\","
                   "\"ranks\":%d,\"time_us\":%.3f,\"algbw_GBps\":%.6g,\"busbw_GBps\":%.6g,"
                   "\"wrong\":%ld,\"iters\":%d,\"warmup\":%d}\n",
                   system, algo, coll, bytes, count, per,
                   (c == ALLREDUCE || c == REDUCE || c == REDUCE_SCATTER) ? "sum" : "none",
                   size, worst * 1e6, algbw, algbw * bus, total, iters, warmup);
            fflush(stdout);
        }
        if (req == 0) break;
    }
    free(in);
    free(out);
#ifdef MPI_BENCH_CCL
    ccl_bench_finish();
#endif
    if (any_wrong && !rank) fprintf(stderr, "mpi_bench: %ld wrong elements\n", any_wrong);
    if (no_finalize) {
        /* MPICH 4.0 ch4:ucx over tcp across namespaces often hangs in
         * MPI_Finalize (ranks stuck in the PMI barrier and in UCX's
         * disconnect) after all results are out. Everything is measured and
         * printed by now: synchronise and leave without it. */
        MPI_Barrier(MPI_COMM_WORLD);
        fflush(stdout);
        fflush(stderr);
        _exit(any_wrong ? 1 : 0);
    }
    MPI_Finalize();
    return any_wrong ? 1 : 0;
}
