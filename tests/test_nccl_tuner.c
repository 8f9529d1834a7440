/*
 * The NCCL tuner plugin (plugins/nccl_tuner), driven the way NCCL 2.28
 * drives a v5 tuner (plugins/nccl_tuner/nccl_tuner_v5.h has the call
 * sequence and sources): the built libautoinfra-nccl-tuner.so is dlopen'ed
 * with RTLD_NOW | RTLD_LOCAL, ncclTunerPlugin_v5 looked up, init called with
 * a logger, a communicator hash, nRanks, nNodes, the NVLink domain info and
 * NCCL's tuning constants, getCollInfo with a float[7][3] cost table filled
 * the way NCCL fills it (every cell -1.0, then a cost for each
 * algorithm/protocol NCCL can run for that collective), nChannels = 0, and
 * the choice read back the way NCCL makes it (cheapest cell >= 0, first in
 * algorithm-major order). The knowledge base is built in a temporary
 * directory from a JSON export through ai_kb_import_json.
 *
 * The plugin is found next to the CLI: dirname($AUTOINFRA_BIN)/plugins/
 * nccl_tuner/, or at $AUTOINFRA_NCCL_TUNER.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"

#include "../plugins/nccl_tuner/nccl_tuner_v5.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NA NCCL_NUM_ALGORITHMS
#define NP NCCL_NUM_PROTOCOLS
#define IGN ((float)NCCL_ALGO_PROTO_IGNORE)

/* Fingerprints of the test KB. */
#define FP_A "a0a0a0a0a0a0a0a0" /* 4 ranks on 4 hosts, most samples */
#define FP_B "b1b1b1b1b1b1b1b1" /* 4 ranks on 4 hosts, few samples */
#define FP_C "c2c2c2c2c2c2c2c2" /* 8 ranks on 2 hosts */

/*
 * Per-rank bucket lower edges (the KB's convention). Best arm = lowest
 * mean_us. What each bucket should become in NCCL is in the cases below.
 */
static const char kb_json[] =
    "{\"format\": \"autoinfra-kb\", \"version\": 1, \"fingerprints\": [\n"
    " {\"id\": \"" FP_A "\", \"nranks\": 4, \"nhosts\": 4, \"description\": \"four hosts\",\n"
    "  \"arms\": [\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 1024, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 20, \"mean_us\": 10.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 1024, \"algo\": \"recursive_doubling\","
    " \"channels\": 2, \"samples\": 20, \"mean_us\": 15.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 30, \"mean_us\": 100.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"recursive_doubling\","
    " \"channels\": 2, \"samples\": 5, \"mean_us\": 60.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 16777216, \"algo\": \"ring\", \"channels\": 4,"
    " \"samples\": 10, \"mean_us\": 9000.0, \"std_us\": 50.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 16777216, \"algo\": \"rabenseifner\","
    " \"channels\": 4, \"samples\": 10, \"mean_us\": 12000.0, \"std_us\": 50.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 256, \"algo\": \"some_future_algo\","
    " \"channels\": 1, \"samples\": 5, \"mean_us\": 3.0, \"std_us\": 0.1},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 4096, \"algo\": \"bruck\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 20.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 4096, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 40.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 1024, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 8.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 1024, \"algo\": \"bruck\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 9.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"reduce_scatter\", \"bytes\": 1048576, \"algo\": \"recursive_halving\","
    " \"channels\": 2, \"samples\": 10, \"mean_us\": 500.0, \"std_us\": 10.0},\n"
    "   {\"coll\": \"reduce_scatter\", \"bytes\": 1048576, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 700.0, \"std_us\": 10.0},\n"
    "   {\"coll\": \"reduce_scatter\", \"bytes\": 65536, \"algo\": \"pairwise\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 90.0, \"std_us\": 2.0},\n"
    "   {\"coll\": \"reduce_scatter\", \"bytes\": 65536, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 100.0, \"std_us\": 2.0},\n"
    "   {\"coll\": \"broadcast\", \"bytes\": 4096, \"algo\": \"binomial\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 12.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"broadcast\", \"bytes\": 4096, \"algo\": \"chain\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 30.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"broadcast\", \"bytes\": 1048576, \"algo\": \"chain\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 300.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"broadcast\", \"bytes\": 1048576, \"algo\": \"binomial\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 500.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"alltoall\", \"bytes\": 4096, \"algo\": \"pairwise\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 50.0, \"std_us\": 1.0}\n"
    "  ]},\n"
    " {\"id\": \"" FP_B "\", \"nranks\": 4, \"nhosts\": 4, \"description\": \"same size, less data\",\n"
    "  \"arms\": [\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 3, \"mean_us\": 50.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"recursive_doubling\","
    " \"channels\": 2, \"samples\": 3, \"mean_us\": 80.0, \"std_us\": 5.0}\n"
    "  ]},\n"
    " {\"id\": \"" FP_C "\", \"nranks\": 8, \"nhosts\": 2, \"description\": \"two hosts\",\n"
    "  \"arms\": [\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 4, \"mean_us\": 70.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"hierarchical\", \"channels\": 2,"
    " \"samples\": 4, \"mean_us\": 40.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 1024, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 4, \"mean_us\": 10.0, \"std_us\": 1.0}\n"
    "  ]}\n"
    "]}\n";

