/*
 * `autoinfra bench --learn`: the learner-evaluation harness (docs/learner.md;
 * bench/learn-eval drives it). Per size: --calls auto calls, each timed
 * (with --drift-cmd run in the middle when asked), then the sweep over
 * every arm the learner weighs, which is the oracle, then the best arms
 * timed again side by side with the learner's choice; one JSON line (or
 * table row) per size on rank 0. The shapes, inputs and calls are those of
 * `autoinfra bench` (bench.h).
 */
#include "autoinfra.h"
#include "bench.h"
#include "bench_learn.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if ((st = bench_run_once(comm, o, s, ao, sbuf, rbuf)) != AI_OK)
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
        bench_json_str(stdout, "algo", a->algo);
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
struct bench_learn_cands {
    int nsizes;
    struct {
        size_t bytes;
        int n;
        char algo[LEARN_CONFIRM + 1][32];
        size_t chunk[LEARN_CONFIRM + 1];
        int channels[LEARN_CONFIRM + 1];
    } size[LEARN_MAX_SIZES];
};

/* Read FILE (one `bench --learn --json` object per line) into c; a clear
 * message naming the file and line on stderr (rank 0) and -1 if it is not
 * usable. */
static int load_cands(const bench_opts *o, bench_learn_cands *c, int quiet)
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

/* One size of --learn through its steps. */
typedef struct {
    ai_comm *comm;
    const bench_opts *o;
    bench_shape s;
    void *sbuf, *rbuf;
    int rank, p;
    size_t call_bytes;
    int n1, n;    /* auto calls before --drift-cmd; all auto calls */
    double *t;    /* the auto calls, the --more calls, then the arms' (at) */
    ai_choice ch, last;
    ai_algo_opts arms[LEARN_MAX_ARMS];
    int na, swept, chosen; /* arms weighed, timed in the sweep; the choice's */
    double arm_us[LEARN_MAX_ARMS];
    double *at;
    int cand[LEARN_CONFIRM + 1], nc, best, jc, rounds;
    double conf_us[LEARN_CONFIRM + 1];
    double oracle, chosen_us;
    int judged;
    double *jt;
} learn_run;

/* The auto calls (with --drift-cmd in the middle when asked), the choice
 * they end on, and with --more the job going on and where it settles. */
static int learn_auto(learn_run *lr)
{
    const bench_opts *o = lr->o;
    ai_algo_opts autoo = {0};
    ai_status_t st;
    int rc;
    if (lr->n1 > 0) {
        if ((rc = timed_calls(lr->comm, o, &lr->s, &autoo, lr->sbuf, lr->rbuf, lr->t, lr->n1)) != 0)
            return rc;
        if (lr->rank == 0) {
            int w = system(o->drift_cmd);
            if (w != 0)
                fprintf(stderr, "autoinfra bench: --drift-cmd '%s' exited with %d\n",
                        o->drift_cmd, w);
        }
        if ((st = ai_barrier(lr->comm, NULL)) != AI_OK)
            return bench_fail(lr->rank, st, "barrier after --drift-cmd");
    }
    if ((rc = timed_calls(lr->comm, o, &lr->s, &autoo, lr->sbuf, lr->rbuf, lr->t + lr->n1,
                          o->calls)) != 0)
        return rc;
    if ((st = ai_comm_choice(lr->comm, o->coll, lr->call_bytes, &lr->ch)) != AI_OK)
        return bench_fail(lr->rank, st, "choice");
    /* --more: the job goes on; what it settles on then is for the KB. */
    if (o->more > 0) {
        if ((rc = timed_calls(lr->comm, o, &lr->s, &autoo, lr->sbuf, lr->rbuf, lr->t + lr->n,
                              o->more)) != 0)
            return rc;
        if ((st = ai_comm_choice(lr->comm, o->coll, lr->call_bytes, &lr->last)) != AI_OK)
            return bench_fail(lr->rank, st, "choice");
    }
    return 0;
}

/* Every arm the learner weighs, which of them it chose, and (without
 * --oracle-from) each timed: the sweep. */
static int learn_sweep(learn_run *lr, const bench_learn_cands *cands)
{
    const bench_opts *o = lr->o;
    int rc;
    lr->na = o->no_sweep ? 0 : LMIN(ai_comm_arms(lr->comm, o->coll, lr->call_bytes, lr->arms,
                                                 LEARN_MAX_ARMS),
                                    LEARN_MAX_ARMS);
    lr->swept = cands ? 0 : lr->na;
    lr->chosen = -1;
    lr->at = lr->t + lr->n + o->more;
    for (int a = 0; a < lr->na; a++)
        if (same_arm(&lr->arms[a], lr->ch.algo, lr->ch.chunk_bytes, lr->ch.channels))
            lr->chosen = a;
    for (int a = 0; a < lr->swept; a++) {
        if ((rc = timed_calls(lr->comm, o, &lr->s, &lr->arms[a], lr->sbuf, lr->rbuf, lr->at,
                              1)) != 0 || /* warm-up */
            (rc = timed_calls(lr->comm, o, &lr->s, &lr->arms[a], lr->sbuf, lr->rbuf, lr->at,
                              o->iters)) != 0)
            return rc;
        lr->arm_us[a] = median(lr->at, o->iters) * 1e6;
    }
    return 0;
}

