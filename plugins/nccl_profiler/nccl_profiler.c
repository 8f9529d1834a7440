/*
 * NCCL profiler plugin (ABI v4, v5, v6: NCCL 2.27 to 2.30) that times each
 * collective on the GPU and writes the timings, per communicator and rank,
 * as a knowledge-base JSON export that `autoinfra kb import` merges into
 * the KB the tuner plugin (plugins/nccl_tuner) reads. docs/nccl-tuner.md,
 * "Profiler plugin", describes use and limits.
 *
 * It asks NCCL for Coll and KernelCh events only. A collective's time is
 * the span from the earliest kernel start to the latest kernel stop over
 * the channels it ran on (GPU globaltimer, reported through the KernelCh
 * events NCCL emits once per channel), so host-side queueing is not in it.
 * A collective counts once its Coll event was stopped (NCCL: "enqueued")
 * and all coll.nChannels kernel channels have stopped. Timings are kept
 * per (collective, per-rank size bucket, NCCL algorithm, protocol,
 * channels) in memory; the file is written by finalize, off NCCL's path.
 */
#include "nccl_profiler_abi.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define PROF_EXPORT __attribute__((visibility("default")))

/* Distinct (collective, bucket, algorithm, protocol, channels) kept. */
#define PROF_MAX_STATS 4096

static const char *const coll_names[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast",
                                         "Reduce"};
/* KB names, indexed like coll_names (ai_coll order). */
static const char *const kb_coll_names[] = {"allreduce", "reduce_scatter", "allgather",
                                            "broadcast", "reduce"};
#define PROF_NCOLL 5
static const char *const algo_names[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN",
                                         "NVLS", "NVLS_TREE", "PAT"};
static const char *const proto_names[] = {"LL", "LL128", "SIMPLE"};

enum { KIND_COLL = 0x636f6c6c, KIND_KCH = 0x6b636800 };

typedef struct prof_ctx prof_ctx;

typedef struct prof_coll {
    int kind; /* KIND_COLL */
    prof_ctx *ctx;
    struct prof_coll *next; /* free list */
    int live;
    int coll, algo, proto, nch;
    size_t bytes; /* per rank */
    int expected, done, stopped, timed;
    uint64_t t0, t1; /* ns, GPU globaltimer */
} prof_coll;

typedef struct prof_kch {
    int kind; /* KIND_KCH */
    prof_coll *coll;
    uint64_t start, stop;
    int has_stop;
} prof_kch;

typedef struct prof_stat {
    int coll, algo, proto, nch;
    size_t bucket; /* lower edge, power of two */
    long n;
    double mean, m2; /* of the time in us (Welford) */
} prof_stat;

struct prof_ctx {
    pthread_mutex_t mu;
    ncclDebugLogger_t log;
    int version;
    uint64_t comm_hash;
    int nnodes, nranks, rank;
    char dir[1024]; /* "" : nothing written */
    prof_coll *free_list;
    prof_coll **all; /* every record, freed by finalize */
    size_t nall, capall;
    prof_stat *stats;
    size_t nstats, capstats;
    long untimed, dropped_stats, timed;
};

__attribute__((format(printf, 4, 5))) static void plog(const prof_ctx *c, ncclDebugLogLevel level,
                                                      int line, const char *fmt, ...)
{
    if (!c || !c->log)
        return;
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->log(level, NCCL_INIT | NCCL_PROFILE_SUBSYS | NCCL_TUNING, __FILE__, line, "%s", buf);
}

static int index_of(const char *s, const char *const *names, int n)
{
    if (!s)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* ncclDatatypeToString's names. */
static size_t type_size(const char *t)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {{"ncclInt8", 1},     {"ncclUint8", 1},      {"ncclInt32", 4},
                 {"ncclUint32", 4},   {"ncclInt64", 8},      {"ncclUint64", 8},
                 {"ncclFloat16", 2},  {"ncclFloat32", 4},    {"ncclFloat64", 8},
                 {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};
    if (!t)
        return 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(t, types[i].name) == 0)
            return types[i].size;
    return 0;
}

/* ---------------------------------------------------------------- init */

