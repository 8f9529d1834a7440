/*
 * An Open MPI 4.1 coll/tuned dynamic rules file from the knowledge base
 * (export.h has what the writers share).
 *
 * Sources of the facts used here:
 *  - Open MPI algorithm ids: `ompi_info --param coll tuned --level 9` of
 *    Open MPI 4.1.4 (coll_tuned_<coll>_algorithm "Valid values").
 *  - Open MPI collective ids: enum COLLTYPE in
 *    ompi/mca/coll/base/coll_base_functions.h (ALLGATHER 0, ALLREDUCE 2,
 *    ALLTOALL 3, BARRIER 6, BCAST 7, REDUCE 11, REDUCESCATTER 12,
 *    REDUCESCATTERBLOCK 13).
 *  - Open MPI rules grammar: ompi_coll_tuned_read_rules_config_file()
 *    (coll_tuned_dynamic_file.c) reads whitespace-separated integers,
 *    skipping '#' to end of line (ompi_coll_base_file_getnext_long):
 *      NCOLL, then per collective: ID NCOMSIZES, per communicator size:
 *      COMSIZE NMSGSIZES, per message size: MSGSIZE ALG FANINOUT SEGSIZE.
 *    The first message size must be 0. Lookup (coll_tuned_dynamic_rules.c,
 *    4.x): the last communicator entry with COMSIZE <= the communicator's
 *    size (the first entry when none is), then the last message entry with
 *    MSGSIZE <= the call's size; algorithm 0 means "use the fixed decision".
 *  - Open MPI message sizes (coll_tuned_decision_dynamic.c, 4.x): type size
 *    x count for allreduce, bcast, reduce; x count x communicator size for
 *    allgather and alltoall (scount); the whole vector (sum of recvcounts,
 *    rcount x size) for reduce_scatter and reduce_scatter_block.
 */
#include "comm/algo_registry.h" /* COMM_ALGO_DEFAULT_SEGMENT: our pipelines' segment when chunk is 0 */
#include "tune/export/export.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* coll/tuned collective ids (enum COLLTYPE). */
enum { OMPI_ALLGATHER = 0, OMPI_ALLREDUCE = 2, OMPI_ALLTOALL = 3, OMPI_BARRIER = 6,
       OMPI_BCAST = 7, OMPI_REDUCE = 11, OMPI_REDUCESCATTER = 12, OMPI_REDUCESCATTERBLOCK = 13 };

enum { SEG_NONE, SEG_CHUNK, SEG_PIPE }; /* segsize: 0, chunk_bytes, chunk or our default */
enum { CH_ANY, CH_ZERO, CH_SET };       /* which chunk_bytes the entry applies to */

typedef struct {
    ai_coll coll;
    const char *ours;
    int target;  /* OMPI collective id */
    int id;      /* coll_tuned_<coll>_algorithm value */
    const char *name;
    int seg, chunk, pow2;
} ompi_map;

