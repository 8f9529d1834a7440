/*
 * Point-to-point calls of the public API: single messages between two
 * ranks over the same streams the collectives use. A point-to-point
 * message carries the sequence COMM_SEQ_P2P instead of a collective call
 * number (only two ranks take part, so the call count must not move), and
 * the receiver checks it, so a message meeting a collective on the other
 * side fails by name instead of being taken for the collective's data.
 */
#include "comm/comm.h"

#include <stdlib.h>

static ai_status_t check(ai_comm *c, const char *what, int peer, const void *buf,
                         size_t bytes)
{
    if (!c)
        return util_fail(AI_ERR_INVALID, "%s: communicator is NULL", what);
    ai_status_t st = comm_usable(c, what);
    if (st != AI_OK)
        return st;
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return util_fail(AI_ERR_INVALID, "%s: peer %d is not another rank (rank %d of %d)", what,
                         peer, c->rank, c->size);
    if (bytes > 0 && !buf)
        return util_fail(AI_ERR_INVALID, "%s: buffer is NULL with %zu bytes", what, bytes);
    return AI_OK;
}

static ai_status_t finish(ai_comm *c, comm_req *r, int n, const char *what, int to, int from)
{
    for (int i = 0; i < n; i++)
        r[i].seq = COMM_SEQ_P2P;
    ai_status_t st = comm_wait(c, r, n);
    if (st != AI_OK && to >= 0 && from >= 0)
        return util_fail_prefix(st, "rank %d: %s (to rank %d, from rank %d)", c->rank, what, to, from);
    if (st != AI_OK)
        return util_fail_prefix(st, "rank %d: %s %s rank %d", c->rank, what, to >= 0 ? "to" : "from",
                                to >= 0 ? to : from);
    return AI_OK;
}

ai_status_t ai_send(ai_comm *comm, int peer, const void *buf, size_t bytes)
{
    ai_status_t st = check(comm, "send", peer, buf, bytes);
    if (st != AI_OK)
        return st;
    comm_req r;
    comm_isend(comm, &r, peer, buf, bytes);
    return finish(comm, &r, 1, "send", peer, -1);
}

ai_status_t ai_recv(ai_comm *comm, int peer, void *buf, size_t bytes)
{
    ai_status_t st = check(comm, "recv", peer, buf, bytes);
    if (st != AI_OK)
        return st;
    comm_req r;
    comm_irecv(comm, &r, peer, buf, bytes);
    return finish(comm, &r, 1, "recv", -1, peer);
}

ai_status_t ai_sendrecv(ai_comm *comm, int to, const void *sendbuf, size_t sbytes, int from,
                        void *recvbuf, size_t rbytes)
{
    ai_status_t st;
    if ((st = check(comm, "sendrecv", to, sendbuf, sbytes)) != AI_OK ||
        (st = check(comm, "sendrecv", from, recvbuf, rbytes)) != AI_OK)
        return st;
    comm_req r[2];
    comm_isend(comm, &r[0], to, sendbuf, sbytes);
    comm_irecv(comm, &r[1], from, recvbuf, rbytes);
    return finish(comm, r, 2, "sendrecv", to, from);
}

/* ------------------------------------------------------------ nonblocking */

/* A request. One of ai_irecv_any is posted without a peer (r.peer -1, not
 * yet in any peer's queue) and is bound, in ai_p2p_progress, to the first
 * peer whose stream shows a point-to-point message that no receive claims
 * (comm_p2p_arrived): from then on it is an ordinary receive from that
 * peer. */
struct ai_p2p {
    comm_req r;
    ai_comm *comm;
    double moved_at; /* ai_now() of posting or of the last move */
    int any;         /* posted by ai_irecv_any */
    void *any_buf;   /* its buffer and size until bound */
    size_t any_bytes;
};

static int unbound(const ai_p2p *p) { return p->any && p->r.peer < 0; }

