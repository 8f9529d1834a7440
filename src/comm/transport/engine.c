/*
 * The point-to-point engine: posting, progressing and completing requests
 * over the transports' channels (the table below; framing: transport.h).
 * The engine names no transport: it moves bytes through each peer's
 * comm_transport_ops.
 *
 * Progress is driven by the waiting rank itself (no progress thread): a
 * wait makes passes over its requests, moving whatever bytes the transports
 * accept, until all are done. Idle passes spin briefly, then yield the CPU
 * (ranks often outnumber cores: 4 ranks on 2 cores is the common case
 * here), then block: in a futex on the rank's doorbell when only shared
 * memory is pending (every ring move rings the peer's doorbell), in poll()
 * when only TCP is pending (the transports' rings_bell). A blocked rank
 * burns no core, which is what an oversubscribed host needs: the rank it
 * waits for gets the core. A wait
 * that sees no progress at all for the communicator's timeout fails and
 * names the peers it was waiting on.
 */
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Below this many bytes per channel, striping over more TCP connections
 * costs more in per-message overhead than it gains in parallelism. */
#define COMM_CHAN_MIN_BYTES (64 * 1024)
#define LIVENESS_PERIOD_S 0.05

static const unsigned char zero_pad[8];

static void req_init(ai_comm *c, comm_req *r, comm_req_kind kind, int peer, size_t bytes)
{
    r->kind = kind;
    r->peer = peer;
    r->bytes = bytes;
    r->started = 0;
    r->stamp = 0;
    r->seq = c->call_seq;
    r->done = bytes == 0;
    int nchan = 1;
    comm_peer *p = (peer >= 0 && peer < c->size && peer != c->rank) ? &c->tp->peers[peer] : NULL;
    /* Take the next place in this peer's queue for the direction: messages
     * match in posting order, whatever order requests are waited in. */
    if (p && !r->done)
        r->qpos = kind == COMM_REQ_SEND ? p->tx_posted++ : p->rx_posted++;
    if (p && p->nchan > 1) { /* a transport with several channels a pair: stripe */
        nchan = AI_MAX(1, AI_MIN(c->active_channels, p->nchan));
        size_t by_size = bytes / COMM_CHAN_MIN_BYTES;
        if ((size_t)nchan > by_size)
            nchan = by_size > 1 ? (int)by_size : 1;
    }
    r->nchan = nchan;
    /* Split points on multiples of 8 bytes keep every channel's share a
     * whole number of elements for any element size. */
    for (int k = 0; k < nchan; k++) {
        r->chan_off[k] = (bytes / (size_t)nchan * (size_t)k) & ~(size_t)7;
        r->chan_done[k] = 0;
    }
    r->chan_off[nchan] = bytes;
}

void comm_isend(ai_comm *c, comm_req *r, int peer, const void *buf, size_t bytes)
{
    req_init(c, r, COMM_REQ_SEND, peer, bytes);
    r->sbuf = buf;
    r->rbuf = NULL;
    r->src = NULL;
}

void comm_irecv(ai_comm *c, comm_req *r, int peer, void *buf, size_t bytes)
{
    req_init(c, r, COMM_REQ_RECV, peer, bytes);
    r->sbuf = NULL;
    r->rbuf = buf;
    r->src = NULL;
}

void comm_irecv_reduce(ai_comm *c, comm_req *r, int peer, void *dst, const void *src,
                       size_t count, ai_dtype dt, ai_op op)
{
    req_init(c, r, COMM_REQ_RECV_REDUCE, peer, count * ai_dtype_size(dt));
    r->sbuf = NULL;
    r->rbuf = dst;
    r->src = src ? src : dst;
    r->dt = dt;
    r->op = op;
}

const char *comm_peer_host(const ai_comm *c, int peer) { return c->tp->peers[peer].host; }

/* ------------------------------------------------------------- framing */

/* Fault injection (bench/chaos, docs/chaos.md): nonzero once
 * comm_fault_corrupt_next() armed it, consumed by the next header this
 * process builds. Lock-free, so that a signal handler may arm it; one
 * relaxed load per message when unarmed. */
static _Atomic unsigned fault_corrupt;

void comm_fault_corrupt_next(unsigned v) { atomic_store(&fault_corrupt, v | 0x80000000u); }

_Static_assert(COMM_HDR_BYTES == COMM_HDR_MAX && COMM_HDR_BYTES % 8 == 0, "header size");
_Static_assert(2 * sizeof(comm_call_sig) == COMM_HDR_BYTES - 16, "call descriptions fill the header");

