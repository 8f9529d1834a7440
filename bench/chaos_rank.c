/*
 * chaos-rank: one rank of a bench/chaos job (docs/chaos.md). It runs a
 * seeded schedule of random collectives (collective, size, element type,
 * operator, root, algorithm: the same on every rank, drawn from the seed
 * and the call number) and checks every result against the values every
 * rank can compute on its own. Built on the public header only.
 *
 *   chaos-rank [--seed S] [--calls N] [--max-bytes B] [--seconds T]
 *              [--stop-file F] [--mark K] [--report all|errors]
 *
 * It stops at the first failed call, after N calls (0: no limit), after T
 * seconds (0: no limit) or once file F exists, whichever comes first; with
 * T or F, every 8th call is preceded by a one-element allreduce through
 * which the ranks agree to stop (each rank sees its clock run out or the
 * file appear at another call). Lines on stdout, one
 * per event, times on CLOCK_MONOTONIC (the machine's clock, shared by the
 * orchestrator and every network namespace):
 *
 *   ready RANK SIZE T                  communicator created
 *   mark I T                           call I is about to start (I >= K, then every
 *                                      64th; with --mark)
 *   ok I COLL BYTES ALGO T0 T1         a call that returned AI_OK with the right data
 *                                      (--report all)
 *   wrong I COLL BYTES ALGO T1 DETAIL  a call that returned AI_OK with wrong data
 *   err I COLL BYTES ALGO T1 STATUS MSG
 *                                      a call that failed: ai_strerror's text with '_'
 *                                      for ' ' ("peer_failed"), the detailed message
 *   done CALLS T                       the schedule ended without a failure
 *
 * Exit status: 0 done, 3 a call failed (the fault was detected), 4 wrong
 * data, 1 set-up failed, 2 usage. SIGUSR1 arms the runtime's fault hook
 * (ai_fault_corrupt_next_frame) with a value drawn from the seed, so the
 * next header this rank sends is corrupted.
 */
#include "autoinfra.h"
#include "autoinfra/introspect.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The draws of one call: a tiny generator keyed by (seed, call). */
typedef struct draw { uint64_t s; } draw;
static uint64_t draw_next(draw *d) { return mix64(d->s++); }
static unsigned draw_below(draw *d, unsigned n) { return (unsigned)(draw_next(d) % n); }

static unsigned corrupt_value;
static void on_usr1(int sig)
{
    (void)sig;
    ai_fault_corrupt_next_frame(corrupt_value);
}

/* One call of the schedule. */
typedef struct call {
    ai_coll coll;
    ai_dtype dt;
    ai_op op;
    int root;
    size_t count;     /* as the API takes it (per rank for rs/ag/a2a) */
    size_t bytes;     /* count * element size */
    const char *algo; /* NULL: auto */
} call;

static const ai_dtype dts[] = {AI_F32, AI_F64, AI_F16, AI_BF16, AI_I32, AI_I64, AI_U8};
static const ai_op ops[] = {AI_SUM, AI_MIN, AI_MAX};

static call call_draw(uint64_t seed, long i, int size, size_t max_bytes)
{
    draw d = {mix64(seed) ^ mix64((uint64_t)i * 0x632be59bd9b4e019ull)};
    call c = {0};
    c.coll = (ai_coll)draw_below(&d, AI_COLL_COUNT);
    c.dt = dts[draw_below(&d, sizeof dts / sizeof *dts)];
    c.op = ops[draw_below(&d, sizeof ops / sizeof *ops)];
    c.root = (int)draw_below(&d, (unsigned)size);
    /* log-uniform bytes from one element to max_bytes */
    size_t es = ai_dtype_size(c.dt), maxc = max_bytes / es;
    if (maxc < 1)
        maxc = 1;
    double u = (double)(draw_next(&d) >> 11) / 9007199254740992.0;
    size_t n = (size_t)exp(u * log((double)maxc + 1));
    c.count = n < 1 ? 1 : n > maxc ? maxc : n;
    if (c.coll == AI_BARRIER)
        c.count = 0;
    c.bytes = c.count * es;
    /* half the calls auto (the learner), half a named algorithm */
    int na = ai_coll_algo_count(c.coll);
    if (na > 0 && draw_below(&d, 2))
        c.algo = ai_coll_algo_name(c.coll, (int)draw_below(&d, (unsigned)na));
    return c;
}

/* Element j of rank r's input in call i: a small positive integer, so that
 * sums of up to 8 ranks are exact in every type (bf16 holds integers to
 * 256, u8 to 255). */
static int value(long i, int r, size_t j)
{
    return (int)((((uint64_t)i * 131u + (uint64_t)r * 17u + j * 7u) % 31u) + 1u);
}

static int reduced(long i, int size, size_t j, ai_op op)
{
    int acc = value(i, 0, j);
    for (int r = 1; r < size; r++) {
        int v = value(i, r, j);
        acc = op == AI_SUM ? acc + v : op == AI_MIN ? (v < acc ? v : acc) : (v > acc ? v : acc);
    }
    return acc;
}

