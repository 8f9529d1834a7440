/*
 * Reduce algorithms (result at the root only).
 *
 *  binomial      binomial tree: log2 p steps, whole buffer per step; small
 *                messages.
 *  binary_tree   binary tree pipelined in segments: interior nodes forward
 *                segment k while their children send k+1; large messages.
 *  rabenseifner  reduce-scatter by recursive halving, then binomial gather
 *                of the reduced blocks to the root: ~2n bytes per rank.
 *  hierarchical  reduce within each host to its leader (the root leads its
 *                own host), then among the leaders to the root.
 *
 * The cores are written for root index 0 of a group; the algorithms rotate
 * the communicator so the root is index 0.
 */
#include "comm/algo/algos.h"

/* Accumulator for a reduce: the root's recvbuf, scratch elsewhere. */
static ai_status_t reduce_acc(ai_comm *c, const coll_args *a, void **acc)
{
    if (c->rank == a->root) {
        *acc = a->recvbuf;
        return AI_OK;
    }
    return comm_scratch(c, ALGO_SLOT_WORK, a->count * ai_dtype_size(a->dt), acc);
}

ai_status_t comm_binomial_reduce(ai_comm *c, const coll_args *a)
{
    comm_group w = group_world(c), g = group_rotate(&w, a->root);
    void *acc;
    ai_status_t st = reduce_acc(c, a, &acc);
    if (st != AI_OK)
        return st;
    return comm_core_binomial_reduce(c, &g, a->sendbuf, acc, a->count, a->dt, a->op);
}

ai_status_t comm_binary_tree_reduce(ai_comm *c, const coll_args *a)
{
    comm_group w = group_world(c), g = group_rotate(&w, a->root);
    void *acc;
    ai_status_t st = reduce_acc(c, a, &acc);
    if (st != AI_OK)
        return st;
    return comm_core_tree_reduce(c, &g, a->sendbuf, acc, a->count, a->dt, a->op,
                                 a->chunk_bytes);
}

ai_status_t comm_rabenseifner_reduce(ai_comm *c, const coll_args *a)
{
    comm_group w = group_world(c), g = group_rotate(&w, a->root);
    void *acc;
    ai_status_t st = reduce_acc(c, a, &acc);
    if (st != AI_OK)
        return st;
    return comm_core_rab_reduce(c, &g, a->sendbuf, acc, a->count, a->dt, a->op);
}

/* Small messages: binomial; large: the pipelined binary tree. */
static ai_status_t reduce_by_size(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                  const coll_args *a)
{
    if (a->count * ai_dtype_size(a->dt) <= ALGO_SMALL_BYTES)
        return comm_core_binomial_reduce(c, g, in, acc, a->count, a->dt, a->op);
    return comm_core_tree_reduce(c, g, in, acc, a->count, a->dt, a->op, a->chunk_bytes);
}

ai_status_t comm_hierarchical_reduce(ai_comm *c, const coll_args *a)
{
    void *acc;
    ai_status_t st = reduce_acc(c, a, &acc);
    if (st != AI_OK)
        return st;
    if (c->nhosts == 1 || c->nhosts == c->size) {
        comm_group w = group_world(c), g = group_rotate(&w, a->root);
        return reduce_by_size(c, &g, a->sendbuf, acc, a);
    }
    int myhost = c->host_of[c->rank], roothost = c->host_of[a->root];
    /* 1. Within each host to its leader; on the root's host the root. */
    comm_group lh = group_host(c, myhost);
    comm_group local = group_rotate(&lh, myhost == roothost ? host_index_of(c, a->root) : 0);
    if ((st = reduce_by_size(c, &local, a->sendbuf, acc, a)) != AI_OK)
        return st;
    /* 2. Among the leaders to the root (acc is both input and output). */
    comm_group lg = group_leaders(c, a->root);
    comm_group leaders = group_rotate(&lg, roothost);
    if (leaders.me < 0)
        return AI_OK;
    return reduce_by_size(c, &leaders, acc, acc, a);
}
