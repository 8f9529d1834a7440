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

/* Whether the ring crosses hosts (some member's host differs): every
 * member computes the same answer from the same group. */
static int ring_spans_hosts(const ai_comm *c, const comm_group *g)
{
    int h0 = c->host_of[g_rank(g, 0)];
    for (int i = 1; i < g->n; i++)
        if (c->host_of[g_rank(g, i)] != h0)
            return 1;
    return 0;
}

/* ------------------------------------------------------------- flows */

ai_status_t comm_core_flow(ai_comm *c, comm_flow_op *ops, int nops, const int *lane_first,
                           int nlanes, ai_dtype dt, ai_op op)
{
    comm_req *reqs;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_AUX2,
                                  (size_t)nops * sizeof *reqs + (size_t)nlanes * sizeof(int),
                                  (void **)&reqs);
    if (st != AI_OK)
        return st;
    int *next = (int *)(reqs + nops);
    for (int i = 0; i < nops; i++) {
        reqs[i].done = 1; /* not posted: the wait passes over it */
        ops[i].posted = 0;
    }
    for (int l = 0; l < nlanes; l++)
        next[l] = lane_first[l];
    size_t es = ai_dtype_size(dt);
    double moved_at = ai_now();
    for (;;) {
        /* Post until nothing more can be: a zero-byte request is done when
         * posted, so it may free an op of a lane already passed over. */
        int open, pending = 0, posted;
        do {
            open = 0, posted = 0;
            for (int l = 0; l < nlanes; l++) {
                for (; next[l] < lane_first[l + 1]; next[l]++) {
                    comm_flow_op *o = &ops[next[l]];
                    if (o->dep >= 0 && !(ops[o->dep].posted && reqs[o->dep].done))
                        break;
                    comm_req *r = &reqs[next[l]];
                    if (o->kind == COMM_REQ_SEND)
                        comm_isend(c, r, o->peer, o->sbuf, o->bytes);
                    else if (o->kind == COMM_REQ_RECV)
                        comm_irecv(c, r, o->peer, o->rbuf, o->bytes);
                    else
                        comm_irecv_reduce(c, r, o->peer, o->rbuf, o->src, o->bytes / es, dt,
                                          op);
                    o->posted = posted = 1;
                }
                open |= next[l] < lane_first[l + 1];
            }
        } while (posted && open);
        for (int i = 0; i < nops && !pending; i++)
            pending = !reqs[i].done;
        if (!pending) {
            if (!open)
                return AI_OK;
            return util_fail(AI_ERR_INVALID, "flow: operations wait on operations never posted");
        }
        if ((st = comm_wait_some(c, reqs, nops, ai_now() + 1.0, &moved_at)) != AI_OK)
            return st;
    }
}

/* Pieces per block of a streamed ring: blocks cut into pieces of at least
 * RING_PIECE_MIN bytes, at most RING_PIECES of them. */
#define RING_PIECE_MIN ((size_t)32 << 10)
#define RING_PIECES 16

static int ring_pieces(size_t block_bytes)
{
    return (int)AI_MIN((size_t)RING_PIECES, block_bytes / RING_PIECE_MIN);
}

/* Piece k of K of ring block b of n over [base, base + count). */
static void piece(size_t base, size_t count, int n, int b, int K, int k, size_t *off, size_t *len)
{
    b = (b % n + n) % n;
    size_t bo = part_off(count, n, b), bl = part_len(count, n, b);
    *off = base + bo + part_off(bl, K, k);
    *len = part_len(bl, K, k);
}

static comm_flow_op flow_send(int peer, const void *buf, size_t bytes, int dep)
{
    return (comm_flow_op){COMM_REQ_SEND, peer, dep, buf, NULL, NULL, bytes, 0};
}

static comm_flow_op flow_recv(int peer, void *dst, const void *src, size_t bytes, int dep)
{
    return (comm_flow_op){src ? COMM_REQ_RECV_REDUCE : COMM_REQ_RECV, peer, dep, NULL, dst, src,
                          bytes, 0};
}

