/*
 * `autoinfra bench`: measure collectives the way nccl-tests does, one rank
 * per process, started by `autoinfra launch`, mpirun or srun. docs/cli.md
 * describes flags and output; this comment says why it works this way.
 *
 * Sizes. --bytes is the per-rank buffer size in nccl-tests' sense:
 * allreduce/reduce/broadcast the vector, reduce_scatter the input,
 * allgather the gathered output, alltoall the whole send buffer. Counts are
 * rounded down to whole elements (and to a multiple of the rank count where
 * the buffer is split by rank); the reported bytes are the rounded size, so
 * bandwidths describe what really moved.
 *
 * Timing. Warmup calls, a barrier, then `iters` back-to-back calls timed as
 * a whole. Each rank's mean per call is reduced with MAX: a collective is as
 * slow as its slowest rank. busbw applies nccl-tests' bus factors so that
 * numbers are comparable across rank counts and with nccl-tests.
 *
 * Checking. Inputs are small non-negative integers chosen so that every
 * partial result is exactly representable in every dtype (bf16 holds
 * integers up to 256 exactly): any summation order gives the same bits, so
 * the reference can be computed locally and compared for equality, no
 * tolerance. Sums keep per-element totals <= 250; products use values in
 * {1, 2} with at most 7 twos per element; avg gives every rank the same
 * value so that sum/p is exact (integers truncate). Receive buffers are
 * preset to 251, a value no correct result takes, so a collective that
 * writes nothing is caught.
 */
#include "autoinfra.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BENCH_SENTINEL 251.0
#define BENCH_DEFAULT_MIN 8
#define BENCH_DEFAULT_MAX ((size_t)64 << 20)

typedef struct bench_opts {
    ai_coll coll;
    size_t min_bytes, max_bytes;
    ai_dtype dt;
    ai_op op;
    const char *algo;  /* NULL: auto */
    int iters, warmup;
    int check, json, list;
    size_t chunk;
    int channels;
    int root;
    const char *kb;         /* --kb: the learner's knowledge base */
    int learn;              /* --learn: learner vs exhaustive sweep */
    int no_sweep;           /* --no-sweep: --learn without the sweep */
    int calls;              /* --calls: auto calls per size in --learn */
    int more;               /* --more: auto calls after the choice is read */
    int confirm;            /* --confirm: rounds of the confirmation (-1: default) */
    int judge;              /* --judge: rounds of choice against oracle (-1: default) */
    const char *oracle_from; /* --oracle-from: an earlier --learn run's candidates */
    int drift_after;        /* --drift-after: calls before --drift-cmd */
    const char *drift_cmd;
} bench_opts;

/* Buffer shape of one call, from the requested bytes. Reported "count" is
 * bytes / dtype size as in nccl-tests (all elements of the size column);
 * the call's own count argument is per rank for reduce_scatter, allgather
 * and alltoall. */
typedef struct bench_shape {
    size_t count;       /* the count argument of the call */
    size_t send_elems;  /* elements in the send buffer (0: none/in place) */
    size_t recv_elems;
    size_t bytes;       /* reported size after rounding */
} bench_shape;

/* The rank as the environment tells it, for messages printed before (or
 * without) a communicator. */
static const char *env_rank(void)
{
    static const char *const vars[] = {"AUTOINFRA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                       "PMIX_RANK", "SLURM_PROCID"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
        const char *v = getenv(vars[k]);
        if (v && *v)
            return v;
    }
    return NULL;
}

/* Usage errors: every rank finds the same one; only rank 0 (or a process
 * that is not part of a job) says it. */
static int bench_usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bench_usage_err(const char *fmt, ...)
{
    const char *r = env_rank();
    va_list ap;
    if (r && strcmp(r, "0"))
        return 2;
    fputs("autoinfra bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see 'autoinfra bench --help')\n", stderr);
    return 2;
}

