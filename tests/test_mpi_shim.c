/*
 * The MPI shim (plugins/mpi_shim, docs/mpi-shim.md), tested from the
 * outside: mpirun runs mpi_shim_check (an ordinary MPI program built next
 * to the shim) on 3 ranks with LD_PRELOAD=libautoinfra-mpi.so and checks
 *  - every result of the five collectives (types, ops, in place, counts 0,
 *    1, odd, large; a duplicate of the world) is right and those calls ran
 *    in autoinfra (the shim's exported counters, read by the program);
 *  - calls the shim cannot serve (user op, MPI_BAND, MPI_SHORT reduction,
 *    derived datatypes, MPI_COMM_SELF, a split communicator) went to MPI
 *    and are right too;
 *  - the same over TCP only (AUTOINFRA_NO_SHM=1), initialised with
 *    MPI_THREAD_MULTIPLE (then duplicates of the world go to MPI);
 *  - AUTOINFRA_SHIM=0 leaves everything to MPI;
 *  - a failed set-up (unusable rendezvous address) prints one warning and
 *    the program still runs correctly on MPI;
 *  - an autoinfra failure at run time (ranks passing different counts)
 *    aborts the job with a message instead of returning;
 *  - with MPICH's flavour too, when it was built.
 * Skips when mpirun is not installed or the shim was not built (no MPI
 * development files at configure time).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/cmdtest.h"
#include "support/proc.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN_LIMIT_S 90

static char outbuf[1 << 16], errbuf[1 << 16];
static char shim_dir[PATH_MAX];


/* build/plugins/mpi_shim/NAME, or NULL when it was not built. */
static const char *built(const char *name, char *buf, size_t len)
{
    if (!shim_dir[0]) {
        char bin[PATH_MAX];
        snprintf(bin, sizeof bin, "%s", proc_bin());
        snprintf(shim_dir, sizeof shim_dir, "%s/plugins/mpi_shim", dirname(bin));
    }
    snprintf(buf, len, "%s/%s", shim_dir, name);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* Open MPI's mpirun, 3 ranks, the shim preloaded (unless shim is NULL),
 * extra -x settings, then the check program's arguments; killed after
 * limit_s seconds. */
static int mpirun_for(int limit_s, const char *shim, const char *const *xvars,
                      const char *const *args)
{
    char limit[16];
    snprintf(limit, sizeof limit, "%d", limit_s);
    char check[PATH_MAX], preload[PATH_MAX + 16];
    char *argv[48];
    int n = 0;
    if (!built("mpi_shim_check", check, sizeof check))
        fail_msg("mpi_shim_check was not built next to the shim (%s)", shim_dir);
    argv[n++] = "env";
    argv[n++] = "OMPI_ALLOW_RUN_AS_ROOT=1";
    argv[n++] = "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
    argv[n++] = "OMPI_MCA_rmaps_base_oversubscribe=1";
    argv[n++] = "timeout";
    argv[n++] = "-k";
    argv[n++] = "5";
    argv[n++] = limit;
    argv[n++] = "mpirun";
    argv[n++] = "--oversubscribe";
    argv[n++] = "-np";
    argv[n++] = "3";
    if (shim) {
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", shim);
        argv[n++] = "-x";
        argv[n++] = preload;
    }
    for (; xvars && *xvars && n < 40; xvars++) {
        argv[n++] = "-x";
        argv[n++] = (char *)*xvars;
    }
    argv[n++] = check;
    for (; args && *args && n < 47; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    int rc = proc_run(argv, limit_s + 10, outbuf, sizeof outbuf, errbuf, sizeof errbuf);
    if (rc == PROC_TIMEOUT || rc == 124 || rc == 137)
        fail_msg("mpirun still running after %d s (exit %d); stdout:\n%s\nstderr:\n%s", limit_s,
                 rc, outbuf, errbuf);
    return rc;
}

static int mpirun(const char *shim, const char *const *xvars, const char *const *args)
{
    return mpirun_for(RUN_LIMIT_S - 10, shim, xvars, args);
}

/* The shim, or skip the test. */
static const char *need_shim(char *buf, size_t len)
{
    if (!proc_on_path("mpirun")) {
        print_message("mpirun is not installed (apt-get install openmpi-bin); skipping\n");
        skip();
    }
    const char *shim = built("libautoinfra-mpi.so", buf, len);
    if (!shim) {
        print_message("%s/libautoinfra-mpi.so was not built (no Open MPI development files at "
                      "configure time); skipping\n", shim_dir);
        skip();
    }
    return shim;
}

/* "shim_check: ... N calls in autoinfra, M passed to MPI ..." */
static void summary(long *calls, long *falls)
{
    const char *s = strstr(outbuf, "shim_check: mode");
    s = s ? strstr(s, "checks, ") : NULL;
    if (!s || sscanf(s, "checks, %ld calls in autoinfra, %ld passed to MPI", calls, falls) != 2)
        fail_msg("no summary line in the output:\n%s\nstderr:\n%s", outbuf, errbuf);
}

static void expect_ok(int rc, const char *what)
{
    if (rc != 0 || !strstr(outbuf, "shim_check: OK"))
        fail_msg("%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, rc, outbuf, errbuf);
}

static void test_results_through_autoinfra(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    const char *x[] = {"AUTOINFRA_LOG=info", NULL}, *a[] = {"--expect", "shim", NULL};
    expect_ok(mpirun(shim, x, a), "mpi_shim_check --expect shim");
    long calls, falls;
    summary(&calls, &falls);
    /* every rank: hundreds of supported calls, and the fallback cases */
    assert_true(calls >= 3 * 500);
    assert_true(falls >= 3 * 8);
    assert_non_null(strstr(outbuf, "(shim active)"));
    if (!strstr(errbuf, "autoinfra-mpi: autoinfra (algorithm auto) runs MPI_Allreduce"))
        fail_msg("no set-up line with AUTOINFRA_LOG=info; stderr:\n%s", errbuf);
}

static void test_results_over_tcp(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    const char *x[] = {"AUTOINFRA_NO_SHM=1", NULL};
    const char *a[] = {"--expect", "shim", "--quick", "--thread-multiple", NULL};
    expect_ok(mpirun(shim, x, a), "mpi_shim_check --expect shim over TCP");
    long calls, falls;
    summary(&calls, &falls);
    assert_true(calls > 0);
}

/* Correct MPI, every rank describing the same ints with its own datatype
 * (MPI_INT x 4, a contiguous and a vector derived type): every rank must
 * take the same path. A rank falling back to MPI while another runs
 * autoinfra hangs both; the time limit turns that into a failure. */
static void test_mixed_datatypes(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    const char *x[] = {"AUTOINFRA_TIMEOUT=5", NULL};
    const char *a[] = {"--expect", "shim", "--mixed-types", NULL};
    expect_ok(mpirun_for(20, shim, x, a), "mpi_shim_check --expect shim --mixed-types");
    long calls, falls;
    summary(&calls, &falls);
    assert_int_equal(calls, 3 * (3 + 2));
    assert_int_equal(falls, 0);
}

static void test_disabled(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    const char *x[] = {"AUTOINFRA_SHIM=0", "AUTOINFRA_LOG=info", NULL};
    const char *a[] = {"--expect", "mpi", "--quick", NULL};
    expect_ok(mpirun(shim, x, a), "AUTOINFRA_SHIM=0");
    long calls, falls;
    summary(&calls, &falls);
    assert_int_equal(calls, 0);
    assert_int_equal(falls, 0);
    assert_non_null(strstr(outbuf, "(shim loaded, inactive)"));
    assert_non_null(strstr(errbuf, "disabled (AUTOINFRA_SHIM=0)"));
}

static void test_failed_setup_falls_back(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    /* TEST-NET-2: not an address of this machine, so rank 0 cannot open
     * the rendezvous there and the others cannot reach it. */
    const char *x[] = {"AUTOINFRA_ADDR=198.51.100.1:1", "AUTOINFRA_TIMEOUT=3", NULL};
    const char *a[] = {"--expect", "mpi", "--quick", NULL};
    expect_ok(mpirun(shim, x, a), "failed set-up");
    long calls, falls;
    summary(&calls, &falls);
    assert_int_equal(calls, 0);
    const char *w = strstr(errbuf, "autoinfra-mpi: WARNING: autoinfra set-up failed");
    if (!w)
        fail_msg("no set-up warning; stderr:\n%s", errbuf);
    if (strstr(w + 1, "autoinfra-mpi: WARNING"))
        fail_msg("more than one warning; stderr:\n%s", errbuf);
}

/* Settings it cannot take are refused by name, the program runs on MPI:
 * AUTOINFRA_SHIM=off had meant "on", AUTOINFRA_LOG=verbose and
 * AUTOINFRA_CHANNELS=-3 were taken silently. */
static void test_bad_settings_refused(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    static const char *const bad[][2] = {
        {"AUTOINFRA_SHIM=off", "AUTOINFRA_SHIM='off' is not 0 or 1"},
        {"AUTOINFRA_LOG=verbose", "AUTOINFRA_LOG='verbose' is not one of error, warn, info, debug"},
        {"AUTOINFRA_CHANNELS=-3", "AUTOINFRA_CHANNELS='-3' is not an integer in 0..8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *x[] = {bad[i][0], NULL}, *a[] = {"--expect", "mpi", "--quick", NULL};
        expect_ok(mpirun(shim, x, a), bad[i][0]);
        if (!strstr(errbuf, bad[i][1]))
            fail_msg("%s: no '%s' in stderr:\n%s", bad[i][0], bad[i][1], errbuf);
    }
}

static void test_runtime_failure_aborts(void **state)
{
    (void)state;
    char buf[PATH_MAX];
    const char *shim = need_shim(buf, sizeof buf);
    /* Without MPI's own arm: a call the learner hands to MPI is as MPI
     * makes it, and Open MPI returns from this one (docs/mpi-shim.md). */
    const char *x[] = {"AUTOINFRA_TIMEOUT=10", "AUTOINFRA_SHIM_MPI_ARM=0", NULL},
               *a[] = {"--mismatch", NULL};
    int rc = mpirun(shim, x, a);
    if (rc == 0 || strstr(outbuf, "mismatched call returned"))
        fail_msg("the mismatched call was not aborted (exit %d)\nstdout:\n%s\nstderr:\n%s", rc,
                 outbuf, errbuf);
    if (!strstr(errbuf, "failed in autoinfra") || !strstr(errbuf, "aborting the job"))
        fail_msg("no abort message; stderr:\n%s", errbuf);
}

static void test_mpich_flavour(void **state)
{
    (void)state;
    char shim[PATH_MAX], check[PATH_MAX];
    if (!proc_on_path("mpiexec.mpich") || !built("libautoinfra-mpi-mpich.so", shim, sizeof shim) ||
        !built("mpi_shim_check-mpich", check, sizeof check)) {
        print_message("MPICH flavour not built or mpiexec.mpich missing; skipping\n");
        skip();
    }
    char *argv[] = {"timeout", "-k", "5", "80", "mpiexec.mpich", "-n", "3", "-genv",
                    "LD_PRELOAD", shim, check, "--expect", "shim", "--quick", NULL};
    int rc = proc_run(argv, RUN_LIMIT_S, outbuf, sizeof outbuf, errbuf, sizeof errbuf);
    if (rc == PROC_TIMEOUT)
        fail_msg("mpiexec.mpich still running after %d s; stderr: %s", RUN_LIMIT_S, errbuf);
    expect_ok(rc, "MPICH: mpi_shim_check --expect shim");
    long calls, falls;
    summary(&calls, &falls);
    assert_true(calls > 0);
}

/* ------------------------------------------------------------------------
 * Correct programs that must run unchanged (mpi_shim_trust), under each MPI
 * flavour that was built: Open MPI's mpirun, MPICH's mpiexec.mpich. */

typedef struct flavour {
    const char *name, *launcher, *shim, *prog;
} flavour;

static const flavour flavours[] = {
    {"Open MPI", "mpirun", "libautoinfra-mpi.so", "mpi_shim_trust"},
    {"MPICH", "mpiexec.mpich", "libautoinfra-mpi-mpich.so", "mpi_shim_trust-mpich"},
};

/* mpi_shim_trust on 3 ranks under flavour f with the shim preloaded,
 * settings NAME=VALUE, killed after limit_s seconds; 0 if this flavour was
 * not built (nothing run). *rc gets the exit status. */
static int trust_run(const flavour *f, int limit_s, const char *const *vars,
                     const char *const *args, int *rc)
{
    char shim[PATH_MAX], prog[PATH_MAX], limit[16], kv[8][128];
    char *argv[64];
    int n = 0;
    if (!proc_on_path(f->launcher) || !built(f->shim, shim, sizeof shim) ||
        !built(f->prog, prog, sizeof prog))
        return 0;
    snprintf(limit, sizeof limit, "%d", limit_s);
    int ompi = !strcmp(f->launcher, "mpirun");
    const char *pre[] = {"env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                         "OMPI_MCA_rmaps_base_oversubscribe=1", "timeout", "-k", "5", limit,
                         f->launcher, ompi ? "--oversubscribe" : "-n", ompi ? "-np" : "3",
                         ompi ? "3" : NULL, NULL};
    for (int i = 0; pre[i]; i++)
        argv[n++] = (char *)pre[i];
    snprintf(kv[0], sizeof kv[0], "LD_PRELOAD=%s", shim);
    int nkv = 1;
    for (; vars && *vars && nkv < 8; vars++)
        snprintf(kv[nkv++], sizeof kv[0], "%s", *vars);
    for (int i = 0; i < nkv; i++) {
        if (ompi) {
            argv[n++] = "-x";
            argv[n++] = kv[i];
        } else {
            char *eq = strchr(kv[i], '=');
            *eq = '\0';
            argv[n++] = "-genv";
            argv[n++] = kv[i];
            argv[n++] = eq + 1;
        }
    }
    argv[n++] = prog;
    for (; args && *args && n < 63; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    *rc = proc_run(argv, limit_s + 10, outbuf, sizeof outbuf, errbuf, sizeof errbuf);
    if (*rc == PROC_TIMEOUT || *rc == 124 || *rc == 137)
        fail_msg("%s: mpi_shim_trust %s still running after %d s (exit %d); stdout:\n%s\n"
                 "stderr:\n%s",
                 f->name, args[0], limit_s, *rc, outbuf, errbuf);
    return 1;
}

/* Run a mode under every flavour built, with one more setting `extra`
 * (NAME=VALUE, or NULL); each must print OK with `calls` collectives in
 * autoinfra over all ranks (-1: any number above 0). */
static void trust_expect(const char *extra, const char *const *args, long calls)
{
    const char *x[] = {"AUTOINFRA_TIMEOUT=10", extra, NULL};
    int ran = 0;
    for (size_t i = 0; i < sizeof flavours / sizeof flavours[0]; i++) {
        const flavour *f = &flavours[i];
        int rc = 0;
        if (!trust_run(f, 60, x, args, &rc)) {
            print_message("%s: shim or launcher not there, not run\n", f->name);
            continue;
        }
        ran++;
        const char *s = strstr(outbuf, "calls in autoinfra");
        long got = -1;
        while (s && s > outbuf && s[-1] == ' ')
            s--;
        while (s && s > outbuf && s[-1] >= '0' && s[-1] <= '9')
            s--;
        if (s)
            got = strtol(s, NULL, 10);
        if (rc != 0 || !strstr(outbuf, "shim_trust: OK") || got < 0 ||
            (calls < 0 ? got == 0 : got != calls))
            fail_msg("%s: mpi_shim_trust %s%s%s: exit %d, %ld calls in autoinfra (expected %ld)\n"
                     "stdout:\n%s\nstderr:\n%s",
                     f->name, args[0], extra ? " with " : "", extra ? extra : "", rc, got, calls,
                     outbuf, errbuf);
    }
    if (!ran)
        skip();
}

/* Rank 1 in a blocking MPI_Send whose receive rank 0 posted before it
 * entered MPI_Allreduce / MPI_Allgather: MPI must complete that send, so
 * the shim has to drive MPI's progress while it waits in autoinfra, or
 * the job stalls until AUTOINFRA_TIMEOUT and aborts. Over shared memory
 * and over TCP only (autoinfra's two kinds of wait). */
static void test_pending_send_completes(void **state)
{
    (void)state;
    const char *ar[] = {"--pending-send", "allreduce", "8192", "262144", "4194304", NULL};
    const char *ag[] = {"--pending-send", "allgather", "8192", "262144", "4194304", NULL};
    trust_expect(NULL, ar, 3 * 3);
    trust_expect(NULL, ag, 3 * 3);
    trust_expect("AUTOINFRA_NO_SHM=1", ag, 3 * 3);
}

/* MPI_BOTTOM with datatypes of absolute addresses, in autoinfra (MPICH
 * refuses MPI_Pack of a NULL buffer; the shim must not hand it one). */
static void test_bottom_datatypes(void **state)
{
    (void)state;
    const char *a[] = {"--bottom", NULL};
    trust_expect(NULL, a, 3 * 5);
}

/* An uncommitted datatype under MPI_ERRORS_RETURN: MPI_ERR_TYPE returned
 * on every rank (the program checks), no abort; the committed type after
 * it runs in autoinfra (two broadcasts per rank). */
static void test_uncommitted_type_returns_error(void **state)
{
    (void)state;
    const char *a[] = {"--uncommitted", NULL};
    trust_expect(NULL, a, 3 * 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_results_through_autoinfra, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_results_over_tcp, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_mixed_datatypes, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_disabled, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_failed_setup_falls_back, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_bad_settings_refused, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_runtime_failure_aborts, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_mpich_flavour, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_pending_send_completes, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_bottom_datatypes, cmdtest_setup, cmdtest_teardown),
        cmocka_unit_test_setup_teardown(test_uncommitted_type_returns_error, cmdtest_setup,
                                        cmdtest_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
