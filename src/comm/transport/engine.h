/*
 * The engine: the transports' one face to the rest of comm (engine.c
 * behind it, and the transports behind that: transport.h). Requests,
 * their progress and waits, the call descriptions messages carry, the
 * abort; and for an algorithm that exchanges through the host's shared
 * memory itself, the slot board and the idle waits on the doorbell.
 *
 * Model. Algorithms post non-blocking requests (comm_isend,
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
#ifndef AI_COMM_TRANSPORT_ENGINE_H
#define AI_COMM_TRANSPORT_ENGINE_H

#include "util/util.h"

#include <stdatomic.h>

#define COMM_MAX_CHANNELS 8 /* TCP connections per peer pair, at most */

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
/* The call sequence point-to-point messages carry (comm_req.seq): they
 * belong to no collective call (only two ranks take part, so call_seq
 * does not move). */
#define COMM_SEQ_P2P 0xffffffffu
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
 * error (already recorded with util_fail naming the peer) and the
 * communicator is failed. */
ai_status_t comm_wait(ai_comm *c, comm_req *reqs, int n);
/* comm_wait that also returns AI_OK, some requests not done, once one of
 * them completed or at `until` (ai_now() seconds). *moved_at: when they
 * last moved; the timeout counts from there, across calls (updated). */
ai_status_t comm_wait_some(ai_comm *c, comm_req *reqs, int n, double until, double *moved_at);

/* Receive from any rank (ai_irecv_any, p2p.c). comm_p2p_arrived: the
 * first peer, scanning from `start` in rank order and wrapping, whose
 * stream holds a whole point-to-point message header at its front that no
 * posted receive claims (every receive posted from that peer is done);
 * -1 if none. A collective's message at the front is not taken.
 * comm_p2p_wait_arrival: wait until comm_p2p_arrived finds one or until
 * (ai_now() seconds) passed, at least one scan; the communicator's
 * liveness checks run every 50 ms (*last_check, across calls), and once
 * `since` lies the communicator's timeout back, the wait fails with
 * AI_ERR_TIMEOUT (the communicator failed, as for any wait). */
int comm_p2p_arrived(ai_comm *c, int start);
ai_status_t comm_p2p_wait_arrival(ai_comm *c, double until, double since, double *last_check);

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

/* "broadcast(root 1, float32, 1024)": a call as error messages name it.
 * Returns buf. */
const char *comm_call_sig_str(const comm_call_sig *s, char *buf, size_t n);
/* The error of a rank that found `peer` in the same call (seq) with a
 * different description: names both sides. */
ai_status_t comm_call_mismatch(const ai_comm *c, int peer, const char *peer_host, uint32_t seq,
                               const comm_call_sig *theirs, const char *where);

/* ---------------------------------------------------------------- abort */

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

/* The error of a wait that timed out (stall.c), blaming (tp->blame) a
 * peer of this machine whose process is stopped, else the first peer
 * waited on, and naming it first. w: the peers still waited on and how
 * ("receive from", "send to"). */
typedef struct comm_waited {
    int peer;
    const char *how;
} comm_waited;
ai_status_t comm_stall_error(ai_comm *c, const comm_waited *w, int n, double idle);

/* ------------------------------------- waiting on the host's shared memory */

/* A local rank's doorbell, on a cache line of its own: a rank about to
 * block sets `sleeping` and sleeps in a futex on `seq`; whoever moves a
 * ring or a slot flag that rank waits on bumps `seq` and wakes it, but only
 * when `sleeping` is set, so a rank that never blocks costs its peers one
 * fence and one load per move (comm_bell_ring, engine.c). */
typedef struct shm_bell {
    _Atomic uint32_t seq;
    _Atomic uint32_t sleeping;
    char pad[56];
} shm_bell;

