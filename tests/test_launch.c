/*
 * `autoinfra launch`, tested from the outside: run $AUTOINFRA_BIN with
 * small sh ranks that write what they see into a scratch directory.
 * Every wait is bounded (deadline loops, plus alarm() per test as a
 * backstop), and every started launcher is killed on the way out.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST_ALARM_S 60

static char tmpdir[256]; /* per test, made in setup */
static char cmdbuf[4096];

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ai_test_launch.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    unsetenv("AUTOINFRA_TOKEN");
    alarm(TEST_ALARM_S);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    alarm(0);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* Start `autoinfra launch ARGS...` (argv after "launch", NULL-terminated)
 * with stdout/stderr into files of tmpdir; `own_group` puts it in a new
 * process group like a shell job. */
static pid_t start_launch(char *const *args, int own_group)
{
    char *argv[64];
    int n = 0;
    pid_t pid;
    argv[n++] = (char *)proc_bin();
    argv[n++] = "launch";
    for (; *args && n < 63; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char path[512];
        int fd;
        if (own_group)
            setpgid(0, 0);
        snprintf(path, sizeof path, "%s/launch.out", tmpdir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        snprintf(path, sizeof path, "%s/launch.err", tmpdir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        alarm(0);
        execv(argv[0], argv);
        _exit(99);
    }
    if (own_group)
        setpgid(pid, pid);
    return pid;
}

/* Wait up to limit_s; on timeout kill it (and its job) and fail. Returns the
 * shell-style status (code, or 128+signal). */
static int wait_bounded(pid_t pid, double limit_s)
{
    double end = proc_now() + limit_s;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (proc_now() > end) {
            kill(pid, SIGTERM);
            sleep_ms(3000);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("launcher still running after %.1f s", limit_s);
        }
        sleep_ms(10);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run_launch(char *const *args, double limit_s, double *elapsed)
{
    double t0 = proc_now();
    int rc = wait_bounded(start_launch(args, 0), limit_s);
    if (elapsed)
        *elapsed = proc_now() - t0;
    return rc;
}

/* Whole file into a static buffer ("" if missing). */
static const char *slurp(const char *name)
{
    static char buf[65536];
    char path[512];
    FILE *f;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    buf[0] = '\0';
    f = fopen(path, "r");
    if (f) {
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* Value of VAR in an `env` dump file, into out ("" when absent). */
static void env_of(const char *file, const char *var, char *out, size_t len)
{
    const char *text = slurp(file);
    size_t vl = strlen(var);
    out[0] = '\0';
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, var, vl) && l[vl] == '=') {
            size_t n = strcspn(l + vl + 1, "\n");
            if (n >= len)
                n = len - 1;
            memcpy(out, l + vl + 1, n);
            out[n] = '\0';
            return;
        }
    }
}

/* VAR in an `env` dump file is the integer want / the string want. */
static void expect_env_int(const char *file, const char *var, int want)
{
    char v[256];
    env_of(file, var, v, sizeof v);
    if (!*v || atoi(v) != want)
        fail_msg("%s: %s=%s, expected %d", file, var, v, want);
}

static void expect_env_str(const char *file, const char *var, const char *want)
{
    char v[256];
    env_of(file, var, v, sizeof v);
    if (strcmp(v, want))
        fail_msg("%s: %s=%s, expected %s", file, var, v, want);
}

static int file_exists(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return access(path, F_OK) == 0;
}

/* Wait until all ranks wrote tmpdir/<prefix>.<rank>. */
static void wait_files(const char *prefix, int n, double limit_s)
{
    double end = proc_now() + limit_s;
    char name[64];
    for (int r = 0; r < n; r++) {
        snprintf(name, sizeof name, "%s.%d", prefix, r);
        while (!file_exists(name)) {
            if (proc_now() > end)
                fail_msg("rank %d did not write %s within %.0f s", r, name, limit_s);
            sleep_ms(10);
        }
    }
}

/* pids written by ranks into pid.<rank> are gone within limit_s. */
static void assert_pids_gone(int n, double limit_s)
{
    double end = proc_now() + limit_s;
    char name[64];
    for (int r = 0; r < n; r++) {
        long pid;
        snprintf(name, sizeof name, "pid.%d", r);
        if (!file_exists(name))
            continue;
        pid = strtol(slurp(name), NULL, 10);
        assert_true(pid > 1);
        while (kill((pid_t)pid, 0) == 0) {
            if (proc_now() > end) {
                kill((pid_t)pid, SIGKILL);
                fail_msg("rank %d (pid %ld) still alive %.0f s after the launcher ended", r, pid,
                         limit_s);
            }
            sleep_ms(20);
        }
    }
}

/* The first port of net.ipv4.ip_local_port_range. */
static int ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int lo = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%d", &lo), 1);
    fclose(f);
    assert_true(lo >= 10064);
    return lo;
}

/* ------------------------------------------------------------ tests */

static void test_env_per_rank(void **state)
{
    char *args[] = {"-n", "4", "--", "sh", "-c", cmdbuf, NULL};
    char v[256], addr0[256], tok0[256], name[32];
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf, "env > %s/env.$AUTOINFRA_RANK", tmpdir);
    assert_int_equal(run_launch(args, 20, NULL), 0);
    for (int r = 0; r < 4; r++) {
        snprintf(name, sizeof name, "env.%d", r);
        env_of(name, "AUTOINFRA_RANK", v, sizeof v);
        assert_int_equal(atoi(v), r);
        env_of(name, "AUTOINFRA_SIZE", v, sizeof v);
        assert_string_equal(v, "4");
        env_of(name, "AUTOINFRA_LOCAL_RANK", v, sizeof v);
        assert_int_equal(atoi(v), r);
        env_of(name, "AUTOINFRA_LOCAL_SIZE", v, sizeof v);
        assert_string_equal(v, "4");
        env_of(name, "AUTOINFRA_HOST", v, sizeof v);
        assert_string_equal(v, "");
        env_of(name, "AUTOINFRA_ADDR", v, sizeof v);
        assert_true(!strncmp(v, "127.0.0.1:", 10));
        /* Below the ephemeral range, which outgoing connects draw from
         * (with a range starting at 10064 or above, as Linux's does). */
        assert_true(atoi(v + 10) >= 10000 && atoi(v + 10) < ephemeral_low());
        if (r == 0)
            strcpy(addr0, v);
        assert_string_equal(v, addr0);
        env_of(name, "AUTOINFRA_TOKEN", v, sizeof v);
        assert_int_equal(strlen(v), 32);
        assert_int_equal(strspn(v, "0123456789abcdef"), 32);
        if (r == 0)
            strcpy(tok0, v);
        assert_string_equal(v, tok0);
    }
}

