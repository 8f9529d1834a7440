/*
 * libautoinfra-mpi: runs the collectives of unmodified MPI programs through
 * autoinfra (algorithm "auto"). Loaded with LD_PRELOAD; uses the MPI
 * profiling interface: every intercepted MPI_X that autoinfra cannot serve
 * is passed to the library's PMPI_X unchanged. docs/mpi-shim.md has the
 * usage, the rules and the measurements.
 *
 * Intercepted: MPI_Init, MPI_Init_thread (PMPI first, then one autoinfra
 * communicator over MPI_COMM_WORLD), MPI_Finalize (the communicator is
 * destroyed before PMPI_Finalize), and MPI_Allreduce, MPI_Allgather,
 * MPI_Reduce_scatter_block, MPI_Bcast, MPI_Alltoall.
 *
 * A call goes through autoinfra when
 *  - the communicator is MPI_COMM_WORLD, or an intracommunicator congruent
 *    with it (same ranks in the same order: MPI_Comm_dup of the world; the
 *    answer is cached on the communicator as an attribute) unless the
 *    thread level is MPI_THREAD_MULTIPLE (then only MPI_COMM_WORLD);
 *  - for the reductions the datatype is MPI_FLOAT, MPI_DOUBLE, MPI_INT /
 *    MPI_INT32_T, MPI_LONG / MPI_LONG_LONG / MPI_INT64_T, MPI_UINT8_T /
 *    MPI_UNSIGNED_CHAR with MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX (MPI
 *    defines predefined ops on predefined types only, so every rank of a
 *    correct call passes the same one); the others only move bytes and
 *    take any datatype (shim_data): ranks may describe the same data with
 *    different types of one signature, and each must still take the path
 *    the others take;
 *  - the arguments are valid (non-negative counts, root in range, no NULL
 *    buffer with a non-zero count unless the datatype addresses from
 *    MPI_BOTTOM, committed datatypes, no aliased send and receive buffers,
 *    equal send and receive sizes), so that MPI's own error handling
 *    reports anything else through the communicator's error handler.
 * The rules depend only on arguments every rank passes alike, so all ranks
 * of a call take the same path. While a rank waits in autoinfra it keeps
 * MPI's progress going (drive_mpi), so that MPI transfers other ranks
 * wait on still complete.
 *
 * Errors: if setting up autoinfra fails on any rank, one warning is printed
 * and every call goes to MPI for the rest of the job. If an autoinfra call
 * fails at run time (a peer died, a timeout, mismatched calls), the error
 * is printed and the job is aborted with MPI_Abort: the result is not
 * there, and the ranks may no longer agree on which calls completed.
 */
#include "autoinfra.h"
#include "autoinfra/introspect.h"

#include <mpi.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_TAG "autoinfra-mpi"
#define BOOT_LEN 256 /* the rendezvous message rank 0 broadcasts */
#define HOST_ID_MAX 64

/* 1 while autoinfra serves MPI_COMM_WORLD; the counters are read with
 * autoinfra_shim_counts (below). A program (or tests/test_mpi_shim.c
 * through mpi_shim_check) finds both with dlsym(RTLD_DEFAULT, ...). */
SHIM_EXPORT int autoinfra_shim_active;
/* The intercepted collectives so far: those autoinfra served (calls), of
 * those the ones it handed to MPI's own collective (mpi_arm), and those it
 * passed to MPI unserved (fallbacks: arguments or a communicator it does
 * not take). Any pointer may be NULL. */
SHIM_EXPORT void autoinfra_shim_counts(unsigned long long *calls, unsigned long long *fallbacks,
                                       unsigned long long *mpi_arm);
/* Intercepted collectives passed to MPI while autoinfra was active; those
 * autoinfra served; of those, the ones it handed to MPI's own collective
 * (its host-MPI arm, below; the learner's or the duel's choice). */
static unsigned long long g_fallbacks, g_calls, g_mpi_arm;

static ai_comm *g_comm;
static int g_rank, g_size, g_verbose, g_world_only;
static int g_keyval = MPI_KEYVAL_INVALID;
/* A private communicator (a duplicate of MPI_COMM_WORLD, errors returned):
 * nothing is ever sent on it; it enters MPI's progress engine while a rank
 * waits in autoinfra (drive_mpi) and asks MPI about datatypes. */
static MPI_Comm g_private = MPI_COMM_NULL;
static char g_yes, g_no; /* attribute values: congruent with the world or not */

/* ------------------------------------------------------------ datatypes */

typedef struct shim_type {
    MPI_Datatype type;
    int size;       /* bytes per element */
    int reduces;    /* usable with MPI_SUM/PROD/MIN/MAX as `dt` */
    ai_dtype dt;
} shim_type;

static shim_type g_types[40];
static int g_ntypes;

static void type_add(MPI_Datatype t, int reducible)
{
    int size = 0;
    if (t == MPI_DATATYPE_NULL || g_ntypes >= (int)(sizeof g_types / sizeof g_types[0]) ||
        PMPI_Type_size(t, &size) != MPI_SUCCESS || size <= 0)
        return;
    shim_type *e = &g_types[g_ntypes++];
    e->type = t;
    e->size = size;
    e->reduces = 0;
    e->dt = AI_U8;
    /* reducible: 1 float, 2 signed integer, 3 unsigned 8-bit */
    if (reducible == 1 && (size == 4 || size == 8)) {
        e->reduces = 1;
        e->dt = size == 4 ? AI_F32 : AI_F64;
    } else if (reducible == 2 && (size == 4 || size == 8)) {
        e->reduces = 1;
        e->dt = size == 4 ? AI_I32 : AI_I64;
    } else if (reducible == 3 && size == 1) {
        e->reduces = 1;
        e->dt = AI_U8;
    }
}

static void types_init(void)
{
    g_ntypes = 0;
    type_add(MPI_FLOAT, 1);
    type_add(MPI_DOUBLE, 1);
    type_add(MPI_INT, 2);
    type_add(MPI_INT32_T, 2);
    type_add(MPI_LONG, 2);
    type_add(MPI_LONG_LONG, 2);
    type_add(MPI_INT64_T, 2);
    type_add(MPI_UINT8_T, 3);
    type_add(MPI_UNSIGNED_CHAR, 3);
    /* moved as bytes only */
    type_add(MPI_BYTE, 0);
    type_add(MPI_CHAR, 0);
    type_add(MPI_SIGNED_CHAR, 0);
    type_add(MPI_INT8_T, 0);
    type_add(MPI_SHORT, 0);
    type_add(MPI_UNSIGNED_SHORT, 0);
    type_add(MPI_INT16_T, 0);
    type_add(MPI_UINT16_T, 0);
    type_add(MPI_UNSIGNED, 0);
    type_add(MPI_UINT32_T, 0);
    type_add(MPI_UNSIGNED_LONG, 0);
    type_add(MPI_UNSIGNED_LONG_LONG, 0);
    type_add(MPI_UINT64_T, 0);
}

static const shim_type *type_find(MPI_Datatype t)
{
    for (int i = 0; i < g_ntypes; i++)
        if (g_types[i].type == t)
            return &g_types[i];
    return NULL;
}

static int op_map(MPI_Op op, ai_op *out)
{
    if (op == MPI_SUM)
        *out = AI_SUM;
    else if (op == MPI_PROD)
        *out = AI_PROD;
    else if (op == MPI_MIN)
        *out = AI_MIN;
    else if (op == MPI_MAX)
        *out = AI_MAX;
    else
        return 0;
    return 1;
}

