/*
 * NCCL tuner plugin answering from the autoinfra knowledge base, exported
 * under every tuner ABI NCCL has used since 2.21 (ncclTunerPlugin_v2 .. v6,
 * nccl_tuner_abi.h) so that the NCCL a program really loads, often older
 * than the newest (PyTorch wheels bundle their own), finds a version it
 * knows. docs/nccl-tuner.md describes use, mapping and fallback.
 *
 * One core behind all five: init() opens the KB read-only, picks one
 * fingerprint for the communicator (AUTOINFRA_FINGERPRINT, else the one
 * measured with the same number of ranks and hosts that holds the most
 * samples), copies that fingerprint's best arm of every (collective, size
 * bucket) into a fixed table, reads the optional override file
 * (NCCL_TUNER_CONFIG_FILE, the CSV format of NCCL's example tuner) and
 * closes everything. core_coll() is then a look-up: no SQLite, no
 * allocation, no lock, no system call on NCCL's launch path.
 *
 * core_coll() only ever writes one cell of NCCL's cost table, and only a
 * cell NCCL offered (value >= 0), setting it to 0.0 so NCCL's minimum
 * search picks it; in every other case the table is left exactly as NCCL
 * filled it, which is how NCCL falls back to its own choice (an error
 * return would fail the collective instead). The v2 front end, which has
 * no table, builds one of what 2.21 can safely run and turns the written
 * cell back into an algorithm and a protocol.
 */
#include "nccl_tuner_abi.h"

#include <autoinfra.h>

#include <errno.h>
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

/* Channel counts handed to NCCL are kept within 1..64 (MAXCHANNELS of
 * 2.30; older releases clamp to their own, smaller, maximum themselves). */
#define TUNER_MAX_CHANNELS 64
/* Chunk sizes below this are not handed to NCCL: it rounds the answer down
 * to the protocol's grain (up to 1920 B for LL128), and a zero chunk would
 * stall it. */
#define TUNER_MIN_CHUNK ((size_t)4096)
/* Override file: lines kept at most, and the longest line read. */
#define TUNER_MAX_RULES 4096
#define TUNER_LINE_MAX 512

typedef struct tuner_entry {
    signed char nccl_algo;  /* NCCL_ALGO_*, or -1: nothing learned / no mapping */
    signed char nccl_proto; /* NCCL_PROTO_* measured with (nccl_* arms), or -1 */
    int channels;          /* the arm's channel count, 0: none */
    size_t chunk;          /* the arm's chunk size in bytes, 0: none */
    char algo[32];         /* autoinfra algorithm name, for the log */
} tuner_entry;

/* One line of the override file. -1 in a match field: any value. */
typedef struct tuner_rule {
    int func; /* ncclFunc_t */
    size_t min_bytes, max_bytes;
    int algo, proto;
    int channels; /* -1: NCCL's */
    long nnodes, nranks;
    int pipe_ops, reg_buff;
    int line;
} tuner_rule;

