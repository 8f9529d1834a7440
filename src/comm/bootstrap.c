/*
 * Rendezvous: a small TCP store run by rank 0 for the duration of
 * ai_comm_create. Every other rank connects, introduces itself (rank, size,
 * job token hash, its data address, pid, host id) and receives the table of
 * all ranks once everybody has joined.
 *
 * Frames: magic "AIBS" | version u16 | type u16 | body length u32 | body.
 * Rank 0 validates every hello and refuses (with a reason, sent back in a
 * REJECT frame and logged) wrong tokens, wrong versions, bad sizes,
 * duplicate ranks and bytes that are not a frame at all. A refused
 * connection never joins and never stops the rendezvous; a connection that
 * says nothing is dropped after a few seconds.
 */
#include "comm/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BS_MAGIC 0x53424941u /* "AIBS" */
#define BS_HELLO 1
#define BS_TABLE 2
#define BS_REJECT 3
#define BS_FRAME_HDR 12
#define BS_ENTRY (4 + 2 + 2 + 4 + 8 + COMM_HOST_MAX)
#define BS_HELLO_BODY (4 + 4 + 8 + BS_ENTRY)
#define BS_MAX_PENDING 128
#define BS_HELLO_GRACE_S 5.0

static void put(unsigned char **p, const void *v, size_t n)
{
    memcpy(*p, v, n);
    *p += n;
}

static void get(const unsigned char **p, void *v, size_t n)
{
    memcpy(v, *p, n);
    *p += n;
}

static void frame_hdr(unsigned char *b, uint16_t type, uint32_t len)
{
    uint32_t magic = BS_MAGIC;
    uint16_t version = COMM_PROTO_VERSION;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 2);
    memcpy(b + 6, &type, 2);
    memcpy(b + 8, &len, 4);
}

static void entry_pack(unsigned char **p, const comm_rank_info *e)
{
    uint16_t pad = 0;
    put(p, &e->addr, 4);
    put(p, &e->port, 2);
    put(p, &pad, 2);
    put(p, &e->pid, 4);
    put(p, &e->machine, 8);
    put(p, e->host, COMM_HOST_MAX);
}

static void entry_unpack(const unsigned char **p, comm_rank_info *e)
{
    uint16_t pad;
    get(p, &e->addr, 4);
    get(p, &e->port, 2);
    get(p, &pad, 2);
    get(p, &e->pid, 4);
    get(p, &e->machine, 8);
    get(p, e->host, COMM_HOST_MAX);
    e->host[COMM_HOST_MAX - 1] = '\0';
}

/* ------------------------------------------------------------- rank 0 */

typedef struct bs_conn {
    int fd;
    int rank; /* -1 until its hello was accepted */
    size_t got;
    double since;
    unsigned char buf[BS_FRAME_HDR + BS_HELLO_BODY];
} bs_conn;

static void reject(bs_conn *cn, const char *why)
{
    unsigned char b[BS_FRAME_HDR + 200];
    size_t n = strlen(why) < 200 ? strlen(why) : 200;
    frame_hdr(b, BS_REJECT, (uint32_t)n);
    memcpy(b + BS_FRAME_HDR, why, n);
    /* Best effort: the socket is fresh, a short frame fits its buffer. */
    (void)!send(cn->fd, b, BS_FRAME_HDR + n, MSG_DONTWAIT | MSG_NOSIGNAL);
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    char ip[INET_ADDRSTRLEN] = "?";
    if (getpeername(cn->fd, (struct sockaddr *)&sa, &len) == 0)
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    ai_log(AI_LOG_WARN, "rendezvous refused a connection from %s: %s", ip, why);
    close(cn->fd);
    cn->fd = -1;
}

/* Check the first bytes as soon as they arrive, so garbage is refused
 * without waiting for a whole frame. Returns a reason or NULL. */
