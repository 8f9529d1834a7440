/*
 * Recursive halving / doubling cores, run among the pp virtual ranks of a
 * fold (core.h): partners at distance pp/2, pp/4, ... 1 (halving) or
 * 1, 2, ... pp/2 (doubling), log2 pp steps each, ring's bandwidth when
 * halving and doubling are combined (Rabenseifner).
 */
#include "comm/algo/core.h"

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

ai_status_t comm_core_rab_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                 size_t count, ai_dtype dt, ai_op op)
{
    int n = g->n, me = g->me;
    size_t es = ai_dtype_size(dt), bytes = count * es;
    if (n == 1) {
        copy_if(acc, in, bytes);
        return AI_OK;
    }
    comm_fold f = fold_of(g);
    int nv = f.nv;
    vlayout L = {VL_EVEN, count, f.pp, f.rem};
    ai_status_t st;

    /* The root (index 0) sits out when folding; its partner, virtual
     * rank 0, collects the result and hands it over at the end. */
    if (nv < 0)
        return comm_core_fold_leave(c, g, in, bytes, me == 0 ? acc : NULL, bytes);
    const void *cur = in;
    if ((st = comm_core_fold_join_reduce(c, g, &f, acc, &cur, count, dt, op)) != AI_OK)
        return st;
    if ((st = comm_core_halving(c, g, &L, nv, cur, acc, dt, op)) != AI_OK)
        return st;
    /* Binomial gather to virtual rank 0, mirroring the halving: a rank
     * still active at distance d has its low bits clear and holds blocks
     * [nv, nv + d); it receives [nv + d, nv + 2d) or sends its own. */
    for (int d = 1; d < f.pp; d <<= 1) {
        if (nv & d) {
            size_t o = vl_off(&L, nv), e = vl_off(&L, nv + d);
            return comm_send(c, g_rank(g, fold_real(nv - d, f.rem)), BP(acc, o * es),
                             (e - o) * es);
        }
        size_t o = vl_off(&L, nv + d), e = vl_off(&L, nv + 2 * d);
        if ((st = comm_recv(c, g_rank(g, fold_real(nv + d, f.rem)), BP(acc, o * es),
                            (e - o) * es)) != AI_OK)
            return st;
    }
    /* Only virtual 0 gets here: index 1 when the root sat out. */
    return comm_core_fold_return(c, g, &f, acc, bytes);
}
