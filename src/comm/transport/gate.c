/*
 * A listener's door: the connections it has accepted but not yet trusted,
 * and the job token's challenge-response (wire.h) that earns the trust.
 *
 * A connecting rank opens with a frame carrying a fresh nonce; the door
 * judges its layout and claims (door's open callback), answers with a
 * challenge (its own fresh nonce and its proof of the key), and admits the
 * connection (admit callback) once the rank's proof over the opening and
 * that nonce is right. A proof is a MAC, so it shows nothing of the key,
 * and the door's nonce is new for every connection, so bytes recorded
 * from one connection prove nothing on the next.
 *
 * Anyone who can reach a port can connect, so nothing a stranger does may
 * keep a rank out: a connection gets COMM_GATE_DEADLINE_S from its accept
 * to complete the handshake, the table of untrusted connections is
 * bounded, and when it is full a connection is dropped to make room
 * rather than the new one refused: the oldest of those that have not yet
 * presented a whole, valid opening, else the oldest. A rank sends its
 * opening right after connecting, so its bytes are read, and challenged,
 * in the same pass that accepts it: a flood of idle connections can at
 * worst evict a rank before it is read, and the rank retries. A
 * connection that runs out of time is closed without an answer, like an
 * evicted one: a rank slowed down on the way retries, while a frame or a
 * proof that is wrong gets its reason back. Refusals are logged
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

#include "comm/transport/wire.h"

void comm_gate_init(comm_gate *g, int lfd, const char *what, const unsigned char *key,
                    comm_gate_open open, comm_gate_admit admit,
                    void (*answer)(int fd, const char *why), void *arg)
{
    memset(g, 0, sizeof *g);
    g->lfd = lfd;
    g->what = what;
    g->key = key;
    g->open = open;
    g->admit = admit;
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
        util_log(g->refused <= GATE_LOGGED ? AI_LOG_WARN : AI_LOG_DEBUG,
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
        for (int i = 1; i < g->n; i++) {
            const comm_gate_conn *a = &g->conns[i], *o = &g->conns[oldest];
            if (a->challenged < o->challenged ||
                (a->challenged == o->challenged && a->since < o->since))
                oldest = i;
        }
        drop(g, oldest, NULL);
    }
    comm_gate_conn *cn = &g->conns[g->n++];
    cn->fd = fd;
    cn->ready = 1;
    cn->challenged = 0;
    cn->got = cn->opening = 0;
    cn->since = ai_now();
}

/* The labels that keep the two sides' proofs apart. */
static const char label_acceptor[] = "autoinfra door: acceptor";
static const char label_connector[] = "autoinfra door: connector";

static void proof_parts(ai_mac_part parts[3], int accept, const unsigned char *opening, size_t n,
                        const unsigned char *nonce)
{
    parts[0] = accept ? (ai_mac_part){label_acceptor, sizeof label_acceptor}
                      : (ai_mac_part){label_connector, sizeof label_connector};
    parts[1] = (ai_mac_part){opening, n};
    parts[2] = (ai_mac_part){nonce, AI_NONCE_BYTES};
}

void comm_auth_proof(unsigned char mac[AI_MAC_BYTES], const unsigned char *key, int accept,
                     const unsigned char *opening, size_t n,
                     const unsigned char nonce[AI_NONCE_BYTES])
{
    ai_mac_part parts[3];
    proof_parts(parts, accept, opening, n, nonce);
    util_mac(mac, key, parts, 3);
}

static int proof_right(const unsigned char mac[AI_MAC_BYTES], const unsigned char *key, int accept,
                       const unsigned char *opening, size_t n, const unsigned char *nonce)
{
    ai_mac_part parts[3];
    proof_parts(parts, accept, opening, n, nonce);
    return util_mac_verify(mac, key, parts, 3);
}

