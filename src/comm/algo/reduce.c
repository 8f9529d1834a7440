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

ai_status_t comm_core_binomial_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                      size_t count, ai_dtype dt, ai_op op)
{
    int n = g->n, me = g->me;
    size_t bytes = count * ai_dtype_size(dt);
    const void *cur = in;
    ai_status_t st;
    /* Children are me + 1, me + 2, me + 4, ... below my lowest set bit;
     * receive them one at a time: concurrent receive-reduces into the same
     * accumulator would race (the first must read `in`, later ones acc). */
    for (int mask = 1; mask < n; mask <<= 1) {
        if (me & mask)
            return comm_send(c, g_rank(g, me - mask), cur, bytes);
        if (me + mask < n) {
            comm_req r;
            comm_irecv_reduce(c, &r, g_rank(g, me + mask), acc, cur, count, dt, op);
            if ((st = comm_wait(c, &r, 1)) != AI_OK)
                return st;
            cur = acc;
        }
    }
    copy_if(acc, cur, bytes); /* root of a single-member group */
    return AI_OK;
}

ai_status_t comm_core_tree_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                  size_t count, ai_dtype dt, ai_op op, size_t seg_bytes)
{
    int n = g->n, me = g->me;
    size_t es = ai_dtype_size(dt), bytes = count * es;
    if (n == 1) {
        copy_if(acc, in, bytes);
        return AI_OK;
    }
    if (seg_bytes == 0)
        seg_bytes = ALGO_DEFAULT_SEGMENT;
    size_t seg = seg_bytes / es ? seg_bytes / es : 1; /* elements */
    int child[2], nchild = 0;
    for (int k = 1; k <= 2; k++)
        if (2 * me + k < n)
            child[nchild++] = g_rank(g, 2 * me + k);
    int parent = me > 0 ? g_rank(g, (me - 1) / 2) : -1;

    /* Segment k-1 travels to the parent while segment k arrives from the
     * first child: both in one comm_wait (the engine progresses only the
     * requests of the current wait). Children are reduced one after the
     * other: concurrent receive-reduces into one segment would race. */
    comm_req r[2];
    int spend = 0;
    ai_status_t st;
    for (size_t off = 0; off < count; off += seg) {
        size_t len = AI_MIN(seg, count - off);
        const unsigned char *cur = CBP(in, off * es);
        for (int i = 0; i < nchild; i++) {
            comm_irecv_reduce(c, &r[spend], child[i], BP(acc, off * es), cur, len, dt, op);
            if ((st = comm_wait(c, r, spend + 1)) != AI_OK)
                return st;
            spend = 0;
            cur = CBP(acc, off * es);
        }
        if (parent >= 0) {
            if (spend && (st = comm_wait(c, r, 1)) != AI_OK)
                return st;
            comm_isend(c, &r[0], parent, cur, len * es);
            spend = 1;
        }
    }
    if (spend && (st = comm_wait(c, r, 1)) != AI_OK)
        return st;
    return AI_OK;
}

ai_status_t comm_core_rab_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                 size_t count, ai_dtype dt, ai_op op)
{
    int n = g->n, me = g->me;
    size_t es = ai_dtype_size(dt), bytes = count * es;
    if (n == 1) {
        copy_if(acc, in, bytes);
        return AI_OK;
    }
    int pp = pow2_floor(n), rem = n - pp, nv = fold_virtual(me, rem);
    vlayout L = {VL_EVEN, count, pp, rem};
    ai_status_t st;

    if (nv < 0) {
        if ((st = comm_send(c, g_rank(g, me + 1), in, bytes)) != AI_OK)
            return st;
        /* The root (index 0) sits out when folding; its partner, virtual
         * rank 0, collects the result and hands it over at the end. */
        if (me == 0)
            return comm_recv(c, g_rank(g, 1), acc, bytes);
        return AI_OK;
    }
    const void *cur = in;
    if (me < 2 * rem) {
        comm_req r;
        comm_irecv_reduce(c, &r, g_rank(g, me - 1), acc, cur, count, dt, op);
        if ((st = comm_wait(c, &r, 1)) != AI_OK)
            return st;
        cur = acc;
    }
    if ((st = comm_core_halving(c, g, &L, nv, cur, acc, dt, op)) != AI_OK)
        return st;
    /* Binomial gather to virtual rank 0, mirroring the halving: a rank
     * still active at distance d has its low bits clear and holds blocks
     * [nv, nv + d); it receives [nv + d, nv + 2d) or sends its own. */
    for (int d = 1; d < pp; d <<= 1) {
        if (nv & d) {
            size_t o = vl_off(&L, nv), e = vl_off(&L, nv + d);
            return comm_send(c, g_rank(g, fold_real(nv - d, rem)), BP(acc, o * es),
                             (e - o) * es);
        }
        size_t o = vl_off(&L, nv + d), e = vl_off(&L, nv + 2 * d);
        if ((st = comm_recv(c, g_rank(g, fold_real(nv + d, rem)), BP(acc, o * es),
                            (e - o) * es)) != AI_OK)
            return st;
    }
    if (rem > 0) /* I am virtual 0 = index 1; the root sat out */
        return comm_send(c, g_rank(g, 0), acc, bytes);
    return AI_OK;
}

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