/* A reduction autoinfra can do: supported type and op. */
static int reduction_ok(MPI_Datatype t, MPI_Op op, ai_dtype *dt, ai_op *aop)
{
    const shim_type *e = type_find(t);
    if (!e || !e->reduces || !op_map(op, aop))
        return 0;
    *dt = e->dt;
    return 1;
}

/* ------------------------------------------------- data of any datatype */

/* One rank's side of a data-moving call (broadcast, allgather, alltoall):
 * `count` elements of `type` at `user`. MPI lets ranks describe the same
 * data with different datatypes as long as the type signatures match (one
 * rank MPI_INT x 4, another one contiguous or vector type of 4 ints), and
 * matching signatures have equal byte counts. So every rank of a correct
 * call serves it in autoinfra whatever its datatype, as `bytes` bytes:
 * read in place when the type is a predefined one of g_types or a
 * contiguous/dup chain of one (`direct`), else packed to and unpacked
 * from `tmp` with MPI_Pack/MPI_Unpack in type-map order (the order the
 * signature describes). The choice depends only on the byte count, which
 * all ranks share; a rank never falls back on its own. */
typedef struct shim_data {
    void *user;
    int count;
    MPI_Datatype type;
    size_t bytes;
    int direct;
    char *tmp;
    /* On MPI_BOTTOM: the elements as seen from `base` (data_bottom). */
    int shifted_made;
    MPI_Datatype shifted;
    char *base;
} shim_data;

/* 1 if t is predefined and in g_types, or built of such a type by
 * MPI_Type_contiguous / MPI_Type_dup only: its bytes lie in type-map order
 * from the buffer's address, extent equal to size. */
static int type_direct(MPI_Datatype t, int depth)
{
    if (type_find(t))
        return 1;
    int ni = 0, na = 0, nd = 0, comb = 0, ints[1];
    MPI_Aint addrs[1];
    MPI_Datatype inner;
    if (depth > 32 || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS ||
        (comb != MPI_COMBINER_CONTIGUOUS && comb != MPI_COMBINER_DUP) || nd != 1 || ni > 1 ||
        na != 0 || PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, &inner) != MPI_SUCCESS)
        return 0;
    int ok = type_direct(inner, depth + 1);
    /* get_contents returns a new handle for a derived inner type */
    if (PMPI_Type_get_envelope(inner, &ni, &na, &nd, &comb) == MPI_SUCCESS &&
        comb != MPI_COMBINER_NAMED)
        PMPI_Type_free(&inner);
    return ok;
}

/* 1 if MPI takes t in communication: predefined, or derived and
 * committed. MPI has no query for the latter; packing no element checks it
 * (both MPI flavours answer MPI_ERR_TYPE for an uncommitted type, and the
 * private communicator returns the error instead of aborting). */
static int type_committed(MPI_Datatype t)
{
    int ni = 0, na = 0, nd = 0, comb = 0, pos = 0;
    char scratch[8];
    if (type_find(t))
        return 1;
    if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS)
        return 0;
    return comb == MPI_COMBINER_NAMED ||
           PMPI_Pack(scratch, 0, t, scratch, (int)sizeof scratch, &pos, g_private) == MPI_SUCCESS;
}

/* Describe count x type at buf; 0 if its size is unknown or MPI would not
 * take the type (uncommitted): MPI's own error handling then reports the
 * call, through the communicator's error handler. */
static int data_init(shim_data *d, const void *buf, int count, MPI_Datatype type)
{
    MPI_Count size = 0;
    memset(d, 0, sizeof *d);
    if (count < 0 || type == MPI_DATATYPE_NULL || PMPI_Type_size_x(type, &size) != MPI_SUCCESS ||
        size < 0 || !type_committed(type))
        return 0;
    d->user = (void *)(uintptr_t)buf;
    d->count = count;
    d->type = type;
    d->bytes = (size_t)count * (size_t)size;
    d->direct = type_direct(type, 0);
    return 1;
}

/* The bytes of a call's buffer in *out: the user's buffer when direct,
 * else a scratch buffer of `room` bytes. 0 if out of memory. */
static int data_buf(shim_data *d, size_t room, char **out)
{
    if (!d->direct && !d->tmp)
        d->tmp = malloc(room ? room : 1);
    *out = d->direct ? d->user : d->tmp;
    return d->direct || d->tmp;
}

/* The address of the first byte of a datatype's first element on
 * MPI_BOTTOM (its true lower bound): 0 when the type holds no absolute
 * address, so that MPI_BOTTOM with it is an invalid buffer. */
static MPI_Aint bottom_lb(MPI_Datatype t)
{
    MPI_Aint lb = 0, extent = 0;
    return PMPI_Type_get_true_extent(t, &lb, &extent) == MPI_SUCCESS ? lb : 0;
}

/* A buffer on MPI_BOTTOM (NULL) with a datatype of absolute addresses:
 * MPICH's MPI_Pack and MPI_Unpack refuse a NULL buffer, so the same bytes
 * are described from a non-NULL base: the address of the first one, with
 * the datatype shifted back by as much (a struct of one element at
 * displacement -base; its extent, and so the place of element i, is the
 * type's). */
static int data_bottom(shim_data *d)
{
    if (d->shifted_made)
        return 1;
    MPI_Aint lb = bottom_lb(d->type), disp = -lb;
    int one = 1;
    MPI_Datatype inner = d->type;
    if (!lb || PMPI_Type_create_struct(1, &one, &disp, &inner, &d->shifted) != MPI_SUCCESS)
        return 0;
    if (PMPI_Type_commit(&d->shifted) != MPI_SUCCESS) {
        PMPI_Type_free(&d->shifted);
        return 0;
    }
    d->shifted_made = 1;
    d->base = (char *)(uintptr_t)lb;
    return 1;
}

/* MPI_Pack (unpack 0) or MPI_Unpack (1) of the user's elements
 * [first, first + n) to or from the scratch buffer at byte `at`, in pieces
 * below 2 GiB (MPI's sizes are ints). Nothing to do when direct. */
static int data_move(shim_data *d, int unpack, size_t first, size_t n, size_t at)
{
    MPI_Aint lb = 0, extent = 0;
    size_t esize = d->count ? d->bytes / (size_t)d->count : 0;
    if (d->direct || n == 0)
        return 1;
    if (!d->tmp || PMPI_Type_get_extent(d->type, &lb, &extent) != MPI_SUCCESS || esize > INT_MAX ||
        (!d->user && !data_bottom(d)))
        return 0;
    char *from = d->user ? (char *)d->user : d->base;
    MPI_Datatype type = d->user ? d->type : d->shifted;
    size_t per = esize ? INT_MAX / esize : INT_MAX;
    for (size_t i = 0; i < n;) {
        size_t k = n - i < per ? n - i : per;
        int pos = 0, len = (int)(k * esize);
        char *user = from + (MPI_Aint)(first + i) * extent, *tmp = d->tmp + at;
        int rc = unpack ? PMPI_Unpack(tmp, len, &pos, user, (int)k, type, MPI_COMM_WORLD)
                        : PMPI_Pack(user, (int)k, type, tmp, len, &pos, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS || pos != len)
            return 0;
        at += (size_t)len;
        i += k;
    }
    return 1;
}

