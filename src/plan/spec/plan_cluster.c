/*
 * Cluster queries of the public API: the nodes and racks of a loaded spec
 * (after overrides), and collective lower bounds on its network.
 */
#include "model/model_net.h"
#include "plan/spec/plan.h"

#include <stdio.h>

int ai_cluster_node_count(const ai_cluster *cl) { return cl ? cl->c->nnodes : 0; }
int ai_cluster_rack_count(const ai_cluster *cl) { return cl ? cl->c->nracks : 0; }

ai_status_t ai_cluster_node(const ai_cluster *cl, int index, ai_node_info *out)
{
    const topo_cluster *c = cl->c;
    if (index < 0 || index >= c->nnodes)
        return util_fail(AI_ERR_INVALID, "node %d is not in 0..%d", index, c->nnodes - 1);
    const topo_node *n = &c->nodes[index];
    const topo_group *g = &c->groups[n->group];
    ai_node_info r;
    snprintf(r.name, sizeof r.name, "%s-%d", g->name, n->index);
    snprintf(r.group, sizeof r.group, "%s", g->name);
    snprintf(r.rack, sizeof r.rack, "%s", n->rack >= 0 ? c->racks[n->rack].name : "");
    r.devices = g->devices_per_node;
    r.nic_Gbps = n->nic_count * n->nic_bw_Gbps;
    r.nic_latency_us = n->nic_latency_us;
    r.speed = n->speed;
    *out = r;
    return AI_OK;
}

ai_status_t ai_cluster_rack(const ai_cluster *cl, int index, ai_rack_info *out)
{
    const topo_cluster *c = cl->c;
    if (index < 0 || index >= c->nracks)
        return util_fail(AI_ERR_INVALID, "rack %d is not in 0..%d", index, c->nracks - 1);
    ai_rack_info r;
    snprintf(r.name, sizeof r.name, "%s", c->racks[index].name);
    r.uplink_Gbps = c->racks[index].uplink_Gbps;
    r.nodes = c->racks[index].nodes;
    *out = r;
    return AI_OK;
}

ai_status_t ai_cluster_coll_bound(const ai_cluster *cl, ai_coll coll, size_t bytes,
                                  int ranks_per_node, double *seconds)
{
    if ((int)coll < 0 || coll >= AI_COLL_COUNT)
        return util_fail(AI_ERR_INVALID, "unknown collective %d", (int)coll);
    model_net n;
    ai_status_t st = model_net_from_cluster(cl->c, ranks_per_node, &n);
    if (st != AI_OK)
        return st;
    *seconds = model_net_bound(&n, coll, (double)bytes);
    model_net_free(&n);
    return AI_OK;
}
