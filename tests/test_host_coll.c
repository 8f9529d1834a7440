/*
 * ai_comm_set_host_coll: another library's collective as an arm of
 * `auto`'s learner (what the MPI shim registers for the host MPI).
 *  - the arm is listed among the learner's arms; a host collective much
 *    faster than ours (it writes the known result at once) becomes the
 *    learner's settled choice, and every call's result is right;
 *  - a host collective that answers AI_ERR_UNSUPPORTED on every rank
 *    leaves the call to our first algorithm, with the right result;
 *  - bad registrations are refused (an algorithm's name, barrier, an
 *    empty or too long name), and fn NULL removes the arm.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"
#include "support/ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 16384 /* floats: 64 KiB, where the learner takes calls by default */
#define CALLS 300

typedef struct {
    int rank, size;
    long runs;
    int unsupported;
    const float *sum; /* the known result, N floats */
} host_ctx;

/* The input pattern every rank uses, and its sum. */
static float in_of(int rank, size_t i) { return (float)((rank + (int)(i % 13)) % 5); }

static float sum_of(int size, size_t i)
{
    float e = 0;
    for (int r = 0; r < size; r++)
        e += in_of(r, i);
    return e;
}

static ai_status_t fast_allreduce(void *arg, ai_coll coll, const void *sendbuf, void *recvbuf,
                                  size_t count, ai_dtype dt, ai_op op, int root)
{
    host_ctx *h = arg;
    (void)sendbuf;
    (void)root;
    h->runs++;
    if (h->unsupported)
        return AI_ERR_UNSUPPORTED;
    if (coll != AI_ALLREDUCE || dt != AI_F32 || op != AI_SUM)
        return AI_ERR_INVALID;
    if (count != N)
        return AI_ERR_INVALID;
    memcpy(recvbuf, h->sum, N * sizeof(float)); /* one copy: faster than any exchange */
    return AI_OK;
}

static int check_calls(ai_comm *c, float *in, float *out, int calls)
{
    int rank = ai_comm_rank(c), size = ai_comm_size(c);
    for (int k = 0; k < calls; k++) {
        for (size_t i = 0; i < N; i++) {
            in[i] = in_of(rank, i);
            out[i] = -1;
        }
        if (ai_allreduce(c, in, out, N, AI_F32, AI_SUM, NULL) != AI_OK) {
            fprintf(stderr, "rank %d: allreduce %d: %s\n", rank, k, ai_last_error());
            return 1;
        }
        for (size_t i = 0; i < N; i++) {
            float e = sum_of(size, i);
            if (out[i] != e) {
                fprintf(stderr, "rank %d: call %d element %zu is %g, expected %g\n", rank, k, i,
                        (double)out[i], (double)e);
                return 2;
            }
        }
    }
    return 0;
}

static int body_wins(ai_comm *c, void *arg)
{
    static float sum[N];
    host_ctx h = {ai_comm_rank(c), ai_comm_size(c), 0, *(int *)arg, sum};
    for (size_t i = 0; i < N; i++)
        sum[i] = sum_of(h.size, i);
    if (ai_comm_set_host_coll(c, AI_ALLREDUCE, "host_fast", fast_allreduce, &h) != AI_OK) {
        fprintf(stderr, "rank %d: register: %s\n", h.rank, ai_last_error());
        return 3;
    }
    ai_algo_opts arms[64];
    int n = ai_comm_arms(c, AI_ALLREDUCE, N * sizeof(float), arms, 64), listed = 0;
    for (int i = 0; i < n && i < 64; i++)
        listed += !strcmp(arms[i].algo, "host_fast");
    if (listed != 1) {
        fprintf(stderr, "rank %d: host_fast listed %d times among %d arms\n", h.rank, listed, n);
        return 4;
    }
    float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
    int rc = in && out ? check_calls(c, in, out, CALLS) : 5;
    free(in);
    free(out);
    if (rc)
        return rc;
    ai_choice ch;
    if (ai_comm_choice(c, AI_ALLREDUCE, N * sizeof(float), &ch) != AI_OK)
        return 6;
    if (!h.unsupported && (!ch.settled || strcmp(ch.algo, "host_fast") || h.runs < CALLS / 2)) {
        fprintf(stderr, "rank %d: after %d calls: %s%s, the host collective ran %ld times\n",
                h.rank, CALLS, ch.algo, ch.settled ? " (settled)" : "", h.runs);
        return 7;
    }
    if (h.unsupported && h.runs == 0) {
        fprintf(stderr, "rank %d: the unsupported host collective was never tried\n", h.rank);
        return 8;
    }
    return 0;
}

static void test_host_arm_wins(void **state)
{
    (void)state;
    char kb[] = "/tmp/test_host_coll_kb.XXXXXX";
    int fd = mkstemp(kb), unsupported = 0;
    assert_true(fd >= 0);
    close(fd);
    ranks_opts o = {.kb_path = kb, .deadline_s = 240};
    assert_int_equal(ranks_run(3, &o, body_wins, &unsupported), 0);
    remove(kb);
}

static void test_host_arm_unsupported_falls_back(void **state)
{
    (void)state;
    char kb[] = "/tmp/test_host_coll_kb.XXXXXX";
    int fd = mkstemp(kb), unsupported = 1;
    assert_true(fd >= 0);
    close(fd);
    ranks_opts o = {.kb_path = kb, .deadline_s = 240};
    assert_int_equal(ranks_run(2, &o, body_wins, &unsupported), 0);
    remove(kb);
}

static int body_refused(ai_comm *c, void *arg)
{
    (void)arg;
    host_ctx h = {0};
    char long_name[40];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    struct {
        ai_coll coll;
        const char *name;
    } bad[] = {{AI_ALLREDUCE, "ring"}, {AI_BARRIER, "host"}, {AI_ALLREDUCE, ""},
               {AI_ALLREDUCE, NULL}, {AI_ALLREDUCE, long_name}, {AI_COLL_COUNT, "host"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ai_comm_set_host_coll(c, bad[i].coll, bad[i].name, fast_allreduce, &h) != AI_ERR_INVALID) {
            fprintf(stderr, "registration %zu was not refused\n", i);
            return 1;
        }
    if (ai_comm_set_host_coll(c, AI_ALLREDUCE, "host_fast", fast_allreduce, &h) != AI_OK ||
        ai_comm_set_host_coll(c, AI_ALLREDUCE, NULL, NULL, NULL) != AI_OK)
        return 2;
    ai_algo_opts arms[64];
    int n = ai_comm_arms(c, AI_ALLREDUCE, 1 << 20, arms, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (!strcmp(arms[i].algo, "host_fast")) {
            fprintf(stderr, "the removed arm is still listed\n");
            return 3;
        }
    return 0;
}

static void test_host_arm_refused_and_removed(void **state)
{
    (void)state;
    ranks_opts o = {0};
    assert_int_equal(ranks_run(2, &o, body_refused, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_arm_wins),
        cmocka_unit_test(test_host_arm_unsupported_falls_back),
        cmocka_unit_test(test_host_arm_refused_and_removed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
