/*
 * The engine's face to the rest of comm beyond requests: what an
 * algorithm that waits on the host's shared memory itself needs (the slot
 * board, idle waits on the doorbell, the liveness checks). The transports'
 * own internals are in transport.h.
 */
#ifndef AI_COMM_TRANSPORT_ENGINE_H
#define AI_COMM_TRANSPORT_ENGINE_H

#include "comm/comm.h"

#include <stdatomic.h>

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
 * (algo/allreduce.c, direct): two sets (calls alternate between them) of
 * one COMM_SLOT_BYTES slot per local rank, and per rank a flag: the number
 * of the last call whose contribution it has written, and per set the
 * description of what it wrote there (comm_shm_peek_slots compares them
 * while any wait runs). */
#define COMM_SLOT_BYTES ((size_t)16 << 10)
typedef struct shm_slot_call {
    uint32_t call_seq;  /* the collective call (ai_comm.call_seq) */
    uint32_t piece;     /* which COMM_SLOT_BYTES piece of it */
    comm_call_sig sig;  /* the call as this rank describes it */
} shm_slot_call;
typedef struct shm_flag {
    _Atomic uint32_t posted;
    uint32_t pad0;
    shm_slot_call what[2]; /* per slot set: the call last written there */
    char pad[8];
} shm_flag;

/* The board of this rank's host, when every rank of the communicator is
 * on it and it has shared memory: 1 with *b filled, else 0. calls counts
 * the exchanges run on it (the same on every local rank; the owner of the
 * protocol increments it). */
typedef struct comm_slot_board {
    int n, me;              /* local ranks; my local index */
    unsigned char *slots;   /* [2][n][COMM_SLOT_BYTES] */
    shm_flag *flags;        /* [n] */
    shm_bell *bells;        /* [n] */
    uint32_t *calls;
} comm_slot_board;
int comm_slot_board_get(const ai_comm *c, comm_slot_board *b);

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
