/*
 * The learner and its knowledge base:
 *  - every rank follows the same arm for the same call (mixed shm + TCP,
 *    sizes in a shuffled order, results checked), and once settled (at
 *    most 32 calls per bucket; or reset by a drift, which every rank sees
 *    alike) every rank reports the same choice;
 *  - a second job on the same fingerprint starts warm: no exploration, the
 *    KB's best arm from its first call (the arm the last job ran, unless
 *    another is expected 2% faster), no "explore" or "refine" rows
 *    written, and the rows of arms it did not run left as they were; when
 *    one rank turns slow mid-job (the cluster changed), the
 *    learner sees the drift and learns again within 64 slow calls that
 *    the CPU wait does not explain (not before: a warm job's slow first
 *    calls are no drift, nor is load); a window that one rank
 *    other than rank 0 sees slow is followed by the shortest window;
 *  - rank 0 writes the KB in batches: with AUTOINFRA_TUNE_SAVE_S long,
 *    nothing during the job and all of it when the communicator goes;
 *    with 0, after every agreement;
 *  - the KB survives kill -9 in the middle of its writes, consistent;
 *  - a KB another process holds locked stalls no collective and loses
 *    nothing (saved when the lock goes), even when the lock keeps the job
 *    from opening it at all; another application's SQLite file is refused
 *    and left byte-identical; a read-only KB is read, and so is one on a
 *    full disk, the log saying why nothing is saved; a FIFO is refused at
 *    once;
 *  - the choices table: a cold job logs the arm it settled on and the
 *    runner-up, a warm one its warm start; a KB of schema 1 is upgraded,
 *    one of a newer schema refused;
 *  - JSON export / import round trip and clear errors on bad files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/ranks.h"
#include "tune/tune.h"

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void path_in(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ai-tune-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv("AUTOINFRA_TUNE_MIN", "16K", 1);
    setenv("AUTOINFRA_TUNE_BUDGET", "8", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------- identical decisions */

#define SIZES 5
static const size_t sizes[SIZES] = {16 << 10, 24 << 10, 64 << 10, 100 << 10, 256 << 10};

static uint64_t choice_hash(const ai_choice *ch)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = ch->algo; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (const char *p = ch->source; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h ^ ch->chunk_bytes * 31 ^ (uint64_t)ch->channels * 7;
}

static int same_choices(ai_comm *c, void *arg)
{
    (void)arg;
    int r = ai_comm_rank(c), p = ai_comm_size(c);
    size_t maxc = sizes[SIZES - 1] / sizeof(float);
    float *buf = malloc(maxc * sizeof *buf);
    if (!buf)
        return 1;
    unsigned seed = 12345; /* the same shuffled order on every rank */
    for (int call = 0; call < 120 + 33 * SIZES; call++) {
        seed = seed * 1103515245u + 12345u;
        /* 120 calls in a shuffled order, then 33 of each size, so every
         * bucket has passed its horizon */
        int k = call < 120 ? (int)((seed >> 16) % SIZES) : (call - 120) / 33;
        size_t n = sizes[k] / sizeof(float);
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)((r + 1) * (int)(i % 7));
        ai_status_t st = ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL);
        if (st != AI_OK) {
            fprintf(stderr, "rank %d call %d: %s: %s\n", r, call, ai_strerror(st), ai_last_error());
            free(buf);
            return 1;
        }
        float want = (float)(p * (p + 1) / 2);
        for (size_t i = 0; i < n; i++)
            if (buf[i] != want * (float)(i % 7)) {
                fprintf(stderr, "rank %d call %d: [%zu] = %g, want %g\n", r, call, i, buf[i],
                        want * (float)(i % 7));
                free(buf);
                return 1;
            }
    }
    free(buf);
    for (int s = 0; s < SIZES; s++) {
        ai_choice ch;
        if (ai_comm_choice(c, AI_ALLREDUCE, sizes[s], &ch) != AI_OK)
            return 1;
        uint64_t lo = choice_hash(&ch), hi = lo;
        if (ai_allreduce(c, AI_IN_PLACE, &lo, 1, AI_I64, AI_MIN, NULL) != AI_OK ||
            ai_allreduce(c, AI_IN_PLACE, &hi, 1, AI_I64, AI_MAX, NULL) != AI_OK)
            return 1;
        if (lo != hi) {
            fprintf(stderr, "rank %d: %zu bytes: ranks report different arms (%s here)\n", r,
                    sizes[s], ch.algo);
            return 1;
        }
    }
    return 0;
}

static void test_identical_decisions(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "same.sqlite");
    setenv("AUTOINFRA_KB", kb, 1);
    ranks_opts o = {.nhosts = 2, .deadline_s = 120};
    assert_int_equal(ranks_run(4, &o, same_choices, NULL), 0);
    ranks_opts shm = {.deadline_s = 120};
    assert_int_equal(ranks_run(3, &shm, same_choices, NULL), 0);
}

/* ----------------------------------------------------------- warm start */

typedef struct {
    int calls;
    int expect_warm;
    size_t bytes;
} warm_arg;

static int run_bucket(ai_comm *c, void *arg)
{
    const warm_arg *w = arg;
    size_t n = w->bytes / sizeof(float);
    float *buf = calloc(n, sizeof *buf);
    if (!buf)
        return 1;
    for (int i = 0; i < w->calls; i++) {
        if (ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL) != AI_OK) {
            fprintf(stderr, "allreduce: %s\n", ai_last_error());
            free(buf);
            return 1;
        }
        ai_choice ch;
        if (w->expect_warm && ai_comm_rank(c) == 0 &&
            (ai_comm_choice(c, AI_ALLREDUCE, n * sizeof(float), &ch) != AI_OK ||
             strcmp(ch.source, "kb") || ch.explored != 0)) {
            fprintf(stderr, "call %d: source %s, explored %d: want kb, 0\n", i, ch.source,
                    ch.explored);
            free(buf);
            return 1;
        }
    }
    free(buf);
    return 0;
}

static long count_rows(const char *kb, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *q;
    long n = -1;
    if (sqlite3_open_v2(kb, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
        if (sqlite3_step(q) == SQLITE_ROW)
            n = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
    }
    sqlite3_close(db);
    return n;
}

static void test_warm_start(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "warm.sqlite");
    setenv("AUTOINFRA_KB", kb, 1);
    ranks_opts o = {.deadline_s = 120};
    warm_arg cold = {40, 0, 64 << 10}, warm = {12, 1, 64 << 10};
    assert_int_equal(ranks_run(2, &o, run_bucket, &cold), 0);
    long explore = count_rows(kb, "SELECT count(*) FROM measurements WHERE phase = 'explore'");
    long settled = count_rows(kb, "SELECT count(*) FROM buckets WHERE settled = 1");
    assert_true(explore >= 1);
    assert_int_equal(settled, 1);
    long refine = count_rows(kb, "SELECT count(*) FROM measurements WHERE phase = 'refine'");
    assert_int_equal(ranks_run(2, &o, run_bucket, &warm), 0);
    assert_int_equal(count_rows(kb, "SELECT count(*) FROM measurements WHERE phase = 'explore'"),
                     explore);
    assert_int_equal(count_rows(kb, "SELECT count(*) FROM measurements WHERE phase = 'refine'"),
                     refine);
    assert_true(count_rows(kb, "SELECT count(*) FROM measurements WHERE phase = 'exploit'") > 0);
}

/* A bucket's first 3 calls and each arm's first call teach nothing: a
 * cold job of 6 calls learns from its 4th call (the first arm's), and
 * from the 6th, or the 5th and 6th when the first arm runs again; every
 * learned window is one measurement row. Learning from every call but the
 * first would leave 5. */
static void test_first_calls_unlearned(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "first-calls.sqlite");
    unlink(kb);
    setenv("AUTOINFRA_KB", kb, 1);
    ranks_opts o = {.deadline_s = 120};
    warm_arg cold = {6, 0, 64 << 10};
    assert_int_equal(ranks_run(2, &o, run_bucket, &cold), 0);
    long rows = count_rows(kb, "SELECT count(*) FROM measurements");
    if (rows < 2 || rows > 3)
        fprintf(stderr, "%ld windows learned from 6 calls, want 2 or 3\n", rows);
    assert_true(rows >= 2 && rows <= 3);
}