typedef struct tuner_ctx {
    ncclDebugLogger_t log;
    int version; /* the tuner ABI NCCL loaded: 2..6 */
    int trace;   /* per-call decisions logged (NCCL_DEBUG=TRACE) */
    size_t nranks, nnodes;
    uint64_t comm_id;     /* NCCL's communicator hash (v5 on), for the log */
    int user_algo;        /* NCCL_ALGO set: the algorithm is the user's */
    int user_proto;       /* NCCL_PROTO set: the protocol is the user's */
    char fingerprint[17]; /* "" when nothing applies */
    int nbuckets;         /* entries with nccl_algo >= 0 */
    tuner_rule *rules;    /* override lines matching this communicator */
    int nrules, caprules;
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
    /* Every line carries NCCL's TUNING subsystem, so NCCL_DEBUG_SUBSYS=TUNING
     * shows it; lines of communicator set-up also go to INIT (shown by
     * default at NCCL_DEBUG=INFO). */
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
/*
 * Arms the NCCL profiler plugin measured are named nccl_<algorithm>_<protocol>
 * (lower case, NCCL's names: nccl_ring_ll128, nccl_nvls_tree_simple): they
 * map to that algorithm, with that protocol tried first. 0 if not such a
 * name.
 */
static int map_nccl_name(const char *algo, int *nccl_algo, int *nccl_proto)
{
    static const char *const algos[] = {"tree", "ring", "collnet_direct", "collnet_chain",
                                        "nvls", "nvls_tree", "pat"};
    static const char *const protos[] = {"ll", "ll128", "simple"};
    if (strncasecmp(algo, "nccl_", 5) != 0)
        return 0;
    const char *a = algo + 5, *us = strrchr(a, '_');
    if (!us)
        return 0;
    int ai = -1, pi = -1;
    for (int i = 0; i < NCCL_NUM_ALGORITHMS; i++)
        if (strlen(algos[i]) == (size_t)(us - a) && strncasecmp(a, algos[i], (size_t)(us - a)) == 0)
            ai = i;
    for (int i = 0; i < NCCL_NUM_PROTOCOLS; i++)
        if (strcasecmp(us + 1, protos[i]) == 0)
            pi = i;
    if (ai < 0 || pi < 0)
        return 0;
    *nccl_algo = ai;
    *nccl_proto = pi;
    return 1;
}

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
            c->table[i][k].channels = 0;
            c->table[i][k].nccl_proto = -1;
            c->table[i][k].chunk = 0;
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
    int na, np;
    if (map_nccl_name(arm->algo, &na, &np)) {
        e->nccl_algo = (signed char)na;
        e->nccl_proto = (signed char)np;
    } else {
        e->nccl_algo = (signed char)map_algo(arm->coll, arm->algo);
        e->nccl_proto = -1;
    }
    e->channels = arm->channels > 0 ? (arm->channels < TUNER_MAX_CHANNELS ? arm->channels
                                                                          : TUNER_MAX_CHANNELS)
                                    : 0;
    e->chunk = arm->chunk_bytes >= TUNER_MIN_CHUNK ? arm->chunk_bytes : 0;
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

/* ------------------------------------------------------- override file */

static int parse_long(const char *s, long lo, long hi, long *out)
{
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_size(const char *s, size_t *out)
{
    if (!*s || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int name_index(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* One CSV line -> rule; NULL on success, else what was wrong. */
static const char *parse_rule(char *text, tuner_rule *r)
{
    static const char *const funcs[] = {"broadcast", "reduce", "allgather", "reducescatter",
                                        "allreduce"};
    static const char *const algos[] = {"tree", "ring", "collnet_direct", "collnet_chain",
                                        "nvls", "nvls_tree", "pat"};
    static const char *const protos[] = {"ll", "ll128", "simple"};
    char *field[10];
    int n = 0;
    for (char *p = text;;) {
        char *comma = strchr(p, ',');
        if (n == 10)
            return "more than 10 fields";
        field[n++] = trim(p);
        if (!comma)
            break;
        *comma = '\0';
        p = comma + 1;
    }
    if (n < 8)
        return "fewer than 8 fields (collective,minbytes,maxbytes,algorithm,protocol,channels,"
               "nNodes,nRanks[,numPipeOps[,regBuff]])";
    long v;
    r->func = name_index(field[0], funcs, 5);
    if (r->func < 0 && strcasecmp(field[0], "reduce_scatter") == 0)
        r->func = ncclFuncReduceScatter;
    if (r->func < 0)
        return "unknown collective (broadcast, reduce, allgather, reducescatter, allreduce)";
    if (parse_size(field[1], &r->min_bytes) || parse_size(field[2], &r->max_bytes))
        return "minbytes / maxbytes not a byte count";
    if (r->min_bytes > r->max_bytes)
        return "minbytes above maxbytes";
    r->algo = name_index(field[3], algos, NCCL_NUM_ALGORITHMS);
    if (r->algo < 0)
        return "unknown algorithm (tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat)";
    r->proto = name_index(field[4], protos, NCCL_NUM_PROTOCOLS);
    if (r->proto < 0)
        return "unknown protocol (ll, ll128, simple)";
    if (parse_long(field[5], -1, TUNER_MAX_CHANNELS, &v) || v == 0)
        return "channels not -1 or 1..64";
    r->channels = (int)v;
    if (parse_long(field[6], -1, 1L << 30, &v) || v == 0)
        return "nNodes not -1 or a positive count";
    r->nnodes = v;
    if (parse_long(field[7], -1, 1L << 30, &v) || v == 0)
        return "nRanks not -1 or a positive count";
    r->nranks = v;
    r->pipe_ops = -1;
    r->reg_buff = -1;
    if (n > 8) {
        if (parse_long(field[8], -1, 1L << 30, &v) || v == 0)
            return "numPipeOps not -1 or a positive count";
        r->pipe_ops = (int)v;
    }
    if (n > 9) {
        if (parse_long(field[9], -1, 1, &v))
            return "regBuff not -1, 0 or 1";
        r->reg_buff = (int)v;
    }
    return NULL;
}

/* Read NCCL_TUNER_CONFIG_FILE, keeping the lines that apply to this
 * communicator's node and rank count. Bad lines are reported and skipped;
 * the rest still apply. */
static void load_rules(tuner_ctx *c)
{
    const char *path = getenv("NCCL_TUNER_CONFIG_FILE");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "r");
    if (!f) {
        tlog(c, NCCL_LOG_WARN, __LINE__, "autoinfra tuner: NCCL_TUNER_CONFIG_FILE=%s: %s", path,
             strerror(errno));
        return;
    }
    char line[TUNER_LINE_MAX + 2];
    int lineno = 0, bad = 0, total = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len && line[len - 1] != '\n' && !feof(f)) {
            /* Longer than any sensible line: skip the rest of it. */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n')
                ;
            tlog(c, NCCL_LOG_WARN, __LINE__,
                 "autoinfra tuner: %s line %d: longer than %d characters; ignored", path, lineno,
                 TUNER_LINE_MAX);
            bad++;
            continue;
        }
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        tuner_rule r;
        const char *why = parse_rule(s, &r);
        if (why) {
            tlog(c, NCCL_LOG_WARN, __LINE__, "autoinfra tuner: %s line %d: %s; line ignored", path,
                 lineno, why);
            bad++;
            continue;
        }
        total++;
        if ((r.nnodes != -1 && (size_t)r.nnodes != c->nnodes) ||
            (r.nranks != -1 && (size_t)r.nranks != c->nranks))
            continue;
        if (c->nrules == TUNER_MAX_RULES) {
            tlog(c, NCCL_LOG_WARN, __LINE__,
                 "autoinfra tuner: %s: more than %d lines apply; the rest are ignored", path,
                 TUNER_MAX_RULES);
            break;
        }
        if (c->nrules == c->caprules) {
            int cap = c->caprules ? 2 * c->caprules : 8;
            tuner_rule *grown = realloc(c->rules, (size_t)cap * sizeof *grown);
            if (!grown) {
                tlog(c, NCCL_LOG_WARN, __LINE__, "autoinfra tuner: %s: out of memory", path);
                break;
            }
            c->rules = grown;
            c->caprules = cap;
        }
        r.line = lineno;
        c->rules[c->nrules++] = r;
    }
    fclose(f);
    tlog(c, NCCL_LOG_INFO, __LINE__,
         "autoinfra tuner: comm %016llx: %s: %d override lines, %d for %zu ranks on %zu nodes%s",
         (unsigned long long)c->comm_id, path, total, c->nrules, c->nranks, c->nnodes,
         bad ? " (some lines ignored, see above)" : "");
}

/* ---------------------------------------------------------------- init */

static void note_user_settings(tuner_ctx *c)
{
    const char *algo = getenv("NCCL_ALGO");
    const char *proto = getenv("NCCL_PROTO");
    c->user_algo = algo && *algo;
    c->user_proto = proto && *proto;
    if (c->user_algo && c->user_proto)
        tlog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra tuner: NCCL_ALGO=%s and NCCL_PROTO=%s are set: the plugin leaves"
             " algorithm, protocol, channels and chunk size to NCCL%s",
             algo, proto, c->nrules ? " (NCCL_TUNER_CONFIG_FILE lines still apply)" : "");
    else if (c->user_algo)
        tlog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra tuner: NCCL_ALGO=%s is set: the plugin leaves the algorithm to NCCL and"
             " picks only the protocol%s",
             algo, c->version == 2 ? " (not under tuner v2, which cannot: nothing is set)" : "");
    else if (c->user_proto)
        tlog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra tuner: NCCL_PROTO=%s is set: the plugin leaves the protocol to NCCL and"
             " picks only the algorithm%s",
             proto, c->version == 2 ? " (not under tuner v2, which cannot: nothing is set)" : "");
}