static ncclResult_t init_common(void **context, int *mask, uint64_t commHash, int nNodes,
                                int nranks, int rank, ncclDebugLogger_t logfn, int version)
{
    if (!context)
        return ncclInvalidArgument;
    *context = NULL;
    const char *dir = getenv("AUTOINFRA_NCCL_PROFILE_DIR");
    if (!dir || !*dir) {
        /* Nothing to write to: ask NCCL for no events at all. */
        if (mask)
            *mask = 0;
        return ncclSuccess;
    }
    prof_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        if (mask)
            *mask = 0;
        return ncclSuccess;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->log = logfn;
    c->version = version;
    c->comm_hash = commHash;
    c->nnodes = nNodes;
    c->nranks = nranks;
    c->rank = rank;
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    if (access(dir, W_OK) != 0)
        plog(c, NCCL_LOG_WARN, __LINE__,
             "autoinfra profiler: AUTOINFRA_NCCL_PROFILE_DIR=%s is not a writable directory (%s);"
             " timings of comm %016llx will be lost",
             dir, strerror(errno), (unsigned long long)commHash);
    /* NCCL keeps one mask for the process; every communicator sets the same. */
    if (mask)
        *mask = NCCL_PROFILE_COLL | NCCL_PROFILE_KERNEL_CH;
    plog(c, NCCL_LOG_INFO, __LINE__,
         "autoinfra profiler (v%d): comm %016llx rank %d of %d on %d nodes: timing collectives"
         " into %s",
         version, (unsigned long long)commHash, rank, nranks, nNodes, dir);
    *context = c;
    return ncclSuccess;
}

/* ------------------------------------------------------------- events */

static prof_coll *coll_alloc(prof_ctx *c)
{
    prof_coll *r = c->free_list;
    if (r) {
        c->free_list = r->next;
        return r;
    }
    if (c->nall == c->capall) {
        size_t cap = c->capall ? 2 * c->capall : 64;
        prof_coll **grown = realloc(c->all, cap * sizeof *grown);
        if (!grown)
            return NULL;
        c->all = grown;
        c->capall = cap;
    }
    r = calloc(1, sizeof *r);
    if (r)
        c->all[c->nall++] = r;
    return r;
}

static void add_stat(prof_ctx *c, const prof_coll *r, double us)
{
    size_t bucket = (size_t)1 << (63 - __builtin_clzll((unsigned long long)r->bytes));
    prof_stat *s = NULL;
    for (size_t i = 0; i < c->nstats; i++) {
        prof_stat *t = &c->stats[i];
        if (t->coll == r->coll && t->bucket == bucket && t->algo == r->algo &&
            t->proto == r->proto && t->nch == r->nch) {
            s = t;
            break;
        }
    }
    if (!s) {
        if (c->nstats == PROF_MAX_STATS) {
            c->dropped_stats++;
            return;
        }
        if (c->nstats == c->capstats) {
            size_t cap = c->capstats ? 2 * c->capstats : 32;
            prof_stat *grown = realloc(c->stats, cap * sizeof *grown);
            if (!grown) {
                c->dropped_stats++;
                return;
            }
            c->stats = grown;
            c->capstats = cap;
        }
        s = &c->stats[c->nstats++];
        memset(s, 0, sizeof *s);
        s->coll = r->coll;
        s->bucket = bucket;
        s->algo = r->algo;
        s->proto = r->proto;
        s->nch = r->nch;
    }
    s->n++;
    double d = us - s->mean;
    s->mean += d / (double)s->n;
    s->m2 += d * (us - s->mean);
    c->timed++;
}

/* Called with c->mu held. */
static void coll_maybe_done(prof_ctx *c, prof_coll *r)
{
    if (!r->live || !r->stopped || r->done < r->expected)
        return;
    if (r->timed && r->t1 > r->t0)
        add_stat(c, r, (double)(r->t1 - r->t0) / 1000.0);
    else
        c->untimed++;
    r->live = 0;
    r->next = c->free_list;
    c->free_list = r;
}

static void start_coll(prof_ctx *c, void **eHandle, const ncclProfilerColl_v4_t *d)
{
    int coll = index_of(d->func, coll_names, PROF_NCOLL);
    int algo = index_of(d->algo, algo_names, (int)(sizeof algo_names / sizeof algo_names[0]));
    int proto = index_of(d->proto, proto_names, (int)(sizeof proto_names / sizeof proto_names[0]));
    size_t bytes = d->count * type_size(d->datatype);
    if (coll < 0 || algo < 0 || proto < 0 || bytes == 0 || d->nChannels == 0)
        return; /* not a collective we time: no handle, NCCL sends nothing more for it */
    pthread_mutex_lock(&c->mu);
    prof_coll *r = coll_alloc(c);
    if (r) {
        r->kind = KIND_COLL;
        r->ctx = c;
        r->live = 1;
        r->coll = coll;
        r->algo = algo;
        r->proto = proto;
        r->nch = d->nChannels;
        r->bytes = bytes;
        r->expected = d->nChannels;
        r->done = r->stopped = r->timed = 0;
        r->t0 = r->t1 = 0;
        *eHandle = r;
    }
    pthread_mutex_unlock(&c->mu);
}