static char tmpdir[256];
static char kb_path[512];
static void *lib;
static const ncclTuner_v5_t *tuner;

/* ----------------------------------------------------------- the logger */

static int log_calls, log_tuning_info, log_trace;
static char log_text[8192];

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    (void)file;
    (void)line;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    log_calls++;
    if (level == NCCL_LOG_INFO && (flags & NCCL_TUNING))
        log_tuning_info++;
    if (level == NCCL_LOG_TRACE)
        log_trace++;
    size_t used = strlen(log_text);
    snprintf(log_text + used, sizeof log_text - used, "%s\n", buf);
}

/* ------------------------------------------------------- NCCL's side */

typedef float cost_table[NA][NP];

/* A cost table as NCCL 2.28 fills it for one collective: -1.0 everywhere,
 * then a time for what it can run. AllReduce: TREE and RING; AllGather /
 * ReduceScatter: RING, plus PAT/SIMPLE with one GPU per node; Broadcast /
 * Reduce: RING. NVLS / CollNet are left disabled (no such hardware).
 * The cheapest cell is never the one the KB will ask for, so a change of
 * choice is visible. */
static void nccl_fill(cost_table t, ncclFunc_t func, int pat)
{
    for (int a = 0; a < NA; a++)
        for (int p = 0; p < NP; p++)
            t[a][p] = IGN;
    t[NCCL_ALGO_RING][NCCL_PROTO_LL] = 12.0f;
    t[NCCL_ALGO_RING][NCCL_PROTO_LL128] = 9.5f;
    t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 30.0f;
    if (func == ncclFuncAllReduce) {
        t[NCCL_ALGO_TREE][NCCL_PROTO_LL] = 20.0f;
        t[NCCL_ALGO_TREE][NCCL_PROTO_LL128] = 15.0f;
        t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = 4.5f; /* cheapest: the KB never asks for it */
    } else {
        t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 3.0f; /* likewise */
    }
    if ((func == ncclFuncAllGather || func == ncclFuncReduceScatter) && pat)
        t[NCCL_ALGO_PAT][NCCL_PROTO_SIMPLE] = 40.0f;
}

/* NCCL's choice: the cheapest cell >= 0, first in algorithm-major order. */
static void nccl_choose(const float *t, int na, int np, int *algo, int *proto)
{
    float best = 3600000000.0f;
    *algo = *proto = -1;
    for (int a = 0; a < na; a++)
        for (int p = 0; p < np; p++) {
            float v = t[a * np + p];
            if (v == IGN)
                continue;
            if (v >= 0.0f && v < best) {
                best = v;
                *algo = a;
                *proto = p;
            }
        }
}