/* torch.distributed's env:// variables: per rank, hosts in blocks, the
 * store host as MASTER_ADDR, MASTER_PORT one free port for the whole job
 * and never the rendezvous port; inherited values are replaced. */
static void test_torch_env(void **state)
{
    static const int local[5] = {0, 1, 2, 0, 1};
    static const int lsize[5] = {3, 3, 3, 2, 2};
    char *args[] = {"-n", "5", "--hosts", "a,b", "--store-host", "127.0.0.1", "--", "sh", "-c",
                    cmdbuf, NULL};
    char v[256], port0[64], name[32];
    (void)state;
    setenv("RANK", "17", 1);
    setenv("MASTER_PORT", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "9", 1);
    snprintf(cmdbuf, sizeof cmdbuf, "env > %s/env.$RANK", tmpdir);
    assert_int_equal(run_launch(args, 20, NULL), 0);
    unsetenv("RANK");
    unsetenv("MASTER_PORT");
    unsetenv("LOCAL_WORLD_SIZE");
    for (int r = 0; r < 5; r++) {
        snprintf(name, sizeof name, "env.%d", r);
        expect_env_int(name, "RANK", r);
        expect_env_int(name, "AUTOINFRA_RANK", r);
        expect_env_int(name, "WORLD_SIZE", 5);
        expect_env_int(name, "LOCAL_RANK", local[r]);
        expect_env_int(name, "LOCAL_WORLD_SIZE", lsize[r]);
        expect_env_str(name, "MASTER_ADDR", "127.0.0.1");
        env_of(name, "MASTER_PORT", v, sizeof v);
        assert_true(atoi(v) >= 10000 && atoi(v) < 65536);
        if (r == 0)
            strcpy(port0, v);
        assert_string_equal(v, port0);
        env_of(name, "AUTOINFRA_ADDR", v, sizeof v);
        assert_int_not_equal(atoi(strchr(v, ':') + 1), atoi(port0));
    }
}

