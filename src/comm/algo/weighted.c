/*
 * Weighted allreduce: the heterogeneity-aware allreduce.
 *
 * Why. On a switch whose hosts have different NIC rates, the ring moves
 * 2 (h-1)/h n bytes through every NIC, so the slowest NIC sets the pace:
 * 2 (h-1)/h n / B_min. But the cut bound for that host is only n / B_min
 * (model_net.h): it must send its contribution once and receive the result
 * once. A reduce-scatter + allgather done as direct exchanges, where host i
 * owns a shard s_i of the vector, moves n + (h-2) s_i bytes through host
 * i's NIC in each direction; giving slow hosts small (even empty) shards
 * and fast hosts large ones reaches the bound whenever the fast hosts have
 * the headroom (model_net_weighted_shards solves for the shards). Both
 * directions of every NIC must be busy at once for that, so the two phases
 * are pipelined over segments: while segment k is gathered, segment k+1 is
 * reduced.
 *
 * Shards come from measured host bandwidths (probe.c computes them once per
 * measurement), identical on every leader. Ranks sharing a host first
 * reduce to their host leader through shared memory and get the result
 * back from it at the end (as in the hierarchical algorithm), so only
 * leaders use the network.
 */
#include "comm/algo/algos.h"
#include "comm/select/probe.h"
#include "model/model_net.h"

#include <math.h>
#include <stdlib.h>

/* Element range of segment k of leader i's shard [first[i], first[i+1]). */
static void seg_range(const size_t *first, int i, int m, int k, size_t *off, size_t *len)
{
    size_t n = first[i + 1] - first[i];
    *off = first[i] + part_off(n, m, k);
    *len = part_len(n, m, k);
}

static ai_status_t leaders_exchange(ai_comm *c, const comm_group *g, void *buf, size_t count,
                                    ai_dtype dt, ai_op op, const size_t *first, int m)
{
    int h = g->n, me = g->me;
    size_t es = ai_dtype_size(dt);
    comm_req *reqs;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_AUX2, (size_t)4 * (size_t)h * sizeof(comm_req),
                                  (void **)&reqs);
    if (st != AI_OK)
        return st;
    (void)count;
    /* Step t reduces segment t (t < m) and gathers segment t-1 (t >= 1).
     * To each peer: first the gather message, then the reduce message;
     * receivers post in the same order (FIFO matching). */
    for (int t = 0; t <= m; t++) {
        int n = 0;
        for (int d = 1; d < h; d++) {
            int j = (me + d) % h, from = (me - d + h) % h;
            int rj = g_rank(g, j), rf = g_rank(g, from);
            size_t off, len;
            if (t >= 1) {
                seg_range(first, me, m, t - 1, &off, &len);
                comm_isend(c, &reqs[n++], rj, BP(buf, off * es), len * es);
                seg_range(first, from, m, t - 1, &off, &len);
                comm_irecv(c, &reqs[n++], rf, BP(buf, off * es), len * es);
            }
            if (t < m) {
                seg_range(first, j, m, t, &off, &len);
                comm_isend(c, &reqs[n++], rj, BP(buf, off * es), len * es);
                seg_range(first, me, m, t, &off, &len);
                comm_irecv_reduce(c, &reqs[n++], rf, BP(buf, off * es), NULL, len, dt, op);
            }
        }
        if ((st = comm_wait(c, reqs, n)) != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_weighted_allreduce(ai_comm *c, const coll_args *a)
{
    if (c->nhosts == 1) {
        comm_group w = group_world(c);
        return comm_core_ring_allreduce(c, &w, a->sendbuf, a->recvbuf, a->count, a->dt, a->op,
                                        a->chunk_bytes);
    }
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    const comm_links *links;
    ai_status_t st = comm_links_get(c, 0, &links);
    if (st != AI_OK)
        return st;
    /* 1. Within the host: reduce to the leader. */
    if ((st = comm_core_host_reduce(c, a)) != AI_OK)
        return st;

    /* 2. Leaders: weighted direct reduce-scatter + allgather, pipelined. */
    comm_group leaders = group_leaders(c, -1);
    if (leaders.me >= 0) {
        int h = leaders.n;
        const double *frac = links->weighted_frac;
        size_t *first;
        st = comm_scratch(c, ALGO_SLOT_AUX, ((size_t)h + 1) * sizeof(size_t), (void **)&first);
        if (st != AI_OK)
            return st;
        /* Whole elements, summing to count, identical on every leader. */
        size_t given = 0;
        first[0] = 0;
        for (int i = 0; i < h; i++) {
            size_t len = i == h - 1 ? a->count - given
                                    : AI_MIN(a->count - given, (size_t)floor(frac[i] * (double)a->count));
            given += len;
            first[i + 1] = given;
        }
        int m = model_net_weighted_segments((double)bytes, a->chunk_bytes);
        st = leaders_exchange(c, &leaders, a->recvbuf, a->count, a->dt, a->op, first, m);
        if (st != AI_OK)
            return st;
    }

    /* 3. Within the host: the leader broadcasts the result. */
    return comm_core_host_bcast(c, a);
}
