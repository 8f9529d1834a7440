/*
 * The algorithm registry: every collective algorithm, by collective and
 * name. Order within a collective is the order ai_coll_algo_name() lists
 * (and the order the tuner explores); the first entry is also what a
 * one-rank communicator would pick.
 */
#include "comm/algo/algos.h"

#include <strings.h>

static const coll_algo registry[] = {
    {AI_ALLREDUCE, "ring", comm_ring_allreduce},
    {AI_ALLREDUCE, "recursive_doubling", comm_recursive_doubling_allreduce},
    {AI_ALLREDUCE, "rabenseifner", comm_rabenseifner_allreduce},
    {AI_ALLREDUCE, "reduce_bcast", comm_reduce_bcast_allreduce},
    {AI_ALLREDUCE, "hierarchical", comm_hierarchical_allreduce},
    {AI_ALLREDUCE, "weighted", comm_weighted_allreduce},
    {AI_ALLREDUCE, "direct", comm_direct_allreduce},
    {AI_ALLREDUCE, "single_copy", comm_single_copy_allreduce},

    {AI_REDUCE_SCATTER, "ring", comm_ring_reduce_scatter},
    {AI_REDUCE_SCATTER, "recursive_halving", comm_recursive_halving_reduce_scatter},
    {AI_REDUCE_SCATTER, "pairwise", comm_pairwise_reduce_scatter},

    {AI_ALLGATHER, "ring", comm_ring_allgather},
    {AI_ALLGATHER, "recursive_doubling", comm_recursive_doubling_allgather},
    {AI_ALLGATHER, "bruck", comm_bruck_allgather},
    {AI_ALLGATHER, "hierarchical", comm_hierarchical_allgather},

    {AI_BROADCAST, "binomial", comm_binomial_broadcast},
    {AI_BROADCAST, "binary_tree", comm_binary_tree_broadcast},
    {AI_BROADCAST, "chain", comm_chain_broadcast},
    {AI_BROADCAST, "scatter_allgather", comm_scatter_allgather_broadcast},
    {AI_BROADCAST, "hierarchical", comm_hierarchical_broadcast},

    {AI_REDUCE, "binomial", comm_binomial_reduce},
    {AI_REDUCE, "binary_tree", comm_binary_tree_reduce},
    {AI_REDUCE, "rabenseifner", comm_rabenseifner_reduce},
    {AI_REDUCE, "hierarchical", comm_hierarchical_reduce},

    {AI_ALLTOALL, "pairwise", comm_pairwise_alltoall},
    {AI_ALLTOALL, "linear", comm_linear_alltoall},
    {AI_ALLTOALL, "bruck", comm_bruck_alltoall},

    {AI_BARRIER, "dissemination", comm_dissemination_barrier},
    {AI_BARRIER, "tree", comm_tree_barrier},
};

const coll_algo *comm_algo_find(ai_coll coll, const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < AI_ARRAY_LEN(registry); i++)
        if (registry[i].coll == coll && strcasecmp(registry[i].name, name) == 0)
            return &registry[i];
    return NULL;
}

int comm_algo_count(ai_coll coll)
{
    int n = 0;
    for (size_t i = 0; i < AI_ARRAY_LEN(registry); i++)
        n += registry[i].coll == coll;
    return n;
}

const coll_algo *comm_algo_at(ai_coll coll, int index)
{
    for (size_t i = 0; i < AI_ARRAY_LEN(registry); i++)
        if (registry[i].coll == coll && index-- == 0)
            return &registry[i];
    return NULL;
}