static const char *hello_check(const ai_comm_config *cfg, uint64_t token_hash, bs_conn *cn,
                               const comm_rank_info *table, const int *joined,
                               comm_rank_info *e_out)
{
    uint32_t magic, len, rank, size;
    uint16_t version, type;
    uint64_t token;
    if (cn->got >= 4) {
        memcpy(&magic, cn->buf, 4);
        if (magic != BS_MAGIC)
            return "not an autoinfra peer (malformed frame)";
    }
    if (cn->got < BS_FRAME_HDR)
        return NULL;
    memcpy(&version, cn->buf + 4, 2);
    memcpy(&type, cn->buf + 6, 2);
    memcpy(&len, cn->buf + 8, 4);
    if (version != COMM_PROTO_VERSION)
        return "wrong protocol version";
    if (type != BS_HELLO || len != BS_HELLO_BODY)
        return "malformed hello frame";
    if (cn->got < sizeof cn->buf)
        return NULL;
    const unsigned char *p = cn->buf + BS_FRAME_HDR;
    get(&p, &rank, 4);
    get(&p, &size, 4);
    get(&p, &token, 8);
    if (token != token_hash)
        return "wrong job token";
    if (size != (uint32_t)cfg->size)
        return "job size differs from rank 0's";
    if (rank == 0 || rank >= size)
        return "rank out of range";
    if (joined[rank])
        return "rank already joined";
    comm_rank_info e;
    entry_unpack(&p, &e);
    (void)table;
    cn->rank = (int)rank;
    *e_out = e;
    return NULL;
}

static ai_status_t store_serve(const ai_comm_config *cfg, uint64_t token_hash, int lfd,
                               comm_rank_info *table, double deadline)
{
    bs_conn conns[BS_MAX_PENDING];
    int nconn = 0, njoined = 1;
    ai_status_t st = AI_OK;
    int *joined = calloc((size_t)cfg->size, sizeof *joined);
    if (!joined)
        return ai_fail(AI_ERR_NOMEM, "rendezvous table");
    joined[0] = 1;
    while (njoined < cfg->size) {
        double now = ai_now();
        if (now >= deadline) {
            char missing[200] = "";
            size_t len = 0;
            for (int r = 1; r < cfg->size && len < sizeof missing - 12; r++)
                if (!joined[r])
                    len += (size_t)snprintf(missing + len, sizeof missing - len, " %d", r);
            st = ai_fail(AI_ERR_TIMEOUT, "rendezvous timed out after %.1f s: %d of %d ranks joined (missing:%s)",
                         cfg->timeout_s, njoined, cfg->size, missing);
            goto out;
        }
        struct pollfd fds[BS_MAX_PENDING + 1];
        fds[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < nconn; i++)
            fds[i + 1] = (struct pollfd){.fd = conns[i].rank < 0 ? conns[i].fd : -1, .events = POLLIN};
        int ms = (int)((deadline - now) * 1000) + 1;
        if (poll(fds, (nfds_t)nconn + 1, AI_MIN(ms, 200)) < 0 && errno != EINTR) {
            st = ai_fail(AI_ERR_IO, "poll: %s", strerror(errno));
            goto out;
        }
        if (fds[0].revents & POLLIN) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0 && nconn < BS_MAX_PENDING)
                conns[nconn++] = (bs_conn){.fd = fd, .rank = -1, .got = 0, .since = ai_now()};
            else if (fd >= 0)
                close(fd);
        }
        for (int i = 0; i < nconn; i++) {
            bs_conn *cn = &conns[i];
            if (cn->rank >= 0)
                continue;
            ssize_t n = recv(cn->fd, cn->buf + cn->got, sizeof cn->buf - cn->got, MSG_DONTWAIT);
            const char *why = NULL;
            if (n > 0)
                cn->got += (size_t)n;
            else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                why = "closed before completing its hello";
            comm_rank_info e;
            if (!why)
                why = hello_check(cfg, token_hash, cn, table, joined, &e);
            if (!why && cn->rank >= 0) {
                table[cn->rank] = e;
                joined[cn->rank] = 1;
                njoined++;
            } else if (!why && ai_now() - cn->since > BS_HELLO_GRACE_S) {
                why = "no complete hello within 5 s";
            }
            if (why) {
                reject(cn, why);
                conns[i--] = conns[--nconn];
            }
        }
    }
    /* Everyone is here: send the table to each joined rank. */
    size_t body = (size_t)cfg->size * BS_ENTRY;
    unsigned char *msg = malloc(BS_FRAME_HDR + body);
    if (!msg) {
        st = ai_fail(AI_ERR_NOMEM, "rendezvous table");
        goto out;
    }
    frame_hdr(msg, BS_TABLE, (uint32_t)body);
    unsigned char *p = msg + BS_FRAME_HDR;
    for (int r = 0; r < cfg->size; r++)
        entry_pack(&p, &table[r]);
    for (int i = 0; i < nconn && st == AI_OK; i++) {
        st = comm_sock_write_full(conns[i].fd, msg, BS_FRAME_HDR + body, deadline);
        if (st != AI_OK)
            ai_fail_prefix(st, "sending the rank table to rank %d", conns[i].rank);
    }
    free(msg);