static void test_token_and_port_given(void **state)
{
    char *args[] = {"-n", "2", "--port", "4567", "--", "sh", "-c", cmdbuf, NULL};
    char v[256];
    (void)state;
    setenv("AUTOINFRA_TOKEN", "0123456789abcdef0123456789abcdef", 1);
    snprintf(cmdbuf, sizeof cmdbuf, "env > %s/env.$AUTOINFRA_RANK", tmpdir);
    assert_int_equal(run_launch(args, 20, NULL), 0);
    unsetenv("AUTOINFRA_TOKEN");
    env_of("env.1", "AUTOINFRA_TOKEN", v, sizeof v);
    assert_string_equal(v, "0123456789abcdef0123456789abcdef");
    env_of("env.1", "AUTOINFRA_ADDR", v, sizeof v);
    assert_string_equal(v, "127.0.0.1:4567");
}

static void test_hosts_blocks(void **state)
{
    /* 7 ranks on 3 hosts: 3 + 2 + 2, the first host gets the remainder. */
    static const char *host[7] = {"a", "a", "a", "b", "b", "c", "c"};
    static const int local[7] = {0, 1, 2, 0, 1, 0, 1};
    static const int lsize[7] = {3, 3, 3, 2, 2, 2, 2};
    char *args[] = {"-n", "7", "--hosts", "a,b,c", "--", "sh", "-c", cmdbuf, NULL};
    char name[32];
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf, "env > %s/env.$AUTOINFRA_RANK", tmpdir);
    assert_int_equal(run_launch(args, 20, NULL), 0);
    for (int r = 0; r < 7; r++) {
        snprintf(name, sizeof name, "env.%d", r);
        expect_env_str(name, "AUTOINFRA_HOST", host[r]);
        expect_env_int(name, "AUTOINFRA_LOCAL_RANK", local[r]);
        expect_env_int(name, "AUTOINFRA_LOCAL_SIZE", lsize[r]);
        expect_env_str(name, "AUTOINFRA_SIZE", "7");
    }
}

static void test_all_succeed(void **state)
{
    char *args[] = {"-n", "3", "--", "true", NULL};
    (void)state;
    assert_int_equal(run_launch(args, 20, NULL), 0);
    assert_string_equal(slurp("launch.err"), "");
}

static void test_first_failure_stops_others(void **state)
{
    char *args[] = {"-n", "4", "--", "sh", "-c", cmdbuf, NULL};
    double elapsed;
    (void)state;
    /* Rank 2 fails once everybody is up; the others would sleep 30 s. */
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; echo $$ > pid.$AUTOINFRA_RANK.tmp; mv pid.$AUTOINFRA_RANK.tmp "
             "pid.$AUTOINFRA_RANK;"
             "if [ $AUTOINFRA_RANK = 2 ]; then "
             "  while [ $(ls pid.? | wc -l) -lt 4 ]; do sleep 0.05; done; exit 3; fi;"
             "exec sleep 30", tmpdir);
    assert_int_equal(run_launch(args, 20, &elapsed), 3);
    assert_true(elapsed < 8);
    assert_non_null(strstr(slurp("launch.err"), "rank 2 exited with status 3; stopping 3 other ranks"));
    assert_pids_gone(4, 3);
}

static void test_killed_rank_status(void **state)
{
    char *args[] = {"-n", "2", "--", "sh", "-c", cmdbuf, NULL};
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "if [ $AUTOINFRA_RANK = 1 ]; then kill -KILL $$; fi; exec sleep 30");
    assert_int_equal(run_launch(args, 20, NULL), 128 + SIGKILL);
    assert_non_null(strstr(slurp("launch.err"), "rank 1 was killed by signal 9"));
}

