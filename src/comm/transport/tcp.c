/*
 * TCP: socket helpers (bounded by deadlines) and the data-plane mesh.
 *
 * Mesh set-up: every rank listens before rendezvous. For each pair of ranks
 * on different hosts the higher rank opens `channels` connections to the
 * lower one and introduces each with a hello frame (job token hash, ranks,
 * channel). The listener accepts until it has every connection it expects;
 * anything else that connects (wrong token, garbage, a stranger) is logged
 * and dropped without disturbing the job.
 */
#include "comm/transport/transport.h"

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
#include <time.h>
#include <unistd.h>

#define DATA_HELLO_MAGIC 0x50444941u /* "AIDP" */
#define DATA_HELLO_BYTES 24
#define BOUNCE_BYTES (256 * 1024)
#define MAX_PENDING_ACCEPTS 64

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
        return ai_fail(AI_ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    *addr_out = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
    return AI_OK;
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
        return ai_fail(AI_ERR_IO, "socket: %s", strerror(errno));
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
        return ai_fail(AI_ERR_IO, "cannot listen on %s:%u: %s", ip, (unsigned)*port_out, strerror(err));
    }
    *port_out = ntohs(sa.sin_port);
    *fd_out = fd;
    return AI_OK;
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
            return ai_fail(AI_ERR_IO, "socket: %s", strerror(errno));
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
        if (rc == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            *fd_out = fd;
            return AI_OK;
        }
        close(fd);
        /* The listener may simply not be up yet: retry until the deadline. */
        ai_sleep_us(10000);
    } while (ai_now() < deadline);
    return ai_fail(AI_ERR_TIMEOUT, "cannot connect to %s:%u: %s", ip, (unsigned)port,
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
            return ai_fail(AI_ERR_PEER, "connection closed by the other side");
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return ai_fail(AI_ERR_PEER, "%s failed: %s", writing ? "send" : "receive", strerror(errno));
        struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) == 0)
            return ai_fail(AI_ERR_TIMEOUT, "%s timed out", writing ? "send" : "receive");
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

static void hello_pack(unsigned char *b, uint64_t token_hash, uint32_t from, uint32_t to, uint16_t chan)
{
    uint32_t magic = DATA_HELLO_MAGIC;
    uint16_t version = COMM_PROTO_VERSION;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 2);
    memcpy(b + 6, &chan, 2);
    memcpy(b + 8, &from, 4);
    memcpy(b + 12, &to, 4);
    memcpy(b + 16, &token_hash, 8);
}

static ai_status_t chan_open(comm_peer *p, int k, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    comm_sock_nonblock(fd);
    p->tx[k].kind = p->rx[k].kind = CHAN_TCP;
    p->tx[k].fd = p->rx[k].fd = fd;
    void *b = NULL;
    if (posix_memalign(&b, 64, BOUNCE_BYTES) != 0)
        return ai_fail(AI_ERR_NOMEM, "receive buffer");
    p->rx[k].bounce = b;
    p->rx[k].bcap = BOUNCE_BYTES;
    p->rx[k].bstart = p->rx[k].bend = 0;
    p->rx[k].spos = 0;
    return AI_OK;
}

typedef struct pending_conn {
    int fd;
    size_t got;
    double since;
    unsigned char buf[DATA_HELLO_BYTES];
} pending_conn;

/* Validate a complete data hello; on success attach the connection. */
static const char *hello_accept(ai_comm *c, pending_conn *pc)
{
    uint32_t magic, from, to;
    uint16_t version, chan;
    uint64_t token;
    memcpy(&magic, pc->buf, 4);
    memcpy(&version, pc->buf + 4, 2);
    memcpy(&chan, pc->buf + 6, 2);
    memcpy(&from, pc->buf + 8, 4);
    memcpy(&to, pc->buf + 12, 4);
    memcpy(&token, pc->buf + 16, 8);
    if (magic != DATA_HELLO_MAGIC)
        return "not an autoinfra peer (bad magic)";
    if (version != COMM_PROTO_VERSION)
        return "wrong protocol version";
    if (token != c->tp->token_hash)
        return "wrong job token";
    if (to != (uint32_t)c->rank || from >= (uint32_t)c->size || (int)from <= c->rank)
        return "unexpected rank numbers";
    comm_peer *p = &c->tp->peers[from];
    if (p->kind != CHAN_TCP || chan >= p->nchan || p->tx[chan].fd >= 0)
        return "unexpected or duplicate channel";
    if (chan_open(p, chan, pc->fd) != AI_OK)
        return "out of memory";
    return NULL;
}

