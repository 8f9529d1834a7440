/*
 * The TCP transport (comm_tcp_ops): socket helpers (bounded by deadlines),
 * the data-plane mesh, and moving framed streams over its connections.
 *
 * Mesh set-up: every rank listens before rendezvous, on the address it
 * reaches rank 0 from (the one the job knows it by), not on every
 * interface. For each pair of ranks on different hosts the higher rank
 * opens `channels` data connections and one control connection to the
 * lower one and introduces each with a hello frame (ranks, channel, a
 * fresh nonce; wire.h), then proves that it knows the communicator's key
 * (the challenge-response of gate.c). The listener takes connections
 * through a gate: a stranger, garbage or a wrong proof is refused within
 * a second, a full table drops an untrusted entry, and an accepted proof
 * is acknowledged; a connection closed without the acknowledgement is
 * retried with backoff until the timeout.
 */
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BOUNCE_BYTES (256 * 1024)
/* How long a rank whose peer's connection ended waits for that peer's
 * abort notice (sent before the peer shut its data connections down, so
 * on one machine it is already there). */
#define NOTICE_GRACE_S 0.25

static int comm_sock_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL, 0);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int remaining_ms(double deadline)
{
    double left = deadline - ai_now();
    return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

ai_status_t comm_resolve_ipv4(const char *host, uint32_t *addr_out)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return util_fail(AI_ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    *addr_out = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
    return AI_OK;
}

ai_status_t comm_local_addr_towards(uint32_t addr, uint32_t *out)
{
    /* connect() on a datagram socket only picks the route: no packet. */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = addr, .sin_port = htons(9)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return util_fail(AI_ERR_IO, "socket: %s", strerror(errno));
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
             getsockname(fd, (struct sockaddr *)&sa, &len) == 0;
    int err = errno;
    close(fd);
    if (!ok) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &addr, ip, sizeof ip);
        return util_fail(AI_ERR_IO, "no route to %s: %s", ip, strerror(err));
    }
    *out = sa.sin_addr.s_addr;
    return AI_OK;
}

int comm_split_hostport(const char *text, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(text, ':');
    long p;
    if (!colon || colon == text || (size_t)(colon - text) >= cap ||
        util_parse_long(colon + 1, &p) != AI_OK || p < 1 || p > 65535)
        return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    *port = (int)p;
    return 0;
}

void comm_backoff(int attempt, double deadline)
{
    double base = 0.01 * (double)(1u << (attempt < 6 ? attempt : 6));
    uint64_t h = util_hash64(&attempt, sizeof attempt, (uint64_t)getpid() ^ (uint64_t)(ai_now() * 1e9));
    double s = AI_MIN(base, 0.5) * (0.5 + (double)(h % 1000) / 1000.0);
    double left = deadline - ai_now();
    if (s > left)
        s = left;
    if (s > 0)
        util_sleep_us((long)(s * 1e6));
}

/* Can `port` (0: the kernel picks) be listened on at `addr`, as rank 0
 * will? The port, or -1. */
static int try_port(uint32_t addr, int port)
{
    uint16_t p = (uint16_t)port;
    int fd;
    if (comm_tcp_listen(addr, &fd, &p) != AI_OK)
        return -1;
    close(fd);
    return p;
}

/* A port the kernel hands out for bind(0) comes from the ephemeral range
 * (net.ipv4.ip_local_port_range), where any process's outgoing connect may
 * take it as its source port before rank 0 binds it (a concurrent job's
 * ranks, connecting, win that race). So draw at random from [10000, low
 * end of that range), or above it if that span is small: ports the kernel
 * never assigns on its own, where only an explicit bind can collide. */
int comm_tcp_free_port(const char *host)
{
    enum { LOWEST = 10000, MIN_SPAN = 1000, TRIES = 64 };
    uint32_t addr;
    int lo, hi, base = LOWEST, span;
    uint64_t x = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (!f || fscanf(f, "%d %d", &lo, &hi) != 2)
        lo = 32768, hi = 60999; /* Linux's default range */
    if (f)
        fclose(f);
    if (comm_resolve_ipv4(host ? host : "127.0.0.1", &addr) != AI_OK)
        return -1;
    span = lo - LOWEST;
    if (span < MIN_SPAN)
        base = hi + 1, span = 65536 - base;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    for (int t = 0; span >= MIN_SPAN && t < TRIES; t++) {
        int port = base + (int)(x % (uint64_t)span);
        if (try_port(addr, port) == port)
            return port;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    }
    return try_port(addr, 0); /* an odd range, or no luck: the kernel's pick */
}