/* Header: magic (4) | call sequence (4) | payload length (8) | the call's
 * description (comm_call_sig, 16) | the sender's previous call's (16). A
 * request lives within one call, so the communicator's current
 * description is the request's. The previous call names what a peer that
 * is one call ahead did in the call this rank is still in. */
static void hdr_build(const ai_comm *c, comm_req *r, int k)
{
    uint32_t magic = COMM_MSG_MAGIC, seq = r->seq;
    uint64_t len = comm_chan_len(r, k);
    memcpy(r->hdr[k], &magic, 4);
    memcpy(r->hdr[k] + 4, &seq, 4);
    memcpy(r->hdr[k] + 8, &len, 8);
    memcpy(r->hdr[k] + 16, &c->call, sizeof c->call);
    memcpy(r->hdr[k] + 32, &c->prev_call, sizeof c->prev_call);
    if (atomic_load_explicit(&fault_corrupt, memory_order_relaxed)) {
        unsigned v = atomic_exchange(&fault_corrupt, 0u);
        unsigned char mask = (unsigned char)(v >> 8);
        /* One of the 16 framing bytes (magic, sequence, length), as
         * documented; the armed bit is not part of the index. */
        if (v)
            r->hdr[k][(v & 0x7fffffffu) % 16] ^= mask ? mask : 0xff;
    }
}

const char *comm_call_sig_str(const comm_call_sig *s, char *buf, size_t n)
{
    char op[32] = "", root[32] = "";
    if (s->op != COMM_SIG_NONE)
        snprintf(op, sizeof op, "%s, ", ai_op_name((ai_op)s->op));
    if (s->root >= 0)
        snprintf(root, sizeof root, "root %d, ", (int)s->root);
    if (s->coll == AI_BARRIER)
        snprintf(buf, n, "barrier()");
    else
        snprintf(buf, n, "%s(%s%s%s, %llu)", ai_coll_name((ai_coll)s->coll), op, root,
                 ai_dtype_name((ai_dtype)s->dt), (unsigned long long)s->count);
    return buf;
}

ai_status_t comm_call_mismatch(const ai_comm *c, int peer, const char *peer_host, uint32_t seq,
                               const comm_call_sig *theirs, const char *where)
{
    char a[96], b[96];
    return util_fail(AI_ERR_PROTO,
                     "rank %d (host %s) called %s where rank %d called %s (collective call #%u, "
                     "%s): ranks issued different collectives or arguments",
                     peer, peer_host, comm_call_sig_str(theirs, a, sizeof a), c->rank,
                     comm_call_sig_str(&c->call, b, sizeof b), seq, where);
}

/* A message of another call number than this rank's. From the call
 * before: the two ranks' calls of that number differed. From the next
 * call: the peer finished this call without sending this rank what it
 * waits for, so it made another call (its previous call is in the header)
 * or ran another algorithm. */
static ai_status_t late_error(const ai_comm *c, const comm_req *r, uint32_t seq,
                              const comm_call_sig *theirs, const comm_call_sig *their_prev)
{
    char a[96], b[96];
    int peer = r->peer;
    if (seq + 1 == r->seq && memcmp(theirs, &c->prev_call, sizeof *theirs) != 0)
        return util_fail(AI_ERR_PROTO,
                         "rank %d (host %s) called %s where rank %d called %s (collective call "
                         "#%u; its message reached this rank's call #%u): ranks issued different "
                         "collectives or arguments",
                         peer, comm_peer_host(c, peer), comm_call_sig_str(theirs, a, sizeof a), c->rank,
                         comm_call_sig_str(&c->prev_call, b, sizeof b), seq, r->seq);
    if (seq == r->seq + 1 && memcmp(their_prev, &c->call, sizeof *their_prev) != 0)
        return comm_call_mismatch(c, peer, comm_peer_host(c, peer), r->seq, their_prev,
                                  "named by its next call's message");
    if (seq == r->seq + 1)
        return util_fail(AI_ERR_PROTO,
                         "rank %d (host %s) finished collective call #%u, %s, without sending "
                         "rank %d the message it waits for: ranks ran different algorithms",
                         peer, comm_peer_host(c, peer), r->seq, comm_call_sig_str(&c->call, a, sizeof a),
                         c->rank);
    return util_fail(AI_ERR_PROTO,
                     "rank %d (host %s) is in collective call #%u (%s) while rank %d is in #%u "
                     "(%s): ranks issued different collectives",
                     peer, comm_peer_host(c, peer), seq, comm_call_sig_str(theirs, a, sizeof a), c->rank,
                     r->seq, comm_call_sig_str(&c->call, b, sizeof b));
}

