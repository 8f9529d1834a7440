/*
 * Public collective entry points: validate, resolve in-place forms and AVG,
 * pick the algorithm, run it.
 *
 * In-place forms (sendbuf == AI_IN_PLACE or sendbuf == recvbuf), resolved
 * into the coll_args form described in comm.h:
 *  - allreduce:      the input is recvbuf;
 *  - reduce_scatter: (NCCL semantics) recvbuf holds the count * size input
 *                    elements and the rank's result lands at
 *                    recvbuf + rank * count;
 *  - allgather:      the rank's contribution is already at
 *                    recvbuf + rank * count (sendbuf == recvbuf + rank *
 *                    count, NCCL's form, is also in place);
 *  - reduce:         the input is recvbuf (at the root; a non-root passing
 *                    AI_IN_PLACE has its input in recvbuf too);
 *  - alltoall:       the input is recvbuf; it is copied to scratch first
 *                    because every algorithm overwrites blocks it still has
 *                    to send.
 * AVG runs as SUM and the result is divided by the communicator size
 * afterwards (integer types truncate).
 *
 * Count 0 is valid and returns at once (every rank passes the same count,
 * so none waits for another).
 */
#include "comm/algo/algos.h"
#include "comm/select/select.h"

#include <stdio.h>
#include <strings.h>

static const char *const coll_names[AI_COLL_COUNT] = {
    [AI_ALLREDUCE] = "allreduce", [AI_REDUCE_SCATTER] = "reduce_scatter",
    [AI_ALLGATHER] = "allgather", [AI_BROADCAST] = "broadcast",
    [AI_REDUCE] = "reduce",       [AI_ALLTOALL] = "alltoall",
    [AI_BARRIER] = "barrier",
};

const char *ai_coll_name(ai_coll coll)
{
    return ((unsigned)coll < AI_COLL_COUNT) ? coll_names[coll] : "unknown";
}

ai_status_t ai_coll_parse(const char *name, ai_coll *out)
{
    if (!name)
        return util_fail(AI_ERR_INVALID, "collective name is NULL");
    for (int i = 0; i < AI_COLL_COUNT; i++) {
        if (strcasecmp(name, coll_names[i]) == 0) {
            *out = (ai_coll)i;
            return AI_OK;
        }
    }
    if (strcasecmp(name, "bcast") == 0) {
        *out = AI_BROADCAST;
        return AI_OK;
    }
    return util_fail(AI_ERR_INVALID,
                     "unknown collective '%s' (valid: allreduce, reduce_scatter, allgather, "
                     "broadcast, reduce, alltoall, barrier)",
                     name);
}

int ai_coll_algo_count(ai_coll coll)
{
    return ((unsigned)coll < AI_COLL_COUNT) ? comm_algo_count(coll) : 0;
}

const char *ai_coll_algo_name(ai_coll coll, int index)
{
    const coll_algo *al = ((unsigned)coll < AI_COLL_COUNT) ? comm_algo_at(coll, index) : NULL;
    return al ? al->name : NULL;
}

/*
 * The selection behind "auto": on several hosts with measured links the
 * network model picks (select.c); otherwise this fixed rule. `bytes`
 * is the per-rank payload the call's count describes (count * dtype size:
 * the whole vector for allreduce / broadcast / reduce, one rank's block for
 * reduce_scatter / allgather / alltoall). p = ranks, "mixed" = several hosts
 * some of which hold more than one rank (shared memory inside, network
 * between).
 *
 *  allreduce       one host, all in shared memory: direct on 2 ranks, and
 *                  on more while each reads at most 64K of the others'
 *                  ((p - 1) x bytes) or bytes <= 8K (one flag round trip
 *                  a piece; recursive_doubling's log p exchanges cost
 *                  1.3-2x more up to 8K on 2 and 4 ranks, less from 16K
 *                  on 4, where every rank reading p slots costs more);
 *                  where direct runs as a reduce-scatter, from 8M, and
 *                  on 8 or more ranks up to 64K;
 *                  bytes <= 16K: recursive_doubling (log p latency wins);
 *                  mixed: hierarchical (only leaders use the network);
 *                  p a power of two and bytes <= 4M: rabenseifner (2 log p
 *                  steps, ring's bandwidth); otherwise ring (no folding
 *                  penalty, fully bandwidth optimal).
 *  reduce_scatter  total (bytes * p) <= 64K or p a power of two with
 *                  bytes <= 256K: recursive_halving; otherwise ring.
 *  allgather       total <= 64K: recursive_doubling for powers of two,
 *                  bruck otherwise; mixed: hierarchical; otherwise ring.
 *  broadcast       bytes <= 64K: binomial; mixed: hierarchical; bytes
 *                  >= 4M: chain (pipeline fill is negligible);
 *                  otherwise scatter_allgather.
 *  reduce          bytes <= 64K: binomial; mixed: hierarchical; power of
 *                  two: rabenseifner; otherwise binary_tree (pipelined).
 *  alltoall        bytes <= 256 and p > 4: bruck (message count dominates);
 *                  p <= 16: linear; otherwise pairwise.
 *  barrier         dissemination.
 */
