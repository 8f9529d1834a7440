/*
 * What `autoinfra bench` (cmd_bench.c) shares with its learner evaluation,
 * `bench --learn` (cmd_bench_learn.c), implemented in bench.c: the
 * options, the buffer shape of a call, checkable inputs, running one call,
 * and the error and JSON output helpers. The evaluation's own entry points
 * are in bench_learn.h, so that the two commands' files call bench.c and
 * cmd_bench.c calls cmd_bench_learn.c, never the other way round.
 */
#ifndef AI_CLI_BENCH_H
#define AI_CLI_BENCH_H

#include "autoinfra.h"
#include "autoinfra/introspect.h"

#include <stdint.h>
#include <stdio.h>

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

/* The buffer shape of one call of `coll` for a requested `bytes`
 * (element size esize, p ranks). */
bench_shape bench_shape_of(ai_coll coll, size_t bytes, size_t esize, int p);
/* Checkable inputs in sbuf and the sentinel in rbuf (bench.c's comment
 * says why these values). */
void bench_fill_inputs(const bench_opts *o, const bench_shape *s, int rank, int p, void *sbuf,
                       void *rbuf);
/* Elements of the result in rbuf that differ from the locally computed
 * reference. */
int64_t bench_count_wrong(const bench_opts *o, const bench_shape *s, int rank, int p,
                          const void *rbuf);
/* One call of the benchmarked collective with options ao. */
ai_status_t bench_run_once(ai_comm *comm, const bench_opts *o, const bench_shape *s,
                           const ai_algo_opts *ao, const void *sbuf, void *rbuf);

/* The rank as the environment tells it, for messages printed before (or
 * without) a communicator; NULL outside a job. */
const char *bench_env_rank(void);
/* A runtime error on stderr (ai_strerror + ai_last_error, with the rank;
 * rank < 0: from the environment). Returns 1, the exit status. */
int bench_fail(int rank, ai_status_t st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "key":"value" with the value escaped for JSON. */
void bench_json_str(FILE *f, const char *key, const char *v);
/* "choice":{...}: the arm auto settled on (ai_choice), on stdout. */
void bench_print_choice(const ai_choice *c);

#endif
