/*
 * Multi-process test harness: run a function on n ranks, each a forked
 * child with its own communicator.
 *
 *   static int body(ai_comm *c, void *arg) { ... return 0; }
 *   ranks_opts o = {.nhosts = 2};
 *   assert_int_equal(ranks_run(4, &o, body, NULL), 0);
 *
 * Each child builds an ai_comm with ai_comm_create (store on 127.0.0.1 at a
 * free port the parent picked, host id per rank from the options), runs
 * fn, destroys the communicator and exits with fn's result encoded as
 * below. The parent waits for all children with an overall deadline; on
 * expiry, or as soon as one child fails (unless keep_going), it SIGKILLs
 * the rest. ranks_run returns 0 only if every child exited 0.
 *
 * fn runs in the child: do not use cmocka assertions there (they would
 * unwind into the child's copy of the test runner); return nonzero and
 * print what went wrong instead. ai_comm_rank(c) gives the rank.
 */
#ifndef TESTS_RANKS_H
#define TESTS_RANKS_H

#include "autoinfra.h"
#include "autoinfra/introspect.h"

/* Decoded per-rank outcome (ranks_opts.status). */
#define RANKS_KILLED 1000     /* killed by the harness (deadline / peer failed) */
#define RANKS_SIGNAL_BASE 2000 /* 2000 + signo: died of a signal on its own */

typedef struct ranks_opts {
    int nhosts;           /* > 0: spread ranks over this many host ids (TCP
                             between them); 0: one host (shared memory) */
    int round_robin;      /* with nhosts: rank r on host r % nhosts (default:
                             contiguous blocks of ranks per host) */
    double timeout_s;     /* communicator timeout; 0: 10 s */
    double deadline_s;    /* whole run; 0: 60 s */
    int channels;         /* 0: communicator default */
    int no_shm;           /* ai_comm_config.no_shm */
    const char *kb_path;  /* ai_comm_config.kb_path */
    int keep_going;       /* don't kill the others when one child fails */
    /* Optional per-rank hooks, called in the child. */
    void (*before_create)(int rank, void *hook_arg); /* e.g. arm a stall */
    const char *(*token_of_rank)(int rank, void *hook_arg); /* NULL: shared */
    const char *(*host_of_rank)(int rank, void *hook_arg);  /* overrides nhosts */
    void *hook_arg;
    /* Optional output, n entries: the decoded outcome of each rank:
     *   fn's return value (0..99 as is; an ai_status_t < 0 as itself),
     *   the ai_comm_create status if creation failed (fn not run),
     *   RANKS_KILLED, or RANKS_SIGNAL_BASE + signo. */
    int *status;
} ranks_opts;

int ranks_run(int n, const ranks_opts *o, int (*fn)(ai_comm *c, void *arg), void *arg);

/* A TCP port on 127.0.0.1 nobody listens on right now, or -1. */
int ranks_free_port(void);

#endif
