/*
 * What `autoinfra bench` (cmd_bench.c) and its learner evaluation
 * (cmd_bench_learn.c) share, declared in bench.h: the rank for messages,
 * runtime errors, the buffer shape of a call, checkable inputs and their
 * reference, one call, and JSON output.
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
#include "bench.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_SENTINEL 251.0

/* The rank as the environment tells it, for messages printed before (or
 * without) a communicator. */
const char *bench_env_rank(void)
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

/* Runtime errors: ai_strerror + ai_last_error, with the rank. */
int bench_fail(int rank, ai_status_t st, const char *fmt, ...)
{
    va_list ap;
    const char *detail = ai_last_error();
    if (rank >= 0)
        fprintf(stderr, "autoinfra bench: rank %d: ", rank);
    else
        fprintf(stderr, "autoinfra bench: rank %s: ", bench_env_rank() ? bench_env_rank() : "?");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s%s%s\n", ai_strerror(st), detail && *detail ? ": " : "",
            detail ? detail : "");
    return 1;
}

bench_shape bench_shape_of(ai_coll coll, size_t bytes, size_t esize, int p)
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

void bench_fill_inputs(const bench_opts *o, const bench_shape *s, int rank, int p, void *sbuf,
                        void *rbuf)
{
    for (size_t i = 0; i < s->recv_elems; i++)
        ai_elem_set(rbuf, o->dt, i, BENCH_SENTINEL);
    switch (o->coll) {
    case AI_ALLREDUCE:
    case AI_REDUCE:
    case AI_REDUCE_SCATTER:
        for (size_t i = 0; i < s->send_elems; i++)
            ai_elem_set(sbuf, o->dt, i, val_reduce(o->op, p, rank, i));
        break;
    case AI_ALLGATHER:
        for (size_t i = 0; i < s->send_elems; i++)
            ai_elem_set(sbuf, o->dt, i, val_copy(rank, i));
        break;
    case AI_ALLTOALL:
        for (size_t i = 0; i < s->send_elems; i++)
            ai_elem_set(sbuf, o->dt, i, val_a2a(rank, (int)(i / s->count), i % s->count));
        break;
    case AI_BROADCAST:
        if (rank == o->root)
            for (size_t i = 0; i < s->recv_elems; i++)
                ai_elem_set(rbuf, o->dt, i, val_copy(o->root, i));
        break;
    default:
        break;
    }
}

int64_t bench_count_wrong(const bench_opts *o, const bench_shape *s, int rank, int p,
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
        wrong += ai_elem_get(rbuf, o->dt, i) != want;
    }
    return wrong;
}

ai_status_t bench_run_once(ai_comm *comm, const bench_opts *o, const bench_shape *s,
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

/* Names come from the library; escape them anyway so a line is always
 * valid JSON. */
void bench_json_str(FILE *f, const char *key, const char *v)
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
void bench_print_choice(const ai_choice *c)
{
    printf("\"choice\":{");
    bench_json_str(stdout, "algo", c->algo);
    printf(",\"chunk_bytes\":%zu,\"channels\":%d,", c->chunk_bytes, c->channels);
    bench_json_str(stdout, "source", c->source);
    printf(",\"explored\":%d,\"explore_s\":%.6g}", c->explored, c->explore_s);
}
