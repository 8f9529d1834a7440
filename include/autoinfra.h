/*
 * autoinfra: learned tuning for distributed-training infrastructure.
 *
 * The one public header. The CLI, benchmarks and plugins use only what is
 * declared here. Layering is described in docs/architecture.md.
 *
 * Conventions
 *  - Every fallible function returns ai_status_t: AI_OK (0) on success, a
 *    negative code otherwise. ai_strerror() names the code; ai_last_error()
 *    gives the detailed message of the most recent failure on this thread
 *    (which peer, which file, which JSON path).
 *  - Output parameters come last and are written only on success.
 *  - Objects are created by *_create and released by *_destroy; after a failed
 *    *_create nothing needs releasing.
 */
#ifndef AUTOINFRA_H
#define AUTOINFRA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AI_VERSION_MAJOR 0
#define AI_VERSION_MINOR 1

/* ------------------------------------------------------------------ status */

typedef enum ai_status {
    AI_OK = 0,
    AI_ERR_INVALID = -1,     /* bad argument, flag or spec value */
    AI_ERR_NOMEM = -2,       /* allocation failed */
    AI_ERR_IO = -3,          /* system call or file failure */
    AI_ERR_TIMEOUT = -4,     /* a wait ran out of time (stalled peer) */
    AI_ERR_PEER = -5,        /* a peer died or closed its connection */
    AI_ERR_PROTO = -6,       /* wrong token, wrong version, malformed frame */
    AI_ERR_PARSE = -7,       /* syntax error in an input file */
    AI_ERR_UNSUPPORTED = -8, /* valid request this build cannot serve */
    AI_ERR_INFEASIBLE = -9,  /* no plan satisfies the constraints */
    AI_ERR_ABORTED = -10,    /* communicator failed earlier; unusable */
    AI_ERR_NOTFOUND = -11    /* unknown name (algorithm, device, file) */
} ai_status_t;

const char *ai_strerror(ai_status_t status);
/* Detailed message of the last failure on the calling thread ("" if none). */
const char *ai_last_error(void);

/* ------------------------------------------------------------ data types */

typedef enum ai_dtype {
    AI_F32, AI_F64, AI_F16, AI_BF16, AI_I32, AI_I64, AI_U8, AI_DTYPE_COUNT
} ai_dtype;

typedef enum ai_op { AI_SUM, AI_PROD, AI_MIN, AI_MAX, AI_AVG, AI_OP_COUNT } ai_op;

size_t ai_dtype_size(ai_dtype dt);
const char *ai_dtype_name(ai_dtype dt);
const char *ai_op_name(ai_op op);
/* Parse "f32", "bf16", ... / "sum", "avg", ... (case-insensitive). */
ai_status_t ai_dtype_parse(const char *name, ai_dtype *out);
ai_status_t ai_op_parse(const char *name, ai_op *out);

/* Conversions used for f16 / bf16 (IEEE 754 binary16, bfloat16; round to
 * nearest even). */
float ai_f16_to_f32(uint16_t h);
uint16_t ai_f32_to_f16(float f);
float ai_bf16_to_f32(uint16_t h);
uint16_t ai_f32_to_bf16(float f);

/* ------------------------------------------------------------ communicator */

typedef struct ai_comm ai_comm;

/*
 * Explicit configuration. ai_comm_create_env() fills one from the
 * environment (docs/runtime.md lists the variables):
 *   AUTOINFRA_RANK / AUTOINFRA_SIZE, or OMPI_COMM_WORLD_RANK/_SIZE (Open MPI),
 *   PMI_RANK/PMI_SIZE (MPICH hydra), SLURM_PROCID/SLURM_NTASKS (srun);
 *   AUTOINFRA_ADDR host:port of the rendezvous store on rank 0;
 *   AUTOINFRA_TOKEN job token; AUTOINFRA_HOST what counts as one host;
 *   AUTOINFRA_TIMEOUT seconds; AUTOINFRA_CHANNELS TCP connections per peer.
 */
