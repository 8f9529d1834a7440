/*
 * Fault tolerance (docs/faults.md): revoke, agree, shrink, grow and join
 * on 3 to 8 local ranks (forked processes; one host over shared memory,
 * or several host ids over TCP), with ranks SIGKILLed at random points of
 * random collectives. Seeded (AI_FT_SEED overrides the seed), every run
 * bounded: a communicator timeout of 10 s, a harness deadline per trial.
 *
 * What must hold: after a revoke every rank's pending call fails with
 * AI_ERR_REVOKED well inside the timeout; after kills, every survivor's
 * agreement returns the same flags and the same failed set, which
 * contains every killed rank that died before the agreement; the shrunk
 * communicator has the survivors in the old order and computes correct
 * allreduces; a grown communicator of 3 + 1 computes correctly; a
 * newcomer with the wrong token is refused and the members are not hung.
 * A rank stopped past the timeout is agreed failed by the others before it
 * resumes, and learns so when it does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm/transport/transport.h"
#include "comm/transport/wire.h"
#include "support/proc.h"
#include "support/ranks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 8
#define TIMEOUT_S 10.0

static uint64_t seed0(void)
{
    const char *s = getenv("AI_FT_SEED");
    return s ? strtoull(s, NULL, 10) : 22;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What every rank of one trial reports to the test (shared memory made
 * before the fork). */
typedef struct trial {
    uint64_t seed;
    int n;
    int victim[MAXR];      /* 1: dies at a random point of the collectives */
    int late_victim[MAXR]; /* 1: dies at a random point of the agreement */
    int revoker;
    /* per rank */
    int done[MAXR];
    uint64_t flags[MAXR];
    uint64_t failed[MAXR]; /* bitmask of ai_comm_failed after the agreement */
    uint64_t shrunk_failed[MAXR];
    int new_size[MAXR], new_rank[MAXR];
    double fail_s[MAXR];   /* from the revoke (or kill) to this rank's error */
    int err[MAXR];
    double t0;             /* revoke time, in now_s() of the revoker */
} trial;

static trial *shared_trial(void)
{
    void *p = mmap(NULL, sizeof(trial), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 0, sizeof(trial));
    return p;
}

static void die_now(int sig)
{
    (void)sig;
    kill(getpid(), SIGKILL);
}

