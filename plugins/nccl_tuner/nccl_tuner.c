/*
 * NCCL tuner plugin (ABI v5, NCCL 2.28) answering from the autoinfra
 * knowledge base. docs/nccl-tuner.md describes use, mapping and fallback.
 *
 * init() opens the KB read-only, picks one fingerprint for the communicator
 * (AUTOINFRA_FINGERPRINT, else the one measured with the same number of
 * ranks and hosts that holds the most samples), copies that fingerprint's
 * best arm of every (collective, size bucket) into a fixed table and closes
 * the KB. getCollInfo() is then a table look-up: no SQLite, no allocation,
 * no lock on NCCL's hot path.
 *
 * getCollInfo() only ever writes one cell of NCCL's cost table, and only a
 * cell NCCL offered (value >= 0): it sets the learned algorithm's cell, with
 * a protocol chosen by size, to 0.0 so NCCL's minimum search picks it. In
 * every other case the table is left exactly as NCCL filled it, which is
 * how NCCL falls back to its own choice (an error return would fail the
 * collective instead).
 */
#include "nccl_tuner_v5.h"

#include <autoinfra.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TUNER_EXPORT __attribute__((visibility("default")))

/* Collectives the plugin answers for: ai_coll values 0..4 (AI_ALLREDUCE,
 * AI_REDUCE_SCATTER, AI_ALLGATHER, AI_BROADCAST, AI_REDUCE). */
#define TUNER_NCOLL 5
_Static_assert(AI_ALLREDUCE == 0 && AI_REDUCE_SCATTER == 1 && AI_ALLGATHER == 2 &&
                   AI_BROADCAST == 3 && AI_REDUCE == 4,
               "the table is indexed by ai_coll");
/* Size buckets: index k holds per-rank payloads in [2^k, 2^(k+1)). */
#define TUNER_NBUCKET 64

/* Protocol by NCCL's nBytes (the size NCCL's own model is evaluated at):
 * below LL_MAX LL, below LL128_MAX LL128, else SIMPLE. See
 * docs/nccl-tuner.md for the reasoning. */
#define TUNER_LL_MAX ((size_t)64 << 10)
#define TUNER_LL128_MAX ((size_t)4 << 20)

typedef struct tuner_entry {
    signed char nccl_algo; /* NCCL_ALGO_*, or -1: nothing learned / no mapping */
    char algo[32];         /* autoinfra algorithm name, for the log */
} tuner_entry;

typedef struct tuner_ctx {
    ncclDebugLogger_t log;
    int trace; /* per-call decisions logged (NCCL_DEBUG=TRACE) */
    size_t nranks, nnodes;
    uint64_t comm_id;     /* NCCL's communicator hash, for the log */
    char fingerprint[17]; /* "" when nothing applies */
    int nbuckets;         /* entries with nccl_algo >= 0 */
    tuner_entry table[TUNER_NCOLL][TUNER_NBUCKET];
} tuner_ctx;

__attribute__((format(printf, 4, 5))) static void tlog(const tuner_ctx *c, ncclDebugLogLevel level,
                                                      int line, const char *fmt, ...)
{
    if (!c || !c->log)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* Lines of communicator set-up also go to NCCL's INIT subsystem (shown
     * by default at NCCL_DEBUG=INFO), per-call ones to TUNING only. */
    unsigned long flags = level == NCCL_LOG_TRACE ? NCCL_TUNING : NCCL_INIT | NCCL_TUNING;
    c->log(level, flags, __FILE__, line, "%s", buf);
}

static const char *nccl_algo_name(int a)
{
    static const char *const names[NCCL_NUM_ALGORITHMS] = {
        "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
    return (a >= 0 && a < NCCL_NUM_ALGORITHMS) ? names[a] : "?";
}

static const char *nccl_proto_name(int p)
{
    static const char *const names[NCCL_NUM_PROTOCOLS] = {"LL", "LL128", "SIMPLE"};
    return (p >= 0 && p < NCCL_NUM_PROTOCOLS) ? names[p] : "?";
}

static int name_in(const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcasecmp(name, *list) == 0)
            return 1;
    return 0;
}