out:
    for (int i = 0; i < nconn; i++)
        close(conns[i].fd);
    free(joined);
    return st;
}

/* ------------------------------------------------------- other ranks */

static ai_status_t store_join(const ai_comm_config *cfg, uint64_t token_hash, uint32_t store_addr,
                              comm_rank_info *self, comm_rank_info *table, double deadline)
{
    int fd;
    ai_status_t st = comm_sock_connect(store_addr, (uint16_t)cfg->store_port, deadline, &fd);
    if (st != AI_OK)
        return ai_fail_prefix(st, "cannot reach the rendezvous store (rank 0) at %s:%d",
                              cfg->store_host, cfg->store_port);
    if (self->addr == 0) {
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
            self->addr = sa.sin_addr.s_addr;
    }
    unsigned char hello[BS_FRAME_HDR + BS_HELLO_BODY], *p = hello + BS_FRAME_HDR;
    uint32_t rank = (uint32_t)cfg->rank, size = (uint32_t)cfg->size;
    frame_hdr(hello, BS_HELLO, BS_HELLO_BODY);
    put(&p, &rank, 4);
    put(&p, &size, 4);
    put(&p, &token_hash, 8);
    entry_pack(&p, self);
    st = comm_sock_write_full(fd, hello, sizeof hello, deadline);
    unsigned char hdr[BS_FRAME_HDR];
    if (st == AI_OK)
        st = comm_sock_read_full(fd, hdr, sizeof hdr, deadline);
    if (st != AI_OK) {
        close(fd);
        return ai_fail_prefix(st, "rendezvous with rank 0 at %s:%d", cfg->store_host, cfg->store_port);
    }
    uint32_t magic, len;
    uint16_t version, type;
    memcpy(&magic, hdr, 4);
    memcpy(&version, hdr + 4, 2);
    memcpy(&type, hdr + 6, 2);
    memcpy(&len, hdr + 8, 4);
    if (magic != BS_MAGIC || version != COMM_PROTO_VERSION) {
        close(fd);
        return ai_fail(AI_ERR_PROTO, "rendezvous at %s:%d answered with something that is not an "
                       "autoinfra store of protocol version %d", cfg->store_host, cfg->store_port,
                       COMM_PROTO_VERSION);
    }
    if (type == BS_REJECT && len <= 200) {
        char why[201] = "";
        comm_sock_read_full(fd, why, len, deadline);
        why[len] = '\0';
        close(fd);
        return ai_fail(AI_ERR_PROTO, "rendezvous at %s:%d refused rank %d: %s", cfg->store_host,
                       cfg->store_port, cfg->rank, why);
    }
    if (type != BS_TABLE || len != (uint32_t)cfg->size * BS_ENTRY) {
        close(fd);
        return ai_fail(AI_ERR_PROTO, "malformed rank table from rank 0");
    }
    unsigned char *body = malloc(len);
    if (!body) {
        close(fd);
        return ai_fail(AI_ERR_NOMEM, "rank table");
    }
    st = comm_sock_read_full(fd, body, len, deadline);
    close(fd);
    if (st == AI_OK) {
        const unsigned char *q = body;
        for (int r = 0; r < cfg->size; r++)
            entry_unpack(&q, &table[r]);
    } else {
        ai_fail_prefix(st, "receiving the rank table from rank 0");
    }
    free(body);
    return st;
}