static ai_status_t hdr_check(const ai_comm *c, const comm_req *r, int k)
{
    uint32_t magic, seq;
    uint64_t len;
    comm_call_sig theirs, their_prev;
    memcpy(&magic, r->hdr[k], 4);
    memcpy(&seq, r->hdr[k] + 4, 4);
    memcpy(&len, r->hdr[k] + 8, 8);
    memcpy(&theirs, r->hdr[k] + 16, sizeof theirs);
    memcpy(&their_prev, r->hdr[k] + 32, sizeof their_prev);
    if (magic != COMM_MSG_MAGIC)
        return util_fail(AI_ERR_PROTO, "malformed frame from rank %d (host %s): bad magic 0x%08x",
                         r->peer, comm_peer_host(c, r->peer), magic);
    if (seq != r->seq && (seq == COMM_SEQ_P2P || r->seq == COMM_SEQ_P2P))
        return util_fail(AI_ERR_PROTO,
                         "rank %d (host %s) sent a %s where this rank expects a %s: ranks issued "
                         "different operations", r->peer, comm_peer_host(c, r->peer),
                         seq == COMM_SEQ_P2P ? "point-to-point message" : "collective's message",
                         seq == COMM_SEQ_P2P ? "collective's message" : "point-to-point message");
    if (seq != r->seq)
        return late_error(c, r, seq, &theirs, &their_prev);
    if (seq != COMM_SEQ_P2P && memcmp(&theirs, &c->call, sizeof theirs) != 0)
        return comm_call_mismatch(c, r->peer, comm_peer_host(c, r->peer), seq, &theirs,
                                  "message header");
    if (len != comm_chan_len(r, k))
        return util_fail(AI_ERR_PROTO,
                         "rank %d (host %s) sent %llu bytes where %zu were expected: "
                         "collective arguments (count, type, root or algorithm) differ between ranks",
                         r->peer, comm_peer_host(c, r->peer), (unsigned long long)len, comm_chan_len(r, k));
    return AI_OK;
}

const unsigned char *comm_frame_tx(const comm_req *r, int k, size_t pos, size_t *n)
{
    size_t len = comm_chan_len(r, k);
    if (pos < COMM_HDR_BYTES) {
        *n = COMM_HDR_BYTES - pos;
        return r->hdr[k] + pos;
    }
    if (pos < COMM_HDR_BYTES + len) {
        *n = COMM_HDR_BYTES + len - pos;
        return (const unsigned char *)r->sbuf + r->chan_off[k] + (pos - COMM_HDR_BYTES);
    }
    *n = comm_chan_total(r, k) - pos;
    return zero_pad;
}

size_t comm_frame_rx(const ai_comm *c, comm_req *r, int k, const unsigned char *p, size_t n,
                     ai_status_t *st)
{
    size_t len = comm_chan_len(r, k), total = comm_chan_total(r, k);
    size_t pos = r->chan_done[k], used = 0;
    while (used < n && pos < total) {
        size_t m;
        if (pos < COMM_HDR_BYTES) {
            m = AI_MIN(COMM_HDR_BYTES - pos, n - used);
            memcpy(r->hdr[k] + pos, p + used, m);
            if (pos + m == COMM_HDR_BYTES && (*st = hdr_check(c, r, k)) != AI_OK)
                return used;
        } else if (pos < COMM_HDR_BYTES + len) {
            m = AI_MIN(COMM_HDR_BYTES + len - pos, n - used);
            size_t off = r->chan_off[k] + (pos - COMM_HDR_BYTES);
            if (r->kind == COMM_REQ_RECV) {
                memcpy((unsigned char *)r->rbuf + off, p + used, m);
            } else {
                size_t es = ai_dtype_size(r->dt);
                m -= m % es;
                if (m == 0)
                    break;
                comm_reduce_local((unsigned char *)r->rbuf + off,
                                  (const unsigned char *)r->src + off, p + used, m / es, r->dt,
                                  r->op);
            }
        } else {
            m = AI_MIN(total - pos, n - used);
        }
        pos += m;
        used += m;
    }
    r->chan_done[k] = pos;
    return used;
}

/* ---------------------------------------------------------- transports */

/* Setup order, fallback first (transport.h): adding a transport is its
 * file and a line here. */
const comm_transport_ops *const comm_transports[] = {
    &comm_tcp_ops,
    &comm_shm_ops,
};
const int comm_ntransports = (int)AI_ARRAY_LEN(comm_transports);

