/*
 * An MPICH 4.0 collective selection (CSEL) JSON file from the knowledge
 * base (export.h has what the writers share).
 *
 * Sources of the facts used here:
 *  - MPICH grammar: src/mpi/coll/src/csel.c (parse_json_tree, MPIR_Csel_search)
 *    and the keys libmpich 4.0.2 accepts: nested objects whose keys are
 *    tried in order ("collective=", "comm_type=intra|inter", "comm_size<=N",
 *    "avg_msg_size<=N", "total_msg_size<=N", "count<pow2", "is_commutative=",
 *    "is_op_built_in=", "is_sendbuf_inplace=", "comm_hierarchy=", and only
 *    the "...=any" spellings comm_size, avg_msg_size, total_msg_size, count,
 *    comm_hierarchy); a leaf is {"algorithm=NAME": {}}. Numbers are C ints.
 *    The file replaces MPICH's built-in tree, so every collective MPICH can
 *    call needs a leaf for every call (a search without one asserts).
 *  - MPICH message sizes (csel.c): avg_msg_size = type size x count for
 *    allreduce, bcast, reduce, and x sendcount for alltoall (per
 *    destination); total_msg_size = the whole vector for allgather
 *    (recvcount x size), reduce_scatter and reduce_scatter_block.
 *  - MPICH algorithm names: the "algorithm=MPIR_..." strings of libmpich
 *    4.0.2; preconditions from its own selection table and CVAR fallback
 *    checks ("... cannot be applied").
 */
#include "tune/export/export.h"
#include "util/util.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Preconditions are written as the branches under which an algorithm may
 * not run: those go to the next candidate (or the fallback). */
typedef struct {
    ai_coll coll;
    const char *ours;
    const char *target; /* "reduce_scatter_block" or NULL: the collective's own */
    const char *name;
    const char *unless[2];
    int pow2;
} mpich_map;

static const mpich_map mpich_table[] = {
    {AI_ALLREDUCE, "recursive_doubling", NULL, "MPIR_Allreduce_intra_recursive_doubling", {0}, 0},
    /* Split by count: user ops may come with derived types (MPICH keeps
     * them on recursive doubling); needs count >= the power of two. */
    {AI_ALLREDUCE, "rabenseifner", NULL, "MPIR_Allreduce_intra_reduce_scatter_allgather",
     {"is_op_built_in=no", "count<pow2"}, 0},
    {AI_ALLREDUCE, "hierarchical", NULL, "MPIR_Allreduce_intra_smp", {"comm_hierarchy=flat"}, 0},
    /* MPICH's own algorithms, timed on the cluster by bench/compare and
     * imported with bench/peer-to-kb.py --system mpich ("mpich:" + the
     * MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM value). */
    {AI_ALLREDUCE, "mpich:recursive_doubling", NULL, "MPIR_Allreduce_intra_recursive_doubling",
     {0}, 0},
    {AI_ALLREDUCE, "mpich:reduce_scatter_allgather", NULL,
     "MPIR_Allreduce_intra_reduce_scatter_allgather", {"is_op_built_in=no", "count<pow2"}, 0},
    {AI_ALLREDUCE, "mpich:nb", NULL, "MPIR_Allreduce_allcomm_nb", {0}, 0},
    {AI_ALLREDUCE, "mpich:smp", NULL, "MPIR_Allreduce_intra_smp", {"comm_hierarchy=flat"}, 0},
    {AI_REDUCE_SCATTER, "recursive_halving", NULL, "MPIR_Reduce_scatter_intra_recursive_halving",
     {0}, 0},
    {AI_REDUCE_SCATTER, "pairwise", NULL, "MPIR_Reduce_scatter_intra_pairwise", {0}, 0},
    {AI_REDUCE_SCATTER, "recursive_halving", "reduce_scatter_block",
     "MPIR_Reduce_scatter_block_intra_recursive_halving", {0}, 0},
    {AI_REDUCE_SCATTER, "pairwise", "reduce_scatter_block",
     "MPIR_Reduce_scatter_block_intra_pairwise", {0}, 0},
    {AI_ALLGATHER, "ring", NULL, "MPIR_Allgather_intra_ring", {0}, 0},
    {AI_ALLGATHER, "recursive_doubling", NULL, "MPIR_Allgather_intra_recursive_doubling", {0}, 1},
    {AI_ALLGATHER, "bruck", NULL, "MPIR_Allgather_intra_brucks", {0}, 0},
    {AI_BROADCAST, "binomial", NULL, "MPIR_Bcast_intra_binomial", {0}, 0},
    {AI_BROADCAST, "scatter_allgather", NULL, "MPIR_Bcast_intra_scatter_ring_allgather", {0}, 0},
    {AI_BROADCAST, "hierarchical", NULL, "MPIR_Bcast_intra_smp", {"comm_hierarchy=flat"}, 0},
    {AI_REDUCE, "binomial", NULL, "MPIR_Reduce_intra_binomial", {0}, 0},
    {AI_REDUCE, "rabenseifner", NULL, "MPIR_Reduce_intra_reduce_scatter_gather",
     {"is_op_built_in=no", "count<pow2"}, 0},
    {AI_REDUCE, "hierarchical", NULL, "MPIR_Reduce_intra_smp", {"comm_hierarchy=flat"}, 0},
    {AI_ALLTOALL, "pairwise", NULL, "MPIR_Alltoall_intra_pairwise", {0}, 0},
    {AI_ALLTOALL, "linear", NULL, "MPIR_Alltoall_intra_scattered", {0}, 0},
    {AI_ALLTOALL, "bruck", NULL, "MPIR_Alltoall_intra_brucks", {0}, 0},
    {AI_BARRIER, "dissemination", NULL, "MPIR_Barrier_intra_dissemination", {0}, 0},
};

