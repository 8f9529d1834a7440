/*
 * Errors that name the right peer: one rank is SIGKILLed at a random
 * moment of a run of collectives, and every survivor's error must name the
 * killed rank as the one that failed (the first "rank N (host ...)" in the
 * message) and say that it died, whether the survivor saw the death itself
 * or learned of it from a peer that aborted because of it. Over shared
 * memory (one host), TCP (a host per rank) and mixed placements, 10 seeded
 * kills each.
 *
 * The same for a stall: one rank SIGSTOPs itself at a random moment; every
 * survivor's call fails (a timeout, or the abort notice of a rank that
 * timed out) naming the stopped rank first, never a rank that was running
 * (a neighbour waiting on it, or the survivor that timed out first); the
 * last survivor to fail continues the stopped rank, whose call fails too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>

#define COUNT (64 * 1024)
#define TRIALS 10

typedef struct kill_case {
    int victim;
    long delay_us; /* after the first checked call */
} kill_case;

/* The rank number of the first "rank N (" in msg, or -1. The prefixes the
 * collectives add ("rank R: allreduce/ring ...") have no parenthesis. */
static int first_blamed(const char *msg)
{
    for (const char *p = strstr(msg, "rank "); p; p = strstr(p + 1, "rank ")) {
        const char *q = p + 5;
        if (!isdigit((unsigned char)*q))
            continue;
        int n = atoi(q);
        while (isdigit((unsigned char)*q))
            q++;
        if (q[0] == ' ' && q[1] == '(')
            return n;
    }
    return -1;
}

static void die_now(int sig)
{
    (void)sig;
    raise(SIGKILL);
}

static int blame_body(ai_comm *c, void *arg)
{
    const kill_case *kc = arg;
    int rank = ai_comm_rank(c);
    float *buf = calloc(COUNT, sizeof *buf);
    if (!buf)
        return 90;
    if (ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, NULL) != AI_OK ||
        ai_barrier(c, NULL) != AI_OK) {
        fprintf(stderr, "rank %d: set-up call failed: %s\n", rank, ai_last_error());
        free(buf);
        return 91;
    }
    if (rank == kc->victim) {
        /* Die in the middle of whatever call is running then. */
        signal(SIGALRM, die_now);
        struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = kc->delay_us + 1}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    ai_status_t st = AI_OK;
    for (int i = 0; i < 100000 && st == AI_OK; i++)
        st = ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, NULL);
    free(buf);
    if (rank == kc->victim) {
        fprintf(stderr, "rank %d: the victim outlived its timer\n", rank);
        return 92;
    }
    const char *msg = ai_last_error();
    int blamed = first_blamed(msg);
    if (st != AI_ERR_PEER || blamed != kc->victim || !strstr(msg, "died")) {
        fprintf(stderr, "rank %d: killed rank %d, got %s naming rank %d: %s\n", rank, kc->victim,
                ai_strerror(st), blamed, msg);
        return 93;
    }
    fprintf(stderr, "rank %d: %s\n", rank, msg);
    return 0;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void run_kills(int n, int nhosts, int round_robin, uint64_t seed)
{
    int bad = 0;
    for (int t = 0; t < TRIALS; t++) {
        uint64_t x = mix(seed * 1000 + (uint64_t)t);
        kill_case kc = {.victim = (int)(x % (uint64_t)n), .delay_us = (long)((x >> 16) % 20000)};
        int status[8];
        ranks_opts o = {.nhosts = nhosts, .round_robin = round_robin, .timeout_s = 5,
                        .deadline_s = 30, .keep_going = 1, .status = status};
        ranks_run(n, &o, blame_body, &kc);
        for (int r = 0; r < n; r++) {
            int want = r == kc.victim ? RANKS_SIGNAL_BASE + SIGKILL : 0;
            if (status[r] != want) {
                fprintf(stderr, "trial %d (victim %d, %ld us): rank %d status %d\n", t, kc.victim,
                        kc.delay_us, r, status[r]);
                bad++;
            }
        }
    }
    assert_int_equal(bad, 0);
}

/* Shared between the ranks of a stall trial (an anonymous shared mapping
 * made before they fork). */
