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

#define MAX_TREE_CHILDREN 32 /* binomial fan-out is at most log2(INT_MAX) */

ai_status_t comm_core_binomial_bcast(ai_comm *c, const comm_group *g, void *buf, size_t bytes)
{
    int n = g->n, me = g->me, mask;
    ai_status_t st;
    if (n == 1 || bytes == 0)
        return AI_OK;
    if (me == 0) {
        mask = pow2_floor(n - 1) * 2;
    } else {
        mask = me & -me; /* my parent is me - lowest set bit */
        if ((st = comm_recv(c, g_rank(g, me - mask), buf, bytes)) != AI_OK)
            return st;
    }
    /* Children me + m for m below my lowest bit; largest subtree first so
     * the deepest branch starts earliest. All sends go out together. */
    comm_req r[MAX_TREE_CHILDREN];
    int nr = 0;
    for (int m = mask >> 1; m >= 1; m >>= 1)
        if (me + m < n)
            comm_isend(c, &r[nr++], g_rank(g, me + m), buf, bytes);
    return comm_wait(c, r, nr);
}

ai_status_t comm_core_pipe_bcast(ai_comm *c, const comm_group *g, void *buf, size_t bytes,
                                 tree_kind kind, size_t seg_bytes)
{
    int n = g->n, me = g->me;
    if (n == 1 || bytes == 0)
        return AI_OK;
    if (seg_bytes == 0)
        seg_bytes = ALGO_DEFAULT_SEGMENT;
    int parent = -1, child[2], nchild = 0;
    if (kind == TREE_BINARY) {
        if (me > 0)
            parent = g_rank(g, (me - 1) / 2);
        for (int k = 1; k <= 2; k++)
            if (2 * me + k < n)
                child[nchild++] = g_rank(g, 2 * me + k);
    } else {
        if (me > 0)
            parent = g_rank(g, me - 1);
        if (me + 1 < n)
            child[nchild++] = g_rank(g, me + 1);
    }
    size_t nseg = (bytes + seg_bytes - 1) / seg_bytes;
#define SEG_OFF(k) ((k) * seg_bytes)
#define SEG_LEN(k) AI_MIN(seg_bytes, bytes - (k) * seg_bytes)

    /* Pipeline: while segment k goes to the children, segment k+1 comes in
     * from the parent. Both are completed by one comm_wait: the engine
     * only progresses the requests of the wait in progress, so anything
     * meant to overlap must be waited together. */
    comm_req r[3];
    ai_status_t st;
    if (parent >= 0) {
        comm_irecv(c, &r[0], parent, buf, SEG_LEN(0));
        if ((st = comm_wait(c, r, 1)) != AI_OK)
            return st;
    }
    for (size_t k = 0; k < nseg; k++) {
        int nr = 0;
        if (parent >= 0 && k + 1 < nseg)
            comm_irecv(c, &r[nr++], parent, BP(buf, SEG_OFF(k + 1)), SEG_LEN(k + 1));
        for (int i = 0; i < nchild; i++)
            comm_isend(c, &r[nr++], child[i], BP(buf, SEG_OFF(k)), SEG_LEN(k));
        if ((st = comm_wait(c, r, nr)) != AI_OK)
            return st;
    }
#undef SEG_OFF
#undef SEG_LEN
    return AI_OK;
}

ai_status_t comm_core_scatter_allgather_bcast(ai_comm *c, const comm_group *g, void *buf,
                                              size_t count, size_t es)
{
    int n = g->n, me = g->me, mask;
    ai_status_t st;
    if (n == 1 || count == 0)
        return AI_OK;
#define BOFF(i) (part_off(count, n, (i)) * es)
    /* Scatter: block i goes to index i. A node's binomial subtree is
     * [me, me + lowest bit), a contiguous range of blocks, so every hop is
     * one message. */
    if (me == 0) {
        mask = pow2_floor(n - 1) * 2;
    } else {
        mask = me & -me;
        int end = AI_MIN(me + mask, n);
        if ((st = comm_recv(c, g_rank(g, me - mask), BP(buf, BOFF(me)),
                            BOFF(end) - BOFF(me))) != AI_OK)
            return st;
    }
    comm_req r[MAX_TREE_CHILDREN];
    int nr = 0;
    for (int m = mask >> 1; m >= 1; m >>= 1) {
        int ch = me + m;
        if (ch < n) {
            int end = AI_MIN(ch + m, n);
            comm_isend(c, &r[nr++], g_rank(g, ch), BP(buf, BOFF(ch)), BOFF(end) - BOFF(ch));
        }
    }
    if ((st = comm_wait(c, r, nr)) != AI_OK)
        return st;
    /* Ring allgather of the blocks. */
    int right = g_rank(g, (me + 1) % n), left = g_rank(g, (me + n - 1) % n);
    for (int s = 0; s < n - 1; s++) {
        int sb = ((me - s) % n + n) % n, rb = ((me - s - 1) % n + n) % n;
        if ((st = comm_sendrecv(c, right, BP(buf, BOFF(sb)), BOFF(sb + 1) - BOFF(sb), left,
                                BP(buf, BOFF(rb)), BOFF(rb + 1) - BOFF(rb))) != AI_OK)
            return st;
    }
#undef BOFF
    return AI_OK;
}

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

static ai_status_t bcast_by_size(ai_comm *c, const comm_group *g, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt);
    if (a->count * es <= ALGO_SMALL_BYTES)
        return comm_core_binomial_bcast(c, g, a->recvbuf, a->count * es);
    return comm_core_scatter_allgather_bcast(c, g, a->recvbuf, a->count, es);
}

ai_status_t comm_hierarchical_broadcast(ai_comm *c, const coll_args *a)
{
    if (c->nhosts == 1 || c->nhosts == c->size) {
        comm_group g = world_from_root(c, a->root);
        return bcast_by_size(c, &g, a);
    }
    int myhost = c->host_of[c->rank], roothost = c->host_of[a->root];
    ai_status_t st;
    comm_group lg = group_leaders(c, a->root);
    comm_group leaders = group_rotate(&lg, roothost);
    if (leaders.me >= 0 && (st = bcast_by_size(c, &leaders, a)) != AI_OK)
        return st;
    comm_group lh = group_host(c, myhost);
    comm_group local = group_rotate(&lh, myhost == roothost ? host_index_of(c, a->root) : 0);
    return bcast_by_size(c, &local, a);
}