static ncclResult_t init_common(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                ncclDebugLogger_t logFunction, int version)
{
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
    c->version = version;
    c->nranks = nRanks;
    c->nnodes = nNodes;
    const char *dbg = getenv("NCCL_DEBUG");
    c->trace = dbg && strcasecmp(dbg, "TRACE") == 0;
    c->comm_id = commId;
    load_kb(c);
    load_rules(c);
    note_user_settings(c);
    *ctx = c;
    return ncclSuccess;
}

static ncclResult_t tuner_finalize(void *ctx)
{
    tuner_ctx *c = ctx;
    if (c)
        free(c->rules);
    free(c);
    return ncclSuccess;
}

/* --------------------------------------------------------------- core */

static int coll_of(int f, ai_coll *out)
{
    switch (f) {
    case ncclFuncAllReduce: *out = AI_ALLREDUCE; return 1;
    case ncclFuncAllGather: *out = AI_ALLGATHER; return 1;
    case ncclFuncReduceScatter: *out = AI_REDUCE_SCATTER; return 1;
    case ncclFuncBroadcast: *out = AI_BROADCAST; return 1;
    case ncclFuncReduce: *out = AI_REDUCE; return 1;
    default: return 0;
    }
}

/* The KB entry for NCCL's (func, nBytes), or NULL. NCCL's nBytes is the
 * whole vector for AllReduce / Broadcast / Reduce and nRanks x the per-rank
 * block for AllGather / ReduceScatter (ncclFuncMaxSendRecvCount); the KB
 * holds per-rank payloads. From 2.29 a group of broadcasts from several
 * roots is asked as one AllGather of nRanks x the largest broadcast, so it
 * lands in the allgather bucket of that broadcast's size. */
