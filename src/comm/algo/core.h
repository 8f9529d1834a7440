/*
 * The algorithm cores (core_*.c): the ring, tree, recursive halving /
 * doubling and non-power-of-two fold building blocks, and the two-level
 * host steps, written once and called by the per-collective algorithm
 * files (allreduce.c, allgather.c, ...). A per-collective file calls only
 * cores and the engine (comm.h), never another per-collective file, so
 * each algorithm reads in one place and a fix to a core reaches every
 * collective that uses it.
 *
 * Groups. The hierarchical algorithms run the flat ones on subsets of the
 * communicator (the ranks of one host, the host leaders), and tree
 * algorithms are written for root 0. Both needs are met by writing the
 * reusable cores against a group: n members indexed 0..n-1, `me` being my
 * index (-1: not a member), mapped to communicator ranks by g_rank().
 * A group can be rotated so that any member becomes index 0, which turns
 * every rooted algorithm into a root-0 algorithm.
 *
 * Progress rule (comm.h): only the requests passed to the comm_wait in
 * progress move, and messages between two ranks match in posting order.
 * So whatever is meant to overlap (forward segment k while receiving k+1)
 * goes into one wait, and an earlier-posted request to a peer is waited no
 * later than a later one in the same direction.
 *
 * Scratch slots (comm_scratch): 0..2 belong to the algorithm that runs; 3
 * belongs to coll.c (in-place alltoall keeps its copy of the input there).
 * A composed algorithm uses a slot only while no core it calls uses it.
 */
#ifndef AI_COMM_ALGO_CORE_H
#define AI_COMM_ALGO_CORE_H

#include "comm/algo_registry.h"
#include "comm/kernel/reduce.h"

#include <string.h>

#define ALGO_SLOT_WORK 0   /* accumulation / packing buffer */
#define ALGO_SLOT_AUX 1    /* second buffer (bruck) */
#define ALGO_SLOT_AUX2 2   /* third buffer or request arrays */

/* Messages below this many bytes are latency bound: trees/doubling. Also
 * the default pipelining segment: large enough that the per-message cost
 * (a header and a few polls, ~microseconds) is small against moving the
 * segment (64 KiB takes ~10-20 us at shm/loopback bandwidth), small enough
 * that filling a pipeline of depth log2(p)..p costs little for MiB-sized
 * messages and that a segment fits in L2 while it is reduced and forwarded. */
#define ALGO_SMALL_BYTES ((size_t)64 << 10)
#define ALGO_DEFAULT_SEGMENT COMM_ALGO_DEFAULT_SEGMENT

typedef struct comm_group {
    int n;           /* members */
    int me;          /* my index, -1 if not a member */
    int rot;         /* index i is base index (i + rot) % n */
    const int *idx;  /* base index -> position in ranks (NULL: identity) */
    const int *ranks;/* position -> communicator rank (NULL: identity) */
    int sub_i;       /* base index whose rank is replaced by sub_r (-1: none) */
    int sub_r;
} comm_group;

static inline int g_rank(const comm_group *g, int i)
{
    int j = i + g->rot;
    if (j >= g->n)
        j -= g->n;
    if (j == g->sub_i)
        return g->sub_r;
    if (g->idx)
        j = g->idx[j];
    return g->ranks ? g->ranks[j] : j;
}

/* All ranks of the communicator. */
static inline comm_group group_world(const ai_comm *c)
{
    comm_group g = {c->size, c->rank, 0, NULL, NULL, -1, -1};
    return g;
}

/* The same group with member `root` (an index of g) moved to index 0. */
static inline comm_group group_rotate(const comm_group *g, int root)
{
    comm_group r = *g;
    r.rot = (g->rot + root) % g->n;
    if (g->me >= 0)
        r.me = (g->me - root + g->n) % g->n;
    return r;
}

/* Ranks on host h, in ascending rank order; I am a member if on h. */
static inline comm_group group_host(const ai_comm *c, int h)
{
    comm_group g = {c->host_first[h + 1] - c->host_first[h], -1, 0, NULL,
                    c->host_ranks + c->host_first[h], -1, -1};
    if (c->host_of[c->rank] == h)
        g.me = c->local_rank;
    return g;
}