ai_status_t comm_tcp_listen(uint32_t addr, int *fd_out, uint16_t *port_out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return util_fail(AI_ERR_IO, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = addr,
                             .sin_port = htons(*port_out)};
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || comm_sock_nonblock(fd) != 0) {
        char ip[INET_ADDRSTRLEN];
        int err = errno;
        inet_ntop(AF_INET, &addr, ip, sizeof ip);
        close(fd);
        return util_fail(AI_ERR_IO, "cannot listen on %s:%u: %s", ip, (unsigned)*port_out, strerror(err));
    }
    *port_out = ntohs(sa.sin_port);
    *fd_out = fd;
    return AI_OK;
}

/* A connect to a port of this host that nobody listens on yet can be
 * given that very port as its source (it is in the ephemeral range) and
 * "succeed" by TCP's simultaneous open, connected to itself: then rank 0
 * cannot bind its listener there. Such a socket is no peer. */
static int connected_to_self(int fd)
{
    struct sockaddr_in a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    return getsockname(fd, (struct sockaddr *)&a, &la) == 0 &&
           getpeername(fd, (struct sockaddr *)&b, &lb) == 0 && a.sin_port == b.sin_port &&
           a.sin_addr.s_addr == b.sin_addr.s_addr;
}

ai_status_t comm_sock_connect(uint32_t addr, uint16_t port, double deadline, int *fd_out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = addr, .sin_port = htons(port)};
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr, ip, sizeof ip);
    int err = 0;
    do {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return util_fail(AI_ERR_IO, "socket: %s", strerror(errno));
        comm_sock_nonblock(fd);
        int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            rc = poll(&pfd, 1, remaining_ms(deadline));
            socklen_t len = sizeof err;
            if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
                rc = 0;
            else
                rc = -1, err = rc == 0 ? ETIMEDOUT : err;
        } else if (rc != 0) {
            err = errno;
        }
        if (rc == 0 && connected_to_self(fd)) {
            rc = -1;
            err = ECONNREFUSED;
        }
        if (rc == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            *fd_out = fd;
            return AI_OK;
        }
        close(fd);
        /* The listener may simply not be up yet: retry until the deadline. */
        util_sleep_us(10000);
    } while (ai_now() < deadline);
    return util_fail(AI_ERR_TIMEOUT, "cannot connect to %s:%u: %s", ip, (unsigned)port,
                     strerror(err ? err : ETIMEDOUT));
}

static ai_status_t sock_io_full(int fd, void *buf, size_t n, double deadline, int writing)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            return util_fail(AI_ERR_PEER, "connection closed by the other side");
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return util_fail(AI_ERR_PEER, "%s failed: %s", writing ? "send" : "receive", strerror(errno));
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) == 0)
            return util_fail(AI_ERR_TIMEOUT, "%s timed out", writing ? "send" : "receive");
    }
    return AI_OK;
}

ai_status_t comm_sock_read_full(int fd, void *buf, size_t n, double deadline)
{
    return sock_io_full(fd, buf, n, deadline, 0);
}

ai_status_t comm_sock_write_full(int fd, const void *buf, size_t n, double deadline)
{
    return sock_io_full(fd, (void *)buf, n, deadline, 1);
}

/* ---------------------------------------------------------------- mesh */

static ai_status_t chan_open(comm_peer *p, int k, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    comm_sock_nonblock(fd);
    p->tx[k].kind = p->rx[k].kind = CHAN_TCP;
    p->tx[k].fd = p->rx[k].fd = fd;
    void *b = NULL;
    if (posix_memalign(&b, 64, BOUNCE_BYTES) != 0)
        return util_fail(AI_ERR_NOMEM, "receive buffer");
    p->rx[k].bounce = b;
    p->rx[k].bcap = BOUNCE_BYTES;
    p->rx[k].bstart = p->rx[k].bend = 0;
    p->rx[k].spos = 0;
    return AI_OK;
}

/* Open channel `chan` (or the control connection) to lower rank j: hello,
 * then wait for the listener's acknowledgement; a connection closed
 * without one was dropped by a full gate and is tried again. */