static void *comm_init(size_t nranks, size_t nnodes)
{
    void *ctx = (void *)&ctx; /* NCCL's slot holds garbage before init */
    ncclNvlDomainInfo_v5_t nvl = {(int)nnodes, (int)(nranks / nnodes), (int)(nranks / nnodes)};
    ncclTunerConstants_v5_t k, k0;
    for (size_t i = 0; i < sizeof k / sizeof(double); i++)
        ((double *)&k)[i] = 0.25 * (double)i;
    k0 = k;
    ncclNvlDomainInfo_v5_t nvl0 = nvl;
    assert_int_equal(tuner->init(&ctx, 0x5eed1234abcd0001ull, nranks, nnodes, test_logger, &nvl, &k),
                     ncclSuccess);
    /* The plugin has no reason to touch NCCL's model constants. */
    assert_memory_equal(&k, &k0, sizeof k);
    assert_memory_equal(&nvl, &nvl0, sizeof nvl);
    assert_ptr_not_equal(ctx, (void *)&ctx);
    return ctx;
}

static void comm_finalize(void *ctx)
{
    assert_int_equal(tuner->finalize(ctx), ncclSuccess);
}

typedef struct probe {
    ncclFunc_t func;
    size_t nbytes;
    int pat;       /* NCCL offers PAT (one GPU per node) */
    int algo, proto; /* expected choice, -1: table must stay bit-identical */
} probe;

/* Run one getCollInfo the way NCCL does and check the result. */
static void check_probe(void *ctx, const probe *pr)
{
    cost_table t, before;
    nccl_fill(t, pr->func, pr->pat);
    memcpy(before, t, sizeof t);
    int nch = 0;
    assert_int_equal(tuner->getCollInfo(ctx, pr->func, pr->nbytes, 1, (float **)(void *)t, NA, NP,
                                        0, &nch),
                     ncclSuccess);
    assert_int_equal(nch, 0); /* NCCL keeps its own channel count */
    if (pr->algo < 0) {
        if (memcmp(t, before, sizeof t) != 0)
            fail_msg("func %d nBytes %zu: table changed, expected untouched", (int)pr->func,
                     pr->nbytes);
        return;
    }
    int a, p, a0, p0;
    nccl_choose(&t[0][0], NA, NP, &a, &p);
    if (a != pr->algo || p != pr->proto)
        fail_msg("func %d nBytes %zu: NCCL would run algo %d proto %d, expected %d/%d",
                 (int)pr->func, pr->nbytes, a, p, pr->algo, pr->proto);
    nccl_choose(&before[0][0], NA, NP, &a0, &p0);
    assert_false(a0 == a && p0 == p); /* it really changed NCCL's mind */
    assert_true(before[a][p] > 0.0f);
    assert_true(t[a][p] == 0.0f);
    /* Exactly one cell written; disabled cells bit-identical. */
    t[a][p] = before[a][p];
    if (memcmp(t, before, sizeof t) != 0)
        fail_msg("func %d nBytes %zu: cells other than %d/%d changed", (int)pr->func, pr->nbytes,
                 a, p);
}

static void check_probes(void *ctx, const probe *prs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        check_probe(ctx, &prs[i]);
}

/* What FP_A teaches, seen from a 4-rank, 4-node communicator. */
static const probe learned_a[] = {
    /* ring best at 1 KiB -> RING, LL for small messages */
    {ncclFuncAllReduce, 1024, 0, NCCL_ALGO_RING, NCCL_PROTO_LL},
    {ncclFuncAllReduce, 2047, 0, NCCL_ALGO_RING, NCCL_PROTO_LL},
    /* recursive_doubling best at 64 KiB -> TREE; 64 KiB is LL128 */
    {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128},
    {ncclFuncAllReduce, 131071, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128},
    /* ring best at 16 MiB -> RING/SIMPLE */
    {ncclFuncAllReduce, 16u << 20, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE},
    {ncclFuncAllReduce, (16u << 20) + 12345, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE},
    /* allgather: NCCL's nBytes is nRanks x the per-rank block. bruck best
     * at 4 KiB/rank -> PAT (SIMPLE only) */
    {ncclFuncAllGather, 4 * 4096, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE},
    {ncclFuncAllGather, 4 * 4096 + 4 * 1000, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE},
    /* ring best at 1 KiB/rank -> RING; 4 KiB total -> LL */
    {ncclFuncAllGather, 4 * 1024, 1, NCCL_ALGO_RING, NCCL_PROTO_LL},
    /* reduce_scatter: recursive_halving at 1 MiB/rank -> PAT */
    {ncclFuncReduceScatter, 4u << 20, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE},
    /* pairwise at 64 KiB/rank -> RING, 256 KiB total -> LL128 */
    {ncclFuncReduceScatter, 4 * 65536, 1, NCCL_ALGO_RING, NCCL_PROTO_LL128},
    /* chain broadcast at 1 MiB -> RING/LL128 */
    {ncclFuncBroadcast, 1u << 20, 0, NCCL_ALGO_RING, NCCL_PROTO_LL128},
};

