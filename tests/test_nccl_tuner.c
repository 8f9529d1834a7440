/*
 * The NCCL tuner plugin (plugins/nccl_tuner), driven the way each NCCL
 * release drives it (plugins/nccl_tuner/nccl_tuner_abi.h has the call
 * sequences and the tags they were read at). The library is found the way
 * NCCL finds it for NCCL_TUNER_PLUGIN=autoinfra: dlopen("autoinfra") fails,
 * dlopen("libnccl-tuner-autoinfra.so") succeeds through the library search
 * path (the test re-executes itself with the plugin's directory on
 * LD_LIBRARY_PATH), RTLD_NOW | RTLD_LOCAL. Each release's symbol order is
 * then applied (2.21: v2; 2.22-2.23: v3, v2; 2.24-2.27: v4, v3, v2;
 * 2.28-2.29: v5 ..; 2.30: v6 ..) and the chosen version is called with
 * that release's init, getCollInfo (a float[6 or 7][3] cost table filled
 * the way NCCL fills it: every cell -1.0, then a cost for each
 * algorithm/protocol NCCL can run; or, for v2, algorithm / protocol out
 * parameters), getChunkSize (v6) and destroy / finalize, and the choice
 * read back the way that release makes it. Most single-version checks use
 * v5 (2.28). The knowledge base is built in a temporary directory from a
 * JSON export through ai_kb_import_json.
 *
 * The plugin's directory: dirname($AUTOINFRA_BIN)/plugins/nccl_tuner/, or
 * $AUTOINFRA_NCCL_TUNER_DIR.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "autoinfra.h"

#include "../plugins/nccl_tuner/nccl_tuner_abi.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NCCL_TUNER_PLUGIN_SYMBOL_V5 "ncclTunerPlugin_v5"

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
    " \"chunk_bytes\": 1024, \"samples\": 20, \"mean_us\": 10.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 1024, \"algo\": \"recursive_doubling\","
    " \"channels\": 2, \"samples\": 20, \"mean_us\": 15.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 30, \"mean_us\": 100.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 65536, \"algo\": \"recursive_doubling\","
    " \"channels\": 3, \"chunk_bytes\": 32768, \"samples\": 5, \"mean_us\": 60.0, \"std_us\": 5.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 16777216, \"algo\": \"ring\", \"channels\": 4,"
    " \"chunk_bytes\": 524288, \"samples\": 10, \"mean_us\": 9000.0, \"std_us\": 50.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 16777216, \"algo\": \"rabenseifner\","
    " \"channels\": 4, \"samples\": 10, \"mean_us\": 12000.0, \"std_us\": 50.0},\n"
    "   {\"coll\": \"allreduce\", \"bytes\": 256, \"algo\": \"some_future_algo\","
    " \"channels\": 1, \"samples\": 5, \"mean_us\": 3.0, \"std_us\": 0.1},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 4096, \"algo\": \"bruck\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 20.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 4096, \"algo\": \"ring\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 40.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 1024, \"algo\": \"ring\", \"channels\": 1,"
    " \"samples\": 10, \"mean_us\": 8.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"allgather\", \"bytes\": 1024, \"algo\": \"bruck\", \"channels\": 2,"
    " \"samples\": 10, \"mean_us\": 9.0, \"std_us\": 1.0},\n"
    "   {\"coll\": \"reduce_scatter\", \"bytes\": 1048576, \"algo\": \"recursive_halving\","
    " \"channels\": 6, \"samples\": 10, \"mean_us\": 500.0, \"std_us\": 10.0},\n"
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
    "   {\"coll\": \"broadcast\", \"bytes\": 1048576, \"algo\": \"chain\", \"channels\": 5,"
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

static int log_calls, log_tuning_info, log_trace, log_warn, log_not_tuning;
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
    if (!(flags & NCCL_TUNING)) /* NCCL_DEBUG_SUBSYS=TUNING would hide it */
        log_not_tuning++;
    if (level == NCCL_LOG_WARN)
        log_warn++;
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
    int ch;          /* expected nChannels: the arm's channels (0: NCCL's) */
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
    if (nch != (pr->algo < 0 ? 0 : pr->ch))
        fail_msg("func %d nBytes %zu: nChannels %d, expected %d", (int)pr->func, pr->nbytes, nch,
                 pr->algo < 0 ? 0 : pr->ch);
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
    {ncclFuncAllReduce, 1024, 0, NCCL_ALGO_RING, NCCL_PROTO_LL, 2},
    {ncclFuncAllReduce, 2047, 0, NCCL_ALGO_RING, NCCL_PROTO_LL, 2},
    /* recursive_doubling best at 64 KiB -> TREE; 64 KiB is LL128 */
    {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128, 3},
    {ncclFuncAllReduce, 131071, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128, 3},
    /* ring best at 16 MiB -> RING/SIMPLE */
    {ncclFuncAllReduce, 16u << 20, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 4},
    {ncclFuncAllReduce, (16u << 20) + 12345, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 4},
    /* allgather: NCCL's nBytes is nRanks x the per-rank block. bruck best
     * at 4 KiB/rank -> PAT (SIMPLE only) */
    {ncclFuncAllGather, 4 * 4096, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 2},
    {ncclFuncAllGather, 4 * 4096 + 4 * 1000, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 2},
    /* ring best at 1 KiB/rank -> RING; 4 KiB total -> LL */
    {ncclFuncAllGather, 4 * 1024, 1, NCCL_ALGO_RING, NCCL_PROTO_LL, 1},
    /* reduce_scatter: recursive_halving at 1 MiB/rank -> PAT */
    {ncclFuncReduceScatter, 4u << 20, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE, 6},
    /* pairwise at 64 KiB/rank -> RING, 256 KiB total -> LL128 */
    {ncclFuncReduceScatter, 4 * 65536, 1, NCCL_ALGO_RING, NCCL_PROTO_LL128, 2},
    /* chain broadcast at 1 MiB -> RING/LL128 */
    {ncclFuncBroadcast, 1u << 20, 0, NCCL_ALGO_RING, NCCL_PROTO_LL128, 5},
};

