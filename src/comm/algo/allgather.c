/*
 * Allgather algorithms (count elements per rank; block r of recvbuf is
 * rank r's contribution).
 *
 *  ring                p-1 steps, each forwards one block to the right;
 *                      bandwidth optimal.
 *  recursive_doubling  log2 p steps exchanging doubling windows; for
 *                      non-powers of two the first 2*rem ranks fold in pairs
 *                      (see fold_virtual) and get the result back at the end.
 *  bruck               ceil(log2 p) steps for any p, blocks gathered in a
 *                      rotated buffer and un-rotated at the end.
 *  hierarchical        gather within each host to its leader, ring allgather
 *                      among the leaders (one message per host per step),
 *                      broadcast within each host.
 */
#include "comm/algo/algos.h"

#define GATHER_BATCH 16 /* requests in flight at a host leader */

ai_status_t comm_ring_allgather(ai_comm *c, const coll_args *a)
{
    size_t unit = a->count * ai_dtype_size(a->dt);
    comm_group g = group_world(c);
    comm_blocks B = {NULL, (size_t)c->size, unit};
    copy_if(BP(a->recvbuf, (size_t)c->rank * unit), a->sendbuf, unit);
    return comm_core_ring_allgather(c, &g, a->recvbuf, &B, c->rank);
}

ai_status_t comm_recursive_doubling_allgather(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t es = ai_dtype_size(a->dt), unit = a->count * es, total = unit * (size_t)n;
    copy_if(BP(a->recvbuf, (size_t)me * unit), a->sendbuf, unit);
    if (n == 1)
        return AI_OK;
    comm_group g = group_world(c);
    comm_fold f = fold_of(&g);
    vlayout L = {VL_FOLDED, a->count, f.pp, f.rem};
    ai_status_t st;
    if (f.nv < 0)
        return comm_core_fold_leave(c, &g, BP(a->recvbuf, (size_t)me * unit), unit, a->recvbuf,
                                    total);
    /* Odd partner of a folded pair owns blocks me-1 and me: adjacent, so
     * virtual windows stay contiguous. */
    st = comm_core_fold_join_recv(c, &g, &f, BP(a->recvbuf, (size_t)(me - 1) * unit), unit);
    if (st != AI_OK)
        return st;
    if ((st = comm_core_doubling(c, &g, &L, f.nv, a->recvbuf, es)) != AI_OK)
        return st;
    return comm_core_fold_return(c, &g, &f, a->recvbuf, total);
}

ai_status_t comm_bruck_allgather(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t unit = a->count * ai_dtype_size(a->dt), total = unit * (size_t)n;
    ai_status_t st;
    /* tmp[j] collects block (me + j) % n; rank 0 needs no rotation, so it
     * works in recvbuf directly. */
    unsigned char *tmp = a->recvbuf;
    if (me != 0 && (st = comm_scratch(c, ALGO_SLOT_WORK, total, (void **)&tmp)) != AI_OK)
        return st;
    copy_if(tmp, a->sendbuf, unit);
    for (int k = 1; k < n; k <<= 1) {
        size_t nb = (size_t)AI_MIN(k, n - k);
        if ((st = comm_sendrecv(c, (me - k + n) % n, tmp, nb * unit, (me + k) % n,
                                tmp + (size_t)k * unit, nb * unit)) != AI_OK)
            return st;
    }
    if (me != 0) {
        size_t head = (size_t)(n - me) * unit; /* tmp[0 .. n-me) -> out[me ..) */
        memcpy(BP(a->recvbuf, (size_t)me * unit), tmp, head);
        memcpy(a->recvbuf, tmp + head, total - head);
    }
    return AI_OK;
}

ai_status_t comm_hierarchical_allgather(ai_comm *c, const coll_args *a)
{
    if (c->nhosts == 1 || c->nhosts == c->size)
        return comm_ring_allgather(c, a);
    int n = c->size, myhost = c->host_of[c->rank];
    size_t unit = a->count * ai_dtype_size(a->dt), total = unit * (size_t)n;
    ai_status_t st;

    /* The leaders work on blocks packed in host order (host h's ranks at
     * [host_first[h], host_first[h+1])) so each host's data is one message
     * per ring step. With ranks placed in blocks per host (the common
     * case) packed order is rank order and recvbuf is used directly. */
    int blocked = 1;
    for (int i = 0; i < n && blocked; i++)
        blocked = c->host_ranks[i] == i;
    comm_group local = group_host(c, myhost);
    int leader = c->host_ranks[c->host_first[myhost]];
    unsigned char *packed = a->recvbuf;

    if (c->local_rank != 0) {
        if ((st = comm_send(c, leader, a->sendbuf, unit)) != AI_OK)
            return st;
    } else {
        if (!blocked &&
            (st = comm_scratch(c, ALGO_SLOT_WORK, total, (void **)&packed)) != AI_OK)
            return st;
        size_t base = (size_t)c->host_first[myhost];
        copy_if(packed + base * unit, a->sendbuf, unit);
        /* 1. Gather the host's blocks (linear: a host has few ranks and
         * shared memory has no per-message network latency). */
        for (int i = 1; i < local.n; i += GATHER_BATCH) {
            comm_req r[GATHER_BATCH];
            int nr = 0;
            for (int j = i; j < AI_MIN(i + GATHER_BATCH, local.n); j++, nr++)
                comm_irecv(c, &r[nr], local.ranks[j], packed + (base + (size_t)j) * unit, unit);
            if ((st = comm_wait(c, r, nr)) != AI_OK)
                return st;
        }
        /* 2. Ring among the leaders over whole hosts. */
        comm_group leaders = group_leaders(c, -1);
        comm_blocks B = {c->host_first, 0, unit};
        if ((st = comm_core_ring_allgather(c, &leaders, packed, &B, leaders.me)) != AI_OK)
            return st;
        if (!blocked)
            for (int j = 0; j < n; j++)
                memcpy(BP(a->recvbuf, (size_t)c->host_ranks[j] * unit), packed + (size_t)j * unit,
                       unit);
    }
    /* 3. Broadcast the assembled buffer within the host. */
    return comm_core_bcast_sized(c, &local, a->recvbuf, a->count * (size_t)n,
                                 ai_dtype_size(a->dt));
}
