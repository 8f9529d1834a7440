/*
 * The job token is never shown in a form that can be replayed. A relay
 * between a rank and rank 0 (a man in the middle on loopback) records
 * every byte a legitimate rank sends, and the test then plays those bytes
 * to a later door that expects the same token:
 *  - rendezvous: rank 1's bytes from one job, played to the rendezvous of
 *    a second job with the same token, must not get the rank table (the
 *    second job's rank 0 times out with its rank 1 missing);
 *  - join door: a newcomer's bytes from one grow, played to the same
 *    communicator's join door at its next grow, must not be admitted (the
 *    grow times out with no newcomer);
 *  - a gate as the data listener runs it (the data and control
 *    connections' door): a connection that completes the handshake is
 *    admitted, its recorded bytes played on a new connection are not, nor
 *    is a proof made with another token's key.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "comm/comm.h"
#include "comm/transport/transport.h"
#include "comm/transport/wire.h"
#include "support/ranks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "auth-test-token"
#define TIMEOUT_S 10.0
#define REC_MAX 4096

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int listen_any(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A blocking connection to 127.0.0.1:port, retried until `until`. */
static int connect_until(int port, double until)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    while (now_s() < until) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        close(fd);
        sleep_ms(20);
    }
    return -1;
}

/* The relay: accepts connections on lfd, forwards each to `target`
 * (0: read the port from *target_port once it is set), and keeps what
 * the client of the last connection sent. */
typedef struct relay {
    int lfd;
    volatile int *target_port;
    volatile double until; /* 0: stop (set by another thread) */
    unsigned char rec[REC_MAX];
    size_t nrec;
    int connections;
} relay;