static ai_status_t post(ai_comm *comm, int send, int peer, void *buf, size_t bytes,
                        ai_p2p **req)
{
    const char *what = send ? "isend" : "irecv";
    if (!req)
        return util_fail(AI_ERR_INVALID, "%s: req is NULL", what);
    *req = NULL;
    ai_status_t st = check(comm, what, peer, buf, bytes);
    if (st != AI_OK)
        return st;
    ai_p2p *p = calloc(1, sizeof *p);
    if (!p)
        return util_fail(AI_ERR_NOMEM, "%s: out of memory", what);
    if (send)
        comm_isend(comm, &p->r, peer, buf, bytes);
    else
        comm_irecv(comm, &p->r, peer, buf, bytes);
    p->r.seq = COMM_SEQ_P2P;
    p->comm = comm;
    p->moved_at = ai_now();
    *req = p;
    return AI_OK;
}

ai_status_t ai_isend(ai_comm *comm, int peer, const void *buf, size_t bytes, ai_p2p **req)
{
    return post(comm, 1, peer, (void *)(uintptr_t)buf, bytes, req);
}

ai_status_t ai_irecv(ai_comm *comm, int peer, void *buf, size_t bytes, ai_p2p **req)
{
    return post(comm, 0, peer, buf, bytes, req);
}

ai_status_t ai_irecv_any(ai_comm *comm, void *buf, size_t bytes, ai_p2p **req)
{
    if (!req)
        return util_fail(AI_ERR_INVALID, "irecv_any: req is NULL");
    *req = NULL;
    if (!comm)
        return util_fail(AI_ERR_INVALID, "irecv_any: communicator is NULL");
    ai_status_t st = comm_usable(comm, "irecv_any");
    if (st != AI_OK)
        return st;
    if (comm->size < 2)
        return util_fail(AI_ERR_INVALID, "irecv_any: the communicator has no other rank");
    /* A message of no bytes is never sent (engine.h), so nothing could
     * name its sender. */
    if (bytes == 0)
        return util_fail(AI_ERR_INVALID, "irecv_any: a receive from any rank needs at least one "
                         "byte (messages of 0 bytes are not sent, so no sender can be matched)");
    if (!buf)
        return util_fail(AI_ERR_INVALID, "irecv_any: buffer is NULL with %zu bytes", bytes);
    ai_p2p *p = calloc(1, sizeof *p);
    if (!p)
        return util_fail(AI_ERR_NOMEM, "irecv_any: out of memory");
    p->r.kind = COMM_REQ_RECV;
    p->r.peer = -1;
    p->r.rbuf = buf;
    p->r.bytes = bytes;
    p->comm = comm;
    p->moved_at = ai_now();
    p->any = 1;
    p->any_buf = buf;
    p->any_bytes = bytes;
    *req = p;
    return AI_OK;
}

int ai_p2p_done(const ai_p2p *req) { return req && req->r.done; }

int ai_p2p_source(const ai_p2p *req)
{
    if (!req || req->r.kind == COMM_REQ_SEND)
        return -1;
    return req->r.peer;
}

void ai_p2p_free(ai_p2p *req) { free(req); }

/* Bind the unbound any-source receives of reqs, in their order, each to
 * the next peer whose point-to-point message waits unclaimed. Returns how
 * many were bound. */
static int bind_any(ai_comm *comm, ai_p2p *const *reqs, int n)
{
    int bound = 0, start = comm->rank + 1;
    for (int i = 0; i < n; i++) {
        ai_p2p *p = reqs[i];
        if (!unbound(p))
            continue;
        int peer = comm_p2p_arrived(comm, start);
        if (peer < 0)
            break;
        comm_irecv(comm, &p->r, peer, p->any_buf, p->any_bytes);
        p->r.seq = COMM_SEQ_P2P;
        p->moved_at = ai_now();
        start = peer + 1; /* the next one looks at the others first */
        bound++;
    }
    return bound;
}

/* The engine waits on an array of requests: the pending ones are copied
 * in and back (a few hundred bytes each), on the stack for up to
 * P2P_BATCH of them, else in a buffer of their own. */
#define P2P_BATCH 16

/* Move the bound pending requests of reqs until one completes, all are
 * done, or until passed (*completed: one did). */