typedef struct stall_case {
    int victim;
    long delay_us;
    _Atomic int victim_pid;
    _Atomic int failed; /* survivors that returned */
} stall_case;

static void stop_now(int sig)
{
    (void)sig;
    raise(SIGSTOP);
}

static int stall_body(ai_comm *c, void *arg)
{
    stall_case *sc = arg;
    int rank = ai_comm_rank(c), n = ai_comm_size(c);
    float *buf = calloc(COUNT, sizeof *buf);
    if (!buf)
        return 90;
    if (rank == sc->victim)
        atomic_store(&sc->victim_pid, (int)getpid());
    if (ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, NULL) != AI_OK ||
        ai_barrier(c, NULL) != AI_OK) {
        fprintf(stderr, "rank %d: set-up call failed: %s\n", rank, ai_last_error());
        free(buf);
        return 91;
    }
    if (rank == sc->victim) {
        signal(SIGALRM, stop_now);
        struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = sc->delay_us + 1}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    ai_status_t st = AI_OK;
    /* Collectives of different shapes: ring, tree, pairwise. */
    for (int i = 0; i < 100000 && st == AI_OK; i++)
        st = i % 3 == 0   ? ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, NULL)
             : i % 3 == 1 ? ai_broadcast(c, buf, COUNT / 4, AI_F32, i % n, NULL)
                          : ai_barrier(c, NULL);
    free(buf);
    const char *msg = ai_last_error();
    if (rank == sc->victim) {
        if (st == AI_OK) {
            fprintf(stderr, "rank %d: the stalled rank's calls all succeeded\n", rank);
            return 92;
        }
        return 0;
    }
    int blamed = first_blamed(msg), bad = 0;
    if ((st != AI_ERR_TIMEOUT && st != AI_ERR_PEER) || blamed != sc->victim) {
        fprintf(stderr, "rank %d: stalled rank %d, got %s naming rank %d: %s\n", rank, sc->victim,
                ai_strerror(st), blamed, msg);
        bad = 93;
    }
    /* The last survivor to fail lets the stalled rank go on. */
    if (atomic_fetch_add(&sc->failed, 1) == n - 2)
        kill((pid_t)atomic_load(&sc->victim_pid), SIGCONT);
    return bad;
}

static void run_stalls(int n, int nhosts, uint64_t seed)
{
    stall_case *sc = mmap(NULL, sizeof *sc, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sc != MAP_FAILED);
    int bad = 0;
    for (int t = 0; t < TRIALS / 2; t++) {
        uint64_t x = mix(seed * 1000 + (uint64_t)t);
        sc->victim = (int)(x % (uint64_t)n);
        sc->delay_us = (long)((x >> 16) % 20000);
        atomic_store(&sc->victim_pid, 0);
        atomic_store(&sc->failed, 0);
        int status[8];
        ranks_opts o = {.nhosts = nhosts, .timeout_s = 1, .deadline_s = 30, .keep_going = 1,
                        .status = status};
        ranks_run(n, &o, stall_body, sc);
        for (int r = 0; r < n; r++)
            if (status[r] != 0) {
                fprintf(stderr, "trial %d (victim %d, %ld us): rank %d status %d\n", t, sc->victim,
                        sc->delay_us, r, status[r]);
                bad++;
            }
    }
    munmap(sc, sizeof *sc);
    assert_int_equal(bad, 0);
}

static void test_blame_shm(void **state) { run_kills(4, 0, 0, 1); }
static void test_blame_tcp(void **state) { run_kills(4, 4, 0, 2); }
static void test_blame_mixed(void **state) { run_kills(6, 2, 0, 3); }
static void test_blame_mixed_rr(void **state) { run_kills(6, 3, 1, 4); }
static void test_stall_shm(void **state) { run_stalls(4, 0, 5); }
static void test_stall_tcp(void **state) { run_stalls(4, 4, 6); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blame_shm),
        cmocka_unit_test(test_blame_tcp),
        cmocka_unit_test(test_blame_mixed),
        cmocka_unit_test(test_blame_mixed_rr),
        cmocka_unit_test(test_stall_shm),
        cmocka_unit_test(test_stall_tcp),
    };
    /* TEST_FILTER=name: run the tests whose names match (cmocka's pattern). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