ai_status_t comm_bootstrap(const ai_comm_config *cfg, uint64_t token_hash, comm_rank_info *self,
                           comm_rank_info *table)
{
    double deadline = ai_now() + cfg->timeout_s;
    uint32_t store_addr;
    ai_status_t st = comm_resolve_ipv4(cfg->store_host, &store_addr);
    if (st != AI_OK)
        return st;
    if (cfg->rank != 0)
        return store_join(cfg, token_hash, store_addr, self, table, deadline);
    int lfd;
    uint16_t port = (uint16_t)cfg->store_port;
    st = comm_tcp_listen(store_addr, &lfd, &port);
    if (st != AI_OK)
        return ai_fail_prefix(st, "rank 0 cannot open the rendezvous store");
    if (self->addr == 0)
        self->addr = store_addr;
    table[0] = *self;
    st = store_serve(cfg, token_hash, lfd, table, deadline);
    close(lfd);
    return st;
}

/* ------------------------------------------- through the caller's store */

/* The address peers reach this rank on: that of the interface the route
 * to `toward` (an address of rank 0's host) leaves by. A UDP connect sends
 * nothing; it only picks the route. */
static ai_status_t route_addr(const char *toward, uint32_t *out)
{
    uint32_t dst;
    ai_status_t st = comm_resolve_ipv4(toward, &dst);
    if (st != AI_OK)
        return st;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ai_fail(AI_ERR_IO, "socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = dst};
    socklen_t len = sizeof sa;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        st = ai_fail(AI_ERR_IO, "no route to %s: %s", toward, strerror(errno));
        close(fd);
        return st;
    }
    close(fd);
    *out = sa.sin_addr.s_addr;
    return AI_OK;
}

static uint64_t draw_nonce(const comm_rank_info *self)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&v, sizeof v, 1, f) != 1)
        v = ai_hash64(self, sizeof *self, (uint64_t)(ai_now() * 1e9));
    if (f)
        fclose(f);
    return v;
}

/* Each rank publishes "autoinfra/rank/<r>": its table entry and a nonce
 * (only rank 0's is used), then reads every other rank's. */
ai_status_t comm_bootstrap_store(const ai_comm_config *cfg, const ai_kv_store *kv,
                                 comm_rank_info *self, comm_rank_info *table, uint64_t *nonce)
{
    double deadline = ai_now() + cfg->timeout_s;
    ai_status_t st;
    if (self->addr == 0 &&
        (st = route_addr(cfg->store_host ? cfg->store_host : "127.0.0.1", &self->addr)) != AI_OK)
        return ai_fail_prefix(st, "rank %d: choosing the address peers reach it on", cfg->rank);
    unsigned char val[BS_ENTRY + 8], *p = val;
    uint64_t mine = draw_nonce(self);
    entry_pack(&p, self);
    put(&p, &mine, 8);
    char key[48];
    snprintf(key, sizeof key, "autoinfra/rank/%d", cfg->rank);
    if ((st = kv->set(kv->ctx, key, val, sizeof val)) != AI_OK)
        return ai_fail(st, "rank %d: publishing its address in the store (key %s) failed: %s",
                       cfg->rank, key, ai_strerror(st));
    for (int r = 0; r < cfg->size; r++) {
        if (r == cfg->rank) {
            table[r] = *self;
            if (r == 0)
                *nonce = mine;
            continue;
        }
        snprintf(key, sizeof key, "autoinfra/rank/%d", r);
        double left = deadline - ai_now();
        st = left > 0 ? kv->get(kv->ctx, key, val, sizeof val, left) : AI_ERR_TIMEOUT;
        if (st == AI_ERR_TIMEOUT)
            return ai_fail(st, "rank %d did not publish its address in the store (key %s) within "
                           "%.1f s", r, key, cfg->timeout_s);
        if (st != AI_OK)
            return ai_fail(st, "reading rank %d's address from the store (key %s) failed: %s", r,
                           key, ai_strerror(st));
        const unsigned char *q = val;
        entry_unpack(&q, &table[r]);
        if (r == 0)
            get(&q, nonce, 8);
    }
    return AI_OK;
}
