/*
 * Communicator set-up and failure handling: dead and stalled peers, wrong
 * tokens, garbage and wrong versions on the rendezvous port, mismatched
 * collective arguments, rendezvous timeouts, environment parsing. Every
 * case must end in a clear error within the timeout, never a hang.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"
#include "util/util.h"

#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define COUNT (256 * 1024)

/* --------------------------------------------------------- dead peers */

typedef struct fail_case {
    int victim;
    const char *how; /* "kill" or "stall" */
    double timeout_s;
    size_t count;    /* elements per call (0: COUNT) */
} fail_case;

/* Everyone but the victim runs allreduces until one fails; it must fail
 * with a peer or timeout error, soon enough, and every later call must
 * fail at once with AI_ERR_ABORTED. */
static int failure_body(ai_comm *c, void *arg)
{
    const fail_case *fc = arg;
    int rank = ai_comm_rank(c);
    float *buf = calloc(COUNT, sizeof *buf);
    if (!buf)
        return 90;
    /* One good call first: the victim fails mid-job, not during set-up. */
    if (ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, NULL) != AI_OK) {
        fprintf(stderr, "rank %d: first allreduce failed: %s\n", rank, ai_last_error());
        free(buf);
        return 91;
    }
    /* ... on every rank: the victim must not die while a peer still reads
     * its part of that call. */
    if (ai_barrier(c, NULL) != AI_OK) {
        free(buf);
        return 91;
    }
    if (rank == fc->victim) {
        free(buf);
        if (!strcmp(fc->how, "kill"))
            raise(SIGKILL);
        sleep((unsigned)(fc->timeout_s * 3 + 2)); /* stalled, then leaves quietly */
        return 0;
    }
    double t0 = ai_now();
    ai_status_t st = AI_OK;
    for (int i = 0; i < 1000 && st == AI_OK; i++)
        st = ai_allreduce(c, AI_IN_PLACE, buf, fc->count ? fc->count : COUNT, AI_F32, AI_SUM, NULL);
    double took = ai_now() - t0;
    free(buf);
    fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, ai_strerror(st), took, ai_last_error());
    if (st != AI_ERR_PEER && st != AI_ERR_TIMEOUT)
        return 92;
    /* A dead process is noticed without waiting for the timeout; a stall
     * costs one timeout plus the spread of the abort. */
    double limit = !strcmp(fc->how, "kill") ? fc->timeout_s * 0.75 : fc->timeout_s * 1.5 + 1.0;
    if (took > limit) {
        fprintf(stderr, "rank %d: took %.2f s, limit %.2f s\n", rank, took, limit);
        return 93;
    }
    t0 = ai_now();
    float x = 0;
    if (ai_allreduce(c, &x, &x, 1, AI_F32, AI_SUM, NULL) != AI_ERR_ABORTED || ai_now() - t0 > 0.1)
        return 94;
    if (!strstr(ai_last_error(), "failed earlier"))
        return 95;
    return 0;
}

static void run_failure_count(int n, int nhosts, const char *how, int victim, size_t count)
{
    fail_case fc = {.victim = victim, .how = how, .timeout_s = 4.0, .count = count};
    int status[8];
    ranks_opts o = {.nhosts = nhosts, .timeout_s = fc.timeout_s, .deadline_s = 40,
                    .keep_going = 1, .status = status};
    ranks_run(n, &o, failure_body, &fc);
    for (int r = 0; r < n; r++) {
        if (r == victim)
            assert_int_equal(status[r], !strcmp(how, "kill") ? RANKS_SIGNAL_BASE + SIGKILL : 0);
        else
            assert_int_equal(status[r], 0);
    }
}

static void run_failure(int n, int nhosts, const char *how, int victim)
{
    run_failure_count(n, nhosts, how, victim, 0);
}

static void test_killed_peer_shm(void **state) { run_failure(4, 0, "kill", 2); }
/* 2 floats: the shared-slot allreduce ("direct", auto's choice on one host). */
static void test_killed_peer_direct(void **state) { run_failure_count(4, 0, "kill", 1, 2); }
static void test_stalled_peer_direct(void **state) { run_failure_count(3, 0, "stall", 2, 2); }
static void test_killed_peer_tcp(void **state) { run_failure(4, 4, "kill", 1); }
static void test_killed_peer_mixed(void **state) { run_failure(6, 2, "kill", 4); }
static void test_stalled_peer_shm(void **state) { run_failure(3, 0, "stall", 1); }
static void test_stalled_peer_tcp(void **state) { run_failure(4, 2, "stall", 3); }

