/*
 * Ring cores: every member talks only to its two neighbours, so each link
 * carries the data once per phase. Bandwidth optimal (2 (p-1)/p n bytes
 * per rank for allreduce), 2 (p-1) steps.
 */
#include "comm/algo/core.h"

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
    comm_blocks B = {NULL, count, es};
    return comm_core_ring_allgather(c, g, out, &B, me + 1);
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

ai_status_t comm_core_ring_allgather(ai_comm *c, const comm_group *g, void *buf,
                                     const comm_blocks *B, int own)
{
    int n = g->n, me = g->me;
    int right = g_rank(g, (me + 1) % n), left = g_rank(g, (me + n - 1) % n);
    /* Step s forwards block own-s to the right and receives block own-s-1
     * from the left: after n-1 steps every block has gone round once. */
    for (int s = 0; s < n - 1; s++) {
        int sb = ((own - s) % n + n) % n, rb = ((own - s - 1) % n + n) % n;
        size_t so = blk_off(B, n, sb), ro = blk_off(B, n, rb);
        ai_status_t st = comm_sendrecv(c, right, BP(buf, so), blk_off(B, n, sb + 1) - so, left,
                                       BP(buf, ro), blk_off(B, n, rb + 1) - ro);
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}
