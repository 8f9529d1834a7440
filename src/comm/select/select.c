/*
 * Model-based selection for `auto` across hosts: once the links have been
 * measured (probe.c), every algorithm the network model knows is costed on
 * the measured network (model_net.h) and the cheapest wins. Every rank
 * holds the same measurements, so every rank picks the same algorithm.
 * Within one host, or before any measurement, the fixed rule in coll.c
 * decides. The learner (tune layer) later replaces both with evidence.
 */
#include "comm/algo_registry.h"
#include "comm/select/probe.h"
#include "comm/select/select.h"
#include "model/model_net.h"

#include <math.h>
#include <string.h>

/* Below this, latency dominates and the fixed rule's trees are right; the
 * probe (H rounds of 1 MiB) would also cost more than it could save. */
#define SELECT_MIN_BYTES ((size_t)64 << 10)
/* `weighted` gains only where hosts really differ; on equal links, probe
 * noise of a few percent would make its prediction look better than the
 * ring's. It must beat the best other algorithm by this factor. */
#define SELECT_WEIGHTED_MARGIN 0.85

static int wants_model(const ai_comm *c, ai_coll coll, size_t bytes)
{
    return c->nhosts > 1 && bytes >= SELECT_MIN_BYTES && coll != AI_BARRIER;
}

ai_status_t comm_select_prepare(ai_comm *c, ai_coll coll, size_t bytes)
{
    const comm_links *l;
    if (!wants_model(c, coll, bytes) || c->links)
        return AI_OK;
    return comm_links_get(c, 0, &l);
}

static ai_status_t net_from_links(const ai_comm *c, model_net *n)
{
    const comm_links *l = c->links;
    ai_status_t st = model_net_alloc(n, c->size, c->nhosts, 0);
    if (st != AI_OK)
        return st;
    for (int r = 0; r < c->size; r++)
        n->host_of[r] = c->host_of[r];
    for (int h = 0; h < c->nhosts; h++) {
        n->nic_Bps[h] = l->host_Bps[h];
        n->lat_s[h] = l->host_lat_s[h];
    }
    return AI_OK;
}

/* Decisions are made once per power-of-two size bucket (at the bucket's
 * lower edge) and kept, so repeated calls neither allocate nor rerun the
 * model. */
static int bucket_of(size_t bytes)
{
    int b = 0;
    while (b < 63 && ((size_t)2 << b) <= bytes)
        b++;
    return b;
}

static const char *decide(const ai_comm *c, ai_coll coll, size_t bytes);

const char *comm_select_model(const ai_comm *c, ai_coll coll, size_t bytes)
{
    if (!wants_model(c, coll, bytes) || !c->links)
        return NULL;
    /* A memo: communicators are never const objects, only const views. */
    const char **slot = (const char **)&c->auto_cache[coll][bucket_of(bytes)];
    if (!*slot)
        *slot = decide(c, coll, (size_t)1 << bucket_of(bytes));
    return *slot;
}

/* The model speaks nccl-tests sizes: totals for the gathered forms. */
static double model_size(const ai_comm *c, ai_coll coll, size_t bytes)
{
    double size = (double)bytes;
    if (coll == AI_ALLGATHER || coll == AI_REDUCE_SCATTER || coll == AI_ALLTOALL)
        size *= c->size;
    return size;
}

double comm_select_model_time(const ai_comm *c, ai_coll coll, const char *algo, size_t bytes)
{
    model_net n;
    if (c->nhosts < 2 || !c->links || net_from_links(c, &n) != AI_OK)
        return NAN;
    double t = model_net_algo_time(&n, coll, algo, model_size(c, coll, bytes));
    model_net_free(&n);
    return isfinite(t) && t > 0 ? t : NAN;
}

static const char *decide(const ai_comm *c, ai_coll coll, size_t bytes)
{
    model_net n;
    if (net_from_links(c, &n) != AI_OK)
        return NULL;
    double size = model_size(c, coll, bytes);
    const char *best = NULL;
    double best_t = INFINITY, weighted_t = INFINITY;
    for (int i = 0; i < comm_algo_count(coll); i++) {
        const char *name = comm_algo_at(coll, i)->name;
        double t = model_net_algo_time(&n, coll, name, size);
        if (!strcmp(name, "weighted"))
            weighted_t = t;
        else if (t < best_t) {
            best_t = t;
            best = name;
        }
    }
    model_net_free(&n);
    return weighted_t < SELECT_WEIGHTED_MARGIN * best_t ? "weighted" : best;
}