/* SIGKILL this process after `us` microseconds, wherever it is then. */
static void arm_kill(long us)
{
    signal(SIGALRM, die_now);
    struct itimerval it = {{0, 0}, {us / 1000000, us % 1000000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static void disarm_kill(void)
{
    struct itimerval it = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
}

/* Call i of the random sequence (the same on every rank): a collective
 * with checked results. Returns the call's status; wrong results -> 99. */
static int random_call(ai_comm *c, uint64_t seed, int i)
{
    uint64_t h = mix(seed ^ (uint64_t)i * 7919);
    int n = ai_comm_size(c), r = ai_comm_rank(c);
    size_t count = (size_t)1 << (h % 15); /* 1 .. 16 Ki elements */
    static float buf[MAXR << 14];
    ai_status_t st;
    switch ((h >> 8) % 4) {
    case 0:
        for (size_t k = 0; k < count; k++)
            buf[k] = (float)(r + 1);
        st = ai_allreduce(c, AI_IN_PLACE, buf, count, AI_F32, AI_SUM, NULL);
        for (size_t k = 0; st == AI_OK && k < count; k++)
            if (buf[k] != (float)(n * (n + 1) / 2))
                return 99;
        return st;
    case 1:
        for (size_t k = 0; k < count; k++)
            buf[k] = r == (int)(h % (uint64_t)n) ? (float)k : -1.0f;
        st = ai_broadcast(c, buf, count, AI_F32, (int)(h % (uint64_t)n), NULL);
        for (size_t k = 0; st == AI_OK && k < count; k++)
            if (buf[k] != (float)k)
                return 99;
        return st;
    case 2: {
        size_t per = count < 1024 ? count : 1024;
        float mine[1024];
        for (size_t k = 0; k < per; k++)
            mine[k] = (float)r;
        st = ai_allgather(c, mine, buf, per, AI_F32, NULL);
        for (size_t k = 0; st == AI_OK && k < per * (size_t)n; k++)
            if (buf[k] != (float)(k / per))
                return 99;
        return st;
    }
    default:
        return ai_barrier(c, NULL);
    }
}

static uint64_t failed_mask(ai_comm *c)
{
    int ranks[MAXR], k = 0;
    if (ai_comm_failed(c, ranks, MAXR, &k) != AI_OK)
        return ~(uint64_t)0;
    uint64_t m = 0;
    for (int i = 0; i < k && i < MAXR; i++)
        m |= (uint64_t)1 << ranks[i];
    return m;
}

/* The survivors' side after a failure: revoke, agree, shrink, then
 * allreduces on the shrunk communicator. */
static int recover(ai_comm *c, trial *t)
{
    int r = ai_comm_rank(c);
    ai_comm_revoke(c);
    if (t->late_victim[r])
        arm_kill(1 + (long)(mix(t->seed ^ 0x1a7e ^ (uint64_t)r) % 3000));
    uint64_t flags = ~((uint64_t)1 << r);
    ai_status_t st = ai_comm_agree(c, &flags);
    if (t->late_victim[r])
        disarm_kill();
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: agree: %s: %s\n", r, ai_strerror(st), ai_last_error());
        return 2;
    }
    t->flags[r] = flags;
    t->failed[r] = failed_mask(c);
    ai_comm *nc = NULL;
    if ((st = ai_comm_shrink(c, &nc)) != AI_OK) {
        fprintf(stderr, "rank %d: shrink: %s: %s\n", r, ai_strerror(st), ai_last_error());
        return 3;
    }
    t->shrunk_failed[r] = failed_mask(c);
    t->new_size[r] = ai_comm_size(nc);
    t->new_rank[r] = ai_comm_rank(nc);
    int bad = 0;
    for (int i = 0; i < 20 && !bad; i++) {
        double v[64];
        for (int k = 0; k < 64; k++)
            v[k] = r + 1;
        st = ai_allreduce(nc, AI_IN_PLACE, v, 64, AI_F64, AI_SUM, NULL);
        double want = 0;
        for (int j = 0; j < t->n; j++)
            if (!(t->shrunk_failed[r] >> j & 1))
                want += j + 1;
        if (st != AI_OK) {
            fprintf(stderr, "rank %d: allreduce on the shrunk communicator: %s\n", r, ai_last_error());
            bad = 4;
        }
        for (int k = 0; !bad && k < 64; k++)
            if (v[k] != want)
                bad = 5;
    }
    /* The old one stays revoked. */
    float x = 1;
    if (!bad && ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, NULL) == AI_OK)
        bad = 6;
    ai_comm_destroy(nc);
    t->done[r] = 1;
    return bad;
}

static int kill_body(ai_comm *c, void *arg)
{
    trial *t = arg;
    int r = ai_comm_rank(c);
    if (t->victim[r])
        arm_kill(1000 + (long)(mix(t->seed ^ (uint64_t)r) % 40000));
    int st = AI_OK;
    double t_end = now_s() + 20;
    for (int i = 0; st == AI_OK && now_s() < t_end; i++)
        st = random_call(c, t->seed, i);
    if (st == 99) {
        fprintf(stderr, "rank %d: a collective returned wrong data\n", r);
        return 99;
    }
    if (st == AI_OK) {
        fprintf(stderr, "rank %d: no failure seen in 20 s\n", r);
        return 98;
    }
    if (t->victim[r]) /* an error before its own timer fired: wait for it */
        pause();
    return recover(c, t);
}

static void kill_trial(uint64_t seed, int n, int nhosts, int nvict, int late)
{
    trial *t = shared_trial();
    t->seed = seed;
    t->n = n;
    /* Rank 0 is a victim in some trials: the store's rank is no special. */
    for (int k = 0, placed = 0; placed < nvict; k++) {
        int v = (int)(mix(seed + (uint64_t)k * 31) % (uint64_t)n);
        if (!t->victim[v]) {
            t->victim[v] = 1;
            placed++;
        }
    }
    for (int k = 0, v0 = (int)(mix(seed ^ 0x77) % (uint64_t)n); late && k < n; k++)
        if (!t->victim[(v0 + k) % n]) {
            t->late_victim[(v0 + k) % n] = 1;
            break;
        }
    int status[MAXR];
    ranks_opts o = {.nhosts = nhosts, .timeout_s = TIMEOUT_S, .deadline_s = 60, .keep_going = 1,
                    .status = status};
    print_message("kill trial: seed %llu, %d ranks on %d hosts, %d killed in collectives%s\n",
                  (unsigned long long)seed, n, nhosts ? nhosts : 1, nvict,
                  late ? ", one more at a random point of the agreement" : "");
    (void)ranks_run(n, &o, kill_body, t);
    uint64_t dead_early = 0;
    int ref = -1;
    for (int r = 0; r < n; r++) {
        if (t->victim[r]) {
            assert_int_equal(status[r], RANKS_SIGNAL_BASE + SIGKILL);
            dead_early |= (uint64_t)1 << r;
            continue;
        }
        if (t->late_victim[r] && status[r] == RANKS_SIGNAL_BASE + SIGKILL)
            continue; /* died during the agreement, as planned */
        if (status[r] != 0)
            fail_msg("seed %llu: survivor rank %d ended with status %d",
                     (unsigned long long)seed, r, status[r]);
        assert_true(t->done[r]);
        if (ref < 0)
            ref = r;
        /* Every survivor: the same flags and failed set ... */
        if (t->failed[r] != t->failed[ref]) {
            for (int j = 0; j < n; j++)
                print_error("rank %d: status %d, agreed failed 0x%llx%s%s\n", j, status[j],
                            (unsigned long long)t->failed[j], t->victim[j] ? " (victim)" : "",
                            t->late_victim[j] ? " (victim in the agreement)" : "");
            fail_msg("seed %llu: ranks %d and %d agreed on different failed sets",
                     (unsigned long long)seed, ref, r);
        }
        assert_int_equal(t->flags[r], t->flags[ref]);
        assert_int_equal(t->shrunk_failed[r], t->shrunk_failed[ref]);
        assert_int_equal(t->new_size[r], t->new_size[ref]);
        /* ... the ones killed in the collectives among the failed, itself not ... */
        assert_int_equal(t->failed[r] & dead_early, dead_early);
        assert_false(t->failed[r] >> r & 1);
        /* ... the flags the AND of the agreed survivors' ... */
        uint64_t want = ~(uint64_t)0;
        for (int j = 0; j < n; j++)
            if (!(t->failed[r] >> j & 1))
                want &= ~((uint64_t)1 << j);
        assert_int_equal(t->flags[r], want);
        /* ... and its rank in the shrunk communicator the old order's. */
        int below = 0;
        for (int j = 0; j < r; j++)
            below += !(t->shrunk_failed[r] >> j & 1);
        assert_int_equal(t->new_rank[r], below);
    }
    assert_true(ref >= 0);
    /* Exactly the dead: a live rank counted failed would be a false
     * suspicion (nothing stalled here). */
    for (int r = 0; r < n; r++)
        if (!(t->victim[r] || t->late_victim[r]))
            assert_false(t->failed[ref] >> r & 1);
    munmap(t, sizeof *t);
}

static void test_kill_agree_shrink(void **state)
{
    (void)state;
    uint64_t seed = seed0();
    static const int shapes[][4] = {
        /* ranks, hosts (0: one, shared memory), killed, one more in the agreement */
        {3, 0, 1, 0}, {4, 2, 1, 0}, {5, 5, 2, 0}, {8, 0, 2, 1},
        {6, 3, 1, 1}, {4, 0, 1, 1}, {8, 4, 3, 0}, {3, 3, 1, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        kill_trial(mix(seed + i), shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
}

/* ----------------------------------------------------------------- stall */

/* The last rank stops (SIGSTOP) for STALL_S, six times the communicator's
 * timeout, right after a good allreduce; the others revoke and agree. */
#define STALL_TIMEOUT_S 1.0
#define STALL_S 6

static int stall_body(ai_comm *c, void *arg)
{
    trial *t = arg;
    int r = ai_comm_rank(c), n = ai_comm_size(c);
    double v = 1;
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL);
    if (st != AI_OK || v != n) {
        fprintf(stderr, "rank %d: allreduce before the stall: %s (%g)\n", r, ai_last_error(), v);
        return 2;
    }
    if (r != n - 1) {
        double t0 = now_s();
        int bad = recover(c, t);
        t->fail_s[r] = now_s() - t0;
        return bad;
    }
    /* A child resumes this rank: a stopped process runs no timer. */
    pid_t self = getpid(), waker = fork();
    if (waker == 0) {
        struct timespec ts = {STALL_S, 0};
        nanosleep(&ts, NULL);
        kill(self, SIGCONT);
        _exit(0);
    }
    if (waker < 0)
        return 3;
    raise(SIGSTOP);
    waitpid(waker, NULL, 0);
    uint64_t flags = ~(uint64_t)0;
    st = ai_comm_agree(c, &flags);
    t->err[r] = st;
    t->done[r] = 1;
    if (st != AI_ERR_PEER) {
        fprintf(stderr, "rank %d: stalled %d s, then agree returned %s (%s), not AI_ERR_PEER\n", r,
                STALL_S, ai_strerror(st), ai_last_error());
        return 4;
    }
    return 0;
}

/* The others must agree without the stalled rank well before it resumes
 * (the agreement counts a silent rank failed after the timeout), shrink to
 * themselves and compute correctly (recover); the stalled rank, resumed,
 * must learn that it was counted failed rather than wait or rejoin. */
static void stall_trial(int n, int nhosts)
{
    trial *t = shared_trial();
    t->n = n;
    ranks_opts o = {.nhosts = nhosts, .timeout_s = STALL_TIMEOUT_S, .deadline_s = 40};
    int rc = ranks_run(n, &o, stall_body, t);
    if (rc != 0)
        fail_msg("stall trial, %d ranks on %d hosts: a rank failed (see above)", n, nhosts);
    uint64_t stalled = (uint64_t)1 << (n - 1);
    for (int r = 0; r < n - 1; r++) {
        assert_true(t->done[r]);
        if (t->failed[r] != stalled || t->flags[r] != ~(stalled - 1))
            fail_msg("rank %d agreed on failed set %#llx and flags %#llx; want %#llx and %#llx", r,
                     (unsigned long long)t->failed[r], (unsigned long long)t->flags[r],
                     (unsigned long long)stalled, (unsigned long long)~(stalled - 1));
        assert_int_equal(t->new_size[r], n - 1);
        assert_int_equal(t->new_rank[r], r);
        fprintf(stderr, "stall, %d ranks on %d hosts: rank %d agreed and shrank in %.2f s\n", n,
                nhosts, r, t->fail_s[r]);
        if (t->fail_s[r] >= STALL_S)
            fail_msg("rank %d took %.1f s to agree without the stalled rank: it waited for it", r,
                     t->fail_s[r]);
    }
    assert_true(t->done[n - 1]);
    munmap(t, sizeof *t);
}

static void test_stall_agree_shrink(void **state)
{
    (void)state;
    stall_trial(4, 0); /* one host: the stalled process is alive, only silent */
    stall_trial(4, 2); /* over TCP */
}

/* ---------------------------------------------------------------- revoke */

static int revoke_body(ai_comm *c, void *arg)
{
    trial *t = arg;
    int r = ai_comm_rank(c);
    /* A few good calls first, then rank `revoker` revokes while the
     * others wait in an allreduce it never joins. */
    for (int i = 0; i < 5; i++)
        if (random_call(c, t->seed, i) != AI_OK)
            return 10;
    if (r == t->revoker) {
        usleep(100 * 1000);
        t->t0 = now_s();
        if (ai_comm_revoke(c) != AI_OK)
            return 11;
        float x = 1;
        ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F32, AI_SUM, NULL);
        t->err[r] = st;
        t->done[r] = 1;
        return st == AI_ERR_REVOKED ? 0 : 12;
    }
    static float buf[1 << 16];
    size_t count = (size_t)1 << (mix(t->seed) % 16);
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, buf, count, AI_F32, AI_SUM, NULL);
    t->fail_s[r] = now_s();
    t->err[r] = st;
    /* A later call fails at once too. */
    if (ai_barrier(c, NULL) != AI_ERR_REVOKED && st == AI_ERR_REVOKED)
        return 13;
    uint64_t flags = 1;
    if (ai_comm_agree(c, &flags) != AI_OK || flags != 1)
        return 14; /* the agreement runs on a revoked communicator */
    t->done[r] = 1;
    return st == AI_ERR_REVOKED ? 0 : 15;
}

static void test_revoke(void **state)
{
    (void)state;
    uint64_t seed = seed0();
    static const int shapes[][2] = {{3, 0}, {4, 2}, {5, 5}, {8, 0}, {6, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        trial *t = shared_trial();
        t->seed = mix(seed ^ (0xe0 + i));
        t->n = shapes[i][0];
        t->revoker = (int)(t->seed % (uint64_t)t->n);
        int status[MAXR];
        ranks_opts o = {.nhosts = shapes[i][1], .timeout_s = TIMEOUT_S, .deadline_s = 40,
                        .status = status};
        int rc = ranks_run(t->n, &o, revoke_body, t);
        for (int r = 0; r < t->n; r++) {
            if (status[r] != 0)
                fail_msg("%d ranks on %d hosts: rank %d ended with status %d (call status %d)",
                         t->n, shapes[i][1], r, status[r], t->err[r]);
            if (r != t->revoker) {
                double dt = t->fail_s[r] - t->t0;
                print_message("revoke: %d ranks, %d hosts: rank %d failed %.1f ms after it\n",
                              t->n, shapes[i][1], r, dt * 1e3);
                assert_true(dt < 1.0); /* the timeout is 10 s */
            }
        }
        assert_int_equal(rc, 0);
        munmap(t, sizeof *t);
    }
}

/* ------------------------------------------------------------ grow/join */

typedef struct join_ctx {
    char *addr;        /* shared: rank 0 writes the join address */
    int *ready;
    const char *bad_token;
} join_ctx;

static int grow_body(ai_comm *c, void *arg)
{
    join_ctx *j = arg;
    int r = ai_comm_rank(c);
    if (r == 0) {
        if (ai_comm_join_addr(c, j->addr, 64) != AI_OK)
            return 20;
        __atomic_store_n(j->ready, 1, __ATOMIC_RELEASE);
    }
    /* First a grow that admits nobody in time (only a wrong-token newcomer
     * knocks): every member gets the error, nobody hangs. */
    ai_comm *big = NULL;
    double t = now_s();
    ai_status_t st = ai_comm_grow(c, 1, 1.5, &big);
    if (st != AI_ERR_TIMEOUT || now_s() - t > 1.5 + TIMEOUT_S) {
        fprintf(stderr, "rank %d: grow with a wrong-token newcomer: %s (%s)\n", r, ai_strerror(st),
                ai_last_error());
        return 21;
    }
    __atomic_store_n(j->ready, 2, __ATOMIC_RELEASE);
    if ((st = ai_comm_grow(c, 1, TIMEOUT_S, &big)) != AI_OK) {
        fprintf(stderr, "rank %d: grow: %s\n", r, ai_last_error());
        return 22;
    }
    int bad = ai_comm_size(big) != 4 || ai_comm_rank(big) != r;
    for (int i = 0; i < 10 && !bad; i++) {
        double v = r + 1;
        bad = ai_allreduce(big, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK || v != 10;
    }
    ai_comm_destroy(big);
    return bad ? 23 : 0;
}

static int newcomer(const char *addr, const char *token)
{
    ai_comm_config cfg = {.token = token, .host_id = "testhost-new", .timeout_s = TIMEOUT_S};
    ai_comm *c = NULL;
    ai_status_t st = ai_comm_join(&cfg, addr, &c);
    if (st != AI_OK) {
        fprintf(stderr, "newcomer (token %s): %s\n", token, ai_last_error());
        return st == AI_ERR_PROTO && strstr(ai_last_error(), "refused") ? 30 : 31;
    }
    int bad = ai_comm_size(c) != 4 || ai_comm_rank(c) != 3;
    for (int i = 0; i < 10 && !bad; i++) {
        double v = 4;
        bad = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK || v != 10;
    }
    ai_comm_destroy(c);
    return bad ? 32 : 0;
}

static void test_grow_join(void **state)
{
    (void)state;
    char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(shared != MAP_FAILED);
    memset(shared, 0, 4096);
    join_ctx j = {.addr = shared, .ready = (int *)(shared + 1024)};
    fflush(NULL);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        /* The newcomers: the wrong token while the first grow runs, then
         * the right one. ranks.c's token is "ranks-test-<its parent>". */
        double end = now_s() + 30;
        while (__atomic_load_n(j.ready, __ATOMIC_ACQUIRE) < 1 && now_s() < end)
            usleep(1000);
        int rc = newcomer(j.addr, "not-the-job") == 30 ? 0 : 40;
        while (__atomic_load_n(j.ready, __ATOMIC_ACQUIRE) < 2 && now_s() < end)
            usleep(1000);
        char token[64];
        snprintf(token, sizeof token, "ranks-test-%d", (int)getppid());
        if (!rc)
            rc = newcomer(j.addr, token);
        exit(rc);
    }
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 40};
    int rc = ranks_run(3, &o, grow_body, &j);
    int w = proc_reap(kid, 20);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(w));
    assert_int_equal(WEXITSTATUS(w), 0);
    munmap(shared, 4096);
}