/* Check the output of call i on this rank; 0 if right, else writes what
 * differs first into why. */
static int check(const call *c, long i, int rank, int size, const void *out, char *why,
                 size_t wlen)
{
    size_t n = 0;
    switch (c->coll) {
    case AI_ALLREDUCE: n = c->count; break;
    case AI_REDUCE_SCATTER: n = c->count; break;
    case AI_ALLGATHER: case AI_ALLTOALL: n = c->count * (size_t)size; break;
    case AI_BROADCAST: n = c->count; break;
    case AI_REDUCE: n = rank == c->root ? c->count : 0; break;
    default: n = 0; break;
    }
    for (size_t j = 0; j < n; j++) {
        int want;
        switch (c->coll) {
        case AI_ALLREDUCE: case AI_REDUCE: want = reduced(i, size, j, c->op); break;
        case AI_REDUCE_SCATTER: want = reduced(i, size, (size_t)rank * c->count + j, c->op); break;
        case AI_ALLGATHER: want = value(i, (int)(j / c->count), j % c->count); break;
        case AI_ALLTOALL:
            want = value(i, (int)(j / c->count), (size_t)rank * c->count + j % c->count);
            break;
        case AI_BROADCAST: want = value(i, c->root, j); break;
        default: want = 0; break;
        }
        double got = ai_elem_get(out, c->dt, j);
        if (got != (double)want) {
            snprintf(why, wlen, "element %zu of %zu is %g, expected %d", j, n, got, want);
            return 1;
        }
    }
    return 0;
}

static ai_status_t run_call(ai_comm *comm, const call *c, long i, int rank, int size, void *in,
                            void *out)
{
    size_t nin = c->count;
    if (c->coll == AI_REDUCE_SCATTER || c->coll == AI_ALLTOALL)
        nin = c->count * (size_t)size;
    for (size_t j = 0; j < nin; j++)
        ai_elem_set(in, c->dt, j, value(i, rank, j));
    ai_algo_opts o = {.algo = c->algo};
    const ai_algo_opts *opts = c->algo ? &o : NULL;
    switch (c->coll) {
    case AI_ALLREDUCE: return ai_allreduce(comm, in, out, c->count, c->dt, c->op, opts);
    case AI_REDUCE_SCATTER: return ai_reduce_scatter(comm, in, out, c->count, c->dt, c->op, opts);
    case AI_ALLGATHER: return ai_allgather(comm, in, out, c->count, c->dt, opts);
    case AI_BROADCAST:
        if (rank == c->root)
            memcpy(out, in, c->bytes);
        return ai_broadcast(comm, out, c->count, c->dt, c->root, opts);
    case AI_REDUCE: return ai_reduce(comm, in, out, c->count, c->dt, c->op, c->root, opts);
    case AI_ALLTOALL: return ai_alltoall(comm, in, out, c->count, c->dt, opts);
    case AI_BARRIER: return ai_barrier(comm, opts);
    default: return AI_ERR_INVALID;
    }
}

static void print_err(long i, const char *coll, size_t bytes, const char *algo, double t,
                      ai_status_t st)
{
    /* one line: the message may hold no newline */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ai_last_error());
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    /* the status as one word: "peer failed" -> "peer_failed" */
    char name[64];
    snprintf(name, sizeof name, "%s", ai_strerror(st));
    for (char *p = name; *p; p++)
        if (*p == ' ')
            *p = '_';
    printf("err %ld %s %zu %s %.6f %s %s\n", i, coll, bytes, algo, t, name, msg);
}

static int usage(FILE *out, int rc)
{
    fprintf(out,
            "usage: chaos-rank [--seed S] [--calls N] [--max-bytes B] [--seconds T] "
            "[--stop-file F] [--mark K] [--report all|errors]\n"
            "One rank of a bench/chaos job: a seeded schedule of random checked collectives.\n"
            "  --seed S         seed of the schedule, the same on every rank (default 1)\n"
            "  --calls N        stop after N calls (default 0: no limit)\n"
            "  --max-bytes B    largest buffer per rank of a call, 8..256M (default 1M)\n"
            "  --seconds T      stop after T seconds (default 0: no limit)\n"
            "  --stop-file F    stop once file F exists (default: none)\n"
            "  --mark K         print 'mark' lines from call K on (default: none)\n"
            "  --report R       'all': a line per call; 'errors': failures only (default errors)\n"
            "  -h, --help       this text\n");
    return rc;
}