/* The confirmation: the sweep's best few (or those of --oracle-from)
 * and the learner's choice again, interleaved round by round, so that
 * the oracle is not just the arm that drew the luckiest noise in a
 * sweep of many. */
static int learn_confirm(learn_run *lr, const bench_learn_cands *cands)
{
    int order[LEARN_MAX_ARMS], na = lr->na, rc;
    lr->nc = 0;
    lr->best = -1;
    if (cands) {
        for (int k = 0; k < cands->nsizes; k++) {
            if (cands->size[k].bytes != lr->s.bytes)
                continue;
            for (int j = 0; j < cands->size[k].n && lr->nc < LEARN_CONFIRM; j++)
                for (int a = 0; a < na; a++)
                    if (same_arm(&lr->arms[a], cands->size[k].algo[j], cands->size[k].chunk[j],
                                 cands->size[k].channels[j])) {
                        lr->cand[lr->nc++] = a;
                        break;
                    }
        }
    } else {
        for (int a = 0; a < na; a++) { /* by sweep time */
            int k = a;
            for (; k > 0 && lr->arm_us[order[k - 1]] > lr->arm_us[a]; k--)
                order[k] = order[k - 1];
            order[k] = a;
        }
        for (; lr->nc < LEARN_CONFIRM && lr->nc < na; lr->nc++)
            lr->cand[lr->nc] = order[lr->nc];
    }
    lr->jc = -1; /* the choice's place in the confirmation */
    for (int j = 0; j < lr->nc; j++)
        if (lr->cand[j] == lr->chosen)
            lr->jc = j;
    if (lr->chosen >= 0 && lr->jc < 0 && (lr->nc > 0 || !cands))
        lr->cand[lr->jc = lr->nc++] = lr->chosen;
    int rounds = lr->rounds = lr->o->confirm;
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < lr->nc; j++)
            if ((rc = timed_calls(lr->comm, lr->o, &lr->s, &lr->arms[lr->cand[j]], lr->sbuf,
                                  lr->rbuf, lr->at + (size_t)j * (size_t)rounds + (size_t)r,
                                  1)) != 0)
                return rc;
    for (int j = 0; j < lr->nc; j++) {
        lr->conf_us[j] = rounds > 0 ? median(lr->at + (size_t)j * (size_t)rounds, rounds) * 1e6
                                    : lr->arm_us[lr->cand[j]];
        if (lr->best < 0 || lr->conf_us[j] < lr->conf_us[lr->best])
            lr->best = j;
    }
    lr->oracle = lr->nc > 0 ? lr->conf_us[lr->best] : NAN;
    lr->chosen_us = lr->jc >= 0 ? lr->conf_us[lr->jc] : NAN;
    return 0;
}

/* The judgement: the oracle is the fastest of a few medians, each off
 * by the noise, so it is biased low against the choice (by about the
 * noise of one median when all are equal). When the choice is another
 * arm, both are timed again, interleaved, their order alternating
 * round by round, and judged by these new calls alone. */
static int learn_judge(learn_run *lr)
{
    const bench_opts *o = lr->o;
    int rc;
    lr->judged = o->judge > 0 && lr->jc >= 0 && lr->jc != lr->best;
    lr->jt = lr->at + (size_t)lr->nc * (size_t)lr->rounds;
    for (int r = 0; lr->judged && r < o->judge; r++)
        for (int k = 0; k < 2; k++) {
            int c = (r + k) % 2; /* 0: the choice, 1: the oracle */
            if ((rc = timed_calls(lr->comm, o, &lr->s, &lr->arms[lr->cand[c ? lr->best : lr->jc]],
                                  lr->sbuf, lr->rbuf,
                                  lr->jt + (size_t)c * (size_t)o->judge + (size_t)r, 1)) != 0)
                return rc;
        }
    if (lr->judged) {
        lr->chosen_us = median(lr->jt, o->judge) * 1e6;
        lr->oracle = median(lr->jt + o->judge, o->judge) * 1e6;
    }
    return 0;
}