const char *ai_coll_auto_algo(const ai_comm *comm, ai_coll coll, size_t bytes)
{
    /* Several hosts and measured links: the network model decides. */
    const char *modelled = comm ? comm_select_model(comm, coll, bytes) : NULL;
    if (modelled)
        return modelled;
    int p = comm ? comm->size : 1, nh = comm ? comm->nhosts : 1;
    int mixed = nh > 1 && nh < p, pow2 = is_pow2(p);
    size_t total = bytes * (size_t)p;
    const size_t K = 1024, M = 1024 * 1024;
    switch (coll) {
    case AI_ALLREDUCE:
        /* direct reads (p - 1) x bytes: on 2 ranks the fastest of ours at
         * every size from 1 KiB to 64 MiB, on 4 up to 64 KiB
         * (docs/runtime.md, "The slot pool") */
        if ((p == 2 || bytes <= 8 * K || (size_t)(p - 1) * bytes <= 64 * K) && comm &&
            comm_shm_direct_ok(comm))
            return "direct";
        /* as a reduce-scatter (comm_direct_reads at most 2 x bytes), on 2
         * cores: 0.72-0.93x the better of rabenseifner and ring at 8-16 MiB
         * on 4 and 8 ranks, 0.51-0.71x at 16-64 KiB on 8; 1.1-1.4x at
         * 32 KiB-4 MiB on 4 (docs/runtime.md, "Messages and progress") */
        if ((bytes >= 8 * M || (p >= 8 && bytes <= 64 * K)) && comm && comm_shm_direct_ok(comm) &&
            comm_direct_reads(comm, bytes) <= 2 * bytes)
            return "direct";
        if (bytes <= 16 * K)
            return "recursive_doubling";
        if (mixed)
            return "hierarchical";
        return (pow2 && bytes <= 4 * M) ? "rabenseifner" : "ring";
    case AI_REDUCE_SCATTER:
        if (total <= 64 * K || (pow2 && bytes <= 256 * K))
            return "recursive_halving";
        return "ring";
    case AI_ALLGATHER:
        if (total <= 64 * K)
            return pow2 ? "recursive_doubling" : "bruck";
        return mixed ? "hierarchical" : "ring";
    case AI_BROADCAST:
        if (bytes <= 64 * K)
            return "binomial";
        if (mixed)
            return "hierarchical";
        return bytes >= 4 * M ? "chain" : "scatter_allgather";
    case AI_REDUCE:
        if (bytes <= 64 * K)
            return "binomial";
        if (mixed)
            return "hierarchical";
        return pow2 ? "rabenseifner" : "binary_tree";
    case AI_ALLTOALL:
        if (bytes <= 256 && p > 4)
            return "bruck";
        return p <= 16 ? "linear" : "pairwise";
    case AI_BARRIER:
        return "dissemination";
    default:
        return NULL;
    }
}

/* --------------------------------------------------------- validation */

static ai_status_t check_comm(ai_comm *c, ai_coll coll)
{
    if (!c)
        return util_fail(AI_ERR_INVALID, "%s: communicator is NULL", ai_coll_name(coll));
    return comm_usable(c, ai_coll_name(coll));
}