/* What must leave NCCL's table alone under FP_A. */
static const probe alone_a[] = {
    {ncclFuncAllReduce, 131072, 0, -1, -1, 0},   /* next bucket: nothing learned */
    {ncclFuncAllReduce, 512, 0, -1, -1, 0},      /* nothing learned */
    {ncclFuncAllReduce, 256, 0, -1, -1, 0},      /* learned an algorithm NCCL has no match for */
    {ncclFuncAllReduce, 0, 0, -1, -1, 0},        /* empty */
    {ncclFuncAllGather, 4 * 8192, 1, -1, -1, 0}, /* 8 KiB/rank: nothing learned */
    {ncclFuncAllGather, 2048, 1, -1, -1, 0},     /* 512 B/rank: nothing learned */
    /* bruck -> PAT, but NCCL offers no PAT (several GPUs per node) */
    {ncclFuncAllGather, 4 * 4096, 0, -1, -1, 0},
    /* binomial broadcast -> TREE, which NCCL does not run for Broadcast */
    {ncclFuncBroadcast, 4096, 0, -1, -1, 0},
    {ncclFuncReduce, 65536, 0, -1, -1, 0}, /* nothing learned for reduce */
    /* not collectives the plugin answers for */
    {ncclFuncSendRecv, 65536, 0, -1, -1, 0},
    {ncclFuncSend, 65536, 0, -1, -1, 0},
    {ncclFuncRecv, 65536, 0, -1, -1, 0},
    {ncclFuncAlltoAll, 4 * 4096, 0, -1, -1, 0},
    {ncclFuncScatter, 65536, 0, -1, -1, 0},
    {ncclFuncGather, 65536, 0, -1, -1, 0},
    {(ncclFunc_t)99, 65536, 0, -1, -1, 0},
    {(ncclFunc_t)-1, 65536, 0, -1, -1, 0},
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

/* The directory holding the built plugin. */
static int plugin_dir(char *buf, size_t len)
{
    const char *env = getenv("AUTOINFRA_NCCL_TUNER_DIR");
    if (env && *env)
        return snprintf(buf, len, "%s", env) < (int)len ? 0 : -1;
    const char *bin = getenv("AUTOINFRA_BIN");
    if (!bin || !*bin)
        return -1;
    const char *slash = strrchr(bin, '/');
    int dirlen = slash ? (int)(slash - bin) : 1;
    const char *dir = slash ? bin : ".";
    int w = snprintf(buf, len, "%.*s/plugins/nccl_tuner", dirlen, dir);
    return (w > 0 && (size_t)w < len) ? 0 : -1;
}

/* As NCCL 2.28's openPluginLib (src/plugin/plugin_open.cc at v2.28.3-1)
 * resolves NCCL_TUNER_PLUGIN=<name>: the value as given, then, for a bare
 * name, libnccl-tuner-<name>.so; both through dlopen's search path. */
static void *nccl_open_tuner(const char *name)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h)
        return h;
    char so[256];
    snprintf(so, sizeof so, "libnccl-tuner-%s.so", name);
    return dlopen(so, RTLD_NOW | RTLD_LOCAL);
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

    /* NCCL_TUNER_PLUGIN=autoinfra, as a user sets it. */
    lib = nccl_open_tuner("autoinfra");
    if (!lib) {
        fprintf(stderr, "NCCL_TUNER_PLUGIN=autoinfra: libnccl-tuner-autoinfra.so not found on"
                        " LD_LIBRARY_PATH=%s: %s\n",
                getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "", dlerror());
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
    unsetenv("NCCL_ALGO");
    unsetenv("NCCL_PROTO");
    unsetenv("NCCL_TUNER_CONFIG_FILE");
    log_calls = log_tuning_info = log_trace = log_warn = log_not_tuning = 0;
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
    /* One object per tuner ABI NCCL has used since 2.21, all named as
     * NCCL prints them ("TUNER/Plugin: Using autoinfra (vN)"). */
    const ncclTuner_v2_t *v2 = dlsym(lib, "ncclTunerPlugin_v2");
    const ncclTuner_v3_t *v3 = dlsym(lib, "ncclTunerPlugin_v3");
    const ncclTuner_v4_t *v4 = dlsym(lib, "ncclTunerPlugin_v4");
    const ncclTuner_v6_t *v6 = dlsym(lib, "ncclTunerPlugin_v6");
    assert_non_null(v2);
    assert_non_null(v3);
    assert_non_null(v4);
    assert_non_null(v6);
    assert_string_equal(v2->name, "autoinfra");
    assert_string_equal(v3->name, "autoinfra");
    assert_string_equal(v4->name, "autoinfra");
    assert_string_equal(v6->name, "autoinfra");
    assert_true(v2->init && v2->getCollInfo && v2->destroy);
    assert_true(v3->init && v3->getCollInfo && v3->destroy);
    assert_true(v4->init && v4->getCollInfo && v4->destroy);
    assert_true(v6->init && v6->getCollInfo && v6->finalize && v6->getChunkSize);
    /* Only those: the library's own code stays hidden. */
    dlerror();
    assert_null(dlsym(lib, "ai_kb_open"));
    assert_null(dlsym(lib, "ai_kb_foreach"));
    assert_null(dlsym(lib, "ai_allreduce"));
    assert_null(dlsym(lib, "ncclTunerPlugin_v1"));
    assert_null(dlsym(lib, "ncclTunerPlugin_v7"));
    assert_null(dlsym(lib, "ncclTunerPlugin"));

    /* The object NCCL found by name is the library file of that name (not
     * only its old name, which is a link to it). */
    Dl_info info;
    assert_true(dladdr(v2, &info) != 0);
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    assert_string_equal(base, "libnccl-tuner-autoinfra.so");
    char dir[900], old[1000];
    assert_int_equal(plugin_dir(dir, sizeof dir), 0);
    snprintf(old, sizeof old, "%s/libautoinfra-nccl-tuner.so", dir);
    void *h = dlopen(old, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    assert_ptr_equal(dlsym(h, "ncclTunerPlugin_v2"), v2); /* the same library */
    dlclose(h);
    /* A name NCCL would not resolve to it stays unresolved. */
    assert_null(nccl_open_tuner("autoinfra-nonexistent"));
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

    assert_int_equal(nch, 4); /* the 16 MiB ring arm's channels */
    /* The whole table disabled (cannot happen in NCCL, but must not
     * confuse the plugin): nothing chosen, nChannels left as NCCL set it. */
    nch = 0;
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
    nch = 0;
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
        {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128, 2},
        {ncclFuncAllReduce, 1024, 0, NCCL_ALGO_RING, NCCL_PROTO_LL, 2},
        {ncclFuncAllReduce, 16u << 20, 0, -1, -1, 0}, /* learned in FP_A only */
        {ncclFuncAllGather, 8 * 4096, 1, -1, -1, 0},  /* learned in FP_A only */
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
        {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_RING, NCCL_PROTO_LL128, 2},
        {ncclFuncAllReduce, 1024, 0, -1, -1, 0}, /* FP_A knows it, FP_B does not */
        {ncclFuncAllGather, 4 * 4096, 1, -1, -1, 0},
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
    static const probe pa = {ncclFuncAllReduce, 1024, 0, NCCL_ALGO_RING, NCCL_PROTO_LL, 2};
    static const probe pc = {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128, 2};
    static const probe pn = {ncclFuncAllReduce, 65536, 0, -1, -1, 0};
    check_probe(a, &pa);
    check_probe(c, &pc);
    check_probe(none, &pn);
    comm_finalize(c);
    check_probe(a, &pa);
    comm_finalize(none);
    comm_finalize(a);
}

/* ------------------------------------------- each release's calling side */

typedef struct nccl_release {
    const char *version;
    int order[5]; /* tuner versions it tries, newest first */
    int norder;
    int num_algo; /* its NCCL_NUM_ALGORITHMS: rows of the cost table */
} nccl_release;

/* src/misc/tuner.cc (2.21-2.24), src/plugin/tuner.cc (2.27 on) at each
 * tag; nccl_common.h for the algorithm count (PAT from 2.23). */
static const nccl_release releases[] = {
    {"2.21.5", {2}, 1, 6},
    {"2.22.3", {3, 2}, 2, 6},
    {"2.23.4", {3, 2}, 2, 7},
    {"2.24.3", {4, 3, 2}, 3, 7},
    {"2.27.5", {4, 3, 2}, 3, 7},
    {"2.28.3", {5, 4, 3, 2}, 4, 7},
    {"2.29.2", {5, 4, 3, 2}, 4, 7},
    {"2.30.3", {6, 5, 4, 3, 2}, 5, 7},
};
#define NRELEASES (sizeof releases / sizeof releases[0])

typedef struct loaded {
    const nccl_release *rel;
    int version;
    const void *sym;
} loaded;

static const nccl_release *release_named(const char *v)
{
    for (size_t i = 0; i < NRELEASES; i++)
        if (strcmp(releases[i].version, v) == 0)
            return &releases[i];
    fail_msg("no release %s in the table", v);
    return NULL;
}

/* The release's symbol search: the first of its versions the library has. */
static loaded release_load(const nccl_release *rel)
{
    loaded l = {rel, 0, NULL};
    for (int i = 0; i < rel->norder && !l.sym; i++) {
        char name[32];
        snprintf(name, sizeof name, "ncclTunerPlugin_v%d", rel->order[i]);
        l.sym = dlsym(lib, name);
        if (l.sym)
            l.version = rel->order[i];
    }
    if (!l.sym)
        fail_msg("NCCL %s finds no tuner symbol it knows", rel->version);
    return l;
}

static void *rel_init(const loaded *l, size_t nranks, size_t nnodes)
{
    void *ctx = (void *)&ctx; /* NCCL's slot holds garbage before init */
    ncclNvlDomainInfo_v5_t nvl = {(int)nnodes, (int)(nranks / nnodes), (int)(nranks / nnodes)};
    ncclTunerConstants_v5_t k;
    memset(&k, 0, sizeof k);
    ncclResult_t r = ncclInternalError;
    switch (l->version) {
    case 2: r = ((const ncclTuner_v2_t *)l->sym)->init(nranks, nnodes, test_logger, &ctx); break;
    case 3: r = ((const ncclTuner_v3_t *)l->sym)->init(nranks, nnodes, test_logger, &ctx); break;
    case 4: r = ((const ncclTuner_v4_t *)l->sym)->init(nranks, nnodes, test_logger, &ctx); break;
    case 5:
        r = ((const ncclTuner_v5_t *)l->sym)
                ->init(&ctx, 0x1234, nranks, nnodes, test_logger, &nvl, &k);
        break;
    case 6:
        r = ((const ncclTuner_v6_t *)l->sym)
                ->init(&ctx, 0x1234, nranks, nnodes, test_logger, &nvl, &k);
        break;
    }
    assert_int_equal(r, ncclSuccess);
    assert_ptr_not_equal(ctx, (void *)&ctx);
    return ctx;
}

static void rel_finalize(const loaded *l, void *ctx)
{
    ncclResult_t r = ncclInternalError;
    switch (l->version) {
    case 2: r = ((const ncclTuner_v2_t *)l->sym)->destroy(ctx); break;
    case 3: r = ((const ncclTuner_v3_t *)l->sym)->destroy(ctx); break;
    case 4: r = ((const ncclTuner_v4_t *)l->sym)->destroy(ctx); break;
    case 5: r = ((const ncclTuner_v5_t *)l->sym)->finalize(ctx); break;
    case 6: r = ((const ncclTuner_v6_t *)l->sym)->finalize(ctx); break;
    }
    assert_int_equal(r, ncclSuccess);
}

/*
 * One collective as the release asks about it, and what it then runs.
 * t: the float[7][3] NCCL would fill; a release with 6 algorithms passes
 * its first 6 rows (contiguous, numAlgo = 6). v2 (2.21): algorithm and
 * protocol start UNDEF; set both and 2.21 runs them, else its own search
 * over its costs.
 */
static void rel_coll(const loaded *l, void *ctx, ncclFunc_t f, size_t nbytes, int regbuff,
                     cost_table t, int *algo, int *proto, int *nch)
{
    int na = l->rel->num_algo;
    float **tab = (float **)(void *)t;
    ncclResult_t r = ncclInternalError;
    *nch = 0;
    switch (l->version) {
    case 2: {
        int a = NCCL_ALGO_UNDEF, p = NCCL_PROTO_UNDEF;
        r = ((const ncclTuner_v2_t *)l->sym)->getCollInfo(ctx, f, nbytes, 0, 0, 1, &a, &p, nch);
        assert_int_equal(r, ncclSuccess);
        if (a != NCCL_ALGO_UNDEF && p != NCCL_PROTO_UNDEF) {
            assert_true(a >= 0 && a < na && p >= 0 && p < NP);
            *algo = a;
            *proto = p;
            return;
        }
        assert_true(a == NCCL_ALGO_UNDEF && p == NCCL_PROTO_UNDEF); /* never only one */
        break;
    }
    case 3:
        r = ((const ncclTuner_v3_t *)l->sym)->getCollInfo(ctx, f, nbytes, 1, tab, na, NP, nch);
        break;
    case 4:
        r = ((const ncclTuner_v4_t *)l->sym)
                ->getCollInfo(ctx, f, nbytes, 1, tab, na, NP, regbuff, nch);
        break;
    case 5:
        r = ((const ncclTuner_v5_t *)l->sym)
                ->getCollInfo(ctx, f, nbytes, 1, tab, na, NP, regbuff, nch);
        break;
    case 6:
        r = ((const ncclTuner_v6_t *)l->sym)
                ->getCollInfo(ctx, f, nbytes, 1, tab, na, NP, regbuff, nch);
        break;
    }
    assert_int_equal(r, ncclSuccess);
    nccl_choose(&t[0][0], na, NP, algo, proto);
}

/* What a learned_a probe should become under a release: no PAT before
 * 2.23, no LL128 through v2 (the plugin cannot know 2.21 enabled it). */
static probe expect_for(const loaded *l, probe pr)
{
    if (pr.algo < 0)
        return pr;
    if (pr.algo >= l->rel->num_algo) {
        pr.algo = pr.proto = -1;
        return pr;
    }
    if (l->version == 2 && pr.proto == NCCL_PROTO_LL128)
        pr.proto = NCCL_PROTO_SIMPLE;
    return pr;
}

static void rel_check(const loaded *l, void *ctx, const probe *pr0)
{
    probe pr = expect_for(l, *pr0);
    cost_table t, before;
    nccl_fill(t, pr.func, pr.pat);
    memcpy(before, t, sizeof t);
    int a, p, nch, a0, p0;
    rel_coll(l, ctx, pr.func, pr.nbytes, 0, t, &a, &p, &nch);
    nccl_choose(&before[0][0], l->rel->num_algo, NP, &a0, &p0);
    if (pr.algo < 0) {
        if (memcmp(t, before, sizeof t) != 0 || a != a0 || p != p0 || nch != 0)
            fail_msg("NCCL %s (v%d) func %d nBytes %zu: changed (%d/%d ch %d), expected NCCL's"
                     " own %d/%d",
                     l->rel->version, l->version, (int)pr.func, pr.nbytes, a, p, nch, a0, p0);
        return;
    }
    if (a != pr.algo || p != pr.proto || nch != pr.ch)
        fail_msg("NCCL %s (v%d) func %d nBytes %zu: runs %d/%d ch %d, expected %d/%d ch %d",
                 l->rel->version, l->version, (int)pr.func, pr.nbytes, a, p, nch, pr.algo,
                 pr.proto, pr.ch);
    /* It changed NCCL's mind (v2 may name what NCCL would have run: LL128
     * became SIMPLE, which the test's table makes cheapest for some). */
    if (l->version != 2)
        assert_false(a == a0 && p == p0);
}

/* Every release from 2.21.5 to 2.30.3 finds the newest version it knows and
 * gets the learned choices through it. */
static void test_releases(void **state)
{
    (void)state;
    for (size_t i = 0; i < NRELEASES; i++) {
        loaded l = release_load(&releases[i]);
        assert_int_equal(l.version, releases[i].order[0]);
        void *ctx = rel_init(&l, 4, 4);
        for (size_t j = 0; j < sizeof learned_a / sizeof learned_a[0]; j++)
            rel_check(&l, ctx, &learned_a[j]);
        for (size_t j = 0; j < sizeof alone_a / sizeof alone_a[0]; j++)
            rel_check(&l, ctx, &alone_a[j]);
        rel_finalize(&l, ctx);

        /* Another communicator shape, another fingerprint. */
        ctx = rel_init(&l, 8, 2);
        static const probe c = {ncclFuncAllReduce, 65536, 0, NCCL_ALGO_TREE, NCCL_PROTO_LL128, 2};
        rel_check(&l, ctx, &c);
        rel_finalize(&l, ctx);
    }
    assert_int_equal(log_warn, 0);
}

/* v6 (2.30.3): getChunkSize after the choice, with NCCL's chunk size. */
static void test_chunk_size_v6(void **state)
{
    (void)state;
    loaded l = release_load(release_named("2.30.3"));
    const ncclTuner_v6_t *v6 = l.sym;
    void *ctx = rel_init(&l, 4, 4);
    size_t chunk;
#define CHUNK(func, nbytes, algo, proto)                                                           \
    (chunk = 131072, assert_int_equal(v6->getChunkSize(ctx, func, nbytes, algo, proto, 4, &chunk), \
                                      ncclSuccess),                                                \
     chunk)
    /* The learned arm's chunk, when NCCL runs the learned algorithm. */
    assert_int_equal(CHUNK(ncclFuncAllReduce, 16u << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE), 524288);
    assert_int_equal(CHUNK(ncclFuncAllReduce, (16u << 20) + 1, NCCL_ALGO_RING, NCCL_PROTO_LL128),
                     524288);
    assert_int_equal(CHUNK(ncclFuncAllReduce, 65536, NCCL_ALGO_TREE, NCCL_PROTO_LL128), 32768);
    /* NCCL runs another algorithm than the one learned: its chunk. */
    assert_int_equal(CHUNK(ncclFuncAllReduce, 16u << 20, NCCL_ALGO_TREE, NCCL_PROTO_SIMPLE), 131072);
    assert_int_equal(CHUNK(ncclFuncAllReduce, 65536, NCCL_ALGO_RING, NCCL_PROTO_LL128), 131072);
    /* An arm's chunk below 4 KiB (NCCL would round it to nothing) is not used. */
    assert_int_equal(CHUNK(ncclFuncAllReduce, 1024, NCCL_ALGO_RING, NCCL_PROTO_LL), 131072);
    /* No chunk in the arm, nothing learned, not a collective we answer. */
    assert_int_equal(CHUNK(ncclFuncAllGather, 4 * 4096, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE), 131072);
    assert_int_equal(CHUNK(ncclFuncAllReduce, 1u << 30, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE), 131072);
    assert_int_equal(CHUNK(ncclFuncSend, 16u << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE), 131072);
    assert_int_equal(v6->getChunkSize(NULL, ncclFuncAllReduce, 16u << 20, 1, 2, 4, &chunk),
                     ncclSuccess);
    assert_int_equal(v6->getChunkSize(ctx, ncclFuncAllReduce, 16u << 20, 1, 2, 4, NULL),
                     ncclSuccess);
    rel_finalize(&l, ctx);

    /* NCCL_ALGO set: the chunk is NCCL's too. */
    setenv("NCCL_ALGO", "Ring", 1);
    ctx = rel_init(&l, 4, 4);
    assert_int_equal(CHUNK(ncclFuncAllReduce, 16u << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE), 131072);
    rel_finalize(&l, ctx);
    unsetenv("NCCL_ALGO");
#undef CHUNK
}

static char conf_path[600];

static void write_conf(const char *text)
{
    snprintf(conf_path, sizeof conf_path, "%s/nccl_tuner.conf", tmpdir);
    assert_int_equal(write_file(conf_path, text), 0);
    setenv("NCCL_TUNER_CONFIG_FILE", conf_path, 1);
}

/* One getCollInfo through v5 with regBuff; returns NCCL's choice. */
static void v5_coll(void *ctx, ncclFunc_t f, size_t nbytes, int pipeops, int regbuff, int pat,
                    int *a, int *p, int *nch, int *same)
{
    cost_table t, before;
    nccl_fill(t, f, pat);
    memcpy(before, t, sizeof t);
    *nch = 0;
    assert_int_equal(tuner->getCollInfo(ctx, f, nbytes, pipeops, (float **)(void *)t, NA, NP,
                                        regbuff, nch),
                     ncclSuccess);
    nccl_choose(&t[0][0], NA, NP, a, p);
    *same = memcmp(t, before, sizeof t) == 0;
}

static const char conf_text[] =
    "# collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff\n"
    "\n"
    "allreduce,0,2047,tree,simple,3,-1,-1\n"                  /* 3: 8 fields */
    "allreduce,65536,65536,ring,ll,-1,4,4,1\n"                /* 4: 9 fields */
    "  allgather,16384,16384,ring,simple,2,2,-1  \n"          /* 5: other node count */
    "reducescatter,0,4294967295,pat,simple,-1,-1,-1,-1,1\n"   /* 6: registered only */
    "broadcast,0,4294967295,tree,simple,-1,-1,-1\n"           /* 7: not offered */
    "allreduce,1,2,ring\n"                                    /* 8: bad */
    "alltoall,0,10,ring,simple,-1,-1,-1\n"                    /* 9: bad */
    "allreduce,10,5,ring,simple,-1,-1,-1\n"                   /* 10: bad */
    "allreduce,0,10,ring,ll256,-1,-1,-1\n"                    /* 11: bad */
    "allreduce,0,10,ring,simple,0,-1,-1\n"                    /* 12: bad */
    "allreduce,x,10,ring,simple,-1,-1,-1\n"                   /* 13: bad */
    "allreduce,0,10,ring,simple,-1,-1,-1,1,2\n"               /* 14: bad */
    "allreduce,0,4294967295,ring,simple,-1,-1,-1,-1,-1,7\n"   /* 15: bad */
    "REDUCE,0,4294967295,ring,SIMPLE,-1,-1,-1\n";             /* 16: any case */

/* NCCL_TUNER_CONFIG_FILE, the CSV of NCCL's example tuner: first matching
 * line wins over the KB; bad lines are reported and skipped. */
static void test_override_file(void **state)
{
    (void)state;
    write_conf(conf_text);
    void *ctx = comm_init(4, 4);
    int a, p, nch, same;
    /* Eight bad lines, each named by its number. */
    assert_int_equal(log_warn, 8);
    for (int line = 8; line <= 15; line++) {
        char want[64];
        snprintf(want, sizeof want, "line %d:", line);
        if (!strstr(log_text, want))
            fail_msg("no warning for line %d in:\n%s", line, log_text);
    }
    assert_null(strstr(log_text, "line 16:"));

    /* Line 3 pins 0..2047 B allreduce to TREE/SIMPLE on 3 channels, where
     * the KB says RING/LL on 2; inclusive bounds. */
    v5_coll(ctx, ncclFuncAllReduce, 1024, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_SIMPLE && nch == 3);
    v5_coll(ctx, ncclFuncAllReduce, 2047, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_SIMPLE && nch == 3);
    v5_coll(ctx, ncclFuncAllReduce, 2048, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(same && nch == 0); /* beyond it: the KB, which knows nothing there */
    /* Line 4: 64 KiB with one pipelined op -> RING/LL, channels NCCL's;
     * with two ops it does not match and the KB answers (TREE/LL128). */
    v5_coll(ctx, ncclFuncAllReduce, 65536, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL && nch == 0);
    v5_coll(ctx, ncclFuncAllReduce, 65536, 2, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL128 && nch == 3);
    v5_coll(ctx, ncclFuncAllReduce, 65537, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL128);
    /* Line 5 is for 2 nodes: the KB's PAT stands for this 4-node comm. */
    v5_coll(ctx, ncclFuncAllGather, 4 * 4096, 1, 0, 1, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_PAT && p == NCCL_PROTO_SIMPLE && nch == 2);
    /* Line 6 only for registered buffers. */
    v5_coll(ctx, ncclFuncReduceScatter, 4 * 65536, 1, 0, 1, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL128 && nch == 2); /* the KB */
    v5_coll(ctx, ncclFuncReduceScatter, 4 * 65536, 1, 1, 1, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_PAT && p == NCCL_PROTO_SIMPLE && nch == 0);
    /* Line 7 asks for a cell NCCL does not offer: NCCL decides (the KB's
     * RING/LL128 for 1 MiB is not used either: the user pinned this). */
    v5_coll(ctx, ncclFuncBroadcast, 1u << 20, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(same && nch == 0);
    /* Line 16, written in capitals. */
    v5_coll(ctx, ncclFuncReduce, 4096, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_SIMPLE);
    comm_finalize(ctx);

    /* v3 (2.22) passes no regBuff: line 6 (registered only) never applies. */
    loaded l3 = release_load(release_named("2.23.4"));
    ctx = rel_init(&l3, 4, 4);
    cost_table t;
    nccl_fill(t, ncclFuncReduceScatter, 1);
    rel_coll(&l3, ctx, ncclFuncReduceScatter, 4 * 65536, 1, t, &a, &p, &nch);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL128 && nch == 2);
    nccl_fill(t, ncclFuncAllReduce, 0);
    rel_coll(&l3, ctx, ncclFuncAllReduce, 1024, 0, t, &a, &p, &nch);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_SIMPLE && nch == 3);
    rel_finalize(&l3, ctx);

    /* v2 (2.21): the pin through algorithm / protocol. */
    loaded l2 = release_load(release_named("2.21.5"));
    ctx = rel_init(&l2, 4, 4);
    nccl_fill(t, ncclFuncAllReduce, 0);
    rel_coll(&l2, ctx, ncclFuncAllReduce, 2000, 0, t, &a, &p, &nch);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_SIMPLE && nch == 3);
    rel_finalize(&l2, ctx);

    /* A communicator of another shape: line 5 applies there. */
    ctx = comm_init(8, 2);
    v5_coll(ctx, ncclFuncAllGather, 16384, 1, 0, 1, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_SIMPLE && nch == 2);
    comm_finalize(ctx);

    /* A file that cannot be read: said so, and the KB still answers. */
    char missing[700];
    snprintf(missing, sizeof missing, "%s/no-such.conf", tmpdir);
    setenv("NCCL_TUNER_CONFIG_FILE", missing, 1);
    log_warn = 0;
    log_text[0] = '\0';
    ctx = comm_init(4, 4);
    assert_int_equal(log_warn, 1);
    assert_non_null(strstr(log_text, "no-such.conf"));
    check_probes(ctx, learned_a, sizeof learned_a / sizeof learned_a[0]);
    comm_finalize(ctx);
    unsetenv("NCCL_TUNER_CONFIG_FILE");
    unlink(conf_path);
}

