/*
 * ai_comm_failure_peer: the rank that broke a communicator, as the runtime
 * recorded it, for callers that must not read it from the message (the
 * torch backend's autoinfra.CommError.peer). 3 local ranks, rank 2
 * SIGKILLed: every survivor names rank 2, also one that learns of the
 * failure only after the rank that found it has exited (one host, from its
 * abort notice; over TCP, two hosts), and -1 while the communicator works
 * and after this rank's own revoke.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#define TIMEOUT_S 10.0

static int peer_of(ai_comm *c)
{
    int p = -2;
    return ai_comm_failure_peer(c, &p) == AI_OK ? p : -3;
}

static int allreduce_ok(ai_comm *c)
{
    double v = 1;
    return ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) == AI_OK && v == 3;
}

static int kill_body(ai_comm *c, void *arg)
{
    (void)arg;
    int r = ai_comm_rank(c);
    if (!allreduce_ok(c))
        return 20;
    if (peer_of(c) != -1) {
        fprintf(stderr, "rank %d: failure peer %d on a working communicator\n", r, peer_of(c));
        return 21;
    }
    if (r == 2)
        raise(SIGKILL);
    /* Rank 1 comes to its call after rank 0 found the failure and left. */
    if (r == 1)
        usleep(300 * 1000);
    double v = 1;
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL);
    if (st == AI_OK) {
        fprintf(stderr, "rank %d: an allreduce with rank 2 dead completed\n", r);
        return 22;
    }
    if (peer_of(c) != 2) {
        fprintf(stderr, "rank %d: failure peer %d, want 2 (%s: %s)\n", r, peer_of(c),
                ai_strerror(st), ai_last_error());
        return 23;
    }
    return 0;
}

static void run_kill(int nhosts)
{
    int status[3] = {-1, -1, -1};
    ranks_opts o = {.nhosts = nhosts, .timeout_s = TIMEOUT_S, .deadline_s = 40, .keep_going = 1,
                    .status = status};
    (void)ranks_run(3, &o, kill_body, NULL);
    assert_int_equal(status[0], 0);
    assert_int_equal(status[1], 0);
    assert_int_equal(status[2], RANKS_SIGNAL_BASE + SIGKILL);
}

static void test_kill_one_host(void **state)
{
    (void)state;
    run_kill(0);
}

static void test_kill_two_hosts(void **state)
{
    (void)state;
    run_kill(2);
}

static int revoke_body(ai_comm *c, void *arg)
{
    (void)arg;
    if (!allreduce_ok(c))
        return 20;
    if (ai_comm_rank(c) == 0) {
        if (ai_comm_revoke(c) != AI_OK || peer_of(c) != -1)
            return 21; /* its own revoke names nobody */
        return 0;
    }
    /* The others learn of rank 0's revoke: it names rank 0. */
    double v = 1;
    for (int i = 0; i < 1000; i++) {
        if (ai_allreduce(c, AI_IN_PLACE, &v, 1, AI_F64, AI_SUM, NULL) != AI_OK)
            return peer_of(c) == 0 ? 0 : 22;
        usleep(1000);
    }
    return 23;
}

static void test_revoke(void **state)
{
    (void)state;
    ranks_opts o = {.nhosts = 2, .timeout_s = TIMEOUT_S, .deadline_s = 40};
    assert_int_equal(ranks_run(3, &o, revoke_body, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_one_host),
        cmocka_unit_test(test_kill_two_hosts),
        cmocka_unit_test(test_revoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
