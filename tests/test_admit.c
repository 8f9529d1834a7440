/*
 * ai_comm_admit, the members' side of joining between steps, from C: 3
 * local ranks (2 host ids) run steps of an allreduce, each followed by an
 * admit. While nobody waits at the door every member gets 0 newcomers and
 * no new communicator, and goes on with its own; once a newcomer calls
 * ai_comm_join, every member admits it at the same step, and the 4 ranks
 * compute correct allreduces. A member that died before an admit makes the
 * others' admit fail (AI_ERR_PEER) instead of growing without it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/proc.h"
#include "support/ranks.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_S 10.0
#define MAX_STEPS 20000

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct admit_ctx {
    char *addr; /* shared: rank 0 writes the join address */
    int *ready; /* shared: 1 address written, 2 the first admits returned */
    int *grown_at; /* shared: [rank] the step each member admitted at */
} admit_ctx;

static int sum_is(ai_comm *c, double want)
{
    double v = ai_comm_rank(c) + 1;
    return ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) == AI_OK && v == want;
}

static int members_body(ai_comm *c, void *arg)
{
    admit_ctx *x = arg;
    int r = ai_comm_rank(c);
    if (r == 0) {
        if (ai_comm_join_addr(c, x->addr, 64) != AI_OK)
            return 20;
        __atomic_store_n(x->ready, 1, __ATOMIC_RELEASE);
    }
    ai_comm *big = NULL;
    int joined = -1;
    for (int step = 0; step < MAX_STEPS; step++) {
        if (!sum_is(c, 6))
            return 21;
        ai_status_t st = ai_comm_admit(c, TIMEOUT_S, &joined, &big);
        if (st != AI_OK) {
            fprintf(stderr, "rank %d: admit at step %d: %s\n", r, step, ai_last_error());
            return 22;
        }
        if (joined == 0 && big) {
            fprintf(stderr, "rank %d: a new communicator for 0 newcomers\n", r);
            return 23;
        }
        if (step == 0 && r == 0)
            __atomic_store_n(x->ready, 2, __ATOMIC_RELEASE); /* now the newcomer may come */
        if (joined) {
            x->grown_at[r] = step;
            break;
        }
        usleep(2000);
    }
    if (joined != 1 || !big || ai_comm_size(big) != 4 || ai_comm_rank(big) != r) {
        fprintf(stderr, "rank %d: admitted %d, communicator of %d\n", r, joined,
                big ? ai_comm_size(big) : 0);
        return 24;
    }
    int bad = 0;
    for (int i = 0; i < 10 && !bad; i++)
        bad = !sum_is(big, 10);
    /* The next admit, with nobody waiting: nothing changes. */
    ai_comm *again = NULL;
    if (!bad && (ai_comm_admit(big, TIMEOUT_S, &joined, &again) != AI_OK || joined || again))
        bad = 1;
    ai_comm_destroy(big);
    return bad ? 25 : 0;
}

static int newcomer(admit_ctx *x)
{
    double end = now_s() + 30;
    while (__atomic_load_n(x->ready, __ATOMIC_ACQUIRE) < 2 && now_s() < end)
        usleep(1000);
    char token[64];
    snprintf(token, sizeof token, "ranks-test-%d", (int)getppid()); /* ranks.c's job token */
    ai_comm_config cfg = {.token = token, .host_id = "testhost-new", .timeout_s = TIMEOUT_S};
    ai_comm *c = NULL;
    if (ai_comm_join(&cfg, x->addr, &c) != AI_OK) {
        fprintf(stderr, "newcomer: %s\n", ai_last_error());
        return 30;
    }
    int bad = ai_comm_size(c) != 4 || ai_comm_rank(c) != 3;
    for (int i = 0; i < 10 && !bad; i++)
        bad = !sum_is(c, 10);
    int joined = -1;
    ai_comm *again = NULL;
    if (!bad && (ai_comm_admit(c, TIMEOUT_S, &joined, &again) != AI_OK || joined || again))
        bad = 1;
    ai_comm_destroy(c);
    return bad ? 31 : 0;
}

static void test_admit_between_steps(void **state)
{
    (void)state;
    char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(shared != MAP_FAILED);
    memset(shared, 0, 4096);
    admit_ctx x = {.addr = shared, .ready = (int *)(shared + 1024),
                   .grown_at = (int *)(shared + 2048)};
    fflush(NULL);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0)
        _exit(newcomer(&x));
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 60};
    int rc = ranks_run(3, &o, members_body, &x);
    int w = proc_reap(kid, 20);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(w));
    assert_int_equal(WEXITSTATUS(w), 0);
    /* Every member admitted the newcomer at the same step, after the first. */
    assert_true(x.grown_at[0] > 0);
    assert_int_equal(x.grown_at[1], x.grown_at[0]);
    assert_int_equal(x.grown_at[2], x.grown_at[0]);
    munmap(shared, 4096);
}

static int dead_member_body(ai_comm *c, void *arg)
{
    (void)arg;
    int r = ai_comm_rank(c);
    if (!sum_is(c, 6))
        return 20;
    if (r == 2)
        raise(SIGKILL);
    int joined = -1;
    ai_comm *big = NULL;
    double t0 = now_s();
    ai_status_t st = ai_comm_admit(c, TIMEOUT_S, &joined, &big);
    if (st == AI_OK || big || joined != 0) {
        fprintf(stderr, "rank %d: admit with rank 2 dead: %s, %d joined\n", r, ai_strerror(st),
                joined);
        return 21;
    }
    if (st != AI_ERR_PEER || now_s() - t0 > TIMEOUT_S) {
        fprintf(stderr, "rank %d: admit with rank 2 dead: %s after %.1f s (%s)\n", r,
                ai_strerror(st), now_s() - t0, ai_last_error());
        return 22;
    }
    int peer = -1;
    if (ai_comm_failure_peer(c, &peer) != AI_OK || peer != 2) {
        fprintf(stderr, "rank %d: admit failed, naming rank %d, want 2\n", r, peer);
        return 23;
    }
    return 0;
}

static void test_admit_member_dead(void **state)
{
    (void)state;
    int status[3] = {-1, -1, -1};
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 40, .keep_going = 1,
                    .status = status};
    (void)ranks_run(3, &o, dead_member_body, NULL);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], 0);
    assert_int_equal(status[2], RANKS_SIGNAL_BASE + SIGKILL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admit_between_steps),
        cmocka_unit_test(test_admit_member_dead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