/* Our algorithm -> Open MPI 4.1 coll/tuned algorithm (docs/exports.md). */
static const ompi_map ompi_table[] = {
    {AI_ALLREDUCE, "ring", OMPI_ALLREDUCE, 4, "ring", SEG_NONE, CH_ZERO, 0},
    {AI_ALLREDUCE, "ring", OMPI_ALLREDUCE, 5, "segmented_ring", SEG_CHUNK, CH_SET, 0},
    {AI_ALLREDUCE, "recursive_doubling", OMPI_ALLREDUCE, 3, "recursive_doubling", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "rabenseifner", OMPI_ALLREDUCE, 6, "rabenseifner", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "reduce_bcast", OMPI_ALLREDUCE, 2, "nonoverlapping", SEG_NONE, CH_ANY, 0},
    /* Open MPI's own algorithms, timed on the cluster by bench/compare and
     * imported with bench/peer-to-kb.py ("ompi:" + its name). */
    {AI_ALLREDUCE, "ompi:basic_linear", OMPI_ALLREDUCE, 1, "basic_linear", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "ompi:nonoverlapping", OMPI_ALLREDUCE, 2, "nonoverlapping", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "ompi:recursive_doubling", OMPI_ALLREDUCE, 3, "recursive_doubling", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "ompi:ring", OMPI_ALLREDUCE, 4, "ring", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "ompi:segmented_ring", OMPI_ALLREDUCE, 5, "segmented_ring", SEG_NONE, CH_ANY, 0},
    {AI_ALLREDUCE, "ompi:rabenseifner", OMPI_ALLREDUCE, 6, "rabenseifner", SEG_NONE, CH_ANY, 0},
    {AI_REDUCE_SCATTER, "ring", OMPI_REDUCESCATTER, 3, "ring", SEG_NONE, CH_ANY, 0},
    {AI_REDUCE_SCATTER, "recursive_halving", OMPI_REDUCESCATTER, 2, "recursive_halving", SEG_NONE, CH_ANY, 0},
    {AI_REDUCE_SCATTER, "recursive_halving", OMPI_REDUCESCATTERBLOCK, 3, "recursive_halving", SEG_NONE, CH_ANY, 0},
    {AI_ALLGATHER, "ring", OMPI_ALLGATHER, 4, "ring", SEG_NONE, CH_ANY, 0},
    {AI_ALLGATHER, "recursive_doubling", OMPI_ALLGATHER, 3, "recursive_doubling", SEG_NONE, CH_ANY, 1},
    {AI_ALLGATHER, "bruck", OMPI_ALLGATHER, 2, "bruck", SEG_NONE, CH_ANY, 0},
    {AI_BROADCAST, "binomial", OMPI_BCAST, 6, "binomial", SEG_NONE, CH_ANY, 0},
    {AI_BROADCAST, "binary_tree", OMPI_BCAST, 5, "binary_tree", SEG_PIPE, CH_ANY, 0},
    {AI_BROADCAST, "chain", OMPI_BCAST, 3, "pipeline", SEG_PIPE, CH_ANY, 0},
    {AI_BROADCAST, "scatter_allgather", OMPI_BCAST, 9, "scatter_allgather_ring", SEG_NONE, CH_ANY, 0},
    {AI_REDUCE, "binomial", OMPI_REDUCE, 5, "binomial", SEG_NONE, CH_ANY, 0},
    {AI_REDUCE, "binary_tree", OMPI_REDUCE, 4, "binary", SEG_PIPE, CH_ANY, 0},
    {AI_REDUCE, "rabenseifner", OMPI_REDUCE, 7, "rabenseifner", SEG_NONE, CH_ANY, 0},
    {AI_ALLTOALL, "pairwise", OMPI_ALLTOALL, 2, "pairwise", SEG_NONE, CH_ANY, 0},
    {AI_ALLTOALL, "linear", OMPI_ALLTOALL, 1, "linear", SEG_NONE, CH_ANY, 0},
    {AI_ALLTOALL, "bruck", OMPI_ALLTOALL, 3, "modified_bruck", SEG_NONE, CH_ANY, 0},
    {AI_BARRIER, "dissemination", OMPI_BARRIER, 4, "bruck", SEG_NONE, CH_ANY, 0},
    {AI_BARRIER, "tree", OMPI_BARRIER, 6, "tree", SEG_NONE, CH_ANY, 0},
};

/* Open MPI collectives we write, with the source collective and the size
 * multiplier (0: size-less, barrier). */
static const struct {
    int target;
    const char *name;
    ai_coll coll;
    int per_rank; /* message size counts every rank's block */
} ompi_colls[] = {
    {OMPI_ALLGATHER, "allgather", AI_ALLGATHER, 1},
    {OMPI_ALLREDUCE, "allreduce", AI_ALLREDUCE, 0},
    {OMPI_ALLTOALL, "alltoall", AI_ALLTOALL, 1},
    {OMPI_BARRIER, "barrier", AI_BARRIER, 0},
    {OMPI_BCAST, "bcast", AI_BROADCAST, 0},
    {OMPI_REDUCE, "reduce", AI_REDUCE, 0},
    {OMPI_REDUCESCATTER, "reduce_scatter", AI_REDUCE_SCATTER, 1},
    {OMPI_REDUCESCATTERBLOCK, "reduce_scatter_block", AI_REDUCE_SCATTER, 1},
};

