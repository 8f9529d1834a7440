/*
 * The control connections: one TCP connection per pair of ranks, shared
 * memory pair or not, opened with the data mesh (tcp.c) and never shut
 * down by an abort, so that a failed or revoked communicator can still
 * tell its peers why (abort and revoke notices, wire.h) and still run the
 * survivors' agreement (comm/ft/).
 *
 * One reader for both: whatever a peer's connection has is appended to
 * that peer's buffer without blocking; a notice is taken out as soon as it
 * is complete, wherever it is (a revoke must not wait behind agreement
 * frames nobody reads yet); fault-tolerance frames stay, in order, until
 * the agreement consumes them. Bytes that are neither end the connection
 * as garbage (a trusted peer never sends them).
 */
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define CTL_READ 4096

static void ctl_fail(comm_peer *p)
{
    p->ctl_dead = 1;
}

/* Take complete notices out of the buffer; stop at the first incomplete
 * frame. Garbage marks the connection dead. */
static void ctl_scan(comm_peer *p)
{
    size_t at = 0;
    while (at < p->ctl_len) {
        const unsigned char *b = p->ctl_buf + at;
        size_t len = p->ctl_len - at, need = 0;
        if (len >= 3 && b[0] == 'A' && b[1] == 'I' && b[2] == 'F') {
            uint16_t kind;
            uint32_t body;
            if (comm_wire_ft_hdr_parse(b, len, &kind, &body, &need) != AI_OK) {
                ctl_fail(p);
                return;
            }
            if (need || len < COMM_WIRE_FT_HDR + (size_t)body)
                return;
            at += COMM_WIRE_FT_HDR + body;
            continue;
        }
        int32_t origin;
        int revoked;
        char reason[COMM_ABORT_REASON_MAX + 1];
        if (comm_wire_abort_parse(b, len, &origin, &revoked, reason, &need) != AI_OK) {
            ctl_fail(p);
            return;
        }
        if (need)
            return;
        size_t n = COMM_WIRE_ABORT_HDR + strlen(reason);
        if (!p->notice || (revoked && !p->notice_revoked)) {
            p->notice = 1;
            p->notice_revoked = revoked;
            p->notice_origin = origin;
            memcpy(p->notice_reason, reason, sizeof reason);
        }
        memmove(p->ctl_buf + at, p->ctl_buf + at + n, p->ctl_len - at - n);
        p->ctl_len -= n;
    }
}

/* Read what the connection has, without blocking, into the kept bytes;
 * its end (or an error) marks it dead. */