/* Knock at the door at addr ("ip:port") with a well-formed join hello,
 * and hang up at once, before the challenge: not a newcomer. */
static int fake_hello(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((uint16_t)atoi(colon ? colon + 1 : "0"))};
    comm_rank_info self = {.addr = htonl(INADDR_LOOPBACK), .port = 9, .pid = 1};
    snprintf(self.host, sizeof self.host, "fake");
    unsigned char hello[COMM_WIRE_HELLO_FRAME];
    unsigned char nonce[COMM_WIRE_NONCE] = {1, 2, 3};
    comm_wire_hello_pack(hello, COMM_WIRE_JOIN_RANK, 0, nonce, &self);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
             write(fd, hello, sizeof hello) == (ssize_t)sizeof hello;
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* A hello sent and hung up at once, then a newcomer killed while it waits
 * at the door: both still have their hellos in rank 0's backlog; a live
 * newcomer comes after them. The grow must drop the two and admit the live
 * one (not admit the first, time out and refuse the live one). */
static int dead_joiner_body(ai_comm *c, void *arg)
{
    join_ctx *j = arg;
    int r = ai_comm_rank(c);
    if (r == 0) {
        if (ai_comm_join_addr(c, j->addr, 64) != AI_OK)
            return 20;
        __atomic_store_n(j->ready, 1, __ATOMIC_RELEASE);
    }
    double end = now_s() + 30;
    while (__atomic_load_n(j->ready, __ATOMIC_ACQUIRE) < 3 && now_s() < end)
        usleep(1000);
    ai_comm *big = NULL;
    ai_status_t st = ai_comm_grow(c, 1, TIMEOUT_S, &big);
    if (st != AI_OK) {
        fprintf(stderr, "rank %d: grow past a dead newcomer: %s\n", r, ai_last_error());
        return 22;
    }
    int bad = ai_comm_size(big) != 4 || ai_comm_rank(big) != r, waiting = -1;
    for (int i = 0; i < 10 && !bad; i++) {
        double v = r + 1;
        bad = ai_allreduce(big, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK || v != 10;
    }
    /* Nobody waits any more: the dead newcomer is not counted. */
    if (!bad && (ai_comm_join_pending(big, &waiting) != AI_OK || waiting != 0)) {
        fprintf(stderr, "rank %d: %d newcomers counted waiting after the grow\n", r, waiting);
        bad = 1;
    }
    ai_comm_destroy(big);
    return bad ? 23 : 0;
}

static void test_grow_dead_joiner(void **state)
{
    (void)state;
    char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(shared != MAP_FAILED);
    memset(shared, 0, 4096);
    join_ctx j = {.addr = shared, .ready = (int *)(shared + 1024)};
    fflush(NULL);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        char token[64];
        snprintf(token, sizeof token, "ranks-test-%d", (int)getppid());
        double end = now_s() + 30;
        while (__atomic_load_n(j.ready, __ATOMIC_ACQUIRE) < 1 && now_s() < end)
            usleep(1000);
        if (fake_hello(j.addr) != 0)
            _exit(51);
        fflush(NULL);
        pid_t dead = fork();
        if (dead == 0)
            _exit(newcomer(j.addr, token));
        usleep(500000); /* connected, hello sent, waiting for its table */
        kill(dead, SIGKILL);
        waitpid(dead, NULL, 0);
        pid_t live = fork();
        if (live == 0)
            _exit(newcomer(j.addr, token));
        usleep(300000);
        __atomic_store_n(j.ready, 3, __ATOMIC_RELEASE);
        int w = 0;
        while (waitpid(live, &w, WNOHANG) == 0 && now_s() < end)
            usleep(5000);
        if (now_s() >= end) {
            kill(live, SIGKILL);
            waitpid(live, &w, 0);
        }
        _exit(WIFEXITED(w) ? WEXITSTATUS(w) : 50);
    }
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 40};
    int rc = ranks_run(3, &o, dead_joiner_body, &j);
    int w = proc_reap(kid, 20);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(w));
    assert_int_equal(WEXITSTATUS(w), 0); /* the live newcomer joined and computed */
    munmap(shared, 4096);
}