/* What must leave NCCL's table alone under FP_A. */
static const probe alone_a[] = {
    {ncclFuncAllReduce, 131072, 0, -1, -1},   /* next bucket: nothing learned */
    {ncclFuncAllReduce, 512, 0, -1, -1},      /* nothing learned */
    {ncclFuncAllReduce, 256, 0, -1, -1},      /* learned an algorithm NCCL has no match for */
    {ncclFuncAllReduce, 0, 0, -1, -1},        /* empty */
    {ncclFuncAllGather, 4 * 8192, 1, -1, -1}, /* 8 KiB/rank: nothing learned */
    {ncclFuncAllGather, 2048, 1, -1, -1},     /* 512 B/rank: nothing learned */
    /* bruck -> PAT, but NCCL offers no PAT (several GPUs per node) */
    {ncclFuncAllGather, 4 * 4096, 0, -1, -1},
    /* binomial broadcast -> TREE, which NCCL does not run for Broadcast */
    {ncclFuncBroadcast, 4096, 0, -1, -1},
    {ncclFuncReduce, 65536, 0, -1, -1}, /* nothing learned for reduce */
    /* not collectives the plugin answers for */
    {ncclFuncSendRecv, 65536, 0, -1, -1},
    {ncclFuncSend, 65536, 0, -1, -1},
    {ncclFuncRecv, 65536, 0, -1, -1},
    {ncclFuncAlltoAll, 4 * 4096, 0, -1, -1},
    {ncclFuncScatter, 65536, 0, -1, -1},
    {ncclFuncGather, 65536, 0, -1, -1},
    {(ncclFunc_t)99, 65536, 0, -1, -1},
    {(ncclFunc_t)-1, 65536, 0, -1, -1},
};

/* Everything FP_A teaches, expected untouched (for contexts that must not
 * use FP_A). */
static void check_all_alone(void *ctx)
{
    for (size_t i = 0; i < sizeof learned_a / sizeof learned_a[0]; i++) {
        probe pr = learned_a[i];
        pr.algo = pr.proto = -1;
        check_probe(ctx, &pr);
    }
    check_probes(ctx, alone_a, sizeof alone_a / sizeof alone_a[0]);
}

/* ------------------------------------------------------------ fixtures */

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
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

static int plugin_path(char *buf, size_t len)
{
    const char *env = getenv("AUTOINFRA_NCCL_TUNER");
    if (env && *env)
        return snprintf(buf, len, "%s", env) < (int)len ? 0 : -1;
    const char *bin = getenv("AUTOINFRA_BIN");
    if (!bin || !*bin)
        return -1;
    const char *slash = strrchr(bin, '/');
    int dirlen = slash ? (int)(slash - bin) : 1;
    const char *dir = slash ? bin : ".";
    int w = snprintf(buf, len, "%.*s/plugins/nccl_tuner/libautoinfra-nccl-tuner.so", dirlen, dir);
    return (w > 0 && (size_t)w < len) ? 0 : -1;
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ai-nccl-tuner-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    char json[600];
    snprintf(json, sizeof json, "%s/kb.json", tmpdir);
    snprintf(kb_path, sizeof kb_path, "%s/kb.sqlite", tmpdir);
    if (write_file(json, kb_json) != 0)
        return -1;
    ai_kb *kb = NULL;
    if (ai_kb_open(kb_path, 0, &kb) != AI_OK) {
        fprintf(stderr, "ai_kb_open: %s\n", ai_last_error());
        return -1;
    }
    ai_status_t st = ai_kb_import_json(kb, json);
    ai_kb_close(kb);
    if (st != AI_OK) {
        fprintf(stderr, "ai_kb_import_json: %s\n", ai_last_error());
        return -1;
    }

    char so[1024];
    if (plugin_path(so, sizeof so) != 0) {
        fprintf(stderr, "set AUTOINFRA_BIN (ctest does) or AUTOINFRA_NCCL_TUNER\n");
        return -1;
    }
    lib = dlopen(so, RTLD_NOW | RTLD_LOCAL); /* as NCCL opens plugins */
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", so, dlerror());
        return -1;
    }
    tuner = dlsym(lib, NCCL_TUNER_PLUGIN_SYMBOL_V5);
    if (!tuner) {
        fprintf(stderr, "dlsym %s: %s\n", NCCL_TUNER_PLUGIN_SYMBOL_V5, dlerror());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (lib)
        dlclose(lib);
    lib = NULL;
    tuner = NULL;
    remove_tree(tmpdir);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    setenv("AUTOINFRA_KB", kb_path, 1);
    unsetenv("AUTOINFRA_FINGERPRINT");
    unsetenv("NCCL_DEBUG");
    log_calls = log_tuning_info = log_trace = 0;
    log_text[0] = '\0';
    return 0;
}