static void relay_one(relay *r, int cfd, int sfd)
{
    struct pollfd p[2] = {{.fd = cfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    r->nrec = 0;
    r->connections++;
    while (now_s() < r->until) {
        if (poll(p, 2, 100) < 0 && errno != EINTR)
            return;
        unsigned char b[4096];
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            ssize_t k = recv(p[i].fd, b, sizeof b, 0);
            if (k <= 0)
                return;
            if (i == 0 && r->nrec + (size_t)k <= REC_MAX) {
                memcpy(r->rec + r->nrec, b, (size_t)k);
                r->nrec += (size_t)k;
            }
            if (send(p[1 - i].fd, b, (size_t)k, MSG_NOSIGNAL) != k)
                return;
        }
    }
}

static void *relay_run(void *arg)
{
    relay *r = arg;
    while (now_s() < r->until) {
        struct pollfd p = {.fd = r->lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int cfd = accept(r->lfd, NULL, NULL);
        if (cfd < 0)
            continue;
        int port = 0;
        while (!(port = __atomic_load_n(r->target_port, __ATOMIC_ACQUIRE)) && now_s() < r->until)
            sleep_ms(5);
        int sfd = connect_until(port, r->until);
        if (sfd >= 0) {
            relay_one(r, cfd, sfd);
            close(sfd);
        }
        close(cfd);
    }
    return NULL;
}

/* Play rec to 127.0.0.1:port and collect the answer until the far side
 * closes or `wait_s` passes. Returns the answer's length. */
static size_t replay(const unsigned char *rec, size_t n, int port, double wait_s,
                     unsigned char *ans, size_t cap)
{
    double until = now_s() + wait_s;
    int fd = connect_until(port, until);
    if (fd < 0)
        return 0;
    (void)!send(fd, rec, n, MSG_NOSIGNAL);
    size_t got = 0;
    while (got < cap && now_s() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t k = recv(fd, ans + got, cap - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    return got;
}

/* Does b hold a store frame of `type` anywhere (a table, a join answer)? */
static int has_frame(const unsigned char *b, size_t n, uint16_t type)
{
    uint32_t magic = COMM_WIRE_STORE_MAGIC;
    for (size_t i = 0; i + COMM_WIRE_HDR <= n; i++) {
        uint16_t t;
        memcpy(&t, b + i + 6, 2);
        if (memcmp(b + i, &magic, 4) == 0 && t == type)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ rendezvous */

/* One rank of a job of two, in a child: 0 if it formed and an allreduce
 * was right, 10 + (its status) otherwise; with expect_timeout, 0 when
 * creation timed out with rank 1 missing. */
static int job_rank(int rank, int store_port, int expect_timeout)
{
    char host[32];
    snprintf(host, sizeof host, "auth-host%d", rank);
    ai_comm_config cfg = {.rank = rank, .size = 2, .store_host = "127.0.0.1",
                          .store_port = store_port, .token = TOKEN, .host_id = host,
                          .timeout_s = expect_timeout ? 3.0 : TIMEOUT_S};
    ai_comm *c = NULL;
    ai_status_t st = ai_comm_create(&cfg, &c);
    if (expect_timeout) {
        if (st == AI_ERR_TIMEOUT && strstr(ai_last_error(), "missing: 1"))
            return 0;
        fprintf(stderr, "second job's rank 0: %s (%s): the replayed hello got in\n",
                ai_strerror(st), st == AI_OK ? "formed" : ai_last_error());
        ai_comm_destroy(c);
        return 5;
    }
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, ai_last_error());
        return 6;
    }
    double v = rank + 1;
    st = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL);
    ai_comm_destroy(c);
    return st == AI_OK && v == 3 ? 0 : 7;
}

static int reap(pid_t pid, double wait_s)
{
    double end = now_s() + wait_s;
    int w;
    while (now_s() < end) {
        if (waitpid(pid, &w, WNOHANG) == pid)
            return WIFEXITED(w) ? WEXITSTATUS(w) : 100 + WTERMSIG(w);
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &w, 0);
    return -1;
}

static void test_rendezvous_replay(void **state)
{
    (void)state;
    int port_a = ranks_free_port(), proxy_port = 0;
    assert_true(port_a > 0);
    volatile int target = port_a;
    relay *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->lfd = listen_any(&proxy_port);
    assert_true(r->lfd >= 0);
    r->target_port = &target;
    r->until = now_s() + 30;
    fflush(NULL);
    pid_t p0 = fork();
    assert_true(p0 >= 0);
    if (p0 == 0)
        _exit(job_rank(0, port_a, 0));
    pid_t p1 = fork();
    assert_true(p1 >= 0);
    if (p1 == 0)
        _exit(job_rank(1, proxy_port, 0)); /* rank 1 reaches rank 0 through the relay */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, relay_run, r), 0);
    int rc0 = reap(p0, 30), rc1 = reap(p1, 30);
    r->until = 0;
    pthread_join(th, NULL);
    close(r->lfd);
    assert_int_equal(rc0, 0);
    assert_int_equal(rc1, 0);
    assert_true(r->nrec > 0);

    /* The same token, a later job: rank 1's recorded bytes must not make
     * their player rank 1. */
    int port_b = ranks_free_port();
    assert_true(port_b > 0);
    fflush(NULL);
    pid_t q0 = fork();
    assert_true(q0 >= 0);
    if (q0 == 0)
        _exit(job_rank(0, port_b, 1));
    unsigned char ans[8192];
    size_t n = replay(r->rec, r->nrec, port_b, 4.0, ans, sizeof ans);
    int table = has_frame(ans, n, COMM_WIRE_TABLE);
    int rc = reap(q0, 20);
    free(r);
    assert_false(table);
    assert_int_equal(rc, 0);
}

/* ------------------------------------------------------------- join door */

typedef struct shared {
    char addr[64];    /* rank 0's join door */
    int door_port;
    int phase;        /* 1: door known, 2: first grow done, 3: all done */
    int connections, played, admitted; /* the relay's and the replayer's */
} shared;

static int grow_members(ai_comm *c, void *arg)
{
    shared *s = arg;
    int rank = ai_comm_rank(c);
    if (rank == 0) {
        if (ai_comm_join_addr(c, s->addr, sizeof s->addr) != AI_OK)
            return 20;
        const char *colon = strrchr(s->addr, ':');
        __atomic_store_n(&s->door_port, atoi(colon + 1), __ATOMIC_RELEASE);
        __atomic_store_n(&s->phase, 1, __ATOMIC_RELEASE);
    }
    ai_comm *big = NULL;
    ai_status_t st = ai_comm_grow(c, 1, TIMEOUT_S, &big);
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: first grow: %s\n", rank, ai_last_error());
        return 21;
    }
    double v = 1;
    st = ai_allreduce(big, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL);
    ai_comm_destroy(big);
    if (st != AI_OK || v != 3)
        return 22;
    if (rank == 0)
        __atomic_store_n(&s->phase, 2, __ATOMIC_RELEASE);
    /* Only the replayer knocks now. */
    big = NULL;
    st = ai_comm_grow(c, 1, 3.0, &big);
    ai_comm_destroy(big);
    if (st != AI_ERR_TIMEOUT) {
        fprintf(stderr, "rank %d: grow with only a replayed join: %s (%s)\n", rank,
                ai_strerror(st), ai_last_error());
        return 23;
    }
    return 0;
}

