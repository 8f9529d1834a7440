/*
 * Slurm's view of a cluster (topo_slurm.c): hostlist expressions, the node
 * and partition lines of slurm.conf (or `scontrol show node/partition -o`),
 * a tree topology.conf (or `scontrol show topology`), turned into the
 * cluster format of docs/formats.md, and back into a topology.conf.
 */
#ifndef AI_TOPO_SLURM_H
#define AI_TOPO_SLURM_H

#include "util/util.h"

/* Most names one hostlist may expand to. */
#define TOPO_HOSTLIST_MAX 1000000

/* "gpu[001-003,007],login[1-2]x[a]" is not valid, "rack[1-2]n[1-2]" is:
 * comma lists at the top level, bracket groups of numbers and ranges
 * (the first number's width sets the zero padding), several groups per
 * name expanded left to right. *names is NULL-free, in the written order;
 * free with topo_hostlist_free. AI_ERR_INVALID naming the expression. */
ai_status_t topo_hostlist_expand(const char *expr, char ***names, int *count);
void topo_hostlist_free(char **names, int count);
/* The shortest expression of this form that expands to names[0..count) in
 * this order (runs of consecutive numbers with one prefix). malloc'd; NULL
 * only when memory runs out. */
char *topo_hostlist_compress(char *const *names, int count);

#endif