typedef struct {
    int nomem;
} jctx;

static json_t *jobj(jctx *j)
{
    json_t *o = json_object();
    if (!o)
        j->nomem = 1;
    return o;
}

/* o[key] = v, taking v's reference (NULL o or v: records the failure). */
static void jput(jctx *j, json_t *o, const char *key, json_t *v)
{
    if (!o || !v || json_object_set_new(o, key, v) != 0) {
        j->nomem = 1;
        json_decref(v);
    }
}

static void jputf(jctx *j, json_t *o, json_t *v, const char *fmt, unsigned long long n)
{
    char key[64];
    snprintf(key, sizeof key, fmt, n);
    jput(j, o, key, v);
}

static json_t *leaf(jctx *j, const char *algo)
{
    char key[128];
    json_t *o = jobj(j);
    snprintf(key, sizeof key, "algorithm=%s", algo);
    jput(j, o, key, jobj(j));
    return o;
}

/* A boolean key and its leaf, else the rest. */
static json_t *either(jctx *j, const char *key, const char *algo, const char *other_key,
                      json_t *rest)
{
    json_t *o = jobj(j);
    jput(j, o, key, leaf(j, algo));
    jput(j, o, other_key, rest);
    return o;
}

/* MPICH-style defaults for intra-communicator calls our knowledge does not
 * cover: the same algorithms and thresholds as MPICH 4.0.2's own table,
 * simplified (its short/long message limits 2 KiB, 12 KiB, 512 KiB, 80 KiB,
 * 256 B, 32 KiB; 8 ranks). */