/* ai_comm_config.kb_path (the CLI's --kb) is the KB the learner writes,
 * over AUTOINFRA_KB; the environment's file is not even created. */
static void test_config_kb_path(void **state)
{
    (void)state;
    char given[300], env[300];
    path_in(given, sizeof given, "given.sqlite");
    path_in(env, sizeof env, "from-env.sqlite");
    unlink(given);
    unlink(env);
    setenv("AUTOINFRA_KB", env, 1);
    ranks_opts o = {.deadline_s = 120, .kb_path = given};
    warm_arg cold = {40, 0, 64 << 10};
    assert_int_equal(ranks_run(2, &o, run_bucket, &cold), 0);
    assert_true(count_rows(given, "SELECT count(*) FROM measurements") > 0);
    assert_int_equal(access(env, F_OK), -1);
}

/* A warm job starts on the arm the last job exploited, unless the KB
 * expects another to be 2% faster: rank 0 writes a settled bucket of two
 * arms, the second `gap` (log) slower and the one last exploited, before
 * the job's first call. */
typedef struct {
    double gap;
    int want_last;
    int calls;        /* calls in all (at least 1) */
    double kb_log;    /* the first arm's log seconds in the KB (0: -7, 0.9 ms) */
    long rival_n;     /* the second arm's calls in the KB (0: 40) */
    int want_relearn; /* the job learns the bucket again (rivals_stale) */
} last_arg;

static int run_from_last(ai_comm *c, void *arg)
{
    const last_arg *a = arg;
    size_t bytes = 64 << 10, n = bytes / sizeof(float);
    ai_algo_opts arms[TUNE_MAX_ARMS];
    int bad = ai_comm_arms(c, AI_ALLREDUCE, bytes, arms, TUNE_MAX_ARMS) < 2;
    if (!bad && ai_comm_rank(c) == 0) {
        char fp[17];
        ai_kb *kb = NULL;
        tune_arm_stat st[2];
        memset(st, 0, sizeof st);
        for (int i = 0; i < 2; i++) {
            snprintf(st[i].algo, sizeof st[i].algo, "%s", arms[i].algo);
            st[i].chunk = arms[i].chunk_bytes;
            st[i].channels = arms[i].channels;
            st[i].n = i == 1 && a->rival_n ? a->rival_n : 40;
            st[i].m = (a->kb_log ? a->kb_log : -7) + i * a->gap;
            st[i].v = 1e-4;
        }
        tune_bucket_info info = {.explored = 24, .settled = 1};
        bad = ai_comm_fingerprint(c, fp) != AI_OK ||
              kb_open_writer(getenv("AUTOINFRA_KB"), &kb) != AI_OK ||
              kb_end(kb, kb_begin(kb, fp, 2, 1, "") == AI_OK &&
                                 kb_put_bucket(kb, fp, AI_ALLREDUCE, bytes, st, 2, &info) == AI_OK
                             ? kb_put_measurement(kb, fp, AI_ALLREDUCE, bytes, &st[1],
                                                  exp(st[1].m), "exploit", 0)
                             : AI_ERR_IO) != AI_OK;
        ai_kb_close(kb);
    }
    float *buf = calloc(n, sizeof *buf);
    ai_choice ch;
    bad |= !buf || ai_barrier(c, NULL) != AI_OK ||
           ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL) != AI_OK ||
           ai_comm_choice(c, AI_ALLREDUCE, bytes, &ch) != AI_OK;
    for (int i = 1; !bad && i < a->calls; i++)
        bad = ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL) != AI_OK;
    free(buf);
    ai_choice end;
    bad |= ai_comm_choice(c, AI_ALLREDUCE, bytes, &end) != AI_OK;
    if (!bad && a->want_relearn) {
        bad = strcmp(end.source, "learned") || (ai_comm_rank(c) == 0 && end.explored <= 0);
        if (bad)
            fprintf(stderr, "rank %d: the KB at %g s a call, a rival of %ld calls: %s, explored "
                            "%d; want learned, explored > 0\n",
                    ai_comm_rank(c), exp(a->kb_log), a->rival_n, end.source, end.explored);
        return bad;
    }
    if (!bad && a->rival_n && strcmp(end.source, "kb")) {
        fprintf(stderr, "rank %d: rival of %ld calls: the warm job learned the bucket again\n",
                ai_comm_rank(c), a->rival_n);
        return 1;
    }
    if (!bad && ai_comm_rank(c) == 0) {
        const ai_algo_opts *want = &arms[a->want_last ? 1 : 0];
        bad = strcmp(ch.source, "kb") || strcmp(ch.algo, want->algo) ||
              ch.chunk_bytes != want->chunk_bytes || ch.channels != want->channels;
        if (bad)
            fprintf(stderr, "gap %g: the warm job ran %s/%zu/%d (%s), want %s/%zu/%d\n", a->gap,
                    ch.algo, ch.chunk_bytes, ch.channels, ch.source, want->algo,
                    want->chunk_bytes, want->channels);
    }
    return bad;
}

static void test_warm_from_last(void **state)
{
    (void)state;
    ranks_opts o = {.deadline_s = 60};
    const last_arg cases[] = {{.gap = 0.01, .want_last = 1, .calls = 1},
                              {.gap = 0.05, .want_last = 0, .calls = 1}};
    for (int k = 0; k < 2; k++) {
        char kb[300];
        snprintf(kb, sizeof kb, "%s/last%d.sqlite", dir, k);
        setenv("AUTOINFRA_KB", kb, 1);
        assert_int_equal(ranks_run(2, &o, run_from_last, (void *)&cases[k]), 0);
    }
}

/* A warm job whose incumbent runs a drift's margin faster than the KB
 * knew it learns the bucket again after its first 32 calls if a rival
 * rests on few calls (timed, maybe, in a state that has passed): the KB
 * says 1 s a call, and the rival took one call. A rival of 40 calls keeps
 * the bucket warm: a KB from another machine is right about its arms
 * against each other. */
static void test_warm_relearns_stale_rivals(void **state)
{
    (void)state;
    ranks_opts o = {.deadline_s = 60};
    const last_arg cases[] = {
        {.gap = 0.05, .calls = 80, .kb_log = -0.001, .rival_n = 1, .want_relearn = 1},
        {.gap = 0.05, .calls = 80, .kb_log = -0.001, .rival_n = 40}};
    for (int k = 0; k < 2; k++) {
        char kb[300];
        snprintf(kb, sizeof kb, "%s/stale%d.sqlite", dir, k);
        unlink(kb);
        setenv("AUTOINFRA_KB", kb, 1);
        assert_int_equal(ranks_run(2, &o, run_from_last, (void *)&cases[k]), 0);
    }
}

/* A warm job writes back what it measured, and leaves the KB's rows of
 * the arms it did not run as they were: the KB said 0.9 ms a call, far
 * from what this machine takes, a level that moves every known arm's
 * estimate during the job, and that is no measurement of the arm it did
 * not run. */
static void test_warm_keeps_unrun(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "unrun.sqlite");
    setenv("AUTOINFRA_KB", kb, 1);
    ranks_opts o = {.deadline_s = 60};
    const last_arg warm = {.gap = 0.1, .calls = 7}; /* the first 3 calls, then one window */
    assert_int_equal(ranks_run(2, &o, run_from_last, (void *)&warm), 0);
    assert_int_equal(count_rows(kb, "SELECT count(*) FROM arms"), 2);
    /* The arm it ran: more samples; the other: the row rank 0 wrote. */
    assert_int_equal(count_rows(kb, "SELECT count(*) FROM arms WHERE samples > 40 AND "
                                    "mean_log <> -7"), 1);
    assert_int_equal(count_rows(kb, "SELECT count(*) FROM arms WHERE samples = 40 AND "
                                    "mean_log = -6.9 AND var_log = 1e-4"), 1);
}

/* 40 calls of one bucket, then rank 0 reads the KB (its own writes are
 * done: the next one would be in a later call) and checks what it finds
 * there mid-job against what the interval promises. */
