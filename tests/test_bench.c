/*
 * `autoinfra bench`, tested from the outside: --list and flag errors need
 * no communicator; the runs go through `autoinfra launch` with a timeout
 * and check that every element was right and the JSON lines parse.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/cmdtest.h"
#include "support/proc.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static char outbuf[1 << 16], errbuf[1 << 16];

/* Run with output captured into outbuf/errbuf; a run past limit_s fails. */
static int run(char *const *argv, double limit_s)
{
    return cmdtest_run(argv, limit_s, outbuf, sizeof outbuf, errbuf, sizeof errbuf);
}


static const char *const colls[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                    "reduce", "alltoall", "barrier"};

static void test_list_every_coll(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++) {
        char *argv[] = {(char *)proc_bin(), "bench", "--coll", (char *)colls[k], "--list", NULL};
        int lines = 0;
        assert_int_equal(run(argv, 20), 0);
        for (const char *l = outbuf; *l; l = strchr(l, '\n') + 1) {
            assert_non_null(strchr(l, '\n'));
            assert_true(strchr(l, '\n') > l); /* no empty names */
            lines++;
        }
        if (strcmp(colls[k], "barrier") && lines == 0)
            fail_msg("bench --coll %s --list printed no algorithms", colls[k]);
    }
}

static void check_usage_error(const char *flag, const char *value, const char *want)
{
    char *argv[] = {(char *)proc_bin(), "bench", (char *)flag, (char *)value, NULL};
    int rc = run(argv, 20);
    if (rc != 2)
        fail_msg("bench %s %s: exit %d, expected 2 (stderr: %s)", flag, value ? value : "", rc,
                 errbuf);
    if (!strstr(errbuf, want))
        fail_msg("bench %s %s: stderr '%s' does not mention '%s'", flag, value ? value : "",
                 errbuf, want);
}

static void test_flag_errors(void **state)
{
    (void)state;
    check_usage_error("--coll", "allsmash", "--coll 'allsmash'");
    check_usage_error("--bytes", "8K:1K", "--bytes '8K:1K'");
    check_usage_error("--bytes", "12X", "--bytes '12X'");
    check_usage_error("--bytes", "K", "--bytes 'K'");
    check_usage_error("--dtype", "f17", "--dtype 'f17'");
    check_usage_error("--op", "xor", "--op 'xor'");
    check_usage_error("--iters", "0", "--iters '0'");
    check_usage_error("--warmup", "-1", "--warmup '-1'");
    check_usage_error("--channels", "zero", "--channels 'zero'");
    check_usage_error("--chunk", "0", "--chunk '0'");
    check_usage_error("--algo", "no-such-algo", "--algo 'no-such-algo'");
    check_usage_error("--more", "-1", "--more '-1'");
    check_usage_error("--more", "5", "need --learn");
    check_usage_error("--frobnicate", NULL, "unknown option '--frobnicate'");
    check_usage_error("--coll", NULL, "needs a value");
}

static void test_help(void **state)
{
    char *argv[] = {(char *)proc_bin(), "bench", "--help", NULL};
    (void)state;
    assert_int_equal(run(argv, 20), 0);
    assert_non_null(strstr(outbuf, "usage: autoinfra bench"));
}

/* Parse every stdout line as one JSON object; check the common fields and
 * wrong == 0; return the number of lines. */