typedef struct ai_comm_config {
    int rank;
    int size;
    const char *store_host;  /* rendezvous host (rank 0 listens there) */
    int store_port;
    const char *token;       /* job token; ranks with another token are refused */
    const char *host_id;     /* NULL: hostname; ranks with equal ids share memory */
    double timeout_s;        /* every wait; <= 0: default 30 s */
    int channels;            /* TCP connections per peer pair; <= 0: 2 */
    int no_shm;              /* 1: never use shared memory (all TCP) */
} ai_comm_config;

/* Create a communicator; collective over all `size` ranks. */
ai_status_t ai_comm_create(const ai_comm_config *cfg, ai_comm **out);
ai_status_t ai_comm_create_env(ai_comm **out);
/* Release everything; safe on a failed communicator; NULL is a no-op. */
void ai_comm_destroy(ai_comm *comm);

int ai_comm_rank(const ai_comm *comm);
int ai_comm_size(const ai_comm *comm);
/* Number of distinct hosts, and this rank's host index (0..nhosts-1). */
int ai_comm_nhosts(const ai_comm *comm);
int ai_comm_host_of(const ai_comm *comm, int rank);
/* AI_OK while usable; the error that broke it otherwise. */
ai_status_t ai_comm_state(const ai_comm *comm);

/* ------------------------------------------------------------- collectives */

typedef enum ai_coll {
    AI_ALLREDUCE, AI_REDUCE_SCATTER, AI_ALLGATHER, AI_BROADCAST, AI_REDUCE,
    AI_ALLTOALL, AI_BARRIER, AI_COLL_COUNT
} ai_coll;

const char *ai_coll_name(ai_coll coll);
ai_status_t ai_coll_parse(const char *name, ai_coll *out);
/* Algorithms available for a collective: count, and name by index. */
int ai_coll_algo_count(ai_coll coll);
const char *ai_coll_algo_name(ai_coll coll, int index);

/* Which algorithm to run and with what parameters. NULL options, NULL or
 * "auto" algo select automatically; zero fields take the defaults. */
typedef struct ai_algo_opts {
    const char *algo;
    size_t chunk_bytes; /* pipelining segment size */
    int channels;       /* TCP connections used (<= communicator's) */
} ai_algo_opts;

/* Pass as sendbuf for in-place operation (sendbuf == recvbuf also works). */
#define AI_IN_PLACE ((const void *)1)

/* All ranks pass the same count, dtype, op, root and options.
 * count is per rank for reduce_scatter (recv count), allgather (send count)
 * and alltoall (elements sent to each rank). */
ai_status_t ai_allreduce(ai_comm *comm, const void *sendbuf, void *recvbuf,
                         size_t count, ai_dtype dt, ai_op op,
                         const ai_algo_opts *opts);
ai_status_t ai_reduce_scatter(ai_comm *comm, const void *sendbuf, void *recvbuf,
                              size_t count, ai_dtype dt, ai_op op,
                              const ai_algo_opts *opts);
ai_status_t ai_allgather(ai_comm *comm, const void *sendbuf, void *recvbuf,
                         size_t count, ai_dtype dt, const ai_algo_opts *opts);
ai_status_t ai_broadcast(ai_comm *comm, void *buf, size_t count, ai_dtype dt,
                         int root, const ai_algo_opts *opts);
ai_status_t ai_reduce(ai_comm *comm, const void *sendbuf, void *recvbuf,
                      size_t count, ai_dtype dt, ai_op op, int root,
                      const ai_algo_opts *opts);
ai_status_t ai_alltoall(ai_comm *comm, const void *sendbuf, void *recvbuf,
                        size_t count, ai_dtype dt, const ai_algo_opts *opts);
ai_status_t ai_barrier(ai_comm *comm, const ai_algo_opts *opts);

/* The algorithm `auto` would run for this call (for reporting). */
const char *ai_coll_auto_algo(const ai_comm *comm, ai_coll coll, size_t bytes);

/* ------------------------------------------------------------------ clock */

/* Monotonic seconds. */
double ai_now(void);

#ifdef __cplusplus
}
#endif
#endif /* AUTOINFRA_H */