ai_status_t comm_transports_setup(ai_comm *c)
{
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &c->tp->peers[j];
        p->ops = NULL;
        p->kind = CHAN_NONE;
        for (int t = comm_ntransports - 1; j != c->rank && t >= 0 && !p->ops; t--)
            if (comm_transports[t]->reaches(c, j))
                p->ops = comm_transports[t];
        if (p->ops)
            p->kind = p->ops->kind;
        else if (j != c->rank)
            return util_fail(AI_ERR_INVALID, "no transport reaches rank %d (host %s)", j, p->host);
    }
    for (int t = 0; t < comm_ntransports; t++) {
        ai_status_t st = comm_transports[t]->setup(c);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

void comm_transports_close(ai_comm *c)
{
    for (int t = 0; t < comm_ntransports; t++)
        comm_transports[t]->close(c);
}

/* ---------------------------------------------------------------- self */

/* A message to oneself is matched with the earliest pending self-send in
 * the same wait (posting both in one wait is the contract). */
static ai_status_t self_rx(ai_comm *c, comm_req *reqs, int n, comm_req *r)
{
    for (int i = 0; i < n; i++) {
        comm_req *s = &reqs[i];
        if (s->kind != COMM_REQ_SEND || s->peer != c->rank || s->done)
            continue;
        if (s->bytes != r->bytes)
            return util_fail(AI_ERR_PROTO, "message to self of %zu bytes received as %zu bytes",
                             s->bytes, r->bytes);
        if (r->kind == COMM_REQ_RECV)
            memmove(r->rbuf, s->sbuf, r->bytes);
        else
            comm_reduce_local(r->rbuf, r->src, s->sbuf, r->bytes / ai_dtype_size(r->dt), r->dt,
                              r->op);
        s->done = r->done = 1;
        return AI_OK;
    }
    return util_fail(AI_ERR_INVALID, "receive from self without a matching send in the same wait");
}

/* ------------------------------------------------------------ progress */

static ai_status_t req_progress(ai_comm *c, comm_req *r, int *moved)
{
    comm_peer *p = &c->tp->peers[r->peer];
    int is_send = r->kind == COMM_REQ_SEND;
    if (!r->started) {
        if (is_send)
            for (int k = 0; k < r->nchan; k++)
                hdr_build(c, r, k);
        r->started = 1;
    }
    int all = 1;
    for (int k = 0; k < r->nchan; k++) {
        if (r->chan_done[k] == comm_chan_total(r, k))
            continue;
        ai_status_t st = is_send ? p->ops->send(c, r, k, &p->tx[k], moved)
                                 : p->ops->recv(c, r, k, &p->rx[k], moved);
        if (st != AI_OK)
            return st;
        if (r->chan_done[k] != comm_chan_total(r, k))
            all = 0;
    }
    r->done = all;
    return AI_OK;
}

int comm_proc_is_dead(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    /* State field follows "comm)": Z zombie, X dead. */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/*
 * A rank of a mismatched call may wait for a message that never comes
 * (its peer, in another collective or with another root, sends elsewhere)
 * while a message of that other call sits unread in its queue from a third
 * rank. So, while a collective waits, the liveness check also reads the
 * headers waiting at the front of idle streams (no receive posted) and
 * the shared-memory slot descriptions: one of this call's number with a
 * different description is the same mismatch the receiver would find.
 */
ai_status_t comm_peek_calls(ai_comm *c)
{
    struct comm_transport *tp = c->tp;
    if (!c->in_call || !tp)
        return AI_OK;
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &tp->peers[j];
        unsigned char h[COMM_HDR_BYTES];
        uint32_t magic, seq;
        comm_call_sig theirs;
        if (j == c->rank || !p->ops || p->rx_posted != p->rx_next || !p->ops->peek(p, h))
            continue;
        memcpy(&magic, h, 4);
        memcpy(&seq, h + 4, 4);
        memcpy(&theirs, h + 16, sizeof theirs);
        if (magic == COMM_MSG_MAGIC && seq == c->call_seq &&
            memcmp(&theirs, &c->call, sizeof theirs) != 0)
            return comm_call_mismatch(c, j, p->host, seq, &theirs, "a message waiting unread");
    }
    return comm_shm_peek_slots(c);
}

static ai_status_t check_peers(ai_comm *c, comm_req *reqs, int n)
{
    struct comm_transport *tp = c->tp;
    ai_status_t st = comm_ctl_check(c); /* notices: this host's and every peer's */
    if (st != AI_OK)
        return st;
    if ((st = comm_peek_calls(c)) != AI_OK)
        return st;
    for (int i = 0; i < n; i++) {
        comm_peer *p = &tp->peers[reqs[i].peer];
        if (!reqs[i].done && p->ops && p->ops->check &&
            (st = p->ops->check(c, reqs[i].peer)) != AI_OK)
            return st;
    }
    return AI_OK;
}

static ai_status_t timeout_error(ai_comm *c, comm_req *reqs, int n, double idle)
{
    comm_waited w[64];
    int nw = 0;
    for (int i = 0; i < n && nw < (int)AI_ARRAY_LEN(w); i++)
        if (!reqs[i].done)
            w[nw++] = (comm_waited){reqs[i].peer,
                                    reqs[i].kind == COMM_REQ_SEND ? "send to" : "receive from"};
    return comm_stall_error(c, w, nw, idle);
}

void comm_set_block_waits(ai_comm *c, int block)
{
    if (c->tp)
        atomic_store_explicit(&c->tp->block_waits, block != 0, memory_order_relaxed);
}

void comm_set_wait_hook(ai_comm *c, void (*fn)(void *arg), void *arg)
{
    c->wait_hook = fn;
    c->wait_hook_arg = fn ? arg : NULL;
}

/* The wait hook of a wait idle past its spin phase: run it, if any. */
static void run_wait_hook(ai_comm *c)
{
    if (c->wait_hook)
        c->wait_hook(c->wait_hook_arg);
}

/* Block in poll() on the polled channels (rings_bell 0) of pending
 * requests, briefly. */
static void poll_pending(ai_comm *c, comm_req *reqs, int n, int only_polled, int max_ms)
{
    struct pollfd fds[64];
    nfds_t nf = 0;
    for (int i = 0; i < n; i++) {
        comm_req *r = &reqs[i];
        comm_peer *p = &c->tp->peers[r->peer];
        if (r->done || !p->ops || p->ops->rings_bell)
            continue;
        int is_send = r->kind == COMM_REQ_SEND;
        for (int k = 0; k < r->nchan && nf < AI_ARRAY_LEN(fds); k++)
            if (r->chan_done[k] != comm_chan_total(r, k)) {
                fds[nf].fd = p->ops->poll_fd(is_send ? &p->tx[k] : &p->rx[k]);
                fds[nf].events = is_send ? POLLOUT : POLLIN;
                fds[nf].revents = 0;
                nf++;
            }
    }
    if (nf)
        (void)poll(fds, nf, only_polled ? AI_MIN(c->wait_hook ? 1 : 10, max_ms) : 0);
    if (!only_polled || !nf)
        sched_yield();
}

/* ------------------------------------------------------------ waiting */

static void futex_wait(_Atomic uint32_t *word, uint32_t expect, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    /* Shared (not FUTEX_PRIVATE): the word is in memory other processes map. */
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expect, &ts, NULL, 0);
}