static const tuner_entry *lookup(const tuner_ctx *c, int func, size_t nBytes, int *bucket)
{
    ai_coll coll;
    if (c->nbuckets == 0 || !coll_of(func, &coll))
        return NULL;
    size_t per_rank = nBytes;
    if (coll == AI_ALLGATHER || coll == AI_REDUCE_SCATTER) {
        if (c->nranks == 0)
            return NULL;
        per_rank = nBytes / c->nranks;
    }
    if (per_rank == 0)
        return NULL;
    int k = 63 - __builtin_clzll((unsigned long long)per_rank);
    const tuner_entry *e = &c->table[coll][k];
    if (e->nccl_algo < 0)
        return NULL;
    *bucket = k;
    return e;
}

/* The first override line for (func, nBytes, numPipeOps, regBuff).
 * regBuff < 0 (not passed by v2 / v3) matches only lines with regBuff -1.
 * any_ops_buf: ignore numPipeOps and regBuff (any line covering the size). */
static const tuner_rule *match_rule(const tuner_ctx *c, int func, size_t nBytes, int numPipeOps,
                                    int regBuff, int any_ops_buf)
{
    for (int i = 0; i < c->nrules; i++) {
        const tuner_rule *r = &c->rules[i];
        if (r->func != func || nBytes < r->min_bytes || nBytes > r->max_bytes)
            continue;
        if (any_ops_buf ||
            ((r->pipe_ops == -1 || r->pipe_ops == numPipeOps) &&
             (r->reg_buff == -1 || (regBuff >= 0 && r->reg_buff == (regBuff != 0)))))
            return r;
    }
    return NULL;
}

