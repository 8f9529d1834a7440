/*
 * `autoinfra bench --learn` (cmd_bench_learn.c), as cmd_bench.c calls it.
 */
#ifndef AI_CLI_BENCH_LEARN_H
#define AI_CLI_BENCH_LEARN_H

#include "bench.h"

/* --oracle-from's candidates: read before the communicator exists, so
 * that every rank stops on a bad file (quiet: only rank 0 says why).
 * Returns 0 with *out set (free it), else the exit status. */
typedef struct bench_learn_cands bench_learn_cands;
int bench_learn_load(const bench_opts *o, int quiet, bench_learn_cands **out);
/* The table's heading (without --json), on rank 0. */
void bench_learn_header(const bench_opts *o, int p, int nhosts);
/* One size: auto calls, the sweep, the confirmation; 0 or an exit status. */
int bench_learn_size(ai_comm *comm, const bench_opts *o, const bench_learn_cands *cands,
                     size_t req, void *sbuf, void *rbuf);

#endif
