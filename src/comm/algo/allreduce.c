/*
 * Allreduce algorithms, built on the cores (core.h).
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
 *                      leaders touch the (slow) network. Above 64 KiB on
 *                      hosts of equal power-of-two rank counts: reduce-
 *                      scatter within each host, one ring per local index
 *                      on its block (rails), allgather within each host.
 *  direct              one host: every rank writes its input into a shared
 *                      slot and reduces all of them (one flag round trip,
 *                      what Open MPI's sm coll and NCCL's LL protocol do
 *                      for small messages); elsewhere recursive_doubling.
 *  single_copy         one host, large vectors: reduce-scatter + allgather
 *                      reading the other ranks' buffers in place by
 *                      cross-memory attach (process_vm_readv), no rings;
 *                      elsewhere ring.
 */
#include "comm/algo/algos.h"
#include "comm/transport/engine.h"

/* --------------------------------------------------------------- ring */

ai_status_t comm_ring_allreduce(ai_comm *c, const coll_args *a)
{
    comm_group g = group_world(c);
    return comm_core_ring_allreduce(c, &g, a->sendbuf, a->recvbuf, a->count, a->dt, a->op,
                                    a->chunk_bytes);
}

/* ------------------------------------------------ recursive doubling */

ai_status_t comm_recursive_doubling_allreduce(ai_comm *c, const coll_args *a)
{
    size_t bytes = a->count * ai_dtype_size(a->dt);
    comm_group g = group_world(c);
    comm_fold f = fold_of(&g);
    int nv = f.nv, done;
    const void *cur;
    ai_status_t st = comm_core_fold_allreduce_in(c, &g, &f, a->sendbuf, a->recvbuf, a->count,
                                                 a->dt, a->op, &cur, &done);
    if (st != AI_OK || done)
        return st;
    void *tmp;
    if ((st = comm_scratch(c, ALGO_SLOT_WORK, bytes, &tmp)) != AI_OK)
        return st;
    /* Each exchange sends the whole current buffer while the partner's
     * data is reduced into the other one: sending and reducing into the
     * same buffer would race. cur ping-pongs between recvbuf and tmp. */
    for (int mask = 1; mask < f.pp; mask <<= 1) {
        int peer = fold_real(nv ^ mask, f.rem);
        void *dst = (cur == a->recvbuf) ? tmp : a->recvbuf;
        st = comm_sendrecv_reduce(c, peer, cur, bytes, peer, dst, cur, a->count, a->dt, a->op);
        if (st != AI_OK)
            return st;
        cur = dst;
    }
    copy_if(a->recvbuf, cur, bytes);
    return comm_core_fold_return(c, &g, &f, a->recvbuf, bytes);
}

/* ------------------------------------------------------- rabenseifner */

