/*
 * comm layer internals: the communicator, the point-to-point engine the
 * collective algorithms are written against, and the coll_algo type of the
 * algorithm registry (whose functions are in comm/algo_registry.h).
 *
 * Engine model. Algorithms post non-blocking requests (comm_isend,
 * comm_irecv, comm_irecv_reduce) into caller-owned comm_req structs and
 * complete them with comm_wait(). Between one pair of ranks, messages in
 * each direction are matched in posting order (FIFO, no tags): every rank
 * runs the same algorithm, so both sides post the same sequence. A message
 * is received with exactly the byte count it was sent with; a mismatch is a
 * protocol error. Zero-byte requests complete at once and move nothing.
 *
 * Every wait is bounded by the communicator's timeout. On any failure the
 * communicator is marked failed, every peer is told (shared-memory abort
 * flag, TCP sockets shut down) and every later call returns AI_ERR_ABORTED.
 *
 * Hot path: posting and progressing requests allocates nothing and takes
 * no locks.
 */
#ifndef AI_COMM_H
#define AI_COMM_H

#include "util/util.h"

#include <stdatomic.h>

#define COMM_MAX_CHANNELS 8
#define COMM_MAX_TIMEOUT_S 1e6 /* AUTOINFRA_TIMEOUT / timeout_s, seconds */

typedef enum { COMM_REQ_SEND, COMM_REQ_RECV, COMM_REQ_RECV_REDUCE } comm_req_kind;

/* What a collective call is, as every rank taking part must describe it
 * alike. Every message header and shared-memory slot of the call carries
 * it, and receivers compare it as 16 bytes, so ranks that called different
 * collectives (or the same one with a different root, type, op or count)
 * fail instead of taking each other's data. */
#define COMM_SIG_NONE 0xff /* root (as -1) or op field a collective has none of */
typedef struct comm_call_sig {
    uint64_t count; /* the count argument */
    int32_t root;   /* broadcast and reduce; -1 for the others */
    uint8_t coll;   /* ai_coll */
    uint8_t dt;     /* ai_dtype */
    uint8_t op;     /* ai_op as passed (AVG is not SUM); COMM_SIG_NONE if not reducing */
    uint8_t zero;
} comm_call_sig;
#define COMM_HDR_MAX 48 /* message header bytes (transport.h: COMM_HDR_BYTES) */

/* One posted operation. Fields below `private` belong to the engine. */
typedef struct comm_req {
    comm_req_kind kind;
    int peer;
    const void *sbuf;  /* send: data */
    void *rbuf;        /* recv: destination; recv_reduce: dst */
    const void *src;   /* recv_reduce: other operand (may equal rbuf) */
    size_t bytes;
    ai_dtype dt;
    ai_op op;
    /* private */
    uint32_t seq;      /* call sequence it carries / expects (posting time) */
    uint64_t qpos;     /* place in the peer's queue for this direction */
    int stamp;         /* set by the caller: record t_done */
    double t_done;     /* ai_now() when the request completed */
    int done;
    int started;
    int nchan;
    size_t chan_off[COMM_MAX_CHANNELS + 1]; /* channel k moves [off[k], off[k+1]) */
    size_t chan_done[COMM_MAX_CHANNELS];     /* stream bytes (header, payload, pad) moved */
    unsigned char hdr[COMM_MAX_CHANNELS][COMM_HDR_MAX];
} comm_req;

/* Post a send of `bytes` bytes to `peer`; buf must stay valid until done. */
void comm_isend(ai_comm *c, comm_req *r, int peer, const void *buf, size_t bytes);
/* Post a receive of exactly `bytes` bytes from `peer` into buf. */
void comm_irecv(ai_comm *c, comm_req *r, int peer, void *buf, size_t bytes);
/* Post a receive that reduces on arrival: dst[i] = src[i] op in[i] for
 * count elements. src may equal dst (accumulate in place); src and dst must
 * not partially overlap. op is never AI_AVG here. */
void comm_irecv_reduce(ai_comm *c, comm_req *r, int peer, void *dst, const void *src,
                       size_t count, ai_dtype dt, ai_op op);
/* Complete n requests (in any order of progress). On failure returns the
 * error (already recorded with ai_fail naming the peer) and the
 * communicator is failed. */
ai_status_t comm_wait(ai_comm *c, comm_req *reqs, int n);
/* comm_wait that also returns AI_OK, some requests not done, once one of
 * them completed or at `until` (ai_now() seconds). *moved_at: when they
 * last moved; the timeout counts from there, across calls (updated). */
ai_status_t comm_wait_some(ai_comm *c, comm_req *reqs, int n, double until, double *moved_at);

/* Fault injection for bench/chaos (engine.c): the next message header this
 * process builds gets byte (v % 16) XORed with (v >> 8) & 0xff (0: 0xff).
 * One atomic store: callable from a signal handler. */
void comm_fault_corrupt_next(unsigned v);

/* Blocking conveniences built on the above. */
ai_status_t comm_send(ai_comm *c, int peer, const void *buf, size_t bytes);
ai_status_t comm_recv(ai_comm *c, int peer, void *buf, size_t bytes);
ai_status_t comm_sendrecv(ai_comm *c, int to, const void *sbuf, size_t sbytes,
                          int from, void *rbuf, size_t rbytes);