static json_t *mpich_fallback(jctx *j, const char *coll)
{
    json_t *o = jobj(j);
    if (!strcmp(coll, "allreduce")) {
        jput(j, o, "is_op_built_in=no", leaf(j, "MPIR_Allreduce_intra_recursive_doubling"));
        jput(j, o, "count<pow2", leaf(j, "MPIR_Allreduce_intra_recursive_doubling"));
        jput(j, o, "avg_msg_size<=2048", leaf(j, "MPIR_Allreduce_intra_recursive_doubling"));
        jput(j, o, "avg_msg_size=any", leaf(j, "MPIR_Allreduce_intra_reduce_scatter_allgather"));
    } else if (!strcmp(coll, "bcast")) {
        json_t *p2 = jobj(j);
        jput(j, p2, "avg_msg_size<=524288",
             leaf(j, "MPIR_Bcast_intra_scatter_recursive_doubling_allgather"));
        jput(j, p2, "avg_msg_size=any", leaf(j, "MPIR_Bcast_intra_scatter_ring_allgather"));
        jput(j, o, "comm_size<=7", leaf(j, "MPIR_Bcast_intra_binomial"));
        jput(j, o, "avg_msg_size<=12288", leaf(j, "MPIR_Bcast_intra_binomial"));
        jput(j, o, "comm_size=pow2", p2);
        jput(j, o, "comm_size=any", leaf(j, "MPIR_Bcast_intra_scatter_ring_allgather"));
    } else if (!strcmp(coll, "reduce")) {
        jput(j, o, "is_op_built_in=no", leaf(j, "MPIR_Reduce_intra_binomial"));
        jput(j, o, "count<pow2", leaf(j, "MPIR_Reduce_intra_binomial"));
        jput(j, o, "avg_msg_size<=2048", leaf(j, "MPIR_Reduce_intra_binomial"));
        jput(j, o, "avg_msg_size=any", leaf(j, "MPIR_Reduce_intra_reduce_scatter_gather"));
    } else if (!strcmp(coll, "allgather")) {
        json_t *p2 = jobj(j);
        jput(j, p2, "total_msg_size<=524287", leaf(j, "MPIR_Allgather_intra_recursive_doubling"));
        jput(j, p2, "total_msg_size=any", leaf(j, "MPIR_Allgather_intra_ring"));
        jput(j, o, "comm_size=pow2", p2);
        jput(j, o, "total_msg_size<=81919", leaf(j, "MPIR_Allgather_intra_brucks"));
        jput(j, o, "total_msg_size=any", leaf(j, "MPIR_Allgather_intra_ring"));
    } else if (!strcmp(coll, "alltoall")) {
        json_t *few = jobj(j);
        jput(j, few, "avg_msg_size<=32768", leaf(j, "MPIR_Alltoall_intra_scattered"));
        jput(j, few, "avg_msg_size=any", leaf(j, "MPIR_Alltoall_intra_pairwise"));
        jput(j, o, "is_sendbuf_inplace=yes", leaf(j, "MPIR_Alltoall_intra_pairwise_sendrecv_replace"));
        jput(j, o, "comm_size<=7", few);
        jput(j, o, "avg_msg_size<=256", leaf(j, "MPIR_Alltoall_intra_brucks"));
        jput(j, o, "avg_msg_size<=32768", leaf(j, "MPIR_Alltoall_intra_scattered"));
        jput(j, o, "avg_msg_size=any", leaf(j, "MPIR_Alltoall_intra_pairwise"));
    } else if (!strcmp(coll, "reduce_scatter") || !strcmp(coll, "reduce_scatter_block")) {
        const char *pre = !strcmp(coll, "reduce_scatter") ? "MPIR_Reduce_scatter_intra_"
                                                          : "MPIR_Reduce_scatter_block_intra_";
        char rd[96], rh[96], pw[96];
        snprintf(rd, sizeof rd, "%srecursive_doubling", pre);
        snprintf(rh, sizeof rh, "%srecursive_halving", pre);
        snprintf(pw, sizeof pw, "%spairwise", pre);
        jput(j, o, "is_commutative=no", leaf(j, rd));
        jput(j, o, "total_msg_size<=524287", leaf(j, rh));
        jput(j, o, "total_msg_size=any", leaf(j, pw));
    } else { /* barrier */
        jput(j, o, "comm_hierarchy=parent", leaf(j, "MPIR_Barrier_intra_smp"));
        jput(j, o, "comm_hierarchy=any", leaf(j, "MPIR_Barrier_intra_dissemination"));
    }
    return o;
}