static ai_status_t check_types(ai_coll coll, ai_dtype dt, ai_op op, int has_op)
{
    if ((unsigned)dt >= AI_DTYPE_COUNT)
        return util_fail(AI_ERR_INVALID, "%s: invalid dtype %d", ai_coll_name(coll), (int)dt);
    if (has_op && (unsigned)op >= AI_OP_COUNT)
        return util_fail(AI_ERR_INVALID, "%s: invalid op %d", ai_coll_name(coll), (int)op);
    return AI_OK;
}

static ai_status_t check_buf(ai_coll coll, const void *p, const char *what, size_t count)
{
    if (count > 0 && !p)
        return util_fail(AI_ERR_INVALID, "%s: %s is NULL with count %zu", ai_coll_name(coll), what,
                         count);
    return AI_OK;
}

/* count * mult * dtype size must fit in size_t. */
static ai_status_t check_size(ai_coll coll, size_t count, size_t mult, ai_dtype dt)
{
    size_t es = ai_dtype_size(dt);
    if (count > 0 && (count > SIZE_MAX / mult || count * mult > SIZE_MAX / es))
        return util_fail(AI_ERR_INVALID, "%s: count %zu is too large", ai_coll_name(coll), count);
    return AI_OK;
}

static ai_status_t check_root(const ai_comm *c, ai_coll coll, int root)
{
    if (root < 0 || root >= c->size)
        return util_fail(AI_ERR_INVALID, "%s: root %d out of range (communicator of %d ranks)",
                         ai_coll_name(coll), root, c->size);
    return AI_OK;
}

static ai_status_t pick_algo(const ai_comm *c, ai_coll coll, const ai_algo_opts *opts,
                             size_t bytes, const coll_algo **out)
{
    const char *name = opts ? opts->algo : NULL;
    if (!name || strcasecmp(name, "auto") == 0)
        name = ai_coll_auto_algo(c, coll, bytes);
    const coll_algo *al = comm_algo_find(coll, name);
    if (!al) {
        char list[512];
        size_t len = 0;
        list[0] = '\0';
        for (int i = 0; i < comm_algo_count(coll) && len < sizeof list; i++) {
            int w = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                             comm_algo_at(coll, i)->name);
            if (w > 0)
                len += (size_t)w;
        }
        return util_fail(AI_ERR_NOTFOUND, "%s: unknown algorithm '%s' (valid: auto, %s)",
                         ai_coll_name(coll), name, list);
    }
    *out = al;
    return AI_OK;
}

static int coll_reduces(ai_coll k)
{
    return k == AI_ALLREDUCE || k == AI_REDUCE_SCATTER || k == AI_REDUCE;
}

/* Common tail: options, sequence number, run, AVG. avg_buf/avg_count: the
 * result this rank divides (NULL: none). `auto` goes to the learner when
 * one is attached and takes the call; otherwise to the model or the fixed
 * rule. */
