/*
 * The collective algorithms as the registry (registry.c) and coll.c see
 * them: one coll_algo_fn per algorithm. Their building blocks are in
 * core.h.
 */
#ifndef AI_COMM_ALGOS_H
#define AI_COMM_ALGOS_H

#include "comm/algo/core.h"

#define ALGO_SLOT_INPLACE 3 /* coll.c: copy of an in-place alltoall input */

/* coll_algo_fn implementations, one file per collective, registered in
 * registry.c. */

ai_status_t comm_ring_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_recursive_doubling_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_rabenseifner_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_reduce_bcast_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_hierarchical_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_weighted_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_direct_allreduce(ai_comm *c, const coll_args *a);
ai_status_t comm_single_copy_allreduce(ai_comm *c, const coll_args *a);

ai_status_t comm_ring_reduce_scatter(ai_comm *c, const coll_args *a);
ai_status_t comm_recursive_halving_reduce_scatter(ai_comm *c, const coll_args *a);
ai_status_t comm_pairwise_reduce_scatter(ai_comm *c, const coll_args *a);

ai_status_t comm_ring_allgather(ai_comm *c, const coll_args *a);
ai_status_t comm_recursive_doubling_allgather(ai_comm *c, const coll_args *a);
ai_status_t comm_bruck_allgather(ai_comm *c, const coll_args *a);
ai_status_t comm_hierarchical_allgather(ai_comm *c, const coll_args *a);

ai_status_t comm_binomial_broadcast(ai_comm *c, const coll_args *a);
ai_status_t comm_binary_tree_broadcast(ai_comm *c, const coll_args *a);
ai_status_t comm_chain_broadcast(ai_comm *c, const coll_args *a);
ai_status_t comm_scatter_allgather_broadcast(ai_comm *c, const coll_args *a);
ai_status_t comm_hierarchical_broadcast(ai_comm *c, const coll_args *a);

ai_status_t comm_binomial_reduce(ai_comm *c, const coll_args *a);
ai_status_t comm_binary_tree_reduce(ai_comm *c, const coll_args *a);
ai_status_t comm_rabenseifner_reduce(ai_comm *c, const coll_args *a);
ai_status_t comm_hierarchical_reduce(ai_comm *c, const coll_args *a);

ai_status_t comm_pairwise_alltoall(ai_comm *c, const coll_args *a);
ai_status_t comm_linear_alltoall(ai_comm *c, const coll_args *a);
ai_status_t comm_bruck_alltoall(ai_comm *c, const coll_args *a);

ai_status_t comm_dissemination_barrier(ai_comm *c, const coll_args *a);
ai_status_t comm_tree_barrier(ai_comm *c, const coll_args *a);

#endif
