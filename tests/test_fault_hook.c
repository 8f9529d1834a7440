/*
 * The runtime's fault hook (ai_fault_corrupt_next_frame, used by
 * bench/chaos): one rank's next frame header is corrupted, at each of its
 * 16 bytes in turn, over shared memory and over TCP; every rank's call
 * must fail, at once (well within the timeout, not by it), and none may
 * return success. Without the hook the calls succeed and the test fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define COUNT 4096

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int corrupt_one(ai_comm *c, void *arg)
{
    unsigned v = *(const unsigned *)arg;
    int rank = ai_comm_rank(c), n = ai_comm_size(c);
    float *buf = malloc(COUNT * sizeof *buf);
    if (!buf)
        return 1;
    ai_algo_opts ring = {.algo = "ring"};
    for (int k = 0; k < 3; k++) { /* the job works before the fault */
        for (size_t i = 0; i < COUNT; i++)
            buf[i] = (float)rank;
        if (ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, &ring) != AI_OK ||
            buf[7] != (float)(n * (n - 1) / 2)) {
            fprintf(stderr, "rank %d: call %d before the fault failed: %s\n", rank, k,
                    ai_last_error());
            free(buf);
            return 1;
        }
    }
    if (rank == 1)
        ai_fault_corrupt_next_frame(v);
    double t0 = now_s();
    ai_status_t st = ai_allreduce(c, AI_IN_PLACE, buf, COUNT, AI_F32, AI_SUM, &ring);
    double dt = now_s() - t0;
    free(buf);
    if (st == AI_OK) {
        fprintf(stderr, "rank %d: a call with byte %u of a header corrupted succeeded\n", rank,
                v % 16);
        return 1;
    }
    if (st == AI_ERR_TIMEOUT || dt > 2.0) {
        fprintf(stderr, "rank %d: byte %u: failed only after %.2f s (%s): %s\n", rank, v % 16, dt,
                ai_strerror(st), ai_last_error());
        return 1;
    }
    return 0;
}

static void run_all_bytes(int nhosts)
{
    for (unsigned b = 0; b < 16; b++) {
        unsigned v = b | ((b * 37u + 1u) & 0xffu) << 8; /* byte b, a nonzero mask */
        int status[3];
        ranks_opts o = {.nhosts = nhosts, .timeout_s = 10, .deadline_s = 30, .keep_going = 1,
                        .status = status};
        int rc = ranks_run(3, &o, corrupt_one, &v);
        if (rc != 0)
            fprintf(stderr, "byte %u, %d hosts: rank outcomes %d %d %d\n", b, nhosts, status[0],
                    status[1], status[2]);
        assert_int_equal(rc, 0);
    }
}

static void test_corrupt_shm(void **state)
{
    (void)state;
    run_all_bytes(0);
}

static void test_corrupt_tcp(void **state)
{
    (void)state;
    run_all_bytes(3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_corrupt_shm),
                                       cmocka_unit_test(test_corrupt_tcp)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