/*
 * Our algorithm -> NCCL algorithm (the table in docs/nccl-tuner.md).
 * Ring-like schedules (each rank talks to neighbours, bandwidth-optimal,
 * latency linear in ranks) -> RING; tree-like ones (logarithmic depth) ->
 * TREE; for allgather / reduce_scatter the logarithmic distance-doubling
 * schedules -> PAT, NCCL's Bruck-style algorithm for exactly those two
 * collectives. NCCL 2.28 costs TREE for AllReduce only, so a tree-like
 * answer for another collective finds its cell disabled and NCCL decides.
 * -1: a name we do not know (a newer KB); leave NCCL alone.
 */
static int map_algo(ai_coll coll, const char *algo)
{
    static const char *const ring_like[] = {"ring", "chain", "weighted", "pairwise",
                                            "scatter_allgather", NULL};
    static const char *const tree_like[] = {"recursive_doubling", "rabenseifner", "reduce_bcast",
                                            "binomial", "binary_tree", "hierarchical", NULL};
    static const char *const log_gather[] = {"recursive_doubling", "recursive_halving", "bruck",
                                             NULL};
    if (coll == AI_ALLGATHER || coll == AI_REDUCE_SCATTER) {
        if (name_in(algo, log_gather))
            return NCCL_ALGO_PAT;
    }
    if (name_in(algo, ring_like))
        return NCCL_ALGO_RING;
    if (name_in(algo, tree_like))
        return NCCL_ALGO_TREE;
    return -1;
}

/* ---------------------------------------------------------------- init */

static void reset_table(tuner_ctx *c)
{
    for (int i = 0; i < TUNER_NCOLL; i++) {
        for (int k = 0; k < TUNER_NBUCKET; k++) {
            c->table[i][k].nccl_algo = -1;
            c->table[i][k].algo[0] = '\0';
        }
    }
    c->nbuckets = 0;
}

/* Pass 1: the fingerprint to use. Arms arrive ordered by fingerprint. */
typedef struct pick_state {
    size_t nranks, nnodes;
    const char *wanted; /* AUTOINFRA_FINGERPRINT or NULL */
    char cur[17];
    long cur_samples;
    int cur_match;
    char best[17];
    long best_samples;
    int wanted_seen, wanted_nranks, wanted_nhosts;
} pick_state;

static void pick_close_group(pick_state *s)
{
    if (s->cur[0] && s->cur_match && (!s->best[0] || s->cur_samples > s->best_samples)) {
        memcpy(s->best, s->cur, sizeof s->best);
        s->best_samples = s->cur_samples;
    }
}

static int pick_visit(const ai_kb_arm *arm, void *arg)
{
    pick_state *s = arg;
    if (strncmp(arm->fingerprint, s->cur, sizeof s->cur) != 0) {
        pick_close_group(s);
        snprintf(s->cur, sizeof s->cur, "%s", arm->fingerprint);
        s->cur_samples = 0;
        s->cur_match = arm->nranks >= 0 && arm->nhosts >= 0 &&
                       (size_t)arm->nranks == s->nranks && (size_t)arm->nhosts == s->nnodes;
        if (s->wanted && strcmp(s->wanted, s->cur) == 0) {
            s->wanted_seen = 1;
            s->wanted_nranks = arm->nranks;
            s->wanted_nhosts = arm->nhosts;
        }
    }
    if (arm->samples > 0)
        s->cur_samples += arm->samples;
    return 0;
}

/* Pass 2: the best arm of every bucket of the chosen fingerprint. */
static int load_visit(const ai_kb_arm *arm, void *arg)
{
    tuner_ctx *c = arg;
    if (!arm->best || arm->samples <= 0 || arm->bytes == 0 || (int)arm->coll < 0 ||
        (int)arm->coll >= TUNER_NCOLL)
        return 0;
    int k = 63 - __builtin_clzll((unsigned long long)arm->bytes);
    tuner_entry *e = &c->table[arm->coll][k];
    if (e->algo[0]) /* one best arm per bucket; keep the first */
        return 0;
    snprintf(e->algo, sizeof e->algo, "%s", arm->algo);
    e->nccl_algo = (signed char)map_algo(arm->coll, arm->algo);
    if (e->nccl_algo >= 0)
        c->nbuckets++;
    return 0;
}