static const ompi_map *ompi_lookup(int target, const ai_kb_arm *a, int nranks)
{
    for (size_t i = 0; i < AI_ARRAY_LEN(ompi_table); i++) {
        const ompi_map *m = &ompi_table[i];
        if (m->target != target || m->coll != a->coll || strcmp(m->ours, a->algo))
            continue;
        if ((m->chunk == CH_ZERO && a->chunk_bytes) || (m->chunk == CH_SET && !a->chunk_bytes))
            continue;
        if (m->pow2 && !tune_nranks_pow2(nranks))
            continue;
        return m;
    }
    return NULL;
}

static long ompi_segsize(const ompi_map *m, const ai_kb_arm *a)
{
    switch (m->seg) {
    case SEG_CHUNK:
        return (long)a->chunk_bytes;
    case SEG_PIPE:
        return (long)(a->chunk_bytes ? a->chunk_bytes : COMM_ALGO_DEFAULT_SEGMENT);
    default:
        return 0;
    }
}

/* The name of Open MPI's own decision as the MPI shim's learner measures
 * it (its host-MPI arm, ai_comm_set_host_coll). */
#define OMPI_OWN "mpi_ompi"

/* Fastest arm of bucket [i, end) that Open MPI has for `target` and that
 * passes the guard (export.h), NULL if none. Open MPI's own measured
 * algorithms ("ompi:" arms) come first: our time for "the same" algorithm
 * need not carry over to its implementation. */
static const ai_kb_arm *ompi_pick(const kb_view *v, int target, size_t i, size_t end,
                                  const ompi_map **m)
{
    for (size_t k = i; k < end; k++)
        if (!strncmp(v->arm[k].algo, "ompi:", 5) && tune_view_enough(&v->arm[k]) &&
            (*m = ompi_lookup(target, &v->arm[k], v->nranks)) != NULL)
            return tune_view_exportable(v, i, end, &v->arm[k], OMPI_OWN) ? &v->arm[k] : NULL;
    for (size_t k = i; k < end; k++)
        if (tune_view_enough(&v->arm[k]) && (*m = ompi_lookup(target, &v->arm[k], v->nranks)) != NULL)
            return tune_view_exportable(v, i, end, &v->arm[k], OMPI_OWN) ? &v->arm[k] : NULL;
    return NULL;
}

/* The rules of one collective for communicator size nranks, into f (NULL:
 * count them only). Returns the number of message-size lines. */
static int ompi_msg_rules(FILE *f, const kb_view *v, int target, ai_coll coll, int per_rank)
{
    int mult = per_rank ? v->nranks : 1, lines = 0;
    unsigned long long next = 0; /* where the previous line's range ends */
    size_t i = 0, end;
    char b1[32], b2[32];
    if (coll == AI_BARRIER) {
        /* No message size: the best arm of the first bucket, for all. */
        const ompi_map *m;
        const ai_kb_arm *a = tune_view_next_bucket(v, coll, &i, &end) ? ompi_pick(v, target, i, end, &m) : NULL;
        if (!a)
            return 0;
        if (f)
            fprintf(f, "%-12d %d 0 %-8d # %s, %.1f us, %ld samples\n", 0, m->id, 0, m->name,
                    a->mean_us, a->samples);
        return 1;
    }
    for (; tune_view_next_bucket(v, coll, &i, &end); i = end) {
        const ompi_map *m;
        const ai_kb_arm *a = ompi_pick(v, target, i, end, &m);
        if (!a)
            continue; /* nothing Open MPI has: keep its fixed decision there */
        unsigned long long lo = tune_view_lo_edge(a->bytes, mult), hi = tune_view_hi_edge(a->bytes, mult);
        if (lo > next) {
            if (f)
                fprintf(f, "%-12llu 0 0 %-8d # from %s: Open MPI's fixed decision\n", next, 0,
                        tune_size_name(next, b1, sizeof b1));
            lines++;
        }
        if (f) {
            char ours[64] = "";
            if (strcmp(m->name, a->algo) || a->chunk_bytes)
                snprintf(ours, sizeof ours, " (ours: %s%s)", a->algo,
                         a->chunk_bytes ? ", chunked" : "");
            fprintf(f, "%-12llu %d 0 %-8ld # [%s, %s): %s%s, %.1f us, %ld samples\n", lo, m->id,
                    ompi_segsize(m, a), tune_size_name(lo, b1, sizeof b1), tune_size_name(hi, b2, sizeof b2),
                    m->name, ours, a->mean_us, a->samples);
        }
        lines++;
        next = hi;
    }
    if (lines > 0) {
        if (f)
            fprintf(f, "%-12llu 0 0 %-8d # from %s: Open MPI's fixed decision\n", next, 0,
                    tune_size_name(next, b1, sizeof b1));
        lines++;
    }
    return lines;
}