typedef struct {
    const char *kb;
    int written; /* expected: 1: rows of this job's windows; 0: none */
} batch_arg;

static int run_then_count(ai_comm *c, void *arg)
{
    const batch_arg *a = arg;
    warm_arg w = {40, 0, 64 << 10};
    if (run_bucket(c, &w))
        return 1;
    int bad = 0;
    if (ai_comm_rank(c) == 0) {
        long rows = count_rows(a->kb, "SELECT count(*) FROM measurements"); /* -1: no table */
        bad = a->written ? rows < 5 : rows > 0;
        if (bad)
            fprintf(stderr, "mid-job: %ld measurement rows in the KB, expected %s\n", rows,
                    a->written ? "at least 5" : "none");
    }
    /* The other rank must not destroy its communicator before rank 0 read. */
    double x = bad;
    if (ai_allreduce(c, AI_IN_PLACE, &x, 1, AI_F64, AI_MAX, NULL) != AI_OK)
        return 1;
    return x != 0;
}

static void test_batched_writes(void **state)
{
    (void)state;
    ranks_opts o = {.deadline_s = 120};
    char kb1[300], kb2[300];
    path_in(kb1, sizeof kb1, "batch-later.sqlite");
    path_in(kb2, sizeof kb2, "batch-now.sqlite");
    batch_arg later = {kb1, 0}, now = {kb2, 1};
    setenv("AUTOINFRA_KB", kb1, 1);
    setenv("AUTOINFRA_TUNE_SAVE_S", "1000", 1);
    int rc1 = ranks_run(2, &o, run_then_count, &later);
    setenv("AUTOINFRA_KB", kb2, 1);
    setenv("AUTOINFRA_TUNE_SAVE_S", "0", 1);
    int rc2 = ranks_run(2, &o, run_then_count, &now);
    unsetenv("AUTOINFRA_TUNE_SAVE_S");
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, 0);
    /* Written when the communicator went: the windows and the settled bucket. */
    assert_true(count_rows(kb1, "SELECT count(*) FROM measurements") >= 5);
    assert_int_equal(count_rows(kb1, "SELECT count(*) FROM buckets WHERE settled = 1"), 1);
    /* A malformed interval is refused, naming the variable. */
    setenv("AUTOINFRA_TUNE_SAVE_S", "-1", 1);
    ai_comm *c = NULL;
    ai_comm_config cfg = {.rank = 0, .size = 1};
    assert_int_equal(ai_comm_create(&cfg, &c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_TUNE_SAVE_S"));
    unsetenv("AUTOINFRA_TUNE_SAVE_S");
}

/* A warm job whose rank 1 turns slow after `calls` calls: the bucket must
 * follow the KB until then, and stop following it within 64 slow calls.
 * Rank 1's link then runs at a fraction of its rate: it waits 4 times its
 * median call of the quiet calls, at least 10 ms, before every call. A
 * fixed 10 ms was 5x a call on a quiet machine but 1.3x one at a load of
 * 8-13 on 2 cores (calls of 10-22 ms), within the noise there: not a drift
 * the learner can tell from the load, nor one it should.
 *
 * Both halves hold on a machine whose speed stays put, or moves with a
 * CPU wait to show for it (other processes on the cores: the learner must
 * tell that load from a drift). Every rank times its calls and its wait
 * for a CPU, and the test judges by the slowest rank's, as the learner
 * does:
 *  - A machine whose speed moves with no CPU wait (a hypervisor taking
 *    the CPUs, steal time, which no thread's run delay counts; other
 *    tenants on the memory bus) moves as a drift on one host does, as far
 *    as any rank can tell: a CI run saw the bucket learned again at call
 *    83 of 100, and so did 4 of 40 runs on this 2-core virtual machine
 *    with nothing else running (calls of 2.4 ms took 3.9-4.4 ms for 16
 *    calls and more, with no CPU wait). A relearn before the drift voids the run (it runs again, at
 *    most DRIFT_RUNS times) when the 8 calls before it (the learner's last
 *    two windows) were DRIFT_MOVED x off a reference with their CPU wait
 *    moved along by less than DRIFT_SEEN of that; the references: this
 *    job's median call, the cold job's, and that of the 32 calls before
 *    those 8. Any other relearn before the drift fails the test.
 *  - A drift that comes while the CPUs are busy is no drift the learner
 *    can tell from the load until the load goes (two processes switched
 *    on beside it for the whole of 64 slow calls hid it once in 60 runs).
 *    So the 64 slow calls are counted without those whose CPU wait
 *    matched DRIFT_SEEN of their extra time; the job stops at DRIFT_MAX
 *    slow calls, and voids the run if it counted fewer than 64. */
typedef struct {
    int calls;     /* the warm job's drift starts after this many calls */
    size_t bytes;
    int cold;      /* the cold job: no drift; rank 0 notes its medians in ref */
    const char *ref;
    double ref_took, ref_wait; /* the warm job: the cold job's median call and CPU wait */
} drift_arg;

#define DRIFT_CALLS 64
#define DRIFT_MAX 256
#define DRIFT_RUNS 4
#define DRIFT_MOVED 1.3 /* the learner strikes at 1.5x its posterior, which
                         * lies among the references */
#define DRIFT_SEEN 0.3  /* load_explains: the CPU wait moves along by 0.3 */
#define DRIFT_VOID 3    /* run_drift: the machine changed speed unseen */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
    return scratch[n / 2];
}

/* The CPU time the hypervisor took from this machine so far, all CPUs
 * (/proc/stat's steal, in clock ticks), in ms; -1 where unknown. */
static double steal_ms(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                       &v[3], &v[4], &v[5], &v[6], &v[7])
              : 0;
    if (f)
        fclose(f);
    return n == 8 ? (double)v[7] * 1e3 / (double)sysconf(_SC_CLK_TCK) : -1;
}

/* This thread's wait for a CPU so far (schedstat's run delay), seconds. */
static double cpu_wait_s(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long run_ns, wait_ns;
    int n = f ? fscanf(f, "%llu %llu", &run_ns, &wait_ns) : 0;
    if (f)
        fclose(f);
    return n == 2 ? (double)wait_ns * 1e-9 : 0;
}

/* Time t with CPU wait w against a reference (ref_t, ref_w): did the
 * wait move along by DRIFT_SEEN of the change, the load explaining it? */
static int load_seen(double t, double w, double ref_t, double ref_w)
{
    double dt = t - ref_t, dw = w - ref_w;
    return dt * dw > 0 && fabs(dw) >= DRIFT_SEEN * fabs(dt);
}

/* The 8 calls before `to` (the learner's last two windows, each 4 calls
 * once a strike shortened them) against each reference (ref_t[r],
 * ref_w[r], nref of them): the ratio furthest off in *off; returned, the
 * ratio furthest off among those DRIFT_MOVED x off with no CPU wait to
 * match, or 1. */
static double moved_unseen(const double *took, const double *wait, int to, const double *ref_t,
                           const double *ref_w, int nref, double *off)
{
    double t = 0, w = 0, unseen = 1;
    for (int k = to - 8; k < to; k++) {
        t += took[k] / 8;
        w += wait[k] / 8;
    }
    *off = 1;
    for (int r = 0; r < nref; r++) {
        double x = t / ref_t[r];
        if (fabs(log(x)) > fabs(log(*off)))
            *off = x;
        if (fabs(log(x)) >= log(DRIFT_MOVED) && !load_seen(t, w, ref_t[r], ref_w[r]) &&
            fabs(log(x)) > fabs(log(unseen)))
            unseen = x;
    }
    return unseen;
}

/* Rank 0, the warm job after its calls: 0 (passed), 1 (failed) or
 * DRIFT_VOID, saying why. took[] and wait[]: the slowest rank's. */