/* A member dies during a grow that waits for a newcomer who never comes:
 * the others learn that member's death, by its rank, long before the
 * grow's timeout (not a missing newcomer after it). */
#define MEMBER_DIES_GROW_S 20.0
static int member_dies_body(ai_comm *c, void *arg)
{
    (void)arg;
    int r = ai_comm_rank(c);
    if (r == 2)
        arm_kill(500000);
    ai_comm *big = NULL;
    double t = now_s();
    ai_status_t st = ai_comm_grow(c, 1, MEMBER_DIES_GROW_S, &big);
    double took = now_s() - t;
    if (st == AI_OK) {
        ai_comm_destroy(big);
        return 30;
    }
    if (st != AI_ERR_PEER || !strstr(ai_last_error(), "member rank 2 died") ||
        took > MEMBER_DIES_GROW_S / 2) {
        fprintf(stderr, "rank %d: grow while rank 2 died: %s after %.1f s (%s)\n", r,
                ai_strerror(st), took, ai_last_error());
        return 31;
    }
    if (r == 0)
        printf("member dies in a grow: rank 0 got AI_ERR_PEER %.2f s after the grow began "
               "(rank 2 killed at 0.5 s, timeout %.0f s)\n", took, MEMBER_DIES_GROW_S);
    return 0;
}