/* The streamed ring's two lanes, appended at ops[*nops...]: sends to the
 * right, then receives from the left, over the elements [base, base +
 * count) of out. Step s < n-1 reduces block me-s-1 and sends block me-s;
 * step n-1+a (the allgather) receives block me-a and sends block me+1-a.
 * The step-0 sends read `first` (in, or out when the blocks were prepared
 * there), and wait on first_dep[j * K + k] for block me-j (NULL: none);
 * the reductions of step s read `src` and wait on first_dep for block
 * me-s-1. */
static void ring_lanes(comm_flow_op *ops, int *nops, int *lanes, const comm_group *g, int me,
                       const unsigned char *first, const unsigned char *src, unsigned char *out,
                       size_t base, size_t count, size_t es, int K, const int *first_dep)
{
    int n = g->n, nt = 2 * (n - 1) * K, t0 = *nops;
    int right = g_rank(g, (me + 1) % n), left = g_rank(g, (me + n - 1) % n);
    lanes[0] = *nops;
    for (int t = 0; t < nt; t++) {
        int s = t / K, k = t % K, rs = s < n - 1;
        size_t o, len;
        piece(base, count, n, rs ? me - s : me + 1 - (s - (n - 1)), K, k, &o, &len);
        int dep = s == 0 ? (first_dep ? first_dep[k] : -1) : t0 + nt + t - K;
        ops[(*nops)++] = flow_send(right, (s == 0 ? first : out) + o * es, len * es, dep);
    }
    lanes[1] = *nops;
    for (int t = 0; t < nt; t++) {
        int s = t / K, k = t % K, rs = s < n - 1;
        size_t o, len;
        piece(base, count, n, rs ? me - s - 1 : me - (s - (n - 1)), K, k, &o, &len);
        int dep = rs && first_dep ? first_dep[(s + 1) * K + k] : -1;
        ops[(*nops)++] = flow_recv(left, out + o * es, rs ? src + o * es : NULL, len * es, dep);
    }
}

/* The ring across hosts, streamed: each block goes in K pieces, and a
 * piece moves on as soon as it arrived (and was reduced), not when the
 * whole step's block did. The lock-step ring leaves a link idle between
 * steps for the slowest neighbour's last byte, a reduction and a wake-up;
 * here a link idles only when no piece is ready anywhere before it. The
 * same blocks, the same reduction chain and order per element as
 * ring_pass (the same bits); every receive is posted first, and the send
 * of step s once the piece it forwards arrived. Sends go right and
 * receives come from the left in posting order, as the neighbours post
 * them, so FIFO matching pairs them. Overwriting a block in the allgather
 * is safe piece by piece: its final value exists only after this rank's
 * partial sum of it left. */
static ai_status_t ring_stream(ai_comm *c, const comm_group *g, const unsigned char *in,
                               unsigned char *out, size_t count, ai_dtype dt, ai_op op, int K)
{
    int nops = 0, lanes[3];
    int nt = 2 * (g->n - 1) * K;
    comm_flow_op *ops;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_AUX, (size_t)2 * (size_t)nt * sizeof *ops,
                                  (void **)&ops);
    if (st != AI_OK)
        return st;
    ring_lanes(ops, &nops, lanes, g, g->me, in, in, out, 0, count, ai_dtype_size(dt), K, NULL);
    lanes[2] = nops;
    return comm_core_flow(c, ops, nops, lanes, 2, dt, op);
}

/* Hierarchical allreduce on hosts of two ranks, streamed. Each local rank
 * m runs the ring over the hosts (on `rail`: local rank m of every host)
 * on the elements it owns, on the host sums as they arrive: its partner
 * sends it its input of them piece by piece, in the order the ring needs
 * them, and each piece that becomes final goes back to the partner at
 * once. The host step, the ring and the gather overlap instead of
 * following each other (four lanes: to the partner, from it, to the
 * right, from the left). Each piece's host sum is computed once, on the
 * rank that owns it, and reaches the other ranks as bits, so every rank
 * gets the same result.
 *
 * lead 0 (rails): each rank owns half of the vector, so both drive the
 * network. lead 1: local rank 0 owns all of it, so each host puts one
 * flow on the network instead of two (on a shared NIC two rings' flows
 * take turns unevenly, and each ring waits on its slowest link), and
 * rank 1 only sends its input and takes the result. */
