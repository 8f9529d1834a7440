/*
 * Tree cores, all rooted at index 0 of their group:
 *
 *  binomial           log2 p steps, whole buffer per hop: small messages.
 *  pipelined tree     a binary tree or a chain, in segments: interior nodes
 *                     forward segment k while segment k+1 arrives, so for
 *                     large messages the time approaches n/bandwidth plus
 *                     the pipeline's fill.
 *  scatter_allgather  van de Geijn: binomial scatter of p blocks, then the
 *                     ring allgather; ~2n bytes per rank, no pipeline fill.
 */
#include "comm/algo/core.h"

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
#undef BOFF
    /* Ring allgather of the blocks. */
    comm_blocks B = {NULL, count, es};
    return comm_core_ring_allgather(c, g, buf, &B, me);
}

ai_status_t comm_core_bcast_sized(ai_comm *c, const comm_group *g, void *buf, size_t count,
                                  size_t es)
{
    if (count * es <= ALGO_SMALL_BYTES)
        return comm_core_binomial_bcast(c, g, buf, count * es);
    return comm_core_scatter_allgather_bcast(c, g, buf, count, es);
}

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