static int judge_drift(const drift_arg *d, const double *took, const double *wait, int ran,
                       int relearned_at, double sleep_s, double steal, double *scratch)
{
    int quiet = relearned_at >= 0 && relearned_at < d->calls ? relearned_at : d->calls;
    double med_t = median_of(took, quiet, scratch), med_w = median_of(wait, quiet, scratch);
    if (relearned_at >= d->calls || relearned_at < 0) {
        /* The slow calls the CPU wait does not explain, up to the relearn. */
        int unexplained = 0;
        for (int i = d->calls; i < ran; i++)
            unexplained += !load_seen(took[i], wait[i], med_t, med_w);
        if (relearned_at >= 0 && unexplained <= DRIFT_CALLS)
            return 0;
        fprintf(stderr, "%s after %d slow calls (rank 1 waiting %.1f ms before each), %d of "
                        "them with no CPU wait to match\n",
                relearned_at < 0 ? "never left the knowledge base's arm" : "learned again",
                (relearned_at < 0 ? ran : relearned_at + 1) - d->calls, sleep_s * 1e3, unexplained);
        return unexplained < DRIFT_CALLS ? DRIFT_VOID : 1;
    }
    if (relearned_at < 40) {
        fprintf(stderr, "left the knowledge base's arm at call %d, among the first calls, in "
                        "which no strike counts\n", relearned_at);
        return 1;
    }
    int from = relearned_at - 40;
    double ref_t[3] = {med_t, d->ref_took, median_of(took + from, 32, scratch)},
           ref_w[3] = {med_w, d->ref_wait, median_of(wait + from, 32, scratch)}, off,
           unseen = moved_unseen(took, wait, relearned_at, ref_t, ref_w, 3, &off);
    fprintf(stderr, "left the knowledge base's arm at call %d; the drift was to begin at call %d; "
                    "the 8 calls before it (the slowest rank's) at most %.2fx a reference "
                    "(medians: this job's %.2f ms, the cold job's %.2f ms, the 32 calls before "
                    "%.2f ms), %s; steal %.1f ms\n",
            relearned_at, d->calls, off, ref_t[0] * 1e3, ref_t[1] * 1e3, ref_t[2] * 1e3,
            unseen != 1 ? "no CPU wait to match" : "within the noise or the CPU wait's", steal);
    return unseen != 1 ? DRIFT_VOID : 1;
}

/* The cold job (d->cold): d->calls calls, learning; rank 0 writes the
 * slowest rank's median call and CPU wait of the second half to d->ref.
 * The warm job: d->calls quiet calls, then rank 1 slows. */
static int run_drift(ai_comm *c, void *arg)
{
    const drift_arg *d = arg;
    int total = d->calls + (d->cold ? 0 : DRIFT_MAX);
    size_t n = d->bytes / sizeof(float);
    float *buf = calloc(n, sizeof *buf);
    /* took: each call's seconds, then their CPU wait; scratch for medians */
    double *took = calloc(2 * (size_t)total, sizeof *took), *wait = took + total,
           *scratch = calloc((size_t)total, sizeof *took);
    double sleep_s = 0, steal0 = steal_ms();
    int relearned_at = -1, failed = !buf || !took || !scratch;
    /* Every rank sees the bucket leave the KB's arm after the same call
     * (the order to measure the links is agreed), so all stop there. */
    int i = 0;
    for (; !failed && relearned_at < 0 && i < total; i++) {
        if (i == d->calls)
            sleep_s = fmax(0.01, 4 * median_of(took, d->calls, scratch));
        if (i >= d->calls && ai_comm_rank(c) == 1)
            usleep((useconds_t)(sleep_s * 1e6));
        ai_choice ch;
        double t0 = now_s(), w0 = cpu_wait_s();
        if (ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL) != AI_OK ||
            ai_comm_choice(c, AI_ALLREDUCE, n * sizeof(float), &ch) != AI_OK) {
            fprintf(stderr, "call %d: %s\n", i, ai_last_error());
            failed = 1;
        } else {
            took[i] = now_s() - t0;
            wait[i] = cpu_wait_s() - w0;
            if (!d->cold && strcmp(ch.source, "kb"))
                relearned_at = i;
        }
    }
    /* The slowest rank's time and CPU wait of every call (each rank ran
     * the same calls). */
    if (i < total)
        memmove(took + i, wait, (size_t)i * sizeof *took);
    wait = took + i;
    if (!failed &&
        ai_allreduce(c, AI_IN_PLACE, took, 2 * (size_t)i, AI_F64, AI_MAX, NULL) != AI_OK) {
        fprintf(stderr, "gathering the call times: %s\n", ai_last_error());
        failed = 1;
    }
    int rc = failed;
    if (!failed && ai_comm_rank(c) == 0 && d->cold) {
        FILE *f = fopen(d->ref, "w");
        rc = !f || fprintf(f, "%.9g %.9g\n", median_of(took + i / 2, i - i / 2, scratch),
                           median_of(wait + i / 2, i - i / 2, scratch)) < 0;
        rc |= f && fclose(f) != 0;
    } else if (!failed && ai_comm_rank(c) == 0) {
        rc = judge_drift(d, took, wait, i, relearned_at, sleep_s, steal_ms() - steal0, scratch);
    }
    free(buf);
    free(took);
    free(scratch);
    return rc;
}

static void test_drift_relearns(void **state)
{
    (void)state;
    int rc = DRIFT_VOID;
    for (int run = 0; run < DRIFT_RUNS && rc == DRIFT_VOID; run++) {
        char kb[300], ref[300], name[64];
        snprintf(name, sizeof name, "drift-%d.sqlite", run);
        path_in(kb, sizeof kb, name);
        path_in(ref, sizeof ref, "drift-cold.txt");
        setenv("AUTOINFRA_KB", kb, 1);
        ranks_opts o = {.deadline_s = 120};
        /* The cold job runs past its first calls' warm-up (each arm's first
         * use touches new memory): after only 40 calls the KB holds arm times
         * up to 1.8x the warm job's, which then sees "drift" before its drift
         * in about 1 of 6 runs under ASan. */
        drift_arg d = {.calls = 100, .bytes = 1 << 20, .cold = 1, .ref = ref};
        assert_int_equal(ranks_run(2, &o, run_drift, &d), 0);
        FILE *f = fopen(ref, "r");
        assert_non_null(f);
        assert_int_equal(fscanf(f, "%lf %lf", &d.ref_took, &d.ref_wait), 2);
        fclose(f);
        /* 100 quiet calls first, past the 32 in which strikes do not count. */
        d.cold = 0;
        int status[2];
        o.status = status;
        rc = ranks_run(2, &o, run_drift, &d) ? status[0] : 0;
        if (rc == DRIFT_VOID)
            fprintf(stderr, "the machine changed speed unseen: run %d of %d void\n", run + 1,
                    DRIFT_RUNS);
    }
    assert_int_equal(rc, 0);
}

/* A drift that only one rank other than rank 0 sees in its own time (on
 * T4 a slowed NIC slowed the slowest rank's calls more than rank 0's):
 * rank 1's observation hook reads its times SLOW_FACTOR slow from call
 * SLOW_FROM on, and notes the calls after which an agreement ran. A
 * window rank 1 saw slow throughout must be followed by the shortest (4
 * calls), the check of a strike, though rank 0's own times did not
 * change: the first such window, or a later one in the slow calls when
 * the machine's load rose with it (a window whose slowdown a rise in the
 * CPU wait matches is no strike, load_explains in learn.c; beside two
 * CPU-bound processes the first slow window was one of those once in
 * five runs of the suite). */
#define SLOW_FROM 100
#define SLOW_CALLS 72
#define SLOW_FACTOR 10.0
static ai_status_t (*real_observe)(void *, ai_comm *, ai_coll, size_t, double);
static int observed, agreed_at[SLOW_FROM + SLOW_CALLS], nagreed;

static ai_status_t slow_observe(void *ctx, ai_comm *c, ai_coll coll, size_t bytes, double s)
{
    uint32_t seq = c->call_seq;
    int call = observed++;
    ai_status_t st = real_observe(ctx, c, coll, bytes, call >= SLOW_FROM ? s * SLOW_FACTOR : s);
    if (c->call_seq != seq && nagreed < (int)AI_ARRAY_LEN(agreed_at))
        agreed_at[nagreed++] = call; /* an agreement ran after this call */
    return st;
}