/* Runtime errors: ai_strerror + ai_last_error, with the rank. */
static int bench_fail(int rank, ai_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bench_fail(int rank, ai_status_t st, const char *fmt, ...)
{
    va_list ap;
    const char *detail = ai_last_error();
    if (rank >= 0)
        fprintf(stderr, "autoinfra bench: rank %d: ", rank);
    else
        fprintf(stderr, "autoinfra bench: rank %s: ", env_rank() ? env_rank() : "?");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s%s%s\n", ai_strerror(st), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

static void bench_help(FILE *out)
{
    fprintf(out,
        "usage: autoinfra bench [options]            (one process per rank)\n"
        "       autoinfra launch -n 4 -- autoinfra bench --coll allreduce --check\n"
        "       autoinfra bench --coll NAME --list   (algorithms, no ranks needed)\n"
        "\n"
        "options:\n"
        "  --coll NAME        allreduce (default), reduce_scatter, allgather,\n"
        "                     broadcast, reduce, alltoall, barrier\n"
        "  --bytes MIN[:MAX]  per-rank buffer size, doubling from MIN to MAX;\n"
        "                     K/M/G suffixes are powers of 2 (default 8:64M)\n"
        "  --dtype T          f32 (default), f64, f16, bf16, i32, i64, u8\n"
        "  --op OP            sum (default), prod, min, max, avg\n"
        "  --algo NAME|auto   algorithm (default auto; --list shows the names)\n"
        "  --iters N          timed calls per size (default 20)\n"
        "  --warmup N         untimed calls before timing (default 5)\n"
        "  --check            verify every element of one extra call; exit 1 if wrong\n"
        "  --json             one JSON object per size on stdout instead of the table\n"
        "  --chunk BYTES      pipelining segment size (default: the algorithm's)\n"
        "  --channels N       TCP connections to use (default: the communicator's)\n"
        "  --root R           root of broadcast and reduce (default 0)\n"
        "  --list             print the algorithms of --coll, one per line\n"
        "  --kb PATH          the learner's knowledge base (default AUTOINFRA_KB or\n"
        "                     ~/.cache/autoinfra/kb.sqlite)\n"
        "\n"
        "learner evaluation (docs/learner.md):\n"
        "  --learn            per size: --calls auto calls, each timed, then every arm\n"
        "                     the learner weighs (--iters calls each), then the best\n"
        "                     three and the choice again, interleaved: the oracle\n"
        "  --calls N          auto calls per size (default 32)\n"
        "  --more N           N more auto calls after the choice is read (a longer\n"
        "                     first job: a settled learner refines near ties);\n"
        "                     the row's \"more\" has the choice after them\n"
        "  --confirm N        rounds of that confirmation (default 5; 0: the\n"
        "                     oracle is the sweep's fastest)\n"
        "  --judge N          rounds of the choice against the oracle, interleaved,\n"
        "                     when they differ: their times then (default 8; 0: the\n"
        "                     confirmation's, which favour the oracle)\n"
        "  --oracle-from FILE instead of the sweep, confirm the arms of FILE's\n"
        "                     confirmation for the same size (FILE: an earlier\n"
        "                     --learn --json run, e.g. the cold run for a warm one)\n"
        "  --no-sweep         --learn without the sweep (a warm run: the oracle\n"
        "                     is known from an earlier one)\n"
        "  --drift-after K    run K auto calls, then --drift-cmd on rank 0, then\n"
        "  --drift-cmd CMD    --calls more; the sweep after it is the new oracle\n"
        "  -h, --help         this text\n"
        "\n"
        "bytes follows nccl-tests: the vector for allreduce/reduce/broadcast, the\n"
        "input for reduce_scatter, the gathered output for allgather, the whole\n"
        "send buffer for alltoall. time_us is the slowest rank's mean per call;\n"
        "algbw = bytes/time; busbw = algbw * bus factor (allreduce 2(p-1)/p,\n"
        "reduce_scatter, allgather, alltoall (p-1)/p, broadcast, reduce 1).\n"
        "Without --check, #wrong is -1.\n");
}

/* ------------------------------------------------------------ parsing */

static int algo_known(ai_coll coll, const char *name)
{
    int n = ai_coll_algo_count(coll);
    for (int k = 0; k < n; k++) {
        const char *a = ai_coll_algo_name(coll, k);
        if (a && !strcmp(a, name))
            return 1;
    }
    return 0;
}

/* 0 run, 1 help printed, 2 usage error. */
static int bench_parse(int argc, char **argv, bench_opts *o)
{
    o->coll = AI_ALLREDUCE;
    o->min_bytes = BENCH_DEFAULT_MIN;
    o->max_bytes = BENCH_DEFAULT_MAX;
    o->dt = AI_F32;
    o->op = AI_SUM;
    o->iters = 20;
    o->warmup = 5;
    o->confirm = -1;
    o->judge = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strcmp(a, "--check")) {
            o->check = 1;
            continue;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--list")) {
            o->list = 1;
            continue;
        }
        if (!strcmp(a, "--learn")) {
            o->learn = 1;
            continue;
        }
        if (!strcmp(a, "--no-sweep")) {
            o->no_sweep = 1;
            continue;
        }
#define OPT(name) ((m = cli_match_opt(argc, argv, &i, name, &v)) != 0)
        if (OPT("--coll")) {
            if (m < 0)
                goto missing;
            if (ai_coll_parse(v, &o->coll) != AI_OK)
                return bench_usage_err("--coll '%s': unknown collective", v);
        } else if (OPT("--bytes")) {
            const char *colon, *end;
            if (m < 0)
                goto missing;
            colon = strchr(v, ':');
            end = v + strlen(v);
            if (cli_parse_size(v, colon ? colon : end, &o->min_bytes) ||
                (colon && cli_parse_size(colon + 1, end, &o->max_bytes)))
                return bench_usage_err("--bytes '%s': expected MIN[:MAX] like 1K:64M", v);
            if (!colon)
                o->max_bytes = o->min_bytes;
            if (o->max_bytes < o->min_bytes)
                return bench_usage_err("--bytes '%s': MAX is smaller than MIN", v);
        } else if (OPT("--dtype")) {
            if (m < 0)
                goto missing;
            if (ai_dtype_parse(v, &o->dt) != AI_OK)
                return bench_usage_err("--dtype '%s': unknown type "
                                       "(f32, f64, f16, bf16, i32, i64, u8)", v);
        } else if (OPT("--op")) {
            if (m < 0)
                goto missing;
            if (ai_op_parse(v, &o->op) != AI_OK)
                return bench_usage_err("--op '%s': unknown operation "
                                       "(sum, prod, min, max, avg)", v);
        } else if (OPT("--algo")) {
            if (m < 0)
                goto missing;
            o->algo = strcasecmp(v, "auto") ? v : NULL;
        } else if (OPT("--iters")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 1, 1000000000, &o->iters))
                return bench_usage_err("--iters '%s': expected a number >= 1", v);
        } else if (OPT("--warmup")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 0, 1000000000, &o->warmup))
                return bench_usage_err("--warmup '%s': expected a number >= 0", v);
        } else if (OPT("--chunk")) {
            if (m < 0)
                goto missing;
            if (cli_parse_size(v, v + strlen(v), &o->chunk) || !o->chunk)
                return bench_usage_err("--chunk '%s': expected a size > 0 like 64K", v);
        } else if (OPT("--channels")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 1, 1024, &o->channels))
                return bench_usage_err("--channels '%s': expected a number >= 1", v);
        } else if (OPT("--kb")) {
            if (m < 0)
                goto missing;
            o->kb = v;
        } else if (OPT("--confirm")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 0, 64, &o->confirm))
                return bench_usage_err("--confirm '%s': expected a number from 0 to 64", v);
        } else if (OPT("--judge")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 0, 64, &o->judge))
                return bench_usage_err("--judge '%s': expected a number from 0 to 64", v);
        } else if (OPT("--oracle-from")) {
            if (m < 0)
                goto missing;
            o->oracle_from = v;
        } else if (OPT("--calls")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 1, 100000, &o->calls))
                return bench_usage_err("--calls '%s': expected a number >= 1", v);
        } else if (OPT("--more")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 0, 100000, &o->more))
                return bench_usage_err("--more '%s': expected a number >= 0", v);
        } else if (OPT("--drift-after")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 1, 100000, &o->drift_after))
                return bench_usage_err("--drift-after '%s': expected a number >= 1", v);
        } else if (OPT("--drift-cmd")) {
            if (m < 0)
                goto missing;
            o->drift_cmd = v;
        } else if (OPT("--root")) {
            if (m < 0)
                goto missing;
            if (cli_parse_int(v, 0, 1 << 30, &o->root))
                return bench_usage_err("--root '%s': expected a rank >= 0", v);
        } else {
            return bench_usage_err("unknown option '%s'", a);
        }