static ai_status_t coll_run(ai_comm *c, coll_args *a, const ai_algo_opts *opts, size_t bytes,
                            void *avg_buf, size_t avg_count)
{
    ai_status_t st = AI_OK;
    int is_auto = !opts || !opts->algo || strcasecmp(opts->algo, "auto") == 0, learned = 0;
    comm_arm arm = {NULL, opts ? opts->chunk_bytes : 0, opts ? opts->channels : 0};
    if (is_auto && c->tuner.choose && a->count > 0 && a->coll != AI_BARRIER &&
        (st = c->tuner.choose(c->tuner.ctx, c, a->coll, bytes, &arm, &learned)) != AI_OK)
        return util_fail_prefix(st, "rank %d: %s: learner", c->rank, ai_coll_name(a->coll));
    /* auto across hosts wants measured links: the first such call probes
     * them (collectively, on every rank at the same call). */
    if (is_auto && !learned && (st = comm_select_prepare(c, a->coll, bytes)) != AI_OK)
        return util_fail_prefix(st, "rank %d: %s: measuring links for auto", c->rank,
                                ai_coll_name(a->coll));
    if (!learned && (st = pick_algo(c, a->coll, opts, bytes, &arm.algo)) != AI_OK)
        return st;
    const coll_algo *al = arm.algo;
    int ch = arm.channels > 0 ? arm.channels : COMM_CALL_CHANNELS;
    c->active_channels = AI_MAX(1, AI_MIN(ch, c->channels));
    a->chunk_bytes = arm.chunk_bytes;
    int avg = a->op == AI_AVG;
    c->prev_call = c->call;
    c->call = (comm_call_sig){
        .count = a->count,
        .root = a->coll == AI_BROADCAST || a->coll == AI_REDUCE ? a->root : -1,
        .coll = (uint8_t)a->coll,
        .dt = a->coll == AI_BARRIER ? 0 : (uint8_t)a->dt,
        .op = coll_reduces(a->coll) ? (uint8_t)a->op : COMM_SIG_NONE,
    };
    if (avg)
        a->op = AI_SUM;
    c->call_seq++;
    if (a->count == 0 && a->coll != AI_BARRIER)
        return AI_OK;
    double t0 = learned ? ai_now() : 0;
    c->in_call = 1;
    st = al->run(c, a);
    c->in_call = 0;
    if (st != AI_OK)
        return util_fail_prefix(st, "rank %d: %s/%s (count %zu, %s)", c->rank, ai_coll_name(a->coll),
                                al->name, a->count, ai_dtype_name(a->dt));
    if (learned && (st = c->tuner.observe(c->tuner.ctx, c, a->coll, bytes, ai_now() - t0)) != AI_OK)
        return util_fail_prefix(st, "rank %d: %s: learner", c->rank, ai_coll_name(a->coll));
    if (avg && avg_buf)
        comm_scale_div(avg_buf, avg_count, a->dt, c->size);
    return AI_OK;
}

static int in_place(const void *sendbuf, const void *recvbuf)
{
    return sendbuf == AI_IN_PLACE || sendbuf == recvbuf;
}

/* The checks every collective with a send and a receive buffer shares:
 * communicator, type and op, size (count, or count per rank when
 * per_rank), and both buffers. */
static ai_status_t check_two_bufs(ai_comm *comm, ai_coll k, const void *sendbuf,
                                  const void *recvbuf, size_t count, ai_dtype dt, ai_op op,
                                  int reduces, int per_rank)
{
    ai_status_t st;
    if ((st = check_comm(comm, k)) != AI_OK || (st = check_types(k, dt, op, reduces)) != AI_OK ||
        (st = check_size(k, count, per_rank ? (size_t)comm->size : 1, dt)) != AI_OK ||
        (st = check_buf(k, recvbuf, "recvbuf", count)) != AI_OK ||
        (st = check_buf(k, sendbuf, "sendbuf", count)) != AI_OK)
        return st;
    return AI_OK;
}

/* ---------------------------------------------------------- wrappers */

ai_status_t ai_allreduce(ai_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                         ai_dtype dt, ai_op op, const ai_algo_opts *opts)
{
    const ai_coll k = AI_ALLREDUCE;
    ai_status_t st;
    if ((st = check_two_bufs(comm, k, sendbuf, recvbuf, count, dt, op, 1, 0)) != AI_OK)
        return st;
    coll_args a = {k, in_place(sendbuf, recvbuf) ? recvbuf : sendbuf, recvbuf, count, dt, op, 0, 0};
    return coll_run(comm, &a, opts, count * ai_dtype_size(dt), recvbuf, count);
}

ai_status_t ai_reduce_scatter(ai_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                              ai_dtype dt, ai_op op, const ai_algo_opts *opts)
{
    const ai_coll k = AI_REDUCE_SCATTER;
    ai_status_t st;
    if ((st = check_two_bufs(comm, k, sendbuf, recvbuf, count, dt, op, 1, 1)) != AI_OK)
        return st;
    size_t es = ai_dtype_size(dt);
    coll_args a = {k, sendbuf, recvbuf, count, dt, op, 0, 0};
    if (in_place(sendbuf, recvbuf)) {
        a.sendbuf = recvbuf;
        a.recvbuf = BP(recvbuf, (size_t)comm->rank * count * es);
    }
    return coll_run(comm, &a, opts, count * es, a.recvbuf, count);
}

