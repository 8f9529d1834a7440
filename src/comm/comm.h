/*
 * comm layer internals: the communicator object, its lifecycle, the hook
 * through which tune runs `auto`, and the arguments an algorithm gets.
 * The object's layout and the hook's type are in comm/object.h (included
 * here), which the transport room includes instead of this header. What
 * the communicator is built on has its own headers: the engine's face
 * (requests, waits, abort; comm/transport/engine.h, included by
 * object.h), the local reduction kernels (comm/kernel/reduce.h), the
 * algorithm registry (comm/algo_registry.h), fault tolerance
 * (comm/ft/ft.h).
 */
#ifndef AI_COMM_H
#define AI_COMM_H

#include "comm/object.h"

#define COMM_MAX_TIMEOUT_S 1e6 /* AUTOINFRA_TIMEOUT / timeout_s, seconds */

/* Scratch buffers owned by the communicator, grown on demand and kept, so
 * repeated calls allocate nothing. slot in [0, COMM_SCRATCH_SLOTS). */
ai_status_t comm_scratch(ai_comm *c, int slot, size_t bytes, void **out);

/* --------------------------------------------------------- the lifecycle */

struct comm_rank_info; /* transport.h */

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