/* ---------------------------------------------------- mismatched calls */

static int mismatch_body(ai_comm *c, void *arg)
{
    const char *algo = arg ? arg : "ring";
    int rank = ai_comm_rank(c);
    size_t count = rank == 0 ? 1000 : 2000;
    float *buf = calloc(2000, sizeof *buf);
    ai_algo_opts o = {.algo = algo};
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, buf, count, AI_F32, AI_SUM, &o);
    free(buf);
    fprintf(stderr, "rank %d: %s: %s\n", rank, ai_strerror(st), ai_last_error());
    /* Whoever sees the wrong length reports a protocol error; the others
     * learn of it through the abort. Nobody hangs or succeeds. */
    if (st == AI_ERR_PROTO)
        return strstr(ai_last_error(), "differ between ranks") ||
                       strstr(ai_last_error(), "different collectives or arguments")
                   ? 0
                   : 81;
    return st == AI_ERR_PEER || st == AI_ERR_TIMEOUT ? 0 : 82;
}

static void test_mismatched_counts(void **state)
{
    ranks_opts o = {.timeout_s = 3, .deadline_s = 20, .keep_going = 1};
    assert_int_equal(ranks_run(2, &o, mismatch_body, NULL), 0);
    ranks_opts t = {.nhosts = 2, .timeout_s = 3, .deadline_s = 20, .keep_going = 1};
    assert_int_equal(ranks_run(3, &t, mismatch_body, NULL), 0);
    /* The shared slots compare the ranks' descriptions of the call. */
    assert_int_equal(ranks_run(3, &o, mismatch_body, "direct"), 0);
    /* So do single_copy's exchanges, before anyone reads another's buffer. */
    assert_int_equal(ranks_run(3, &o, mismatch_body, "single_copy"), 0);
}

/* ------------------------------------------------------------- waiting */

/* A rank waiting for a peer that sleeps 1 s must block, not spin: it may
 * use a small share of that second's CPU (spinning, then yielding, then
 * asleep in a futex woken by the peer's move). Both the message engine
 * (recursive_doubling) and the shared slots (direct). With `toggle`,
 * another thread of rank 0 sets the wait mode (ai_comm_set_block_waits)
 * back and forth meanwhile, as the torch backend's callers do: the wait
 * takes either mode up, still ends with the right sum, and still blocks
 * (after at most the default 200 us of yielding). */
typedef struct idle_case {
    const char *algo;
    int toggle;
} idle_case;

typedef struct toggler {
    ai_comm *c;
    _Atomic int stop;
    int flips;
} toggler;

static void *toggle_body(void *arg)
{
    toggler *t = arg;
    while (!atomic_load(&t->stop)) {
        ai_comm_set_block_waits(t->c, t->flips++ & 1);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static double thread_cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

static int idle_body(ai_comm *c, void *arg)
{
    const idle_case *k = arg;
    ai_algo_opts o = {.algo = k->algo};
    int rank = ai_comm_rank(c), size = ai_comm_size(c);
    float x = 1;
    if (ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, &o) != AI_OK)
        return 70;
    toggler t = {.c = c};
    pthread_t th;
    int toggling = k->toggle && rank == 0;
    if (toggling && pthread_create(&th, NULL, toggle_body, &t) != 0)
        return 74;
    if (rank == size - 1) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    double cpu0 = thread_cpu_s(), t0 = ai_now();
    x = (float)rank;
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, &o);
    double wall = ai_now() - t0, cpu = thread_cpu_s() - cpu0;
    if (toggling) {
        atomic_store(&t.stop, 1);
        pthread_join(th, NULL);
    }
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, ai_last_error());
        return 71;
    }
    if (x != (float)(size * (size - 1) / 2))
        return 72;
    if (rank == 0) {
        fprintf(stderr, "%s, %d ranks: waited %.3f s using %.3f s of CPU, wait mode set %d times\n",
                k->algo, size, wall, cpu, t.flips);
        if (wall < 0.9 || cpu > 0.05 || (k->toggle && t.flips < 10))
            return 73;
    }
    return 0;
}