static void data_free(shim_data *d)
{
    free(d->tmp);
    d->tmp = NULL;
    if (d->shifted_made)
        PMPI_Type_free(&d->shifted);
    d->shifted_made = 0;
}

/* ------------------------------------------------------- communicators */

/* MPI_COMM_WORLD, or an intracommunicator with the same ranks in the same
 * order (cached as an attribute on the communicator). */
static int comm_ok(MPI_Comm comm)
{
    if (comm == MPI_COMM_WORLD)
        return 1;
    if (comm == MPI_COMM_NULL || g_world_only || g_keyval == MPI_KEYVAL_INVALID)
        return 0;
    void *val = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, g_keyval, &val, &flag) != MPI_SUCCESS)
        return 0;
    if (flag)
        return val == &g_yes;
    int inter = 1, res = MPI_UNEQUAL;
    int ok = PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter &&
             PMPI_Comm_compare(comm, MPI_COMM_WORLD, &res) == MPI_SUCCESS &&
             (res == MPI_IDENT || res == MPI_CONGRUENT);
    PMPI_Comm_set_attr(comm, g_keyval, ok ? &g_yes : &g_no);
    return ok;
}

/* ------------------------------------------------------------- progress */

/* autoinfra's wait hook (ai_comm_set_wait_hook): while this rank waits in
 * an autoinfra collective, MPI must still complete what it owes others.
 * A peer may sit in a blocking MPI_Send whose receive this rank posted
 * before the collective; MPI requires that send to complete, and it only
 * can when this rank's MPI makes progress (a rendezvous answer, a copy).
 * A probe on a private communicator enters MPI's progress engine, which
 * serves every communicator; it matches nothing (nobody sends there). A
 * duplicate of the world, not of MPI_COMM_SELF: MPICH 4.0's probe on a
 * one-rank communicator completed no pending transfer of another rank. It
 * runs in the thread that called the collective, which may call MPI at
 * every thread level. */
static void drive_mpi(void *arg)
{
    (void)arg;
    int flag = 0;
    PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_private, &flag, MPI_STATUS_IGNORE);
}

/* ---------------------------------------------------- MPI's own arm
 *
 * MPI's own collective is one more arm of the learner behind `auto`
 * (ai_comm_set_host_coll), so that the shim hands a call back to MPI
 * wherever MPI is faster: at small sizes on shared memory, where a call
 * takes a microsecond or less, and wherever MPI's algorithm beats ours.
 * The arm runs on a private duplicate of the world (g_arm), with the
 * arguments autoinfra resolved: MPI types for autoinfra's, MPI_BYTE for
 * the data-moving calls (which the shim hands to autoinfra as bytes), in
 * place where autoinfra's arguments alias.
 *
 * The learner measures an arm inside autoinfra, without the shim's own
 * per-call work (argument checks, conversions) and with its agreement
 * windows, which at a fraction of a microsecond per call is not what the
 * program sees. So the shim also times the program's own calls: once the
 * learner has settled on a size bucket (its choice is the same on every
 * rank), it alternates blocks of SHIM_DUEL_BLOCK calls straight to PMPI_X
 * (the program's own arguments, no conversion) and through autoinfra,
 * SHIM_DUEL_BLOCKS of each after two untimed blocks, times each block
 * whole, takes every rank's median block of each way (a block that a
 * preemption hit does not decide), agrees on the slowest rank's (one
 * PMPI_Allreduce), and sends the bucket's calls to autoinfra only where
 * it is at least SHIM_DUEL_MARGIN faster, else to MPI (within the margin
 * MPI is as good, and it is what the program would have had), until the
 * duel runs again.
 *
 * A block is 64 calls (8 from SHIM_DUEL_LARGE bytes, where a call takes
 * 0.1-50 ms). Blocks of 8 misjudged: the learner agrees on its times once
 * per window of up to 32 calls, a microsecond or more that a median of
 * 8-call blocks leaves out (allreduce, 1 KiB, 2 ranks: autoinfra 0.40 us
 * per call in the duel against MPI's 0.48, 2.7 us once chosen), and the
 * switch between the two ways weighs on 8 calls (alltoall, 128 KiB blocks:
 * autoinfra 6% faster in the duel, 13% slower in runs of 1000 calls).
 *
 * The next duel is SHIM_DUEL_EVERY calls later, or more where the loser
 * was far slower: a duel runs 1 + SHIM_DUEL_BLOCKS blocks the loser's way,
 * and the calls until the next are as many as keep that within
 * SHIM_DUEL_COST of their time (at most SHIM_DUEL_EVERY_MAX). Every 4096
 * calls, an 8-byte allreduce on 2 ranks (MPI 0.25 us, autoinfra 2.5-19 us)
 * paid 5-10% of its time for duels. No duel runs where the learner settled
 * on MPI's own collective: autoinfra's way is then MPI's call with the
 * learner's bookkeeping added.
 *
 * Every rank makes the same calls and the decisions are agreed, so every
 * rank takes the same path. A call that moves no bytes goes to MPI at
 * once. AUTOINFRA_SHIM_MPI_ARM=0 leaves the arm and the duel out. */
#define SHIM_DUEL_BLOCK 64
#define SHIM_DUEL_BLOCK_LARGE 8
#define SHIM_DUEL_LARGE (1u << 20)
#define SHIM_DUEL_BLOCKS 5
#define SHIM_DUEL_MARGIN 0.03
#define SHIM_DUEL_EVERY 4096
#define SHIM_DUEL_EVERY_MAX (1ul << 22)
#define SHIM_DUEL_COST 0.005
#define SHIM_LEARN_MAX 400 /* calls after which the duel starts even unsettled */

#if defined(OPEN_MPI)
#define SHIM_ARM_NAME "mpi_ompi"
#elif defined(MPICH)
#define SHIM_ARM_NAME "mpi_mpich"
#else
#define SHIM_ARM_NAME "mpi_host"
#endif

static MPI_Comm g_arm = MPI_COMM_NULL;
static int g_duel_on;

enum { DUEL_LEARN, DUEL_RUN, DUEL_MPI, DUEL_AI };
typedef struct {
    unsigned long calls; /* the bucket's calls so far */
    unsigned long next;  /* DUEL_MPI/AI: the call that starts the next duel */
    int state;
    unsigned k;          /* DUEL_RUN: calls of this duel so far */
    unsigned block;      /* DUEL_RUN: calls per block */
    double t[2][SHIM_DUEL_BLOCKS]; /* timed blocks' seconds: [0] MPI, [1] autoinfra */
    unsigned n[2];       /* timed blocks so far */
    double block_t0;     /* the current timed block's start */
} shim_duel;
/* [collective][log2 bytes] */
static shim_duel g_duel[AI_COLL_COUNT][64];

static int log2_floor(size_t v)
{
    int b = 0;
    while (v >>= 1)
        b++;
    return b;
}

