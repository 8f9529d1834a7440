/*
 * Hostile and careless connections: a job must form and finish, with every
 * result checked, while strangers on loopback hold hundreds of idle
 * connections, send garbage and send hellos with a wrong proof of the token, to the
 * rendezvous store and to every rank's data listener, during rendezvous
 * and during the collectives that follow. And the data listener listens
 * only on the job's address (127.0.0.1), not on every interface
 * (127.0.0.2, also loopback, must not reach it).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "comm/transport/wire.h"
#include "support/ranks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NRANKS 4
#define STORE_FLOOD 300   /* connections the outside flooder keeps open */
#define DATA_FLOOD 160    /* per rank, to its own data listener */
#define COUNT 4096
#define ITERS 40

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A non-blocking connect to ip:port; the fd or -1. */
static int open_to(const char *ip, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* What the i-th hostile connection says: nothing (most), garbage, or a
 * well-formed hello followed by a proof it cannot have (the wrong token). */
static void misbehave(int fd, int i, int data)
{
    unsigned char b[COMM_WIRE_HELLO_FRAME + COMM_WIRE_PROOF], nonce[COMM_WIRE_NONCE] = {1};
    unsigned char mac[COMM_WIRE_MAC] = {2};
    size_t n;
    switch (i % 8) {
    case 1:
        (void)!send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL | MSG_DONTWAIT);
        break;
    case 2:
        if (data) {
            comm_wire_data_hello_pack(b, nonce, 3, 0, 0);
            n = COMM_WIRE_DATA_HELLO;
        } else {
            comm_rank_info e = {0};
            comm_wire_hello_pack(b, 1, NRANKS, nonce, &e);
            n = COMM_WIRE_HELLO_FRAME;
        }
        comm_wire_proof_pack(b + n, mac);
        (void)!send(fd, b, n + COMM_WIRE_PROOF, MSG_NOSIGNAL | MSG_DONTWAIT);
        break;
    case 3:
        (void)!send(fd, "AIBS", 3, MSG_NOSIGNAL | MSG_DONTWAIT); /* a valid start, then silence */
        break;
    default:
        break;
    }
}

/* Keep n connections to ip:port open, replacing any the far side closes,
 * until *stop (or forever). */
typedef struct flood {
    const char *ip;
    int port;     /* 0: find this process's data listener */
    int store_port;
    int n, data;
    atomic_int stop;
    atomic_int found_port;
    atomic_int wide_open; /* 127.0.0.2 reached the data listener */
} flood;

/* This process's listening TCP socket other than the store: the data
 * listener, while ai_comm_create runs. */
static int own_listener(int store_port)
{
    for (int fd = 3; fd < 4096; fd++) {
        int on = 0;
        socklen_t len = sizeof on;
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) != 0 || !on)
            continue;
        if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || sa.sin_family != AF_INET)
            continue;
        if (ntohs(sa.sin_port) != store_port)
            return ntohs(sa.sin_port);
    }
    return 0;
}

