/*
 * comm layer internals: the communicator object, its lifecycle, the hook
 * through which tune runs `auto`, and the arguments an algorithm gets.
 * What the communicator is built on has its own headers: the engine's
 * face (requests, waits, abort; comm/transport/engine.h, included here),
 * the local reduction kernels (comm/kernel/reduce.h), the algorithm
 * registry (comm/algo_registry.h), fault tolerance (comm/ft/ft.h).
 */
#ifndef AI_COMM_H
#define AI_COMM_H

#include "comm/transport/engine.h"

#define COMM_MAX_TIMEOUT_S 1e6 /* AUTOINFRA_TIMEOUT / timeout_s, seconds */

/* Scratch buffers owned by the communicator, grown on demand and kept, so
 * repeated calls allocate nothing. slot in [0, COMM_SCRATCH_SLOTS). */
#define COMM_SCRATCH_SLOTS 4
ai_status_t comm_scratch(ai_comm *c, int slot, size_t bytes, void **out);

/* ------------------------------------------------------------ the object */

struct comm_transport; /* the engine's (transport.h) */
struct comm_rank_info; /* transport.h */

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
    int channels;        /* TCP connections per peer pair */
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

/* The communicator proper (comm.c). The public communicator section of
 * autoinfra.h is implemented above comm, in api/communicator.c, which
 * wraps these and attaches the learner. comm_destroy releases the tuner
 * hook's context first (comm_tuner.release), then everything else; safe
 * on a failed or partly created communicator, NULL is a no-op. */
ai_status_t comm_create(const ai_comm_config *cfg, ai_comm **out);
ai_status_t comm_create_env(ai_comm **out);
/* The configuration comm_create_env uses (ai_comm_config_env). */
ai_status_t comm_config_env(ai_comm_config *out);
/* As comm_create, with the rank table exchanged through kv (bootstrap.c). */
ai_status_t comm_create_store(const ai_comm_config *cfg, const ai_kv_store *kv, ai_comm **out);

void comm_destroy(ai_comm *c);

/* A communicator from a rank table (transport.h's comm_rank_info), for
 * creation, shrink, grow and join alike. comm_alloc: the object with its
 * transport, nothing connected (peers' fds -1). comm_build: hosts grouped
 * from the table, then every transport's setup (comm_transports_setup),
 * through tp->listen_fd (which this rank opened on table[rank]'s address
 * and port); rank 0 keeps that
 * listener open as the communicator's join door (ai_comm_join_addr), the
 * others close it. On failure the caller destroys c. */
typedef struct comm_params {
    double timeout_s;
    int channels, no_shm;
    double yield_s[2], tcp_spin_s[2]; /* per wait mode (transport.h, comm_transport) */
    int block_waits;                  /* the mode to start in */
} comm_params;
/* job_key: the job token's (comm_token_key); key: this communicator's. */
ai_status_t comm_alloc(int rank, int size, const comm_params *pp,
                       const unsigned char job_key[AI_KEY_BYTES],
                       const unsigned char key[AI_KEY_BYTES], ai_comm **out);
ai_status_t comm_build(ai_comm *c, const struct comm_rank_info *table);
/* The waits' spin and yield times of both modes (AUTOINFRA_SPIN_US,
 * _YIELD_US, else each mode's defaults) and the mode to start in
 * (block_waits) into pp. */
ai_status_t comm_wait_params(int block_waits, comm_params *pp);
/* The key a job token is known by (NULL: ""), and this machine's id
 * (comm_rank_info.machine). */
void comm_token_key(const char *token, unsigned char key[AI_KEY_BYTES]);
uint64_t comm_machine_id(void);

/* ai_rendezvous_port's work (transport/tcp.c): a free TCP port on host
 * outside the kernel's ephemeral range, -1 if none. */
int comm_tcp_free_port(const char *host);

/* ------------------------------------------------------------ algorithms */

/* Arguments as an algorithm sees them, after the public wrapper resolved
 * in-place forms and AVG (op is SUM for AVG; the wrapper divides after):
 *  - allreduce:      sendbuf may equal recvbuf;
 *  - reduce_scatter: sendbuf holds count*size elements, recvbuf count;
 *                    recvbuf may equal sendbuf + rank*count elements;
 *  - allgather:      sendbuf count, recvbuf count*size; sendbuf may equal
 *                    recvbuf + rank*count elements;
 *  - broadcast:      recvbuf is the buffer (sendbuf unused);
 *  - reduce:         at root sendbuf may equal recvbuf; recvbuf unused
 *                    (possibly NULL) at other ranks;
 *  - alltoall:       sendbuf and recvbuf count*size, never aliased;
 *  - barrier:        no buffers.
 */
typedef struct coll_args {
    ai_coll coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    ai_dtype dt;
    ai_op op;
    int root;
    size_t chunk_bytes; /* 0: algorithm's default */
} coll_args;

typedef ai_status_t (*coll_algo_fn)(ai_comm *c, const coll_args *a);

typedef struct coll_algo {
    ai_coll coll;
    const char *name;
    coll_algo_fn run;
} coll_algo;

/* The registry: comm/algo_registry.h. */

/* A collective of another library (ai_comm_set_host_coll): `algo` is the
 * arm the learner lists, named `name`, whose run calls fn. */
typedef struct comm_host_coll {
    coll_algo algo;
    char name[32];
    ai_host_coll_fn fn;
    void *arg;
} comm_host_coll;

/* The host collective registered for coll, NULL if none. */
static inline const coll_algo *comm_host_algo(const ai_comm *c, ai_coll coll)
{
    return c->host_coll && (unsigned)coll < AI_COLL_COUNT && c->host_coll[coll].fn
               ? &c->host_coll[coll].algo
               : NULL;
}
ai_status_t comm_host_coll_run(ai_comm *c, const coll_args *a);

#endif