/* Many lines (the rule table grows) and an over-long line (skipped with a
 * warning; the lines after it still read). */
static void test_override_many_lines(void **state)
{
    (void)state;
    size_t cap = 64 * 1024;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t used = 0;
    for (int i = 0; i < 300; i++)
        used += (size_t)snprintf(text + used, cap - used, "allreduce,%d,%d,ring,ll,%d,-1,-1\n",
                                 100000 + i, 100000 + i, i % 64 + 1);
    memset(text + used, 'x', 700);
    used += 700;
    used += (size_t)snprintf(text + used, cap - used, "\nallreduce,5,5,tree,ll,7,-1,-1\n");
    write_conf(text);
    free(text);
    void *ctx = comm_init(4, 4);
    assert_int_equal(log_warn, 1);
    assert_non_null(strstr(log_text, "line 301: longer than"));
    int a, p, nch, same;
    for (int i = 0; i < 300; i += 37) {
        v5_coll(ctx, ncclFuncAllReduce, (size_t)(100000 + i), 1, 0, 0, &a, &p, &nch, &same);
        assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL && nch == i % 64 + 1);
    }
    v5_coll(ctx, ncclFuncAllReduce, 299 + 100000, 1, 0, 0, &a, &p, &nch, &same);
    assert_int_equal(nch, 299 % 64 + 1);
    v5_coll(ctx, ncclFuncAllReduce, 5, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL && nch == 7);
    comm_finalize(ctx);
    unsetenv("NCCL_TUNER_CONFIG_FILE");
    unlink(conf_path);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *s = strstr(hay, needle); s; s = strstr(s + 1, needle))
        n++;
    return n;
}

