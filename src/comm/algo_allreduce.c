/*
 * Allreduce algorithms, and the ring / halving / doubling cores other
 * collectives reuse.
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
#include "comm/algos.h"

/* --------------------------------------------------------------- ring */

static ai_status_t ring_pass(ai_comm *c, const comm_group *g, const unsigned char *in,
                             unsigned char *out, size_t count, ai_dtype dt, ai_op op)
{
    int n = g->n, me = g->me;
    size_t es = ai_dtype_size(dt);
    int right = g_rank(g, (me + 1) % n), left = g_rank(g, (me + n - 1) % n);
    ai_status_t st;

    /* Reduce-scatter: at step s send block me-s, receive-reduce block
     * me-s-1. Every received block is received exactly once, so it is
     * reduced straight from the original input (no initial copy); the block
     * sent at step s >= 1 is the one reduced at step s-1. After p-1 steps
     * block me+1 is complete here. */
    for (int s = 0; s < n - 1; s++) {
        int sb = ((me - s) % n + n) % n, rb = ((me - s - 1) % n + n) % n;
        const unsigned char *sp = (s == 0 ? in : out) + part_off(count, n, sb) * es;
        size_t ro = part_off(count, n, rb) * es;
        st = comm_sendrecv_reduce(c, right, sp, part_len(count, n, sb) * es, left, out + ro,
                                  in + ro, part_len(count, n, rb), dt, op);
        if (st != AI_OK)
            return st;
    }
    /* Allgather: circulate the complete blocks; every block but me+1 is
     * overwritten here, which is why the reduce-scatter needed no copy. */
    for (int s = 0; s < n - 1; s++) {
        int sb = ((me + 1 - s) % n + n) % n, rb = ((me - s) % n + n) % n;
        st = comm_sendrecv(c, right, out + part_off(count, n, sb) * es,
                           part_len(count, n, sb) * es, left, out + part_off(count, n, rb) * es,
                           part_len(count, n, rb) * es);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_core_ring_allreduce(ai_comm *c, const comm_group *g, const void *in, void *out,
                                     size_t count, ai_dtype dt, ai_op op, size_t chunk_bytes)
{
    size_t es = ai_dtype_size(dt);
    if (g->n == 1) {
        copy_if(out, in, count * es);
        return AI_OK;
    }
    /* By default one pass over the whole buffer: each step already overlaps
     * its send with the receive-reduce, so slicing only adds steps. A chunk
     * size bounds the blocks to chunk_bytes (the tuner may find smaller
     * blocks better for cache reuse of the reduced data). */
    size_t slice = count;
    if (chunk_bytes > 0) {
        size_t per = chunk_bytes / es ? chunk_bytes / es : 1;
        slice = per * (size_t)g->n;
    }
    for (size_t base = 0; base < count; base += slice) {
        size_t len = AI_MIN(slice, count - base);
        ai_status_t st = ring_pass(c, g, CBP(in, base * es), BP(out, base * es), len, dt, op);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_ring_allreduce(ai_comm *c, const coll_args *a)
{
    comm_group g = group_world(c);
    return comm_core_ring_allreduce(c, &g, a->sendbuf, a->recvbuf, a->count, a->dt, a->op,
                                    a->chunk_bytes);
}

/* ------------------------------------------------ recursive doubling */

ai_status_t comm_recursive_doubling_allreduce(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    if (n == 1) {
        copy_if(a->recvbuf, a->sendbuf, bytes);
        return AI_OK;
    }
    int pp = pow2_floor(n), rem = n - pp, nv = fold_virtual(me, rem);
    ai_status_t st;

    if (nv < 0) { /* folded out: hand my data over, get the result back */
        if ((st = comm_send(c, me + 1, a->sendbuf, bytes)) != AI_OK)
            return st;
        return comm_recv(c, me + 1, a->recvbuf, bytes);
    }

    void *tmp;
    if ((st = comm_scratch(c, ALGO_SLOT_WORK, bytes, &tmp)) != AI_OK)
        return st;
    /* Each exchange sends the whole current buffer while the partner's
     * data is reduced into the other one: sending and reducing into the
     * same buffer would race. cur ping-pongs between recvbuf and tmp. */
    const void *cur = a->sendbuf;
    if (me < 2 * rem) {
        comm_req r;
        comm_irecv_reduce(c, &r, me - 1, a->recvbuf, cur, a->count, a->dt, a->op);
        if ((st = comm_wait(c, &r, 1)) != AI_OK)
            return st;
        cur = a->recvbuf;
    }
    for (int mask = 1; mask < pp; mask <<= 1) {
        int peer = fold_real(nv ^ mask, rem);
        void *dst = (cur == a->recvbuf) ? tmp : a->recvbuf;
        st = comm_sendrecv_reduce(c, peer, cur, bytes, peer, dst, cur, a->count, a->dt, a->op);
        if (st != AI_OK)
            return st;
        cur = dst;
    }
    copy_if(a->recvbuf, cur, bytes);
    if (me < 2 * rem)
        return comm_send(c, me - 1, a->recvbuf, bytes);
    return AI_OK;
}

/* ------------------------------------------------------- rabenseifner */

ai_status_t comm_core_halving(ai_comm *c, const comm_group *g, const vlayout *L, int nv,
                              const void *in, void *acc, ai_dtype dt, ai_op op)
{
    size_t es = ai_dtype_size(dt);
    const unsigned char *cur = in;
    int lo = 0;
    /* At distance d my window [lo, lo + 2d) of virtual blocks splits in two;
     * I keep the half containing nv and send the other to nv ^ d, whose
     * window is the same. Sent and reduced halves are disjoint, so the
     * reduce may write acc while the send reads it. */
    for (int d = L->pp / 2; d >= 1; d /= 2) {
        int peer = g_rank(g, fold_real(nv ^ d, L->rem));
        int keep = (nv & d) ? lo + d : lo, send = (nv & d) ? lo : lo + d;
        size_t ko = vl_off(L, keep), kn = vl_off(L, keep + d) - ko;
        size_t so = vl_off(L, send), sn = vl_off(L, send + d) - so;
        ai_status_t st = comm_sendrecv_reduce(c, peer, cur + so * es, sn * es, peer,
                                              BP(acc, ko * es), cur + ko * es, kn, dt, op);
        if (st != AI_OK)
            return st;
        cur = acc; /* everything sent from now on lies in the kept half */
        lo = keep;
    }
    if (cur != acc) /* pp == 1: nothing exchanged */
        copy_if(BP(acc, vl_off(L, nv) * es), CBP(in, vl_off(L, nv) * es),
                (vl_off(L, nv + 1) - vl_off(L, nv)) * es);
    return AI_OK;
}

ai_status_t comm_core_doubling(ai_comm *c, const comm_group *g, const vlayout *L, int nv,
                               void *buf, size_t es)
{
    /* At distance d I hold the aligned window of d virtual blocks around nv
     * and swap it for the partner's neighbouring window. */
    for (int d = 1; d < L->pp; d <<= 1) {
        int peer = g_rank(g, fold_real(nv ^ d, L->rem));
        int mine = nv & ~(d - 1), theirs = (nv ^ d) & ~(d - 1);
        size_t mo = vl_off(L, mine), mn = vl_off(L, mine + d) - mo;
        size_t to = vl_off(L, theirs), tn = vl_off(L, theirs + d) - to;
        ai_status_t st = comm_sendrecv(c, peer, BP(buf, mo * es), mn * es, peer,
                                       BP(buf, to * es), tn * es);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_rabenseifner_allreduce(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    if (n == 1) {
        copy_if(a->recvbuf, a->sendbuf, bytes);
        return AI_OK;
    }
    comm_group g = group_world(c);
    int pp = pow2_floor(n), rem = n - pp, nv = fold_virtual(me, rem);
    vlayout L = {VL_EVEN, a->count, pp, rem};
    ai_status_t st;

    if (nv < 0) {
        if ((st = comm_send(c, me + 1, a->sendbuf, bytes)) != AI_OK)
            return st;
        return comm_recv(c, me + 1, a->recvbuf, bytes);
    }
    const void *in = a->sendbuf;
    if (me < 2 * rem) { /* absorb the folded neighbour's data */
        comm_req r;
        comm_irecv_reduce(c, &r, me - 1, a->recvbuf, in, a->count, a->dt, a->op);
        if ((st = comm_wait(c, &r, 1)) != AI_OK)
            return st;
        in = a->recvbuf;
    }
    if ((st = comm_core_halving(c, &g, &L, nv, in, a->recvbuf, a->dt, a->op)) != AI_OK)
        return st;
    if ((st = comm_core_doubling(c, &g, &L, nv, a->recvbuf, es)) != AI_OK)
        return st;
    if (me < 2 * rem)
        return comm_send(c, me - 1, a->recvbuf, bytes);
    return AI_OK;
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

    ai_status_t st = comm_host_reduce(c, a);
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
    return comm_host_bcast(c, a);
}

/* 1. Reduce to the host leader (local index 0). Small messages: binomial
 * tree (log steps). Large: reduce-scatter + gather, which moves each byte
 * about twice instead of log2(local) times. recvbuf is valid at every rank,
 * so it is the accumulator everywhere. */
ai_status_t comm_host_reduce(ai_comm *c, const coll_args *a)
{
    size_t bytes = a->count * ai_dtype_size(a->dt);
    comm_group local = group_host(c, c->host_of[c->rank]);
    if (bytes <= ALGO_SMALL_BYTES || local.n == 1)
        return comm_core_binomial_reduce(c, &local, a->sendbuf, a->recvbuf, a->count, a->dt, a->op);
    return comm_core_rab_reduce(c, &local, a->sendbuf, a->recvbuf, a->count, a->dt, a->op);
}

/* 3. The host leader's recvbuf to every rank of the host. */
ai_status_t comm_host_bcast(ai_comm *c, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    comm_group local = group_host(c, c->host_of[c->rank]);
    if (local.n == 1)
        return AI_OK;
    if (bytes <= ALGO_SMALL_BYTES)
        return comm_core_binomial_bcast(c, &local, a->recvbuf, bytes);
    return comm_core_scatter_allgather_bcast(c, &local, a->recvbuf, a->count, es);
}

/* ------------------------------------------------------------- direct */

ai_status_t comm_direct_allreduce(ai_comm *c, const coll_args *a)
{
    if (!comm_shm_direct_ok(c))
        return comm_recursive_doubling_allreduce(c, a);
    return comm_shm_allreduce(c, a->sendbuf, a->recvbuf, a->count, a->dt, a->op);
}