/* Index of communicator rank r within host group of r's host. */
static inline int host_index_of(const ai_comm *c, int r)
{
    int h = c->host_of[r];
    for (int i = c->host_first[h]; i < c->host_first[h + 1]; i++)
        if (c->host_ranks[i] == r)
            return i - c->host_first[h];
    return 0;
}

/* One leader per host, index = host index. The leader is the host's lowest
 * rank, except that `root` (if >= 0) leads its own host, so rooted
 * collectives need no extra hop on the root's host. */
static inline comm_group group_leaders(const ai_comm *c, int root)
{
    comm_group g = {c->nhosts, -1, 0, c->host_first, c->host_ranks, -1, -1};
    if (root >= 0) {
        g.sub_i = c->host_of[root];
        g.sub_r = root;
    }
    int h = c->host_of[c->rank];
    if (g_rank(&g, h) == c->rank)
        g.me = h;
    return g;
}

/* Block i of n elements split over p blocks as evenly as possible: the
 * first n % p blocks get one extra element. */
static inline size_t part_off(size_t n, int p, int i)
{
    size_t q = n / (size_t)p, r = n % (size_t)p, k = (size_t)i;
    return k * q + (k < r ? k : r);
}

static inline size_t part_len(size_t n, int p, int i)
{
    return n / (size_t)p + ((size_t)i < n % (size_t)p ? 1 : 0);
}

/* Largest power of two <= n (n >= 1). */
static inline int pow2_floor(int n)
{
    int p = 1;
    while (p <= n / 2)
        p *= 2;
    return p;
}

static inline int is_pow2(int n)
{
    return n > 0 && (n & (n - 1)) == 0;
}

/* Folding for non-power-of-two groups (n = pp + rem, pp a power of two):
 * the first 2*rem indices pair up, the even one of each pair hands its data
 * to the odd one and sits out, and the remaining pp "virtual" ranks run the
 * power-of-two algorithm. Why: recursive doubling/halving need partners at
 * every distance 2^k, which only exist for pp ranks; folding costs one extra
 * step at the start and one at the end instead of a second algorithm.
 * fold_virtual: my virtual index (-1 when I sit out). fold_real: the index
 * of virtual rank v. Virtual v owns the original indices
 * [fold_first(v), fold_first(v + 1)) -- contiguous, so windows of virtual
 * ranks are contiguous ranges of blocks. */
static inline int fold_virtual(int me, int rem)
{
    if (me < 2 * rem)
        return (me & 1) ? me / 2 : -1;
    return me - rem;
}

static inline int fold_real(int v, int rem)
{
    return v < rem ? 2 * v + 1 : v + rem;
}

static inline int fold_first(int v, int rem)
{
    return v < rem ? 2 * v : v + rem;
}

/* Where the blocks of virtual ranks live, in elements: EVEN splits `count`
 * evenly over the pp virtual ranks (allreduce/reduce: any split works);
 * FOLDED gives virtual v the `count`-element blocks of its original ranks
 * (reduce_scatter/allgather: block i belongs to rank i). */
typedef struct vlayout {
    enum { VL_EVEN, VL_FOLDED } kind;
    size_t count;
    int pp, rem;
} vlayout;

static inline size_t vl_off(const vlayout *L, int v)
{
    if (L->kind == VL_EVEN)
        return part_off(L->count, L->pp, v);
    return (size_t)fold_first(v, L->rem) * L->count;
}

#define BP(p, off) ((unsigned char *)(p) + (off))
#define CBP(p, off) ((const unsigned char *)(p) + (off))

static inline void copy_if(void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes)
        memmove(dst, src, bytes);
}

/* Blocks of a buffer, one per group member: block i is the bytes
 * [blk_off(B, n, i), blk_off(B, n, i + 1)). With `first` they start at
 * first[i] * unit (variable blocks: whole hosts); without, the count units
 * are split evenly by part_off (count == n: block i is unit bytes at
 * i * unit). */