static void start_kch(void **eHandle, void *parent, const ncclProfilerKernelCh_t *d)
{
    prof_coll *r = parent;
    if (!r || r->kind != KIND_COLL)
        return;
    prof_kch *k = malloc(sizeof *k);
    if (!k)
        return;
    k->kind = KIND_KCH;
    k->coll = r;
    k->start = d->pTimer;
    k->stop = 0;
    k->has_stop = 0;
    *eHandle = k;
}

static ncclResult_t start_common(void *context, void **eHandle, uint64_t type, void *parentObj,
                                 const ncclProfilerColl_v4_t *coll,
                                 const ncclProfilerKernelCh_t *kch)
{
    if (!eHandle)
        return ncclSuccess;
    *eHandle = NULL;
    prof_ctx *c = context;
    if (!c)
        return ncclSuccess;
    if (type == NCCL_PROFILE_COLL)
        start_coll(c, eHandle, coll);
    else if (type == NCCL_PROFILE_KERNEL_CH)
        start_kch(eHandle, parentObj, kch);
    return ncclSuccess;
}

static ncclResult_t prof_start_v4(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *d)
{
    if (!d)
        return ncclSuccess;
    return start_common(context, eHandle, d->type, d->parentObj, &d->coll, &d->kernelCh);
}

static ncclResult_t prof_start_v5(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *d)
{
    if (!d)
        return ncclSuccess;
    return start_common(context, eHandle, d->type, d->parentObj, &d->coll.base, &d->kernelCh);
}

static ncclResult_t prof_record(void *eHandle, ncclProfilerEventState_t eState,
                                ncclProfilerEventStateArgs_v4_t *args)
{
    prof_kch *k = eHandle;
    if (!k || k->kind != KIND_KCH || eState != NCCL_PROFILER_KERNEL_CH_STOP || !args)
        return ncclSuccess;
    k->stop = args->kernelCh.pTimer;
    k->has_stop = 1;
    return ncclSuccess;
}

static ncclResult_t prof_stop(void *eHandle)
{
    if (!eHandle)
        return ncclSuccess;
    int kind = *(const int *)eHandle;
    if (kind == KIND_COLL) {
        prof_coll *r = eHandle;
        prof_ctx *c = r->ctx;
        pthread_mutex_lock(&c->mu);
        r->stopped = 1;
        coll_maybe_done(c, r);
        pthread_mutex_unlock(&c->mu);
    } else if (kind == KIND_KCH) {
        prof_kch *k = eHandle;
        prof_coll *r = k->coll;
        prof_ctx *c = r->ctx;
        pthread_mutex_lock(&c->mu);
        if (r->live) {
            if (k->has_stop && k->stop > k->start) {
                if (!r->timed || k->start < r->t0)
                    r->t0 = k->start;
                if (!r->timed || k->stop > r->t1)
                    r->t1 = k->stop;
                r->timed = 1;
            }
            r->done++;
            coll_maybe_done(c, r);
        }
        pthread_mutex_unlock(&c->mu);
        free(k);
    }
    return ncclSuccess;
}

/* ------------------------------------------------------------ finalize */

/* A fingerprint id for NCCL measurements of one job shape, so runs of the
 * same shape accumulate under one id: FNV-1a of "nccl:<ranks>:<nodes>". */
