/*
 * The NCCL profiler plugin (plugins/nccl_profiler), driven the way NCCL
 * 2.27 to 2.30 drive it (plugins/nccl_profiler/nccl_profiler_abi.h has the
 * call sequence and the tags it was read at): found as NCCL finds it for
 * NCCL_PROFILER_PLUGIN=autoinfra (libnccl-profiler-autoinfra.so through
 * LD_LIBRARY_PATH: the test re-executes itself with the plugins' directories
 * on it), each release's symbol order applied, init / startEvent(Coll) /
 * stopEvent(Coll) / startEvent(KernelCh) / recordEventState(KernelChStop) /
 * stopEvent(KernelCh) / finalize called with that release's descriptors.
 * The file it writes is merged into a KB with ai_kb_import_json and read
 * back, and then read by the tuner plugin (libnccl-tuner-autoinfra.so),
 * which must pick the measured choice.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"

#include "../plugins/nccl_profiler/nccl_profiler_abi.h"
#include "../plugins/nccl_tuner/nccl_tuner_abi.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];
static void *plib, *tlib;
static int log_warn, log_info, log_no_subsys;
static char log_text[8192];

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    (void)line;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* The profiler's lines (not the tuner's, in the last test) carry
     * NCCL's PROFILE and TUNING subsystems. */
    if (file && strstr(file, "nccl_profiler") &&
        (!(flags & NCCL_PROFILE_SUBSYS) || !(flags & NCCL_TUNING)))
        log_no_subsys++;
    if (level == NCCL_LOG_WARN)
        log_warn++;
    if (level == NCCL_LOG_INFO)
        log_info++;
    size_t used = strlen(log_text);
    snprintf(log_text + used, sizeof log_text - used, "%s\n", buf);
}

/* ------------------------------------------------- each release's side */

typedef struct release {
    const char *version;
    int order[6];
    int norder;
} release;

/* src/plugin/profiler.cc at each tag: versions tried, newest first. */
static const release releases[] = {
    {"2.26.2", {3, 2, 1}, 3},
    {"2.27.5", {4, 3, 2, 1}, 4},
    {"2.28.3", {5, 4, 3, 2, 1}, 5},
    {"2.29.2", {6, 5, 4, 3, 2, 1}, 6},
    {"2.30.3", {6, 5, 4, 3, 2, 1}, 6},
};

typedef struct loaded {
    int version;
    const void *sym;
} loaded;

static loaded load(const release *r)
{
    loaded l = {0, NULL};
    for (int i = 0; i < r->norder && !l.sym; i++) {
        char name[32];
        snprintf(name, sizeof name, "ncclProfiler_v%d", r->order[i]); /* profiler_vN.cc */
        l.sym = dlsym(plib, name);
        if (l.sym)
            l.version = r->order[i];
    }
    return l;
}

static void *p_init(const loaded *l, int *mask, uint64_t hash, int nnodes, int nranks, int rank)
{
    void *ctx = (void *)&ctx;
    ncclResult_t r = ncclInternalError;
    if (l->version == 4)
        r = ((const ncclProfiler_v4_t *)l->sym)
                ->init(&ctx, mask, "comm", hash, nnodes, nranks, rank, test_logger);
    else if (l->version == 5)
        r = ((const ncclProfiler_v5_t *)l->sym)
                ->init(&ctx, hash, mask, "comm", nnodes, nranks, rank, test_logger);
    else if (l->version == 6)
        r = ((const ncclProfiler_v6_t *)l->sym)
                ->init(&ctx, hash, mask, "comm", nnodes, nranks, rank, test_logger);
    assert_int_equal(r, ncclSuccess);
    assert_ptr_not_equal(ctx, (void *)&ctx);
    return ctx;
}

/* The descriptor NCCL builds, zeroed first as NCCL does ("= { 0 }"). */
typedef union {
    ncclProfilerEventDescr_v4_t v4;
    ncclProfilerEventDescr_v5_t v5;
} descr;

