/*
 * Running the autoinfra binary (or any command) from tests: bounded in
 * time, output captured, no job environment leaking in.
 */
#ifndef TESTS_PROC_H
#define TESTS_PROC_H

#include <stddef.h>

#define PROC_TIMEOUT (-1)

/* Monotonic seconds. */
double proc_now(void);
/* $AUTOINFRA_BIN (set by ctest); aborts with a message when unset. */
const char *proc_bin(void);
/* Run argv (PATH searched) in its own process group with stdin from
 * /dev/null and the AUTOINFRA_RANK/SIZE/ADDR variables removed; stdout and
 * stderr are captured into out and err (NUL-terminated, truncated to fit).
 * Returns the exit code, 128+signal, or PROC_TIMEOUT after killing the
 * process group when it ran longer than limit_s. */
int proc_run(char *const *argv, double limit_s, char *out, size_t outlen, char *err,
             size_t errlen);

/* Wait for child pid at most limit_s, then SIGKILL and reap it. Returns
 * its wait status (WIFEXITED and the rest apply). */
int proc_reap(int pid, double limit_s);

/* 1 if an executable named prog is on PATH. */
int proc_on_path(const char *prog);

#endif