/* NCCL_ALGO / NCCL_PROTO set by the user: those choices stay NCCL's, and
 * the plugin says so once per communicator. */
static void test_user_algo_proto(void **state)
{
    (void)state;
    int a, p, nch, same;

    /* NCCL_ALGO: NCCL's algorithm (its table's cheapest row is TREE for
     * allreduce), our protocol for the size; the learned channel count
     * belongs to RING, so it is not passed. */
    setenv("NCCL_ALGO", "Tree,Ring", 1);
    void *ctx = comm_init(4, 4);
    assert_int_equal(count_of(log_text, "NCCL_ALGO=Tree,Ring"), 1);
    v5_coll(ctx, ncclFuncAllReduce, 1024, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL && nch == 0);
    v5_coll(ctx, ncclFuncAllReduce, 16u << 20, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_SIMPLE && nch == 0);
    /* Where NCCL's algorithm is the learned one, its channels apply. */
    v5_coll(ctx, ncclFuncAllReduce, 65536, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_TREE && p == NCCL_PROTO_LL128 && nch == 3);
    assert_int_equal(count_of(log_text, "NCCL_ALGO"), 1); /* once, not per call */
    comm_finalize(ctx);
    unsetenv("NCCL_ALGO");

    /* NCCL_PROTO=LL128,SIMPLE (NCCL disables the LL cells): our algorithm,
     * NCCL's cheapest protocol for it. */
    setenv("NCCL_PROTO", "LL128,SIMPLE", 1);
    log_text[0] = '\0';
    ctx = comm_init(4, 4);
    assert_int_equal(count_of(log_text, "NCCL_PROTO=LL128,SIMPLE"), 1);
    cost_table t;
    nccl_fill(t, ncclFuncAllReduce, 0);
    t[NCCL_ALGO_RING][NCCL_PROTO_LL] = t[NCCL_ALGO_TREE][NCCL_PROTO_LL] = IGN;
    nch = 0;
    assert_int_equal(tuner->getCollInfo(ctx, ncclFuncAllReduce, 1024, 1, (float **)(void *)t, NA,
                                        NP, 0, &nch),
                     ncclSuccess);
    nccl_choose(&t[0][0], NA, NP, &a, &p);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL128 && nch == 2);
    /* 16 MiB: RING, where NCCL's cheapest is LL128 (9.5) over SIMPLE (30),
     * though we would have picked SIMPLE. */
    v5_coll(ctx, ncclFuncAllReduce, 16u << 20, 1, 0, 0, &a, &p, &nch, &same);
    assert_true(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL128 && nch == 4);
    comm_finalize(ctx);

    /* Both: nothing is touched. */
    setenv("NCCL_ALGO", "Ring", 1);
    log_text[0] = '\0';
    ctx = comm_init(4, 4);
    assert_int_equal(count_of(log_text, "NCCL_ALGO=Ring and NCCL_PROTO=LL128,SIMPLE"), 1);
    check_all_alone(ctx);
    comm_finalize(ctx);

    /* v2 (2.21) runs what the plugin names without checking NCCL_ALGO /
     * NCCL_PROTO: with either set it names nothing. */
    loaded l2 = release_load(release_named("2.21.5"));
    unsetenv("NCCL_PROTO");
    ctx = rel_init(&l2, 4, 4);
    for (size_t j = 0; j < sizeof learned_a / sizeof learned_a[0]; j++) {
        probe pr = learned_a[j];
        pr.algo = pr.proto = -1;
        rel_check(&l2, ctx, &pr);
    }
    rel_finalize(&l2, ctx);
    unsetenv("NCCL_ALGO");
    setenv("NCCL_PROTO", "Simple", 1);
    ctx = rel_init(&l2, 4, 4);
    rel_check(&l2, ctx, &(probe){ncclFuncAllReduce, 1024, 0, -1, -1, 0});
    rel_finalize(&l2, ctx);
    unsetenv("NCCL_PROTO");
    assert_int_equal(log_warn, 0);
}