static void test_wait_blocks(void **state)
{
    (void)state;
    ranks_opts o = {.timeout_s = 10, .deadline_s = 30};
    idle_case rd = {"recursive_doubling", 0}, direct = {"direct", 0};
    assert_int_equal(ranks_run(2, &o, idle_body, &rd), 0);
    assert_int_equal(ranks_run(2, &o, idle_body, &direct), 0);
    assert_int_equal(ranks_run(4, &o, idle_body, &direct), 0);
}

static void test_wait_mode_switched_during_wait(void **state)
{
    (void)state;
    ranks_opts o = {.timeout_s = 10, .deadline_s = 30};
    idle_case rd = {"recursive_doubling", 1}, direct = {"direct", 1};
    assert_int_equal(ranks_run(2, &o, idle_body, &rd), 0);
    assert_int_equal(ranks_run(3, &o, idle_body, &direct), 0);
}

/* ------------------------------------------------- rendezvous defences */

/* One rank of a job, in a child: create, one allreduce, check, exit code. */
static int child_rank(int rank, int size, int port, const char *token, double timeout_s,
                      ai_status_t want_create)
{
    ai_comm_config cfg = {.rank = rank, .size = size, .store_host = "127.0.0.1",
                          .store_port = port, .token = token, .timeout_s = timeout_s};
    ai_comm *c = NULL;
    ai_status_t st = ai_comm_create(&cfg, &c);
    if (st != want_create) {
        fprintf(stderr, "rank %d (token %s): create gave %s: %s\n", rank, token, ai_strerror(st),
                ai_last_error());
        return 71;
    }
    if (st != AI_OK) {
        fprintf(stderr, "rank %d (token %s) refused as expected: %s\n", rank, token, ai_last_error());
        if (st == AI_ERR_PROTO && !strstr(ai_last_error(), "wrong job token"))
            return 72;
        return 0;
    }
    int32_t x = rank + 1;
    st = ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_I32, AI_SUM, NULL);
    ai_comm_destroy(c);
    return st == AI_OK && x == size * (size + 1) / 2 ? 0 : 73;
}

static pid_t spawn_rank(int rank, int size, int port, const char *token, double timeout_s,
                        ai_status_t want)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child_rank(rank, size, port, token, timeout_s, want));
    return pid;
}

static int reap(pid_t pid, double deadline_s)
{
    double end = ai_now() + deadline_s;
    int status;
    while (ai_now() < end) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static int connect_store(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)port)};
    for (int i = 0; i < 500; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        close(fd);
        usleep(10000);
    }
    return -1;
}

/* Read the store's answer (bounded) and return whether it contains `what`. */
static int answer_contains(int fd, const char *what)
{
    char buf[512];
    size_t got = 0;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    /* Skip the 12-byte frame header. */
    return got > 12 && strstr(buf + 12, what) != NULL;
}

static void test_wrong_token_refused(void **state)
{
    int port = ranks_free_port();
    /* rank 0 and 2 legitimate; an intruder claims rank 1 with another
     * token and is refused; the real rank 1 arrives later and the job
     * forms. */
    pid_t r0 = spawn_rank(0, 3, port, "good", 10, AI_OK);
    pid_t r2 = spawn_rank(2, 3, port, "good", 10, AI_OK);
    pid_t bad = spawn_rank(1, 3, port, "evil", 10, AI_ERR_PROTO);
    assert_int_equal(reap(bad, 15), 0);
    pid_t r1 = spawn_rank(1, 3, port, "good", 10, AI_OK);
    assert_int_equal(reap(r0, 15), 0);
    assert_int_equal(reap(r1, 15), 0);
    assert_int_equal(reap(r2, 15), 0);
}

