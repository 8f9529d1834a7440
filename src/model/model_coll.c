/*
 * Alpha-beta (Hockney) collective costs. The closed forms are the standard
 * ones of Thakur, Rabenseifner and Gropp, "Optimization of Collective
 * Communication Operations in MPICH" (IJHPCA 2005) and Chan et al.,
 * "Collective communication: theory, practice, and experience" (CCPE 2007):
 * ring (bandwidth-optimal) and tree-like (recursive doubling/halving,
 * binomial) algorithms. The planner's step model (model_step.c) prices
 * its collectives with these. The runtime's choice for `auto` and the
 * learner's priors come from the network model instead (model_net.c,
 * through comm/select/select.c), which knows the links' sharing.
 */
#include "model/model.h"

#include <math.h>

static double log2ceil(int p)
{
    int k = 0;
    while ((1 << k) < p)
        k++;
    return k;
}

double model_coll_time(ai_coll coll, model_algo algo, int p, double bytes, double a, double b)
{
    if (p <= 1)
        return 0;
    double pm1 = p - 1, frac = pm1 / p, lg = log2ceil(p);
    if (algo == MODEL_ALGO_RING) {
        switch (coll) {
        case AI_ALLREDUCE: return 2 * pm1 * a + 2 * frac * bytes * b;
        case AI_REDUCE_SCATTER:
        case AI_ALLGATHER:
        case AI_ALLTOALL: return pm1 * a + frac * bytes * b;
        case AI_BROADCAST:
        case AI_REDUCE: return pm1 * a + bytes * b;
        case AI_BARRIER: return 2 * pm1 * a;
        default: return INFINITY;
        }
    }
    switch (coll) {
    case AI_ALLREDUCE: return lg * (a + bytes * b);
    case AI_REDUCE_SCATTER:
    case AI_ALLGATHER: return lg * a + frac * bytes * b;
    /* Bruck-style alltoall: log p rounds, each moving half the data. */
    case AI_ALLTOALL: return lg * a + lg * bytes / 2 * b;
    case AI_BROADCAST:
    case AI_REDUCE: return lg * (a + bytes * b);
    case AI_BARRIER: return 2 * lg * a;
    default: return INFINITY;
    }
}

double model_coll_best(ai_coll coll, int p, double bytes, double a, double b, model_algo *algo_out)
{
    double best = INFINITY;
    model_algo arg = MODEL_ALGO_RING;
    for (int k = 0; k < MODEL_ALGO_COUNT; k++) {
        double t = model_coll_time(coll, (model_algo)k, p, bytes, a, b);
        if (t < best) {
            best = t;
            arg = (model_algo)k;
        }
    }
    if (algo_out)
        *algo_out = arg;
    return best;
}

/*
 * On real nodes a ring that leaves a node is limited by the slower of the
 * two link kinds it uses, and every step pays the larger latency. A group
 * with k members on each node runs k rings side by side (NCCL's channels),
 * each leaving the node through a different member's NIC: of each ring's
 * hops only one per node crosses the network, so the group's bus bandwidth
 * across nodes is k NIC shares (nccl-tests across DGX nodes: bus bandwidth
 * near the node's total NIC rate when all 8 GPUs take part, one NIC's rate
 * when one GPU per node does), and the NVLink hops bound it from above.
 * A group that stays inside one node only sees the intra links.
 */
double model_group_coll_time(ai_coll coll, const model_group *g, double bytes, double link_eff)
{
    if (g->ranks <= 1)
        return 0;
    int per_node = AI_MAX(1, AI_MIN(g->per_node, g->ranks));
    double bw, alpha;
    if (per_node >= g->ranks) {
        bw = g->intra_Bps;
        alpha = g->intra_alpha_s;
    } else {
        bw = per_node > 1 ? AI_MIN(g->intra_Bps, per_node * g->inter_Bps) : g->inter_Bps;
        alpha = g->inter_alpha_s;
    }
    return model_coll_best(coll, g->ranks, bytes, alpha, 1.0 / (bw * link_eff), NULL);
}