/* Rank 0's line: a table row, or the JSON object of docs/learner.md. */
static void learn_print(const learn_run *lr)
{
    const bench_opts *o = lr->o;
    const double *t = lr->t;
    int n1 = lr->n1, n = lr->n;
    double oracle = lr->oracle, chosen_us = lr->chosen_us;
    double extra = 0, tail = median(t + n - LMIN(8, o->calls), LMIN(8, o->calls)) * 1e6;
    for (int i = n1; i < n; i++)
        extra += t[i] - oracle * 1e-6;
    /* Drift: the first call after which every median of 5 stays within
     * 10% of the new oracle. */
    int recovered = -1;
    for (int i = n - 5; i >= n1 && median(t + i, 5) * 1e6 <= 1.10 * oracle; i--)
        recovered = i - n1;
    const ai_algo_opts *ob = lr->nc > 0 ? &lr->arms[lr->cand[lr->best]] : NULL;
    if (!o->json) {
        printf(" %12zu  %-28s %10.1f  %-28s %10.1f %7.3f %7.3f %4d %9.4f\n", lr->s.bytes,
               ob ? ob->algo : "-", oracle, lr->ch.algo, chosen_us, chosen_us / oracle,
               tail / oracle, lr->ch.explored, extra);
        fflush(stdout);
        return;
    }
    printf("{");
    bench_json_str(stdout, "coll", ai_coll_name(o->coll));
    printf(",\"bytes\":%zu,\"ranks\":%d,\"hosts\":%d,\"calls\":%d,\"oracle\":", lr->s.bytes, lr->p,
           ai_comm_nhosts(lr->comm), o->calls);
    if (ob) {
        printf("{");
        bench_json_str(stdout, "algo", ob->algo);
        printf(",\"chunk_bytes\":%zu,\"channels\":%d,\"time_us\":%.6g}", ob->chunk_bytes,
               ob->channels, oracle);
    } else {
        printf("null");
    }
    printf(",");
    bench_print_choice(&lr->ch);
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
    if (lr->judged) {
        printf("{\"rounds\":%d,\"choice_us\":%.6g,\"oracle_us\":%.6g", o->judge, chosen_us,
               oracle);
        print_times("choice_calls_us", lr->jt, o->judge);
        print_times("oracle_calls_us", lr->jt + o->judge, o->judge);
        printf("}");
    } else {
        printf("null");
    }
    printf(",\"more\":");
    if (o->more > 0) {
        double more_extra = 0;
        const double *tm = t + n;
        for (int i = 0; i < o->more; i++)
            more_extra += tm[i] - oracle * 1e-6;
        int k = LMIN(8, o->more);
        printf("{\"calls\":%d,", o->more);
        bench_print_choice(&lr->last);
        printf(isfinite(more_extra) ? ",\"extra_s\":%.6g" : ",\"extra_s\":null", more_extra);
        printf(",\"tail_us\":%.6g}", median(tm + o->more - k, k) * 1e6);
    } else {
        printf("null");
    }
    printf(",\"arms\":");
    print_arms(lr->arms, lr->arm_us, NULL, lr->swept, NULL, 0);
    printf(",\"confirm\":");
    print_arms(lr->arms, lr->conf_us, lr->cand, lr->nc, lr->at, lr->rounds);
    printf("}\n");
    fflush(stdout);
}

/* One size of --learn: auto calls (with a drift in the middle if asked),
 * then the sweep over every arm; one JSON line (or table row) on rank 0. */
int bench_learn_size(ai_comm *comm, const bench_opts *o, const bench_learn_cands *cands,
                     size_t req, void *sbuf, void *rbuf)
{
    learn_run *lr = calloc(1, sizeof *lr);
    int rank = ai_comm_rank(comm), rc;
    if (!lr)
        return bench_fail(rank, AI_ERR_NOMEM, "timings");
    lr->comm = comm;
    lr->o = o;
    lr->sbuf = sbuf;
    lr->rbuf = rbuf;
    lr->rank = rank;
    lr->p = ai_comm_size(comm);
    lr->s = bench_shape_of(o->coll, req, ai_dtype_size(o->dt), lr->p);
    lr->call_bytes = lr->s.count * ai_dtype_size(o->dt);
    lr->n1 = o->drift_after;
    lr->n = lr->n1 + o->calls;
    lr->t = calloc((size_t)lr->n + (size_t)o->more +
                       LEARN_MAX_ARMS * (size_t)(o->iters + o->confirm) + 2 * (size_t)o->judge,
                   sizeof *lr->t);
    if (!lr->t) {
        free(lr);
        return bench_fail(rank, AI_ERR_NOMEM, "timings");
    }
    bench_fill_inputs(o, &lr->s, rank, lr->p, sbuf, rbuf);
    if ((rc = learn_auto(lr)) == 0 && (rc = learn_sweep(lr, cands)) == 0 &&
        (rc = learn_confirm(lr, cands)) == 0 && (rc = learn_judge(lr)) == 0 && rank == 0)
        learn_print(lr);
    free(lr->t);
    free(lr);
    return rc;
}

int bench_learn_load(const bench_opts *o, int quiet, bench_learn_cands **out)
{
    bench_learn_cands *c = malloc(sizeof *c);
    if (!c) {
        fprintf(stderr, "autoinfra bench: out of memory\n");
        return 1;
    }
    if (load_cands(o, c, quiet) != 0)
        goto err_cands;
    *out = c;
    return 0;
err_cands:
    free(c);
    return 2;
}

void bench_learn_header(const bench_opts *o, int p, int nhosts)
{
    printf("# learner vs oracle (median of --iters calls per arm), %s, %d ranks, %d hosts\n"
           "#%12s  %-28s %10s  %-28s %10s %7s %7s %4s %9s\n",
           ai_coll_name(o->coll), p, nhosts, "size(B)", "oracle", "us", "choice", "us", "ratio",
           "tail", "expl", "extra(s)");
}