static const mpich_map *mpich_lookup(const char *target, const ai_kb_arm *a, int nranks)
{
    for (size_t i = 0; i < AI_ARRAY_LEN(mpich_table); i++) {
        const mpich_map *m = &mpich_table[i];
        const char *t = m->target ? m->target : "";
        if (m->coll != a->coll || strcmp(m->ours, a->algo) || strcmp(t, target ? target : ""))
            continue;
        if (m->pow2 && !tune_nranks_pow2(nranks))
            continue;
        return m;
    }
    return NULL;
}

/* A chain of candidates: the first where its preconditions hold, else the
 * rest (finally the fallback). */
static json_t *mpich_chain(jctx *j, const char *coll, const mpich_map *const *c, int n)
{
    if (n == 0)
        return mpich_fallback(j, coll);
    if (!c[0]->unless[0])
        return leaf(j, c[0]->name);
    json_t *o = jobj(j), *rest = mpich_chain(j, coll, c + 1, n - 1);
    for (int k = 0; k < 2 && c[0]->unless[k]; k++) {
        if (rest)
            json_incref(rest);
        jput(j, o, c[0]->unless[k], rest);
    }
    json_decref(rest);
    jput(j, o, "count=any", leaf(j, c[0]->name));
    return o;
}

/* The name of MPICH's own decision as the MPI shim's learner measures it
 * (its host-MPI arm, ai_comm_set_host_coll). */
#define MPICH_OWN "mpi_mpich"

/* The bucket's candidates MPICH has that pass the guard (export.h): its
 * own measured algorithms ("mpich:" arms, bench/peer-to-kb.py) first, as
 * with Open MPI, then ours mapped; each fastest first, up to the first
 * that needs no precondition. */
static json_t *mpich_choice(jctx *j, const kb_view *v, const char *coll, const char *target,
                            size_t i, size_t end)
{
    const mpich_map *c[8];
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = i; k < end && n < (int)AI_ARRAY_LEN(c); k++) {
            const mpich_map *m;
            if (!strncmp(v->arm[k].algo, "mpich:", 6) != (pass == 0) ||
                !tune_view_exportable(v, i, end, &v->arm[k], MPICH_OWN) ||
                !(m = mpich_lookup(target, &v->arm[k], v->nranks)))
                continue;
            c[n++] = m;
            if (!m->unless[0])
                return mpich_chain(j, coll, c, n);
        }
    return mpich_chain(j, coll, c, n);
}

static int mpich_has(const kb_view *v, const char *target, size_t i, size_t end)
{
    for (size_t k = i; k < end; k++)
        if (tune_view_exportable(v, i, end, &v->arm[k], MPICH_OWN) &&
            mpich_lookup(target, &v->arm[k], v->nranks))
            return 1;
    return 0;
}