static int run_one_slow(ai_comm *c, void *arg)
{
    (void)arg;
    size_t n = (16 << 10) / sizeof(float);
    float *buf = calloc(n, sizeof *buf);
    int one = ai_comm_rank(c) == 1, bad = !buf;
    if (one) {
        real_observe = c->tuner.observe;
        c->tuner.observe = slow_observe;
    }
    for (int i = 0; !bad && i < SLOW_FROM + SLOW_CALLS; i++)
        bad = ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL) != AI_OK;
    free(buf);
    if (bad || !one)
        return bad;
    /* The first window that ended in the slow calls, and the first that
     * lay in them whole. */
    int k = 0;
    while (k < nagreed && agreed_at[k] < SLOW_FROM)
        k++;
    int whole = k > 0 && agreed_at[k - 1] == SLOW_FROM - 1 ? k : k + 1;
    if (k < 4 || whole + 1 >= nagreed) {
        fprintf(stderr, "%d agreements, %d before the slow calls: too few to judge\n", nagreed, k);
        return 1;
    }
    /* Quiet windows grow long (some are short after a moment of the OS's
     * jitter, which either rank may vote on), and the one after the
     * first slow window is the shortest. */
    int before = 0, after = agreed_at[whole + 1] - agreed_at[whole], struck = -1;
    for (int j = 1; j < k; j++)
        before = AI_MAX(before, agreed_at[j] - agreed_at[j - 1]);
    for (int j = whole; struck < 0 && j + 1 < nagreed; j++)
        if (agreed_at[j + 1] - agreed_at[j] == 4)
            struck = j - whole;
    if (before > 4 && struck >= 0)
        return 0;
    fprintf(stderr, "windows: at most %d calls before the slow ones, %d after the first slow one, "
                    "and no 4-call window after any slow one (want more than 4, then a 4)\n",
            before, after);
    return 1;
}

static void test_drift_one_rank(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "one-slow.sqlite");
    setenv("AUTOINFRA_KB", kb, 1);
    setenv("AUTOINFRA_TUNE_REFINE", "0", 1); /* quiet windows once settled */
    ranks_opts o = {.deadline_s = 60};
    int rc = ranks_run(2, &o, run_one_slow, NULL);
    unsetenv("AUTOINFRA_TUNE_REFINE");
    assert_int_equal(rc, 0);
}

/* ------------------------------------------------------- crash safety */

/* Writer: transaction k gives every arm k samples and the bucket k
 * explored calls; a reader must never see them disagree. */
static void writer(const char *kb, int ready_fd)
{
    ai_kb *h;
    if (kb_open_writer(kb, &h) != AI_OK)
        _exit(3);
    tune_arm_stat arms[8];
    memset(arms, 0, sizeof arms);
    for (int i = 0; i < 8; i++) {
        snprintf(arms[i].algo, sizeof arms[i].algo, "algo%d", i);
        arms[i].channels = 1;
        arms[i].v = 0.01;
    }
    for (long k = 1;; k++) {
        tune_bucket_info info = {.explored = k, .explore_s = 0.001 * (double)k};
        for (int i = 0; i < 8; i++) {
            arms[i].n = k;
            arms[i].m = -7 + 0.01 * i;
        }
        const char *fp = "00000000000000aa";
        ai_status_t st = kb_begin(h, fp, 2, 1, "crash test");
        if (st == AI_OK) {
            st = kb_put_bucket(h, fp, AI_ALLREDUCE, 65536, arms, 8, &info);
            if (st == AI_OK)
                st = kb_put_measurement(h, fp, AI_ALLREDUCE, 65536, &arms[0], 0.001, "explore",
                                        (double)k);
            st = kb_end(h, st);
        }
        if (st != AI_OK)
            _exit(4);
        if (k == 1) { /* the first transaction is in: the parent may kill now */
            if (write(ready_fd, "w", 1) != 1)
                _exit(5);
            close(ready_fd);
        }
    }
}

static void test_crash_safety(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "crash.sqlite");
    long total = 0; /* measurements: one per committed transaction, all rounds */
    for (int round = 0; round < 3; round++) {
        /* Killed a time after its first commit, not after its start: beside
         * two CPU-bound processes and other work a writer killed 150 ms
         * after the fork had not yet created the file. */
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(ready[0]);
            writer(kb, ready[1]);
        }
        close(ready[1]);
        struct pollfd pf = {.fd = ready[0], .events = POLLIN};
        char got = 0;
        int up = poll(&pf, 1, 60000) == 1 && read(ready[0], &got, 1) == 1 && got == 'w';
        close(ready[0]);
        if (!up) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("crash test round %d: the writer committed nothing within 60 s", round);
        }
        usleep(150000 + 50000 * round);
        kill(pid, SIGKILL);
        int wst;
        assert_int_equal(waitpid(pid, &wst, 0), pid);
        assert_true(WIFSIGNALED(wst)); /* it was still writing */
        assert_int_equal(count_rows(kb, "SELECT count(*) FROM pragma_integrity_check() "
                                        "WHERE integrity_check != 'ok'"),
                         0);
        long k = count_rows(kb, "SELECT explored FROM buckets");
        assert_true(k >= 1);
        assert_int_equal(count_rows(kb, "SELECT count(*) FROM arms WHERE samples != "
                                        "(SELECT explored FROM buckets)"),
                         0);
        total += k;
        assert_int_equal(count_rows(kb, "SELECT count(*) FROM measurements"), total);
        /* Reopened through the API, it reads and takes new writes. */
        ai_kb *h;
        assert_int_equal(ai_kb_open(kb, 0, &h), AI_OK);
        char out[300];
        path_in(out, sizeof out, "crash.json");
        assert_int_equal(ai_kb_export_json(h, NULL, out), AI_OK);
        ai_kb_close(h);
    }
}

/* ------------------------------------------------------- JSON exchange */

static int count_arm(const ai_kb_arm *a, void *arg)
{
    int *n = arg;
    (*n)++;
    if (a->best && strcmp(a->algo, "ring"))
        *n += 1000; /* ring (mean 100 us) must be the best */
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_json_exchange(void **state)
{
    (void)state;
    char in[300], kbp[300], out[300], bad[300];
    path_in(in, sizeof in, "in.json");
    path_in(kbp, sizeof kbp, "json.sqlite");
    path_in(out, sizeof out, "out.json");
    path_in(bad, sizeof bad, "bad.json");
    write_file(in, "{\"format\":\"autoinfra-kb\",\"version\":1,\"fingerprints\":[{\"id\":"
                   "\"0123456789abcdef\",\"nranks\":4,\"nhosts\":4,\"arms\":["
                   "{\"coll\":\"allreduce\",\"bytes\":65536,\"algo\":\"ring\",\"channels\":2,"
                   "\"samples\":10,\"mean_us\":100,\"std_us\":2},"
                   "{\"coll\":\"allreduce\",\"bytes\":65536,\"algo\":\"rabenseifner\","
                   "\"channels\":2,\"samples\":10,\"mean_us\":150,\"std_us\":3}]}]}");
    ai_kb *kb;
    assert_int_equal(ai_kb_open(kbp, 0, &kb), AI_OK);
    assert_int_equal(ai_kb_import_json(kb, in), AI_OK);
    int n = 0;
    assert_int_equal(ai_kb_foreach(kb, "0123456789abcdef", count_arm, &n), AI_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ai_kb_export_json(kb, NULL, out), AI_OK);
    /* The export imports again into a fresh KB with the same content. */
    ai_kb *kb2;
    char kbp2[300];
    path_in(kbp2, sizeof kbp2, "json2.sqlite");
    assert_int_equal(ai_kb_open(kbp2, 0, &kb2), AI_OK);
    assert_int_equal(ai_kb_import_json(kb2, out), AI_OK);
    n = 0;
    assert_int_equal(ai_kb_foreach(kb2, NULL, count_arm, &n), AI_OK);
    assert_int_equal(n, 2);
    ai_kb_close(kb2);
    /* Bad input names the file and the place. */
    write_file(bad, "{\"format\":\"autoinfra-kb\",\"version\":1,\"fingerprints\":[{\"id\":"
                    "\"0123456789abcdef\",\"nranks\":4,\"nhosts\":4,\"arms\":["
                    "{\"coll\":\"allreduce\",\"bytes\":1000,\"algo\":\"ring\",\"samples\":1,"
                    "\"mean_us\":1}]}]}");
    assert_int_equal(ai_kb_import_json(kb, bad), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "fingerprints[0].arms[0]"));
    write_file(bad, "{\"format\": ");
    assert_int_equal(ai_kb_import_json(kb, bad), AI_ERR_PARSE);
    assert_non_null(strstr(ai_last_error(), bad));
    ai_kb_close(kb);
    /* Not a KB at all; a missing file read-only. */
    assert_int_not_equal(ai_kb_open(in, 0, &kb), AI_OK);
    assert_non_null(strstr(ai_last_error(), in));
    path_in(bad, sizeof bad, "missing.sqlite");
    assert_int_equal(ai_kb_open(bad, 1, &kb), AI_ERR_NOTFOUND);
}