/* --------------------------------------------------------------- tests */

static void test_exports(void **state)
{
    (void)state;
    assert_non_null(tuner->name);
    assert_string_equal(tuner->name, "autoinfra");
    assert_non_null(tuner->init);
    assert_non_null(tuner->getCollInfo);
    assert_non_null(tuner->finalize);
    /* Only the NCCL symbol: the library's own code stays hidden. */
    dlerror();
    assert_null(dlsym(lib, "ai_kb_open"));
    assert_null(dlsym(lib, "ai_kb_foreach"));
    assert_null(dlsym(lib, "ai_allreduce"));
    /* Older versions NCCL would fall back to are not claimed. */
    assert_null(dlsym(lib, "ncclTunerPlugin_v4"));
}

static void test_learned_choices(void **state)
{
    (void)state;
    void *ctx = comm_init(4, 4);
    assert_non_null(ctx);
    check_probes(ctx, learned_a, sizeof learned_a / sizeof learned_a[0]);
    comm_finalize(ctx);
}

static void test_untouched(void **state)
{
    (void)state;
    void *ctx = comm_init(4, 4);
    check_probes(ctx, alone_a, sizeof alone_a / sizeof alone_a[0]);
    comm_finalize(ctx);
}

static void test_disabled_cells(void **state)
{
    (void)state;
    void *ctx = comm_init(4, 4);
    cost_table t, before;
    int nch = 0, a, p;

    /* 64 KiB allreduce wants TREE/LL128. NCCL disabled LL128 (as it does
     * off NVLink): the next protocol in size order, SIMPLE, is taken and
     * the disabled cell keeps its exact value. */
    nccl_fill(t, ncclFuncAllReduce, 0);
    t[NCCL_ALGO_TREE][NCCL_PROTO_LL128] = IGN;
    t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = 25.0f;
    memcpy(before, t, sizeof t);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    nccl_choose(&t[0][0], NA, NP, &a, &p);
    assert_int_equal(a, NCCL_ALGO_TREE);
    assert_int_equal(p, NCCL_PROTO_SIMPLE);
    assert_memory_equal(&t[NCCL_ALGO_TREE][NCCL_PROTO_LL128], &before[NCCL_ALGO_TREE][NCCL_PROTO_LL128],
                        sizeof(float));
    t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = before[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE];
    assert_memory_equal(t, before, sizeof t);

    /* 1 KiB allreduce wants RING/LL; with LL and LL128 disabled (e.g.
     * NCCL_PROTO=SIMPLE) SIMPLE is the last resort. */
    nccl_fill(t, ncclFuncAllReduce, 0);
    t[NCCL_ALGO_RING][NCCL_PROTO_LL] = IGN;
    t[NCCL_ALGO_RING][NCCL_PROTO_LL128] = IGN;
    memcpy(before, t, sizeof t);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 1024, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    nccl_choose(&t[0][0], NA, NP, &a, &p);
    assert_int_equal(a, NCCL_ALGO_RING);
    assert_int_equal(p, NCCL_PROTO_SIMPLE);
    t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = before[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE];
    assert_memory_equal(t, before, sizeof t);

    /* Tree not offered at all (e.g. NCCL_ALGO=^TREE): nothing to prefer,
     * the table stays as NCCL made it. Any negative value counts as
     * disabled, not only -1.0. */
    nccl_fill(t, ncclFuncAllReduce, 0);
    t[NCCL_ALGO_TREE][NCCL_PROTO_LL] = IGN;
    t[NCCL_ALGO_TREE][NCCL_PROTO_LL128] = -2.0f;
    t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = IGN;
    memcpy(before, t, sizeof t);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    assert_memory_equal(t, before, sizeof t);

    /* Large message, SIMPLE disabled for RING: LL128 is the fallback. */
    nccl_fill(t, ncclFuncAllReduce, 0);
    t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = IGN;
    memcpy(before, t, sizeof t);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 16u << 20, 1, (float **)(void *)t,
                                        NA, NP, 0, &nch),
                     ncclSuccess);
    nccl_choose(&t[0][0], NA, NP, &a, &p);
    assert_int_equal(a, NCCL_ALGO_RING);
    assert_int_equal(p, NCCL_PROTO_LL128);
    assert_memory_equal(&t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE],
                        &before[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE], sizeof(float));

    /* The whole table disabled (cannot happen in NCCL, but must not
     * confuse the plugin). */
    for (a = 0; a < NA; a++)
        for (p = 0; p < NP; p++)
            t[a][p] = IGN;
    memcpy(before, t, sizeof t);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    assert_memory_equal(t, before, sizeof t);
    assert_int_equal(nch, 0);
    comm_finalize(ctx);
}