/* Our knowledge of one collective for a communicator of nranks ranks. */
static json_t *mpich_ours(jctx *j, const kb_view *v, const char *coll, ai_coll ours,
                          const char *target, int per_rank)
{
    json_t *o = jobj(j);
    if (!strcmp(coll, "allreduce"))
        jput(j, o, "is_commutative=no", leaf(j, "MPIR_Allreduce_intra_recursive_doubling"));
    else if (!strcmp(coll, "reduce"))
        jput(j, o, "is_commutative=no", leaf(j, "MPIR_Reduce_intra_binomial"));
    else if (!strcmp(coll, "reduce_scatter"))
        jput(j, o, "is_commutative=no", leaf(j, "MPIR_Reduce_scatter_intra_recursive_doubling"));
    else if (!strcmp(coll, "reduce_scatter_block"))
        jput(j, o, "is_commutative=no",
             leaf(j, "MPIR_Reduce_scatter_block_intra_recursive_doubling"));
    else if (!strcmp(coll, "alltoall"))
        jput(j, o, "is_sendbuf_inplace=yes",
             leaf(j, "MPIR_Alltoall_intra_pairwise_sendrecv_replace"));

    size_t i = 0, end;
    if (ours == AI_BARRIER) {
        json_t *c = tune_view_next_bucket(v, ours, &i, &end) ? mpich_choice(j, v, coll, target, i, end)
                                                   : mpich_fallback(j, coll);
        jput(j, o, "comm_size=any", c);
        return o;
    }
    const char *le = per_rank ? "total_msg_size<=%llu" : "avg_msg_size<=%llu";
    const char *any = per_rank ? "total_msg_size=any" : "avg_msg_size=any";
    int mult = per_rank ? v->nranks : 1, open = 0;
    unsigned long long next = 0;
    for (; tune_view_next_bucket(v, ours, &i, &end) && !open; i = end) {
        if (!mpich_has(v, target, i, end))
            continue;
        unsigned long long lo = tune_view_lo_edge(v->arm[i].bytes, mult), hi = tune_view_hi_edge(v->arm[i].bytes, mult);
        if (lo > next) {
            if (lo - 1 > INT_MAX)
                break; /* not expressible: MPICH compares with a C int */
            jputf(j, o, mpich_fallback(j, coll), le, lo - 1);
        }
        json_t *c = mpich_choice(j, v, coll, target, i, end);
        if (hi - 1 > INT_MAX) {
            jput(j, o, any, c); /* the last expressible bucket runs on upward */
            open = 1;
        } else {
            jputf(j, o, c, le, hi - 1);
        }
        next = hi;
    }
    if (!open)
        jput(j, o, any, mpich_fallback(j, coll));
    return o;
}

/* Collectives MPICH may call that we do not tune: one safe algorithm each
 * (in-place variants where the algorithm needs it), and the inter-
 * communicator one. inter NULL: one leaf for every communicator. */
