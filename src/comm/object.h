/*
 * The communicator object's layout: what the transport room needs of
 * the layers built on it (transport.h includes this, not comm.h), and
 * comm.h's object. The tuner hook's type is here because the object
 * holds it by value; when it runs, and everything else of the
 * communicator's lifecycle, is comm.h's.
 */
#ifndef AI_COMM_OBJECT_H
#define AI_COMM_OBJECT_H

#include "comm/transport/engine.h"

/* The communicator's scratch buffers (comm_scratch, comm.h). */
#define COMM_SCRATCH_SLOTS 4

struct comm_transport; /* the engine's (transport.h) */

/* One way to run a collective: the learner's unit of choice. */
typedef struct comm_arm {
    const struct coll_algo *algo;
    size_t chunk_bytes; /* 0: the algorithm's default */
    int channels;       /* 1..communicator's channels */
} comm_arm;

/*
 * The hook through which a layer above (tune) runs `auto`: choose() may
 * take the call (return 1 and fill *arm; it may run small collectives of
 * its own first, on every rank alike); the call is then timed and
 * observe() gets its seconds. release() frees ctx with the communicator.
 */
typedef struct comm_tuner {
    void *ctx;
    ai_status_t (*choose)(void *ctx, ai_comm *c, ai_coll coll, size_t bytes, comm_arm *arm,
                          int *taken);
    ai_status_t (*observe)(void *ctx, ai_comm *c, ai_coll coll, size_t bytes, double seconds);
    void (*release)(void *ctx);
} comm_tuner;

struct ai_comm {
    int rank, size;
    /* Hosts: ranks with equal host ids share memory. Host indices are
     * numbered in order of each host's lowest rank. */
    int nhosts;
    int *host_of;        /* [size] rank -> host index */
    int *host_first;     /* [nhosts + 1] offsets into host_ranks */
    int *host_ranks;     /* ranks grouped by host, ascending within a host */
    int local_rank, local_size; /* position within my host */

    double timeout_s;
    int channels;        /* TCP connections per peer pair: the most a call stripes over */
    int active_channels; /* channels the current call may use (<= channels) */
    uint32_t call_seq;   /* collective calls issued, for matching checks */
    comm_call_sig call;  /* the latest collective call (call_seq's) */
    comm_call_sig prev_call; /* the one before it, to name a late message's call */
    int in_call;         /* 1 while a collective's algorithm runs: waits also
                          * look at peers' pending messages (engine.c) */

    ai_status_t state;   /* AI_OK until a failure */
    char failure[512];   /* what broke it */
    void *scratch[COMM_SCRATCH_SLOTS];
    size_t scratch_len[COMM_SCRATCH_SLOTS];

    struct comm_transport *tp;
    struct comm_links *links; /* measured host links (probe.c), or NULL */
    /* Model-based auto choices per collective and power-of-two size
     * bucket (select.c); NULL: not decided yet. Cleared with new links. */
    const char *auto_cache[AI_COLL_COUNT][64];
    unsigned links_gen;  /* incremented whenever links are (re)measured */
    comm_tuner tuner;    /* all NULL: no learner */
    struct comm_ft *ft;  /* agreement state (comm/ft/), NULL until the first */
    void (*wait_hook)(void *arg); /* comm_set_wait_hook (engine.c); NULL: none */
    void *wait_hook_arg;
    /* [AI_COLL_COUNT] other libraries' collectives as arms of `auto`
     * (ai_comm_set_host_coll; comm/algo/host.c); NULL: none registered. */
    struct comm_host_coll *host_coll;
};

/* The channels a call stripes over when neither the learner nor the
 * caller chose: one connection per pair of ranks, as gloo and Open MPI's
 * TCP transport (btl_tcp_links 1). On shaped links two cost pairwise
 * exchanges 1.06-1.39x the bound (rabenseifner on T1, one was 1.01-1.09x)
 * and `weighted` 1.13-1.40x at 16-32 MiB (T4, one 1.08-1.12x), and rings
 * the same either way (docs/runtime.md); the learner weighs both. */
#define COMM_CALL_CHANNELS 1

#endif
