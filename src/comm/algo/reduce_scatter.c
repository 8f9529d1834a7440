/*
 * Reduce-scatter algorithms (sendbuf: count * p elements, block r is
 * reduced over all ranks into rank r's recvbuf of count elements).
 *
 *  ring               p-1 steps, each forwards one partially reduced block
 *                     to the right; bandwidth optimal, two blocks of scratch.
 *  recursive_halving  log2 p steps halving the exchanged range; folding for
 *                     non-powers of two (see fold_virtual).
 *  pairwise           step k sends block rank+k straight to its owner and
 *                     receive-reduces rank-k's contribution: no forwarding,
 *                     no scratch, p-1 steps.
 */
#include "comm/algo/algos.h"

ai_status_t comm_ring_reduce_scatter(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t es = ai_dtype_size(a->dt), unit = a->count * es;
    const unsigned char *in = a->sendbuf;
    if (n == 1) {
        copy_if(a->recvbuf, in, unit);
        return AI_OK;
    }
    unsigned char *tmp;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_WORK, 2 * unit, (void **)&tmp);
    if (st != AI_OK)
        return st;
    int right = (me + 1) % n, left = (me + n - 1) % n;
    /* Step s sends the partial of block me-s-1 (my input at s = 0, else
     * what arrived at step s-1) and receive-reduces block me-s-2 with my
     * input. Partials ping-pong between two scratch blocks; the last step
     * (block me itself) lands in recvbuf. */
    for (int s = 0; s < n - 1; s++) {
        int sb = ((me - s - 1) % n + 2 * n) % n, rb = ((me - s - 2) % n + 2 * n) % n;
        const unsigned char *sp = s == 0 ? in + (size_t)sb * unit : tmp + (size_t)((s - 1) & 1) * unit;
        unsigned char *dst = s == n - 2 ? (unsigned char *)a->recvbuf : tmp + (size_t)(s & 1) * unit;
        if ((st = comm_sendrecv_reduce(c, right, sp, unit, left, dst, in + (size_t)rb * unit,
                                       a->count, a->dt, a->op)) != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_recursive_halving_reduce_scatter(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t es = ai_dtype_size(a->dt), unit = a->count * es, total = unit * (size_t)n;
    const unsigned char *in = a->sendbuf;
    if (n == 1) {
        copy_if(a->recvbuf, in, unit);
        return AI_OK;
    }
    comm_group g = group_world(c);
    comm_fold f = fold_of(&g);
    vlayout L = {VL_FOLDED, a->count, f.pp, f.rem};
    ai_status_t st;
    if (f.nv < 0)
        return comm_core_fold_leave(c, &g, in, total, a->recvbuf, unit);
    unsigned char *acc;
    if ((st = comm_scratch(c, ALGO_SLOT_WORK, total, (void **)&acc)) != AI_OK)
        return st;
    const void *cur = in;
    st = comm_core_fold_join_reduce(c, &g, &f, acc, &cur, a->count * (size_t)n, a->dt, a->op);
    if (st != AI_OK)
        return st;
    if ((st = comm_core_halving(c, &g, &L, f.nv, cur, acc, a->dt, a->op)) != AI_OK)
        return st;
    /* acc now holds the reduced blocks of the ranks I stand for. */
    memcpy(a->recvbuf, acc + (size_t)me * unit, unit);
    return comm_core_fold_return(c, &g, &f, acc + (size_t)(me - 1) * unit, unit);
}

ai_status_t comm_pairwise_reduce_scatter(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t unit = a->count * ai_dtype_size(a->dt);
    const unsigned char *in = a->sendbuf;
    const void *src = in + (size_t)me * unit;
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n, from = (me - k + n) % n;
        ai_status_t st = comm_sendrecv_reduce(c, to, in + (size_t)to * unit, unit, from,
                                              a->recvbuf, src, a->count, a->dt, a->op);
        if (st != AI_OK)
            return st;
        src = a->recvbuf;
    }
    copy_if(a->recvbuf, src, unit); /* single rank */
    return AI_OK;
}