/* numAlgo / numProto below NCCL's 7 / 3: the table is float[numAlgo]
 * [numProto], allocated to the exact size so that AddressSanitizer catches
 * any access past it. */
static void test_smaller_table(void **state)
{
    (void)state;
    void *ctx = comm_init(4, 4);
    int nch = 0;

    /* One algorithm row (TREE only), three protocols. */
    float *t = malloc(1 * NP * sizeof *t);
    assert_non_null(t);
    for (int p = 0; p < NP; p++)
        t[p] = 10.0f + (float)p;
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, 1,
                                        NP, 0, &nch),
                     ncclSuccess);
    assert_true(t[NCCL_PROTO_LL] == 10.0f);
    assert_true(t[NCCL_PROTO_LL128] == 0.0f); /* TREE/LL128 */
    assert_true(t[NCCL_PROTO_SIMPLE] == 12.0f);
    /* RING (row 1) does not exist in this table: untouched. */
    for (int p = 0; p < NP; p++)
        t[p] = 10.0f + (float)p;
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 1024, 1, (float **)(void *)t, 1, NP,
                                        0, &nch),
                     ncclSuccess);
    for (int p = 0; p < NP; p++)
        assert_true(t[p] == 10.0f + (float)p);
    free(t);

    /* Two algorithms, two protocols (LL, LL128): rows are 2 floats apart. */
    t = malloc(2 * 2 * sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < 4; i++)
        t[i] = 5.0f + (float)i;
    /* 16 MiB ring: SIMPLE is beyond numProto, LL128 is next. */
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 16u << 20, 1, (float **)(void *)t,
                                        2, 2, 0, &nch),
                     ncclSuccess);
    assert_true(t[0] == 5.0f && t[1] == 6.0f && t[2] == 7.0f);
    assert_true(t[1 * 2 + NCCL_PROTO_LL128] == 0.0f);
    for (int i = 0; i < 4; i++)
        t[i] = 5.0f + (float)i;
    /* 1 KiB ring: RING/LL at [1][0]. */
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 1024, 1, (float **)(void *)t, 2, 2,
                                        0, &nch),
                     ncclSuccess);
    assert_true(t[0] == 5.0f && t[1] == 6.0f && t[3] == 8.0f);
    assert_true(t[1 * 2 + NCCL_PROTO_LL] == 0.0f);
    /* PAT (row 6) beyond numAlgo. */
    for (int i = 0; i < 4; i++)
        t[i] = 5.0f + (float)i;
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllGather, 4 * 4096, 1, (float **)(void *)t,
                                        2, 2, 0, &nch),
                     ncclSuccess);
    for (int i = 0; i < 4; i++)
        assert_true(t[i] == 5.0f + (float)i);
    free(t);
    assert_int_equal(nch, 0);
    comm_finalize(ctx);
}