static void test_grandchildren_killed(void **state)
{
    /* A rank whose shell forks (no exec) leaves a sleep behind unless the
     * whole process group is signalled. */
    char *args[] = {"-n", "2", "--", "sh", "-c", cmdbuf, NULL};
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; if [ $AUTOINFRA_RANK = 1 ]; then "
             "  while [ ! -s pid.0 ]; do sleep 0.05; done; exit 5; fi;"
             "sleep 30 & echo $! > pid.0.tmp; mv pid.0.tmp pid.0; wait", tmpdir);
    assert_int_equal(run_launch(args, 20, NULL), 5);
    assert_true(file_exists("pid.0"));
    assert_pids_gone(1, 3);
}

static void test_sigterm_to_launcher(void **state)
{
    char *args[] = {"-n", "3", "--", "sh", "-c", cmdbuf, NULL};
    pid_t pid;
    int rc;
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; echo $$ > pid.$AUTOINFRA_RANK.tmp; mv pid.$AUTOINFRA_RANK.tmp "
             "pid.$AUTOINFRA_RANK; exec sleep 30", tmpdir);
    pid = start_launch(args, 0);
    wait_files("pid", 3, 10);
    kill(pid, SIGTERM);
    rc = wait_bounded(pid, 8);
    assert_int_equal(rc, 128 + SIGTERM);
    assert_pids_gone(3, 3);
}

static void test_launcher_killed(void **state)
{
    /* SIGKILL cannot be forwarded; the ranks' parent-death signal must
     * take them down anyway. */
    char *args[] = {"-n", "3", "--", "sh", "-c", cmdbuf, NULL};
    pid_t pid;
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; echo $$ > pid.$AUTOINFRA_RANK.tmp; mv pid.$AUTOINFRA_RANK.tmp "
             "pid.$AUTOINFRA_RANK; exec sleep 30", tmpdir);
    pid = start_launch(args, 0);
    wait_files("pid", 3, 10);
    kill(pid, SIGKILL);
    assert_int_equal(wait_bounded(pid, 5), 128 + SIGKILL);
    assert_pids_gone(3, 3);
}

static void test_signal_reaches_ranks_once(void **state)
{
    /* Like Ctrl-C on a terminal: SIGINT to the launcher's whole process
     * group. Each rank must see it exactly once. */
    char *args[] = {"-n", "3", "--", "sh", "-c", cmdbuf, NULL};
    char name[32];
    pid_t pid;
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; trap 'echo x >> sig.$AUTOINFRA_RANK' INT;"
             "echo ok > ready.$AUTOINFRA_RANK; n=0;"
             "while [ $n -lt 10 ]; do sleep 0.1; n=$((n+1)); done; exit 0", tmpdir);
    pid = start_launch(args, 1);
    wait_files("ready", 3, 10);
    kill(-pid, SIGINT);
    assert_int_equal(wait_bounded(pid, 8), 128 + SIGINT);
    for (int r = 0; r < 3; r++) {
        snprintf(name, sizeof name, "sig.%d", r);
        assert_string_equal(slurp(name), "x\n");
    }
}

static void test_ranks_in_own_group(void **state)
{
    /* Why a terminal's signal cannot reach a rank twice: the ranks share
     * one process group (led by rank 0) that is not the launcher's. Two
     * deliveries of a standard signal may merge, so counting alone (the
     * test above) cannot prove this. */
    char *args[] = {"-n", "3", "--", "sh", "-c", cmdbuf, NULL};
    char name[32];
    long pgid0 = 0, pid0 = 0;
    pid_t pid;
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; echo $$ > pid.$AUTOINFRA_RANK;"
             "cut -d' ' -f5 /proc/$$/stat > pgid.$AUTOINFRA_RANK", tmpdir);
    pid = start_launch(args, 1);
    assert_int_equal(wait_bounded(pid, 20), 0);
    pid0 = strtol(slurp("pid.0"), NULL, 10);
    for (int r = 0; r < 3; r++) {
        long g;
        snprintf(name, sizeof name, "pgid.%d", r);
        g = strtol(slurp(name), NULL, 10);
        assert_true(g > 0);
        assert_true(g != (long)pid); /* not the launcher's group */
        if (r == 0)
            pgid0 = g;
        assert_int_equal(g, pgid0);
    }
    assert_int_equal(pgid0, pid0); /* rank 0 leads it */
}