#undef OPT
        continue;
missing:
        return bench_usage_err("option '%s' needs a value", a);
    }
    if (!o->drift_after != !o->drift_cmd)
        return bench_usage_err("--drift-after and --drift-cmd go together");
    if ((o->drift_after || o->calls || o->more || o->no_sweep || o->confirm >= 0 ||
         o->judge >= 0 || o->oracle_from) && !o->learn)
        return bench_usage_err("--calls, --more, --confirm, --judge, --oracle-from, --no-sweep "
                               "and --drift-* need --learn");
    if (o->oracle_from && o->no_sweep)
        return bench_usage_err("--oracle-from and --no-sweep: one or the other");
    if (o->oracle_from && o->confirm == 0)
        return bench_usage_err("--oracle-from needs a confirmation (--confirm >= 1)");
    if (o->confirm < 0)
        o->confirm = 5;
    if (o->judge < 0)
        o->judge = 8;
    if (!o->calls)
        o->calls = 32;
    /* Checked after the loop: --algo may come before --coll. */
    if (o->algo && !algo_known(o->coll, o->algo)) {
        const char *r = env_rank();
        int n = ai_coll_algo_count(o->coll);
        if (!r || !strcmp(r, "0")) {
            fprintf(stderr, "autoinfra bench: --algo '%s': no such %s algorithm; known:", o->algo,
                    ai_coll_name(o->coll));
            for (int k = 0; k < n; k++) {
                const char *name = ai_coll_algo_name(o->coll, k);
                if (name)
                    fprintf(stderr, " %s,", name);
            }
            fprintf(stderr, " auto\n");
        }
        return 2;
    }
    return 0;
}

/* ------------------------------------------------------------ shapes */

static int coll_is_reduction(ai_coll c)
{
    return c == AI_ALLREDUCE || c == AI_REDUCE_SCATTER || c == AI_REDUCE;
}

static bench_shape bench_shape_of(ai_coll coll, size_t bytes, size_t esize, int p)
{
    bench_shape s;
    size_t per = bytes / esize;
    memset(&s, 0, sizeof s);
    switch (coll) {
    case AI_ALLREDUCE:
    case AI_REDUCE:
        s.count = s.send_elems = s.recv_elems = per;
        s.bytes = per * esize;
        break;
    case AI_BROADCAST:
        s.count = s.recv_elems = per;
        s.bytes = per * esize;
        break;
    case AI_REDUCE_SCATTER:
        s.count = s.recv_elems = per / (size_t)p;
        s.send_elems = s.count * (size_t)p;
        s.bytes = s.send_elems * esize;
        break;
    case AI_ALLGATHER:
        s.count = s.send_elems = per / (size_t)p;
        s.recv_elems = s.count * (size_t)p;
        s.bytes = s.recv_elems * esize;
        break;
    case AI_ALLTOALL:
        s.count = per / (size_t)p;
        s.send_elems = s.recv_elems = s.count * (size_t)p;
        s.bytes = s.send_elems * esize;
        break;
    default: /* barrier */
        break;
    }
    return s;
}

static double bus_factor(ai_coll coll, int p)
{
    switch (coll) {
    case AI_ALLREDUCE:
        return 2.0 * (p - 1) / p;
    case AI_REDUCE_SCATTER:
    case AI_ALLGATHER:
    case AI_ALLTOALL:
        return (double)(p - 1) / p;
    case AI_BROADCAST:
    case AI_REDUCE:
        return 1.0;
    default:
        return 0.0;
    }
}

/* ------------------------------------------------------------ data */

static void put(void *buf, ai_dtype dt, size_t i, double v)
{
    switch (dt) {
    case AI_F32: ((float *)buf)[i] = (float)v; break;
    case AI_F64: ((double *)buf)[i] = v; break;
    case AI_F16: ((uint16_t *)buf)[i] = ai_f32_to_f16((float)v); break;
    case AI_BF16: ((uint16_t *)buf)[i] = ai_f32_to_bf16((float)v); break;
    case AI_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case AI_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case AI_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: break;
    }
}