typedef struct comm_blocks {
    const int *first;
    size_t count;
    size_t unit;
} comm_blocks;

static inline size_t blk_off(const comm_blocks *B, int n, int i)
{
    return (B->first ? (size_t)B->first[i] : part_off(B->count, n, i)) * B->unit;
}

/* ------------------------------------------------- the fold (core_fold.c)
 * The two extra steps that let the power-of-two cores run on any group.
 * fold_of(g) says where I stand; then, in order:
 *  - a member that sits out (nv < 0) calls comm_core_fold_leave and is done;
 *  - its partner (odd index < 2 rem) takes the data in with
 *    comm_core_fold_join_reduce or comm_core_fold_join_recv, runs the
 *    power-of-two algorithm as virtual rank nv, and hands the result back
 *    with comm_core_fold_return.
 * Members that have no partner find every join / return a no-op. */
typedef struct comm_fold {
    int pp, rem; /* n = pp + rem, pp a power of two */
    int nv;      /* my virtual index, -1 when I sit out */
} comm_fold;

static inline comm_fold fold_of(const comm_group *g)
{
    int pp = pow2_floor(g->n);
    comm_fold f = {pp, g->n - pp, fold_virtual(g->me, g->n - pp)};
    return f;
}

/* Sitting out: send sbytes of sbuf to my partner, then (rbuf non-NULL)
 * receive rbytes of the result into rbuf. */
ai_status_t comm_core_fold_leave(ai_comm *c, const comm_group *g, const void *sbuf,
                                 size_t sbytes, void *rbuf, size_t rbytes);
/* Partner: acc = (partner's count elements) op *cur; then *cur = acc. */
ai_status_t comm_core_fold_join_reduce(ai_comm *c, const comm_group *g, const comm_fold *f,
                                       void *acc, const void **cur, size_t count, ai_dtype dt,
                                       ai_op op);
/* Partner: receive the partner's bytes into buf (no reduction). */
ai_status_t comm_core_fold_join_recv(ai_comm *c, const comm_group *g, const comm_fold *f,
                                     void *buf, size_t bytes);
/* Partner: send bytes of buf back to the member that sat out. */
ai_status_t comm_core_fold_return(ai_comm *c, const comm_group *g, const comm_fold *f,
                                  const void *buf, size_t bytes);
/* The way in for an allreduce-shaped call (count elements in and out on
 * every rank): a single member copies in to out, a member that sits out
 * hands in over and receives the result in out, both with *done = 1; a
 * partner reduces its partner's data with in into out (*cur = out), any
 * other member only sets *cur = in. */
ai_status_t comm_core_fold_allreduce_in(ai_comm *c, const comm_group *g, const comm_fold *f,
                                        const void *in, void *out, size_t count, ai_dtype dt,
                                        ai_op op, const void **cur, int *done);

/* ------------------------------------------------- ring and tree cores (core_ring.c, core_tree.c)
 * All run on group g (me >= 0) with the root at index 0 where rooted.
 * Counts are elements of dt; es = ai_dtype_size(dt). */

/* A flow: requests posted as others complete, in lanes. Each lane's
 * operations are posted in order (FIFO matching: one lane per peer and
 * direction), an operation once its dep (an index into ops, -1: none)
 * is done; comm_core_flow returns when every operation is done. The
 * streamed ring and the streamed hierarchical allreduce (core_ring.c)
 * are flows. Lane l is ops[lane_first[l], lane_first[l + 1]). Uses
 * scratch slot ALGO_SLOT_AUX2; the callers keep ops in ALGO_SLOT_AUX. */
typedef struct comm_flow_op {
    comm_req_kind kind;
    int peer;
    int dep;
    const void *sbuf;  /* send */
    void *rbuf;        /* receive, or the reduction's destination */
    const void *src;   /* the reduction's other operand */
    size_t bytes;
    int posted;        /* comm_core_flow's */
} comm_flow_op;

ai_status_t comm_core_flow(ai_comm *c, comm_flow_op *ops, int nops, const int *lane_first,
                           int nlanes, ai_dtype dt, ai_op op);