static uint64_t shape_id(int nranks, int nnodes)
{
    char key[64];
    int n = snprintf(key, sizeof key, "nccl:%d:%d", nranks, nnodes);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (unsigned char)key[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int write_export(prof_ctx *c, char *path, size_t len)
{
    uint64_t fp = shape_id(c->nranks, c->nnodes);
    char tmp[1200];
    snprintf(path, len, "%s/nccl-%016llx-r%d-%016llx.json", c->dir, (unsigned long long)fp,
             c->rank, (unsigned long long)c->comm_hash);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\"format\": \"autoinfra-kb\", \"version\": 1, \"fingerprints\": [\n"
            " {\"id\": \"%016llx\", \"nranks\": %d, \"nhosts\": %d,\n"
            "  \"description\": \"NCCL, %d ranks, %d nodes, timed by the autoinfra profiler"
            " plugin (rank %d)\",\n  \"arms\": [",
            (unsigned long long)fp, c->nranks, c->nnodes, c->nranks, c->nnodes, c->rank);
    for (size_t i = 0; i < c->nstats; i++) {
        const prof_stat *s = &c->stats[i];
        double sd_mean = s->n > 1 ? sqrt(s->m2 / (double)(s->n - 1) / (double)s->n) : 0.0;
        char algo[48];
        snprintf(algo, sizeof algo, "nccl_%s_%s", algo_names[s->algo], proto_names[s->proto]);
        for (char *p = algo; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        fprintf(f,
                "%s\n   {\"coll\": \"%s\", \"bytes\": %zu, \"algo\": \"%s\", \"channels\": %d,"
                " \"samples\": %ld, \"mean_us\": %.6g, \"std_us\": %.6g}",
                i ? "," : "", kb_coll_names[s->coll], s->bucket, algo, s->nch, s->n,
                s->mean > 0 ? s->mean : 1e-3, sd_mean);
    }
    fprintf(f, "\n  ]}\n]}\n");
    int ok = !ferror(f);
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static ncclResult_t prof_finalize(void *context)
{
    prof_ctx *c = context;
    if (!c)
        return ncclSuccess;
    pthread_mutex_lock(&c->mu);
    long inflight = 0;
    for (size_t i = 0; i < c->nall; i++)
        inflight += c->all[i]->live;
    if (c->nstats > 0) {
        char path[1200];
        if (write_export(c, path, sizeof path) == 0)
            plog(c, NCCL_LOG_INFO, __LINE__,
                 "autoinfra profiler: comm %016llx rank %d: %ld collectives timed in %zu arms ->"
                 " %s (merge with: autoinfra kb import %s)",
                 (unsigned long long)c->comm_hash, c->rank, c->timed, c->nstats, path, path);
        else
            plog(c, NCCL_LOG_WARN, __LINE__, "autoinfra profiler: cannot write %s: %s", path,
                 strerror(errno));
    }
    if (c->untimed || inflight || c->dropped_stats)
        plog(c, NCCL_LOG_INFO, __LINE__,
             "autoinfra profiler: comm %016llx rank %d: %ld collectives without kernel timing,"
             " %ld unfinished at finalize, %ld beyond %d arms",
             (unsigned long long)c->comm_hash, c->rank, c->untimed, inflight, c->dropped_stats,
             PROF_MAX_STATS);
    for (size_t i = 0; i < c->nall; i++)
        free(c->all[i]);
    free(c->all);
    free(c->stats);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return ncclSuccess;
}

/* ------------------------------------------------------------- exports */

static ncclResult_t prof_init_v4(void **context, int *eActivationMask, const char *commName,
                                 uint64_t commHash, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn)
{
    (void)commName;
    return init_common(context, eActivationMask, commHash, nNodes, nranks, rank, logfn, 4);
}

static ncclResult_t prof_init_v5(void **context, uint64_t commId, int *eActivationMask,
                                 const char *commName, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn)
{
    (void)commName;
    return init_common(context, eActivationMask, commId, nNodes, nranks, rank, logfn, 5);
}

static ncclResult_t prof_init_v6(void **context, uint64_t commId, int *eActivationMask,
                                 const char *commName, int nNodes, int nranks, int rank,
                                 ncclDebugLogger_t logfn)
{
    (void)commName;
    return init_common(context, eActivationMask, commId, nNodes, nranks, rank, logfn, 6);
}

PROF_EXPORT const ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "autoinfra",
    .init = prof_init_v4,
    .startEvent = prof_start_v4,
    .stopEvent = prof_stop,
    .recordEventState = prof_record,
    .finalize = prof_finalize,
};

PROF_EXPORT const ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "autoinfra",
    .init = prof_init_v5,
    .startEvent = prof_start_v5,
    .stopEvent = prof_stop,
    .recordEventState = prof_record,
    .finalize = prof_finalize,
};

PROF_EXPORT const ncclProfiler_v6_t ncclProfiler_v6 = {
    .name = "autoinfra",
    .init = prof_init_v6,
    .startEvent = prof_start_v5, /* the v6 descriptor is v5's for Coll / KernelCh */
    .stopEvent = prof_stop,
    .recordEventState = prof_record,
    .finalize = prof_finalize,
};