static ai_status_t chan_connect(ai_comm *c, int j, uint16_t chan, double deadline, int *fd_out)
{
    comm_peer *p = &c->tp->peers[j];
    unsigned char hello[COMM_WIRE_DATA_HELLO], ack[COMM_WIRE_ACK] = {0}, nonce[COMM_WIRE_NONCE];
    for (int attempt = 0;; attempt++) {
        int fd, challenged = 0;
        ai_status_t st = comm_sock_connect(p->addr, p->port, deadline, &fd);
        if (st != AI_OK)
            return st;
        util_random_bytes(nonce, sizeof nonce);
        comm_wire_data_hello_pack(hello, nonce, (uint32_t)c->rank, (uint32_t)j, chan);
        st = comm_auth_connect(fd, c->tp->key, hello, sizeof hello, deadline, &challenged, ack);
        if (st == AI_OK && challenged)
            st = comm_sock_read_full(fd, ack, sizeof ack, deadline);
        uint32_t magic;
        memcpy(&magic, ack, 4);
        if (st == AI_OK && magic == COMM_WIRE_ACK_MAGIC && challenged) {
            *fd_out = fd;
            return AI_OK;
        }
        close(fd);
        if (st == AI_OK)
            return util_fail(AI_ERR_PROTO, "rank %d answered a data hello with something else", j);
        if (st == AI_ERR_PROTO)
            return util_fail_prefix(st, "rank %d's data listener", j);
        if (st != AI_ERR_PEER || ai_now() >= deadline)
            return st;
        comm_backoff(attempt, deadline);
    }
}

typedef struct mesh_accept {
    ai_comm *c;
    int expected;
} mesh_accept;

/* The data listener's judgement of a hello: from a higher rank, to this
 * one, for a channel not yet open. */
static int mesh_claims(mesh_accept *m, const unsigned char *b, size_t len, uint32_t *from,
                       uint16_t *chan)
{
    ai_comm *c = m->c;
    uint32_t to;
    size_t need;
    if (comm_wire_data_hello_parse(b, len, from, &to, chan, &need) != AI_OK)
        return -1;
    if (need)
        return 0;
    if (to != (uint32_t)c->rank || *from >= (uint32_t)c->size || (int)*from <= c->rank)
        return util_fail(AI_ERR_PROTO, "unexpected rank numbers"), -1;
    comm_peer *p = &c->tp->peers[*from];
    int ctl = *chan == COMM_WIRE_CTL_CHAN;
    if (ctl ? p->ctl_fd >= 0 : (p->kind != CHAN_TCP || *chan >= p->nchan || p->tx[*chan].fd >= 0))
        return util_fail(AI_ERR_PROTO, "unexpected or duplicate channel"), -1;
    return COMM_WIRE_DATA_HELLO;
}

static int mesh_open(void *arg, const unsigned char *b, size_t len)
{
    uint32_t from;
    uint16_t chan;
    return mesh_claims(arg, b, len, &from, &chan);
}