/* ------------------------------------------- a KB shared by processes */

/* The whole file, for byte-for-byte comparisons; NULL if unreadable. */
static char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)*len + 1)) && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    return buf;
}

/* The file still holds exactly `before` (n bytes); frees it. */
static void expect_unchanged(const char *path, char *before, long n)
{
    long n1 = 0;
    char *after = slurp(path, &n1);
    assert_non_null(after);
    assert_int_equal(n, n1);
    assert_memory_equal(before, after, (size_t)n);
    free(before);
    free(after);
}

static int log_visit(const ai_kb_choice *ch, void *arg)
{
    struct { int n, warm_at; char first[16]; } *seen = arg;
    if (seen->n++ == 0)
        snprintf(seen->first, sizeof seen->first, "%s", ch->reason);
    if (!strcmp(ch->reason, "warm") && !seen->warm_at)
        seen->warm_at = seen->n;
    return 0;
}

/* 40 calls of one bucket; rank 0 fails if they took longer than 1.5 s. */
static int run_bucket_fast(ai_comm *c, void *arg)
{
    double t0 = now_s();
    if (run_bucket(c, arg))
        return 1;
    double took = now_s() - t0;
    if (ai_comm_rank(c) == 0 && took > 1.5) {
        fprintf(stderr, "rank 0: the calls took %.1f s with the KB locked elsewhere\n", took);
        return 1;
    }
    return 0;
}

/* Another process holds the KB's write lock (BEGIN EXCLUSIVE) for 3 s
 * while a 2-rank job with a 2 s timeout saves after every agreement: the
 * job must neither stall nor fail, and what it learned is saved when the
 * lock is gone (at the end, waited for a bounded time). */
static void test_busy_kb(void **state)
{
    (void)state;
    char kbp[300];
    path_in(kbp, sizeof kbp, "busy.sqlite");
    ai_kb *kb;
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    ai_kb_close(kb);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        sqlite3 *db;
        char ok = sqlite3_open(kbp, &db) == SQLITE_OK &&
                  sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK;
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        usleep(3000 * 1000);
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(db);
        _exit(0);
    }
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    close(ready[1]);
    assert_true(ok);
    setenv("AUTOINFRA_KB", kbp, 1);
    setenv("AUTOINFRA_TUNE_SAVE_S", "0", 1);
    ranks_opts o = {.timeout_s = 2, .deadline_s = 60};
    warm_arg w = {40, 0, 64 << 10};
    double t0 = now_s();
    int rc = ranks_run(2, &o, run_bucket_fast, &w);
    double took = now_s() - t0;
    unsetenv("AUTOINFRA_TUNE_SAVE_S");
    int hs = -1;
    waitpid(holder, &hs, 0);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(hs) && WEXITSTATUS(hs) == 0);
    assert_true(took < 15);
    assert_true(count_rows(kbp, "SELECT count(*) FROM measurements") >= 5);
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM buckets WHERE settled = 1"), 1);
}

/* The KB is locked against reading too (another connection in exclusive
 * locking mode inside BEGIN EXCLUSIVE) when the job first needs it, for
 * 3 s: the job must not stall or fail, and once the lock goes (at the
 * latest while the communicator is released) what it learned is in the
 * KB. */
static void test_busy_open(void **state)
{
    (void)state;
    char kbp[300];
    path_in(kbp, sizeof kbp, "busyopen.sqlite");
    ai_kb *kb;
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    ai_kb_close(kb);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        sqlite3 *db;
        char ok = sqlite3_open(kbp, &db) == SQLITE_OK &&
                  sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE;"
                                   " INSERT OR REPLACE INTO meta VALUES('holder', 'test')",
                               NULL, NULL, NULL) == SQLITE_OK;
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        usleep(3000 * 1000);
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(db); /* exclusive locking mode: the lock goes here */
        _exit(0);
    }
    char ok = 0;
    assert_int_equal(read(ready[0], &ok, 1), 1);
    close(ready[0]);
    close(ready[1]);
    assert_true(ok);
    /* Locked against reading: what the learner's open meets. */
    assert_int_equal(kb_open_writer(kbp, &kb), AI_ERR_TIMEOUT);
    assert_non_null(strstr(ai_last_error(), "locked by another process"));
    setenv("AUTOINFRA_KB", kbp, 1);
    setenv("AUTOINFRA_TUNE_SAVE_S", "0", 1);
    ranks_opts o = {.timeout_s = 2, .deadline_s = 60};
    warm_arg w = {40, 0, 64 << 10};
    int rc = ranks_run(2, &o, run_bucket_fast, &w);
    unsetenv("AUTOINFRA_TUNE_SAVE_S");
    int hs = -1;
    waitpid(holder, &hs, 0);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(hs) && WEXITSTATUS(hs) == 0);
    assert_true(count_rows(kbp, "SELECT count(*) FROM measurements") >= 5);
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM buckets WHERE settled = 1"), 1);
}

/* In a private mount namespace: dir/full, a small tmpfs holding a copy of
 * `kb`, filled up; the warm job runs on it with its stderr in `log`.
 * Exit status: the job's, 77 when no namespace or tmpfs can be had. */