static void test_no_matching_fingerprint(void **state)
{
    (void)state;
    /* 16 ranks on 4 nodes: nothing measured. */
    void *ctx = comm_init(16, 4);
    check_all_alone(ctx);
    comm_finalize(ctx);
    /* 4 ranks on 1 node: ranks match FP_A/FP_B, hosts do not. */
    ctx = comm_init(4, 1);
    check_all_alone(ctx);
    comm_finalize(ctx);
}

static void test_fingerprint_by_size(void **state)
{
    (void)state;
    /* 8 ranks on 2 nodes: FP_C, where hierarchical won at 64 KiB. */
    void *ctx = comm_init(8, 2);
    static const probe c[] = {
        {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128},
        {ncclFuncAllReduce, 1024, 0, NCCL_ALGO_RING, NCCL_PROTO_LL},
        {ncclFuncAllReduce, 16u << 20, 0, -1, -1}, /* learned in FP_A only */
        {ncclFuncAllGather, 8 * 4096, 1, -1, -1},  /* learned in FP_A only */
    };
    check_probes(ctx, c, sizeof c / sizeof c[0]);
    assert_non_null(strstr(log_text, FP_C));
    comm_finalize(ctx);
}

static void test_fingerprint_override(void **state)
{
    (void)state;
    /* FP_B has fewer samples than FP_A; named explicitly it wins. */
    setenv("AUTOINFRA_FINGERPRINT", FP_B, 1);
    void *ctx = comm_init(4, 4);
    static const probe b[] = {
        {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_RING, NCCL_PROTO_LL128},
        {ncclFuncAllReduce, 1024, 0, -1, -1}, /* FP_A knows it, FP_B does not */
        {ncclFuncAllGather, 4 * 4096, 1, -1, -1},
    };
    check_probes(ctx, b, sizeof b / sizeof b[0]);
    comm_finalize(ctx);

    /* Named but measured with another size: not applied to this
     * communicator, which falls back to the automatic choice (FP_A). */
    setenv("AUTOINFRA_FINGERPRINT", FP_C, 1);
    ctx = comm_init(4, 4);
    check_probes(ctx, learned_a, sizeof learned_a / sizeof learned_a[0]);
    comm_finalize(ctx);

    /* Named but unknown: the automatic choice. */
    setenv("AUTOINFRA_FINGERPRINT", "ffffffffffffffff", 1);
    ctx = comm_init(4, 4);
    check_probes(ctx, learned_a, sizeof learned_a / sizeof learned_a[0]);
    comm_finalize(ctx);
    unsetenv("AUTOINFRA_FINGERPRINT");
}

static void test_missing_or_bad_kb(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/no-such-kb.sqlite", tmpdir);
    setenv("AUTOINFRA_KB", path, 1);
    void *ctx = comm_init(4, 4);
    check_all_alone(ctx);
    assert_true(log_tuning_info > 0); /* says why it does nothing */
    assert_non_null(strstr(log_text, "no-such-kb.sqlite"));
    comm_finalize(ctx);
    assert_int_equal(access(path, F_OK), -1); /* read-only: nothing created */

    /* A file that is not a knowledge base. */
    snprintf(path, sizeof path, "%s/not-a-kb.sqlite", tmpdir);
    assert_int_equal(write_file(path, "this is not SQLite\n"), 0);
    setenv("AUTOINFRA_KB", path, 1);
    log_text[0] = '\0';
    ctx = comm_init(4, 4);
    check_all_alone(ctx);
    assert_non_null(strstr(log_text, "not-a-kb.sqlite"));
    comm_finalize(ctx);
}