static MPI_Datatype mpi_type_of(ai_dtype dt, int moving)
{
    if (moving)
        return MPI_BYTE;
    switch (dt) {
    case AI_F32: return MPI_FLOAT;
    case AI_F64: return MPI_DOUBLE;
    case AI_I32: return MPI_INT32_T;
    case AI_I64: return MPI_INT64_T;
    case AI_U8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op_of(ai_op op)
{
    switch (op) {
    case AI_SUM: return MPI_SUM;
    case AI_PROD: return MPI_PROD;
    case AI_MIN: return MPI_MIN;
    case AI_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

static ai_status_t mpi_arm(void *arg, ai_coll coll, const void *sendbuf, void *recvbuf,
                           size_t count, ai_dtype dt, ai_op op, int root)
{
    (void)arg;
    int moving = coll == AI_ALLGATHER || coll == AI_BROADCAST || coll == AI_ALLTOALL;
    MPI_Datatype t = mpi_type_of(dt, moving);
    MPI_Op o = mpi_op_of(op);
    /* Every rank alike (same count, type and op): autoinfra runs its own
     * first algorithm instead. */
    if (count > INT_MAX || t == MPI_DATATYPE_NULL || (!moving && o == MPI_OP_NULL))
        return AI_ERR_UNSUPPORTED;
    int n = (int)count, rc = MPI_ERR_OTHER;
    size_t es = ai_dtype_size(dt);
    switch (coll) {
    case AI_ALLREDUCE:
        rc = PMPI_Allreduce(sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf, recvbuf, n, t, o, g_arm);
        break;
    case AI_REDUCE_SCATTER:
        if ((const char *)recvbuf == (const char *)sendbuf + (size_t)g_rank * count * es) {
            /* In place: MPI leaves the result at the start of the input */
            rc = PMPI_Reduce_scatter_block(MPI_IN_PLACE, (void *)sendbuf, n, t, o, g_arm);
            if (rc == MPI_SUCCESS && g_rank > 0 && count > 0)
                memmove(recvbuf, sendbuf, count * es);
        } else {
            rc = PMPI_Reduce_scatter_block(sendbuf, recvbuf, n, t, o, g_arm);
        }
        break;
    case AI_ALLGATHER:
        rc = PMPI_Allgather((const char *)sendbuf == (const char *)recvbuf + (size_t)g_rank * count * es
                                ? MPI_IN_PLACE
                                : sendbuf,
                            n, t, recvbuf, n, t, g_arm);
        break;
    case AI_BROADCAST:
        rc = PMPI_Bcast(recvbuf, n, t, root, g_arm);
        break;
    case AI_ALLTOALL:
        rc = PMPI_Alltoall(sendbuf, n, t, recvbuf, n, t, g_arm);
        break;
    default:
        return AI_ERR_UNSUPPORTED;
    }
    if (rc != MPI_SUCCESS)
        return AI_ERR_IO;
    __atomic_fetch_add(&g_mpi_arm, 1, __ATOMIC_RELAXED);
    return AI_OK;
}

/* A duel starts, unless the learner settled on MPI's own collective (the
 * same on every rank): then the bucket goes to MPI straight. */
static void duel_start(shim_duel *d, ai_coll coll, size_t bytes)
{
    ai_choice ch;
    if (ai_comm_choice(g_comm, coll, bytes, &ch) == AI_OK && ch.settled &&
        !strcmp(ch.algo, SHIM_ARM_NAME)) {
        d->state = DUEL_MPI;
        d->next = d->calls + SHIM_DUEL_EVERY_MAX;
        if (g_verbose > 1 && g_rank == 0)
            fprintf(stderr, SHIM_TAG ": %s %zu bytes: the learner settled on MPI's own: MPI\n",
                    ai_coll_name(coll), bytes);
        return;
    }
    d->state = DUEL_RUN;
    d->block = bytes < SHIM_DUEL_LARGE ? SHIM_DUEL_BLOCK : SHIM_DUEL_BLOCK_LARGE;
    d->k = 0;
    d->n[0] = d->n[1] = 0;
}

/* Before a call the shim would serve: 1 to pass it straight to MPI, 0
 * through autoinfra; *t0 1 when the duel times it, else 0. */
static int duel_pick(ai_coll coll, size_t bytes, double *t0)
{
    *t0 = 0;
    if (!g_duel_on)
        return 0;
    if (bytes == 0)
        return 1; /* nothing moves: MPI's own call costs least */
    shim_duel *d = &g_duel[coll][log2_floor(bytes)];
    d->calls++;
    int mpi = 0;
    switch (d->state) {
    case DUEL_MPI:
    case DUEL_AI:
        if (d->calls < d->next)
            return d->state == DUEL_MPI;
        duel_start(d, coll, bytes);
        if (d->state == DUEL_MPI)
            return 1;
        /* fall through */
    case DUEL_RUN:
        /* A block is timed from its first call's start to its last call's
         * end: what a run of calls costs, queueing and pipelining
         * included (one call of a broadcast returns at the root before
         * the data moved, and would make MPI look cheap). */
        mpi = (d->k / d->block) % 2 == 0;
        if (d->k >= 2 * d->block && d->k % d->block == 0)
            d->block_t0 = PMPI_Wtime();
        *t0 = d->k >= 2 * d->block;
        return mpi;
    default:
        return 0;
    }
}

/* The median of n block times (sorted in place; n <= SHIM_DUEL_BLOCKS). */
static double duel_median(double *v, unsigned n)
{
    if (n == 0)
        return 0;
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* After it: the duel's bookkeeping and decision. */
static void duel_done(ai_coll coll, size_t bytes, int mpi, double t0)
{
    if (!g_duel_on || bytes == 0)
        return;
    shim_duel *d = &g_duel[coll][log2_floor(bytes)];
    if (d->state == DUEL_LEARN) {
        ai_choice ch;
        /* Settled, or no learner (the model's or the rule's choice). */
        if (d->calls >= SHIM_LEARN_MAX ||
            (ai_comm_choice(g_comm, coll, bytes, &ch) == AI_OK &&
             (ch.settled || !strcmp(ch.source, "model") || !strcmp(ch.source, "rule"))))
            duel_start(d, coll, bytes);
        return;
    }
    if (d->state != DUEL_RUN)
        return;
    if (t0 > 0 && d->k % d->block == d->block - 1 && d->n[!mpi] < SHIM_DUEL_BLOCKS)
        d->t[!mpi][d->n[!mpi]++] = PMPI_Wtime() - d->block_t0;
    if (++d->k < (2 + 2 * SHIM_DUEL_BLOCKS) * d->block)
        return;
    double m[2] = {duel_median(d->t[0], d->n[0]), duel_median(d->t[1], d->n[1])}, all[2] = {0, 0};
    if (PMPI_Allreduce(m, all, 2, MPI_DOUBLE, MPI_MAX, g_arm) != MPI_SUCCESS)
        all[0] = all[1] = 0; /* every rank alike: the rank that failed aborts */
    all[0] /= d->block;
    all[1] /= d->block;
    d->state = all[1] < all[0] * (1 - SHIM_DUEL_MARGIN) ? DUEL_AI : DUEL_MPI;
    int ai = d->state == DUEL_AI;
    double win = all[ai], lose = all[!ai];
    double every = SHIM_DUEL_EVERY;
    if (win > 0 && lose > win) {
        double need = (1 + SHIM_DUEL_BLOCKS) * d->block * (lose - win) / (SHIM_DUEL_COST * win);
        every = need < every ? every : need < SHIM_DUEL_EVERY_MAX ? need : SHIM_DUEL_EVERY_MAX;
    }
    d->next = d->calls + (unsigned long)every;
    if (g_verbose > 1 && g_rank == 0)
        fprintf(stderr,
                SHIM_TAG ": %s %zu bytes: MPI %.3f us, autoinfra %.3f us per call: %s for %lu "
                         "calls\n",
                ai_coll_name(coll), bytes, all[0] * 1e6, all[1] * 1e6,
                d->state == DUEL_MPI ? "MPI" : "autoinfra", (unsigned long)every);
}

/* Counted without a locked add: on the path to MPI a locked add costs as
 * much as a small shared-memory call. The shim serves one thread's calls
 * at a time (two threads in collectives of MPI_COMM_WORLD at once are an
 * error in MPI; under MPI_THREAD_MULTIPLE other communicators go to MPI
 * unserved). */
static inline void bump(unsigned long long *c)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* A call the duel sent to MPI: counted as the shim's. */
static int mpi_direct_done(ai_coll coll, size_t bytes, double t0, int rc)
{
    bump(&g_calls);
    bump(&g_mpi_arm);
    duel_done(coll, bytes, 1, t0);
    return rc;
}

/* The last call of each collective on MPI_COMM_WORLD that the duel sent
 * to MPI outside a duel: a next call with the same counts, types, op and
 * root falls in the same bucket and goes to MPI at once, before the
 * shim's checks and conversions (a call they would have refused goes to
 * the same PMPI_X with the same arguments). Only the world: a freed
 * communicator's handle may come back for other ranks.
 *
 * Its path is the whole cost the shim adds to such a call (at 8-256 bytes
 * on 2 ranks MPI's call takes 0.1-0.3 us), so it compares the arguments
 * and counts down the calls left before the bucket's next duel, nothing
 * more: the calls it took are added to the bucket's and to the counters
 * when the collective's next call takes the long path (memo_fold) or when
 * the counters are read (autoinfra_shim_counts). */
typedef struct {
    shim_duel *d;     /* NULL: none */
    long left, start; /* calls it may still take; left when it was set */
    int count, count2, root;
    MPI_Datatype t, t2;
    MPI_Op op;
} shim_memo;
static shim_memo g_memo[AI_COLL_COUNT];
/* The bucket of calls that move nothing: MPI's, always. */
static shim_duel g_duel_zero = {.state = DUEL_MPI};

/* A collective's call takes the long path: its memo's calls counted, and
 * the memo dropped (the call may change its bucket's state). */
static void memo_fold(ai_coll coll)
{
    shim_memo *m = &g_memo[coll];
    if (!m->d)
        return;
    unsigned long long took = (unsigned long long)(m->start - m->left);
    m->d->calls += took;
    g_calls += took;
    g_mpi_arm += took;
    *m = (shim_memo){0};
}

static void memo_set(ai_coll coll, size_t bytes, MPI_Comm comm, int count, MPI_Datatype t,
                     int count2, MPI_Datatype t2, MPI_Op op, int root)
{
    shim_duel *d = bytes ? &g_duel[coll][log2_floor(bytes)] : &g_duel_zero;
    if (comm != MPI_COMM_WORLD || d->state != DUEL_MPI || (bytes && d->calls + 1 >= d->next))
        return;
    /* Taken while d->calls + 1 < d->next, as duel_pick would send them. */
    long left = bytes ? (long)(d->next - d->calls - 1) : LONG_MAX;
    g_memo[coll] = (shim_memo){d, left, left, count, count2, root, t, t2, op};
}

static inline int memo_hit(ai_coll coll, MPI_Comm comm, int count, MPI_Datatype t, int count2,
                           MPI_Datatype t2, MPI_Op op, int root)
{
    shim_memo *m = &g_memo[coll];
    if (m->left <= 0 || comm != MPI_COMM_WORLD || m->count != count || m->t != t ||
        m->count2 != count2 || m->t2 != t2 || m->op != op || m->root != root)
        return 0;
    m->left--;
    return 1;
}

SHIM_EXPORT void autoinfra_shim_counts(unsigned long long *calls, unsigned long long *fallbacks,
                                       unsigned long long *mpi_arm)
{
    unsigned long long took = 0;
    for (int k = 0; k < AI_COLL_COUNT; k++)
        if (g_memo[k].d)
            took += (unsigned long long)(g_memo[k].start - g_memo[k].left);
    if (calls)
        *calls = __atomic_load_n(&g_calls, __ATOMIC_RELAXED) + took;
    if (fallbacks)
        *fallbacks = __atomic_load_n(&g_fallbacks, __ATOMIC_RELAXED);
    if (mpi_arm)
        *mpi_arm = __atomic_load_n(&g_mpi_arm, __ATOMIC_RELAXED) + took;
}

/* ------------------------------------------------------------- results */

static void count_call(unsigned long long *c)
{
    __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* Pass the call to MPI, counted. */
#define FALLBACK(call) (count_call(&g_fallbacks), (call))

/* A call failed on this rank: say why and abort the job (see the top). */
static int fail_call(const char *fn, size_t count, const char *what, const char *why)
{
    fprintf(stderr,
            SHIM_TAG ": rank %d: %s (%zu %s) failed %s\n" SHIM_TAG
            ": aborting the job, the result is missing and the ranks may disagree "
            "(AUTOINFRA_SHIM=0 runs the program without autoinfra)\n",
            g_rank, fn, count, what, why);
    fflush(stderr);
    PMPI_Abort(MPI_COMM_WORLD, 1);
    return MPI_ERR_INTERN;
}

static int finish(ai_status_t st, const char *fn, size_t count, const char *what)
{
    if (st == AI_OK) {
        count_call(&g_calls);
        return MPI_SUCCESS;
    }
    char why[600];
    snprintf(why, sizeof why, "in autoinfra: %s: %s", ai_strerror(st), ai_last_error());
    return fail_call(fn, count, what, why);
}

/* The end of a data-moving call: `moved` is 0 if its scratch buffer could
 * not be allocated, packed or unpacked on this rank. */
static int finish_data(ai_status_t st, int moved, shim_data *a, shim_data *b, const char *fn,
                       size_t bytes)
{
    data_free(a);
    if (b)
        data_free(b);
    if (st == AI_OK && !moved)
        return fail_call(fn, bytes, "bytes",
                         "in the shim: no memory for a scratch buffer, or MPI_Pack/MPI_Unpack "
                         "refused the datatype");
    return finish(st, fn, bytes, "bytes");
}

/* ---------------------------------------------------------- collectives */

/* Each MPI_X below is the memo's short path in front of MPI's call (a
 * leaf that saves no register), and x_served the rest, out of line:
 * inlined, the rest's frame was set up on every call, the memo's
 * included. */
#define SHIM_OUT_OF_LINE __attribute__((noinline))

static SHIM_OUT_OF_LINE int allreduce_served(ai_comm *c, const void *sendbuf, void *recvbuf,
                                             int count, MPI_Datatype datatype, MPI_Op op,
                                             MPI_Comm comm)
{
    memo_fold(AI_ALLREDUCE);
    ai_dtype dt;
    ai_op aop;
    if (count < 0 || !comm_ok(comm) || !reduction_ok(datatype, op, &dt, &aop) ||
        recvbuf == MPI_IN_PLACE ||
        (count > 0 && (!sendbuf || !recvbuf || sendbuf == recvbuf)))
        return FALLBACK(PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm));
    size_t bytes = (size_t)count * ai_dtype_size(dt);
    double t0;
    if (duel_pick(AI_ALLREDUCE, bytes, &t0)) {
        memo_set(AI_ALLREDUCE, bytes, comm, count, datatype, 0, MPI_DATATYPE_NULL, op, 0);
        return mpi_direct_done(AI_ALLREDUCE, bytes, t0,
                               PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm));
    }
    const void *sb = sendbuf == MPI_IN_PLACE ? AI_IN_PLACE : sendbuf;
    int rc = finish(ai_allreduce(c, sb, recvbuf, (size_t)count, dt, aop, NULL), "MPI_Allreduce",
                    (size_t)count, ai_dtype_name(dt));
    duel_done(AI_ALLREDUCE, bytes, 0, t0);
    return rc;
}

SHIM_EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    ai_comm *c = g_comm;
    if (!c || memo_hit(AI_ALLREDUCE, comm, count, datatype, 0, MPI_DATATYPE_NULL, op, 0))
        return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    return allreduce_served(c, sendbuf, recvbuf, count, datatype, op, comm);
}

static SHIM_OUT_OF_LINE int reduce_scatter_served(ai_comm *c, const void *sendbuf,
                                                  void *recvbuf, int recvcount,
                                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    memo_fold(AI_REDUCE_SCATTER);
    ai_dtype dt;
    ai_op aop;
    if (recvcount < 0 || !comm_ok(comm) || !reduction_ok(datatype, op, &dt, &aop) ||
        recvbuf == MPI_IN_PLACE ||
        (recvcount > 0 && (!sendbuf || !recvbuf || sendbuf == recvbuf)))
        return FALLBACK(
            PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm));
    size_t n = (size_t)recvcount, es = ai_dtype_size(dt);
    double t0;
    if (duel_pick(AI_REDUCE_SCATTER, n * es, &t0)) {
        memo_set(AI_REDUCE_SCATTER, n * es, comm, recvcount, datatype, 0, MPI_DATATYPE_NULL, op, 0);
        return mpi_direct_done(
            AI_REDUCE_SCATTER, n * es, t0,
            PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm));
    }
    ai_status_t st;
    if (sendbuf == MPI_IN_PLACE) {
        /* MPI: the input is the whole receive buffer, the result goes to its
         * start. autoinfra (NCCL's convention) leaves the result at the
         * rank's block; move it. */
        st = ai_reduce_scatter(c, AI_IN_PLACE, recvbuf, n, dt, aop, NULL);
        if (st == AI_OK && g_rank > 0 && n > 0)
            memmove(recvbuf, (char *)recvbuf + (size_t)g_rank * n * es, n * es);
    } else {
        st = ai_reduce_scatter(c, sendbuf, recvbuf, n, dt, aop, NULL);
    }
    int rc = finish(st, "MPI_Reduce_scatter_block", n, ai_dtype_name(dt));
    duel_done(AI_REDUCE_SCATTER, n * es, 0, t0);
    return rc;
}

SHIM_EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    ai_comm *c = g_comm;
    if (!c || memo_hit(AI_REDUCE_SCATTER, comm, recvcount, datatype, 0, MPI_DATATYPE_NULL, op, 0))
        return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    return reduce_scatter_served(c, sendbuf, recvbuf, recvcount, datatype, op, comm);
}