ai_status_t comm_sendrecv_reduce(ai_comm *c, int to, const void *sbuf, size_t sbytes,
                                 int from, void *dst, const void *src, size_t count,
                                 ai_dtype dt, ai_op op);

/* The small-message allreduce over shared memory (shm.c): every rank
 * writes its input into a slot of the host's segment and reduces all the
 * slots itself, in rank order (so every rank gets the same bits). Only
 * when comm_shm_direct_ok: one host, every rank on it, shared memory. */
int comm_shm_direct_ok(const ai_comm *c);
ai_status_t comm_shm_allreduce(ai_comm *c, const void *in, void *out, size_t count, ai_dtype dt,
                               ai_op op);

/* "broadcast(root 1, float32, 1024)": a call as error messages name it
 * (coll.c). Returns buf. */
const char *comm_call_sig_str(const comm_call_sig *s, char *buf, size_t n);
/* The error of a rank that found `peer` in the same call (seq) with a
 * different description: names both sides (coll.c). */
ai_status_t comm_call_mismatch(const ai_comm *c, int peer, const char *peer_host, uint32_t seq,
                               const comm_call_sig *theirs, const char *where);

/* Local reduction: dst[i] = a[i] op b[i]. dst may equal a or b. op != AVG. */
void comm_reduce_local(void *dst, const void *a, const void *b, size_t count,
                       ai_dtype dt, ai_op op);
/* comm_reduce_local without the x86 SIMD paths (kernel/reduce_local.c), so tests can
 * check the portable kernels on machines that have those paths. */
void comm_reduce_local_portable(void *dst, const void *a, const void *b, size_t count,
                                ai_dtype dt, ai_op op);

/* buf[i] /= divisor (AVG's final step; integer types divide truncating). */
void comm_scale_div(void *buf, size_t count, ai_dtype dt, int divisor);

/* Scratch buffers owned by the communicator, grown on demand and kept, so
 * repeated calls allocate nothing. slot in [0, COMM_SCRATCH_SLOTS). */
#define COMM_SCRATCH_SLOTS 4
ai_status_t comm_scratch(ai_comm *c, int slot, size_t bytes, void **out);

/* ------------------------------------------------------------ the object */

struct comm_transport; /* engine private */

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
    void (*wait_hook)(void *arg); /* ai_comm_set_wait_hook; NULL: none */
    void *wait_hook_arg;
    /* [AI_COLL_COUNT] other libraries' collectives as arms of `auto`
     * (ai_comm_set_host_coll; comm/algo/host.c); NULL: none registered. */
    struct comm_host_coll *host_coll;
};

/* The communicator proper (comm.c). The public communicator section of
 * autoinfra.h is implemented above comm, in tune/communicator.c, which
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

/* ai_rendezvous_port's work (transport/tcp.c): a free TCP port on host
 * outside the kernel's ephemeral range, -1 if none. */
int comm_tcp_free_port(const char *host);

/* Mark failed (first error wins), tell peers, return `status`. A status
 * of AI_ERR_REVOKED (or a failure adopted from a revoke) tells them it is
 * a revoke. */
ai_status_t comm_abort(ai_comm *c, ai_status_t status);
/* The error of a call on a communicator that is no longer usable:
 * AI_ERR_REVOKED when it was revoked, AI_ERR_ABORTED otherwise; `what`
 * names the call. */
ai_status_t comm_state_error(const ai_comm *c, const char *what);
/* At the start of a call: comm_state_error's error if the communicator is
 * not usable, or the abort or revoke another rank of this host has
 * published (one load: a call must not complete on a revoked communicator
 * from contributions its peers posted before they heard of it). */
ai_status_t comm_usable(ai_comm *c, const char *what);

/* ---------------------------------------- fault tolerance (comm/ft/)
 * The work behind the fault-tolerance section of autoinfra.h (its
 * semantics are documented there and in docs/faults.md); the public
 * wrappers in tune/fault.c attach the learner to what shrink, grow and
 * join return. */
ai_status_t comm_ft_revoke(ai_comm *c);
/* aux: a second per-rank value agreed along (shrink's new ports); out
 * NULL or [size]: every rank's aux as agreed (failed ranks' 0). */
ai_status_t comm_ft_agree(ai_comm *c, uint64_t *flags, uint64_t aux, uint64_t *aux_out);
ai_status_t comm_ft_failed(const ai_comm *c, int *ranks, int max, int *n);
ai_status_t comm_ft_shrink(ai_comm *c, ai_comm **out);
ai_status_t comm_ft_grow(ai_comm *c, int joiners, double timeout_s, ai_comm **out);
ai_status_t comm_ft_join_addr(const ai_comm *c, char *buf, size_t len);
ai_status_t comm_ft_join_pending(ai_comm *c, int *waiting);
ai_status_t comm_ft_join(const ai_comm_config *cfg, const char *job_addr, ai_comm **out);
void comm_ft_free(ai_comm *c);
/* ai_comm_set_block_waits' work: the transport's wait mode. */
void comm_set_block_waits(ai_comm *c, int block);
/* The wait hook (ai_comm_set_wait_hook) of a wait idle past its spin
 * phase: run it, if any. */
static inline void comm_wait_hook(ai_comm *c)
{
    if (c->wait_hook)
        c->wait_hook(c->wait_hook_arg);
}

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