static void test_logging(void **state)
{
    (void)state;
    void *ctx = comm_init(4, 4);
    assert_true(log_tuning_info > 0);
    assert_non_null(strstr(log_text, FP_A)); /* which knowledge it uses */
    assert_int_equal(log_trace, 0);          /* no per-call lines by default */
    comm_finalize(ctx);

    /* NCCL_DEBUG=TRACE: every decision is logged. */
    setenv("NCCL_DEBUG", "TRACE", 1);
    log_text[0] = '\0';
    ctx = comm_init(4, 4);
    check_probe(ctx, &learned_a[2]);
    assert_true(log_trace > 0);
    assert_non_null(strstr(log_text, "TREE/LL128"));
    comm_finalize(ctx);
    unsetenv("NCCL_DEBUG");

    /* No logger at all. */
    void *c2 = NULL;
    assert_int_equal(tuner->init(&c2, 1, 4, 4, NULL, NULL, NULL), ncclSuccess);
    check_probes(c2, learned_a, sizeof learned_a / sizeof learned_a[0]);
    comm_finalize(c2);
}

static void test_odd_inputs(void **state)
{
    (void)state;
    cost_table t, before;
    int nch = 0;
    nccl_fill(t, ncclFuncAllReduce, 0);
    memcpy(before, t, sizeof t);

    /* init without a place for the context: refused, nothing leaked. */
    assert_int_not_equal(tuner->init(NULL, 1, 4, 4, test_logger, NULL, NULL), ncclSuccess);

    void *ctx = comm_init(4, 4);
    /* NULL context (e.g. after a failed allocation) and bad geometry:
     * success, nothing touched. */
    assert_int_equal(tuner->getCollInfo(NULL, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, NULL, NA, NP, 0, &nch),
                     ncclSuccess);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, 0,
                                        NP, 0, &nch),
                     ncclSuccess);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, NA,
                                        -3, 0, &nch),
                     ncclSuccess);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, SIZE_MAX, 1, (float **)(void *)t,
                                        NA, NP, 0, &nch),
                     ncclSuccess);
    assert_memory_equal(t, before, sizeof t);
    /* No nChannels pointer: still answers. */
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 65536, 1, (float **)(void *)t, NA,
                                        NP, 1, NULL),
                     ncclSuccess);
    assert_true(t[NCCL_ALGO_TREE][NCCL_PROTO_LL128] == 0.0f);
    assert_int_equal(nch, 0);
    comm_finalize(ctx);
    assert_int_equal(tuner->finalize(NULL), ncclSuccess);

    /* A communicator of one rank (NCCL still initialises the tuner). */
    ctx = comm_init(1, 1);
    nccl_fill(t, ncclFuncAllGather, 0);
    memcpy(before, t, sizeof t);
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllGather, 4096, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    assert_memory_equal(t, before, sizeof t);
    comm_finalize(ctx);
}

/* Several communicators at once (NCCL creates one context per
 * communicator): each keeps its own knowledge. */
static void test_many_communicators(void **state)
{
    (void)state;
    void *a = comm_init(4, 4);
    void *c = comm_init(8, 2);
    void *none = comm_init(16, 4);
    static const probe pa = {ncclFuncAllReduce, 1024, 0, NCCL_ALGO_RING, NCCL_PROTO_LL};
    static const probe pc = {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128};
    static const probe pn = {ncclFuncAllReduce, 65536, 0, -1, -1};
    check_probe(a, &pa);
    check_probe(c, &pc);
    check_probe(none, &pn);
    comm_finalize(c);
    check_probe(a, &pa);
    comm_finalize(none);
    comm_finalize(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_exports, setup),
        cmocka_unit_test_setup(test_learned_choices, setup),
        cmocka_unit_test_setup(test_untouched, setup),
        cmocka_unit_test_setup(test_disabled_cells, setup),
        cmocka_unit_test_setup(test_smaller_table, setup),
        cmocka_unit_test_setup(test_no_matching_fingerprint, setup),
        cmocka_unit_test_setup(test_fingerprint_by_size, setup),
        cmocka_unit_test_setup(test_fingerprint_override, setup),
        cmocka_unit_test_setup(test_missing_or_bad_kb, setup),
        cmocka_unit_test_setup(test_logging, setup),
        cmocka_unit_test_setup(test_odd_inputs, setup),
        cmocka_unit_test_setup(test_many_communicators, setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