/* The host's slot board (in the shared-memory segment, shm.c), on which
 * an algorithm exchanges through shared memory without messages
 * (algo/allreduce.c, direct): sets of one COMM_SLOT_BYTES slot per local
 * rank, which the exchanges take in turn, and per rank a flag: the number
 * of the last exchange whose contribution it has written, and per parity
 * of the exchange the description of what it wrote (comm_shm_peek_slots
 * compares them while any wait runs).
 *
 * On a host whose ranks are all of the communicator the sets hold
 * COMM_SLOT_POOL_BYTES together (comm_slot_sets), so a set is written again
 * only after that many bytes of other exchanges: by then its lines have
 * left every core's private cache, a rank's copy into its slot takes no
 * line back from the cores that read it last, and the readers find the
 * lines in the shared cache. With two sets every copy took its lines back
 * from the readers' caches first: a 64 KiB allreduce on 2 ranks took
 * 12.2 us, against 4.8-5.5 us through a 4 MiB pool (docs/runtime.md,
 * "The slot pool"; bench/xcore.c). */
#define COMM_SLOT_BYTES ((size_t)16 << 10)
#define COMM_SLOT_POOL_BYTES ((size_t)4 << 20)
/* Exchanges of fewer bytes per rank keep to the first two sets: a line the
 * other core holds is nearer than a fresh one (2 ranks: 0.16-0.18 against
 * 0.17-0.23 us at 8-256 B; from 1 KiB the pool is faster). Larger ones
 * take the rest of the pool in turn, each as many bytes per rank as it
 * has (rounded up to a cache line), up to COMM_SLOT_PIECE: a 1 MiB
 * allreduce on 2 ranks took 70 us in 64 KiB pieces, 75 in 32 KiB and 81
 * in 16 KiB (fixed slots of each size; docs/runtime.md, "Messages and
 * progress"). */
#define COMM_SLOT_SMALL ((size_t)1 << 10)
#define COMM_SLOT_PIECE ((size_t)64 << 10)
/* The board's sets for nlocal ranks: as many as fit COMM_SLOT_POOL_BYTES
 * when they are the whole communicator (pool), else 2; at least 2, and a
 * power of two, so that the exchange counter's wrap keeps the turn. */
static inline int comm_slot_sets(int nlocal, int pool)
{
    size_t fit = pool ? COMM_SLOT_POOL_BYTES / ((size_t)nlocal * COMM_SLOT_BYTES) : 2;
    int s = 2;
    while ((size_t)s * 2 <= fit)
        s *= 2;
    return s;
}
typedef struct shm_slot_call {
    uint32_t call_seq;  /* the collective call (ai_comm.call_seq) */
    uint32_t piece;     /* which COMM_SLOT_BYTES piece of it */
    comm_call_sig sig;  /* the call as this rank describes it */
} shm_slot_call;
typedef struct shm_flag {
    _Atomic uint32_t posted;
    uint32_t pad0;
    shm_slot_call what[2]; /* per parity of the exchange: the call written */
    char pad[8];
} shm_flag;

/* The watch for slow spells (shm.c, "Slow spells"), fed by a rank's large
 * copies into shared memory that another core reads: one per ring it
 * sends on (a pair of ranks on one core never sees a spell, and a watch
 * shared with it would not either), and one for its slots, which every
 * other local rank reads. */
typedef struct comm_spell {
    int mode;      /* AUTOINFRA_SHM_NT: 0 never past the cache, 1 always, 2 in a spell */
    int copies;    /* large copies, counted */
    int timed;     /* ... of which timed */
    double best;   /* seconds a byte, the fastest window's fastest copy */
    double min;    /* ... this window's fastest so far */
    double local;  /* ... and of a copy within this core (0: unknown) */
    double until;  /* ai_now() until which writes go past the cache */
} comm_spell;
/* n bytes from src to dst in shared memory that another core reads:
 * through the cache, or, per w's mode and in a spell, past it
 * (non-temporal stores, fenced before this returns, so that a release
 * store after it publishes them). Copies of COMM_SPELL_MIN bytes or more
 * are timed, one in a few, and watched. */
void comm_shm_copy(comm_spell *w, void *dst, const void *src, size_t n);
/* One timed copy, `rate` seconds a byte, ending at `now`; at the end of a
 * window of them w->until says until when writes go past the cache. */
void comm_shm_watch(comm_spell *w, double rate, double now);
#define COMM_SPELL_MIN ((size_t)16 << 10)

/* The board of this rank's host, when every rank of the communicator is
 * on it and it has shared memory: 1 with *b filled, else 0. calls counts
 * the exchanges run on it (the same on every local rank; the owner of the
 * protocol increments it). */