ai_status_t ai_kb_export_ompi_rules(ai_kb *kb, const char *fingerprint, const char *path)
{
    if (!path)
        return util_fail(AI_ERR_INVALID, "ai_kb_export_ompi_rules: path is NULL");
    kb_view v;
    ai_status_t st = tune_view_load(kb, fingerprint, "Open MPI rules export", &v);
    if (st != AI_OK)
        return st;
    int ncoll = 0;
    for (size_t c = 0; c < AI_ARRAY_LEN(ompi_colls); c++)
        ncoll += ompi_msg_rules(NULL, &v, ompi_colls[c].target, ompi_colls[c].coll,
                                ompi_colls[c].per_rank) > 0;
    if (ncoll == 0) {
        st = util_fail(AI_ERR_NOTFOUND,
                       "Open MPI rules export: fingerprint %s has no measured algorithm that Open "
                       "MPI 4.1 coll/tuned has",
                       v.fp);
        goto err_view;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        st = util_fail(AI_ERR_IO, "cannot write %s", path);
        goto err_view;
    }
    fprintf(f,
            "# Open MPI 4.1 coll/tuned dynamic rules written by autoinfra from its knowledge base\n"
            "# fingerprint %s: %d ranks on %d host(s). Use with\n"
            "#   mpirun --mca coll_tuned_use_dynamic_rules 1 \\\n"
            "#          --mca coll_tuned_dynamic_rules_filename THIS_FILE ...\n"
            "# Rules hold for communicators of exactly %d ranks; algorithm 0 = Open MPI's own\n"
            "# (fixed) decision. Message sizes are Open MPI's: count x type size, times the\n"
            "# communicator size for allgather, alltoall and the reduce_scatters.\n"
            "# Lines: message size, algorithm, fan-in/out, segment size.\n"
            "%d   # collectives\n",
            v.fp, v.nranks, v.nhosts, v.nranks, ncoll);
    for (size_t c = 0; c < AI_ARRAY_LEN(ompi_colls); c++) {
        int target = ompi_colls[c].target, per_rank = ompi_colls[c].per_rank;
        ai_coll coll = ompi_colls[c].coll;
        int n = ompi_msg_rules(NULL, &v, target, coll, per_rank);
        if (n == 0)
            continue;
        fprintf(f, "\n# %s\n%d   # collective id\n", ompi_colls[c].name, target);
        /* Entry 0 covers smaller communicators, entry nranks + 1 larger ones. */
        if (v.nranks > 1)
            fprintf(f, "3   # communicator sizes\n"
                       "0   # communicators below %d ranks: fixed decision\n"
                       "1   # message sizes\n"
                       "0 0 0 0\n",
                    v.nranks);
        else
            fprintf(f, "2   # communicator sizes\n");
        fprintf(f, "%d   # communicators of %d ranks: what the knowledge base measured\n"
                   "%d   # message sizes\n",
                v.nranks, v.nranks, n);
        ompi_msg_rules(f, &v, target, coll, per_rank);
        fprintf(f, "%d   # communicators of more ranks: fixed decision\n"
                   "1   # message sizes\n"
                   "0 0 0 0\n",
                v.nranks + 1);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        st = util_fail(AI_ERR_IO, "cannot write %s", path);
    free(v.arm);
    return st;
err_view:
    free(v.arm);
    return st;
}
