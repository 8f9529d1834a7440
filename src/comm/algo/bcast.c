/*
 * Broadcast algorithms.
 *
 *  binomial           binomial tree, whole buffer per hop: log2 p steps;
 *                     small messages.
 *  binary_tree        binary tree pipelined in segments (chunk_bytes).
 *  chain              a pipelined chain root -> root+1 -> ...: every link
 *                     carries the message once, so for large messages the
 *                     time approaches n/bandwidth + (p-1) segment times.
 *  scatter_allgather  van de Geijn: binomial scatter of p blocks, ring
 *                     allgather; ~2n bytes per rank, no pipeline fill.
 *  hierarchical       among the host leaders (the root leads its host),
 *                     then within each host.
 */
#include "comm/algo/algos.h"

static comm_group world_from_root(const ai_comm *c, int root)
{
    comm_group w = group_world(c);
    return group_rotate(&w, root);
}

ai_status_t comm_binomial_broadcast(ai_comm *c, const coll_args *a)
{
    comm_group g = world_from_root(c, a->root);
    return comm_core_binomial_bcast(c, &g, a->recvbuf, a->count * ai_dtype_size(a->dt));
}

ai_status_t comm_binary_tree_broadcast(ai_comm *c, const coll_args *a)
{
    comm_group g = world_from_root(c, a->root);
    return comm_core_pipe_bcast(c, &g, a->recvbuf, a->count * ai_dtype_size(a->dt), TREE_BINARY,
                                a->chunk_bytes);
}

ai_status_t comm_chain_broadcast(ai_comm *c, const coll_args *a)
{
    comm_group g = world_from_root(c, a->root);
    return comm_core_pipe_bcast(c, &g, a->recvbuf, a->count * ai_dtype_size(a->dt), TREE_CHAIN,
                                a->chunk_bytes);
}

ai_status_t comm_scatter_allgather_broadcast(ai_comm *c, const coll_args *a)
{
    comm_group g = world_from_root(c, a->root);
    return comm_core_scatter_allgather_bcast(c, &g, a->recvbuf, a->count,
                                             ai_dtype_size(a->dt));
}

ai_status_t comm_hierarchical_broadcast(ai_comm *c, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt);
    if (c->nhosts == 1 || c->nhosts == c->size) {
        comm_group g = world_from_root(c, a->root);
        return comm_core_bcast_sized(c, &g, a->recvbuf, a->count, es);
    }
    int myhost = c->host_of[c->rank], roothost = c->host_of[a->root];
    ai_status_t st;
    comm_group lg = group_leaders(c, a->root);
    comm_group leaders = group_rotate(&lg, roothost);
    if (leaders.me >= 0 &&
        (st = comm_core_bcast_sized(c, &leaders, a->recvbuf, a->count, es)) != AI_OK)
        return st;
    comm_group lh = group_host(c, myhost);
    comm_group local = group_rotate(&lh, myhost == roothost ? host_index_of(c, a->root) : 0);
    return comm_core_bcast_sized(c, &local, a->recvbuf, a->count, es);
}