static void *p_start(const loaded *l, void *ctx, int type, void *parent,
                     const ncclProfilerColl_v4_t *coll, uint64_t ptimer)
{
    descr d;
    memset(&d, 0, sizeof d);
    void *h = (void *)&h; /* garbage before the call */
    ncclResult_t r;
    if (l->version == 4) {
        d.v4.type = (uint8_t)type;
        d.v4.parentObj = parent;
        d.v4.rank = 0;
        if (coll)
            d.v4.coll = *coll;
        else
            d.v4.kernelCh.pTimer = ptimer;
        r = ((const ncclProfiler_v4_t *)l->sym)->startEvent(ctx, &h, &d.v4);
    } else {
        d.v5.type = (uint64_t)type;
        d.v5.parentObj = parent;
        if (coll)
            d.v5.coll.base = *coll;
        else
            d.v5.kernelCh.pTimer = ptimer;
        if (l->version == 5)
            r = ((const ncclProfiler_v5_t *)l->sym)->startEvent(ctx, &h, &d.v5);
        else
            r = ((const ncclProfiler_v6_t *)l->sym)->startEvent(ctx, &h, &d.v5);
    }
    assert_int_equal(r, ncclSuccess);
    assert_ptr_not_equal(h, (void *)&h);
    return h;
}

/* Stop, record, finalize have the same shape in v4 to v6. */
static const ncclProfiler_v4_t *common(const loaded *l)
{
    return l->sym;
}

static void p_kernel_stop(const loaded *l, void *h, uint64_t ptimer)
{
    if (!h)
        return; /* NCCL: "if (sub->kernelEventHandle)" */
    ncclProfilerEventStateArgs_v4_t a;
    memset(&a, 0, sizeof a);
    a.kernelCh.pTimer = ptimer;
    assert_int_equal(common(l)->recordEventState(h, NCCL_PROFILER_KERNEL_CH_STOP, &a),
                     ncclSuccess);
    assert_int_equal(common(l)->stopEvent(h), ncclSuccess);
}

/* One collective as 2.28's hostStreamPlanTask and proxy thread report it:
 * Coll start and stop (enqueued), then one KernelCh per channel with the
 * kernel's start and stop on it. kernel_first: the proxy thread's events
 * come before the host's stop. */
static void p_coll(const loaded *l, void *ctx, const char *func, size_t count, const char *type,
                   const char *algo, const char *proto, int nch, uint64_t t0,
                   const uint64_t *starts, const uint64_t *stops, int kernel_first)
{
    ncclProfilerColl_v4_t c;
    memset(&c, 0, sizeof c);
    c.func = func;
    c.count = count;
    c.datatype = type;
    c.nChannels = (uint8_t)nch;
    c.algo = algo;
    c.proto = proto;
    void *h = p_start(l, ctx, NCCL_PROFILE_COLL, NULL, &c, 0);
    if (!kernel_first && h)
        assert_int_equal(common(l)->stopEvent(h), ncclSuccess);
    if (h)
        for (int i = 0; i < nch; i++) {
            void *k = p_start(l, ctx, NCCL_PROFILE_KERNEL_CH, h, NULL, t0 + starts[i]);
            p_kernel_stop(l, k, t0 + stops[i]);
        }
    if (kernel_first && h)
        assert_int_equal(common(l)->stopEvent(h), ncclSuccess);
}

/* ---------------------------------------------------------- fixtures */

