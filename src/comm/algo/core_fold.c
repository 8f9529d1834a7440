/*
 * The non-power-of-two fold (core.h, fold_virtual): the first 2 rem
 * members pair up, the even one hands its data to the odd one and sits
 * out, the pp that remain run the power-of-two algorithm, and each odd
 * partner hands the result back. Every recursive halving / doubling
 * algorithm takes these two extra steps the same way, so they are here
 * once.
 */
#include "comm/algo/core.h"

ai_status_t comm_core_fold_leave(ai_comm *c, const comm_group *g, const void *sbuf,
                                 size_t sbytes, void *rbuf, size_t rbytes)
{
    int partner = g_rank(g, g->me + 1);
    ai_status_t st = comm_send(c, partner, sbuf, sbytes);
    if (st != AI_OK || !rbuf)
        return st;
    return comm_recv(c, partner, rbuf, rbytes);
}

ai_status_t comm_core_fold_join_reduce(ai_comm *c, const comm_group *g, const comm_fold *f,
                                       void *acc, const void **cur, size_t count, ai_dtype dt,
                                       ai_op op)
{
    if (g->me >= 2 * f->rem)
        return AI_OK;
    comm_req r;
    comm_irecv_reduce(c, &r, g_rank(g, g->me - 1), acc, *cur, count, dt, op);
    ai_status_t st = comm_wait(c, &r, 1);
    if (st == AI_OK)
        *cur = acc;
    return st;
}

ai_status_t comm_core_fold_join_recv(ai_comm *c, const comm_group *g, const comm_fold *f,
                                     void *buf, size_t bytes)
{
    if (g->me >= 2 * f->rem)
        return AI_OK;
    return comm_recv(c, g_rank(g, g->me - 1), buf, bytes);
}

ai_status_t comm_core_fold_return(ai_comm *c, const comm_group *g, const comm_fold *f,
                                  const void *buf, size_t bytes)
{
    if (g->me >= 2 * f->rem)
        return AI_OK;
    return comm_send(c, g_rank(g, g->me - 1), buf, bytes);
}

ai_status_t comm_core_fold_allreduce_in(ai_comm *c, const comm_group *g, const comm_fold *f,
                                        const void *in, void *out, size_t count, ai_dtype dt,
                                        ai_op op, const void **cur, int *done)
{
    size_t bytes = count * ai_dtype_size(dt);
    *done = 1;
    if (g->n == 1) {
        copy_if(out, in, bytes);
        return AI_OK;
    }
    if (f->nv < 0) /* folded out: hand my data over, get the result back */
        return comm_core_fold_leave(c, g, in, bytes, out, bytes);
    *done = 0;
    *cur = in;
    return comm_core_fold_join_reduce(c, g, f, out, cur, count, dt, op);
}
