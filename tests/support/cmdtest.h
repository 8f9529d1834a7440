/*
 * Shared pieces of the tests that run commands (autoinfra, mpirun, ...):
 * a per-test alarm so that nothing hangs the suite, and a bounded run with
 * the output captured (support/proc.h) that fails the test on a timeout.
 */
#ifndef TESTS_CMDTEST_H
#define TESTS_CMDTEST_H

#include <stddef.h>

#define CMDTEST_ALARM_S 280

/* cmocka per-test setup / teardown: alarm(CMDTEST_ALARM_S), alarm(0). */
int cmdtest_setup(void **state);
int cmdtest_teardown(void **state);

/* proc_run into out / err; a run longer than limit_s fails the test. */
int cmdtest_run(char *const *argv, double limit_s, char *out, size_t outlen, char *err,
                size_t errlen);

#endif