int main(int argc, char **argv)
{
    uint64_t seed = 1;
    long calls = 0, mark = -1;
    size_t max_bytes = 1 << 20;
    double seconds = 0;
    const char *stop_file = NULL;
    int report_all = 0;
    for (int a = 1; a < argc; a++) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        char *end = NULL;
        if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help"))
            return usage(stdout, 0);
        if (!v)
            return usage(stderr, 2);
        if (!strcmp(argv[a], "--seed"))
            seed = strtoull(v, &end, 10);
        else if (!strcmp(argv[a], "--calls"))
            calls = strtol(v, &end, 10);
        else if (!strcmp(argv[a], "--mark"))
            mark = strtol(v, &end, 10);
        else if (!strcmp(argv[a], "--seconds"))
            seconds = strtod(v, &end);
        else if (!strcmp(argv[a], "--stop-file")) {
            stop_file = v;
            end = (char *)v + strlen(v);
        }
        else if (!strcmp(argv[a], "--max-bytes")) {
            if (ai_parse_size(v, &max_bytes) != AI_OK || max_bytes < 8 || max_bytes > (1u << 28)) {
                fprintf(stderr, "chaos-rank: --max-bytes '%s' is not a size in 8..256M\n", v);
                return 2;
            }
            end = (char *)v + strlen(v);
        } else if (!strcmp(argv[a], "--report")) {
            if (strcmp(v, "all") && strcmp(v, "errors"))
                return usage(stderr, 2);
            report_all = !strcmp(v, "all");
            end = (char *)v + strlen(v);
        } else
            return usage(stderr, 2);
        if (!end || *end || calls < 0 || seconds < 0) {
            fprintf(stderr, "chaos-rank: bad value '%s' for %s\n", v, argv[a]);
            return 2;
        }
        a++;
    }
    /* line by line: the orchestrator watches for progress as it happens */
    setvbuf(stdout, NULL, _IOLBF, 0);
    ai_comm *comm = NULL;
    ai_status_t st = ai_comm_create_env(&comm);
    if (st != AI_OK) {
        fprintf(stderr, "chaos-rank: communicator: %s: %s\n", ai_strerror(st), ai_last_error());
        print_err(-1, "create", 0, "-", now_s(), st);
        return 3;
    }
    int rank = ai_comm_rank(comm), size = ai_comm_size(comm);
    corrupt_value = (unsigned)(mix64(seed ^ 0x5bd1e995u ^ (uint64_t)rank) & 0xffffu);
    signal(SIGUSR1, on_usr1);
    void *in = malloc(max_bytes * (size_t)size), *out = malloc(max_bytes * (size_t)size);
    if (!in || !out) {
        fprintf(stderr, "chaos-rank: out of memory\n");
        ai_comm_destroy(comm);
        return 1;
    }
    printf("ready %d %d %.6f\n", rank, size, now_s());
    fflush(stdout);
    double t_end = seconds > 0 ? now_s() + seconds : 0;
    int rc = 0;
    long i = 0;
    for (; calls == 0 || i < calls; i++) {
        if ((t_end > 0 || stop_file) && i % 8 == 0) {
            /* ranks stop together: each rank's clock says "time up" at a
             * different call, so they agree on it (the maximum of their flags) */
            int32_t up = (t_end > 0 && now_s() > t_end) ||
                         (stop_file && access(stop_file, F_OK) == 0);
            int32_t any = -1;
            st = ai_allreduce(comm, &up, &any, 1, AI_I32, AI_MAX, NULL);
            if (st == AI_OK && any == 1)
                break;
            if (st == AI_OK && any != 0 && any != 1) {
                printf("wrong %ld stop 4 auto %.6f i32 max stop flag is %d\n", i, now_s(),
                       (int)any);
                rc = 4;
                break;
            }
            if (st != AI_OK) {
                print_err(i, "allreduce", 4, "auto", now_s(), st);
                rc = 3;
                break;
            }
        }
        call c = call_draw(seed, i, size, max_bytes);
        const char *an = c.algo ? c.algo : "auto";
        if (mark >= 0 && i >= mark && (i == mark || (i - mark) % 64 == 0)) {
            printf("mark %ld %.6f\n", i, now_s());
            fflush(stdout);
        }
        memset(out, 0xee, c.bytes * (size_t)size);
        double t0 = now_s();
        st = run_call(comm, &c, i, rank, size, in, out);
        double t1 = now_s();
        if (st != AI_OK) {
            print_err(i, ai_coll_name(c.coll), c.bytes, an, t1, st);
            rc = 3;
            break;
        }
        char why[160];
        if (check(&c, i, rank, size, out, why, sizeof why)) {
            printf("wrong %ld %s %zu %s %.6f %s %s %s\n", i, ai_coll_name(c.coll), c.bytes, an, t1,
                   ai_dtype_name(c.dt), ai_op_name(c.op), why);
            rc = 4;
            break;
        }
        if (report_all)
            printf("ok %ld %s %zu %s %.6f %.6f\n", i, ai_coll_name(c.coll), c.bytes, an, t0, t1);
    }
    if (rc == 0)
        printf("done %ld %.6f\n", i, now_s());
    fflush(stdout);
    free(in);
    free(out);
    ai_comm_destroy(comm);
    return rc;
}