static int check_json_lines(const char *coll, int ranks, int hosts, const char *dtype)
{
    int n = 0;
    for (char *l = outbuf; *l;) {
        char *nl = strchr(l, '\n');
        json_error_t err;
        json_t *o;
        assert_non_null(nl);
        *nl = '\0';
        o = json_loads(l, 0, &err);
        if (!o)
            fail_msg("not JSON: '%s' (%s)", l, err.text);
        assert_string_equal(json_string_value(json_object_get(o, "coll")), coll);
        assert_string_equal(json_string_value(json_object_get(o, "dtype")), dtype);
        assert_non_null(json_string_value(json_object_get(o, "op")));
        assert_true(strlen(json_string_value(json_object_get(o, "algo"))) > 0);
        assert_int_equal(json_integer_value(json_object_get(o, "ranks")), ranks);
        assert_int_equal(json_integer_value(json_object_get(o, "hosts")), hosts);
        assert_true(json_integer_value(json_object_get(o, "iters")) > 0);
        assert_true(json_is_integer(json_object_get(o, "bytes")));
        assert_true(json_is_integer(json_object_get(o, "count")));
        assert_true(json_number_value(json_object_get(o, "time_us")) > 0);
        assert_true(json_number_value(json_object_get(o, "algbw_GBps")) >= 0);
        assert_true(json_number_value(json_object_get(o, "busbw_GBps")) >= 0);
        if (json_integer_value(json_object_get(o, "wrong")) != 0)
            fail_msg("%s: wrong elements: %s", coll, l);
        json_decref(o);
        n++;
        l = nl + 1;
    }
    return n;
}

static void test_allreduce_check_json(void **state)
{
    char *argv[] = {(char *)proc_bin(), "launch", "-n", "3", "--timeout", "120", "--",
                    (char *)proc_bin(), "bench", "--coll", "allreduce", "--bytes", "1KiB:8KB",
                    "--check", "--json", NULL};
    int rc;
    (void)state;
    rc = run(argv, 150);
    if (rc != 0)
        fail_msg("exit %d; stderr:\n%s", rc, errbuf);
    /* 1KiB:8KB: the CLI takes the one size grammar (ai_parse_size). */
    assert_int_equal(check_json_lines("allreduce", 3, 1, "f32"), 4); /* 1K 2K 4K 8K */
    {
        /* Sizes double and counts are whole f32 elements. */
        json_t *o = json_loads(outbuf, JSON_DISABLE_EOF_CHECK, NULL);
        assert_non_null(o);
        assert_int_equal(json_integer_value(json_object_get(o, "bytes")), 1024);
        assert_int_equal(json_integer_value(json_object_get(o, "count")), 256);
        json_decref(o);
    }
}

/* Every collective and a few dtype/op pairs, over two "hosts" so both
 * shared memory and TCP are crossed, with sizes that do not divide evenly. */
static void test_every_coll_check(void **state)
{
    static const char *const cases[][2] = {
        {"f32", "sum"}, {"bf16", "sum"}, {"f16", "avg"}, {"i32", "prod"}, {"u8", "max"},
        {"f64", "min"},
    };
    (void)state;
    for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char *argv[] = {(char *)proc_bin(), "launch", "-n", "3", "--hosts", "a,b",
                            "--timeout", "60", "--", (char *)proc_bin(), "bench", "--coll",
                            (char *)colls[k], "--bytes", "100:3000", "--dtype",
                            (char *)cases[c][0], "--op", (char *)cases[c][1], "--iters", "2",
                            "--warmup", "1", "--root", "1", "--check", "--json", NULL};
            int rc = run(argv, 90);
            if (rc != 0)
                fail_msg("%s %s %s: exit %d; stderr:\n%s", colls[k], cases[c][0], cases[c][1],
                         rc, errbuf);
            check_json_lines(colls[k], 3, 2, cases[c][0]);
            if (!strcmp(colls[k], "barrier"))
                break; /* no data: one case is enough */
        }
    }
}

static void test_single_process(void **state)
{
    /* Not under a launcher: the runtime makes a job of one rank. */
    char *argv[] = {(char *)proc_bin(), "bench", "--bytes", "1K:2K", "--iters", "2", "--check",
                    "--json", NULL};
    int rc;
    (void)state;
    rc = run(argv, 60);
    if (rc != 0)
        fail_msg("exit %d; stderr:\n%s", rc, errbuf);
    assert_int_equal(check_json_lines("allreduce", 1, 1, "f32"), 2);
}

static int same_arm(json_t *a, json_t *b)
{
    return !strcmp(json_string_value(json_object_get(a, "algo")),
                   json_string_value(json_object_get(b, "algo"))) &&
           json_integer_value(json_object_get(a, "chunk_bytes")) ==
               json_integer_value(json_object_get(b, "chunk_bytes")) &&
           json_integer_value(json_object_get(a, "channels")) ==
               json_integer_value(json_object_get(b, "channels"));
}