static void load_kb(tuner_ctx *c)
{
    const char *path = getenv("AUTOINFRA_KB");
    if (path && !*path)
        path = NULL;
    char shown[1024];
    if (path)
        snprintf(shown, sizeof shown, "%s", path);
    else if (ai_kb_default_path(shown, sizeof shown) != AI_OK)
        snprintf(shown, sizeof shown, "(default path)");

    ai_kb *kb = NULL;
    ai_status_t st = ai_kb_open(path, 1, &kb);
    if (st != AI_OK) {
        tlog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra tuner: comm %016llx: no usable knowledge base (%s); NCCL tunes itself",
             (unsigned long long)c->comm_id, ai_last_error()[0] ? ai_last_error() : shown);
        return;
    }

    pick_state s;
    memset(&s, 0, sizeof s);
    s.nranks = c->nranks;
    s.nnodes = c->nnodes;
    s.wanted = getenv("AUTOINFRA_FINGERPRINT");
    if (s.wanted && !*s.wanted)
        s.wanted = NULL;
    st = ai_kb_foreach(kb, NULL, pick_visit, &s);
    pick_close_group(&s);

    const char *fp = NULL;
    if (st != AI_OK) {
        tlog(c, NCCL_LOG_WARN, __LINE__, "autoinfra tuner: cannot read %s (%s: %s)", shown,
             ai_strerror(st), ai_last_error());
    } else if (s.wanted && s.wanted_seen && s.wanted_nranks >= 0 && s.wanted_nhosts >= 0 &&
               (size_t)s.wanted_nranks == c->nranks && (size_t)s.wanted_nhosts == c->nnodes) {
        fp = s.wanted;
    } else {
        if (s.wanted)
            tlog(c, NCCL_LOG_INFO, __LINE__,
                 "autoinfra tuner: AUTOINFRA_FINGERPRINT=%s %s; choosing automatically", s.wanted,
                 s.wanted_seen ? "was measured with another rank/host count" : "is not in the KB");
        if (s.best[0])
            fp = s.best;
    }

    if (fp) {
        snprintf(c->fingerprint, sizeof c->fingerprint, "%s", fp);
        st = ai_kb_foreach(kb, c->fingerprint, load_visit, c);
        if (st != AI_OK) {
            tlog(c, NCCL_LOG_WARN, __LINE__, "autoinfra tuner: cannot read %s (%s: %s)", shown,
                 ai_strerror(st), ai_last_error());
            reset_table(c);
        }
    }
    ai_kb_close(kb);

    if (c->nbuckets > 0)
        tlog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra tuner: comm %016llx: %s, fingerprint %s, %d learned buckets for %zu ranks"
             " on %zu nodes",
             (unsigned long long)c->comm_id, shown, c->fingerprint, c->nbuckets, c->nranks,
             c->nnodes);
    else
        tlog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra tuner: comm %016llx: %s holds nothing for %zu ranks on %zu nodes; NCCL"
             " tunes itself",
             (unsigned long long)c->comm_id, shown, c->nranks, c->nnodes);
}

static ncclResult_t tuner_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                               ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                               ncclTunerConstants_v5_t *constants)
{
    (void)nvlDomainInfo;
    (void)constants; /* NCCL's own model constants are left as they are */
    if (!ctx)
        return ncclInvalidArgument;
    *ctx = NULL;
    tuner_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        /* Without a context every call leaves NCCL alone; not worth failing
         * the communicator for. */
        return ncclSuccess;
    }
    reset_table(c);
    c->log = logFunction;
    c->nranks = nRanks;
    c->nnodes = nNodes;
    const char *dbg = getenv("NCCL_DEBUG");
    c->trace = dbg && strcasecmp(dbg, "TRACE") == 0;
    c->comm_id = commId;
    load_kb(c);
    *ctx = c;
    return ncclSuccess;
}

/* ---------------------------------------------------------- getCollInfo */

