/* The public wrapper types of the job-level API, shared by the files that
 * implement it (plan_api.c, plan_cluster.c) and the layers above
 * that take them (sim). */
#ifndef AI_PLAN_API_H
#define AI_PLAN_API_H

#include "topo/topo.h"

struct ai_cluster {
    topo_cluster *c;
};
struct ai_model_spec {
    topo_model m;
};
struct ai_training {
    topo_training t;
};

#endif