static const struct {
    const char *coll, *inplace, *intra, *inter;
} mpich_plain[] = {
    {"allgatherv", NULL, "MPIR_Allgatherv_intra_ring", "MPIR_Allgatherv_inter_remote_gather_local_bcast"},
    {"alltoallv", "MPIR_Alltoallv_intra_pairwise_sendrecv_replace", "MPIR_Alltoallv_intra_scattered",
     "MPIR_Alltoallv_inter_pairwise_exchange"},
    {"alltoallw", "MPIR_Alltoallw_intra_pairwise_sendrecv_replace", "MPIR_Alltoallw_intra_scattered",
     "MPIR_Alltoallw_inter_pairwise_exchange"},
    {"gather", NULL, "MPIR_Gather_intra_binomial", "MPIR_Gather_inter_linear"},
    {"gatherv", NULL, "MPIR_Gatherv_allcomm_linear", NULL},
    {"scatter", NULL, "MPIR_Scatter_intra_binomial", "MPIR_Scatter_inter_linear"},
    {"scatterv", NULL, "MPIR_Scatterv_allcomm_linear", NULL},
    {"scan", NULL, "MPIR_Scan_intra_recursive_doubling", NULL},
    {"exscan", NULL, "MPIR_Exscan_intra_recursive_doubling", NULL},
    {"neighbor_allgather", NULL, "MPIR_Neighbor_allgather_allcomm_nb", NULL},
    {"neighbor_allgatherv", NULL, "MPIR_Neighbor_allgatherv_allcomm_nb", NULL},
    {"neighbor_alltoall", NULL, "MPIR_Neighbor_alltoall_allcomm_nb", NULL},
    {"neighbor_alltoallv", NULL, "MPIR_Neighbor_alltoallv_allcomm_nb", NULL},
    {"neighbor_alltoallw", NULL, "MPIR_Neighbor_alltoallw_allcomm_nb", NULL},
    {"ibarrier", NULL, "MPIR_Ibarrier_intra_sched_recursive_doubling", "MPIR_Ibarrier_inter_sched_bcast"},
    {"ibcast", NULL, "MPIR_Ibcast_intra_sched_binomial", "MPIR_Ibcast_inter_sched_flat"},
    {"iallreduce", NULL, "MPIR_Iallreduce_intra_sched_recursive_doubling",
     "MPIR_Iallreduce_inter_sched_remote_reduce_local_bcast"},
    {"iallgather", NULL, "MPIR_Iallgather_intra_sched_ring",
     "MPIR_Iallgather_inter_sched_local_gather_remote_bcast"},
    {"iallgatherv", NULL, "MPIR_Iallgatherv_intra_sched_ring",
     "MPIR_Iallgatherv_inter_sched_remote_gather_local_bcast"},
    {"ialltoall", "MPIR_Ialltoall_intra_sched_inplace", "MPIR_Ialltoall_intra_sched_pairwise",
     "MPIR_Ialltoall_inter_sched_pairwise_exchange"},
    {"ialltoallv", "MPIR_Ialltoallv_intra_sched_inplace", "MPIR_Ialltoallv_intra_sched_blocked",
     "MPIR_Ialltoallv_inter_sched_pairwise_exchange"},
    {"ialltoallw", "MPIR_Ialltoallw_intra_sched_inplace", "MPIR_Ialltoallw_intra_sched_blocked",
     "MPIR_Ialltoallw_inter_sched_pairwise_exchange"},
    {"ireduce", NULL, "MPIR_Ireduce_intra_sched_binomial",
     "MPIR_Ireduce_inter_sched_local_reduce_remote_send"},
    {"ireduce_scatter", NULL, "MPIR_Ireduce_scatter_intra_sched_recursive_doubling",
     "MPIR_Ireduce_scatter_inter_sched_remote_reduce_local_scatterv"},
    {"ireduce_scatter_block", NULL, "MPIR_Ireduce_scatter_block_intra_sched_recursive_doubling",
     "MPIR_Ireduce_scatter_block_inter_sched_remote_reduce_local_scatterv"},
    {"igather", NULL, "MPIR_Igather_intra_sched_binomial", "MPIR_Igather_inter_sched_long"},
    {"igatherv", NULL, "MPIR_Igatherv_allcomm_sched_linear", NULL},
    {"iscatter", NULL, "MPIR_Iscatter_intra_sched_binomial", "MPIR_Iscatter_inter_sched_linear"},
    {"iscatterv", NULL, "MPIR_Iscatterv_allcomm_sched_linear", NULL},
    {"iexscan", NULL, "MPIR_Iexscan_intra_sched_recursive_doubling", NULL},
    {"iscan", NULL, "MPIR_Iscan_intra_sched_recursive_doubling", NULL},
    {"ineighbor_allgather", NULL, "MPIR_Ineighbor_allgather_allcomm_sched_linear", NULL},
    {"ineighbor_allgatherv", NULL, "MPIR_Ineighbor_allgatherv_allcomm_sched_linear", NULL},
    {"ineighbor_alltoall", NULL, "MPIR_Ineighbor_alltoall_allcomm_sched_linear", NULL},
    {"ineighbor_alltoallv", NULL, "MPIR_Ineighbor_alltoallv_allcomm_sched_linear", NULL},
    {"ineighbor_alltoallw", NULL, "MPIR_Ineighbor_alltoallw_allcomm_sched_linear", NULL},
};

/* The collectives we tune, their source, MPICH's size kind and the
 * inter-communicator algorithm. */
static const struct {
    const char *coll;
    ai_coll ours;
    const char *target; /* mpich_table target */
    int per_rank;       /* total_msg_size (whole vector) rather than avg_msg_size */
    const char *inter;
} mpich_tuned[] = {
    {"allreduce", AI_ALLREDUCE, NULL, 0, "MPIR_Allreduce_inter_reduce_exchange_bcast"},
    {"reduce_scatter", AI_REDUCE_SCATTER, NULL, 1,
     "MPIR_Reduce_scatter_inter_remote_reduce_local_scatter"},
    {"reduce_scatter_block", AI_REDUCE_SCATTER, "reduce_scatter_block", 1,
     "MPIR_Reduce_scatter_block_inter_remote_reduce_local_scatter"},
    {"allgather", AI_ALLGATHER, NULL, 1, "MPIR_Allgather_inter_local_gather_remote_bcast"},
    {"bcast", AI_BROADCAST, NULL, 0, "MPIR_Bcast_inter_remote_send_local_bcast"},
    {"reduce", AI_REDUCE, NULL, 0, "MPIR_Reduce_inter_local_reduce_remote_send"},
    {"alltoall", AI_ALLTOALL, NULL, 0, "MPIR_Alltoall_inter_pairwise_exchange"},
    {"barrier", AI_BARRIER, NULL, 0, "MPIR_Barrier_inter_bcast"},
};