static int coll_of(ncclFunc_t f, ai_coll *out)
{
    switch ((int)f) {
    case ncclFuncAllReduce: *out = AI_ALLREDUCE; return 1;
    case ncclFuncAllGather: *out = AI_ALLGATHER; return 1;
    case ncclFuncReduceScatter: *out = AI_REDUCE_SCATTER; return 1;
    case ncclFuncBroadcast: *out = AI_BROADCAST; return 1;
    case ncclFuncReduce: *out = AI_REDUCE; return 1;
    default: return 0;
    }
}

static ncclResult_t tuner_get_coll_info(void *ctx, ncclFunc_t collType, size_t nBytes,
                                        int numPipeOps, float **collCostTable, int numAlgo,
                                        int numProto, int regBuff, int *nChannels)
{
    (void)numPipeOps;
    (void)regBuff;
    (void)nChannels; /* our channels are TCP connections, not NCCL's CTAs: NCCL decides */
    const tuner_ctx *c = ctx;
    ai_coll coll;
    if (!c || c->nbuckets == 0 || !collCostTable || numAlgo <= 0 || numProto <= 0 ||
        !coll_of(collType, &coll))
        return ncclSuccess;

    /* NCCL's nBytes -> our per-rank payload. */
    size_t per_rank = nBytes;
    if (coll == AI_ALLGATHER || coll == AI_REDUCE_SCATTER) {
        if (c->nranks == 0)
            return ncclSuccess;
        per_rank = nBytes / c->nranks;
    }
    if (per_rank == 0)
        return ncclSuccess;
    int k = 63 - __builtin_clzll((unsigned long long)per_rank);
    const tuner_entry *e = &c->table[coll][k];
    int a = e->nccl_algo;
    if (a < 0 || a >= numAlgo)
        return ncclSuccess;

    /* Protocol preference by size; later entries are fallbacks when NCCL
     * did not offer the earlier ones for this algorithm. PAT runs SIMPLE
     * only. */
    int prefs[3], n = 0;
    if (a == NCCL_ALGO_PAT) {
        prefs[n++] = NCCL_PROTO_SIMPLE;
    } else if (nBytes < TUNER_LL_MAX) {
        prefs[n++] = NCCL_PROTO_LL;
        prefs[n++] = NCCL_PROTO_LL128;
        prefs[n++] = NCCL_PROTO_SIMPLE;
    } else if (nBytes < TUNER_LL128_MAX) {
        prefs[n++] = NCCL_PROTO_LL128;
        prefs[n++] = NCCL_PROTO_SIMPLE;
    } else {
        prefs[n++] = NCCL_PROTO_SIMPLE;
        prefs[n++] = NCCL_PROTO_LL128;
    }

    /* The table is float[numAlgo][numProto], contiguous; with NCCL's
     * numProto = NCCL_NUM_PROTOCOLS this is table[a][p]. */
    float *cells = (float *)(void *)collCostTable;
    for (int i = 0; i < n; i++) {
        int p = prefs[i];
        if (p >= numProto)
            continue;
        float *cell = &cells[(size_t)a * (size_t)numProto + (size_t)p];
        if (!(*cell >= 0.0f)) /* NCCL_ALGO_PROTO_IGNORE, any negative, NaN */
            continue;
        if (c->trace)
            tlog(c, NCCL_LOG_TRACE, __LINE__,
                 "autoinfra tuner: func %d nBytes %zu (bucket %zu B/rank, learned %s) -> %s/%s "
                 "(was %g us)",
                 (int)collType, nBytes, (size_t)1 << k, e->algo, nccl_algo_name(a),
                 nccl_proto_name(p), (double)*cell);
        *cell = 0.0f;
        return ncclSuccess;
    }
    if (c->trace)
        tlog(c, NCCL_LOG_TRACE, __LINE__,
             "autoinfra tuner: func %d nBytes %zu learned %s -> %s not offered; NCCL decides",
             (int)collType, nBytes, e->algo, nccl_algo_name(a));
    return ncclSuccess;
}

static ncclResult_t tuner_finalize(void *ctx)
{
    free(ctx);
    return ncclSuccess;
}

TUNER_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "autoinfra",
    .init = tuner_init,
    .getCollInfo = tuner_get_coll_info,
    .finalize = tuner_finalize,
};
