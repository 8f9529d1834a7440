/*
 * A listener's door: the connections it has accepted but not yet trusted.
 *
 * Anyone who can reach a port can connect, so nothing a stranger does may
 * keep a rank out: a connection gets COMM_GATE_DEADLINE_S to present a
 * whole first frame (with the job token, checked as soon as its bytes are
 * in), the table of untrusted connections is bounded, and when it is full
 * the oldest untrusted connection is dropped to make room rather than the
 * new one refused. A rank sends its first frame right after connecting, so
 * its bytes are read in the same pass that accepts it: a flood of idle
 * connections can at worst evict a rank before it is read, and the rank
 * retries. A connection that runs out of time is closed without an
 * answer, like an evicted one: a rank slowed down on the way retries,
 * while a frame that is wrong gets its reason back. Refusals are logged
 * individually only for the first few, then counted, so a flood cannot
 * fill the log either.
 */
#include "comm/transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define GATE_ACCEPTS_PER_PASS 64
#define GATE_LOGGED 4

void comm_gate_init(comm_gate *g, int lfd, const char *what, comm_gate_check check,
                    void (*answer)(int fd, const char *why), void *arg)
{
    memset(g, 0, sizeof *g);
    g->lfd = lfd;
    g->what = what;
    g->check = check;
    g->answer = answer;
    g->arg = arg;
}

static void peer_ip(int fd, char *ip, size_t n)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    snprintf(ip, n, "?");
    if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0)
        inet_ntop(AF_INET, &sa.sin_addr, ip, (socklen_t)n);
}

static void drop(comm_gate *g, int i, const char *why)
{
    comm_gate_conn *cn = &g->conns[i];
    if (why) {
        if (g->answer)
            g->answer(cn->fd, why);
        char ip[INET_ADDRSTRLEN];
        peer_ip(cn->fd, ip, sizeof ip);
        g->refused++;
        ai_log(g->refused <= GATE_LOGGED ? AI_LOG_WARN : AI_LOG_DEBUG,
               "%s refused a connection from %s: %s", g->what, ip, why);
    } else {
        g->dropped++;
    }
    close(cn->fd);
    g->conns[i] = g->conns[--g->n];
}

static void admit(comm_gate *g, int fd)
{
    if (g->n == COMM_GATE_MAX) {
        int oldest = 0;
        for (int i = 1; i < g->n; i++)
            if (g->conns[i].since < g->conns[oldest].since)
                oldest = i;
        drop(g, oldest, NULL);
    }
    g->conns[g->n++] = (comm_gate_conn){.fd = fd, .since = ai_now(), .ready = 1};
}

ai_status_t comm_gate_pass(comm_gate *g, int ms)
{
    struct pollfd fds[COMM_GATE_MAX + 1];
    fds[0] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
    for (int i = 0; i < g->n; i++)
        fds[i + 1] = (struct pollfd){.fd = g->conns[i].fd, .events = POLLIN};
    int n0 = g->n;
    if (poll(fds, (nfds_t)n0 + 1, ms) < 0 && errno != EINTR)
        return ai_fail(AI_ERR_IO, "poll: %s", strerror(errno));
    for (int i = 0; i < n0; i++)
        g->conns[i].ready = fds[i + 1].revents != 0;
    for (int k = 0; k < GATE_ACCEPTS_PER_PASS && (fds[0].revents & POLLIN); k++) {
        int fd = accept4(g->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            break;
        admit(g, fd);
    }
    double now = ai_now();
    for (int i = 0; i < g->n; i++) {
        comm_gate_conn *cn = &g->conns[i];
        const char *why = NULL;
        if (cn->ready && cn->got < sizeof cn->buf) {
            ssize_t k = recv(cn->fd, cn->buf + cn->got, sizeof cn->buf - cn->got, MSG_DONTWAIT);
            if (k > 0)
                cn->got += (size_t)k;
            else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                why = "closed before completing its first frame";
        }
        if (!why && cn->got > 0) {
            int verdict = g->check(g->arg, cn->fd, cn->buf, cn->got);
            if (verdict > 0) {
                g->conns[i--] = g->conns[--g->n]; /* the caller owns it now */
                continue;
            }
            if (verdict < 0)
                why = ai_last_error();
        }
        if (why)
            drop(g, i--, why);
        else if (now - cn->since > COMM_GATE_DEADLINE_S)
            drop(g, i--, NULL); /* no whole first frame in time */
    }
    return AI_OK;
}

void comm_gate_close(comm_gate *g)
{
    while (g->n > 0)
        close(g->conns[--g->n].fd);
    if (g->refused > GATE_LOGGED)
        ai_log(AI_LOG_WARN, "%s refused %u connections in all (the first %d logged)", g->what,
               g->refused, GATE_LOGGED);
    if (g->dropped)
        ai_log(AI_LOG_WARN, "%s dropped %u connections that sent no whole first frame within "
               "%.0f s or were the oldest when %d were waiting", g->what, g->dropped,
               COMM_GATE_DEADLINE_S, COMM_GATE_MAX);
}