typedef struct comm_slot_board {
    int n, me;              /* local ranks; my local index */
    unsigned char *slots;   /* [nsets][n][COMM_SLOT_BYTES] */
    int nsets;
    shm_flag *flags;        /* [n] */
    shm_bell *bells;        /* [n] */
    uint32_t *calls;
    size_t *cursor;         /* where the next exchange of the pool's rest
                             * starts (algo/allreduce.c, slot_place) */
    int *cma;               /* single-copy reads between the local ranks:
                             * 0 not tried yet, 1 they work, -1 they do not */
    comm_spell *spell;      /* this rank's writes into its slots */
} comm_slot_board;
int comm_slot_board_get(const ai_comm *c, comm_slot_board *b);
/* Copy len bytes at address src in the process of local rank `rank` into
 * dst, by the kernel's cross-memory attach (process_vm_readv: one copy,
 * no staging in shared memory). AI_OK, or a failure naming the rank and
 * the system's error (blaming that rank); *denied is set when the system
 * refuses such reads altogether (EPERM, ENOSYS: ptrace policy, seccomp). */
ai_status_t comm_shm_peer_read(ai_comm *c, int rank, void *dst, const void *src, size_t len,
                               int *denied);

/* ------------------------------------------------------ how waits wait */

/* ai_comm_set_block_waits' work: the mode of every later idle wait (see
 * comm_transport's yield_s and tcp_spin_s, transport.h); another thread may
 * call it during a wait, which takes it up at its next idle pass. */
void comm_set_block_waits(ai_comm *c, int block);
/* ai_comm_set_wait_hook's work: fn(arg) runs in every wait idle past its
 * spin phase, which then blocks 1 ms at a time so the hook runs often;
 * fn NULL: none. */
void comm_set_wait_hook(ai_comm *c, void (*fn)(void *arg), void *arg);

/* ai_rendezvous_port's work (tcp.c): a free TCP port on host outside the
 * kernel's ephemeral range, -1 if none. */
int comm_tcp_free_port(const char *host);

/* The host name peer gave at rendezvous, for messages. */
const char *comm_peer_host(const ai_comm *c, int peer);

/* engine.c: waiting on shared memory. An idle wait spins tp->spin_passes
 * passes, then yields the core for tp->yield_s[mode], then blocks in a futex on
 * its doorbell, at most COMM_BLOCK_MS at a time, so the liveness checks
 * (every 50 ms) and the timeout still run. Only for waits whose every
 * pending transfer rings the doorbell (shared memory; a TCP socket does
 * not). comm_idle_step is called after every pass that moved nothing,
 * comm_idle_reset after one that moved and when the wait ends. It returns
 * AI_OK to go on, or the failure (ops->check's, or ops->expired's at the
 * timeout), already passed to comm_abort. */
typedef struct comm_idle {
    int passes;
    int armed;          /* sleeping is set and seq was read: one more pass, then block */
    uint32_t seq;
    double since, last_check;
    int block_ms;       /* 0: block COMM_BLOCK_MS at a time; else at most this */
} comm_idle;
typedef struct comm_idle_ops {
    ai_status_t (*check)(ai_comm *c, void *ctx);                 /* peers alive? */
    ai_status_t (*expired)(ai_comm *c, void *ctx, double idle_s); /* the timeout's error */
} comm_idle_ops;
#define COMM_BLOCK_MS 20
void comm_idle_reset(ai_comm *c, comm_idle *w);
ai_status_t comm_idle_step(ai_comm *c, comm_idle *w, const comm_idle_ops *ops, void *ctx);
/* After a move others may wait on: wake the owner of `b` if it sleeps. */
void comm_bell_ring(shm_bell *b);
/* A dead local rank or an abort anywhere on this host, as a failure. */
ai_status_t comm_shm_check_local(ai_comm *c);
/* Liveness-check extras while a collective waits (engine.c, shm.c): a
 * message or slot of this call from a rank that describes the call
 * differently is a mismatch found before anyone receives it. Both are
 * part of every wait's liveness check, so a rank waiting on any peer
 * finds a mismatch posted by a third. */
ai_status_t comm_peek_calls(ai_comm *c);
ai_status_t comm_shm_peek_slots(ai_comm *c);

#endif