ai_status_t comm_tcp_mesh(ai_comm *c)
{
    struct comm_transport *tp = c->tp;
    double deadline = ai_now() + c->timeout_s;
    int expected = 0;
    for (int j = 0; j < c->size; j++) {
        comm_peer *p = &tp->peers[j];
        if (p->kind != CHAN_TCP)
            continue;
        p->nchan = c->channels;
        if (j > c->rank) {
            expected += c->channels;
            continue;
        }
        for (int k = 0; k < c->channels; k++) {
            int fd;
            unsigned char hello[DATA_HELLO_BYTES];
            ai_status_t st = comm_sock_connect(p->addr, p->port, deadline, &fd);
            if (st != AI_OK)
                return ai_fail_prefix(st, "connecting to rank %d (host %s)", j, p->host);
            hello_pack(hello, tp->token_hash, (uint32_t)c->rank, (uint32_t)j, (uint16_t)k);
            st = comm_sock_write_full(fd, hello, sizeof hello, deadline);
            if (st == AI_OK)
                st = chan_open(p, k, fd);
            if (st != AI_OK) {
                if (p->tx[k].fd != fd)
                    close(fd);
                return ai_fail_prefix(st, "connecting to rank %d (host %s)", j, p->host);
            }
        }
    }

    pending_conn pend[MAX_PENDING_ACCEPTS];
    int npend = 0;
    while (expected > 0) {
        struct pollfd fds[MAX_PENDING_ACCEPTS + 1];
        fds[0].fd = tp->listen_fd;
        fds[0].events = POLLIN;
        for (int i = 0; i < npend; i++) {
            fds[i + 1].fd = pend[i].fd;
            fds[i + 1].events = POLLIN;
        }
        int ms = remaining_ms(deadline);
        if (ms == 0) {
            for (int i = 0; i < npend; i++)
                close(pend[i].fd);
            char missing[256] = "";
            size_t len = 0;
            for (int j = c->rank + 1; j < c->size && len < sizeof missing - 16; j++)
                if (tp->peers[j].kind == CHAN_TCP && tp->peers[j].tx[tp->peers[j].nchan - 1].fd < 0)
                    len += (size_t)snprintf(missing + len, sizeof missing - len, " %d", j);
            return ai_fail(AI_ERR_TIMEOUT, "timed out after %.1f s waiting for connections from ranks%s",
                           c->timeout_s, missing);
        }
        if (poll(fds, (nfds_t)npend + 1, AI_MIN(ms, 100)) < 0 && errno != EINTR)
            return ai_fail(AI_ERR_IO, "poll: %s", strerror(errno));
        if (fds[0].revents & POLLIN) {
            int fd = accept4(tp->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0 && npend < MAX_PENDING_ACCEPTS)
                pend[npend++] = (pending_conn){.fd = fd, .got = 0, .since = ai_now()};
            else if (fd >= 0)
                close(fd);
        }
        double now = ai_now();
        for (int i = 0; i < npend; i++) {
            pending_conn *pc = &pend[i];
            const char *why = NULL;
            ssize_t n = recv(pc->fd, pc->buf + pc->got, DATA_HELLO_BYTES - pc->got, MSG_DONTWAIT);
            if (n > 0)
                pc->got += (size_t)n;
            else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                why = "connection closed before its hello";
            if (!why && pc->got == DATA_HELLO_BYTES) {
                why = hello_accept(c, pc);
                if (!why) {
                    expected--;
                    pend[i--] = pend[--npend];
                    continue;
                }
            }
            if (!why && now - pc->since > 5.0)
                why = "no hello within 5 s";
            if (why) {
                ai_log(AI_LOG_WARN, "refused a data connection: %s", why);
                close(pc->fd);
                pend[i--] = pend[--npend];
            }
        }
    }
    for (int i = 0; i < npend; i++)
        close(pend[i].fd);
    return AI_OK;
}

void comm_tcp_close(ai_comm *c)
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
    }
}