static int run_on_full_disk(const char *kb, const char *log)
{
    char full[300], copy[340], fill[340];
    path_in(full, sizeof full, "full");
    snprintf(copy, sizeof copy, "%s/kb.sqlite", full);
    snprintf(fill, sizeof fill, "%s/fill", full);
    if (mkdir(full, 0755) != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", full, "tmpfs", 0, "size=2m") != 0)
        return 77;
    long n = 0;
    char *bytes = slurp(kb, &n);
    int fd = bytes ? open(copy, O_WRONLY | O_CREAT | O_EXCL, 0644) : -1;
    int bad = fd < 0 || write(fd, bytes, (size_t)n) != n;
    free(bytes);
    if (fd >= 0)
        close(fd);
    /* Fill the file system to its last byte. */
    char block[4096] = {0};
    fd = bad ? -1 : open(fill, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return 2;
    for (size_t len = sizeof block; len > 0;)
        if (write(fd, block, len) < 0)
            len /= 2;
    close(fd);
    if (!freopen(log, "w", stderr))
        return 2;
    setenv("AUTOINFRA_KB", copy, 1);
    ranks_opts o = {.deadline_s = 120};
    warm_arg warm = {12, 1, 64 << 10};
    int rc = ranks_run(2, &o, run_bucket, &warm) == 0 ? 0 : 1;
    /* A writer through the API gets it read-only too, and a write names
     * why it is refused. */
    ai_kb *h = NULL;
    char json[300];
    path_in(json, sizeof json, "fulldisk.json");
    FILE *f = fopen(json, "w");
    if (f) {
        fputs("{\"format\": \"autoinfra-kb\", \"version\": 1, \"fingerprints\": []}", f);
        fclose(f);
    }
    if (rc == 0 && (ai_kb_open(copy, 0, &h) != AI_OK || ai_kb_import_json(h, json) == AI_OK ||
                    !strstr(ai_last_error(), "read-only (writing it failed"))) {
        fprintf(stderr, "import into the KB on the full disk: %s\n", ai_last_error());
        rc = 3;
    }
    ai_kb_close(h);
    umount(full);
    return rc;
}

/* A KB on a full disk is still read: the job starts warm from it, and the
 * log says that what it learns will not be saved, and why. */
static void test_full_disk_kb(void **state)
{
    (void)state;
    char kbp[300], log[300];
    path_in(kbp, sizeof kbp, "fulldisk.sqlite");
    path_in(log, sizeof log, "fulldisk.log");
    setenv("AUTOINFRA_KB", kbp, 1);
    ranks_opts o = {.deadline_s = 120};
    warm_arg cold = {40, 0, 64 << 10};
    assert_int_equal(ranks_run(2, &o, run_bucket, &cold), 0);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(run_on_full_disk(kbp, log));
    int st = -1;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        print_message("no private mount namespace or tmpfs (needs root): skipping\n");
        skip();
    }
    long n = 0;
    char *text = slurp(log, &n);
    assert_non_null(text);
    if (WEXITSTATUS(st) != 0)
        fprintf(stderr, "the job on the full disk:\n%s\n", text);
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_non_null(strstr(text, "will not be saved"));
    assert_non_null(strstr(text, "the disk is full"));
    free(text);
}

/* The choices table: the cold job logs the arm its bucket settled on,
 * with its runner-up; the warm job after it logs its warm start. */
static void test_choices_logged(void **state)
{
    (void)state;
    char kbp[300];
    path_in(kbp, sizeof kbp, "choices.sqlite");
    setenv("AUTOINFRA_KB", kbp, 1);
    ranks_opts o = {.deadline_s = 120};
    warm_arg cold = {40, 0, 64 << 10}, warm = {12, 1, 64 << 10};
    assert_int_equal(ranks_run(2, &o, run_bucket, &cold), 0);
    /* One, or more if a drift made it learn again within the 40 calls. */
    long settled = count_rows(kbp, "SELECT count(*) FROM choices WHERE reason = 'settled'");
    assert_true(settled >= 1);
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM choices WHERE reason = 'settled'"
                                     " AND coll = 'allreduce' AND bytes = 65536"
                                     " AND runner_algo <> '' AND runner_samples > 0"
                                     " AND confidence > 0 AND confidence <= 1"),
                     settled);
    /* The arm it settled on is the one its first settled window ran (if
     * that window was over before the job: it can be 32 calls long). */
    assert_int_equal(count_rows(kbp, "SELECT NOT EXISTS(SELECT 1 FROM measurements WHERE"
                                     " phase = 'exploit') OR EXISTS(SELECT 1 FROM"
                                     " (SELECT algo, chunk, channels FROM choices WHERE"
                                     " reason = 'settled' ORDER BY rowid LIMIT 1) c,"
                                     " (SELECT algo, chunk, channels FROM measurements WHERE"
                                     " phase = 'exploit' ORDER BY rowid LIMIT 1) m"
                                     " WHERE m.algo = c.algo AND m.chunk = c.chunk"
                                     " AND m.channels = c.channels)"),
                     1);
    long cold_rows = count_rows(kbp, "SELECT max(rowid) FROM measurements");
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM choices WHERE reason = 'warm'"), 0);
    assert_int_equal(ranks_run(2, &o, run_bucket, &warm), 0);
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM choices WHERE reason = 'warm'"), 1);
    /* ... on the arm its first window ran. */
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT algo, chunk, channels FROM choices WHERE reason ="
             " 'warm') c, (SELECT algo, chunk, channels FROM measurements WHERE rowid > %ld"
             " ORDER BY rowid LIMIT 1) m WHERE m.algo = c.algo AND m.chunk = c.chunk"
             " AND m.channels = c.channels", cold_rows);
    assert_int_equal(count_rows(kbp, sql), 1);
    /* Through the public API, oldest first. */
    ai_kb *kb;
    assert_int_equal(ai_kb_open(kbp, 1, &kb), AI_OK);
    struct { int n, warm_at; char first[16]; } seen = {0};
    assert_int_equal(ai_kb_log_foreach(kb, NULL, log_visit, &seen), AI_OK);
    ai_kb_close(kb);
    assert_string_equal(seen.first, "settled");
    /* After every row of the cold job. */
    assert_int_equal(seen.warm_at, count_rows(kbp, "SELECT count(*) FROM choices WHERE rowid <="
                                                   " (SELECT min(rowid) FROM choices"
                                                   " WHERE reason = 'warm')"));
}

/* A KB of schema 1 (no choices table) is read as it is read-only, and
 * upgraded by a writable open, its knowledge kept; a KB of a newer
 * schema is refused either way, naming both versions, and left as it
 * was. */