ai_status_t comm_rabenseifner_allreduce(ai_comm *c, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    comm_group g = group_world(c);
    comm_fold f = fold_of(&g);
    int nv = f.nv, done;
    vlayout L = {VL_EVEN, a->count, f.pp, f.rem};
    const void *in; /* after the fold: my data and the folded neighbour's */
    ai_status_t st = comm_core_fold_allreduce_in(c, &g, &f, a->sendbuf, a->recvbuf, a->count,
                                                 a->dt, a->op, &in, &done);
    if (st != AI_OK || done)
        return st;
    if ((st = comm_core_halving(c, &g, &L, nv, in, a->recvbuf, a->dt, a->op)) != AI_OK)
        return st;
    if ((st = comm_core_doubling(c, &g, &L, nv, a->recvbuf, es)) != AI_OK)
        return st;
    return comm_core_fold_return(c, &g, &f, a->recvbuf, bytes);
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

/* From this size a host of two ranks runs the streamed allreduce with
 * one flow per host (its leader's) instead of one per rank (the rails).
 * Two rails share the host's NIC; on T3 (one 0.5 Gbit/s NIC per host of
 * two ranks) their two rings took 1.03-1.06x the bound at 1-64 MiB, the
 * leader's 1.02-1.03x, while below 1 MiB the rails were the faster
 * (1.031-1.037x against 1.045-1.056x): bench/results/hetero/one-flow. */
#define HOST2_LEAD_BYTES ((size_t)1 << 20)

/* Every host has the same number of ranks, a power of two >= 2. */
static int hosts_even_pow2(const ai_comm *c)
{
    int l = c->host_first[1] - c->host_first[0];
    if (l < 2 || (l & (l - 1)))
        return 0;
    for (int h = 1; h < c->nhosts; h++)
        if (c->host_first[h + 1] - c->host_first[h] != l)
            return 0;
    return 1;
}

/* Large vectors on hosts of L ranks each (L a power of two; on hosts of
 * two ranks only with a chunk size, below HOST2_LEAD_BYTES): every rank
 * carries a share of the network work. Recursive halving within the host
 * leaves local rank i with the host's sum of block i (of L); the ranks of
 * local index i on every host (rail i) run the ring allreduce on block i,
 * all L rails at once; recursive doubling within the host gathers the
 * blocks. Each NIC carries what the leaders' ring carries (L rails of
 * n/L), but the reductions are spread over L ranks per host, and the host
 * steps move each byte about twice in all instead of a reduce to the
 * leader followed by a broadcast. */
static ai_status_t hierarchical_rails(ai_comm *c, const coll_args *a)
{
    size_t es = ai_dtype_size(a->dt);
    comm_group local = group_host(c, c->host_of[c->rank]);
    /* rail: member h is the rank of local index `me` on host h */
    comm_group rail = {c->nhosts, c->host_of[c->rank], 0, c->host_first, c->host_ranks + local.me,
                       -1, -1};
    vlayout L = {VL_EVEN, a->count, local.n, 0};
    ai_status_t st = comm_core_halving(c, &local, &L, local.me, a->sendbuf, a->recvbuf, a->dt,
                                       a->op);
    if (st != AI_OK)
        return st;
    size_t off = vl_off(&L, local.me), len = vl_off(&L, local.me + 1) - off;
    if (len > 0) {
        st = comm_core_ring_allreduce(c, &rail, BP(a->recvbuf, off * es), BP(a->recvbuf, off * es),
                                      len, a->dt, a->op, a->chunk_bytes);
        if (st != AI_OK)
            return st;
    }
    return comm_core_doubling(c, &local, &L, local.me, a->recvbuf, es);
}

ai_status_t comm_hierarchical_allreduce(ai_comm *c, const coll_args *a)
{
    /* One host (all shared memory) or one rank per host (all network):
     * there is no hierarchy to exploit, run the flat ring. */
    if (c->nhosts == 1 || c->nhosts == c->size)
        return comm_ring_allreduce(c, a);
    size_t bytes = a->count * ai_dtype_size(a->dt);
    comm_group local = group_host(c, c->host_of[c->rank]);
    if (bytes > ALGO_SMALL_BYTES && hosts_even_pow2(c)) {
        /* Hosts of two ranks: the host steps streamed into the ring across
         * hosts, the leader's alone from HOST2_LEAD_BYTES; with a chunk
         * size the same blocks and sums one step after another (the
         * rails, or the leaders' ring below). */
        int lead = local.n == 2 && bytes >= HOST2_LEAD_BYTES;
        if (local.n == 2 && a->chunk_bytes == 0) {
            comm_group rail = {c->nhosts, c->host_of[c->rank], 0, c->host_first,
                               c->host_ranks + local.me, -1, -1};
            return comm_core_host2_allreduce(c, &local, &rail, a->sendbuf, a->recvbuf, a->count,
                                             a->dt, a->op, lead);
        }
        if (!lead)
            return hierarchical_rails(c, a);
    }

    ai_status_t st = comm_core_host_reduce(c, a);
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
    return comm_core_host_bcast(c, a);
}


/* ------------------------------------------------------------- direct
 *
 * On the host's slot board (engine.h): every rank copies its contribution
 * into its slot, publishes the call's number in its flag, waits until
 * every local rank's flag shows the call, and reduces all the slots
 * itself, in rank order: one flag round trip instead of log2(p) message
 * exchanges, and every rank computes the same bits (the same order of
 * operations). Longer vectors go through in pieces of up to
 * COMM_SLOT_PIECE bytes (slot_piece_max), one exchange each.
 *
 * Where an exchange writes (slot_place): under COMM_SLOT_SMALL bytes per
 * rank, set k % 2 of the board's first two (engine.h); larger ones the
 * next n x len bytes of the rest of the pool, from a cursor that every
 * rank moves alike (each runs the same exchanges), starting over at the
 * rest's beginning where the exchange would not fit. A rank starts
 * exchange k only after it saw every flag at k-1, and a rank publishes k-1
 * only after it has read all of exchange k-2's slots, so exchange k must
 * only miss k-1's bytes: the parity does that for the first two sets, and
 * for the rest a piece of at most a third of it per rank x n (a wrapped
 * k then ends before k-1 began). Each rank also describes the call it
 * wrote (collective sequence number, piece, and the call's comm_call_sig)
 * per parity of the exchange: a rank that finds another's description
 * different has ranks issuing different collectives, and fails instead of
 * reducing garbage. */

typedef struct slot_wait {
    int rank; /* the rank waited for */
} slot_wait;

static ai_status_t slot_check(ai_comm *c, void *ctx)
{
    (void)ctx;
    ai_status_t st = comm_shm_check_local(c);
    return st != AI_OK ? st : comm_peek_calls(c);
}

static ai_status_t slot_expired(ai_comm *c, void *ctx, double idle)
{
    const slot_wait *w = ctx;
    comm_waited who = {w->rank, "the shared-memory allreduce slot of"};
    return comm_stall_error(c, &who, 1, idle);
}

static const comm_idle_ops slot_ops = {slot_check, slot_expired};

int comm_shm_direct_ok(const ai_comm *c)
{
    comm_slot_board b;
    return comm_slot_board_get(c, &b);
}

/* The slots of one exchange: rank k's at at + k * stride. */
typedef struct slot_set {
    unsigned char *at;
    size_t stride;
} slot_set;

static const unsigned char *slot_of(slot_set s, int k)
{
    return s.at + (size_t)k * s.stride;
}

/* The pool beyond the first two sets, which exchanges of COMM_SLOT_SMALL
 * bytes or more take in turn. */
static size_t slot_rest(const comm_slot_board *b)
{
    return (size_t)(b->nsets - 2) * (size_t)b->n * COMM_SLOT_BYTES;
}

/* The most bytes per rank one exchange carries: COMM_SLOT_PIECE, or a
 * third of the rest of the pool over n (see above), or where even that
 * is under COMM_SLOT_BYTES (a pool of few sets) a slot of the first two
 * sets. A multiple of 64. */
static size_t slot_piece_max(const comm_slot_board *b)
{
    size_t fit = slot_rest(b) / (3 * (size_t)b->n) & ~(size_t)63;
    return fit < COMM_SLOT_BYTES ? COMM_SLOT_BYTES : AI_MIN(fit, COMM_SLOT_PIECE);
}

/* The rest's first use in this process (its cursor still 0): every line
 * of it read once, so that the first round through the pool finds it in
 * the shared cache rather than in memory. Without this, `direct` at
 * 256 KiB on 2 ranks took 25-44 us a call for its first 8 calls and 16 us
 * from then on, and the learner, which times an arm's first calls, ranked
 * it behind `ring` (22 us). Reads only: another rank may be writing. */
static void slot_warm(const unsigned char *p, size_t len)
{
    unsigned sum = 0;
    for (size_t o = 0; o < len; o += 64)
        sum += *(const volatile unsigned char *)(p + o);
    (void)sum;
}

/* Where exchange `call` of `len` bytes per rank goes (len at most
 * slot_piece_max; the same on every rank). Under COMM_SLOT_SMALL a line
 * in another core's cache is nearer than a fresh one: the first two sets,
 * by parity. */
static slot_set slot_place(const comm_slot_board *b, uint32_t call, size_t len)
{
    size_t n = (size_t)b->n, stride = (len + 63) & ~(size_t)63, first = 2 * n * COMM_SLOT_BYTES;
    if (len < COMM_SLOT_SMALL || slot_rest(b) < 3 * n * stride)
        return (slot_set){b->slots + (size_t)(call & 1) * n * COMM_SLOT_BYTES, COMM_SLOT_BYTES};
    if (*b->cursor == 0)
        slot_warm(b->slots + first, slot_rest(b));
    if (*b->cursor < first || *b->cursor + n * stride > first + slot_rest(b))
        *b->cursor = first;
    slot_set s = {b->slots + *b->cursor, stride};
    *b->cursor += n * stride;
    return s;
}

/* One exchange on the board: this rank's `len` bytes of payload into its
 * slot (slot_place), its flag posted, then every local rank's flag
 * waited for and its description of the call compared with this rank's.
 * *set_out: the slots, which hold every rank's payload until the exchange
 * after next. */
static ai_status_t slot_exchange(ai_comm *c, const comm_slot_board *b, const void *payload,
                                 size_t len, uint32_t piece, slot_set *set_out)
{
    int n = b->n, me = b->me;
    uint32_t call = ++*b->calls;
    slot_set set = slot_place(b, call, len);
    if (len)
        comm_shm_copy(b->spell, set.at + (size_t)me * set.stride, payload, len);
    shm_flag *mine = &b->flags[me];
    shm_slot_call *what = &mine->what[call & 1];
    what->call_seq = c->call_seq;
    what->piece = piece;
    what->sig = c->call;
    atomic_store_explicit(&mine->posted, call, memory_order_release);
    for (int k = 0; k < n; k++)
        if (k != me)
            comm_bell_ring(&b->bells[k]);
    for (int k = 0; k < n; k++) {
        shm_flag *f = &b->flags[k];
        comm_idle w = {0};
        slot_wait sw = {c->host_ranks[c->host_first[0] + k]};
        ai_status_t st = AI_OK;
        while ((int32_t)(atomic_load_explicit(&f->posted, memory_order_acquire) - call) < 0)
            if ((st = comm_idle_step(c, &w, &slot_ops, &sw)) != AI_OK)
                break;
        comm_idle_reset(c, &w);
        if (st != AI_OK)
            return st;
        /* A rank already in call + 1 writes the other set's description. */
        const shm_slot_call *theirs = &f->what[call & 1];
        if (theirs->call_seq == what->call_seq &&
            memcmp(&theirs->sig, &what->sig, sizeof what->sig) != 0)
            return comm_abort(c, comm_call_mismatch(c, sw.rank, comm_peer_host(c, sw.rank),
                                                    theirs->call_seq, &theirs->sig,
                                                    "shared-memory slot"));
        if (theirs->call_seq != what->call_seq || theirs->piece != piece) {
            char x[96], y[96];
            return comm_abort(c, util_fail(AI_ERR_PROTO,
                                           "rank %d is in collective call #%u (%s, piece %u) while "
                                           "rank %d is in call #%u (%s, piece %u; shared-memory "
                                           "slots): ranks issued different collectives or arguments",
                                           sw.rank, theirs->call_seq,
                                           comm_call_sig_str(&theirs->sig, x, sizeof x), theirs->piece,
                                           c->rank, c->call_seq, comm_call_sig_str(&c->call, y, sizeof y),
                                           piece));
        }
    }
    *set_out = set;
    return AI_OK;
}

static ai_status_t slot_piece(ai_comm *c, const comm_slot_board *b, const unsigned char *in,
                              unsigned char *out, size_t count, ai_dtype dt, ai_op op,
                              uint32_t piece)
{
    slot_set set = {0};
    ai_status_t st = slot_exchange(c, b, in, count * ai_dtype_size(dt), piece, &set);
    if (st != AI_OK)
        return st;
    /* This rank's own term from its input rather than its slot (the same
     * bytes: the same bits in the same order), which the copy may have
     * left outside this core's cache: reading it back cost as much as the
     * exchange (docs/runtime.md). Not where out, written from the first
     * step on, is the input and this rank's term comes after it. */
    const unsigned char *src[2] = {slot_of(set, 0), slot_of(set, 1)};
    if (b->me < 2)
        src[b->me] = in;
    comm_reduce_local(out, src[0], src[1], count, dt, op);
    for (int k = 2; k < b->n; k++)
        comm_reduce_local(out, out, k == b->me && in != out ? in : slot_of(set, k), count, dt, op);
    return AI_OK;
}

/* Segment k of a piece of `count` elements split over n ranks: whole
 * cache lines, so that no two ranks write one line. */
static size_t rs_lo(size_t count, size_t es, int n, int k)
{
    size_t line = es < 64 ? 64 / es : 1, q = (count + (size_t)n - 1) / (size_t)n;
    q = (q + line - 1) / line * line;
    return AI_MIN((size_t)k * q, count);
}

#define RS_DONE 0x40000000u /* a piece's second exchange: every segment reduced */
/* Every rank reducing every slot reads (p - 1) x the vector; from this
 * many such reads direct runs as a reduce-scatter instead (48 KiB on 3
 * ranks, 32 KiB on 4, 16 KiB on 8). On the 2-core machine the reduce-
 * scatter took 0.95x the time at 64 KiB on 3 ranks (1.08x at 32 KiB),
 * 0.85x at 32 KiB on 4 (1.03x at 16 KiB) and 0.74x at 16 KiB on 8 (0.91x
 * at 8 KiB), and 0.37-0.80x at 64-128 KiB (docs/runtime.md, "Messages and
 * progress"). */
#define DIRECT_RS_READS ((size_t)96 << 10)

/* One piece as a reduce-scatter on the board (direct on 3 or more ranks,
 * from DIRECT_RS_READS): every rank's payload into its slot (one
 * exchange); rank r reduces segment r of every slot, in rank order, into
 * segment r of its own slot, which no other rank reads before the second
 * exchange; then every rank copies each segment from the slot of the rank
 * that reduced it. Every segment is reduced once, so every rank ends with
 * the same bits, the bits slot_piece gives. The rank copies out of the
 * set after the second exchange, so a rank may already write the next
 * piece while it reads: the set must be in the pool's rest (never one of
 * the first two sets, which the exchange after next takes again), and
 * the next exchange of the rest must not reach it (a piece of at most a
 * third of the rest, as slot_piece_max). */
static ai_status_t slot_piece_rs(ai_comm *c, const comm_slot_board *b, const unsigned char *in,
                                 unsigned char *out, size_t count, ai_dtype dt, ai_op op,
                                 uint32_t piece)
{
    size_t es = ai_dtype_size(dt);
    int n = b->n, me = b->me;
    slot_set set = {0}, done = {0};
    ai_status_t st = slot_exchange(c, b, in, count * es, piece, &set);
    if (st != AI_OK)
        return st;
    size_t lo = rs_lo(count, es, n, me), m = rs_lo(count, es, n, me + 1) - lo;
    if (m) {
        /* this rank's own term from its input, as in slot_piece */
        unsigned char *acc = (unsigned char *)slot_of(set, me) + lo * es;
        const unsigned char *src[2] = {slot_of(set, 0) + lo * es, slot_of(set, 1) + lo * es};
        if (me < 2)
            src[me] = in + lo * es;
        comm_reduce_local(acc, src[0], src[1], m, dt, op);
        for (int k = 2; k < n; k++)
            comm_reduce_local(acc, acc, k == me ? in + lo * es : slot_of(set, k) + lo * es, m, dt,
                              op);
    }
    if ((st = slot_exchange(c, b, NULL, 0, RS_DONE | piece, &done)) != AI_OK)
        return st;
    for (int k = 0; k < n; k++) {
        size_t klo = rs_lo(count, es, n, k), klen = rs_lo(count, es, n, k + 1) - klo;
        if (klen)
            memcpy(out + klo * es, slot_of(set, k) + klo * es, klen * es);
    }
    return AI_OK;
}

/* The largest piece, in bytes per rank, of the reduce-scatter pieces:
 * a third of the rest over n (as slot_piece_max, without its cap of
 * COMM_SLOT_PIECE: each piece costs two exchanges, and on 4 ranks of 2
 * cores 330 KiB pieces took a 1 MiB allreduce in 312-330 us against
 * 540 us in 64 KiB ones), or 0 where that is under 2 x COMM_SLOT_SMALL:
 * the even split must keep every piece in the pool's rest. */
static size_t rs_piece_max(const comm_slot_board *b)
{
    size_t fit = slot_rest(b) / (3 * (size_t)b->n) & ~(size_t)63;
    return fit < 2 * COMM_SLOT_SMALL ? 0 : fit;
}

/* Whether a direct allreduce of `bytes` runs as a reduce-scatter. */
static int direct_rs(const comm_slot_board *b, size_t bytes)
{
    return b->n >= 3 && (size_t)(b->n - 1) * bytes >= DIRECT_RS_READS && rs_piece_max(b) > 0;
}

size_t comm_direct_reads(const ai_comm *c, size_t bytes)
{
    comm_slot_board b;
    if (!comm_slot_board_get(c, &b))
        return 0;
    size_t n = (size_t)b.n;
    return direct_rs(&b, bytes) ? 2 * (n - 1) * (bytes / n) : (n - 1) * bytes;
}

ai_status_t comm_direct_allreduce(ai_comm *c, const coll_args *a)
{
    comm_slot_board b;
    if (!comm_slot_board_get(c, &b))
        return comm_recursive_doubling_allreduce(c, a);
    size_t es = ai_dtype_size(a->dt), bytes = a->count * es;
    const unsigned char *in = a->sendbuf;
    unsigned char *out = a->recvbuf;
    if (direct_rs(&b, bytes)) {
        /* pieces of equal size (within an element): each at least half a
         * largest piece, or the whole vector, so none under COMM_SLOT_SMALL */
        size_t per = rs_piece_max(&b) / es, pieces = (a->count + per - 1) / per;
        size_t q = a->count / pieces, r = a->count % pieces, base = 0;
        for (size_t i = 0; i < pieces; i++) {
            size_t m = q + (i < r);
            ai_status_t st = slot_piece_rs(c, &b, in + base * es, out + base * es, m, a->dt,
                                           a->op, (uint32_t)i);
            if (st != AI_OK)
                return st;
            base += m;
        }
        return AI_OK;
    }
    size_t per = slot_piece_max(&b) / es;
    for (size_t base = 0; base < a->count; base += per) {
        ai_status_t st = slot_piece(c, &b, in + base * es, out + base * es,
                                    AI_MIN(per, a->count - base), a->dt, a->op,
                                    (uint32_t)(base / per));
        if (st != AI_OK)
            return st;
    }
    return AI_OK;
}


/* -------------------------------------------------------- single_copy
 *
 * One host, large vectors: reduce-scatter then allgather, both reading the
 * other ranks' buffers in place through the kernel's cross-memory attach
 * (comm_shm_peer_read, process_vm_readv) instead of pushing every byte
 * through the shared-memory rings (copy in, copy out). Rank r owns
 * segment r of the vector (count / n elements, the first count % n one
 * more):
 *
 *  1. exchange on the slot board: every rank's sendbuf and recvbuf address;
 *  2. rank r reads segment r of every other rank's sendbuf, one
 *     SC_CHUNK piece at a time into scratch that stays in cache, and
 *     reduces it with its own segment r into recvbuf segment r;
 *  3. exchange: every segment is reduced;
 *  4. rank r reads every other segment k from rank k's recvbuf into its
 *     own recvbuf (one kernel copy each);
 *  5. exchange: nobody reads this rank's buffers any more, so the call
 *     may return and the caller reuse them.
 *
 * In place (sendbuf == recvbuf) works as is: in step 2 rank r writes only
 * segment r, which no other rank reads before step 3, and step 4 writes
 * the other segments only after every rank has read its inputs.
 * Every segment is reduced by one rank and copied to the others, so every
 * rank ends with the same bits.
 *
 * The first call of a communicator tries one read from every local peer
 * and exchanges the outcome: where the system forbids such reads (ptrace
 * policy, seccomp), every rank learns it at the same call and this
 * communicator runs ring from then on. Off one host (or without shared
 * memory) it runs ring too. */

#define SC_CHUNK ((size_t)128 << 10)
#define SC_PIECE 0x5c000000u /* slot descriptions of this protocol's exchanges */

typedef struct sc_post {
    uint64_t send, recv; /* this rank's buffers, in its address space */
    int32_t ok;          /* the probe: 1 read every peer */
    int32_t pad;
} sc_post;

static size_t sc_lo(size_t count, int n, int k)
{
    size_t q = count / (size_t)n, r = count % (size_t)n;
    return (size_t)k * q + AI_MIN((size_t)k, r);
}

static ai_status_t sc_probe(ai_comm *c, const comm_slot_board *b, const sc_post *posts)
{
    slot_set set = {0};
    sc_post me = {0, 0, 1, 0};
    for (int k = 0; k < b->n && me.ok; k++) {
        unsigned char byte;
        int denied;
        if (k == b->me)
            continue;
        if (comm_shm_peer_read(c, c->host_ranks[c->host_first[0] + k], &byte,
                               (const void *)(uintptr_t)posts[k].send, 1, &denied) != AI_OK)
            me.ok = 0;
    }
    ai_status_t st = slot_exchange(c, b, &me, sizeof me, SC_PIECE | 1, &set);
    if (st != AI_OK)
        return st;
    int all = 1;
    for (int k = 0; k < b->n; k++)
        all &= ((const sc_post *)slot_of(set, k))->ok == 1;
    *b->cma = all ? 1 : -1;
    util_clear_error();
    return AI_OK;
}

ai_status_t comm_single_copy_allreduce(ai_comm *c, const coll_args *a)
{
    comm_slot_board b;
    if (!comm_slot_board_get(c, &b) || *b.cma < 0)
        return comm_ring_allreduce(c, a);
    int n = b.n, me = b.me;
    size_t es = ai_dtype_size(a->dt);
    const unsigned char *send = a->sendbuf;
    unsigned char *recv = a->recvbuf, *tmp;
    slot_set set = {0};
    sc_post mine = {(uint64_t)(uintptr_t)send, (uint64_t)(uintptr_t)recv, 1, 0}, *posts;
    ai_status_t st;
    if ((st = comm_scratch(c, ALGO_SLOT_AUX2, (size_t)n * sizeof *posts, (void **)&posts)) != AI_OK ||
        (st = comm_scratch(c, ALGO_SLOT_WORK, AI_MIN(SC_CHUNK, a->count * es), (void **)&tmp)) != AI_OK)
        return st;
    if ((st = slot_exchange(c, &b, &mine, sizeof mine, SC_PIECE | 0, &set)) != AI_OK)
        return st;
    for (int k = 0; k < n; k++)
        memcpy(&posts[k], slot_of(set, k), sizeof *posts);
    if (*b.cma == 0) {
        if ((st = sc_probe(c, &b, posts)) != AI_OK)
            return st;
        if (*b.cma < 0)
            return comm_ring_allreduce(c, a);
    }
    /* 2. My segment: mine op every other rank's, SC_CHUNK at a time. */
    size_t lo = sc_lo(a->count, n, me), len = sc_lo(a->count, n, me + 1) - lo;
    size_t per = AI_MAX((size_t)1, SC_CHUNK / es);
    int denied;
    for (size_t off = 0; off < len; off += per) {
        size_t m = AI_MIN(per, len - off), at = (lo + off) * es;
        const unsigned char *acc = send + at;
        for (int k = 0; k < n; k++) {
            if (k == me)
                continue;
            if ((st = comm_shm_peer_read(c, c->host_ranks[c->host_first[0] + k], tmp,
                                         (const void *)(uintptr_t)(posts[k].send + at), m * es,
                                         &denied)) != AI_OK)
                return comm_abort(c, st);
            comm_reduce_local(recv + at, acc, tmp, m, a->dt, a->op);
            acc = recv + at;
        }
    }
    /* 3. Every segment reduced. */
    if ((st = slot_exchange(c, &b, NULL, 0, SC_PIECE | 2, &set)) != AI_OK)
        return st;
    /* 4. The others' segments from their recvbufs. */
    for (int k = 0; k < n; k++) {
        size_t klo = sc_lo(a->count, n, k), klen = sc_lo(a->count, n, k + 1) - klo;
        if (k == me || klen == 0)
            continue;
        if ((st = comm_shm_peer_read(c, c->host_ranks[c->host_first[0] + k], recv + klo * es,
                                     (const void *)(uintptr_t)(posts[k].recv + klo * es),
                                     klen * es, &denied)) != AI_OK)
            return comm_abort(c, st);
    }
    /* 5. Nobody reads my buffers any more. */
    return slot_exchange(c, &b, NULL, 0, SC_PIECE | 3, &set);
}
