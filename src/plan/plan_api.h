/* The public wrapper types of the job-level API, shared by the files that
 * implement it (plan_api.c, plan_cluster.c). */
#ifndef AI_PLAN_API_H
#define AI_PLAN_API_H

#include "topo/topo.h"

struct ai_cluster {
    topo_cluster *c;
};

#endif