static void test_schema_versions(void **state)
{
    (void)state;
    char kbp[300];
    path_in(kbp, sizeof kbp, "schema.sqlite");
    ai_kb *kb;
    tune_arm_stat arm = {.algo = "ring", .channels = 2, .n = 10, .m = -7, .v = 1e-3};
    tune_bucket_info info = {.explored = 8, .settled = 1};
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    assert_int_equal(kb_end(kb, kb_begin(kb, "0123456789abcdef", 2, 1, "") == AI_OK
                                    ? kb_put_bucket(kb, "0123456789abcdef", AI_ALLREDUCE, 65536,
                                                    &arm, 1, &info)
                                    : AI_ERR_IO),
                     AI_OK);
    ai_kb_close(kb);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(kbp, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE choices; PRAGMA user_version=1;"
                                      " UPDATE meta SET value = '1' WHERE key = 'schema_version'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    int n = 0;
    assert_int_equal(ai_kb_open(kbp, 1, &kb), AI_OK);
    assert_int_equal(ai_kb_foreach(kb, NULL, count_arm, &n), AI_OK);
    assert_int_equal(n, 1);
    struct { int n, warm_at; char first[16]; } seen = {0};
    assert_int_equal(ai_kb_log_foreach(kb, NULL, log_visit, &seen), AI_OK);
    assert_int_equal(seen.n, 0);
    ai_kb_close(kb);
    assert_int_equal(count_rows(kbp, "PRAGMA user_version"), 1);
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    ai_kb_close(kb);
    assert_int_equal(count_rows(kbp, "PRAGMA user_version"), 2);
    assert_int_equal(count_rows(kbp, "SELECT value FROM meta WHERE key = 'schema_version'"), 2);
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM choices"), 0);
    assert_int_equal(count_rows(kbp, "SELECT count(*) FROM arms"), 1);
    /* Newer: refused, unchanged. */
    assert_int_equal(sqlite3_open(kbp, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version=3", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    long n0 = 0;
    char *before = slurp(kbp, &n0);
    assert_non_null(before);
    for (int ro = 0; ro < 2; ro++) {
        assert_int_equal(ro ? ai_kb_open(kbp, 1, &kb) : kb_open_writer(kbp, &kb), AI_ERR_PROTO);
        assert_non_null(strstr(ai_last_error(), "schema version 3, newer than this build's 2"));
    }
    expect_unchanged(kbp, before, n0);
}

/* Another application's SQLite files are refused, named, and left
 * byte-identical; a new KB is stamped as autoinfra's. */
static void test_foreign_db(void **state)
{
    (void)state;
    static const char *const foreign[] = {
        "PRAGMA application_id=1234; CREATE TABLE users(name TEXT); INSERT INTO users VALUES('a');",
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); CREATE TABLE users(name TEXT);",
        "PRAGMA application_id=1234;",
    };
    for (int i = 0; i < 3; i++) {
        char p[300], name[32];
        snprintf(name, sizeof name, "foreign%d.sqlite", i);
        path_in(p, sizeof p, name);
        sqlite3 *db;
        assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, foreign[i], NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        long n0 = 0;
        char *before = slurp(p, &n0);
        assert_non_null(before);
        ai_kb *kb = NULL;
        for (int ro = 0; ro < 2; ro++) {
            assert_int_not_equal(ro ? ai_kb_open(p, 1, &kb) : kb_open_writer(p, &kb), AI_OK);
            assert_non_null(strstr(ai_last_error(), p));
            assert_non_null(strstr(ai_last_error(), "not an autoinfra knowledge base"));
        }
        expect_unchanged(p, before, n0);
    }
    char p[300];
    path_in(p, sizeof p, "stamped.sqlite");
    ai_kb *kb;
    assert_int_equal(kb_open_writer(p, &kb), AI_OK);
    ai_kb_close(kb);
    assert_int_equal(count_rows(p, "PRAGMA application_id"), 0x41494b42);
    assert_int_equal(count_rows(p, "PRAGMA user_version"), 2);
    assert_int_equal(ai_kb_open(p, 0, &kb), AI_OK);
    ai_kb_close(kb);
}

static void drop_to_nobody(int rank, void *arg)
{
    (void)arg;
    if (rank == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        _exit(77);
}

/* A KB this process cannot write (0444 in a directory it cannot write):
 * read, the job starts warm from it, the file is not changed. Rank 0
 * runs as nobody (root writes any file). */
static void test_readonly_kb(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("not root: cannot drop to another user; skipping\n");
        skip();
    }
    char sub[300], kbp[320];
    path_in(sub, sizeof sub, "ro");
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(kbp, sizeof kbp, "%s/kb.sqlite", sub);
    setenv("AUTOINFRA_KB", kbp, 1);
    ranks_opts o = {.deadline_s = 120, .no_shm = 1};
    warm_arg cold = {40, 0, 64 << 10}, warm = {12, 1, 64 << 10};
    assert_int_equal(ranks_run(2, &o, run_bucket, &cold), 0);
    assert_int_equal(chmod(kbp, 0444), 0);
    assert_int_equal(chmod(dir, 0755), 0);
    long n0 = 0;
    char *before = slurp(kbp, &n0);
    assert_non_null(before);
    o.before_create = drop_to_nobody;
    assert_int_equal(ranks_run(2, &o, run_bucket, &warm), 0);
    expect_unchanged(kbp, before, n0);
    chmod(dir, 0700);
}

/* A FIFO (or any non-regular file) is refused at once, not opened. */
static void test_kb_fifo(void **state)
{
    (void)state;
    char p[300];
    path_in(p, sizeof p, "fifo.sqlite");
    assert_int_equal(mkfifo(p, 0600), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ai_kb *kb = NULL;
        int bad = 0;
        for (int ro = 0; ro < 2; ro++)
            bad |= ai_kb_open(p, ro, &kb) == AI_OK ||
                   !strstr(ai_last_error(), "is not a regular file");
        _exit(bad);
    }
    int st = -1;
    double t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0 && now_s() - t0 < 1)
        usleep(10000);
    if (now_s() - t0 >= 1) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fail_msg("opening a FIFO as the knowledge base still blocks after 1 s");
    }
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* -------------------------------------------------- fingerprint by rates */

/* Closing empties the write-ahead log; a writer opening the KB again
 * writes to it at once, so that the first real write does not pay for
 * starting the log in the middle of a job. */
static void test_writer_starts_wal(void **state)
{
    (void)state;
    char kbp[300], wal[310];
    struct stat sb;
    path_in(kbp, sizeof kbp, "wal.sqlite");
    snprintf(wal, sizeof wal, "%s-wal", kbp);
    ai_kb *kb;
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    ai_kb_close(kb);
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    assert_int_equal(stat(wal, &sb), 0);
    assert_true(sb.st_size > 0);
    ai_kb_close(kb);
}

static void test_fingerprint_match(void **state)
{
    (void)state;
    char kbp[300], out[17];
    path_in(kbp, sizeof kbp, "rates.sqlite");
    ai_kb *kb;
    assert_int_equal(kb_open_writer(kbp, &kb), AI_OK);
    const double a[2] = {60e6, 60e6}, b[2] = {60e6, 15e6};
    assert_int_equal(kb_note_rates(kb, "00000000000000aa", "shape1", 2, a), AI_OK);
    assert_int_equal(kb_note_rates(kb, "00000000000000bb", "shape1", 2, b), AI_OK);
    /* Probe noise on either side of a power of two: still the same one. */
    const double near_a[2] = {46e6, 70e6}, near_b[2] = {50e6, 19e6}, quarter[2] = {60e6, 4e6};
    assert_int_equal(kb_match_rates(kb, "shape1", 2, near_a, 0.5, out), AI_OK);
    assert_string_equal(out, "00000000000000aa");
    assert_int_equal(kb_match_rates(kb, "shape1", 2, near_b, 0.5, out), AI_OK);
    assert_string_equal(out, "00000000000000bb");
    /* A link at a quarter of its rate is another cluster; so is another shape. */
    assert_int_equal(kb_match_rates(kb, "shape1", 2, quarter, 0.5, out), AI_OK);
    assert_string_equal(out, "");
    assert_int_equal(kb_match_rates(kb, "shape2", 2, near_a, 0.5, out), AI_OK);
    assert_string_equal(out, "");
    ai_kb_close(kb);
}

/* ------------------------------------------------------------ settings */

static int untuned(ai_comm *c, void *arg)
{
    (void)arg;
    size_t n = (64 << 10) / sizeof(float);
    float *buf = calloc(n, sizeof *buf);
    ai_choice ch;
    int bad = !buf;
    for (int i = 0; !bad && i < 3; i++)
        bad = ai_allreduce(c, AI_IN_PLACE, buf, n, AI_F32, AI_SUM, NULL) != AI_OK;
    free(buf);
    if (bad || ai_comm_choice(c, AI_ALLREDUCE, n * sizeof(float), &ch) != AI_OK)
        return 1;
    if (!strcmp(ch.source, "learned") || !strcmp(ch.source, "kb")) {
        fprintf(stderr, "AUTOINFRA_TUNE=0 but the choice came from the %s\n", ch.source);
        return 1;
    }
    return 0;
}

static void test_settings(void **state)
{
    (void)state;
    char kb[300];
    path_in(kb, sizeof kb, "off.sqlite");
    setenv("AUTOINFRA_KB", kb, 1);
    setenv("AUTOINFRA_TUNE", "0", 1);
    ranks_opts o = {.deadline_s = 60};
    int rc = ranks_run(2, &o, untuned, NULL);
    unsetenv("AUTOINFRA_TUNE");
    assert_int_equal(rc, 0);
    assert_int_equal(access(kb, F_OK), -1); /* no learner, no knowledge base */
    /* A malformed setting fails communicator creation, naming it. */
    setenv("AUTOINFRA_TUNE_MIN", "lots", 1);
    ai_comm *c = NULL;
    ai_comm_config cfg = {.rank = 0, .size = 1};
    assert_int_equal(ai_comm_create(&cfg, &c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_TUNE_MIN"));
    setenv("AUTOINFRA_TUNE_MIN", "16K", 1);
    setenv("AUTOINFRA_TUNE_REFINE", "-1", 1);
    assert_int_equal(ai_comm_create(&cfg, &c), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "AUTOINFRA_TUNE_REFINE"));
    unsetenv("AUTOINFRA_TUNE_REFINE");
    assert_int_equal(ai_comm_create(&cfg, &c), AI_OK);
    ai_comm_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_decisions),
        cmocka_unit_test(test_warm_start),
        cmocka_unit_test(test_first_calls_unlearned),
        cmocka_unit_test(test_warm_from_last),
        cmocka_unit_test(test_warm_keeps_unrun),
        cmocka_unit_test(test_warm_relearns_stale_rivals),
        cmocka_unit_test(test_drift_relearns),
        cmocka_unit_test(test_drift_one_rank),
        cmocka_unit_test(test_batched_writes),
        cmocka_unit_test(test_crash_safety),
        cmocka_unit_test(test_json_exchange),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_fingerprint_match),
        cmocka_unit_test(test_writer_starts_wal),
        cmocka_unit_test(test_busy_kb),
        cmocka_unit_test(test_config_kb_path),
        cmocka_unit_test(test_foreign_db),
        cmocka_unit_test(test_readonly_kb),
        cmocka_unit_test(test_kb_fifo),
        cmocka_unit_test(test_busy_open),
        cmocka_unit_test(test_full_disk_kb),
        cmocka_unit_test(test_choices_logged),
        cmocka_unit_test(test_schema_versions),
    };
    /* TEST_FILTER=name: run the tests whose names match (cmocka's pattern). */
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