ai_status_t ai_allgather(ai_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                         ai_dtype dt, const ai_algo_opts *opts)
{
    const ai_coll k = AI_ALLGATHER;
    ai_status_t st;
    if ((st = check_two_bufs(comm, k, sendbuf, recvbuf, count, dt, AI_SUM, 0, 1)) != AI_OK)
        return st;
    size_t es = ai_dtype_size(dt);
    coll_args a = {k, sendbuf, recvbuf, count, dt, AI_SUM, 0, 0};
    if (in_place(sendbuf, recvbuf))
        a.sendbuf = BP(recvbuf, (size_t)comm->rank * count * es);
    return coll_run(comm, &a, opts, count * es, NULL, 0);
}

ai_status_t ai_broadcast(ai_comm *comm, void *buf, size_t count, ai_dtype dt, int root,
                         const ai_algo_opts *opts)
{
    const ai_coll k = AI_BROADCAST;
    ai_status_t st;
    if ((st = check_comm(comm, k)) != AI_OK || (st = check_types(k, dt, AI_SUM, 0)) != AI_OK ||
        (st = check_root(comm, k, root)) != AI_OK || (st = check_size(k, count, 1, dt)) != AI_OK ||
        (st = check_buf(k, buf, "buf", count)) != AI_OK)
        return st;
    coll_args a = {k, NULL, buf, count, dt, AI_SUM, root, 0};
    return coll_run(comm, &a, opts, count * ai_dtype_size(dt), NULL, 0);
}

ai_status_t ai_reduce(ai_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                      ai_dtype dt, ai_op op, int root, const ai_algo_opts *opts)
{
    const ai_coll k = AI_REDUCE;
    ai_status_t st;
    if ((st = check_comm(comm, k)) != AI_OK || (st = check_types(k, dt, op, 1)) != AI_OK ||
        (st = check_root(comm, k, root)) != AI_OK || (st = check_size(k, count, 1, dt)) != AI_OK ||
        (st = check_buf(k, sendbuf, "sendbuf", count)) != AI_OK)
        return st;
    int is_root = comm->rank == root;
    if ((is_root || sendbuf == AI_IN_PLACE) &&
        (st = check_buf(k, recvbuf, is_root ? "recvbuf at the root" : "recvbuf (in place)",
                        count)) != AI_OK)
        return st;
    coll_args a = {k, sendbuf, is_root ? recvbuf : NULL, count, dt, op, root, 0};
    if (sendbuf == AI_IN_PLACE || (is_root && sendbuf == recvbuf))
        a.sendbuf = recvbuf;
    return coll_run(comm, &a, opts, count * ai_dtype_size(dt), a.recvbuf, count);
}

ai_status_t ai_alltoall(ai_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                        ai_dtype dt, const ai_algo_opts *opts)
{
    const ai_coll k = AI_ALLTOALL;
    ai_status_t st;
    if ((st = check_two_bufs(comm, k, sendbuf, recvbuf, count, dt, AI_SUM, 0, 1)) != AI_OK)
        return st;
    size_t es = ai_dtype_size(dt), total = count * (size_t)comm->size * es;
    coll_args a = {k, sendbuf, recvbuf, count, dt, AI_SUM, 0, 0};
    if (count > 0 && in_place(sendbuf, recvbuf)) {
        void *copy;
        if ((st = comm_scratch(comm, ALGO_SLOT_INPLACE, total, &copy)) != AI_OK)
            return st;
        memcpy(copy, recvbuf, total);
        a.sendbuf = copy;
    }
    return coll_run(comm, &a, opts, count * es, NULL, 0);
}

ai_status_t ai_barrier(ai_comm *comm, const ai_algo_opts *opts)
{
    const ai_coll k = AI_BARRIER;
    ai_status_t st;
    if ((st = check_comm(comm, k)) != AI_OK)
        return st;
    coll_args a = {k, NULL, NULL, 0, AI_U8, AI_SUM, 0, 0};
    return coll_run(comm, &a, opts, 0, NULL, 0);
}