static void test_garbage_and_versions_refused(void **state)
{
    int port = ranks_free_port();
    pid_t r0 = spawn_rank(0, 2, port, "tok", 10, AI_OK);
    /* 1: an HTTP request. */
    int fd = connect_store(port);
    assert_true(fd >= 0);
    const char *http = "GET / HTTP/1.0\r\n\r\n";
    assert_int_equal(send(fd, http, strlen(http), 0), (ssize_t)strlen(http));
    assert_true(answer_contains(fd, "not an autoinfra peer"));
    close(fd);
    /* 2: a frame with the right magic and protocol version 99. */
    fd = connect_store(port);
    unsigned char frame[12] = {'A', 'I', 'B', 'S', 99, 0, 1, 0, 88, 0, 0, 0};
    assert_int_equal(send(fd, frame, sizeof frame, 0), (ssize_t)sizeof frame);
    assert_true(answer_contains(fd, "wrong protocol version"));
    close(fd);
    /* 3: a connection that never speaks, left open while the job forms. */
    int silent = connect_store(port);
    assert_true(silent >= 0);
    pid_t r1 = spawn_rank(1, 2, port, "tok", 10, AI_OK);
    assert_int_equal(reap(r0, 15), 0);
    assert_int_equal(reap(r1, 15), 0);
    close(silent);
}

static void test_rendezvous_timeout(void **state)
{
    int port = ranks_free_port();
    double t0 = ai_now();
    pid_t r0 = fork();
    assert_true(r0 >= 0);
    if (r0 == 0) {
        ai_comm_config cfg = {.rank = 0, .size = 2, .store_host = "127.0.0.1",
                              .store_port = port, .token = "t", .timeout_s = 1.0};
        ai_comm *c;
        ai_status_t st = ai_comm_create(&cfg, &c);
        fprintf(stderr, "%s\n", ai_last_error());
        _exit(st == AI_ERR_TIMEOUT && strstr(ai_last_error(), "missing: 1") ? 0 : 1);
    }
    assert_int_equal(reap(r0, 10), 0);
    assert_true(ai_now() - t0 < 4.0);
    /* And a rank whose rank 0 never shows up. */
    t0 = ai_now();
    ai_comm_config cfg = {.rank = 1, .size = 2, .store_host = "127.0.0.1",
                          .store_port = ranks_free_port(), .token = "t", .timeout_s = 1.0};
    ai_comm *c;
    assert_int_equal(ai_comm_create(&cfg, &c), AI_ERR_TIMEOUT);
    assert_non_null(strstr(ai_last_error(), "rendezvous store"));
    assert_true(ai_now() - t0 < 3.0);
}

/* ------------------------------------------------------- environment */

/* Slurm's hostlists: the first host, zero padding kept. */
static void test_hostlist_first(void **state)
{
    static const char *const ok[][2] = {
        {"n0", "n0"},           {"n[0-3]", "n0"},         {"gpu[003-010,012],login1", "gpu003"},
        {"a,b", "a"},           {"rack1-[7]x", "rack1-7x"}, {"node[12,4-5]", "node12"},
    };
    (void)state;
    char out[64];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (util_hostlist_first(ok[i][0], out, sizeof out) != AI_OK)
            fail_msg("'%s' refused: %s", ok[i][0], ai_last_error());
        assert_string_equal(out, ok[i][1]);
    }
    static const char *const bad[] = {"", ",a", "[1-2]", "n[", "n[x]", "n[1-2", "a[1]b[2]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strcpy(out, "kept");
        if (util_hostlist_first(bad[i], out, sizeof out) == AI_OK)
            fail_msg("'%s' accepted as '%s'", bad[i], out);
        assert_string_equal(out, "kept");
        assert_non_null(strstr(ai_last_error(), bad[i]));
    }
    assert_int_equal(util_hostlist_first("abcdefgh[1]", out, 4), AI_ERR_INVALID);
}