static void *flood_run(void *arg)
{
    flood *f = arg;
    int *fds = malloc((size_t)f->n * sizeof *fds);
    for (int i = 0; i < f->n; i++)
        fds[i] = -1;
    int port = f->port;
    for (int round = 0; !atomic_load(&f->stop); round++) {
        if (!port) {
            port = own_listener(f->store_port);
            if (port) {
                atomic_store(&f->found_port, port);
                int probe = open_to("127.0.0.2", port);
                struct pollfd pfd = {.fd = probe, .events = POLLOUT};
                int err = 0;
                socklen_t el = sizeof err;
                if (probe >= 0 && poll(&pfd, 1, 200) == 1 &&
                    getsockopt(probe, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
                    atomic_store(&f->wide_open, 1);
                if (probe >= 0)
                    close(probe);
            } else {
                sleep_ms(1);
                continue;
            }
        }
        for (int i = 0; i < f->n; i++) {
            if (fds[i] >= 0) {
                char sink[64];
                ssize_t k = recv(fds[i], sink, sizeof sink, MSG_DONTWAIT);
                if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
                    continue;
                close(fds[i]); /* the far side dropped it: come back */
            }
            fds[i] = open_to(f->ip, port);
            if (fds[i] >= 0)
                misbehave(fds[i], i + round, f->store_port != port);
        }
        /* During the collectives (listeners closed) keep knocking on the
         * store's port too. */
        int knock = open_to(f->ip, f->store_port);
        if (knock >= 0)
            close(knock);
        sleep_ms(2);
    }
    for (int i = 0; i < f->n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return NULL;
}

/* One rank, in a child: flood its own data listener from a thread while it
 * creates the communicator and runs checked collectives. */
static int rank_main(int rank, int port)
{
    flood f = {.ip = "127.0.0.1", .port = 0, .store_port = port, .n = DATA_FLOOD};
    pthread_t th;
    if (pthread_create(&th, NULL, flood_run, &f) != 0)
        return 80;
    char host[32];
    snprintf(host, sizeof host, "hostile%d", rank);
    ai_comm_config cfg = {.rank = rank, .size = NRANKS, .store_host = "127.0.0.1",
                          .store_port = port, .token = "hostile-test", .host_id = host,
                          .timeout_s = 10};
    ai_comm *c = NULL;
    double t0 = ai_now();
    ai_status_t st = ai_comm_create(&cfg, &c);
    double took = ai_now() - t0;
    int rc = 0;
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: create failed after %.2f s: %s\n", rank, took, ai_last_error());
        rc = 81;
        goto out;
    }
    if (took > 5.0) {
        fprintf(stderr, "rank %d: create took %.2f s\n", rank, took);
        rc = 82;
    }
    float *buf = malloc(COUNT * sizeof *buf);
    for (int it = 0; it < ITERS && rc == 0 && buf; it++) {
        for (int i = 0; i < COUNT; i++)
            buf[i] = (float)(rank + 1) * (float)(i % 7 + it);
        st = ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, NULL);
        if (st != AI_OK) {
            fprintf(stderr, "rank %d: allreduce %d: %s\n", rank, it, ai_last_error());
            rc = 83;
            break;
        }
        for (int i = 0; i < COUNT; i++)
            if (buf[i] != (float)(NRANKS * (NRANKS + 1) / 2) * (float)(i % 7 + it)) {
                fprintf(stderr, "rank %d: allreduce %d: element %d is %g\n", rank, it, i, buf[i]);
                rc = 84;
                break;
            }
    }
    free(buf);
    ai_comm_destroy(c);
out:
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    if (rc == 0 && !atomic_load(&f.found_port)) {
        fprintf(stderr, "rank %d: never saw its data listener to flood it\n", rank);
        rc = 85;
    }
    if (rc == 0 && atomic_load(&f.wide_open)) {
        fprintf(stderr, "rank %d: its data listener accepts connections on 127.0.0.2\n", rank);
        rc = 86;
    }
    return rc;
}

static int reap(pid_t pid, double deadline_s)
{
    double end = ai_now() + deadline_s;
    int status;
    while (ai_now() < end) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static void test_job_forms_under_flood(void **state)
{
    (void)state;
    int port = ranks_free_port();
    assert_true(port > 0);
    pid_t pids[NRANKS], flooder;
    fflush(NULL);
    pids[0] = fork();
    assert_true(pids[0] >= 0);
    if (pids[0] == 0)
        exit(rank_main(0, port));
    sleep_ms(200); /* rank 0's store is up */
    flooder = fork();
    assert_true(flooder >= 0);
    if (flooder == 0) {
        flood f = {.ip = "127.0.0.1", .port = port, .store_port = port, .n = STORE_FLOOD};
        flood_run(&f); /* until killed */
        _exit(0);
    }
    sleep_ms(300); /* the store's table is full of strangers */
    for (int r = 1; r < NRANKS; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0)
            exit(rank_main(r, port));
    }
    int rc[NRANKS];
    for (int r = 0; r < NRANKS; r++)
        rc[r] = reap(pids[r], 40);
    kill(flooder, SIGKILL);
    waitpid(flooder, NULL, 0);
    for (int r = 0; r < NRANKS; r++) {
        if (rc[r] != 0)
            fprintf(stderr, "rank %d exited with %d\n", r, rc[r]);
        assert_int_equal(rc[r], 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_forms_under_flood),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