static ai_status_t ctl_read(comm_peer *p)
{
    for (;;) {
        if (p->ctl_cap - p->ctl_len < CTL_READ) {
            size_t cap = AI_MAX(p->ctl_cap * 2, p->ctl_len + CTL_READ);
            unsigned char *nb = realloc(p->ctl_buf, cap);
            if (!nb)
                return util_fail(AI_ERR_NOMEM, "control buffer");
            p->ctl_buf = nb;
            p->ctl_cap = cap;
        }
        ssize_t k = recv(p->ctl_fd, p->ctl_buf + p->ctl_len, p->ctl_cap - p->ctl_len, MSG_DONTWAIT);
        if (k > 0) {
            p->ctl_len += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            ctl_fail(p);
        return AI_OK;
    }
}

ai_status_t comm_ctl_pump(ai_comm *c, int peer)
{
    comm_peer *p = &c->tp->peers[peer];
    if (p->ctl_fd < 0 || p->ctl_dead)
        return AI_ERR_PEER;
    ai_status_t st = ctl_read(p);
    if (st != AI_OK)
        return st;
    ctl_scan(p);
    return p->ctl_dead ? AI_ERR_PEER : AI_OK;
}

void comm_ctl_drain(ai_comm *c, int peer)
{
    comm_peer *p = &c->tp->peers[peer];
    if (p->ctl_fd >= 0 && ctl_read(p) == AI_OK)
        ctl_scan(p);
}

ai_status_t comm_ctl_adopt(ai_comm *c, int32_t origin, const char *reason, int revoked, int via,
                           const char *how)
{
    struct comm_transport *tp = c->tp;
    if (origin < 0 || origin >= c->size)
        origin = via; /* a notice from a trusted peer, but keep names real */
    tp->abort_origin = origin;
    tp->abort_revoked = revoked;
    snprintf(tp->abort_reason, sizeof tp->abort_reason, "%s", reason);
    tp->blame = origin;
    if (revoked)
        return util_fail(AI_ERR_REVOKED, "rank %d (host %s) revoked the communicator: %s [rank %d %s]",
                         origin, tp->peers[origin].host, reason, via, how);
    return util_fail(AI_ERR_PEER, "rank %d (host %s) failed first: %s [rank %d %s]", origin,
                     tp->peers[origin].host, reason, via, how);
}

ai_status_t comm_ctl_check(ai_comm *c)
{
    struct comm_transport *tp = c->tp;
    if (tp->shm) {
        int who = atomic_load_explicit(&tp->shm->abort_rank, memory_order_acquire);
        if (who > 0 && who - 1 != c->rank) {
            char reason[COMM_ABORT_REASON_MAX + 1];
            memcpy(reason, tp->shm->abort_reason, sizeof reason);
            reason[COMM_ABORT_REASON_MAX] = '\0';
            return comm_ctl_adopt(c, tp->shm->abort_origin, reason, tp->shm->abort_revoked, who - 1,
                                  "on this host aborted because of it");
        }
    }
    struct pollfd fds[256];
    int who[256];
    nfds_t nf = 0;
    /* Only connections with something to read are pumped: one poll a
     * liveness check, whatever the number of peers (in slices of 256). */
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &tp->peers[j];
        if (p->ctl_fd >= 0 && !p->ctl_dead) {
            fds[nf] = (struct pollfd){.fd = p->ctl_fd, .events = POLLIN};
            who[nf++] = j;
        }
        if (nf == AI_ARRAY_LEN(fds) || (j == c->size - 1 && nf)) {
            (void)poll(fds, nf, 0);
            for (nfds_t i = 0; i < nf; i++)
                if (fds[i].revents)
                    (void)comm_ctl_pump(c, who[i]);
            nf = 0;
        }
    }
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &tp->peers[j];
        if (p->notice)
            return comm_ctl_adopt(c, p->notice_origin, p->notice_reason, p->notice_revoked, j,
                                  p->notice_revoked ? "passed the revoke on"
                                                    : "aborted because of it");
    }
    return AI_OK;
}

int comm_ctl_notice(ai_comm *c, int peer, double grace_s)
{
    comm_peer *p = &c->tp->peers[peer];
    double end = ai_now() + grace_s;
    for (;;) {
        ai_status_t st = comm_ctl_pump(c, peer);
        if (p->notice)
            return 1;
        int ms = (int)((end - ai_now()) * 1000);
        if (st != AI_OK || ms <= 0)
            return 0;
        struct pollfd pfd = {.fd = p->ctl_fd, .events = POLLIN};
        if (poll(&pfd, 1, ms) == 0)
            return 0;
    }
}

int comm_ctl_frame_at(ai_comm *c, int peer, size_t off, const unsigned char **frame, size_t *len)
{
    comm_peer *p = &c->tp->peers[peer];
    uint16_t kind;
    uint32_t body;
    size_t need, have = off < p->ctl_len ? p->ctl_len - off : 0;
    if (have < COMM_WIRE_FT_HDR ||
        comm_wire_ft_hdr_parse(p->ctl_buf + off, have, &kind, &body, &need) != AI_OK || need ||
        have < COMM_WIRE_FT_HDR + (size_t)body)
        return 0;
    *frame = p->ctl_buf + off;
    *len = COMM_WIRE_FT_HDR + body;
    return 1;
}

int comm_ctl_frame(ai_comm *c, int peer, const unsigned char **frame, size_t *len)
{
    return comm_ctl_frame_at(c, peer, 0, frame, len);
}

void comm_ctl_consume(ai_comm *c, int peer, size_t len)
{
    comm_peer *p = &c->tp->peers[peer];
    memmove(p->ctl_buf, p->ctl_buf + len, p->ctl_len - len);
    p->ctl_len -= len;
}

ai_status_t comm_ctl_send(ai_comm *c, int peer, const void *frame, size_t len, double deadline)
{
    comm_peer *p = &c->tp->peers[peer];
    if (p->ctl_fd < 0 || p->ctl_dead)
        return util_fail(AI_ERR_PEER, "rank %d's control connection is gone", peer);
    ai_status_t st = comm_sock_write_full(p->ctl_fd, frame, len, deadline);
    if (st == AI_ERR_PEER)
        ctl_fail(p);
    return st;
}