/* The median of a JSON array of n numbers (asserts there are n). */
static double json_median(const json_t *a, size_t n)
{
    double v[8];
    assert_int_equal(json_array_size(a), n);
    assert_true(n >= 1 && n <= 8);
    for (size_t i = 0; i < n; i++) {
        double x = json_number_value(json_array_get(a, i));
        size_t k = i;
        for (; k > 0 && v[k - 1] > x; k--)
            v[k] = v[k - 1];
        v[k] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Checks one line of `bench --learn --json`: the confirmation's fastest arm
 * is the oracle and it times the learner's choice too; when the choice is
 * another arm, the judgement's calls give both times; with --more, what
 * the job settled on after them (its exploration only grew); the calls
 * behind each median are there (3 confirmation rounds). Returns the
 * line's confirmation (a new reference) for the caller. */
static json_t *check_learn_line(const char *l, int calls, int more, int swept)
{
    json_error_t err;
    json_t *o = json_loads(l, 0, &err), *oracle, *confirm, *choice, *judge, *v;
    size_t i;
    int has_oracle = 0, has_choice = 0;
    if (!o)
        fail_msg("not JSON (%s): %s", err.text, l);
    oracle = json_object_get(o, "oracle");
    confirm = json_object_get(o, "confirm");
    choice = json_object_get(o, "choice");
    judge = json_object_get(o, "judge");
    assert_int_equal(json_array_size(json_object_get(o, "calls_us")), calls);
    v = json_object_get(o, "more");
    if (more) {
        json_t *then = json_object_get(v, "choice");
        assert_int_equal(json_integer_value(json_object_get(v, "calls")), more);
        assert_true(json_is_string(json_object_get(then, "algo")));
        assert_true(json_integer_value(json_object_get(then, "explored")) >=
                    json_integer_value(json_object_get(choice, "explored")));
        assert_true(json_number_value(json_object_get(v, "tail_us")) > 0);
    } else {
        assert_true(json_is_null(v));
    }
    if (swept)
        assert_true(json_array_size(json_object_get(o, "arms")) >= 2);
    else
        assert_int_equal(json_array_size(json_object_get(o, "arms")), 0);
    assert_true(json_array_size(confirm) >= 1 && json_array_size(confirm) <= 4);
    double best = INFINITY;
    json_array_foreach(confirm, i, v) {
        double t = json_number_value(json_object_get(v, "time_us"));
        assert_true(t > 0);
        assert_float_equal(json_median(json_object_get(v, "calls_us"), 3), t, 1e-3 * t);
        if (t < best) {
            best = t;
            has_oracle = same_arm(v, oracle);
        }
        has_choice |= same_arm(v, choice);
    }
    assert_true(has_oracle);
    assert_true(has_choice);
    double ratio = json_number_value(json_object_get(o, "choice_ratio"));
    double oracle_us = json_number_value(json_object_get(oracle, "time_us"));
    double choice_us = json_number_value(json_object_get(o, "choice_time_us"));
    if (same_arm(choice, oracle)) {
        assert_true(json_is_null(judge));
        assert_float_equal(oracle_us, best, 1e-3);
        assert_float_equal(ratio, 1.0, 1e-9);
    } else { /* judged: 4 rounds of the two arms, apart from the confirmation */
        assert_int_equal(json_integer_value(json_object_get(judge, "rounds")), 4);
        assert_float_equal(oracle_us, json_number_value(json_object_get(judge, "oracle_us")), 1e-3);
        assert_float_equal(choice_us, json_number_value(json_object_get(judge, "choice_us")), 1e-3);
        assert_float_equal(json_median(json_object_get(judge, "oracle_calls_us"), 4), oracle_us,
                           1e-3 * oracle_us);
        assert_float_equal(json_median(json_object_get(judge, "choice_calls_us"), 4), choice_us,
                           1e-3 * choice_us);
    }
    assert_float_equal(ratio, choice_us / oracle_us, 1e-3);
    json_incref(confirm);
    json_decref(o);
    return confirm;
}

/* --learn: the auto calls (and --more), the sweep, the confirmation and
 * the judgement; then a second run confirms the first one's arms (--oracle-from) instead
 * of sweeping. */
static void test_learn_json(void **state)
{
    char kb[] = "/tmp/autoinfra-test-learn-XXXXXX", first[] = "/tmp/autoinfra-test-cold-XXXXXX";
    int fd = mkstemp(kb), fd2 = mkstemp(first), lines = 0;
    json_t *cold[2] = {NULL, NULL};
    assert_true(fd >= 0 && fd2 >= 0);
    close(fd);
    char *argv[] = {(char *)proc_bin(), "launch", "-n", "3", "--hosts", "a,b", "--timeout", "120",
                    "--", (char *)proc_bin(), "bench", "--learn", "--kb", kb, "--calls", "6",
                    "--more", "5", "--iters", "2", "--confirm", "3", "--judge", "4", "--bytes", "4K:8K", "--json",
                    NULL};
    int rc = run(argv, 150);
    (void)state;
    if (rc != 0)
        fail_msg("exit %d; stderr:\n%s", rc, errbuf);
    assert_int_equal(write(fd2, outbuf, strlen(outbuf)), (ssize_t)strlen(outbuf));
    close(fd2);
    for (char *l = strtok(outbuf, "\n"); l; l = strtok(NULL, "\n"), lines++) {
        assert_true(lines < 2);
        cold[lines] = check_learn_line(l, 6, 5, 1);
    }
    assert_int_equal(lines, 2); /* 4K 8K */

    char *argv2[] = {(char *)proc_bin(), "launch", "-n", "3", "--hosts", "a,b", "--timeout", "120",
                     "--", (char *)proc_bin(), "bench", "--learn", "--kb", kb, "--calls", "4",
                     "--confirm", "3", "--judge", "4", "--bytes", "4K:8K", "--json",
                     "--oracle-from", first, NULL};
    rc = run(argv2, 150);
    unlink(first);
    for (const char *const *sfx = (const char *const[]){"", "-wal", "-shm", NULL}; *sfx; sfx++) {
        char f[sizeof kb + 8];
        snprintf(f, sizeof f, "%s%s", kb, *sfx);
        unlink(f);
    }
    if (rc != 0)
        fail_msg("exit %d; stderr:\n%s", rc, errbuf);
    lines = 0;
    for (char *l = strtok(outbuf, "\n"); l; l = strtok(NULL, "\n"), lines++) {
        assert_true(lines < 2);
        json_t *conf = check_learn_line(l, 4, 0, 0), *v, *w;
        size_t i, j;
        /* The first run's three fastest arms, in its order, then maybe
         * this run's choice. */
        assert_true(json_array_size(conf) >= 3);
        for (i = 0; i < 3; i++) {
            int found = 0;
            v = json_array_get(conf, i);
            json_array_foreach(cold[lines], j, w) found |= same_arm(v, w);
            assert_true(found);
        }
        json_decref(conf);
    }
    assert_int_equal(lines, 2);
    json_decref(cold[0]);
    json_decref(cold[1]);
}

static void test_table_output(void **state)
{
    char *argv[] = {(char *)proc_bin(), "launch", "-n", "2", "--timeout", "60", "--", (char *)proc_bin(),
                    "bench", "--bytes", "64:256", "--iters", "3", "--check", NULL};
    int rc;
    (void)state;
    rc = run(argv, 90);
    if (rc != 0)
        fail_msg("exit %d; stderr:\n%s", rc, errbuf);
    assert_non_null(strstr(outbuf, "# autoinfra bench: allreduce, 2 ranks"));
    assert_non_null(strstr(outbuf, "busbw"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list_every_coll, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_flag_errors, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_help, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_allreduce_check_json, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_every_coll_check, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_single_process, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_table_output, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_learn_json, cmdtest_setup, cmdtest_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