/* Invalid arguments (MPI reports them), decided as the other rules on
 * what every rank of a correct call passes alike. A NULL buffer is invalid
 * unless the datatype holds absolute addresses (MPI_BOTTOM). */
static int data_bad(const shim_data *d, const void *buf)
{
    return buf == MPI_IN_PLACE || (d->bytes > 0 && !buf && (d->direct || !bottom_lb(d->type)));
}

/* Allgather (a2a 0) or alltoall (1): both move `block` bytes per pair of
 * ranks; in place, the input is in the receive buffer. Equal send and
 * receive buffers alias, unless both are MPI_BOTTOM: then the datatypes
 * say where the data are. */
static SHIM_OUT_OF_LINE int gather_or_a2a(int a2a, const void *sendbuf, int sendcount,
                                          MPI_Datatype sendtype, void *recvbuf, int recvcount,
                                          MPI_Datatype recvtype, MPI_Comm comm)
{
    memo_fold(a2a ? AI_ALLTOALL : AI_ALLGATHER);
    ai_comm *c = g_comm;
    shim_data s, r;
    int in_place = sendbuf == MPI_IN_PLACE;
    memset(&s, 0, sizeof s);
    if (!comm_ok(comm) || !data_init(&r, recvbuf, recvcount, recvtype) || data_bad(&r, recvbuf) ||
        (!in_place && (!data_init(&s, sendbuf, sendcount, sendtype) || data_bad(&s, sendbuf) ||
                       s.bytes != r.bytes || (r.bytes > 0 && sendbuf && sendbuf == recvbuf))))
        return FALLBACK(a2a ? PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                            recvtype, comm)
                            : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                             recvtype, comm));
    size_t block = r.bytes, total = block * (size_t)g_size, n = (size_t)recvcount;
    ai_coll k = a2a ? AI_ALLTOALL : AI_ALLGATHER;
    double t0;
    if (duel_pick(k, block, &t0)) {
        memo_set(k, block, comm, sendcount, in_place ? MPI_DATATYPE_NULL : sendtype, recvcount,
                 recvtype, MPI_OP_NULL, in_place);
        return mpi_direct_done(
            k, block, t0,
            a2a ? PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
                : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
    }
    size_t all = n * (size_t)g_size, mine = (size_t)g_rank * n;
    const char *fn = a2a ? "MPI_Alltoall" : "MPI_Allgather";
    char *rb, *sbytes = NULL;
    int moved = data_buf(&r, total, &rb) && (in_place || data_buf(&s, a2a ? total : block, &sbytes));
    const void *sb = in_place ? AI_IN_PLACE : sbytes;
    /* In place: allgather finds this rank's block at rank x block, alltoall
     * its whole input in the receive buffer, in MPI and autoinfra alike. */
    if (moved && in_place && a2a)
        moved = data_move(&r, 0, 0, all, 0);
    else if (moved && in_place)
        moved = data_move(&r, 0, mine, n, (size_t)g_rank * block);
    else if (moved)
        moved = data_move(&s, 0, 0, (size_t)sendcount * (a2a ? (size_t)g_size : 1), 0);
    ai_status_t st = AI_OK;
    if (moved) {
        st = a2a ? ai_alltoall(c, sb, rb, block, AI_U8, NULL)
                 : ai_allgather(c, sb, rb, block, AI_U8, NULL);
        moved = st != AI_OK || data_move(&r, 1, 0, all, 0);
    }
    int rc = finish_data(st, moved, &r, &s, fn, block);
    duel_done(k, block, 0, t0);
    return rc;
}