static void test_env_parsing(void **state)
{
    ai_comm *c = NULL;
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("SLURM_PROCID");
    setenv("AUTOINFRA_RANK", "0", 1);
    setenv("AUTOINFRA_SIZE", "abc", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_SIZE"));
    setenv("AUTOINFRA_SIZE", "2", 1);
    setenv("AUTOINFRA_RANK", "2", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
    setenv("AUTOINFRA_RANK", "0", 1);
    setenv("AUTOINFRA_ADDR", "nocolon", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_ADDR"));
    setenv("AUTOINFRA_ADDR", "127.0.0.1:1", 1);
    setenv("AUTOINFRA_TIMEOUT", "soon", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_TIMEOUT"));
    unsetenv("AUTOINFRA_TIMEOUT");
    unsetenv("AUTOINFRA_ADDR");
    /* A job of one, with nothing set: works without any network. */
    unsetenv("AUTOINFRA_RANK");
    unsetenv("AUTOINFRA_SIZE");
    const char *bad_spin[] = {"-1", "2e6", "long"};
    for (size_t i = 0; i < sizeof bad_spin / sizeof *bad_spin; i++) {
        setenv("AUTOINFRA_SPIN_US", bad_spin[i], 1);
        assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
        assert_non_null(strstr(ai_last_error(), "AUTOINFRA_SPIN_US"));
    }
    setenv("AUTOINFRA_SPIN_US", "0", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_OK);
    ai_comm_destroy(c);
    unsetenv("AUTOINFRA_SPIN_US");
    const char *bad_yield[] = {"-5", "2e7", "soon"};
    for (size_t i = 0; i < sizeof bad_yield / sizeof *bad_yield; i++) {
        setenv("AUTOINFRA_YIELD_US", bad_yield[i], 1);
        assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
        assert_non_null(strstr(ai_last_error(), "AUTOINFRA_YIELD_US"));
    }
    unsetenv("AUTOINFRA_YIELD_US");
    /* srun across nodes: the rendezvous is the step's first node, by name;
     * one that does not resolve fails at once, naming it and what to set. */
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_JOB_ID", "7", 1);
    setenv("SLURM_STEP_NUM_NODES", "2", 1);
    setenv("SLURM_STEP_NODELIST", "ai-no-such-node[07-08]", 1);
    double t0 = ai_now();
    assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
    assert_true(ai_now() - t0 < 5.0);
    assert_non_null(strstr(ai_last_error(), "'ai-no-such-node07'"));
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_ADDR"));
    setenv("SLURM_STEP_NODELIST", "[1-2]", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "'[1-2]'"));
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_NUM_NODES");
    unsetenv("SLURM_STEP_NODELIST");
    assert_int_equal(ai_comm_create_env(&c), AI_OK);
    assert_int_equal(ai_comm_size(c), 1);
    double x = 2.5;
    assert_int_equal(ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F64, AI_SUM, NULL), AI_OK);
    assert_true(x == 2.5);
    ai_comm_destroy(c);
    ai_comm_destroy(NULL);
}

/* Every variable out of its range or set alone is refused by name, with
 * what is accepted; none of them may silently mean something else. */
static void test_env_ranges(void **state)
{
    (void)state;
    static const struct {
        const char *name, *value, *says;
    } bad[] = {
        {"AUTOINFRA_SIZE", "2", "AUTOINFRA_RANK is not"},   /* a job of one, silently */
        {"AUTOINFRA_RANK", "1", "AUTOINFRA_SIZE is not"},
        {"AUTOINFRA_CHANNELS", "-3", "0..8"},
        {"AUTOINFRA_CHANNELS", "9", "0..8"},
        {"AUTOINFRA_LOG", "verbose", "error, warn, info, debug"},
        {"AUTOINFRA_LOG", "inf", "did you mean 'info'"},
        {"AUTOINFRA_TIMEOUT", "1e300", "0..1e+06"},
        {"AUTOINFRA_TIMEOUT", "-1", "0..1e+06"},
        {"AUTOINFRA_NO_SHM", "2", "0..1"},
        {"AUTOINFRA_TUNE", "yes", "0..1"},
        {"AUTOINFRA_TUNE_BOUND", "0.5", "1..1000"},
        {"AUTOINFRA_TUNE_MIN", "64X", "AUTOINFRA_TUNE_MIN"},
        {"AUTOINFRA_TUNE_SAVE_S", "1e9", "0..86400"},
    };
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("SLURM_PROCID");
    unsetenv("AUTOINFRA_RANK");
    unsetenv("AUTOINFRA_SIZE");
    int wrong = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ai_comm *c = NULL;
        setenv(bad[i].name, bad[i].value, 1);
        ai_status_t st = ai_comm_create_env(&c);
        unsetenv(bad[i].name);
        if (st == AI_OK)
            ai_comm_destroy(c);
        if (st != AI_ERR_INVALID || !strstr(ai_last_error(), bad[i].name) ||
            !strstr(ai_last_error(), bad[i].says))
        {
            print_error("%s=%s: status %d, message '%s'; want it refused by name with '%s'\n",
                        bad[i].name, bad[i].value, st, st == AI_OK ? "" : ai_last_error(),
                        bad[i].says);
            wrong++;
        }
    }
    assert_int_equal(wrong, 0);
    ai_comm *c = NULL;
    setenv("AUTOINFRA_LOG", "DEBUG", 1);
    setenv("AUTOINFRA_CHANNELS", "8", 1);
    assert_int_equal(ai_comm_create_env(&c), AI_OK);
    ai_comm_destroy(c);
    unsetenv("AUTOINFRA_LOG");
    unsetenv("AUTOINFRA_CHANNELS");
}

/* Host grouping as the runtime reports it. */
static int hosts_body(ai_comm *c, void *arg)
{
    int n = ai_comm_size(c);
    if (ai_comm_nhosts(c) != 3)
        return 61;
    for (int r = 0; r < n; r++)
        if (ai_comm_host_of(c, r) != r * 3 / n) /* contiguous blocks */
            return 62;
    return ai_comm_host_of(c, n) == -1 ? 0 : 63;
}

static void test_host_grouping(void **state)
{
    ranks_opts o = {.nhosts = 3};
    assert_int_equal(ranks_run(6, &o, hosts_body, NULL), 0);
}

/* The link probe: measured on every rank alike, sane numbers. */
static int probe_body(ai_comm *c, void *arg)
{
    double bw, lat;
    if (ai_comm_link(c, 0, 1, &bw, &lat) != AI_ERR_INVALID || !isnan(ai_comm_host_bw_GBps(c, 0)))
        return 51;
    if (ai_comm_probe(c, 0) != AI_OK) {
        fprintf(stderr, "probe: %s\n", ai_last_error());
        return 52;
    }
    for (int h = 0; h < ai_comm_nhosts(c); h++) {
        double hb = ai_comm_host_bw_GBps(c, h);
        if (!(hb > 0.01 && hb < 1e4))
            return 53;
        for (int g = 0; g < ai_comm_nhosts(c); g++) {
            if (g == h)
                continue;
            if (ai_comm_link(c, h, g, &bw, &lat) != AI_OK || !(bw > 0 && bw < 1e4) ||
                !(lat > 0 && lat < 1e6))
                return 54;
        }
    }
    /* Every rank holds the same numbers (decisions depend on them). */
    double mine = ai_comm_host_bw_GBps(c, 1), first = mine;
    if (ai_broadcast(c, &first, 1, AI_F64, 0, NULL) != AI_OK || first != mine)
        return 55;
    /* refresh measures again and still works */
    return ai_comm_probe(c, 1) == AI_OK && ai_comm_link(c, 1, 2, &bw, &lat) == AI_OK ? 0 : 56;
}

static void test_link_probe(void **state)
{
    ranks_opts o = {.nhosts = 3};
    assert_int_equal(ranks_run(5, &o, probe_body, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_first),
        cmocka_unit_test(test_env_parsing),
        cmocka_unit_test(test_env_ranges),
        cmocka_unit_test(test_host_grouping),
        cmocka_unit_test(test_link_probe),
        cmocka_unit_test(test_rendezvous_timeout),
        cmocka_unit_test(test_wrong_token_refused),
        cmocka_unit_test(test_garbage_and_versions_refused),
        cmocka_unit_test(test_mismatched_counts),
        cmocka_unit_test(test_killed_peer_shm),
        cmocka_unit_test(test_killed_peer_direct),
        cmocka_unit_test(test_stalled_peer_direct),
        cmocka_unit_test(test_wait_blocks),
        cmocka_unit_test(test_wait_mode_switched_during_wait),
        cmocka_unit_test(test_killed_peer_tcp),
        cmocka_unit_test(test_killed_peer_mixed),
        cmocka_unit_test(test_stalled_peer_shm),
        cmocka_unit_test(test_stalled_peer_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
