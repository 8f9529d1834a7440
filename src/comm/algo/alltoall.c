/*
 * Alltoall algorithms (count elements from every rank to every rank;
 * sendbuf and recvbuf never alias here, coll.c resolved in-place calls).
 *
 *  pairwise  step k sends to rank+k and receives from rank-k: one partner
 *            pair per step, so no link or receiver is oversubscribed.
 *  linear    everything posted at once and completed together: the engine
 *            overlaps all transfers; best for few ranks.
 *  bruck     ceil(log2 p) steps; step k forwards every block whose rotated
 *            index has bit k set, packed into one message. Each byte moves
 *            up to log2 p times, so it pays off for small blocks only.
 */
#include "comm/algo/algos.h"

ai_status_t comm_pairwise_alltoall(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t unit = a->count * ai_dtype_size(a->dt);
    const unsigned char *in = a->sendbuf;
    unsigned char *out = a->recvbuf;
    memcpy(out + (size_t)me * unit, in + (size_t)me * unit, unit);
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n, from = (me - k + n) % n;
        ai_status_t st = comm_sendrecv(c, to, in + (size_t)to * unit, unit, from,
                                       out + (size_t)from * unit, unit);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_linear_alltoall(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t unit = a->count * ai_dtype_size(a->dt);
    const unsigned char *in = a->sendbuf;
    unsigned char *out = a->recvbuf;
    memcpy(out + (size_t)me * unit, in + (size_t)me * unit, unit);
    if (n == 1)
        return AI_OK;
    /* 2(p-1) requests: kept in scratch, not on the stack, since p is
     * unbounded. Receives first, then sends, both in rank+k order so that
     * not everybody starts by sending to rank 0. */
    comm_req *r;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_AUX2, sizeof(comm_req) * 2 * (size_t)(n - 1),
                                  (void **)&r);
    if (st != AI_OK)
        return st;
    int nr = 0;
    for (int k = 1; k < n; k++) {
        int from = (me - k + n) % n;
        comm_irecv(c, &r[nr++], from, out + (size_t)from * unit, unit);
    }
    for (int k = 1; k < n; k++) {
        int to = (me + k) % n;
        comm_isend(c, &r[nr++], to, in + (size_t)to * unit, unit);
    }
    return comm_wait(c, r, nr);
}

ai_status_t comm_bruck_alltoall(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t unit = a->count * ai_dtype_size(a->dt), total = unit * (size_t)n;
    const unsigned char *in = a->sendbuf;
    unsigned char *out = a->recvbuf, *tmp, *spack, *rpack;
    size_t half = unit * (size_t)((n + 1) / 2);
    ai_status_t st;
    if ((st = comm_scratch(c, ALGO_SLOT_WORK, total, (void **)&tmp)) != AI_OK ||
        (st = comm_scratch(c, ALGO_SLOT_AUX, half, (void **)&spack)) != AI_OK ||
        (st = comm_scratch(c, ALGO_SLOT_AUX2, half, (void **)&rpack)) != AI_OK)
        return st;
    /* Rotate: tmp[j] is the block for rank me + j. Each step moves blocks
     * +k ranks along, so block j arrives at rank me + j at index j. */
    size_t head = (size_t)(n - me) * unit;
    memcpy(tmp, in + (size_t)me * unit, head);
    memcpy(tmp + head, in, total - head);
    for (int k = 1; k < n; k <<= 1) {
        size_t nb = 0;
        for (int j = k; j < n; j++)
            if (j & k)
                memcpy(spack + nb++ * unit, tmp + (size_t)j * unit, unit);
        if ((st = comm_sendrecv(c, (me + k) % n, spack, nb * unit, (me - k + n) % n, rpack,
                                nb * unit)) != AI_OK)
            return st;
        nb = 0;
        for (int j = k; j < n; j++)
            if (j & k)
                memcpy(tmp + (size_t)j * unit, rpack + nb++ * unit, unit);
    }
    /* Now tmp[j] came from rank me - j. */
    for (int j = 0; j < n; j++)
        memcpy(out + (size_t)((me - j + n) % n) * unit, tmp + (size_t)j * unit, unit);
    return AI_OK;
}