static int plugin_dirs(char *prof, char *tun, size_t len)
{
    const char *bin = getenv("AUTOINFRA_BIN");
    if (!bin || !*bin)
        return -1;
    const char *slash = strrchr(bin, '/');
    int dirlen = slash ? (int)(slash - bin) : 1;
    const char *dir = slash ? bin : ".";
    snprintf(prof, len, "%.*s/plugins/nccl_profiler", dirlen, dir);
    snprintf(tun, len, "%.*s/plugins/nccl_tuner", dirlen, dir);
    return 0;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int count_files(const char *suffix, char *first, size_t len)
{
    DIR *d = opendir(tmpdir);
    if (!d)
        return -1;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        if (l >= s && strcmp(e->d_name + l - s, suffix) == 0) {
            if (n++ == 0 && first)
                snprintf(first, len, "%s/%s", tmpdir, e->d_name);
        }
    }
    closedir(d);
    return n;
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ai-nccl-profiler-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    /* NCCL_PROFILER_PLUGIN=autoinfra: "autoinfra", then
     * libnccl-profiler-autoinfra.so (src/plugin/plugin_open.cc). */
    plib = dlopen("autoinfra", RTLD_NOW | RTLD_LOCAL);
    if (!plib)
        plib = dlopen("libnccl-profiler-autoinfra.so", RTLD_NOW | RTLD_LOCAL);
    tlib = dlopen("libnccl-tuner-autoinfra.so", RTLD_NOW | RTLD_LOCAL);
    if (!plib || !tlib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (plib)
        dlclose(plib);
    if (tlib)
        dlclose(tlib);
    remove_tree(tmpdir);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    setenv("AUTOINFRA_NCCL_PROFILE_DIR", tmpdir, 1);
    log_warn = log_info = log_no_subsys = 0;
    log_text[0] = '\0';
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char f[600];
    while (count_files(".json", f, sizeof f) > 0)
        unlink(f);
    return log_no_subsys ? -1 : 0;
}

/* -------------------------------------------------------------- tests */

static void test_exports(void **state)
{
    (void)state;
    const ncclProfiler_v4_t *v4 = dlsym(plib, "ncclProfiler_v4");
    const ncclProfiler_v5_t *v5 = dlsym(plib, "ncclProfiler_v5");
    const ncclProfiler_v6_t *v6 = dlsym(plib, "ncclProfiler_v6");
    assert_non_null(v4);
    assert_non_null(v5);
    assert_non_null(v6);
    assert_string_equal(v4->name, "autoinfra");
    assert_true(v4->init && v4->startEvent && v4->stopEvent && v4->recordEventState &&
                v4->finalize);
    assert_true(v5->init && v6->init && v5->finalize && v6->finalize);
    assert_null(dlsym(plib, "ncclProfiler_v3"));
    assert_null(dlsym(plib, "prof_finalize"));
    /* Each release lands on the newest version it knows; 2.26 finds none
     * (its newest is v3) and runs without the plugin. */
    int want[] = {0, 4, 5, 6, 6};
    for (size_t i = 0; i < sizeof releases / sizeof releases[0]; i++)
        assert_int_equal(load(&releases[i]).version, want[i]);
}

/* Timings through each of v4, v5, v6, checked in the KB they feed. */
typedef struct seen {
    int n;
    long samples[8];
    double mean[8], sd[8];
    int channels[8];
    char algo[8][32];
    char coll[8][16];
    size_t bytes[8];
    char fp[17];
    int nranks, nhosts;
} seen;

static int collect(const ai_kb_arm *a, void *arg)
{
    seen *s = arg;
    if (s->n == 8)
        return 1;
    int i = s->n++;
    s->samples[i] = a->samples;
    s->mean[i] = a->mean_us;
    s->sd[i] = a->std_us;
    s->channels[i] = a->channels;
    snprintf(s->algo[i], sizeof s->algo[i], "%s", a->algo);
    snprintf(s->coll[i], sizeof s->coll[i], "%s", ai_coll_name(a->coll));
    s->bytes[i] = a->bytes;
    snprintf(s->fp, sizeof s->fp, "%s", a->fingerprint);
    s->nranks = a->nranks;
    s->nhosts = a->nhosts;
    return 0;
}

static void import_and_read(const char *kbpath, seen *s)
{
    char json[600];
    assert_int_equal(count_files(".json", json, sizeof json), 1);
    assert_int_equal(count_files(".tmp", NULL, 0), 0);
    ai_kb *kb = NULL;
    assert_int_equal(ai_kb_open(kbpath, 0, &kb), AI_OK);
    if (ai_kb_import_json(kb, json) != AI_OK)
        fail_msg("import %s: %s", json, ai_last_error());
    memset(s, 0, sizeof *s);
    assert_int_equal(ai_kb_foreach(kb, NULL, collect, s), AI_OK);
    ai_kb_close(kb);
    unlink(json);
}

static void run_job(const loaded *l, int kernel_first)
{
    int mask = 0;
    void *ctx = p_init(l, &mask, 0xabcdef0123456789ull, 4, 4, 1);
    assert_non_null(ctx);
    assert_int_equal(mask, NCCL_PROFILE_COLL | NCCL_PROFILE_KERNEL_CH);
    /* 1 MiB float allreduce on 2 channels, RING/SIMPLE: kernels span
     * 60, 70 and 80 us (the earliest start to the latest stop). */
    for (int i = 0; i < 3; i++) {
        uint64_t st[2] = {1000, 2000};
        uint64_t sp[2] = {51000, 61000 + 10000 * (uint64_t)i};
        p_coll(l, ctx, "AllReduce", 262144, "ncclFloat32", "RING", "SIMPLE", 2,
               1000000000ull * (uint64_t)(i + 1), st, sp, kernel_first);
    }
    /* 16 KiB allreduce, TREE/LL on 1 channel: 5 us, four times. */
    for (int i = 0; i < 4; i++) {
        uint64_t st[1] = {0}, sp[1] = {5000};
        p_coll(l, ctx, "AllReduce", 4096, "ncclInt32", "TREE", "LL", 1, 5000000ull * (uint64_t)i,
               st, sp, kernel_first);
    }
    /* 4 KiB per rank allgather (bytes, as 2.28 passes it), PAT: 20 us. */
    uint64_t st1[1] = {100}, sp1[1] = {20100};
    p_coll(l, ctx, "AllGather", 4096, "ncclInt8", "PAT", "SIMPLE", 1, 7, st1, sp1, kernel_first);
    /* Not timed: no handle for send/recv or an unknown type; a kernel that
     * reports no stop time; nothing after finalize. */
    p_coll(l, ctx, "SendRecv", 100, "ncclInt8", "RING", "SIMPLE", 1, 0, st1, sp1, kernel_first);
    p_coll(l, ctx, "AllReduce", 100, "Unknown", "RING", "SIMPLE", 1, 0, st1, sp1, kernel_first);
    ncclProfilerColl_v4_t c = {0, "Broadcast", NULL, NULL, 1024, 0, "ncclInt8", 1, 1, "RING",
                               "LL"};
    void *h = p_start(l, ctx, NCCL_PROFILE_COLL, NULL, &c, 0);
    assert_non_null(h);
    assert_int_equal(common(l)->stopEvent(h), ncclSuccess);
    void *k = p_start(l, ctx, NCCL_PROFILE_KERNEL_CH, h, NULL, 10);
    assert_int_equal(common(l)->stopEvent(k), ncclSuccess); /* no KernelChStop recorded */
    /* Events of other kinds get no handle. */
    assert_null(p_start(l, ctx, 1 << 3 /* ProxyOp */, NULL, NULL, 0));
    assert_null(p_start(l, ctx, NCCL_PROFILE_KERNEL_CH, NULL, NULL, 5)); /* no parent */
    assert_int_equal(common(l)->finalize(ctx), ncclSuccess);
}

static void test_timings_feed_kb(void **state)
{
    (void)state;
    for (size_t r = 1; r < sizeof releases / sizeof releases[0]; r++) {
        for (int kernel_first = 0; kernel_first < 2; kernel_first++) {
            loaded l = load(&releases[r]);
            run_job(&l, kernel_first);
            char kbpath[600];
            snprintf(kbpath, sizeof kbpath, "%s/kb-%zu-%d.sqlite", tmpdir, r, kernel_first);
            seen s;
            import_and_read(kbpath, &s);
            assert_int_equal(s.n, 3);
            assert_int_equal(s.nranks, 4);
            assert_int_equal(s.nhosts, 4);
            int found = 0;
            for (int i = 0; i < s.n; i++) {
                if (strcmp(s.algo[i], "nccl_ring_simple") == 0) {
                    found |= 1;
                    assert_string_equal(s.coll[i], "allreduce");
                    assert_int_equal(s.bytes[i], 1u << 20);
                    assert_int_equal(s.samples[i], 3);
                    assert_int_equal(s.channels[i], 2);
                    /* 60, 70, 80 us; the KB keeps its own posterior, which
                     * must sit close to the sample mean. */
                    assert_true(fabs(s.mean[i] - 70.0) < 3.5);
                } else if (strcmp(s.algo[i], "nccl_tree_ll") == 0) {
                    found |= 2;
                    assert_int_equal(s.bytes[i], 16384);
                    assert_int_equal(s.samples[i], 4);
                    assert_true(fabs(s.mean[i] - 5.0) < 0.5);
                } else if (strcmp(s.algo[i], "nccl_pat_simple") == 0) {
                    found |= 4;
                    assert_string_equal(s.coll[i], "allgather");
                    assert_int_equal(s.bytes[i], 4096);
                    assert_int_equal(s.samples[i], 1);
                } else {
                    fail_msg("unexpected arm %s", s.algo[i]);
                }
            }
            assert_int_equal(found, 7);
        }
    }
    assert_int_equal(log_warn, 0);
    assert_non_null(strstr(log_text, "autoinfra kb import"));
    assert_non_null(strstr(log_text, "without kernel timing")); /* the broadcast */
}

/* No AUTOINFRA_NCCL_PROFILE_DIR: no events asked for, nothing written. */
static void test_inactive_without_dir(void **state)
{
    (void)state;
    unsetenv("AUTOINFRA_NCCL_PROFILE_DIR");
    loaded l = load(&releases[2]);
    int mask = 0x7fff;
    void *ctx = (void *)&mask;
    assert_int_equal(((const ncclProfiler_v5_t *)l.sym)
                         ->init(&ctx, 1, &mask, "c", 1, 2, 0, test_logger),
                     ncclSuccess);
    assert_int_equal(mask, 0);
    assert_null(ctx);
    assert_int_equal(common(&l)->finalize(NULL), ncclSuccess);
    assert_int_equal(count_files(".json", NULL, 0), 0);
    /* A directory that cannot be written: warned at init. */
    setenv("AUTOINFRA_NCCL_PROFILE_DIR", "/nonexistent/dir", 1);
    ctx = p_init(&l, &mask, 2, 1, 2, 0);
    assert_int_equal(log_warn, 1);
    assert_int_equal(common(&l)->finalize(ctx), ncclSuccess);
}

/* The loop closed: what the profiler measured under NCCL becomes the
 * tuner's answer for that size, with the measured protocol and channels. */
static void test_tuner_reads_profile(void **state)
{
    (void)state;
    loaded l = load(&releases[2]);
    int mask = 0;
    void *ctx = p_init(&l, &mask, 0x55, 2, 8, 0);
    /* 256 KiB allreduce: TREE/SIMPLE on 3 channels 40 us, RING/LL128 on 3
     * channels 90 us (NCCL ran both, e.g. under other NCCL_ALGO settings). */
    for (int i = 0; i < 5; i++) {
        uint64_t st[3] = {0, 0, 0}, sp[3] = {40000, 39000, 38000}, sp2[3] = {90000, 90000, 90000};
        p_coll(&l, ctx, "AllReduce", 65536, "ncclFloat32", "TREE", "SIMPLE", 3, 0, st, sp, 0);
        p_coll(&l, ctx, "AllReduce", 65536, "ncclFloat32", "RING", "LL128", 3, 0, st, sp2, 0);
    }
    assert_int_equal(common(&l)->finalize(ctx), ncclSuccess);
    char kbpath[600];
    snprintf(kbpath, sizeof kbpath, "%s/loop.sqlite", tmpdir);
    seen s;
    import_and_read(kbpath, &s);
    assert_int_equal(s.n, 2);

    setenv("AUTOINFRA_KB", kbpath, 1);
    const ncclTuner_v5_t *t = dlsym(tlib, "ncclTunerPlugin_v5");
    assert_non_null(t);
    void *tc = NULL;
    ncclNvlDomainInfo_v5_t nvl = {2, 4, 4};
    ncclTunerConstants_v5_t k;
    memset(&k, 0, sizeof k);
    assert_int_equal(t->init(&tc, 9, 8, 2, test_logger, &nvl, &k), ncclSuccess);
    float tab[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
            tab[a][p] = (float)NCCL_ALGO_PROTO_IGNORE;
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
        tab[NCCL_ALGO_TREE][p] = 50.0f;
        tab[NCCL_ALGO_RING][p] = 10.0f + (float)p;
    }
    int nch = 0;
    /* NCCL's nBytes for a 256 KiB allreduce: TREE with the measured SIMPLE
     * (the size rule alone would try LL128 first), on the measured 3
     * channels. */
    assert_int_equal(t->getCollInfo(tc, ncclFuncAllReduce, 262144, 1, (float **)(void *)tab,
                                    NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &nch),
                     ncclSuccess);
    assert_true(tab[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] == 0.0f);
    assert_true(tab[NCCL_ALGO_TREE][NCCL_PROTO_LL128] == 50.0f);
    assert_int_equal(nch, 3);
    assert_int_equal(t->finalize(tc), ncclSuccess);
    unsetenv("AUTOINFRA_KB");
}

/* NCCL reports kernel channels from its proxy thread while the host thread
 * starts and stops collectives: many collectives, two threads. */
typedef struct shared {
    const loaded *l;
    void *ctx;
    void *handles[512];
    int nch;
    pthread_mutex_t mu;
    int ready; /* handles published */
} shared;

static void *proxy_thread(void *arg)
{
    shared *sh = arg;
    int next = 0;
    while (next < 512) {
        pthread_mutex_lock(&sh->mu);
        int ready = sh->ready;
        pthread_mutex_unlock(&sh->mu);
        for (; next < ready; next++)
            for (int c = 0; c < sh->nch; c++) {
                descr d;
                memset(&d, 0, sizeof d);
                d.v5.type = NCCL_PROFILE_KERNEL_CH;
                d.v5.parentObj = sh->handles[next];
                d.v5.kernelCh.pTimer = 1000;
                void *h = NULL;
                ((const ncclProfiler_v5_t *)sh->l->sym)->startEvent(sh->ctx, &h, &d.v5);
                ncclProfilerEventStateArgs_v4_t a = {.kernelCh = {1000 + 2000 + (uint64_t)c}};
                common(sh->l)->recordEventState(h, NCCL_PROFILER_KERNEL_CH_STOP, &a);
                common(sh->l)->stopEvent(h);
            }
        if (next < 512)
            usleep(100);
    }
    return NULL;
}

static void test_two_threads(void **state)
{
    (void)state;
    loaded l = load(&releases[2]);
    int mask = 0;
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.l = &l;
    sh.nch = 4;
    pthread_mutex_init(&sh.mu, NULL);
    sh.ctx = p_init(&l, &mask, 0x77, 1, 2, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, proxy_thread, &sh), 0);
    for (int i = 0; i < 512; i++) {
        ncclProfilerColl_v4_t c = {0, "AllReduce", NULL, NULL, 1024, 0, "ncclFloat32", 4, 1,
                                   "RING", "LL"};
        sh.handles[i] = p_start(&l, sh.ctx, NCCL_PROFILE_COLL, NULL, &c, 0);
        pthread_mutex_lock(&sh.mu);
        sh.ready = i + 1;
        pthread_mutex_unlock(&sh.mu);
        assert_int_equal(common(&l)->stopEvent(sh.handles[i]), ncclSuccess);
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(common(&l)->finalize(sh.ctx), ncclSuccess);
    pthread_mutex_destroy(&sh.mu);
    char kbpath[600];
    snprintf(kbpath, sizeof kbpath, "%s/threads.sqlite", tmpdir);
    seen s;
    import_and_read(kbpath, &s);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.samples[0], 512);
    assert_true(fabs(s.mean[0] - 2.003) < 0.1); /* 1000 -> 3003 ns */
}

int main(int argc, char **argv)
{
    (void)argc;
    /* NCCL resolves NCCL_PROFILER_PLUGIN=autoinfra through dlopen's search
     * path, which the dynamic loader reads at start-up: run again with the
     * plugins' directories on LD_LIBRARY_PATH. */
    if (!getenv("AI_TEST_NCCL_PROFILER_REEXEC")) {
        char prof[900], tun[900], val[8192];
        if (plugin_dirs(prof, tun, sizeof prof) != 0) {
            fprintf(stderr, "set AUTOINFRA_BIN (ctest does)\n");
            return 1;
        }
        const char *old = getenv("LD_LIBRARY_PATH");
        snprintf(val, sizeof val, "%s:%s%s%s", prof, tun, old && *old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", val, 1);
        setenv("AI_TEST_NCCL_PROFILER_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        return 1;
    }
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_exports),       T(test_timings_feed_kb), T(test_inactive_without_dir),
        T(test_tuner_reads_profile), T(test_two_threads),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
