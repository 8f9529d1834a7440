/*
 * ai_comm_set_wait_hook: a rank waiting in a collective for a late peer
 * runs the hook while it waits (over shared memory and over TCP only), the
 * call's result is right, and after the hook is cleared it is not run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"

#include <stdio.h>
#include <time.h>

#define LATE_MS 300

static void count_hook(void *arg) { (*(long *)arg)++; }

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* One allreduce with rank 1 LATE_MS late; rank 0 returns its hook count
 * through *hooks. 0 when the result was right. */
static int late_allreduce(ai_comm *c, long *hooks)
{
    int rank = ai_comm_rank(c), n = ai_comm_size(c);
    float v[64], out[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)(rank + i);
    if (rank == 0)
        ai_comm_set_wait_hook(c, hooks ? count_hook : NULL, hooks);
    if (rank == 1)
        sleep_ms(LATE_MS);
    if (ai_allreduce(c, v, out, 64, AI_F32, AI_SUM, NULL) != AI_OK) {
        fprintf(stderr, "rank %d: allreduce: %s\n", rank, ai_last_error());
        return 1;
    }
    for (int i = 0; i < 64; i++)
        if (out[i] != (float)(n * (n - 1) / 2 + n * i)) {
            fprintf(stderr, "rank %d: element %d is %g\n", rank, i, (double)out[i]);
            return 2;
        }
    return 0;
}

static int body(ai_comm *c, void *arg)
{
    (void)arg;
    long hooks = 0;
    int rc = late_allreduce(c, &hooks);
    if (rc)
        return rc;
    /* ~1 per ms while rank 0 waits LATE_MS; a loaded machine runs fewer */
    if (ai_comm_rank(c) == 0 && hooks < LATE_MS / 30) {
        fprintf(stderr, "rank 0: the hook ran %ld times while waiting %d ms\n", hooks, LATE_MS);
        return 3;
    }
    long before = hooks;
    if ((rc = late_allreduce(c, NULL)) != 0)
        return rc;
    if (hooks != before) {
        fprintf(stderr, "rank 0: the cleared hook ran %ld times\n", hooks - before);
        return 4;
    }
    return 0;
}

static void test_hook_runs_while_waiting_shm(void **state)
{
    (void)state;
    ranks_opts o = {0};
    assert_int_equal(ranks_run(2, &o, body, NULL), 0);
}

static void test_hook_runs_while_waiting_tcp(void **state)
{
    (void)state;
    ranks_opts o = {.no_shm = 1};
    assert_int_equal(ranks_run(2, &o, body, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_runs_while_waiting_shm),
        cmocka_unit_test(test_hook_runs_while_waiting_tcp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