static void test_timeout(void **state)
{
    char *args[] = {"-n", "2", "--timeout", "1", "--", "sh", "-c", cmdbuf, NULL};
    double elapsed;
    (void)state;
    /* Rank 1 ignores SIGTERM: the launcher must escalate to SIGKILL. */
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; if [ $AUTOINFRA_RANK = 1 ]; then trap '' TERM; fi;"
             "echo $$ > pid.$AUTOINFRA_RANK; while :; do sleep 0.1; done", tmpdir);
    assert_int_equal(run_launch(args, 15, &elapsed), 124);
    assert_true(elapsed >= 1.0 && elapsed < 8);
    assert_non_null(strstr(slurp("launch.err"), "--timeout"));
    assert_pids_gone(2, 3);
}

/* --bind core (the default when the ranks fit the CPUs): each rank may run
 * on one CPU, a different one per rank; --bind none leaves them the
 * launcher's. */
static void test_bind(void **state)
{
    char *bound[] = {"-n", "2", "--", "sh", "-c", cmdbuf, NULL};
    char *unbound[] = {"-n", "2", "--bind", "none", "--", "sh", "-c", cmdbuf, NULL};
    char name[32], mine[64], seen[2][64];
    (void)state;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2)
        skip(); /* 2 ranks would not fit: nothing is bound */
    FILE *f = fopen("/proc/self/status", "r");
    assert_non_null(f);
    mine[0] = '\0';
    while (fgets(cmdbuf, sizeof cmdbuf, f))
        if (sscanf(cmdbuf, "Cpus_allowed_list: %63s", mine) == 1)
            break;
    fclose(f);
    snprintf(cmdbuf, sizeof cmdbuf,
             "grep Cpus_allowed_list /proc/self/status | cut -f2 > %s/cpus.$AUTOINFRA_RANK", tmpdir);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(run_launch(pass ? unbound : bound, 20, NULL), 0);
        for (int r = 0; r < 2; r++) {
            snprintf(name, sizeof name, "cpus.%d", r);
            snprintf(seen[r], sizeof seen[r], "%s", slurp(name));
            seen[r][strcspn(seen[r], "\n")] = '\0';
            if (pass == 0) /* one CPU: a number, no list or range */
                assert_int_equal(strspn(seen[r], "0123456789"), strlen(seen[r]));
            else
                assert_string_equal(seen[r], mine);
        }
        if (pass == 0)
            assert_string_not_equal(seen[0], seen[1]);
    }
}

static void check_usage_error(char **args, int want_rc, const char *want_msg)
{
    assert_int_equal(run_launch(args, 10, NULL), want_rc);
    if (!strstr(slurp("launch.err"), want_msg))
        fail_msg("stderr '%s' does not mention '%s'", slurp("launch.err"), want_msg);
}

static void test_bad_flags(void **state)
{
    char *n0[] = {"-n", "0", "--", "true", NULL};
    char *nabc[] = {"-n", "abc", "--", "true", NULL};
    char *nodash[] = {"-n", "2", "true", NULL};
    char *unknown[] = {"--frobnicate", "-n", "2", "--", "true", NULL};
    char *nocmd[] = {"-n", "2", "--", NULL};
    char *non[] = {"--", "true", NULL};
    char *noval[] = {"-n", NULL};
    char *badhosts[] = {"-n", "2", "--hosts", "a,,b", "--", "true", NULL};
    char *badtimeout[] = {"-n", "2", "--timeout", "-1", "--", "true", NULL};
    char *badport[] = {"-n", "2", "--port", "70000", "--", "true", NULL};
    char *notfound[] = {"-n", "2", "--", "no-such-command-autoinfra", NULL};
    char *badbind[] = {"-n", "2", "--bind", "socket", "--", "true", NULL};
    char *restarts[] = {"-n", "2", "--restarts", "1", "--", "true", NULL};
    (void)state;
    check_usage_error(restarts, 2, "--restarts needs --elastic");
    check_usage_error(badbind, 2, "--bind 'socket'");
    check_usage_error(n0, 2, "-n '0'");
    check_usage_error(nabc, 2, "-n 'abc'");
    check_usage_error(nodash, 2, "missing '--'");
    check_usage_error(unknown, 2, "unknown option '--frobnicate'");
    check_usage_error(nocmd, 2, "no command");
    check_usage_error(non, 2, "missing -n");
    check_usage_error(noval, 2, "needs a value");
    check_usage_error(badhosts, 2, "empty host name");
    check_usage_error(badtimeout, 2, "--timeout");
    check_usage_error(badport, 2, "--port");
    check_usage_error(notfound, 127, "command not found");
}