ai_status_t comm_core_host2_allreduce(ai_comm *c, const comm_group *local, const comm_group *rail,
                                      const void *in_, void *out_, size_t count, ai_dtype dt,
                                      ai_op op, int lead)
{
    const unsigned char *in = in_;
    unsigned char *out = out_;
    size_t es = ai_dtype_size(dt);
    int n = rail->n, me = c->host_of[c->rank], m = local->me, partner = g_rank(local, 1 - m);
    size_t half = lead ? count : part_off(count, 2, 1);
    size_t base[2] = {0, half}, len[2] = {half, count - half};
    int mine = len[m] > 0, theirs = len[1 - m] > 0;
    int K = ring_pieces(part_len(len[0], n, 0) * es);
    if (K < 1)
        K = 1;
    int nk = n * K, nt = 2 * (n - 1) * K, nops = 0, lanes[5];
    comm_flow_op *ops;
    ai_status_t st = comm_scratch(c, ALGO_SLOT_AUX,
                                  (size_t)(4 * nk + 2 * nt) * sizeof *ops + (size_t)nk * sizeof(int),
                                  (void **)&ops);
    if (st != AI_OK)
        return st;
    int *sum_op = (int *)(ops + 4 * nk + 2 * nt); /* the host sum of block me-j, piece k */
    /* To the partner: its elements' blocks in the order its ring needs
     * them (block me, then me-1, me-2, ...: its position in its ring is
     * this host's too), then this rank's pieces as they become final (the
     * ring's last reduction, then the allgather's receives: ops[final +
     * i], the from-left lane's, which follows two partner lanes and the
     * to-right lane). */
    int final = 2 * nk * (mine + theirs) + nt + (n - 2) * K;
    lanes[0] = nops;
    for (int j = 0; theirs && j < nk; j++) {
        size_t o, l;
        piece(base[1 - m], len[1 - m], n, me - j / K, K, j % K, &o, &l);
        ops[nops++] = flow_send(partner, in + o * es, l * es, -1);
    }
    for (int i = 0; mine && i < nk; i++) {
        int t = (n - 2) * K + i, s = t / K, rs = s < n - 1;
        size_t o, l;
        piece(base[m], len[m], n, rs ? me - s - 1 : me - (s - (n - 1)), K, t % K, &o, &l);
        ops[nops++] = flow_send(partner, out + o * es, l * es, final + i);
    }
    /* From the partner: this rank's host sums, then the partner's final
     * pieces (posted with this rank's own when it has a ring). */
    lanes[1] = nops;
    for (int j = 0; mine && j < nk; j++) {
        size_t o, l;
        piece(base[m], len[m], n, me - j / K, K, j % K, &o, &l);
        sum_op[j] = nops;
        ops[nops++] = flow_recv(partner, out + o * es, in + o * es, l * es, -1);
    }
    for (int i = 0; theirs && i < nk; i++) {
        int t = (n - 2) * K + i, s = t / K, rs = s < n - 1;
        size_t o, l;
        piece(base[1 - m], len[1 - m], n, rs ? me - s - 1 : me - (s - (n - 1)), K, t % K, &o,
              &l);
        ops[nops++] = flow_recv(partner, out + o * es, NULL, l * es, mine ? final + i : -1);
    }
    lanes[2] = lanes[3] = nops;
    if (mine)
        ring_lanes(ops, &nops, lanes + 2, rail, me, out, out, out, base[m], len[m], es, K, sum_op);
    lanes[4] = nops;
    return comm_core_flow(c, ops, nops, lanes, 4, dt, op);
}

ai_status_t comm_core_ring_allreduce(ai_comm *c, const comm_group *g, const void *in, void *out,
                                     size_t count, ai_dtype dt, ai_op op, size_t chunk_bytes)
{
    size_t es = ai_dtype_size(dt);
    if (g->n == 1) {
        copy_if(out, in, count * es);
        return AI_OK;
    }
    if (chunk_bytes == 0 && ring_spans_hosts(c, g)) {
        size_t blk = part_len(count, g->n, 0) * es;
        int k = ring_pieces(blk);
        if (k >= 2)
            return ring_stream(c, g, in, out, count, dt, op, k);
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