static double get(const void *buf, ai_dtype dt, size_t i)
{
    switch (dt) {
    case AI_F32: return ((const float *)buf)[i];
    case AI_F64: return ((const double *)buf)[i];
    case AI_F16: return ai_f16_to_f32(((const uint16_t *)buf)[i]);
    case AI_BF16: return ai_bf16_to_f32(((const uint16_t *)buf)[i]);
    case AI_I32: return ((const int32_t *)buf)[i];
    case AI_I64: return (double)((const int64_t *)buf)[i];
    case AI_U8: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

/* Input of rank r at (global) element i of a reduction; see the top
 * comment for why these values. */
static double val_reduce(ai_op op, int p, int r, size_t i)
{
    size_t m = (size_t)(250 / p) < 3 ? (size_t)(250 / p) : 3; /* max value */
    size_t q;
    switch (op) {
    case AI_SUM:
        if (m == 0) /* > 250 ranks: one rank contributes 1 per element */
            return (i + (size_t)r) % (size_t)p == 0;
        return (double)((i + 2 * (size_t)r) % (m + 1));
    case AI_AVG:
        return m ? (double)(i % (m + 1)) : 0.0;
    case AI_PROD:
        q = (size_t)(p + 6) / 7;
        if (q < 2)
            q = 2;
        return (i + (size_t)r) % q == 0 ? 2.0 : 1.0;
    default: /* min, max: anything exact */
        return (double)((i * 5 + (size_t)r * 3 + 1) % 97);
    }
}

static double expect_reduce(ai_op op, int p, size_t i)
{
    double acc = val_reduce(op, p, 0, i);
    for (int r = 1; r < p; r++) {
        double v = val_reduce(op, p, r, i);
        switch (op) {
        case AI_PROD: acc *= v; break;
        case AI_MIN: acc = v < acc ? v : acc; break;
        case AI_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    return op == AI_AVG ? acc / p : acc;
}

/* Data moved without reduction: rank r's element k. */
static double val_copy(int r, size_t k)
{
    return (double)(((size_t)r * 7 + k * 3 + 1) % 97);
}

/* alltoall: element k of the block rank s sends to rank d. */
static double val_a2a(int s, int d, size_t k)
{
    return (double)(((size_t)s * 31 + (size_t)d * 7 + k) % 101);
}

static void fill_inputs(const bench_opts *o, const bench_shape *s, int rank, int p, void *sbuf,
                        void *rbuf)
{
    for (size_t i = 0; i < s->recv_elems; i++)
        put(rbuf, o->dt, i, BENCH_SENTINEL);
    switch (o->coll) {
    case AI_ALLREDUCE:
    case AI_REDUCE:
    case AI_REDUCE_SCATTER:
        for (size_t i = 0; i < s->send_elems; i++)
            put(sbuf, o->dt, i, val_reduce(o->op, p, rank, i));
        break;
    case AI_ALLGATHER:
        for (size_t i = 0; i < s->send_elems; i++)
            put(sbuf, o->dt, i, val_copy(rank, i));
        break;
    case AI_ALLTOALL:
        for (size_t i = 0; i < s->send_elems; i++)
            put(sbuf, o->dt, i, val_a2a(rank, (int)(i / s->count), i % s->count));
        break;
    case AI_BROADCAST:
        if (rank == o->root)
            for (size_t i = 0; i < s->recv_elems; i++)
                put(rbuf, o->dt, i, val_copy(o->root, i));
        break;
    default:
        break;
    }
}

/* Elements of the result that differ from the locally computed reference. */
static int64_t count_wrong(const bench_opts *o, const bench_shape *s, int rank, int p,
                           const void *rbuf)
{
    int64_t wrong = 0;
    for (size_t i = 0; i < s->recv_elems; i++) {
        double want;
        switch (o->coll) {
        case AI_ALLREDUCE:
            want = expect_reduce(o->op, p, i);
            break;
        case AI_REDUCE:
            if (rank != o->root)
                return 0; /* recvbuf is only defined at the root */
            want = expect_reduce(o->op, p, i);
            break;
        case AI_REDUCE_SCATTER:
            want = expect_reduce(o->op, p, (size_t)rank * s->count + i);
            break;
        case AI_ALLGATHER:
            want = val_copy((int)(i / s->count), i % s->count);
            break;
        case AI_ALLTOALL:
            want = val_a2a((int)(i / s->count), rank, i % s->count);
            break;
        case AI_BROADCAST:
            want = val_copy(o->root, i);
            break;
        default:
            return 0;
        }
        /* For integer dtypes avg truncates; the constructed sums divide
         * exactly, so the same comparison holds. */
        wrong += get(rbuf, o->dt, i) != want;
    }
    return wrong;
}

static ai_status_t run_once(ai_comm *comm, const bench_opts *o, const bench_shape *s,
                            const ai_algo_opts *ao, const void *sbuf, void *rbuf)
{
    switch (o->coll) {
    case AI_ALLREDUCE:
        return ai_allreduce(comm, sbuf, rbuf, s->count, o->dt, o->op, ao);
    case AI_REDUCE_SCATTER:
        return ai_reduce_scatter(comm, sbuf, rbuf, s->count, o->dt, o->op, ao);
    case AI_ALLGATHER:
        return ai_allgather(comm, sbuf, rbuf, s->count, o->dt, ao);
    case AI_BROADCAST:
        return ai_broadcast(comm, rbuf, s->count, o->dt, o->root, ao);
    case AI_REDUCE:
        return ai_reduce(comm, sbuf, rbuf, s->count, o->dt, o->op, o->root, ao);
    case AI_ALLTOALL:
        return ai_alltoall(comm, sbuf, rbuf, s->count, o->dt, ao);
    default:
        return ai_barrier(comm, ao);
    }
}

/* ------------------------------------------------------------ output */

/* Names come from the library; escape them anyway so a line is always
 * valid JSON. */
static void json_str(FILE *f, const char *key, const char *v)
{
    fprintf(f, "\"%s\":\"", key);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

/* "choice":{...}: the arm auto settled on (ai_choice). */
static void print_choice(const ai_choice *c)
{
    printf("\"choice\":{");
    json_str(stdout, "algo", c->algo);
    printf(",\"chunk_bytes\":%zu,\"channels\":%d,", c->chunk_bytes, c->channels);
    json_str(stdout, "source", c->source);
    printf(",\"explored\":%d,\"explore_s\":%.6g}", c->explored, c->explore_s);
}

typedef struct bench_row {
    const bench_shape *s;
    const char *algo;
    int has_choice;  /* auto: what it settled on */
    ai_choice choice;
    double time_us, algbw, busbw;
    int64_t wrong; /* -1 without --check */
} bench_row;

static void print_header(const bench_opts *o, int p, int nhosts)
{
    printf("# autoinfra bench: %s, %d rank%s on %d host%s, dtype %s", ai_coll_name(o->coll), p,
           p == 1 ? "" : "s", nhosts, nhosts == 1 ? "" : "s", ai_dtype_name(o->dt));
    if (coll_is_reduction(o->coll))
        printf(", op %s", ai_op_name(o->op));
    if (o->coll == AI_BROADCAST || o->coll == AI_REDUCE)
        printf(", root %d", o->root);
    printf(", algo %s, iters %d, warmup %d%s\n", o->algo ? o->algo : "auto", o->iters, o->warmup,
           o->check ? ", check" : "");
    printf("# size: per-rank bytes as in nccl-tests; time: slowest rank's mean per call\n");
    printf("#%12s %12s %6s %6s %-18s %12s %12s %12s %8s\n", "size(B)", "count", "type",
           "redop", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    fflush(stdout);
}

static void print_row(const bench_opts *o, const bench_row *r, int p, int nhosts)
{
    const char *op = coll_is_reduction(o->coll) ? ai_op_name(o->op) : "none";
    size_t esize = ai_dtype_size(o->dt);
    if (!o->json) {
        printf(" %12zu %12zu %6s %6s %-18s %12.2f %12.3f %12.3f %8lld\n", r->s->bytes,
               r->s->bytes / esize, ai_dtype_name(o->dt), op, r->algo, r->time_us, r->algbw, r->busbw,
               (long long)r->wrong);
        fflush(stdout);
        return;
    }
    putchar('{');
    json_str(stdout, "coll", ai_coll_name(o->coll));
    printf(",\"bytes\":%zu,\"count\":%zu,\"call_count\":%zu,", r->s->bytes,
           r->s->bytes / esize, r->s->count);
    json_str(stdout, "dtype", ai_dtype_name(o->dt));
    putchar(',');
    json_str(stdout, "op", op);
    putchar(',');
    json_str(stdout, "algo", r->algo);
    printf(",\"ranks\":%d,\"hosts\":%d,\"root\":%d,\"time_us\":%.6g,\"algbw_GBps\":%.6g,"
           "\"busbw_GBps\":%.6g,\"wrong\":%lld,\"iters\":%d,\"warmup\":%d,"
           "\"chunk_bytes\":%zu,\"channels\":%d",
           p, nhosts, o->root, r->time_us, r->algbw, r->busbw, (long long)r->wrong, o->iters,
           o->warmup, o->chunk, o->channels);
    if (r->has_choice) {
        printf(",");
        print_choice(&r->choice);
    }
    printf("}\n");
    fflush(stdout);
}

/* ------------------------------------------------------------ main */

static int bench_list(const bench_opts *o)
{
    int n = ai_coll_algo_count(o->coll);
    for (int k = 0; k < n; k++) {
        const char *name = ai_coll_algo_name(o->coll, k);
        if (name)
            printf("%s\n", name);
    }
    return 0;
}

/* One size: time it, check it, print the row. Returns 0, or 1 after
 * printing a runtime error. */
static int bench_size(ai_comm *comm, const bench_opts *o, const ai_algo_opts *ao, size_t req,
                      void *sbuf, void *rbuf, int64_t *wrong_total)
{
    int rank = ai_comm_rank(comm), p = ai_comm_size(comm);
    bench_shape s = bench_shape_of(o->coll, req, ai_dtype_size(o->dt), p);
    bench_row row;
    ai_status_t st;
    double t0, mean;

    memset(&row, 0, sizeof row);
    row.s = &s;
    row.wrong = -1;
    row.algo = o->algo;
    /* auto_algo takes the payload the call's count describes (one rank's
     * block for reduce_scatter/allgather/alltoall), as the runtime's own
     * selection does, so the name reported is the one that ran. */
    if (!row.algo)
        row.algo = ai_coll_auto_algo(comm, o->coll, s.count * ai_dtype_size(o->dt));
    if (!row.algo)
        row.algo = "auto";

    fill_inputs(o, &s, rank, p, sbuf, rbuf);
    for (int w = 0; w < o->warmup; w++)
        if ((st = run_once(comm, o, &s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes (warmup)", ai_coll_name(o->coll),
                              s.bytes);
    if ((st = ai_barrier(comm, NULL)) != AI_OK)
        return bench_fail(rank, st, "barrier before timing %zu bytes", s.bytes);
    t0 = ai_now();
    for (int it = 0; it < o->iters; it++)
        if ((st = run_once(comm, o, &s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes", ai_coll_name(o->coll), s.bytes);
    mean = (ai_now() - t0) / o->iters;
    if ((st = ai_allreduce(comm, AI_IN_PLACE, &mean, 1, AI_F64, AI_MAX, NULL)) != AI_OK)
        return bench_fail(rank, st, "allreduce of the timings");

    if (o->check) {
        int64_t wrong;
        fill_inputs(o, &s, rank, p, sbuf, rbuf);
        if ((st = run_once(comm, o, &s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes (check)", ai_coll_name(o->coll),
                              s.bytes);
        wrong = count_wrong(o, &s, rank, p, rbuf);
        if ((st = ai_allreduce(comm, AI_IN_PLACE, &wrong, 1, AI_I64, AI_SUM, NULL)) != AI_OK)
            return bench_fail(rank, st, "allreduce of the check results");
        row.wrong = wrong;
        *wrong_total += wrong;
    }

    if (!o->algo && ai_comm_choice(comm, o->coll, s.count * ai_dtype_size(o->dt), &row.choice) ==
                        AI_OK) {
        row.has_choice = 1;
        row.algo = row.choice.algo;
    }
    row.time_us = mean * 1e6;
    row.algbw = mean > 0 ? (double)s.bytes / mean / 1e9 : 0.0;
    row.busbw = row.algbw * bus_factor(o->coll, p);
    if (rank == 0)
        print_row(o, &row, p, ai_comm_nhosts(comm));
    return 0;
}

/* ------------------------------------------------------- --learn */

#define LMIN(a, b) ((a) < (b) ? (a) : (b))

/* n calls, each timed; t[i] becomes the slowest rank's time of call i.
 * Every call is followed by the allreduce of its time, so that auto calls,
 * the sweep and the confirmation all run under the same conditions (the
 * links rest equally long between calls). */
static int timed_calls(ai_comm *comm, const bench_opts *o, const bench_shape *s,
                       const ai_algo_opts *ao, void *sbuf, void *rbuf, double *t, int n)
{
    int rank = ai_comm_rank(comm);
    ai_status_t st;
    for (int i = 0; i < n; i++) {
        double t0 = ai_now();
        if ((st = run_once(comm, o, s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes (%s)", ai_coll_name(o->coll), s->bytes,
                              ao->algo ? ao->algo : "auto");
        t[i] = ai_now() - t0;
        if ((st = ai_allreduce(comm, AI_IN_PLACE, &t[i], 1, AI_F64, AI_MAX, NULL)) != AI_OK)
            return bench_fail(rank, st, "allreduce of the timings");
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *t, int n)
{
    double tmp[64];
    n = LMIN(n, 64);
    memcpy(tmp, t, (size_t)n * sizeof *t);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

#define LEARN_MAX_ARMS 64
#define LEARN_CONFIRM 3 /* the sweep's best arms timed again with the choice */

/* ,"KEY":[...] of n times in seconds, printed in microseconds. */
static void print_times(const char *key, const double *t, int n)
{
    printf(",\"%s\":[", key);
    for (int i = 0; i < n; i++)
        printf("%s%.6g", i ? "," : "", t[i] * 1e6);
    printf("]");
}

/* A JSON list of arms (arms[idx[i]], or arms[i] without idx) and times;
 * with `raw`, arm i's `rounds` calls are raw[i * rounds ...]. */
static void print_arms(const ai_algo_opts *arms, const double *us, const int *idx, int n,
                       const double *raw, int rounds)
{
    printf("[");
    for (int i = 0; i < n; i++) {
        const ai_algo_opts *a = &arms[idx ? idx[i] : i];
        printf("%s{", i ? "," : "");
        json_str(stdout, "algo", a->algo);
        printf(",\"chunk_bytes\":%zu,\"channels\":%d,\"time_us\":%.6g", a->chunk_bytes,
               a->channels, us[i]);
        if (raw && rounds > 0)
            print_times("calls_us", raw + (size_t)i * (size_t)rounds, rounds);
        printf("}");
    }
    printf("]");
}

/* --oracle-from: per size, the arms of an earlier run's confirmation. */
#define LEARN_MAX_SIZES 64
typedef struct learn_cands {
    int nsizes;
    struct {
        size_t bytes;
        int n;
        char algo[LEARN_CONFIRM + 1][32];
        size_t chunk[LEARN_CONFIRM + 1];
        int channels[LEARN_CONFIRM + 1];
    } size[LEARN_MAX_SIZES];
} learn_cands;

/* Read FILE (one `bench --learn --json` object per line) into c; a clear
 * message naming the file and line on stderr (rank 0) and -1 if it is not
 * usable. */
static int load_cands(const bench_opts *o, learn_cands *c, int quiet)
{
    FILE *f = fopen(o->oracle_from, "r");
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    const char *why = NULL;
    c->nsizes = 0;
    if (!f) {
        if (!quiet)
            fprintf(stderr, "autoinfra bench: --oracle-from '%s': %s\n", o->oracle_from,
                    strerror(errno));
        return -1;
    }
    while (!rc && getline(&line, &cap, f) > 0) {
        json_error_t e;
        json_t *r, *conf, *a;
        const char *coll = NULL;
        json_int_t bytes = 0;
        size_t k;
        lineno++;
        if (line[strspn(line, " \t\r\n")] != '{')
            continue;
        if (!(r = json_loads(line, 0, &e))) {
            why = e.text;
        } else if (json_unpack(r, "{s:s, s:I, s:o}", "coll", &coll, "bytes", &bytes, "confirm",
                               &conf) ||
                   !json_is_array(conf) || bytes <= 0) {
            why = "expected \"coll\", \"bytes\" and a \"confirm\" list";
        } else if (strcmp(coll, ai_coll_name(o->coll))) {
            why = "another collective than --coll";
        } else if (c->nsizes == LEARN_MAX_SIZES) {
            why = "too many sizes";
        } else {
            c->size[c->nsizes].bytes = (size_t)bytes;
            c->size[c->nsizes].n = 0;
            json_array_foreach(conf, k, a) {
                const char *algo;
                json_int_t chunk, ch;
                int j = c->size[c->nsizes].n;
                if (j > LEARN_CONFIRM) {
                    why = "more arms in a \"confirm\" list than --learn writes";
                    break;
                }
                if (json_unpack(a, "{s:s, s:I, s:I}", "algo", &algo, "chunk_bytes", &chunk,
                                "channels", &ch) ||
                    strlen(algo) >= sizeof c->size[0].algo[0] || chunk < 0 || ch < 0) {
                    why = "a \"confirm\" arm is not {algo, chunk_bytes, channels}";
                    break;
                }
                strcpy(c->size[c->nsizes].algo[j], algo);
                c->size[c->nsizes].chunk[j] = (size_t)chunk;
                c->size[c->nsizes].channels[j] = (int)ch;
                c->size[c->nsizes].n++;
            }
            c->nsizes++;
        }
        json_decref(r);
        if (why) {
            if (!quiet)
                fprintf(stderr, "autoinfra bench: --oracle-from %s:%d: %s\n", o->oracle_from,
                        lineno, why);
            rc = -1;
        }
    }
    free(line);
    fclose(f);
    if (!rc && c->nsizes == 0) {
        if (!quiet)
            fprintf(stderr, "autoinfra bench: --oracle-from %s: no --learn results in it\n",
                    o->oracle_from);
        rc = -1;
    }
    return rc;
}

static int same_arm(const ai_algo_opts *a, const char *algo, size_t chunk, int channels)
{
    return !strcmp(a->algo, algo) && a->chunk_bytes == chunk && a->channels == channels;
}

/* One size of --learn: auto calls (with a drift in the middle if asked),
 * then the sweep over every arm; one JSON line (or table row) on rank 0. */
static int learn_size(ai_comm *comm, const bench_opts *o, const learn_cands *cands, size_t req,
                      void *sbuf, void *rbuf)
{
    int rank = ai_comm_rank(comm), p = ai_comm_size(comm);
    bench_shape s = bench_shape_of(o->coll, req, ai_dtype_size(o->dt), p);
    size_t call_bytes = s.count * ai_dtype_size(o->dt);
    int n1 = o->drift_after, n = n1 + o->calls, rc = 0;
    ai_algo_opts autoo = {0}, arms[LEARN_MAX_ARMS];
    double *t = calloc((size_t)n + (size_t)o->more +
                           LEARN_MAX_ARMS * (size_t)(o->iters + o->confirm) + 2 * (size_t)o->judge,
                       sizeof *t);
    double arm_us[LEARN_MAX_ARMS];
    ai_choice ch, last;
    ai_status_t st;
    if (!t)
        return bench_fail(rank, AI_ERR_NOMEM, "timings");
    fill_inputs(o, &s, rank, p, sbuf, rbuf);
    if (n1 > 0) {
        if ((rc = timed_calls(comm, o, &s, &autoo, sbuf, rbuf, t, n1)) != 0)
            goto out;
        if (rank == 0) {
            int w = system(o->drift_cmd);
            if (w != 0)
                fprintf(stderr, "autoinfra bench: --drift-cmd '%s' exited with %d\n",
                        o->drift_cmd, w);
        }
        if ((st = ai_barrier(comm, NULL)) != AI_OK) {
            rc = bench_fail(rank, st, "barrier after --drift-cmd");
            goto out;
        }
    }
    if ((rc = timed_calls(comm, o, &s, &autoo, sbuf, rbuf, t + n1, o->calls)) != 0)
        goto out;
    if ((st = ai_comm_choice(comm, o->coll, call_bytes, &ch)) != AI_OK) {
        rc = bench_fail(rank, st, "choice");
        goto out;
    }
    /* --more: the job goes on; what it settles on then is for the KB. */
    if (o->more > 0) {
        if ((rc = timed_calls(comm, o, &s, &autoo, sbuf, rbuf, t + n, o->more)) != 0)
            goto out;
        if ((st = ai_comm_choice(comm, o->coll, call_bytes, &last)) != AI_OK) {
            rc = bench_fail(rank, st, "choice");
            goto out;
        }
    }
    int na = o->no_sweep ? 0 : LMIN(ai_comm_arms(comm, o->coll, call_bytes, arms, LEARN_MAX_ARMS),
                                    LEARN_MAX_ARMS);
    int swept = cands ? 0 : na; /* arms timed in the sweep */
    int chosen = -1;
    double *at = t + n + o->more;
    for (int a = 0; a < na; a++)
        if (same_arm(&arms[a], ch.algo, ch.chunk_bytes, ch.channels))
            chosen = a;
    for (int a = 0; a < swept; a++) {
        if ((rc = timed_calls(comm, o, &s, &arms[a], sbuf, rbuf, at, 1)) != 0 || /* warm-up */
            (rc = timed_calls(comm, o, &s, &arms[a], sbuf, rbuf, at, o->iters)) != 0)
            goto out;
        arm_us[a] = median(at, o->iters) * 1e6;
    }
    /* The confirmation: the sweep's best few (or those of --oracle-from)
     * and the learner's choice again, interleaved round by round, so that
     * the oracle is not just the arm that drew the luckiest noise in a
     * sweep of many. */
    int order[LEARN_MAX_ARMS], cand[LEARN_CONFIRM + 1] = {0}, nc = 0, best = -1;
    double conf_us[LEARN_CONFIRM + 1];
    if (cands) {
        for (int k = 0; k < cands->nsizes; k++) {
            if (cands->size[k].bytes != s.bytes)
                continue;
            for (int j = 0; j < cands->size[k].n && nc < LEARN_CONFIRM; j++)
                for (int a = 0; a < na; a++)
                    if (same_arm(&arms[a], cands->size[k].algo[j], cands->size[k].chunk[j],
                                 cands->size[k].channels[j])) {
                        cand[nc++] = a;
                        break;
                    }
        }
    } else {
        for (int a = 0; a < na; a++) { /* by sweep time */
            int k = a;
            for (; k > 0 && arm_us[order[k - 1]] > arm_us[a]; k--)
                order[k] = order[k - 1];
            order[k] = a;
        }
        for (; nc < LEARN_CONFIRM && nc < na; nc++)
            cand[nc] = order[nc];
    }
    int jc = -1; /* the choice's place in the confirmation */
    for (int j = 0; j < nc; j++)
        if (cand[j] == chosen)
            jc = j;
    if (chosen >= 0 && jc < 0 && (nc > 0 || !cands))
        cand[jc = nc++] = chosen;
    int rounds = o->confirm;
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < nc; j++)
            if ((rc = timed_calls(comm, o, &s, &arms[cand[j]], sbuf, rbuf,
                                  at + (size_t)j * (size_t)rounds + (size_t)r, 1)) != 0)
                goto out;
    for (int j = 0; j < nc; j++) {
        conf_us[j] = rounds > 0 ? median(at + (size_t)j * (size_t)rounds, rounds) * 1e6
                                : arm_us[cand[j]];
        if (best < 0 || conf_us[j] < conf_us[best])
            best = j;
    }
    double oracle = nc > 0 ? conf_us[best] : NAN, chosen_us = jc >= 0 ? conf_us[jc] : NAN;
    /* The judgement: the oracle is the fastest of a few medians, each off
     * by the noise, so it is biased low against the choice (by about the
     * noise of one median when all are equal). When the choice is another
     * arm, both are timed again, interleaved, their order alternating
     * round by round, and judged by these new calls alone. */
    int judged = o->judge > 0 && jc >= 0 && jc != best;
    double *jt = at + (size_t)nc * (size_t)rounds;
    for (int r = 0; judged && r < o->judge; r++)
        for (int k = 0; k < 2; k++) {
            int c = (r + k) % 2; /* 0: the choice, 1: the oracle */
            if ((rc = timed_calls(comm, o, &s, &arms[cand[c ? best : jc]], sbuf, rbuf,
                                  jt + (size_t)c * (size_t)o->judge + (size_t)r, 1)) != 0)
                goto out;
        }
    if (judged) {
        chosen_us = median(jt, o->judge) * 1e6;
        oracle = median(jt + o->judge, o->judge) * 1e6;
    }
    if (rank != 0)
        goto out;
    double extra = 0, tail = median(t + n - LMIN(8, o->calls), LMIN(8, o->calls)) * 1e6;
    for (int i = n1; i < n; i++)
        extra += t[i] - oracle * 1e-6;
    /* Drift: the first call after which every median of 5 stays within
     * 10% of the new oracle. */
    int recovered = -1;
    for (int i = n - 5; i >= n1 && median(t + i, 5) * 1e6 <= 1.10 * oracle; i--)
        recovered = i - n1;
    const ai_algo_opts *ob = nc > 0 ? &arms[cand[best]] : NULL;
    if (!o->json) {
        printf(" %12zu  %-28s %10.1f  %-28s %10.1f %7.3f %7.3f %4d %9.4f\n", s.bytes,
               ob ? ob->algo : "-", oracle, ch.algo, chosen_us, chosen_us / oracle, tail / oracle,
               ch.explored, extra);
        fflush(stdout);
        goto out;
    }
    printf("{");
    json_str(stdout, "coll", ai_coll_name(o->coll));
    printf(",\"bytes\":%zu,\"ranks\":%d,\"hosts\":%d,\"calls\":%d,\"oracle\":", s.bytes, p,
           ai_comm_nhosts(comm), o->calls);
    if (ob) {
        printf("{");
        json_str(stdout, "algo", ob->algo);
        printf(",\"chunk_bytes\":%zu,\"channels\":%d,\"time_us\":%.6g}", ob->chunk_bytes,
               ob->channels, oracle);
    } else {
        printf("null");
    }
    printf(",");
    print_choice(&ch);
    printf(",\"first_us\":%.6g,\"tail_us\":%.6g", t[n1] * 1e6, tail);
    /* Without a sweep there is no oracle to compare with: nulls. */
    const char *keys[] = {"choice_time_us", "choice_ratio", "tail_ratio", "explore_extra_s"};
    double vals[] = {chosen_us, chosen_us / oracle, tail / oracle, extra};
    for (int k = 0; k < 4; k++)
        printf(isfinite(vals[k]) ? ",\"%s\":%.6g" : ",\"%s\":null", keys[k], vals[k]);
    if (n1 > 0)
        printf(",\"drift_after\":%d,\"recovered_after\":%d", n1, recovered);
    print_times("calls_us", t, n);
    printf(",\"judge\":");
    if (judged) {
        printf("{\"rounds\":%d,\"choice_us\":%.6g,\"oracle_us\":%.6g", o->judge, chosen_us,
               oracle);
        print_times("choice_calls_us", jt, o->judge);
        print_times("oracle_calls_us", jt + o->judge, o->judge);
        printf("}");
    } else {
        printf("null");
    }
    printf(",\"more\":");
    if (o->more > 0) {
        double more_extra = 0, *tm = t + n;
        for (int i = 0; i < o->more; i++)
            more_extra += tm[i] - oracle * 1e-6;
        int k = LMIN(8, o->more);
        printf("{\"calls\":%d,", o->more);
        print_choice(&last);
        printf(isfinite(more_extra) ? ",\"extra_s\":%.6g" : ",\"extra_s\":null", more_extra);
        printf(",\"tail_us\":%.6g}", median(tm + o->more - k, k) * 1e6);
    } else {
        printf("null");
    }
    printf(",\"arms\":");
    print_arms(arms, arm_us, NULL, swept, NULL, 0);
    printf(",\"confirm\":");
    print_arms(arms, conf_us, cand, nc, at, rounds);
    printf("}\n");
    fflush(stdout);
out:
    free(t);
    return rc;
}

int cli_bench_main(int argc, char **argv)
{
    bench_opts o;
    ai_algo_opts ao;
    ai_comm *comm = NULL;
    ai_status_t st;
    bench_shape maxs;
    void *sbuf = NULL, *rbuf = NULL;
    learn_cands *cands = NULL;
    int64_t wrong_total = 0;
    int rc, rank, p;

    memset(&o, 0, sizeof o);
    rc = bench_parse(argc, argv, &o);
    if (rc == 1) {
        bench_help(stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (o.list)
        return bench_list(&o);

    if (o.kb && setenv("AUTOINFRA_KB", o.kb, 1) != 0) {
        fprintf(stderr, "autoinfra bench: --kb: cannot set AUTOINFRA_KB\n");
        return 1;
    }
    /* Every rank reads the file, before the communicator: all of them
     * stop on a bad one, and rank 0 says why. */
    if (o.oracle_from) {
        const char *r = env_rank();
        if (!(cands = malloc(sizeof *cands))) {
            fprintf(stderr, "autoinfra bench: out of memory\n");
            return 1;
        }
        if (load_cands(&o, cands, r && strcmp(r, "0")) != 0) {
            free(cands);
            return 2;
        }
    }
    st = ai_comm_create_env(&comm);
    if (st != AI_OK)
        return bench_fail(-1, st, "cannot create the communicator");
    rank = ai_comm_rank(comm);
    p = ai_comm_size(comm);
    if ((o.coll == AI_BROADCAST || o.coll == AI_REDUCE) && o.root >= p) {
        if (rank == 0)
            fprintf(stderr, "autoinfra bench: --root %d: the job has only %d rank%s\n", o.root, p,
                    p == 1 ? "" : "s");
        rc = 2;
        goto out;
    }

    memset(&ao, 0, sizeof ao);
    ao.algo = o.algo;
    ao.chunk_bytes = o.chunk;
    ao.channels = o.channels;

    /* Buffers for the largest size, reused for all. */
    maxs = bench_shape_of(o.coll, o.max_bytes, ai_dtype_size(o.dt), p);
    sbuf = malloc(maxs.send_elems * ai_dtype_size(o.dt) + 1);
    rbuf = malloc(maxs.recv_elems * ai_dtype_size(o.dt) + 1);
    if (!sbuf || !rbuf) {
        fprintf(stderr, "autoinfra bench: rank %d: cannot allocate buffers for %zu bytes\n",
                rank, o.max_bytes);
        rc = 1;
        goto out;
    }

    if (rank == 0 && !o.json && !o.learn)
        print_header(&o, p, ai_comm_nhosts(comm));
    if (rank == 0 && !o.json && o.learn)
        printf("# learner vs oracle (median of --iters calls per arm), %s, %d ranks, %d hosts\n"
               "#%12s  %-28s %10s  %-28s %10s %7s %7s %4s %9s\n",
               ai_coll_name(o.coll), p, ai_comm_nhosts(comm), "size(B)", "oracle", "us",
               "choice", "us", "ratio", "tail", "expl", "extra(s)");
    for (size_t b = o.min_bytes;;) {
        rc = o.learn ? learn_size(comm, &o, cands, b, sbuf, rbuf)
                     : bench_size(comm, &o, &ao, b, sbuf, rbuf, &wrong_total);
        /* Barrier has no size. Doubling stops at the last size <= MAX, as
         * in nccl-tests; 0 is followed by 1 so it does not repeat. */
        if (rc || o.coll == AI_BARRIER || b > o.max_bytes / 2)
            break;
        b = b == 0 ? 1 : b * 2;
        if (b > o.max_bytes)
            break;
    }
    if (!rc && wrong_total > 0) {
        if (rank == 0)
            fprintf(stderr, "autoinfra bench: %lld wrong element%s in %s results\n",
                    (long long)wrong_total, wrong_total == 1 ? "" : "s", ai_coll_name(o.coll));
        rc = 1;
    }
out:
    free(cands);
    free(sbuf);
    free(rbuf);
    ai_comm_destroy(comm);
    return rc;
}