static ai_status_t progress_bound(ai_comm *comm, ai_p2p *const *reqs, int n, double until,
                                  int *completed)
{
    ai_status_t st = AI_OK;
    int pending = 0;
    *completed = 0;
    for (int i = 0; i < n; i++)
        pending += !reqs[i]->r.done && !unbound(reqs[i]);
    if (pending == 0)
        return AI_OK;
    comm_req stack_batch[P2P_BATCH], *batch = stack_batch;
    int stack_idx[P2P_BATCH], *idx = stack_idx, m = 0;
    if (pending > P2P_BATCH) {
        batch = malloc((size_t)pending * sizeof *batch);
        idx = malloc((size_t)pending * sizeof *idx);
        if (!batch || !idx) {
            free(batch);
            free(idx);
            return util_fail(AI_ERR_NOMEM, "p2p_progress: out of memory for %d requests", pending);
        }
    }
    double moved_at = 0;
    for (int i = 0; i < n; i++) {
        if (reqs[i]->r.done || unbound(reqs[i]))
            continue;
        idx[m] = i;
        batch[m++] = reqs[i]->r;
        moved_at = AI_MAX(moved_at, reqs[i]->moved_at);
    }
    st = comm_wait_some(comm, batch, m, until, &moved_at);
    for (int j = 0; j < m; j++) {
        *completed |= batch[j].done;
        reqs[idx[j]]->r = batch[j];
        reqs[idx[j]]->moved_at = moved_at;
    }
    if (st != AI_OK) {
        int k = idx[0];
        for (int j = 0; j < m; j++)
            if (!batch[j].done) {
                k = idx[j];
                break;
            }
        const comm_req *r = &reqs[k]->r;
        st = util_fail_prefix(st, "rank %d: %s %s rank %d", comm->rank,
                              r->kind == COMM_REQ_SEND ? "isend" : "irecv",
                              r->kind == COMM_REQ_SEND ? "to" : "from", r->peer);
    }
    if (batch != stack_batch) {
        free(batch);
        free(idx);
    }
    return st;
}

/* While a receive from any rank waits unbound, the bound requests move
 * in slices this long between looks at the streams for its message. */
#define ANY_SLICE_S 1e-3

ai_status_t ai_p2p_progress(ai_comm *comm, ai_p2p *const *reqs, int n, double max_wait_s,
                            int *ndone)
{
    if (ndone)
        *ndone = 0;
    if (!comm || (n > 0 && !reqs) || n < 0)
        return util_fail(AI_ERR_INVALID, "p2p_progress: communicator or requests NULL, or n < 0");
    ai_status_t st = comm_usable(comm, "p2p_progress");
    if (st != AI_OK)
        return st;
    for (int i = 0; i < n; i++)
        if (!reqs[i] || reqs[i]->comm != comm)
            return util_fail(AI_ERR_INVALID, "p2p_progress: request %d is NULL or of another "
                             "communicator", i);
    double until = ai_now() + AI_MAX(max_wait_s, 0.0), last_check = 0;
    for (;;) {
        bind_any(comm, reqs, n);
        double any_since = 0; /* the oldest unbound receive's posting */
        int waiting = 0, bound_pending = 0;
        for (int i = 0; i < n; i++) {
            if (unbound(reqs[i])) {
                any_since = waiting++ ? AI_MIN(any_since, reqs[i]->moved_at) : reqs[i]->moved_at;
            } else if (!reqs[i]->r.done) {
                bound_pending++;
            }
        }
        int completed = 0;
        if (!waiting) {
            st = progress_bound(comm, reqs, n, until, &completed);
            break;
        }
        double now = ai_now();
        if (bound_pending) {
            st = progress_bound(comm, reqs, n, AI_MIN(until, now + ANY_SLICE_S), &completed);
            /* Liveness and the unbound receive's timeout: one scan, no wait. */
            if (st == AI_OK)
                st = comm_p2p_wait_arrival(comm, 0, any_since, &last_check);
        } else {
            st = comm_p2p_wait_arrival(comm, until, any_since, &last_check);
        }
        if (st != AI_OK || completed || ai_now() >= until)
            break;
    }
    if (st != AI_OK)
        return st;
    if (ndone)
        for (int i = 0; i < n; i++)
            *ndone += reqs[i]->r.done;
    return AI_OK;
}