static int join_newcomer(shared *s, int port)
{
    double end = now_s() + 30;
    while (__atomic_load_n(&s->phase, __ATOMIC_ACQUIRE) < 1 && now_s() < end)
        sleep_ms(1);
    char addr[64], token[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    snprintf(token, sizeof token, "ranks-test-%d", (int)getppid()); /* ranks.c's */
    ai_comm_config cfg = {.token = token, .host_id = "auth-new", .timeout_s = TIMEOUT_S};
    ai_comm *c = NULL;
    if (ai_comm_join(&cfg, addr, &c) != AI_OK) {
        fprintf(stderr, "newcomer: %s\n", ai_last_error());
        return 40;
    }
    double v = 1;
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL);
    ai_comm_destroy(c);
    return st == AI_OK && v == 3 ? 0 : 41;
}

/* The man in the middle, in a process of its own (the ranks are forked
 * while it runs): relays the newcomer's join, then plays its bytes to the
 * door during the members' second grow. */
static int middle_main(shared *s, relay *r)
{
    pthread_t th;
    if (pthread_create(&th, NULL, relay_run, r) != 0)
        return 1;
    double end = now_s() + 40;
    while (__atomic_load_n(&s->phase, __ATOMIC_ACQUIRE) < 2 && now_s() < end)
        sleep_ms(5);
    r->until = 0;
    pthread_join(th, NULL);
    s->connections = r->connections;
    if (r->nrec == 0 || now_s() >= end)
        return 0;
    sleep_ms(300); /* the members are in their second grow */
    unsigned char ans[8192];
    size_t n = replay(r->rec, r->nrec, s->door_port, 2.0, ans, sizeof ans);
    s->admitted = has_frame(ans, n, COMM_WIRE_JOINED);
    s->played = 1;
    return 0;
}

static void test_join_replay(void **state)
{
    (void)state;
    shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(s != MAP_FAILED);
    memset(s, 0, sizeof *s);
    relay *r = calloc(1, sizeof *r);
    assert_non_null(r);
    int proxy_port = 0;
    r->lfd = listen_any(&proxy_port);
    assert_true(r->lfd >= 0);
    r->target_port = &s->door_port;
    r->until = now_s() + 40;
    fflush(NULL);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0)
        _exit(join_newcomer(s, proxy_port)); /* through the relay */
    pid_t mid = fork();
    assert_true(mid >= 0);
    if (mid == 0)
        _exit(middle_main(s, r));
    close(r->lfd);
    free(r);
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 50};
    int rc = ranks_run(2, &o, grow_members, s);
    __atomic_store_n(&s->phase, 3, __ATOMIC_RELEASE);
    int krc = reap(kid, 20), mrc = reap(mid, 20);
    int connections = s->connections, played = s->played, admitted = s->admitted;
    munmap(s, sizeof *s);
    assert_int_equal(krc, 0);
    assert_int_equal(mrc, 0);
    assert_true(connections > 0);
    assert_true(played);
    assert_false(admitted);
    assert_int_equal(rc, 0);
}

/* ------------------------------------------------------------ data door */

typedef struct door {
    int admitted;
} door;