/* A proven hello: acknowledged and attached. */
static int mesh_admit(void *arg, int fd, const unsigned char *b, size_t len)
{
    mesh_accept *m = arg;
    uint32_t from;
    uint16_t chan;
    if (mesh_claims(m, b, len, &from, &chan) <= 0)
        return -1;
    comm_peer *p = &m->c->tp->peers[from];
    uint32_t magic = COMM_WIRE_ACK_MAGIC;
    if (send(fd, &magic, sizeof magic, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof magic)
        return util_fail(AI_ERR_PEER, "could not acknowledge the hello: %s", strerror(errno)), -1;
    if (chan == COMM_WIRE_CTL_CHAN) {
        /* Notices and agreement frames are small and answered: no Nagle
         * wait behind a delayed acknowledgement (40 ms each). */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        p->ctl_fd = fd;
    } else
        (void)chan_open(p, chan, fd); /* without its buffer, the check after the loop fails */
    m->expected--;
    return 1;
}

static ai_status_t tcp_mesh(ai_comm *c)
{
    struct comm_transport *tp = c->tp;
    double deadline = ai_now() + c->timeout_s;
    mesh_accept m = {.c = c};
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &tp->peers[j];
        if (p->kind == CHAN_NONE)
            continue;
        /* Shared-memory pairs get the control connection only. */
        int nchan = p->kind == CHAN_TCP ? c->channels : 0;
        if (p->kind == CHAN_TCP)
            p->nchan = c->channels;
        if (j > c->rank) {
            m.expected += nchan + 1;
            continue;
        }
        for (int k = 0; k <= nchan; k++) {
            int fd = -1, ctl = k == nchan;
            ai_status_t st = chan_connect(c, j, ctl ? COMM_WIRE_CTL_CHAN : (uint16_t)k, deadline, &fd);
            if (st == AI_OK && ctl)
                p->ctl_fd = fd;
            else if (st == AI_OK && (st = chan_open(p, k, fd)) != AI_OK && p->tx[k].fd != fd)
                close(fd);
            if (st != AI_OK)
                return util_fail_prefix(st, "connecting to rank %d (host %s)", j, p->host);
        }
    }

    comm_gate *g = malloc(sizeof *g);
    if (!g)
        return util_fail(AI_ERR_NOMEM, "data listener");
    comm_gate_init(g, tp->listen_fd, "data listener", tp->key, mesh_open, mesh_admit, NULL, &m);
    ai_status_t st = AI_OK;
    while (m.expected > 0 && st == AI_OK) {
        int ms = remaining_ms(deadline);
        if (ms == 0) {
            char missing[256] = "";
            size_t len = 0;
            for (int j = c->rank + 1; j < c->size && len < sizeof missing - 16; j++)
                if (tp->peers[j].ctl_fd < 0 || (tp->peers[j].kind == CHAN_TCP &&
                                                tp->peers[j].tx[tp->peers[j].nchan - 1].fd < 0))
                    len += (size_t)snprintf(missing + len, sizeof missing - len, " %d", j);
            st = util_fail(AI_ERR_TIMEOUT, "timed out after %.1f s waiting for connections from ranks%s",
                           c->timeout_s, missing);
            break;
        }
        st = comm_gate_pass(g, AI_MIN(ms, 100));
    }
    comm_gate_close(g);
    free(g);
    for (int j = c->rank + 1; j < c->size && st == AI_OK; j++)
        for (int k = 0; k < c->channels && tp->peers[j].kind == CHAN_TCP; k++)
            if (!tp->peers[j].rx[k].bounce)
                st = util_fail(AI_ERR_NOMEM, "receive buffer");
    return st;
}

