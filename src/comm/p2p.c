/*
 * Point-to-point calls of the public API: single messages between two
 * ranks over the same streams the collectives use. A point-to-point
 * message carries the sequence COMM_SEQ_P2P instead of a collective call
 * number (only two ranks take part, so the call count must not move), and
 * the receiver checks it, so a message meeting a collective on the other
 * side fails by name instead of being taken for the collective's data.
 */
#include "comm/transport/transport.h"

static ai_status_t check(ai_comm *c, const char *what, int peer, const void *buf,
                         size_t bytes)
{
    if (!c)
        return ai_fail(AI_ERR_INVALID, "%s: communicator is NULL", what);
    ai_status_t st = comm_usable(c, what);
    if (st != AI_OK)
        return st;
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return ai_fail(AI_ERR_INVALID, "%s: peer %d is not another rank (rank %d of %d)", what,
                       peer, c->rank, c->size);
    if (bytes > 0 && !buf)
        return ai_fail(AI_ERR_INVALID, "%s: buffer is NULL with %zu bytes", what, bytes);
    return AI_OK;
}

static ai_status_t finish(ai_comm *c, comm_req *r, int n, const char *what, int to, int from)
{
    for (int i = 0; i < n; i++)
        r[i].seq = COMM_SEQ_P2P;
    ai_status_t st = comm_wait(c, r, n);
    if (st != AI_OK && to >= 0 && from >= 0)
        return ai_fail_prefix(st, "rank %d: %s (to rank %d, from rank %d)", c->rank, what, to, from);
    if (st != AI_OK)
        return ai_fail_prefix(st, "rank %d: %s %s rank %d", c->rank, what, to >= 0 ? "to" : "from",
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
