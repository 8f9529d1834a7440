/*
 * Rank 0's join door and its lobby (docs/faults.md "Grow and join").
 *
 * A newcomer connects to the door, sends its hello and waits for the
 * grown table on that connection. Rank 0 reads the hello as soon as it
 * polls the door (ai_comm_join_pending, ai_comm_grow) and keeps the
 * connection in the lobby; a grow admits the first newcomers of the lobby
 * in the order they came. A connection that ends in the lobby (the
 * newcomer was killed, gave up, or was never one: a hello sent and closed)
 * is dropped at the next poll, so it is neither counted as waiting nor
 * admitted, and the live newcomers behind it are admitted in its stead.
 * Newcomers that a grow did not take stay in the lobby for the next one.
 *
 * The door is rank 0's data listener unless AUTOINFRA_JOIN_DOOR names
 * addresses ("host:port[,host:port...]"): then rank 0 opens its own
 * listener at the first of them it can bind, keeps it (and the lobby)
 * across the shrinks and grows it survives as rank 0, and a survivor that
 * becomes rank 0 after a shrink opens it again, so newcomers given the
 * same list find the job whichever process is rank 0.
 */
#include "comm/ft/state.h"
#include "comm/transport/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DOOR_ENV "AUTOINFRA_JOIN_DOOR"
#define DOOR_RETRY_S 0.5 /* between attempts to open a door that was taken */

struct comm_door {
    int fd;             /* its own listener, or -1 (the data listener, or none yet) */
    double next_open;   /* ai_now() of the next attempt to open it */
    int warned;
    comm_gate *gate;    /* connections not yet holding a whole hello */
    unsigned char job_key[COMM_KEY_BYTES]; /* what newcomers prove they know (gate.c) */
    int n;              /* newcomers waiting, in the order they came */
    int conn[COMM_DOOR_LOBBY_MAX];
    comm_rank_info entry[COMM_DOOR_LOBBY_MAX];
};

void comm_door_free(comm_door *d)
{
    if (!d)
        return;
    if (d->gate)
        comm_gate_close(d->gate);
    free(d->gate);
    for (int i = 0; i < d->n; i++)
        close(d->conn[i]);
    if (d->fd >= 0)
        close(d->fd);
    free(d);
}

/* Rank 0 only: the door's own listener at the first address of the list it
 * can bind (the others are other hosts', or taken). */
static void door_open(ai_comm *c, comm_door *d)
{
    const char *list = util_param_str(UTIL_PARAM_JOIN_DOOR);
    if (!list || !*list || d->fd >= 0 || c->rank != 0 || ai_now() < d->next_open)
        return;
    d->next_open = ai_now() + DOOR_RETRY_S;
    char item[300];
    const char *p = list;
    while (*p) {
        size_t k = strcspn(p, ",");
        snprintf(item, sizeof item, "%.*s", (int)AI_MIN(k, sizeof item - 1), p);
        p += k + (p[k] == ',');
        char host[256];
        int port;
        uint32_t addr;
        uint16_t p16;
        int fd;
        if (comm_split_hostport(item, host, sizeof host, &port) != 0 ||
            comm_resolve_ipv4(host, &addr) != AI_OK)
            continue;
        p16 = (uint16_t)port;
        if (comm_tcp_listen(addr, &fd, &p16) == AI_OK) {
            d->fd = fd;
            util_log(AI_LOG_INFO, "join door open at %s", item);
            return;
        }
    }
    if (!d->warned++)
        util_log(AI_LOG_WARN, "cannot open the join door at any of %s=%s (not this host's "
                 "addresses, or taken); newcomers reach rank 0's data listener only, retrying",
                 DOOR_ENV, list);
}

ai_status_t comm_door_get(ai_comm *c, comm_door **out)
{
    comm_ft *ft;
    ai_status_t st = comm_ft_get(c, &ft);
    if (st != AI_OK)
        return st;
    if (!ft->door) {
        comm_door *d = calloc(1, sizeof *d);
        if (!d)
            return util_fail(AI_ERR_NOMEM, "join door");
        d->fd = -1;
        ft->door = d;
    }
    memcpy(ft->door->job_key, c->tp->job_key, sizeof ft->door->job_key);
    door_open(c, ft->door);
    *out = ft->door;
    return AI_OK;
}

/* A newcomer's hello: a join (not a rank's rendezvous hello), while the
 * lobby has room. Its frame length, 0 for more bytes, -1 refused. */
static int hello_claims(comm_door *d, const unsigned char *b, size_t len, comm_wire_hello *h)
{
    size_t need;
    if (comm_wire_hello_parse(b, len, h, &need) != AI_OK)
        return -1;
    if (need)
        return 0;
    if (h->rank != COMM_WIRE_JOIN_RANK || h->size != 0)
        return util_fail(AI_ERR_PROTO, "a rank's rendezvous hello, not a join (this is a running "
                         "job's join door)"), -1;
    if (d->n == COMM_DOOR_LOBBY_MAX)
        return util_fail(AI_ERR_PROTO, "the join door holds %d waiting newcomers already",
                         COMM_DOOR_LOBBY_MAX), -1;
    return COMM_WIRE_HELLO_FRAME;
}