/* The waker's half of the handshake with comm_idle_step: the move (a ring
 * index, a slot flag) is stored before the fence, `sleeping` read after it;
 * the sleeper sets `sleeping`, fences, then looks at the moves again before
 * it blocks. So either the waker sees `sleeping` and wakes it, or the
 * sleeper's last look sees the move: no wake-up is lost. */
void comm_bell_ring(shm_bell *b)
{
    if (!b)
        return;
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleeping, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&b->seq, 1, memory_order_relaxed);
        (void)syscall(SYS_futex, (uint32_t *)&b->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
}

static shm_bell *my_bell(const ai_comm *c)
{
    return c->tp && c->tp->bells ? &c->tp->bells[c->local_rank] : NULL;
}

void comm_idle_reset(ai_comm *c, comm_idle *w)
{
    if (w->armed)
        atomic_store_explicit(&my_bell(c)->sleeping, 0, memory_order_relaxed);
    w->armed = 0;
    w->passes = 0;
}

ai_status_t comm_idle_step(ai_comm *c, comm_idle *w, const comm_idle_ops *ops, void *ctx)
{
    struct comm_transport *tp = c->tp;
    if (w->passes++ == 0) {
        w->since = w->last_check = ai_now();
        return AI_OK;
    }
    if (w->passes < tp->spin_passes)
        return AI_OK;
    run_wait_hook(c);
    double now = ai_now();
    /* The host's abort flag is one load: looked at every pass, so a
     * revoke or abort here (which rings every doorbell) ends the wait at
     * once; the rest of the liveness check every LIVENESS_PERIOD_S. */
    int flagged = tp->shm && atomic_load_explicit(&tp->shm->abort_rank, memory_order_acquire) > 0;
    if (flagged || now - w->last_check > LIVENESS_PERIOD_S) {
        w->last_check = now;
        ai_status_t st = ops->check(c, ctx);
        if (st != AI_OK)
            return comm_abort(c, st);
    }
    if (now - w->since > c->timeout_s)
        return comm_abort(c, ops->expired(c, ctx, now - w->since));
    shm_bell *me = my_bell(c);
    int mode = atomic_load_explicit(&tp->block_waits, memory_order_relaxed);
    if (!me || now - w->since < tp->yield_s[mode]) {
        sched_yield();
        return AI_OK;
    }
    if (!w->armed) {
        /* Announce the sleep, then make one more pass before blocking:
         * a move made before the announcement showed is seen there. */
        atomic_store_explicit(&me->sleeping, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        w->seq = atomic_load_explicit(&me->seq, memory_order_relaxed);
        w->armed = 1;
        return AI_OK;
    }
    /* With a hook, block briefly: it must run at least every millisecond. */
    int block = w->block_ms > 0 ? AI_MIN(w->block_ms, COMM_BLOCK_MS) : COMM_BLOCK_MS;
    futex_wait(&me->seq, w->seq, c->wait_hook ? 1 : block);
    atomic_store_explicit(&me->sleeping, 0, memory_order_relaxed);
    w->armed = 0;
    return AI_OK;
}

typedef struct wait_ctx {
    comm_req *reqs;
    int n;
} wait_ctx;

static ai_status_t wait_check(ai_comm *c, void *ctx)
{
    wait_ctx *w = ctx;
    return check_peers(c, w->reqs, w->n);
}

static ai_status_t wait_expired(ai_comm *c, void *ctx, double idle)
{
    wait_ctx *w = ctx;
    return timeout_error(c, w->reqs, w->n, idle);
}

static const comm_idle_ops wait_ops = {wait_check, wait_expired};

/* until 0: wait until every request is done. Otherwise also return AI_OK
 * once one completed or until passed (ai_now() seconds), and *moved_at
 * holds when the requests last moved, across calls: the timeout counts
 * from there. */
static ai_status_t wait_requests(ai_comm *c, comm_req *reqs, int n, comm_idle *w, double until,
                                 double *moved_at);

ai_status_t comm_wait(ai_comm *c, comm_req *reqs, int n)
{
    comm_idle w = {0};
    ai_status_t st = wait_requests(c, reqs, n, &w, 0, NULL);
    comm_idle_reset(c, &w);
    return st;
}

ai_status_t comm_wait_some(ai_comm *c, comm_req *reqs, int n, double until, double *moved_at)
{
    comm_idle w = {0};
    ai_status_t st = wait_requests(c, reqs, n, &w, until, moved_at);
    comm_idle_reset(c, &w);
    return st;
}

static ai_status_t wait_requests(ai_comm *c, comm_req *reqs, int n, comm_idle *w, double until,
                                 double *moved_at)
{
    if (c->state != AI_OK)
        return comm_state_error(c, "wait");
    struct comm_transport *tp = c->tp;
    double idle_since = 0, last_check = 0;
    int idle = 0;
    wait_ctx ctx = {reqs, n};
    for (;;) {
        int pending = 0, moved = 0, polled_only = 1, polled_pending = 0, completed = 0;
        for (int i = 0; i < n; i++) {
            comm_req *r = &reqs[i];
            if (r->done)
                continue;
            if (r->peer < 0 || r->peer >= c->size)
                return comm_abort(c, util_fail(AI_ERR_INVALID, "request to rank %d of %d", r->peer, c->size));
            ai_status_t st = AI_OK;
            comm_peer *p = &tp->peers[r->peer];
            if (r->peer == c->rank) {
                if (r->kind != COMM_REQ_SEND)
                    st = self_rx(c, reqs, n, r);
                else
                    pending++; /* completed by its receive */
                if (st != AI_OK)
                    return comm_abort(c, st);
                continue;
            }
            /* Not its turn yet: an earlier-posted request to this peer in
             * this direction is still moving. */
            uint64_t *next = r->kind == COMM_REQ_SEND ? &p->tx_next : &p->rx_next;
            polled_pending |= !p->ops->rings_bell;
            if (r->qpos != *next) {
                pending++;
                continue;
            }
            st = req_progress(c, r, &moved);
            if (st != AI_OK)
                return comm_abort(c, st);
            if (r->done) {
                (*next)++;
                completed = 1;
                if (r->stamp)
                    r->t_done = ai_now();
            } else {
                pending++;
                if (p->ops->rings_bell)
                    polled_only = 0;
            }
        }
        if (!pending)
            return AI_OK;
        double now = 0;
        if (until > 0) {
            now = ai_now();
            if (moved)
                *moved_at = now;
            if (completed || now >= until)
                return AI_OK;
            /* Block no longer than until leaves. */
            w->block_ms = AI_MAX(1, (int)((until - now) * 1e3));
        }
        if (moved) {
            idle = 0;
            comm_idle_reset(c, w);
            continue;
        }
        if (!polled_pending) { /* doorbell transports only: spin, yield, block */
            ai_status_t st = comm_idle_step(c, w, &wait_ops, &ctx);
            if (moved_at)
                w->since = *moved_at;
            if (st != AI_OK)
                return st;
            continue;
        }
        /* Spinning on shared memory is a few loads a pass; on a socket it
         * is a system call a pass, so waits on polled channels only go to
         * poll() at once. */
        int spin = polled_only ? 1 : tp->spin_passes;
        if (idle == 0) {
            idle_since = last_check = ai_now();
            if (moved_at)
                idle_since = *moved_at;
        } else if (idle >= spin) {
            now = ai_now();
            if (now - last_check > LIVENESS_PERIOD_S) {
                last_check = now;
                ai_status_t st = check_peers(c, reqs, n);
                if (st != AI_OK)
                    return comm_abort(c, st);
            }
            if (now - idle_since > c->timeout_s)
                return comm_abort(c, timeout_error(c, reqs, n, now - idle_since));
        }
        idle++;
        if (idle < spin)
            continue;
        run_wait_hook(c);
        if (now - idle_since > 1.0)
            util_sleep_us(100); /* a long wait: stop burning a core */
        else if (polled_only &&
                 now - idle_since <
                     tp->tcp_spin_s[atomic_load_explicit(&tp->block_waits, memory_order_relaxed)])
            sched_yield();
        else
            poll_pending(c, reqs, n, polled_only, until > 0 ? w->block_ms : 10);
    }
}

/* ------------------------------------------------- receive from any rank */

int comm_p2p_arrived(ai_comm *c, int start)
{
    struct comm_transport *tp = c->tp;
    if (!tp || c->size < 2)
        return -1;
    for (int i = 0; i < c->size; i++) {
        int j = ((start % c->size) + c->size + i) % c->size;
        comm_peer *p = &tp->peers[j];
        unsigned char h[COMM_HDR_BYTES];
        uint32_t magic, seq;
        if (j == c->rank || !p->ops || p->rx_posted != p->rx_next || !p->ops->peek(p, h))
            continue;
        memcpy(&magic, h, 4);
        memcpy(&seq, h + 4, 4);
        if (magic == COMM_MSG_MAGIC && seq == COMM_SEQ_P2P)
            return j;
    }
    return -1;
}

/* Liveness while waiting on no peer in particular: the notices and every
 * peer's transport check. */
static ai_status_t check_all_peers(ai_comm *c)
{
    ai_status_t st = comm_ctl_check(c);
    for (int j = 0; j < c->size && st == AI_OK; j++) {
        comm_peer *p = &c->tp->peers[j];
        if (j != c->rank && p->ops && p->ops->check)
            st = p->ops->check(c, j);
    }
    return st;
}

ai_status_t comm_p2p_wait_arrival(ai_comm *c, double until, double since, double *last_check)
{
    if (c->state != AI_OK)
        return comm_state_error(c, "wait");
    double start = ai_now();
    for (;;) {
        if (comm_p2p_arrived(c, 0) >= 0)
            return AI_OK;
        double now = ai_now();
        if (now - *last_check > LIVENESS_PERIOD_S) {
            *last_check = now;
            ai_status_t st = check_all_peers(c);
            if (st != AI_OK)
                return comm_abort(c, st);
        }
        if (now - since > c->timeout_s)
            return comm_abort(c, util_fail(AI_ERR_TIMEOUT,
                                           "rank %d: receive from any rank: no message arrived "
                                           "in %.1f s (the communicator's timeout)",
                                           c->rank, now - since));
        if (now >= until)
            return AI_OK;
        /* Scanning costs a load (shared memory) or a system call (TCP) a
         * peer: yield the core for a millisecond, then sleep between scans. */
        if (now - start < 1e-3) {
            sched_yield();
        } else {
            run_wait_hook(c);
            util_sleep_us(100);
        }
    }
}

/* ------------------------------------------------------- conveniences */

ai_status_t comm_send(ai_comm *c, int peer, const void *buf, size_t bytes)
{
    comm_req r;
    comm_isend(c, &r, peer, buf, bytes);
    return comm_wait(c, &r, 1);
}

ai_status_t comm_recv(ai_comm *c, int peer, void *buf, size_t bytes)
{
    comm_req r;
    comm_irecv(c, &r, peer, buf, bytes);
    return comm_wait(c, &r, 1);
}

ai_status_t comm_sendrecv(ai_comm *c, int to, const void *sbuf, size_t sbytes, int from,
                          void *rbuf, size_t rbytes)
{
    comm_req r[2];
    comm_isend(c, &r[0], to, sbuf, sbytes);
    comm_irecv(c, &r[1], from, rbuf, rbytes);
    return comm_wait(c, r, 2);
}

ai_status_t comm_sendrecv_reduce(ai_comm *c, int to, const void *sbuf, size_t sbytes, int from,
                                 void *dst, const void *src, size_t count, ai_dtype dt, ai_op op)
{
    comm_req r[2];
    comm_isend(c, &r[0], to, sbuf, sbytes);
    comm_irecv_reduce(c, &r[1], from, dst, src, count, dt, op);
    return comm_wait(c, r, 2);
}

ai_status_t comm_state_error(const ai_comm *c, const char *what)
{
    if (c->state == AI_ERR_REVOKED)
        return util_fail(AI_ERR_REVOKED, "%s: communicator revoked (%s)", what, c->failure);
    return util_fail(AI_ERR_ABORTED, "%s: communicator failed earlier (%s)", what,
                     c->failure[0] ? c->failure : ai_strerror(c->state));
}

ai_status_t comm_usable(ai_comm *c, const char *what)
{
    if (c->state != AI_OK)
        return comm_state_error(c, what);
    comm_shm_header *h = c->tp ? c->tp->shm : NULL;
    if (h && atomic_load_explicit(&h->abort_rank, memory_order_acquire) > 0) {
        ai_status_t st = comm_ctl_check(c);
        if (st != AI_OK)
            return comm_abort(c, st);
    }
    return AI_OK;
}

ai_status_t comm_abort(ai_comm *c, ai_status_t status)
{
    if (c->state != AI_OK)
        return status;
    c->state = status;
    snprintf(c->failure, sizeof c->failure, "%s", ai_last_error());
    struct comm_transport *tp = c->tp;
    if (!tp)
        return status;
    /* A revoke, this rank's own or adopted, travels on as a revoke: every
     * rank that hears of it fails with AI_ERR_REVOKED and tells the others
     * (a flood, so it reaches everyone even if the revoking rank dies). */
    int revoked = status == AI_ERR_REVOKED || tp->abort_revoked;
    /* Tell everyone who failed first and how: a rank that learned it from
     * a peer passes the original on; one that found it names the peer its
     * error blamed (or itself). */
    int32_t origin = tp->abort_origin >= 0 ? tp->abort_origin : tp->blame >= 0 ? tp->blame : c->rank;
    const char *reason = tp->abort_origin >= 0 ? tp->abort_reason : c->failure;
    if (tp->shm) {
        /* The first rank to abort says why (the peer it lost), so that the
         * ranks it tells can name the cause and not only the messenger. */
        int32_t expected = 0;
        if (atomic_compare_exchange_strong(&tp->shm->abort_rank, &expected, -1)) {
            tp->shm->abort_origin = origin;
            tp->shm->abort_revoked = revoked;
            snprintf(tp->shm->abort_reason, sizeof tp->shm->abort_reason, "%s", reason);
            atomic_store_explicit(&tp->shm->abort_rank, c->rank + 1, memory_order_release);
            for (int k = 0; tp->bells && k < c->local_size; k++)
                if (k != c->local_rank)
                    comm_bell_ring(&tp->bells[k]); /* sleepers look at the flag now */
        }
    }
    unsigned char notice[COMM_WIRE_ABORT_HDR + COMM_WIRE_ABORT_REASON_MAX];
    size_t len = comm_wire_abort_pack(notice, origin, revoked, reason);
    /* The notice goes out before the data connections close: a peer that
     * sees them close finds it waiting. Then shut TCP connections down so
     * peers blocked on us fail now instead of at their timeout. Every
     * peer gets it, on this host too: one blocked on a third rank sees it
     * at its next liveness check (comm_ctl_check). */
    for (int i = 0; i < c->size; i++)
        if (tp->peers[i].ctl_fd >= 0 && !tp->peers[i].ctl_dead)
            (void)!send(tp->peers[i].ctl_fd, notice, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    for (int i = 0; i < c->size; i++)
        if (tp->peers[i].ops && tp->peers[i].ops->stop)
            tp->peers[i].ops->stop(&tp->peers[i]);
    return status;
}
