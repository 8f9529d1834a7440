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
 * Checking: the inputs and the reference are bench.c's (its comment says
 * why they are exact in every dtype).
 */
#include "autoinfra.h"
#include "bench.h"
#include "bench_learn.h"
#include "cli.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BENCH_DEFAULT_MIN 8
#define BENCH_DEFAULT_MAX ((size_t)64 << 20)
#define BENCH_DEGRADED_MAX 64 /* degraded ranks a row lists */

/* Usage errors: every rank finds the same one; only rank 0 (or a process
 * that is not part of a job) says it. */
static int bench_usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bench_usage_err(const char *fmt, ...)
{
    const char *r = bench_env_rank();
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

static void bench_help(FILE *out)
{
    fprintf(out,
        "usage: autoinfra bench [options]            (one process per rank)\n"
        "       autoinfra launch -n 4 -- autoinfra bench --coll allreduce --check\n"
        "       autoinfra bench --coll NAME --list   (algorithms, no ranks needed)\n"
        "       autoinfra bench ft [--help]          (failure costs: forks its own ranks)\n"
        "\n"
        "options:\n"
        "  --coll NAME        allreduce (default), reduce_scatter, allgather,\n"
        "                     broadcast, reduce, alltoall, barrier\n"
        "  --bytes MIN[:MAX]  per-rank buffer size, doubling from MIN to MAX;\n"
        "                     units B, K/KB/KiB, M/MB/MiB, G/GB/GiB, all powers of\n"
        "                     1024 (default 8:64M)\n"
        "  --dtype T          f32 (default), f64, f16, bf16, i32, i64, u8\n"
        "  --op OP            sum (default), prod, min, max, avg\n"
        "  --algo NAME|auto   algorithm (default auto; --list shows the names)\n"
        "  --iters N          timed calls per size (default 20)\n"
        "  --warmup N         untimed calls before timing (default 5)\n"
        "  --check            verify every element of one extra call; exit 1 if wrong\n"
        "  --json             one JSON object per size on stdout instead of the table\n"
        "  --chunk BYTES      pipelining segment size (default: the algorithm's)\n"
        "  --channels N       TCP connections per pair a call stripes over (default:\n"
        "                     one; at most AUTOINFRA_CHANNELS, 2 unless set)\n"
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

/* The flags without a value: 1 if a is one (set in o). */
static int bench_parse_flag(const char *a, bench_opts *o)
{
    static const struct {
        const char *name;
        size_t off;
    } flags[] = {{"--check", offsetof(bench_opts, check)},
                 {"--json", offsetof(bench_opts, json)},
                 {"--list", offsetof(bench_opts, list)},
                 {"--learn", offsetof(bench_opts, learn)},
                 {"--no-sweep", offsetof(bench_opts, no_sweep)}};
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
        if (!strcmp(a, flags[k].name)) {
            *(int *)((char *)o + flags[k].off) = 1;
            return 1;
        }
    return 0;
}

/* The option at argv[*i] with its value (--coll X or --coll=X; *i moves
 * past the value): 0 taken, 2 a usage error (said). */
static int bench_parse_value(int argc, char **argv, int *i, bench_opts *o)
{
    const char *a = argv[*i], *v = NULL;
    int m;
#define OPT(name) ((m = cli_match_opt(argc, argv, i, name, &v)) != 0)
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
    return 0;
missing:
    return bench_usage_err("option '%s' needs a value", a);
}

/* What the options say together: the pairs and exclusions, --learn's
 * defaults, and --algo against --coll (checked after the loop: --algo may
 * come before --coll). */
static int bench_parse_check(bench_opts *o)
{
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
    if (o->algo && !algo_known(o->coll, o->algo)) {
        const char *r = bench_env_rank();
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
        const char *a = argv[i];
        int rc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (bench_parse_flag(a, o))
            continue;
        if ((rc = bench_parse_value(argc, argv, &i, o)) != 0)
            return rc;
    }
    return bench_parse_check(o);
}

/* ------------------------------------------------------------ shapes */

static int coll_is_reduction(ai_coll c)
{
    return c == AI_ALLREDUCE || c == AI_REDUCE_SCATTER || c == AI_REDUCE;
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

/* ------------------------------------------------------------ output */

typedef struct bench_row {
    const bench_shape *s;
    const char *algo;
    int has_choice;  /* auto: what it settled on */
    ai_choice choice;
    int degraded[BENCH_DEGRADED_MAX]; /* ai_comm_degraded after the size, ascending */
    int ndegraded;                    /* how many there are (may exceed the array) */
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
    bench_json_str(stdout, "coll", ai_coll_name(o->coll));
    printf(",\"bytes\":%zu,\"count\":%zu,\"call_count\":%zu,", r->s->bytes,
           r->s->bytes / esize, r->s->count);
    bench_json_str(stdout, "dtype", ai_dtype_name(o->dt));
    putchar(',');
    bench_json_str(stdout, "op", op);
    putchar(',');
    bench_json_str(stdout, "algo", r->algo);
    printf(",\"ranks\":%d,\"hosts\":%d,\"root\":%d,\"time_us\":%.6g,\"algbw_GBps\":%.6g,"
           "\"busbw_GBps\":%.6g,\"wrong\":%lld,\"iters\":%d,\"warmup\":%d,"
           "\"chunk_bytes\":%zu,\"channels\":%d",
           p, nhosts, o->root, r->time_us, r->algbw, r->busbw, (long long)r->wrong, o->iters,
           o->warmup, o->chunk, o->channels);
    if (r->has_choice) {
        printf(",");
        bench_print_choice(&r->choice);
    }
    printf(",\"degraded\":[");
    for (int k = 0; k < r->ndegraded && k < BENCH_DEGRADED_MAX; k++)
        printf("%s%d", k ? "," : "", r->degraded[k]);
    printf("]}\n");
    fflush(stdout);
}

/* The table's last line, when the links as last measured (the learner's
 * probe across hosts) show degraded peers (ai_comm_degraded). */
static void print_degraded(const ai_comm *comm)
{
    int ranks[BENCH_DEGRADED_MAX], n = 0;
    if (ai_comm_degraded(comm, ranks, BENCH_DEGRADED_MAX, &n) != AI_OK || n == 0)
        return;
    printf("# degraded links, as measured: rank%s", n == 1 ? "" : "s");
    for (int k = 0; k < n && k < BENCH_DEGRADED_MAX; k++)
        printf("%s %d", k ? "," : "", ranks[k]);
    printf("%s (bandwidth under half the median host's or latency over 4x its)\n",
           n > BENCH_DEGRADED_MAX ? ", ..." : "");
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

    bench_fill_inputs(o, &s, rank, p, sbuf, rbuf);
    for (int w = 0; w < o->warmup; w++)
        if ((st = bench_run_once(comm, o, &s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes (warmup)", ai_coll_name(o->coll),
                              s.bytes);
    if ((st = ai_barrier(comm, NULL)) != AI_OK)
        return bench_fail(rank, st, "barrier before timing %zu bytes", s.bytes);
    t0 = ai_now();
    for (int it = 0; it < o->iters; it++)
        if ((st = bench_run_once(comm, o, &s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes", ai_coll_name(o->coll), s.bytes);
    mean = (ai_now() - t0) / o->iters;
    if ((st = ai_allreduce(comm, AI_IN_PLACE, &mean, 1, AI_F64, AI_MAX, NULL)) != AI_OK)
        return bench_fail(rank, st, "allreduce of the timings");

    if (o->check) {
        int64_t wrong;
        bench_fill_inputs(o, &s, rank, p, sbuf, rbuf);
        if ((st = bench_run_once(comm, o, &s, ao, sbuf, rbuf)) != AI_OK)
            return bench_fail(rank, st, "%s of %zu bytes (check)", ai_coll_name(o->coll),
                              s.bytes);
        wrong = bench_count_wrong(o, &s, rank, p, rbuf);
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
    if ((st = ai_comm_degraded(comm, row.degraded, BENCH_DEGRADED_MAX, &row.ndegraded)) != AI_OK)
        return bench_fail(rank, st, "degraded links");
    row.time_us = mean * 1e6;
    row.algbw = mean > 0 ? (double)s.bytes / mean / 1e9 : 0.0;
    row.busbw = row.algbw * bus_factor(o->coll, p);
    if (rank == 0)
        print_row(o, &row, p, ai_comm_nhosts(comm));
    return 0;
}

int cli_bench_main(int argc, char **argv)
{
    bench_opts o;
    ai_algo_opts ao;
    ai_comm *comm = NULL;
    ai_status_t st;
    bench_shape maxs;
    void *sbuf = NULL, *rbuf = NULL;
    bench_learn_cands *cands = NULL;
    int64_t wrong_total = 0;
    int rc, rank, p;
    if (argc > 1 && !strcmp(argv[1], "ft"))
        return cli_bench_ft_main(argc - 1, argv + 1);

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

    /* Every rank reads the file, before the communicator: all of them
     * stop on a bad one, and rank 0 says why. */
    if (o.oracle_from) {
        const char *r = bench_env_rank();
        if ((rc = bench_learn_load(&o, r && strcmp(r, "0"), &cands)) != 0)
            return rc;
    }
    ai_comm_config cfg;
    st = ai_comm_config_env(&cfg);
    cfg.kb_path = o.kb;
    if (st != AI_OK || (st = ai_comm_create(&cfg, &comm)) != AI_OK)
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
        bench_learn_header(&o, p, ai_comm_nhosts(comm));
    for (size_t b = o.min_bytes;;) {
        rc = o.learn ? bench_learn_size(comm, &o, cands, b, sbuf, rbuf)
                     : bench_size(comm, &o, &ao, b, sbuf, rbuf, &wrong_total);
        /* Barrier has no size. Doubling stops at the last size <= MAX, as
         * in nccl-tests; 0 is followed by 1 so it does not repeat. */
        if (rc || o.coll == AI_BARRIER || b > o.max_bytes / 2)
            break;
        b = b == 0 ? 1 : b * 2;
        if (b > o.max_bytes)
            break;
    }
    if (!rc && rank == 0 && !o.json && !o.learn)
        print_degraded(comm);
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