static int mpich_knows(const kb_view *v, ai_coll ours, const char *target)
{
    size_t i = 0, end;
    for (; tune_view_next_bucket(v, ours, &i, &end); i = end)
        if (mpich_has(v, target, i, end))
            return 1;
    return 0;
}

ai_status_t ai_kb_export_mpich_json(ai_kb *kb, const char *fingerprint, const char *path)
{
    if (!path)
        return util_fail(AI_ERR_INVALID, "ai_kb_export_mpich_json: path is NULL");
    kb_view v;
    ai_status_t st = tune_view_load(kb, fingerprint, "MPICH selection export", &v);
    if (st != AI_OK)
        return st;
    int known = 0;
    for (size_t c = 0; c < AI_ARRAY_LEN(mpich_tuned); c++)
        known += mpich_knows(&v, mpich_tuned[c].ours, mpich_tuned[c].target);
    if (!known) {
        st = util_fail(AI_ERR_NOTFOUND,
                       "MPICH selection export: fingerprint %s has no measured algorithm that "
                       "MPICH 4.0 has",
                       v.fp);
        goto err_view;
    }
    jctx j = {0};
    json_t *root = jobj(&j);
    for (size_t c = 0; c < AI_ARRAY_LEN(mpich_tuned); c++) {
        const char *coll = mpich_tuned[c].coll;
        json_t *intra;
        if (mpich_knows(&v, mpich_tuned[c].ours, mpich_tuned[c].target)) {
            intra = jobj(&j);
            if (v.nranks > 1)
                jputf(&j, intra, mpich_fallback(&j, coll), "comm_size<=%llu",
                      (unsigned long long)v.nranks - 1);
            jputf(&j, intra,
                  mpich_ours(&j, &v, coll, mpich_tuned[c].ours, mpich_tuned[c].target,
                             mpich_tuned[c].per_rank),
                  "comm_size<=%llu", (unsigned long long)v.nranks);
            jput(&j, intra, "comm_size=any", mpich_fallback(&j, coll));
        } else {
            intra = mpich_fallback(&j, coll);
        }
        json_t *e = jobj(&j);
        jput(&j, e, "comm_type=intra", intra);
        jput(&j, e, "comm_type=inter", leaf(&j, mpich_tuned[c].inter));
        char key[64];
        snprintf(key, sizeof key, "collective=%s", coll);
        jput(&j, root, key, e);
    }
    for (size_t c = 0; c < AI_ARRAY_LEN(mpich_plain); c++) {
        json_t *intra = mpich_plain[c].inplace
                            ? either(&j, "is_sendbuf_inplace=yes", mpich_plain[c].inplace,
                                     "is_sendbuf_inplace=no", leaf(&j, mpich_plain[c].intra))
                            : leaf(&j, mpich_plain[c].intra);
        json_t *e = intra;
        if (mpich_plain[c].inter) {
            e = jobj(&j);
            jput(&j, e, "comm_type=intra", intra);
            jput(&j, e, "comm_type=inter", leaf(&j, mpich_plain[c].inter));
        }
        char key[64];
        snprintf(key, sizeof key, "collective=%s", mpich_plain[c].coll);
        jput(&j, root, key, e);
    }
    if (j.nomem)
        st = util_fail(AI_ERR_NOMEM, "MPICH selection export");
    else if (json_dump_file(root, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
        st = util_fail(AI_ERR_IO, "cannot write %s", path);
    json_decref(root);
    free(v.arm);
    return st;
err_view:
    free(v.arm);
    return st;
}