static int door_open_cb(void *arg, const unsigned char *b, size_t len)
{
    uint32_t from, to;
    uint16_t chan;
    size_t need;
    (void)arg;
    if (comm_wire_data_hello_parse(b, len, &from, &to, &chan, &need) != AI_OK)
        return -1;
    return need ? 0 : COMM_WIRE_DATA_HELLO;
}

static int door_admit_cb(void *arg, int fd, const unsigned char *b, size_t len)
{
    door *d = arg;
    (void)b;
    (void)len;
    d->admitted++;
    close(fd);
    return 1;
}

/* A client in a thread: the handshake by hand under `key`, keeping what
 * it sent; or, with `play`, only plays those bytes. */
typedef struct client {
    int port;
    const unsigned char *key;
    unsigned char sent[COMM_WIRE_DATA_HELLO + COMM_WIRE_PROOF];
    const unsigned char *play;
    int got_challenge;
} client;

static void *client_run(void *arg)
{
    client *cl = arg;
    int fd = connect_until(cl->port, now_s() + 5);
    if (fd < 0)
        return NULL;
    if (cl->play) {
        (void)!send(fd, cl->play, sizeof cl->sent, MSG_NOSIGNAL);
    } else {
        unsigned char nonce[COMM_WIRE_NONCE], ch[COMM_WIRE_CHALLENGE], mac[COMM_WIRE_MAC];
        unsigned char ns[COMM_WIRE_NONCE];
        size_t need;
        util_random_bytes(nonce, sizeof nonce);
        comm_wire_data_hello_pack(cl->sent, nonce, 1, 0, 0);
        (void)!send(fd, cl->sent, COMM_WIRE_DATA_HELLO, MSG_NOSIGNAL);
        if (comm_sock_read_full(fd, ch, sizeof ch, now_s() + 5) == AI_OK &&
            comm_wire_challenge_parse(ch, sizeof ch, ns, mac, &need) == AI_OK) {
            cl->got_challenge = 1;
            comm_auth_proof(mac, cl->key, 0, cl->sent, COMM_WIRE_DATA_HELLO, ns);
            comm_wire_proof_pack(cl->sent + COMM_WIRE_DATA_HELLO, mac);
            (void)!send(fd, cl->sent + COMM_WIRE_DATA_HELLO, COMM_WIRE_PROOF, MSG_NOSIGNAL);
        }
    }
    char sink[64];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 1500) > 0 && recv(fd, sink, sizeof sink, 0) > 0)
        ;
    close(fd);
    return NULL;
}

/* Run the gate until the client thread ends; how many it admitted. */
static int through_gate(comm_gate *g, door *d, client *cl)
{
    pthread_t th;
    int before = d->admitted;
    if (pthread_create(&th, NULL, client_run, cl) != 0)
        return -1;
    double end = now_s() + 2.0;
    while (now_s() < end && d->admitted == before)
        (void)comm_gate_pass(g, 20);
    pthread_join(th, NULL);
    return d->admitted - before;
}

static void test_data_door_replay(void **state)
{
    (void)state;
    unsigned char key[COMM_KEY_BYTES], other[COMM_KEY_BYTES];
    comm_token_key(TOKEN, key);
    comm_token_key("another token", other);
    int port = 0, lfd = listen_any(&port);
    assert_true(lfd >= 0);
    fcntl(lfd, F_SETFL, O_NONBLOCK); /* as comm_tcp_listen's: the gate accepts until EAGAIN */
    door d = {0};
    comm_gate *g = malloc(sizeof *g);
    assert_non_null(g);
    comm_gate_init(g, lfd, "test door", key, door_open_cb, door_admit_cb, NULL, &d);
    client good = {.port = port, .key = key};
    assert_int_equal(through_gate(g, &d, &good), 1);
    assert_true(good.got_challenge);
    client again = {.port = port, .play = good.sent};
    assert_int_equal(through_gate(g, &d, &again), 0);
    client wrong = {.port = port, .key = other};
    assert_int_equal(through_gate(g, &d, &wrong), 0);
    assert_true(wrong.got_challenge);
    assert_int_equal(g->refused, 2);
    comm_gate_close(g);
    free(g);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rendezvous_replay),
        cmocka_unit_test(test_join_replay),
        cmocka_unit_test(test_data_door_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
