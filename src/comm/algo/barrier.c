/*
 * Barrier algorithms. Zero-byte messages complete without moving anything
 * (engine contract), so every notification carries one byte.
 *
 *  dissemination  ceil(log2 p) rounds; in round k rank r signals r + 2^k
 *                 and waits for r - 2^k. No root, no release phase.
 *  tree           binomial gather of arrivals to rank 0, binomial release:
 *                 2 log2 p steps but only p-1 messages each way.
 */
#include "comm/algo/algos.h"

ai_status_t comm_dissemination_barrier(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    unsigned char out = 1, in = 0;
    for (int k = 1; k < n; k <<= 1) {
        ai_status_t st = comm_sendrecv(c, (me + k) % n, &out, 1, (me - k + n) % n, &in, 1);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}

ai_status_t comm_tree_barrier(ai_comm *c, const coll_args *a)
{
    int n = c->size, me = c->rank;
    unsigned char token = 1;
    ai_status_t st;
    for (int mask = 1; mask < n; mask <<= 1) {
        if (me & mask) {
            if ((st = comm_send(c, me - mask, &token, 1)) != AI_OK)
                return st;
            break;
        }
        if (me + mask < n && (st = comm_recv(c, me + mask, &token, 1)) != AI_OK)
            return st;
    }
    comm_group g = group_world(c);
    return comm_core_binomial_bcast(c, &g, &token, 1);
}