SHIM_EXPORT int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                              void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int ip = sendbuf == MPI_IN_PLACE;
    if (!g_comm || memo_hit(AI_ALLGATHER, comm, sendcount, ip ? MPI_DATATYPE_NULL : sendtype,
                            recvcount, recvtype, MPI_OP_NULL, ip))
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    return gather_or_a2a(0, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

SHIM_EXPORT int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                             void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int ip = sendbuf == MPI_IN_PLACE;
    if (!g_comm || memo_hit(AI_ALLTOALL, comm, sendcount, ip ? MPI_DATATYPE_NULL : sendtype,
                            recvcount, recvtype, MPI_OP_NULL, ip))
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    return gather_or_a2a(1, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

static SHIM_OUT_OF_LINE int bcast_served(ai_comm *c, void *buffer, int count,
                                         MPI_Datatype datatype, int root, MPI_Comm comm)
{
    memo_fold(AI_BROADCAST);
    shim_data d;
    if (!comm_ok(comm) || !data_init(&d, buffer, count, datatype) || data_bad(&d, buffer) ||
        root < 0 || root >= g_size)
        return FALLBACK(PMPI_Bcast(buffer, count, datatype, root, comm));
    double t0;
    if (duel_pick(AI_BROADCAST, d.bytes, &t0)) {
        size_t bytes = d.bytes;
        memo_set(AI_BROADCAST, bytes, comm, count, datatype, 0, MPI_DATATYPE_NULL, MPI_OP_NULL, root);
        data_free(&d);
        return mpi_direct_done(AI_BROADCAST, bytes, t0, PMPI_Bcast(buffer, count, datatype, root, comm));
    }
    char *b;
    int moved = data_buf(&d, d.bytes, &b) && (g_rank != root || data_move(&d, 0, 0, (size_t)count, 0));
    ai_status_t st = AI_OK;
    if (moved) {
        st = ai_broadcast(c, b, d.bytes, AI_U8, root, NULL);
        moved = st != AI_OK || g_rank == root || data_move(&d, 1, 0, (size_t)count, 0);
    }
    size_t bytes = d.bytes;
    int rc = finish_data(st, moved, &d, NULL, "MPI_Bcast", bytes);
    duel_done(AI_BROADCAST, bytes, 0, t0);
    return rc;
}

SHIM_EXPORT int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    ai_comm *c = g_comm;
    if (!c || memo_hit(AI_BROADCAST, comm, count, datatype, 0, MPI_DATATYPE_NULL, MPI_OP_NULL, root))
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    return bcast_served(c, buffer, count, datatype, root, comm);
}

/* --------------------------------------------------------------- set-up */

static int env_verbose(void)
{
    const char *v = getenv("AUTOINFRA_LOG");
    return !v ? 0 : !strcmp(v, "debug") ? 2 : !strcmp(v, "info");
}

/* This machine's first non-loopback IPv4 address that is up; 0 if none. */
static int first_ipv4(char *out, size_t len)
{
    struct ifaddrs *list;
    int found = 0;
    if (getifaddrs(&list) != 0)
        return 0;
    for (struct ifaddrs *i = list; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        const struct sockaddr_in *sa = (const struct sockaddr_in *)(const void *)i->ifa_addr;
        found = inet_ntop(AF_INET, &sa->sin_addr, out, (socklen_t)len) != NULL;
    }
    freeifaddrs(list);
    return found;
}

static unsigned long long random64(void)
{
    unsigned long long v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((unsigned long long)ts.tv_nsec << 20) ^ (unsigned long long)ts.tv_sec ^
            ((unsigned long long)getpid() << 40);
    }
    return v;
}

