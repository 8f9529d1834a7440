/*
 * Exports of the knowledge base to other MPI stacks (docs/exports.md):
 * what the two writers share.
 *
 *   view.c   one fingerprint's arms, read through the public
 *            ai_kb_foreach only, sorted by collective, bucket and time
 *   ompi.c   ai_kb_export_ompi_rules: an Open MPI 4.1 coll/tuned dynamic
 *            rules file
 *   mpich.c  ai_kb_export_mpich_json: an MPICH 4.0 collective selection
 *            (CSEL) file
 *
 * For every collective and power-of-two size bucket of one fingerprint
 * (NULL: the KB's only one; never a guess between several) the writers put the fastest
 * measured arm whose algorithm the target stack has; sizes the KB knows
 * nothing about, and communicators of other sizes, keep the stack's own
 * decision. The facts each writer relies on, and their sources, head its
 * file (nothing is copied from either project; the numbers and names are
 * what their parsers accept).
 */
#ifndef AI_TUNE_EXPORT_H
#define AI_TUNE_EXPORT_H

#include "autoinfra.h"

#include <stddef.h>

/* Everything the KB knows of one fingerprint. */
typedef struct {
    char fp[17];
    int nranks, nhosts;
    ai_kb_arm *arm;
    size_t n, cap;
    int nomem;
} kb_view;

/* Load the arms of `fingerprint` (NULL: the KB's only one; several are an
 * error listing them);
 * `what` names the export in errors. On success free v->arm. */
ai_status_t tune_view_load(ai_kb *kb, const char *fingerprint, const char *what, kb_view *v);
/* The arms of one (coll, bytes) bucket are v->arm[*i .. *end), fastest
 * first. Returns 0 when no bucket of `coll` is left. */
int tune_view_next_bucket(const kb_view *v, ai_coll coll, size_t *i, size_t *end);
/* The guard every rule passes (docs/exports.md, "Which arm becomes a
 * rule"). An arm counts only with at least TUNE_EXPORT_MIN_SAMPLES
 * measured calls behind it: one or two calls are as likely a lucky or an
 * unlucky moment of the machine as the algorithm's speed. And the arm a
 * rule would name must be at most TUNE_EXPORT_MAX_SLOWER times the
 * bucket's fastest arm that counts, whatever its algorithm (also one the
 * target lacks), and no slower than the target's own decision where the
 * KB measured that (the MPI shim's host-MPI arm, `own`: "mpi_ompi",
 * "mpi_mpich"). Otherwise the KB holds no evidence that the target's
 * algorithm is a good choice there, and the target keeps its own
 * decision for that bucket. */
#define TUNE_EXPORT_MIN_SAMPLES 5
#define TUNE_EXPORT_MAX_SLOWER 3.0
int tune_view_enough(const ai_kb_arm *a);
/* Arm a of the bucket [i, end) passes the guard. */
int tune_view_exportable(const kb_view *v, size_t i, size_t end, const ai_kb_arm *a, const char *own);

/* A bucket [bytes, 2 bytes) of per-rank payload in the target's units
 * (mult: 1 or the communicator size); the lowest bucket (bytes = 1) also
 * holds empty calls, so it starts at 0. */
unsigned long long tune_view_lo_edge(size_t bytes, int mult);
unsigned long long tune_view_hi_edge(size_t bytes, int mult);
/* "64 KiB" for comments in the written files. */
const char *tune_size_name(unsigned long long b, char *buf, size_t len);

/* Power-of-two communicator sizes: some Open MPI / MPICH algorithms
 * require one. */
static inline int tune_nranks_pow2(int n)
{
    return n > 0 && (n & (n - 1)) == 0;
}

#endif