static void tcp_close(ai_comm *c)
{
    if (!c->tp || !c->tp->peers)
        return;
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &c->tp->peers[j];
        for (int k = 0; k < COMM_MAX_CHANNELS; k++) {
            if (p->tx[k].kind == CHAN_TCP && p->tx[k].fd >= 0)
                close(p->tx[k].fd);
            p->tx[k].fd = p->rx[k].fd = -1;
            free(p->rx[k].bounce);
            p->rx[k].bounce = NULL;
        }
        if (p->ctl_fd >= 0) {
            /* Read what is left first: closing with unread bytes sends a
             * reset, which could overtake our own abort notice. */
            unsigned char sink[512];
            while (recv(p->ctl_fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
                ;
            close(p->ctl_fd);
        }
        p->ctl_fd = -1;
        free(p->ctl_buf);
        p->ctl_buf = NULL;
        p->ctl_len = p->ctl_cap = 0;
    }
}

/* ---------------------------------------------------------- moving bytes */

static ai_status_t tcp_error(ai_comm *c, const comm_req *r, ssize_t n, const char *what)
{
    int err = errno, peer = r->peer;
    comm_peer *p = &c->tp->peers[peer];
    if (comm_ctl_notice(c, peer, NOTICE_GRACE_S))
        return comm_ctl_adopt(c, p->notice_origin, p->notice_reason, p->notice_revoked, peer,
                              p->notice_revoked ? "revoked it and closed its connections"
                                                : "aborted because of it and closed its connections");
    c->tp->blame = peer;
    if (n == 0)
        return util_fail(AI_ERR_PEER, "rank %d (host %s) died or lost its network: its connection "
                         "closed during %s with no abort notice", peer, p->host, what);
    return util_fail(AI_ERR_PEER, "rank %d (host %s) died or lost its network: connection failed "
                     "during %s (%s) with no abort notice", peer, p->host, what,
                     strerror(err));
}

static ai_status_t tcp_send(ai_comm *c, comm_req *r, int k, comm_chan *ch, int *moved)
{
    size_t total = comm_chan_total(r, k);
    while (r->chan_done[k] < total) {
        struct iovec iov[3];
        int niov = 0;
        size_t pos = r->chan_done[k];
        while (niov < 3 && pos < total) {
            size_t n;
            const unsigned char *p = comm_frame_tx(r, k, pos, &n);
            iov[niov].iov_base = (void *)p;
            iov[niov].iov_len = n;
            niov++;
            pos += n;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(ch->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return AI_OK;
            if (errno == EINTR)
                continue;
            return tcp_error(c, r, n, "send");
        }
        r->chan_done[k] += (size_t)n;
        *moved = 1;
    }
    return AI_OK;
}

static void bounce_reset_if_empty(comm_chan *ch, uint64_t spos)
{
    /* Keep bounce index congruent to the stream offset mod 8, so payloads
     * (which start on multiples of 8 in the stream) are 8-byte aligned. */
    if (ch->bstart == ch->bend)
        ch->bstart = ch->bend = (size_t)(spos % 8);
}

static ai_status_t tcp_recv(ai_comm *c, comm_req *r, int k, comm_chan *ch, int *moved)
{
    size_t len = comm_chan_len(r, k), total = comm_chan_total(r, k);
    ai_status_t st = AI_OK;
    for (;;) {
        if (ch->bend > ch->bstart) {
            size_t used = comm_frame_rx(c, r, k, ch->bounce + ch->bstart, ch->bend - ch->bstart, &st);
            ch->bstart += used;
            ch->spos += used;
            if (used)
                *moved = 1;
            if (st != AI_OK)
                return st;
            bounce_reset_if_empty(ch, ch->spos);
            if (r->chan_done[k] == total)
                return AI_OK;
        }
        size_t pos = r->chan_done[k];
        /* Done (a direct receive can end the message exactly): no further
         * recv, which would read the next message's bytes or, from a peer
         * that finished and closed, an end of stream that is no error. */
        if (pos == total)
            return AI_OK;
        ssize_t n;
        if (r->kind == COMM_REQ_RECV && pos >= COMM_HDR_BYTES && pos < COMM_HDR_BYTES + len &&
            ch->bstart == ch->bend) {
            /* Plain receive: straight into the user's buffer, no bounce. */
            n = recv(ch->fd, (unsigned char *)r->rbuf + r->chan_off[k] + (pos - COMM_HDR_BYTES),
                     COMM_HDR_BYTES + len - pos, MSG_DONTWAIT);
            if (n > 0) {
                r->chan_done[k] += (size_t)n;
                ch->spos += (uint64_t)n;
                bounce_reset_if_empty(ch, ch->spos);
                *moved = 1;
                continue;
            }
        } else {
            if (ch->bcap - ch->bend < 64) {
                size_t keep = ch->bend - ch->bstart, to = (size_t)(ch->spos % 8);
                memmove(ch->bounce + to, ch->bounce + ch->bstart, keep);
                ch->bstart = to;
                ch->bend = to + keep;
            }
            n = recv(ch->fd, ch->bounce + ch->bend, ch->bcap - ch->bend, MSG_DONTWAIT);
            if (n > 0) {
                ch->bend += (size_t)n;
                continue;
            }
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return AI_OK;
        if (n < 0 && errno == EINTR)
            continue;
        return tcp_error(c, r, n, "receive");
    }
}

/* The header at the front of p's channel 0, if whole: in the bounce
 * buffer, or still in the socket (peeked, not read). */
static int tcp_peek(comm_peer *p, unsigned char *h)
{
    comm_chan *ch = &p->rx[0];
    if (ch->fd < 0)
        return 0;
    if (ch->bend - ch->bstart >= COMM_HDR_BYTES) {
        memcpy(h, ch->bounce + ch->bstart, COMM_HDR_BYTES);
        return 1;
    }
    return ch->bend == ch->bstart &&
           recv(ch->fd, h, COMM_HDR_BYTES, MSG_PEEK | MSG_DONTWAIT) == COMM_HDR_BYTES;
}

static int tcp_poll_fd(const comm_chan *ch) { return ch->fd; }

/* Shut the pair's connections down: a peer blocked on this rank fails
 * now instead of at its timeout. */
static void tcp_stop(comm_peer *p)
{
    for (int k = 0; k < p->nchan; k++)
        if (p->tx[k].fd >= 0)
            shutdown(p->tx[k].fd, SHUT_RDWR);
}

/* The fallback: every pair a socket can join. */
static int tcp_reaches(const ai_comm *c, int peer)
{
    (void)c;
    (void)peer;
    return 1;
}

const comm_transport_ops comm_tcp_ops = {
    .name = "tcp",
    .kind = CHAN_TCP,
    .rings_bell = 0,
    .reaches = tcp_reaches,
    .setup = tcp_mesh,
    .send = tcp_send,
    .recv = tcp_recv,
    .peek = tcp_peek,
    .poll_fd = tcp_poll_fd,
    .stop = tcp_stop,
    .close = tcp_close,
};