ai_status_t comm_auth_connect(int fd, const unsigned char *key, const unsigned char *opening,
                              size_t n, double deadline, int *challenged,
                              unsigned char first[COMM_AUTH_PEEK])
{
    unsigned char ch[COMM_WIRE_CHALLENGE], nonce[AI_NONCE_BYTES], mac[AI_MAC_BYTES];
    size_t need;
    *challenged = 0;
    ai_status_t st = comm_sock_write_full(fd, opening, n, deadline);
    if (st == AI_OK)
        st = comm_sock_read_full(fd, ch, COMM_AUTH_PEEK, deadline);
    if (st != AI_OK)
        return st;
    uint32_t magic;
    memcpy(&magic, ch, 4);
    if (magic != COMM_WIRE_CHALLENGE_MAGIC) {
        memcpy(first, ch, COMM_AUTH_PEEK);
        return AI_OK;
    }
    if ((st = comm_sock_read_full(fd, ch + COMM_AUTH_PEEK, sizeof ch - COMM_AUTH_PEEK,
                                  deadline)) != AI_OK)
        return st;
    if (comm_wire_challenge_parse(ch, sizeof ch, nonce, mac, &need) != AI_OK)
        return AI_ERR_PROTO;
    if (!proof_right(mac, key, 1, opening, n, nonce))
        return util_fail(AI_ERR_PROTO, "refused: wrong job token (the peer's proof does not match "
                         "this rank's: another job, or ranks given different AUTOINFRA_TOKEN values)");
    unsigned char pf[COMM_WIRE_PROOF];
    comm_auth_proof(mac, key, 0, opening, n, nonce);
    comm_wire_proof_pack(pf, mac);
    if ((st = comm_sock_write_full(fd, pf, sizeof pf, deadline)) != AI_OK)
        return st;
    *challenged = 1;
    return AI_OK;
}

/* Judge what connection cn has sent: 1 admitted (the callback owns its fd
 * now), 0 wait for more, -1 refused (ai_last_error), -2 dropped without
 * an answer. */
static int judge(comm_gate *g, comm_gate_conn *cn)
{
    if (!cn->challenged) {
        int n = g->open(g->arg, cn->buf, cn->got);
        if (n <= 0)
            return n;
        unsigned char frame[COMM_WIRE_CHALLENGE], mac[AI_MAC_BYTES];
        cn->opening = (size_t)n;
        util_random_bytes(cn->nonce, sizeof cn->nonce);
        comm_auth_proof(mac, g->key, 1, cn->buf, cn->opening, cn->nonce);
        comm_wire_challenge_pack(frame, cn->nonce, mac);
        /* The socket is fresh: the challenge fits its buffer, or the peer
         * is not reading and is dropped. */
        if (send(cn->fd, frame, sizeof frame, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof frame)
            return -2;
        cn->challenged = 1;
    }
    unsigned char mac[AI_MAC_BYTES];
    size_t need;
    if (cn->got <= cn->opening)
        return 0;
    if (comm_wire_proof_parse(cn->buf + cn->opening, cn->got - cn->opening, mac, &need) != AI_OK)
        return -1;
    if (need)
        return 0;
    if (!proof_right(mac, g->key, 0, cn->buf, cn->opening, cn->nonce))
        return util_fail(AI_ERR_PROTO, "wrong job token (its proof does not match)"), -1;
    return g->admit(g->arg, cn->fd, cn->buf, cn->opening);
}

ai_status_t comm_gate_pass(comm_gate *g, int ms)
{
    struct pollfd fds[COMM_GATE_MAX + 1];
    fds[0] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
    for (int i = 0; i < g->n; i++)
        fds[i + 1] = (struct pollfd){.fd = g->conns[i].fd, .events = POLLIN};
    int n0 = g->n;
    if (poll(fds, (nfds_t)n0 + 1, ms) < 0 && errno != EINTR)
        return util_fail(AI_ERR_IO, "poll: %s", strerror(errno));
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
                why = "closed before completing the handshake";
        }
        if (!why && cn->got > 0) {
            int verdict = judge(g, cn);
            if (verdict > 0) {
                g->conns[i--] = g->conns[--g->n]; /* the caller owns it now */
                continue;
            }
            if (verdict == -2) {
                drop(g, i--, NULL);
                continue;
            }
            if (verdict < 0)
                why = ai_last_error();
        }
        if (why)
            drop(g, i--, why);
        else if (now - cn->since > COMM_GATE_DEADLINE_S)
            drop(g, i--, NULL); /* no handshake in time */
    }
    return AI_OK;
}

void comm_gate_close(comm_gate *g)
{
    while (g->n > 0)
        close(g->conns[--g->n].fd);
    if (g->refused > GATE_LOGGED)
        util_log(AI_LOG_WARN, "%s refused %u connections in all (the first %d logged)", g->what,
                 g->refused, GATE_LOGGED);
    if (g->dropped)
        util_log(AI_LOG_WARN, "%s dropped %u connections that did not complete the handshake within "
                 "%.0f s or were the oldest when %d were waiting", g->what, g->dropped,
                 COMM_GATE_DEADLINE_S, COMM_GATE_MAX);
}