/* From 2.29 broadcasts from several roots in one group are tuned as one
 * AllGather of nRanks x the largest broadcast (src/scheduler/
 * allgatherv_sched.cc at v2.29.2-1): the plugin answers with what it
 * learned for allgather at that per-rank size. A single root's broadcast
 * is still asked as Broadcast. */
static void test_grouped_broadcast_2_29(void **state)
{
    (void)state;
    loaded l = release_load(release_named("2.29.2"));
    assert_int_equal(l.version, 5);
    void *ctx = rel_init(&l, 4, 4);
    /* Four roots broadcasting 4 KiB each (the largest 4 KiB). */
    static const probe grouped = {ncclFuncAllGather, 4 * 4096, 1, NCCL_ALGO_PAT, NCCL_PROTO_SIMPLE,
                                  2};
    rel_check(&l, ctx, &grouped);
    /* One root: a Broadcast, as before. */
    static const probe single = {ncclFuncBroadcast, 1u << 20, 0, NCCL_ALGO_RING,
                                 NCCL_PROTO_LL128, 5};
    rel_check(&l, ctx, &single);
    /* AllGatherV itself never reaches the tuner; if it did, NCCL decides. */
    static const probe agv = {ncclFuncAllGatherV, 4 * 4096, 1, -1, -1, 0};
    rel_check(&l, ctx, &agv);
    rel_finalize(&l, ctx);
}

