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