/* Allreduce over hosts of two ranks each (local: this host's two ranks;
 * rail: local rank local->me of every host), the host step, the ring
 * across hosts and the gather streamed together (core_ring.c). lead 0:
 * each rank runs the ring on half the vector (both drive the network);
 * lead 1: local rank 0 runs it on all of it (one flow per host). */
ai_status_t comm_core_host2_allreduce(ai_comm *c, const comm_group *local, const comm_group *rail,
                                      const void *in, void *out, size_t count, ai_dtype dt,
                                      ai_op op, int lead);

/* Allreduce: ring reduce-scatter + ring allgather. in may equal out.
 * chunk_bytes > 0 runs the ring over slices of n * chunk_bytes, lock-step;
 * chunk_bytes 0 streams a ring across hosts in pieces (a flow). */
ai_status_t comm_core_ring_allreduce(ai_comm *c, const comm_group *g, const void *in, void *out,
                                     size_t count, ai_dtype dt, ai_op op, size_t chunk_bytes);

/* Ring allgather of the blocks B of buf: on entry I hold block `own`
 * (an index taken modulo n), on return every block. */
ai_status_t comm_core_ring_allgather(ai_comm *c, const comm_group *g, void *buf,
                                     const comm_blocks *B, int own);

/* Broadcasts of `bytes` bytes from index 0. */
ai_status_t comm_core_binomial_bcast(ai_comm *c, const comm_group *g, void *buf, size_t bytes);
typedef enum { TREE_BINARY, TREE_CHAIN } tree_kind;
ai_status_t comm_core_pipe_bcast(ai_comm *c, const comm_group *g, void *buf, size_t bytes,
                                 tree_kind kind, size_t seg_bytes);
ai_status_t comm_core_scatter_allgather_bcast(ai_comm *c, const comm_group *g, void *buf,
                                              size_t count, size_t es);
/* Broadcast by size: binomial up to ALGO_SMALL_BYTES, scatter-allgather
 * above (count elements of es bytes). */
ai_status_t comm_core_bcast_sized(ai_comm *c, const comm_group *g, void *buf, size_t count,
                                  size_t es);

/* Reduces to index 0. `in` is my contribution; acc (count elements) is
 * where an interior node accumulates and where index 0 gets the result;
 * acc may equal in. Leaves never touch acc. */
ai_status_t comm_core_binomial_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                      size_t count, ai_dtype dt, ai_op op);
ai_status_t comm_core_tree_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                  size_t count, ai_dtype dt, ai_op op, size_t seg_bytes);

/* ------------------------------------------------- recursive halving / doubling (core_rhd.c) */

/* Recursive halving among the virtual ranks: on return acc holds, in my own
 * window [vl_off(nv), vl_off(nv + 1)), the reduction over all virtual ranks
 * of their `in`. Other parts of acc are garbage. in may equal acc. */
ai_status_t comm_core_halving(ai_comm *c, const comm_group *g, const vlayout *L, int nv,
                              const void *in, void *acc, ai_dtype dt, ai_op op);
/* Recursive doubling allgather among the virtual ranks: on entry each
 * holds its own window of buf, on return all windows. */
ai_status_t comm_core_doubling(ai_comm *c, const comm_group *g, const vlayout *L, int nv,
                               void *buf, size_t es);
/* Rabenseifner reduce to index 0: the fold, halving, then a binomial
 * gather of the reduced blocks. acc (count elements) is used at every
 * rank. */
ai_status_t comm_core_rab_reduce(ai_comm *c, const comm_group *g, const void *in, void *acc,
                                 size_t count, ai_dtype dt, ai_op op);

/* ------------------------------------------------- two-level steps (core_host.c)
 * The host-local steps of the hierarchical allreduces: every rank's input
 * reduced into its host leader's recvbuf; the leader's recvbuf to all the
 * ranks of its host. */
ai_status_t comm_core_host_reduce(ai_comm *c, const coll_args *a);
ai_status_t comm_core_host_bcast(ai_comm *c, const coll_args *a);

#endif