/* Rank 0: the rendezvous host, port and job token, as "host port token";
 * "!reason" on failure. */
static void rendezvous_offer(char *msg, size_t len)
{
    char host[128] = "";
    int port = 0;
    const char *addr = getenv("AUTOINFRA_ADDR");
    if (addr && *addr) {
        const char *colon = strrchr(addr, ':');
        size_t hl = colon ? (size_t)(colon - addr) : strlen(addr);
        if (hl == 0 || hl >= sizeof host) {
            snprintf(msg, len, "!AUTOINFRA_ADDR='%.100s' is not host[:port]", addr);
            return;
        }
        memcpy(host, addr, hl);
        host[hl] = '\0';
        if (colon) {
            char *end;
            long p = strtol(colon + 1, &end, 10);
            if (*end || end == colon + 1 || p < 1 || p > 65535) {
                snprintf(msg, len, "!AUTOINFRA_ADDR='%.100s' has no valid port", addr);
                return;
            }
            port = (int)p;
        }
    } else if (!first_ipv4(host, sizeof host)) {
        snprintf(host, sizeof host, "127.0.0.1");
    }
    if (!port && ai_rendezvous_port(host, &port) != AI_OK) {
        snprintf(msg, len, "!found no free TCP port for the rendezvous");
        return;
    }
    snprintf(msg, len, "%s %d %016llx%016llx", host, port, random64(), random64());
}

/* This rank's host id: AUTOINFRA_HOST, else "hostname@first IPv4" (on one
 * machine every network namespace is then a host of its own). */
static void host_id(char *out, size_t len)
{
    const char *h = getenv("AUTOINFRA_HOST");
    if (h && *h) {
        snprintf(out, len, "%s", h);
        return;
    }
    char name[256] = "localhost", ip[INET_ADDRSTRLEN] = "";
    if (gethostname(name, sizeof name - 1) != 0)
        snprintf(name, sizeof name, "localhost");
    name[sizeof name - 1] = '\0';
    if (first_ipv4(ip, sizeof ip)) {
        int room = (int)len - 2 - (int)strlen(ip);
        snprintf(out, len, "%.*s@%s", room > 0 ? room : 0, name, ip);
    } else {
        snprintf(out, len, "%.*s", (int)len - 1, name);
    }
}

/* The variable as a number in lo..hi (a whole one if integer), as the
 * library's own parsers check it (src/util). */
static int env_num(const char *name, double lo, double hi, int integer, double *out, char *err,
                   size_t errlen)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 1;
    char *end;
    double d = strtod(v, &end);
    if (*end || !(d >= lo && d <= hi) || (integer && d != (double)(long)d)) {
        snprintf(err, errlen, "%s='%.60s' is not %s in %g..%g", name, v,
                 integer ? "an integer" : "a number", lo, hi);
        return 0;
    }
    *out = d;
    return 1;
}

/* Agree on a flag: the lowest rank where ok is 0 (g_size if none), and how
 * many ranks that is. */
