/*
 * A rank that leaves right after its last collective: its peers still
 * receiving that collective's last messages complete it. A TCP receive
 * that ended its message exactly must not read on (it would see the
 * finished peer's end of stream and fail the call): 4 ranks on 4 hosts,
 * ring allreduces whose plain receives end on a message boundary, the
 * communicator destroyed right after the call, many times over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/ranks.h"

#include <stdio.h>
#include <stdlib.h>

#define COUNT (256u * 1024u) /* 1 MiB of float32: several 64 KiB-multiple blocks */

static int last_call(ai_comm *c, void *arg)
{
    (void)arg;
    float *buf = malloc(COUNT * sizeof *buf);
    if (!buf)
        return 1;
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = (float)(ai_comm_rank(c) + 1);
    ai_algo_opts o = {.algo = "ring"};
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, &o);
    int n = ai_comm_size(c), bad = st != AI_OK;
    if (bad)
        fprintf(stderr, "rank %d: %s\n", ai_comm_rank(c), ai_last_error());
    for (size_t i = 0; !bad && i < COUNT; i++)
        bad = buf[i] != (float)(n * (n + 1) / 2);
    free(buf);
    return bad; /* and the harness destroys the communicator at once */
}

static void test_destroy_after_last_call(void **state)
{
    (void)state;
    for (int round = 0; round < 12; round++) {
        ranks_opts o = {.nhosts = 4, .timeout_s = 10, .deadline_s = 60};
        assert_int_equal(ranks_run(4, &o, last_call, NULL), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_destroy_after_last_call)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