static int offered(const float *cells, int numProto, int a, int p)
{
    return cells[(size_t)a * (size_t)numProto + (size_t)p] >= 0.0f; /* not IGNORE, not NaN */
}

/*
 * The shared decision. cells is NCCL's float[numAlgo][numProto] cost table
 * (row = algorithm). regBuff < 0: not known (v2, v3). Writes at most one
 * offered cell, to 0.0, and *nChannels when a channel count is known for
 * what was chosen.
 */
static void core_coll(const tuner_ctx *c, int func, size_t nBytes, int numPipeOps, int regBuff,
                      float *cells, int numAlgo, int numProto, int *nChannels)
{
    if (!c || !cells || numAlgo <= 0 || numProto <= 0)
        return;
    if (numAlgo > NCCL_NUM_ALGORITHMS)
        numAlgo = NCCL_NUM_ALGORITHMS;

    /* 1. The user's override file, first matching line. */
    const tuner_rule *r = match_rule(c, func, nBytes, numPipeOps, regBuff, 0);
    if (r) {
        if (r->algo < numAlgo && r->proto < numProto && offered(cells, numProto, r->algo, r->proto)) {
            cells[(size_t)r->algo * (size_t)numProto + (size_t)r->proto] = 0.0f;
            if (nChannels && r->channels > 0)
                *nChannels = r->channels;
            if (c->trace)
                tlog(c, NCCL_LOG_TRACE, __LINE__,
                     "autoinfra tuner: func %d nBytes %zu: override line %d -> %s/%s channels %d",
                     func, nBytes, r->line, nccl_algo_name(r->algo), nccl_proto_name(r->proto),
                     r->channels);
        } else if (c->trace) {
            tlog(c, NCCL_LOG_TRACE, __LINE__,
                 "autoinfra tuner: func %d nBytes %zu: override line %d asks for %s/%s, which NCCL"
                 " does not offer here; NCCL decides",
                 func, nBytes, r->line, nccl_algo_name(r->algo), nccl_proto_name(r->proto));
        }
        return;
    }

    /* 2. The knowledge base. */
    int k;
    const tuner_entry *e = lookup(c, func, nBytes, &k);
    if (!e || (c->user_algo && c->user_proto))
        return;

    int a = e->nccl_algo;
    if (c->user_algo) {
        /* NCCL's own algorithm: the row of its cheapest offered cell. */
        float best = 0.0f;
        a = -1;
        for (int i = 0; i < numAlgo; i++)
            for (int p = 0; p < numProto; p++) {
                float v = cells[(size_t)i * (size_t)numProto + (size_t)p];
                if (v >= 0.0f && (a < 0 || v < best)) {
                    best = v;
                    a = i;
                }
            }
    }
    if (a < 0 || a >= numAlgo)
        return;

    int prefs[4], n = 0;
    if (!c->user_proto && a == e->nccl_algo && e->nccl_proto >= 0)
        prefs[n++] = e->nccl_proto; /* measured under NCCL with this protocol */
    if (c->user_proto) {
        /* NCCL's protocol for that algorithm: the cheapest offered one. */
        int bp = -1;
        for (int p = 0; p < numProto; p++)
            if (offered(cells, numProto, a, p) &&
                (bp < 0 || cells[(size_t)a * (size_t)numProto + (size_t)p] <
                               cells[(size_t)a * (size_t)numProto + (size_t)bp]))
                bp = p;
        if (bp >= 0)
            prefs[n++] = bp;
    } else if (a == NCCL_ALGO_PAT) {
        prefs[n++] = NCCL_PROTO_SIMPLE; /* the only protocol PAT runs with */
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

    for (int i = 0; i < n; i++) {
        int p = prefs[i];
        if (p >= numProto || !offered(cells, numProto, a, p))
            continue;
        float *cell = &cells[(size_t)a * (size_t)numProto + (size_t)p];
        /* The learned channel count belongs to the learned algorithm. */
        int ch = a == e->nccl_algo ? e->channels : 0;
        if (c->trace)
            tlog(c, NCCL_LOG_TRACE, __LINE__,
                 "autoinfra tuner: func %d nBytes %zu (bucket %zu B/rank, learned %s) -> %s/%s"
                 " channels %d (was %g us)",
                 func, nBytes, (size_t)1 << k, e->algo, nccl_algo_name(a), nccl_proto_name(p), ch,
                 (double)*cell);
        *cell = 0.0f;
        if (nChannels && ch > 0)
            *nChannels = ch;
        return;
    }
    if (c->trace)
        tlog(c, NCCL_LOG_TRACE, __LINE__,
             "autoinfra tuner: func %d nBytes %zu learned %s -> %s not offered; NCCL decides", func,
             nBytes, e->algo, nccl_algo_name(a));
}

/* ------------------------------------------------------ v3 .. v6 front */

static ncclResult_t tuner_get_coll_info(void *ctx, ncclFunc_t collType, size_t nBytes,
                                        int numPipeOps, float **collCostTable, int numAlgo,
                                        int numProto, int regBuff, int *nChannels)
{
    /* The table is a contiguous float[numAlgo][numProto] passed as float **. */
    core_coll(ctx, (int)collType, nBytes, numPipeOps, regBuff, (float *)(void *)collCostTable,
              numAlgo, numProto, nChannels);
    return ncclSuccess;
}

static ncclResult_t tuner_get_coll_info_v3(void *ctx, ncclFunc_t collType, size_t nBytes,
                                           int numPipeOps, float **collCostTable, int numAlgo,
                                           int numProto, int *nChannels)
{
    return tuner_get_coll_info(ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto,
                               -1, nChannels);
}

/* v6: the learned chunk size, when NCCL runs the algorithm learned for this
 * size (nBytes is the part NCCL is scheduling, looked up like getCollInfo's;
 * an override line for it leaves the chunk to NCCL). */
static ncclResult_t tuner_get_chunk_size(void *ctx, ncclFunc_t collType, size_t nBytes, int algo,
                                         int proto, int nChannels, size_t *chunkSize)
{
    const tuner_ctx *c = ctx;
    if (!c || !chunkSize || c->user_algo || c->user_proto)
        return ncclSuccess;
    if (match_rule(c, (int)collType, nBytes, 0, -1, 1))
        return ncclSuccess;
    int k;
    const tuner_entry *e = lookup(c, (int)collType, nBytes, &k);
    if (!e || e->chunk == 0 || e->nccl_algo != algo)
        return ncclSuccess;
    if (c->trace)
        tlog(c, NCCL_LOG_TRACE, __LINE__,
             "autoinfra tuner: func %d nBytes %zu %s/%s %d channels: chunk %zu -> %zu B",
             (int)collType, nBytes, nccl_algo_name(algo), nccl_proto_name(proto), nChannels,
             *chunkSize, e->chunk);
    *chunkSize = e->chunk;
    return ncclSuccess;
}

static ncclResult_t tuner_init_v5(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                  ncclDebugLogger_t logFunction,
                                  ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                                  ncclTunerConstants_v5_t *constants)
{
    (void)nvlDomainInfo;
    (void)constants; /* NCCL's own model constants are left as they are */
    return init_common(ctx, commId, nRanks, nNodes, logFunction, 5);
}

static ncclResult_t tuner_init_v6(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                                  ncclDebugLogger_t logFunction,
                                  ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                                  ncclTunerConstants_v5_t *constants)
{
    (void)nvlDomainInfo;
    (void)constants;
    return init_common(ctx, commId, nRanks, nNodes, logFunction, 6);
}

static ncclResult_t tuner_init_v4(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                                  void **context)
{
    return init_common(context, 0, nRanks, nNodes, logFunction, 4);
}

static ncclResult_t tuner_init_v3(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                                  void **context)
{
    return init_common(context, 0, nRanks, nNodes, logFunction, 3);
}

/* ------------------------------------------------------------ v2 front */

static ncclResult_t tuner_init_v2(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                                  void **context)
{
    return init_common(context, 0, nRanks, nNodes, logFunction, 2);
}

/*
 * 2.21 runs what a v2 plugin names without checking it against what the
 * platform enables or what NCCL_ALGO / NCCL_PROTO allow. So the core is
 * given a table of only what 2.21 runs everywhere: RING with LL and
 * SIMPLE for the five collectives, TREE with LL and SIMPLE for AllReduce,
 * and (for an override line only, the KB never asks for them) CollNet /
 * NVLS with SIMPLE for AllReduce when NCCL says they are supported. LL128
 * is never offered: whether 2.21 enabled it on this machine is not known
 * here. With NCCL_ALGO or NCCL_PROTO set nothing is answered.
 */
static ncclResult_t tuner_get_coll_info_v2(void *ctx, ncclFunc_t collType, size_t nBytes,
                                           int collNetSupport, int nvlsSupport, int numPipeOps,
                                           int *algorithm, int *protocol, int *nChannels)
{
    const tuner_ctx *c = ctx;
    ai_coll coll;
    if (!c || !algorithm || !protocol || c->user_algo || c->user_proto ||
        !coll_of((int)collType, &coll))
        return ncclSuccess;
    float t[NCCL_NUM_ALGORITHMS_2_21][NCCL_NUM_PROTOCOLS];
    for (int a = 0; a < NCCL_NUM_ALGORITHMS_2_21; a++)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
            t[a][p] = (float)NCCL_ALGO_PROTO_IGNORE;
    t[NCCL_ALGO_RING][NCCL_PROTO_LL] = t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 1.0f;
    if (coll == AI_ALLREDUCE) {
        t[NCCL_ALGO_TREE][NCCL_PROTO_LL] = t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = 1.0f;
        if (collNetSupport == 1)
            t[NCCL_ALGO_COLLNET_DIRECT][NCCL_PROTO_SIMPLE] =
                t[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] = 1.0f;
        if (nvlsSupport == 1)
            t[NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] = t[NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] = 1.0f;
    }
    int nch = 0;
    core_coll(c, (int)collType, nBytes, numPipeOps, -1, &t[0][0], NCCL_NUM_ALGORITHMS_2_21,
              NCCL_NUM_PROTOCOLS, &nch);
    for (int a = 0; a < NCCL_NUM_ALGORITHMS_2_21; a++)
        for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
            if (t[a][p] == 0.0f) {
                *algorithm = a;
                *protocol = p;
                if (nChannels && nch > 0)
                    *nChannels = nch;
            }
    return ncclSuccess;
}

/* ------------------------------------------------------------- exports */

TUNER_EXPORT const ncclTuner_v2_t ncclTunerPlugin_v2 = {
    .name = "autoinfra",
    .init = tuner_init_v2,
    .getCollInfo = tuner_get_coll_info_v2,
    .destroy = tuner_finalize,
};

TUNER_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {
    .name = "autoinfra",
    .init = tuner_init_v3,
    .getCollInfo = tuner_get_coll_info_v3,
    .destroy = tuner_finalize,
};

TUNER_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {
    .name = "autoinfra",
    .init = tuner_init_v4,
    .getCollInfo = tuner_get_coll_info,
    .destroy = tuner_finalize,
};

TUNER_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {
    .name = "autoinfra",
    .init = tuner_init_v5,
    .getCollInfo = tuner_get_coll_info,
    .finalize = tuner_finalize,
};

TUNER_EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {
    .name = "autoinfra",
    .init = tuner_init_v6,
    .getCollInfo = tuner_get_coll_info,
    .finalize = tuner_finalize,
    .getChunkSize = tuner_get_chunk_size,
};
