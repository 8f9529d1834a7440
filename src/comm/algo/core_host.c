/*
 * Two-level steps of the hierarchical algorithms: within each host over
 * shared memory, so that only the host leaders (local index 0) touch the
 * network.
 */
#include "comm/algo/core.h"

/* Reduce to the host leader (local index 0). Small messages: binomial
 * tree (log steps). Large: reduce-scatter + gather, which moves each byte
 * about twice instead of log2(local) times. recvbuf is valid at every rank,
 * so it is the accumulator everywhere. */
ai_status_t comm_core_host_reduce(ai_comm *c, const coll_args *a)
{
    size_t bytes = a->count * ai_dtype_size(a->dt);
    comm_group local = group_host(c, c->host_of[c->rank]);
    if (bytes <= ALGO_SMALL_BYTES || local.n == 1)
        return comm_core_binomial_reduce(c, &local, a->sendbuf, a->recvbuf, a->count, a->dt, a->op);
    return comm_core_rab_reduce(c, &local, a->sendbuf, a->recvbuf, a->count, a->dt, a->op);
}

/* The host leader's recvbuf to every rank of the host. */
ai_status_t comm_core_host_bcast(ai_comm *c, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt);
    comm_group local = group_host(c, c->host_of[c->rank]);
    return comm_core_bcast_sized(c, &local, a->recvbuf, a->count, es);
}