static int first_failed(int ok, int *nfailed)
{
    int mine = ok ? g_size : g_rank, first = g_size, bad = !ok, total = 0;
    if (PMPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS ||
        PMPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return 0; /* cannot agree: treat as failed on rank 0 */
    *nfailed = total;
    return first;
}

static void warn_fallback(int first, int nfailed, const char *why)
{
    if (g_rank != first)
        return;
    fprintf(stderr,
            SHIM_TAG ": WARNING: autoinfra set-up failed on rank %d (%d of %d ranks failed): %s; "
            "every collective runs in MPI\n",
            first, nfailed, g_size, why);
    fflush(stderr);
}

/* MPI's own collectives as arms of the learner, unless
 * AUTOINFRA_SHIM_MPI_ARM=0; every rank alike (the duplicate is collective,
 * and a rank whose duplicate failed makes every rank go without). */
static int all_ranks(int ok)
{
    int all = 0;
    return PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS && all;
}

static void mpi_arm_setup(ai_comm *c)
{
    const char *v = getenv("AUTOINFRA_SHIM_MPI_ARM");
    if (v && !strcmp(v, "0"))
        return;
    int all = all_ranks(PMPI_Comm_dup(MPI_COMM_WORLD, &g_arm) == MPI_SUCCESS &&
                        PMPI_Comm_set_errhandler(g_arm, MPI_ERRORS_RETURN) == MPI_SUCCESS);
    if (all) {
        /* A communicator's first collectives pay MPI's set-up (Open MPI's
         * shared-memory segments, MPICH's per-communicator state): a
         * first measurement of the arm 100 times its cost would keep the
         * learner from ever trying it again. One call of each, here. */
        unsigned char a[64] = {0}, b[64];
        int per = (int)(sizeof a / (size_t)g_size);
        all = all_ranks(
            PMPI_Allreduce(a, b, 8, MPI_UINT8_T, MPI_MAX, g_arm) == MPI_SUCCESS &&
            PMPI_Bcast(a, 8, MPI_BYTE, 0, g_arm) == MPI_SUCCESS &&
            (per < 1 || (PMPI_Allgather(a, per, MPI_BYTE, b, per, MPI_BYTE, g_arm) == MPI_SUCCESS &&
                         PMPI_Alltoall(a, per, MPI_BYTE, b, per, MPI_BYTE, g_arm) == MPI_SUCCESS &&
                         PMPI_Reduce_scatter_block(a, b, per, MPI_UINT8_T, MPI_MAX, g_arm) ==
                             MPI_SUCCESS)));
    }
    static const ai_coll colls[] = {AI_ALLREDUCE, AI_REDUCE_SCATTER, AI_ALLGATHER, AI_BROADCAST,
                                    AI_ALLTOALL};
    /* Registration fails alike on every rank (same arguments). */
    for (size_t i = 0; all && i < sizeof colls / sizeof colls[0]; i++)
        all = ai_comm_set_host_coll(c, colls[i], SHIM_ARM_NAME, mpi_arm, NULL) == AI_OK;
    g_duel_on = all;
    if (!all) {
        for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
            ai_comm_set_host_coll(c, colls[i], NULL, NULL, NULL);
        if (g_arm != MPI_COMM_NULL)
            PMPI_Comm_free(&g_arm);
        g_arm = MPI_COMM_NULL;
    }
}

static void shim_setup(void)
{
    g_verbose = env_verbose();
    PMPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *on = getenv("AUTOINFRA_SHIM");
    if (on && !strcmp(on, "0")) {
        if (g_verbose && g_rank == 0)
            fprintf(stderr, SHIM_TAG ": disabled (AUTOINFRA_SHIM=0): every collective runs in MPI\n");
        return;
    }
    if (on && *on && strcmp(on, "1")) {
        /* "off", "no", "false": whoever wrote it did not mean "on" */
        if (g_rank == 0)
            fprintf(stderr, SHIM_TAG ": WARNING: AUTOINFRA_SHIM='%.60s' is not 0 or 1; every "
                            "collective runs in MPI\n", on);
        return;
    }
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    g_world_only = provided == MPI_THREAD_MULTIPLE;
    types_init();
    if (!g_world_only &&
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &g_keyval,
                                NULL) != MPI_SUCCESS)
        g_keyval = MPI_KEYVAL_INVALID;

    /* 1. rank 0 offers the rendezvous; every rank checks its settings */
    char boot[BOOT_LEN] = "", err[300] = "", store_host[128] = "", token[40] = "";
    char self[HOST_ID_MAX];
    int store_port = 0, ok = 1, nfailed = 0, first;
    if (g_rank == 0)
        rendezvous_offer(boot, sizeof boot);
    if (g_size > 1 && PMPI_Bcast(boot, BOOT_LEN, MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        snprintf(boot, sizeof boot, "!broadcast of the rendezvous address failed");
    boot[BOOT_LEN - 1] = '\0';
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &g_private) != MPI_SUCCESS ||
        PMPI_Comm_set_errhandler(g_private, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
        snprintf(err, sizeof err, "MPI_Comm_dup of MPI_COMM_WORLD failed");
        ok = 0;
    } else if (boot[0] == '!') {
        snprintf(err, sizeof err, "rank 0: %s", boot + 1);
        ok = 0;
    } else if (sscanf(boot, "%127s %d %39s", store_host, &store_port, token) != 3) {
        snprintf(err, sizeof err, "malformed rendezvous message '%.100s'", boot);
        ok = 0;
    }
    double timeout = 0, channels = 0, no_shm = 0;
    if (ok && (!env_num("AUTOINFRA_TIMEOUT", 0, 1e6, 0, &timeout, err, sizeof err) ||
               !env_num("AUTOINFRA_CHANNELS", 0, 8, 1, &channels, err, sizeof err) ||
               !env_num("AUTOINFRA_NO_SHM", 0, 1, 1, &no_shm, err, sizeof err)))
        ok = 0;
    host_id(self, sizeof self);
    first = first_failed(ok, &nfailed);
    if (first < g_size) {
        warn_fallback(first, nfailed, err[0] ? err : "ranks could not agree");
        return;
    }

    /* 2. the communicator, on every rank */
    ai_comm_config cfg = {
        .rank = g_rank, .size = g_size, .store_host = store_host, .store_port = store_port,
        .token = token, .host_id = self, .timeout_s = timeout, .channels = (int)channels,
        .no_shm = (int)no_shm,
    };
    /* MPI's own arm must compete from the smallest sizes, where MPI's
     * shared-memory calls take a microsecond or less: the learner takes
     * every size unless the user set AUTOINFRA_TUNE_MIN. */
    const char *arm_on = getenv("AUTOINFRA_SHIM_MPI_ARM");
    if (!(arm_on && !strcmp(arm_on, "0")) && !getenv("AUTOINFRA_TUNE_MIN"))
        setenv("AUTOINFRA_TUNE_MIN", "1", 0);
    ai_comm *c = NULL;
    ai_status_t st = ai_comm_create(&cfg, &c);
    if (st != AI_OK)
        snprintf(err, sizeof err, "%s: %s", ai_strerror(st), ai_last_error());
    first = first_failed(st == AI_OK, &nfailed);
    if (first < g_size) {
        ai_comm_destroy(c);
        warn_fallback(first, nfailed, err[0] ? err : "ranks could not agree");
        return;
    }
    ai_comm_set_wait_hook(c, drive_mpi, NULL);
    mpi_arm_setup(c);
    g_comm = c;
    autoinfra_shim_active = 1;
    if (g_verbose && g_rank == 0)
        fprintf(stderr,
                SHIM_TAG ": autoinfra (algorithm auto) runs MPI_Allreduce, MPI_Allgather, "
                "MPI_Reduce_scatter_block, MPI_Bcast, MPI_Alltoall on MPI_COMM_WORLD%s: "
                "%d ranks on %d host%s, rendezvous %s:%d, host id of rank 0 '%s'\n",
                g_world_only ? " (thread level multiple: no other communicator)"
                             : " and communicators congruent with it",
                g_size, ai_comm_nhosts(c), ai_comm_nhosts(c) == 1 ? "" : "s", store_host, store_port,
                self);
}

SHIM_EXPORT int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS)
        shim_setup();
    return rc;
}

SHIM_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        shim_setup();
    return rc;
}

SHIM_EXPORT int MPI_Finalize(void)
{
    if (g_comm) {
        /* Nobody tears down its connections while a peer may still be
         * reading the last collective's data from them. */
        PMPI_Barrier(MPI_COMM_WORLD);
        unsigned long long calls, falls, arm;
        autoinfra_shim_counts(&calls, &falls, &arm);
        if (g_verbose && g_rank == 0)
            fprintf(stderr,
                    SHIM_TAG ": rank 0: %llu collectives ran in autoinfra, %llu in MPI (of "
                             "autoinfra's, %llu in MPI's own collective, the learner's choice)\n",
                    calls, falls, arm);
        ai_comm *c = g_comm;
        g_comm = NULL;
        autoinfra_shim_active = 0;
        ai_comm_destroy(c);
    }
    if (g_private != MPI_COMM_NULL)
        PMPI_Comm_free(&g_private);
    if (g_arm != MPI_COMM_NULL)
        PMPI_Comm_free(&g_arm);
    if (g_keyval != MPI_KEYVAL_INVALID)
        PMPI_Comm_free_keyval(&g_keyval);
    return PMPI_Finalize();
}