static void test_grow_member_dies(void **state)
{
    (void)state;
    int status[3] = {-1, -1, -1};
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 40, .keep_going = 1,
                    .status = status};
    (void)ranks_run(3, &o, member_dies_body, NULL);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], 0);
    assert_int_equal(status[2], RANKS_SIGNAL_BASE + SIGKILL);
}

/* AUTOINFRA_JOIN_DOOR: rank 0 holds the door with a newcomer waiting in
 * it, and dies. The survivors shrink, the new rank 0 opens the door again
 * at the same address, the newcomer (its connection closed unanswered)
 * knocks again, and the survivors grow by it. */
static int door_body(ai_comm *c, void *arg)
{
    join_ctx *j = arg;
    int r = ai_comm_rank(c), waiting = 0;
    double end = now_s() + 20;
    if (r == 0) {
        if (ai_comm_join_pending(c, &waiting) != AI_OK)
            return 20;
        __atomic_store_n(j->ready, 1, __ATOMIC_RELEASE);
        while (waiting < 1 && now_s() < end) {
            usleep(5000);
            if (ai_comm_join_pending(c, &waiting) != AI_OK)
                return 21;
        }
        kill(getpid(), SIGKILL);
    }
    double v = 1;
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL);
    if (st == AI_OK)
        return 22;
    ai_comm *small = NULL, *big = NULL;
    (void)ai_comm_revoke(c);
    if ((st = ai_comm_shrink(c, &small)) != AI_OK) {
        fprintf(stderr, "rank %d: shrink after rank 0 died: %s\n", r, ai_last_error());
        return 23;
    }
    waiting = 0;
    while (ai_comm_rank(small) == 0 && waiting < 1 && now_s() < end) {
        if (ai_comm_join_pending(small, &waiting) != AI_OK)
            return 24;
        usleep(5000);
    }
    if ((st = ai_comm_grow(small, 1, TIMEOUT_S, &big)) != AI_OK) {
        fprintf(stderr, "rank %d: grow at the reopened door: %s\n", r, ai_last_error());
        ai_comm_destroy(small);
        return 25;
    }
    int bad = ai_comm_size(big) != 3 || ai_comm_rank(big) != r - 1;
    for (int i = 0; i < 10 && !bad; i++) {
        v = 1;
        bad = ai_allreduce(big, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK || v != 3;
    }
    ai_comm_destroy(big);
    ai_comm_destroy(small);
    return bad ? 26 : 0;
}

