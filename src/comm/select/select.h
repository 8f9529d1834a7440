/* Model-based choice for `auto` on several hosts (select.c). */
#ifndef AI_COMM_SELECT_H
#define AI_COMM_SELECT_H

#include "comm/comm.h"

/* Collective: measure the links first if this call will want them. */
ai_status_t comm_select_prepare(ai_comm *c, ai_coll coll, size_t bytes);
/* The algorithm the network model predicts fastest, or NULL (one host,
 * small message, or links not measured): then the fixed rule decides. */
const char *comm_select_model(const ai_comm *c, ai_coll coll, size_t bytes);

/* Seconds the network model predicts for `algo` on the measured links at
 * `bytes` (per-rank payload, as the public calls count it); NAN when the
 * model has nothing to say (one host, links not measured, unknown algo). */
double comm_select_model_time(const ai_comm *c, ai_coll coll, const char *algo, size_t bytes);

#endif
