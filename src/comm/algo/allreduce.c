/*
 * Allreduce algorithms, built on the cores (core.h).
 *
 *  ring                reduce-scatter ring + allgather ring; bandwidth
 *                      optimal (2 (p-1)/p n bytes per rank), 2 (p-1) steps.
 *  recursive_doubling  log2 p full-buffer exchanges; latency optimal, for
 *                      small messages.
 *  rabenseifner        reduce-scatter by recursive halving + allgather by
 *                      recursive doubling: 2 log2 p steps, ring's bandwidth.
 *  reduce_bcast        binomial reduce to 0, binomial broadcast.
 *  hierarchical        reduce within each host to its leader, ring allreduce
 *                      among leaders, broadcast within each host: only the
 *                      leaders touch the (slow) network.
 *  direct              one host: every rank writes its input into a shared
 *                      slot and reduces all of them (one flag round trip,
 *                      what Open MPI's sm coll and NCCL's LL protocol do
 *                      for small messages); elsewhere recursive_doubling.
 */
#include "comm/algo/algos.h"

/* --------------------------------------------------------------- ring */

ai_status_t comm_ring_allreduce(ai_comm *c, const coll_args *a)
{
    comm_group g = group_world(c);
    return comm_core_ring_allreduce(c, &g, a->sendbuf, a->recvbuf, a->count, a->dt, a->op,
                                    a->chunk_bytes);
}

/* ------------------------------------------------ recursive doubling */

ai_status_t comm_recursive_doubling_allreduce(ai_comm *c, const coll_args *a)
{
    size_t bytes = a->count * ai_dtype_size(a->dt);
    comm_group g = group_world(c);
    comm_fold f = fold_of(&g);
    int nv = f.nv, done;
    const void *cur;
    ai_status_t st = comm_core_fold_allreduce_in(c, &g, &f, a->sendbuf, a->recvbuf, a->count,
                                                 a->dt, a->op, &cur, &done);
    if (st != AI_OK || done)
        return st;
    void *tmp;
    if ((st = comm_scratch(c, ALGO_SLOT_WORK, bytes, &tmp)) != AI_OK)
        return st;
    /* Each exchange sends the whole current buffer while the partner's
     * data is reduced into the other one: sending and reducing into the
     * same buffer would race. cur ping-pongs between recvbuf and tmp. */
    for (int mask = 1; mask < f.pp; mask <<= 1) {
        int peer = fold_real(nv ^ mask, f.rem);
        void *dst = (cur == a->recvbuf) ? tmp : a->recvbuf;
        st = comm_sendrecv_reduce(c, peer, cur, bytes, peer, dst, cur, a->count, a->dt, a->op);
        if (st != AI_OK)
            return st;
        cur = dst;
    }
    copy_if(a->recvbuf, cur, bytes);
    return comm_core_fold_return(c, &g, &f, a->recvbuf, bytes);
}

/* ------------------------------------------------------- rabenseifner */

ai_status_t comm_rabenseifner_allreduce(ai_comm *c, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    comm_group g = group_world(c);
    comm_fold f = fold_of(&g);
    int nv = f.nv, done;
    vlayout L = {VL_EVEN, a->count, f.pp, f.rem};
    const void *in; /* after the fold: my data and the folded neighbour's */
    ai_status_t st = comm_core_fold_allreduce_in(c, &g, &f, a->sendbuf, a->recvbuf, a->count,
                                                 a->dt, a->op, &in, &done);
    if (st != AI_OK || done)
        return st;
    if ((st = comm_core_halving(c, &g, &L, nv, in, a->recvbuf, a->dt, a->op)) != AI_OK)
        return st;
    if ((st = comm_core_doubling(c, &g, &L, nv, a->recvbuf, es)) != AI_OK)
        return st;
    return comm_core_fold_return(c, &g, &f, a->recvbuf, bytes);
}

/* ------------------------------------------------------ reduce_bcast */

ai_status_t comm_reduce_bcast_allreduce(ai_comm *c, const coll_args *a)
{
    comm_group g = group_world(c);
    size_t bytes = a->count * ai_dtype_size(a->dt);
    /* recvbuf is valid everywhere, so interior nodes accumulate in it. */
    ai_status_t st = comm_core_binomial_reduce(c, &g, a->sendbuf, a->recvbuf, a->count, a->dt,
                                               a->op);
    if (st != AI_OK)
        return st;
    return comm_core_binomial_bcast(c, &g, a->recvbuf, bytes);
}

/* ------------------------------------------------------ hierarchical */

ai_status_t comm_hierarchical_allreduce(ai_comm *c, const coll_args *a)
{
    /* One host (all shared memory) or one rank per host (all network):
     * there is no hierarchy to exploit, run the flat ring. */
    if (c->nhosts == 1 || c->nhosts == c->size)
        return comm_ring_allreduce(c, a);

    ai_status_t st = comm_core_host_reduce(c, a);
    if (st != AI_OK)
        return st;

    /* 2. Leaders allreduce across hosts with the ring: bandwidth optimal on
     * the network, which is where the time goes. */
    comm_group leaders = group_leaders(c, -1);
    if (leaders.me >= 0) {
        st = comm_core_ring_allreduce(c, &leaders, a->recvbuf, a->recvbuf, a->count, a->dt,
                                      a->op, a->chunk_bytes);
        if (st != AI_OK)
            return st;
    }
    return comm_core_host_bcast(c, a);
}


/* ------------------------------------------------------------- direct */

ai_status_t comm_direct_allreduce(ai_comm *c, const coll_args *a)
{
    if (!comm_shm_direct_ok(c))
        return comm_recursive_doubling_allreduce(c, a);
    return comm_shm_allreduce(c, a->sendbuf, a->recvbuf, a->count, a->dt, a->op);
}