static void test_door_outlives_rank0(void **state)
{
    (void)state;
    int port = ranks_free_port();
    assert_true(port > 0);
    char door[64];
    snprintf(door, sizeof door, "127.0.0.1:%d", port);
    setenv("AUTOINFRA_JOIN_DOOR", door, 1);
    int *ready = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(ready != MAP_FAILED);
    *ready = 0;
    join_ctx j = {.ready = ready};
    fflush(NULL);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        char token[64];
        snprintf(token, sizeof token, "ranks-test-%d", (int)getppid());
        double end = now_s() + 30;
        while (__atomic_load_n(ready, __ATOMIC_ACQUIRE) < 1 && now_s() < end)
            usleep(1000);
        ai_comm_config cfg = {.token = token, .host_id = "testhost-new", .timeout_s = 30};
        ai_comm *c = NULL;
        if (ai_comm_join(&cfg, door, &c) != AI_OK) {
            fprintf(stderr, "newcomer at %s: %s\n", door, ai_last_error());
            _exit(40);
        }
        int bad = ai_comm_size(c) != 3 || ai_comm_rank(c) != 2;
        for (int i = 0; i < 10 && !bad; i++) {
            double v = 1;
            bad = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK || v != 3;
        }
        ai_comm_destroy(c);
        _exit(bad ? 41 : 0);
    }
    int status[3] = {-1, -1, -1};
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 50, .keep_going = 1,
                    .status = status};
    (void)ranks_run(3, &o, door_body, &j);
    unsetenv("AUTOINFRA_JOIN_DOOR");
    int w = proc_reap(kid, 30);
    munmap(ready, 4096);
    assert_int_equal(status[0], RANKS_SIGNAL_BASE + SIGKILL);
    assert_int_equal(status[1], 0);
    assert_int_equal(status[2], 0);
    assert_true(WIFEXITED(w));
    assert_int_equal(WEXITSTATUS(w), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_revoke),
        cmocka_unit_test(test_kill_agree_shrink),
        cmocka_unit_test(test_stall_agree_shrink),
        cmocka_unit_test(test_grow_join),
        cmocka_unit_test(test_grow_dead_joiner),
        cmocka_unit_test(test_grow_member_dies),
        cmocka_unit_test(test_door_outlives_rank0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