static int hello_open(void *arg, const unsigned char *b, size_t len)
{
    comm_wire_hello h;
    return hello_claims(arg, b, len, &h);
}

/* The newcomer proved the job token: into the lobby. */
static int hello_admit(void *arg, int fd, const unsigned char *b, size_t len)
{
    comm_door *d = arg;
    comm_wire_hello h;
    if (hello_claims(d, b, len, &h) <= 0)
        return -1;
    d->entry[d->n] = h.entry;
    d->conn[d->n++] = fd;
    return 1;
}

static void lobby_drop(comm_door *d, int i)
{
    close(d->conn[i]);
    memmove(&d->conn[i], &d->conn[i + 1], (size_t)(d->n - i - 1) * sizeof d->conn[0]);
    memmove(&d->entry[i], &d->entry[i + 1], (size_t)(d->n - i - 1) * sizeof d->entry[0]);
    d->n--;
}

/* A waiting newcomer sends nothing after its hello until it has its
 * table: a readable connection has ended (or is not a newcomer's). */
static void lobby_sweep(comm_door *d)
{
    struct pollfd fds[COMM_DOOR_LOBBY_MAX];
    for (int i = 0; i < d->n; i++)
        fds[i] = (struct pollfd){.fd = d->conn[i], .events = POLLIN};
    if (d->n == 0 || poll(fds, (nfds_t)d->n, 0) <= 0)
        return;
    for (int i = d->n - 1; i >= 0; i--) {
        if (!fds[i].revents)
            continue;
        char b;
        ssize_t k = recv(d->conn[i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (k > 0)
            comm_store_refuse(d->conn[i], "sent more than a hello before its admission");
        util_log(AI_LOG_INFO, "join door: newcomer pid %d (%s) %s before a grow admitted it; dropped",
                 (int)d->entry[i].pid, d->entry[i].host, k > 0 ? "sent more than its hello" : "left");
        lobby_drop(d, i);
    }
}

ai_status_t comm_door_poll(ai_comm *c, comm_door *d, int ms, int *waiting)
{
    int lfd = d->fd >= 0 ? d->fd : c->tp->listen_fd;
    *waiting = 0;
    if (c->rank != 0)
        return AI_OK;
    if (lfd < 0) {
        if (ms > 0)
            util_sleep_us((long)ms * 1000);
        return AI_OK;
    }
    if (!d->gate) {
        if (!(d->gate = malloc(sizeof *d->gate)))
            return util_fail(AI_ERR_NOMEM, "join door");
        comm_gate_init(d->gate, lfd, "join door", d->job_key, hello_open, hello_admit,
                       comm_store_refuse, d);
    }
    d->gate->lfd = lfd;
    d->gate->arg = d;
    ai_status_t st = comm_gate_pass(d->gate, ms);
    lobby_sweep(d);
    *waiting = d->n;
    return st;
}

void comm_door_take(comm_door *d, int n, int *fds, comm_rank_info *entries)
{
    for (int i = 0; i < n; i++) {
        fds[i] = d->conn[i];
        entries[i] = d->entry[i];
    }
    memmove(&d->conn[0], &d->conn[n], (size_t)(d->n - n) * sizeof d->conn[0]);
    memmove(&d->entry[0], &d->entry[n], (size_t)(d->n - n) * sizeof d->entry[0]);
    d->n -= n;
}

void comm_door_move(ai_comm *from, ai_comm *to)
{
    comm_ft *ft;
    if (!from->ft || !from->ft->door || comm_ft_get(to, &ft) != AI_OK || ft->door)
        return;
    ft->door = from->ft->door;
    from->ft->door = NULL;
    /* Half-read hellos belong to the old listener's pass; they retry. */
    if (ft->door->gate) {
        comm_gate_close(ft->door->gate);
        free(ft->door->gate);
        ft->door->gate = NULL;
    }
}

ai_status_t comm_door_addr(const ai_comm *c, char *buf, size_t len)
{
    const char *list = util_param_str(UTIL_PARAM_JOIN_DOOR);
    if (list && *list) {
        if ((size_t)snprintf(buf, len, "%s", list) >= len)
            return util_fail(AI_ERR_INVALID, "ai_comm_join_addr: a buffer of %zu bytes is too short "
                             "for %s", len, DOOR_ENV);
        return AI_OK;
    }
    const comm_peer *p = &c->tp->peers[0];
    if (c->size == 1 && c->tp->listen_fd < 0)
        return util_fail(AI_ERR_UNSUPPORTED, "a communicator of one rank created alone has no join "
                         "door (set %s)", DOOR_ENV);
    char ip[INET_ADDRSTRLEN];
    uint32_t addr = p->addr ? p->addr : htonl(INADDR_LOOPBACK);
    inet_ntop(AF_INET, &addr, ip, sizeof ip);
    if ((size_t)snprintf(buf, len, "%s:%u", ip, (unsigned)p->port) >= len)
        return util_fail(AI_ERR_INVALID, "ai_comm_join_addr: a buffer of %zu bytes is too short",
                         len);
    return AI_OK;
}