/* Every line the plugin logs carries NCCL_TUNING (checked after each test
 * by teardown); here the lines of every kind are produced. */
static void test_log_subsystem(void **state)
{
    (void)state;
    setenv("NCCL_DEBUG", "TRACE", 1);
    write_conf("allreduce,0,10,ring,simple,-1,-1,-1\nbad line\n");
    setenv("NCCL_ALGO", "Ring", 1);
    void *ctx = comm_init(4, 4);
    check_probe(ctx, &(probe){ncclFuncAllReduce, 8, 0, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 0});
    comm_finalize(ctx);
    unsetenv("NCCL_ALGO");
    setenv("AUTOINFRA_KB", "/nonexistent/kb.sqlite", 1);
    ctx = comm_init(4, 4);
    comm_finalize(ctx);
    assert_true(log_warn >= 1 && log_trace >= 1 && log_tuning_info >= 3);
    assert_int_equal(log_not_tuning, 0);
    unsetenv("NCCL_TUNER_CONFIG_FILE");
    unlink(conf_path);
}

static int teardown(void **state)
{
    (void)state;
    if (log_not_tuning) {
        fprintf(stderr, "%d log lines without NCCL_TUNING\n", log_not_tuning);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    /* NCCL resolves NCCL_TUNER_PLUGIN=autoinfra through dlopen's search
     * path, which the dynamic loader reads at start-up: run again with the
     * plugin's directory on LD_LIBRARY_PATH. */
    if (!getenv("AI_TEST_NCCL_TUNER_REEXEC")) {
        char dir[900], val[8192];
        if (plugin_dir(dir, sizeof dir) != 0) {
            fprintf(stderr, "set AUTOINFRA_BIN (ctest does) or AUTOINFRA_NCCL_TUNER_DIR\n");
            return 1;
        }
        const char *old = getenv("LD_LIBRARY_PATH");
        snprintf(val, sizeof val, "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", val, 1);
        setenv("AI_TEST_NCCL_TUNER_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        return 1;
    }
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_exports),
        T(test_learned_choices),
        T(test_untouched),
        T(test_disabled_cells),
        T(test_smaller_table),
        T(test_no_matching_fingerprint),
        T(test_fingerprint_by_size),
        T(test_fingerprint_override),
        T(test_missing_or_bad_kb),
        T(test_logging),
        T(test_odd_inputs),
        T(test_many_communicators),
        T(test_releases),
        T(test_chunk_size_v6),
        T(test_override_file),
        T(test_override_many_lines),
        T(test_user_algo_proto),
        T(test_grouped_broadcast_2_29),
        T(test_log_subsystem),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