static void test_help(void **state)
{
    char *args[] = {"--help", NULL};
    (void)state;
    assert_int_equal(run_launch(args, 10, NULL), 0);
    assert_non_null(strstr(slurp("launch.out"), "usage: autoinfra launch"));
}

static void test_wrap_hook(void **state)
{
    char *args[] = {"-n", "2", "--hosts", "h0,h1", "--wrap", "env WRAPPED={host}", "--", "sh",
                    "-c", cmdbuf, NULL};
    char v[64];
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf, "env > %s/env.$AUTOINFRA_RANK", tmpdir);
    assert_int_equal(run_launch(args, 20, NULL), 0);
    env_of("env.1", "WRAPPED", v, sizeof v);
    assert_string_equal(v, "h1");
}

/* --elastic: rank 0 (the group's leader) is killed once everybody is up;
 * the others go on, and with --restarts 1 a replacement starts, told to
 * join (AUTOINFRA_JOIN_ADDR, the job's door), which the others wait for. */
static void test_elastic_restart(void **state)
{
    char *args[] = {"-n", "3", "--elastic", "--restarts", "1", "--timeout", "20", "--", "sh",
                    "-c", cmdbuf, NULL};
    char v[128], door[128];
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; if [ -n \"$AUTOINFRA_JOIN_ADDR\" ]; then "
             "  env > env.joiner.tmp; mv env.joiner.tmp env.joiner; exit 0; fi;"
             "env > env.$AUTOINFRA_RANK; touch up.$AUTOINFRA_RANK;"
             "while [ $(ls up.? | wc -l) -lt 3 ]; do sleep 0.05; done;"
             "if [ $AUTOINFRA_RANK = 0 ]; then kill -KILL $$; fi;"
             "while [ ! -f env.joiner ]; do sleep 0.05; done; touch done.$AUTOINFRA_RANK",
             tmpdir);
    assert_int_equal(run_launch(args, 30, NULL), 0);
    const char *err = slurp("launch.err");
    assert_non_null(strstr(err, "rank 0 was killed by signal 9"));
    assert_non_null(strstr(err, "--elastic: 2 other ranks go on, starting a replacement"));
    assert_true(file_exists("done.1"));
    assert_true(file_exists("done.2"));
    /* The replacement: rank 0's place, told the door every rank was given. */
    env_of("env.1", "AUTOINFRA_JOIN_DOOR", door, sizeof door);
    assert_true(strlen(door) > 10);
    env_of("env.joiner", "AUTOINFRA_JOIN_ADDR", v, sizeof v);
    assert_string_equal(v, door);
    env_of("env.joiner", "AUTOINFRA_RANK", v, sizeof v);
    assert_string_equal(v, "0");
}

/* --elastic without restarts: a failure while others run does not stop
 * them; the last process's status is the job's. */
static void test_elastic_status(void **state)
{
    char *args[] = {"-n", "3", "--elastic", "--timeout", "20", "--", "sh", "-c", cmdbuf, NULL};
    (void)state;
    snprintf(cmdbuf, sizeof cmdbuf,
             "cd %s; if [ $AUTOINFRA_RANK = 1 ]; then touch gone.1; exit 3; fi;"
             "while [ ! -f gone.1 ]; do sleep 0.05; done; sleep 0.3;"
             "if [ $AUTOINFRA_RANK = 2 ]; then touch gone.2; exit 0; fi;"
             "while [ ! -f gone.2 ]; do sleep 0.05; done; sleep 0.3; exit 4", tmpdir);
    assert_int_equal(run_launch(args, 30, NULL), 4);
    assert_non_null(strstr(slurp("launch.err"), "rank 1 exited with status 3; --elastic: 2 other "
                                                "ranks go on\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_env_per_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_and_port_given, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torch_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hosts_blocks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_succeed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_failure_stops_others, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_rank_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grandchildren_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigterm_to_launcher, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launcher_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signal_reaches_ranks_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranks_in_own_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bind, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrap_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(test_elastic_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_elastic_status, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
