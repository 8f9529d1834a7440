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
 *  - Objects are created by *_create and released by *_destroy (a file,
 *    the knowledge base: ai_kb_open / ai_kb_close); after a failed
 *    *_create nothing needs releasing.
 *  - Accessors that cannot fail (ai_comm_rank, *_count, *_name) return
 *    their value directly.
 *
 * Each section below is implemented in the one file its heading names
 * (paths under src/). What only benchmarks, tests and the CLI need (the
 * learner's arms and choice, test patterns, fault injection, the size
 * grammar) is in autoinfra/introspect.h, which is not stable.
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

/* ------------------------------------------------- status (util/status.c) */

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
    AI_ERR_NOTFOUND = -11,   /* unknown name (algorithm, device, file) */
    AI_ERR_REVOKED = -12     /* communicator revoked (ai_comm_revoke); unusable but for
                              * agree, failed, shrink and destroy */
} ai_status_t;

const char *ai_strerror(ai_status_t status);
/* Detailed message of the last failure on the calling thread ("" if none). */
const char *ai_last_error(void);

/* ---------------------------------- data types (comm/kernel/reduce_local.c) */

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

/* --------------------------------------- communicator (api/communicator.c) */

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
    int block_waits;         /* 1: waits sleep at once (no TCP polling, no shared-memory
                              * yielding) unless AUTOINFRA_SPIN_US / AUTOINFRA_YIELD_US
                              * say otherwise: for callers whose communication overlaps
                              * their own compute on the same cores (a progress thread) */
    const char *kb_path;     /* the learner's knowledge base; NULL: AUTOINFRA_KB, else the
                              * default path (ai_kb_default_path) */
} ai_comm_config;

/* A TCP port for store_port, for launchers: free on `host` (NULL:
 * 127.0.0.1) now, and outside the kernel's ephemeral range, so that no
 * outgoing connection takes it before rank 0 binds it. AI_ERR_IO when
 * none is free or host does not resolve. */
ai_status_t ai_rendezvous_port(const char *host, int *port);

/* Create a communicator; collective over all `size` ranks. */
ai_status_t ai_comm_create(const ai_comm_config *cfg, ai_comm **out);
ai_status_t ai_comm_create_env(ai_comm **out);
/* The configuration ai_comm_create_env would use, for a caller that
 * changes a field (kb_path) before ai_comm_create. Its strings stay valid
 * for the life of the process. */
ai_status_t ai_comm_config_env(ai_comm_config *out);

/*
 * A key-value store every rank of the job already shares (torch's
 * c10d::Store, a PMI key-value space), for ai_comm_create_with_store.
 * set: store `len` bytes under `key`. get: wait at most timeout_s seconds
 * for `key` to exist, then copy its value, which must be exactly `len`
 * bytes. Both return AI_OK or an error: AI_ERR_TIMEOUT when the key did
 * not appear, AI_ERR_PROTO for a value of another length, AI_ERR_IO when
 * the store failed.
 */
typedef struct ai_kv_store {
    void *ctx;
    ai_status_t (*set)(void *ctx, const char *key, const void *value, size_t len);
    ai_status_t (*get)(void *ctx, const char *key, void *value, size_t len, double timeout_s);
} ai_kv_store;

/* Create a communicator whose rank table is exchanged through `kv`
 * (keys "autoinfra/rank/<r>") instead of rank 0's rendezvous; collective
 * over all cfg->size ranks. store_port and token are unused (rank 0 draws
 * a nonce that keeps communicators made through one store apart);
 * store_host, if set, is an address of rank 0's host, and this rank
 * offers peers the address of the interface it would reach that host by
 * (NULL: 127.0.0.1). host_id NULL, timeout_s <= 0, channels <= 0 and
 * no_shm 0 take AUTOINFRA_HOST, _TIMEOUT, _CHANNELS, _NO_SHM as
 * ai_comm_create_env does. */
ai_status_t ai_comm_create_with_store(const ai_comm_config *cfg, const ai_kv_store *kv,
                                      ai_comm **out);
/* Release everything; safe on a failed communicator; NULL is a no-op. */
void ai_comm_destroy(ai_comm *comm);

int ai_comm_rank(const ai_comm *comm);
int ai_comm_size(const ai_comm *comm);
/* Number of distinct hosts, and this rank's host index (0..nhosts-1). */
int ai_comm_nhosts(const ai_comm *comm);
int ai_comm_host_of(const ai_comm *comm, int rank);
/* AI_OK while usable; the error that broke it otherwise. */
ai_status_t ai_comm_state(const ai_comm *comm);
/* How the communicator's waits behave from now on: 1 as block_waits in
 * ai_comm_config (sleep at once), 0 poll first (the defaults). The one
 * call that another thread may make while a call runs; the running wait
 * takes it up at its next idle pass. For a progress thread: block while
 * its caller computes, poll while the caller waits for the result. */
void ai_comm_set_block_waits(ai_comm *comm, int block);
/* A function this communicator's calls run while they wait: fn(arg) once
 * a wait has been idle past its spin phase, then on every idle pass (at
 * least every millisecond) until the data it waits for moves. For a
 * caller that must keep another library's progress going while it waits
 * in autoinfra (the MPI shim drives MPI's, so that a peer blocked in an
 * MPI call this rank must serve can finish it and join the collective).
 * fn must not call into this communicator. NULL: none (the default). Not
 * while a call of the communicator runs; not inherited by shrink or grow. */
void ai_comm_set_wait_hook(ai_comm *comm, void (*fn)(void *arg), void *arg);

/* Measure the links between the communicator's hosts (collective: every
 * rank calls it; host leaders exchange probe messages, ~H rounds of 1 MiB,
 * AUTOINFRA_PROBE_BYTES). The result is cached and used by the
 * heterogeneity-aware algorithms and by `auto`; refresh = 1 measures again
 * (after a link changed). */
ai_status_t ai_comm_probe(ai_comm *comm, int refresh);
/* Measured bandwidth (GB/s, 1e9 bytes/s) and latency (us) from one host to
 * another (host indices as ai_comm_host_of); AI_ERR_INVALID before a probe. */
ai_status_t ai_comm_link(const ai_comm *comm, int from_host, int to_host,
                         double *bw_GBps, double *lat_us);
/* A host's bottleneck bandwidth (GB/s) as measured; NaN before a probe. */
double ai_comm_host_bw_GBps(const ai_comm *comm, int host);

/* ------------------------------------- fault tolerance (api/fault.c)
 * Living through a failed or stalled rank without restarting the job
 * (docs/faults.md has the semantics in full and their measured costs).
 * The usual recovery: a call fails (AI_ERR_PEER, AI_ERR_TIMEOUT,
 * AI_ERR_REVOKED or AI_ERR_ABORTED); the rank calls ai_comm_revoke so that
 * every rank's pending call fails too, then ai_comm_shrink on every
 * survivor, and goes on with the new communicator. The old one only
 * answers agree, failed, shrink and destroy. */

/* Make every pending and future call on this communicator, on every live
 * rank, fail fast with AI_ERR_REVOKED (a rank that learned of a failure
 * first keeps that failure's error). Any rank may call it, alone, any
 * number of times; it does not wait for the others. */
ai_status_t ai_comm_revoke(ai_comm *comm);

/* Collective over the live ranks, also on a revoked or failed
 * communicator: the survivors agree on the bitwise AND of their *flags
 * (in: this rank's, out: the AND over the survivors) and on the set of
 * failed ranks (ai_comm_failed), despite ranks dying or stalling during
 * the agreement; a rank that dies or does not answer within the timeout
 * is counted failed. Every survivor that returns AI_OK returns the same
 * flags and failed set. A rank the others counted failed (it stalled)
 * gets AI_ERR_PEER and must leave. */
ai_status_t ai_comm_agree(ai_comm *comm, uint64_t *flags);

/* The ranks known failed, ascending: the agreed set after an
 * ai_comm_agree or ai_comm_shrink, before that what this rank saw die.
 * Up to max of them in ranks; *n gets how many there are. */
ai_status_t ai_comm_failed(ai_comm *comm, int *ranks, int max, int *n);

/* The rank whose failure broke comm, as this rank knows it (a caller's
 * typed form of what ai_last_error names): the peer its own first error
 * named, else the rank a peer's abort notice said failed first or revoked
 * it. *rank gets -1 while comm works and when no other rank is known (this
 * rank's own revoke, a stall that named nobody). */
ai_status_t ai_comm_failure_peer(const ai_comm *comm, int *rank);

/* Collective over the live ranks: a new communicator of the survivors
 * (an agreement decides who they are), ranks renumbered in the old order,
 * its own transports (shared memory among ranks still on one host, TCP
 * otherwise) built without the rendezvous store, and the learner's state
 * for its topology fingerprint. The old communicator is left revoked;
 * destroy it. */
ai_status_t ai_comm_shrink(ai_comm *comm, ai_comm **out);

/* Collective over all ranks of a healthy communicator: admit `joiners`
 * newcomers (ai_comm_join) within timeout_s seconds (<= 0: the
 * communicator's timeout) and return a larger communicator: the members
 * keep their ranks, the newcomers take ranks size .. size + joiners - 1 in
 * the order they were admitted. A newcomer with another job token or a
 * malformed hello is refused and never counted, one whose connection
 * ended before the grow (killed, gone) is dropped and live ones behind it
 * are admitted instead; too few in time: every member gets AI_ERR_TIMEOUT
 * and the communicator stays as it was. A member that dies during the
 * grow: every other member gets AI_ERR_PEER naming its rank. */
ai_status_t ai_comm_grow(ai_comm *comm, int joiners, double timeout_s, ai_comm **out);

/* The address newcomers pass to ai_comm_join: "ip:port" of rank 0's join
 * door, the same string on every rank (len >= 22 is enough); with
 * AUTOINFRA_JOIN_DOOR set ("host:port[,host:port...]": where the job's rank
 * 0, whichever process it is, opens its door), that list. */
ai_status_t ai_comm_join_addr(const ai_comm *comm, char *buf, size_t len);

/* On rank 0: how many live newcomers wait at the join door now (never
 * blocks; one that left before a grow is not counted); 0 on the other
 * ranks and on a communicator that failed. A grow admits them in the
 * order they came. */
ai_status_t ai_comm_join_pending(ai_comm *comm, int *waiting);

/* A newcomer joins the job whose rank 0 listens at job_addr ("host:port",
 * or a comma-separated list of them tried in turn, from ai_comm_join_addr;
 * NULL: AUTOINFRA_JOIN_ADDR) and waits up to
 * cfg->timeout_s (<= 0: AUTOINFRA_TIMEOUT, else 30 s) for the members'
 * grow. It shows the job token: cfg->token, NULL: AUTOINFRA_TOKEN, else
 * the empty token; it must be the token the members' communicator was
 * made with (ai_comm_create's cfg->token, NULL meaning empty, which is
 * also what ai_comm_create_with_store's communicators keep;
 * ai_comm_create_env's AUTOINFRA_TOKEN, launcher job id or "autoinfra").
 * rank, size, store_host, store_port and channels of cfg are unused (the
 * members' channels and no_shm apply); host_id and block_waits are as for
 * ai_comm_create. */
ai_status_t ai_comm_join(const ai_comm_config *cfg, const char *job_addr, ai_comm **out);

/* The members' side of joining, collective over every rank of a healthy
 * communicator, for a loop that takes newcomers between its steps (the
 * elastic torch helper calls it at each step's end; the newcomer's side is
 * ai_comm_join): rank 0 counts the newcomers waiting at its join door
 * (ai_comm_join_pending), every member learns that count from it, and when
 * it is not 0 they grow by it (ai_comm_grow within timeout_s). *joined gets
 * the count, the same on every member; *out the larger communicator, or
 * NULL when nobody waited and comm goes on. A member that died: every
 * other member's admit fails (AI_ERR_PEER), none grows. Newcomers that left
 * before the grow: AI_ERR_TIMEOUT on every member, *joined still the
 * count, and comm stays usable, as after ai_comm_grow. */
ai_status_t ai_comm_admit(ai_comm *comm, double timeout_s, int *joined, ai_comm **out);

/* Degraded peers: the ranks on hosts whose links, as last measured, are
 * much slower than the others' (bottleneck bandwidth under half the
 * median host's, or latency over 4x the median): up to max of them in
 * ranks, ascending, *n how many there are; none before a probe and on one
 * host. The learner measures the links again when it sees a drift (a
 * call much slower than what it learned), so a link that slowed down
 * shows here after the few calls the drift takes to show. The
 * application may exclude them (revoke, then shrink with them out, e.g.
 * by having them leave) or go on. Local to this rank, no communication. */
ai_status_t ai_comm_degraded(const ai_comm *comm, int *ranks, int max, int *n);

/* ---------------------------------------------- collectives (comm/coll.c) */

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

/* Another library's own implementation of a collective (the MPI shim
 * registers the host MPI's, docs/mpi-shim.md) as one more arm of `auto`'s
 * learner for that collective on this communicator, named `name` (1-31
 * characters, none of the collective's algorithm names): the learner
 * measures it like its algorithms and runs it where it is the fastest.
 * fn gets the call as the algorithms do: count per rank's block for
 * reduce_scatter, allgather and alltoall, op AI_SUM where the call asked
 * AI_AVG (the division follows); in place means sendbuf == recvbuf for
 * allreduce, recvbuf == sendbuf + rank x count elements for
 * reduce_scatter (the whole input is sendbuf, the result goes to recvbuf),
 * sendbuf == recvbuf + rank x count elements for allgather; broadcast's
 * buffer is recvbuf. It must run the collective on every rank (all ranks
 * take the same arm) and return AI_OK, or AI_ERR_UNSUPPORTED on every rank
 * alike, and then the call runs the collective's first algorithm instead.
 * fn NULL removes the arm. Every rank registers the same, before the
 * first call of that collective (the learner lists a size's arms at its
 * first call); not for barrier. AI_ERR_INVALID on a bad argument. */
typedef ai_status_t (*ai_host_coll_fn)(void *arg, ai_coll coll, const void *sendbuf, void *recvbuf,
                                       size_t count, ai_dtype dt, ai_op op, int root);
ai_status_t ai_comm_set_host_coll(ai_comm *comm, ai_coll coll, const char *name, ai_host_coll_fn fn,
                                  void *arg);

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

/* Point to point. Between two ranks, messages in each direction match in
 * issue order (no tags), and the receiver passes exactly the byte count
 * that was sent. The two ranks must issue their point-to-point calls and
 * collectives in the same relative order (a message that meets the other
 * kind fails with AI_ERR_PROTO). peer, to and from are other ranks;
 * ai_sendrecv sends and receives at once, so pairs may exchange without
 * deadlock; 0 bytes skips that side. Every wait is bounded by the
 * communicator's timeout; a failure fails the communicator as for a
 * collective. */
ai_status_t ai_send(ai_comm *comm, int peer, const void *buf, size_t bytes);
ai_status_t ai_recv(ai_comm *comm, int peer, void *buf, size_t bytes);
ai_status_t ai_sendrecv(ai_comm *comm, int to, const void *sendbuf, size_t sbytes, int from,
                        void *recvbuf, size_t rbytes);

/* Nonblocking point to point. ai_isend / ai_irecv post a message (matched
 * as ai_send's, in posting order per direction) and return at once with a
 * request in *req; ai_p2p_progress moves posted requests, each completing
 * on its own: a receive posted before a send does not hold the send back,
 * so two ranks may each post a receive and then a send to the other. The
 * buffer stays the caller's until the request is done. One thread at a
 * time uses the communicator; finish the requests before the next
 * collective or blocking call on it (a collective's messages queue
 * behind them). ai_p2p_progress moves reqs until every one is done, one
 * of them completed, or max_wait_s passed (at least one pass); *ndone
 * (may be NULL) gets how many of reqs are done. The communicator's
 * timeout counts from the last time the pending ones moved, across calls;
 * then, or on a failure, it returns the error, the communicator failed as
 * for ai_send. ai_p2p_free frees a request (done or not: a request freed
 * undone leaves its peer's matching message unmatched). */
typedef struct ai_p2p ai_p2p;
ai_status_t ai_isend(ai_comm *comm, int peer, const void *buf, size_t bytes, ai_p2p **req);
ai_status_t ai_irecv(ai_comm *comm, int peer, void *buf, size_t bytes, ai_p2p **req);
ai_status_t ai_p2p_progress(ai_comm *comm, ai_p2p *const *reqs, int n, double max_wait_s,
                            int *ndone);
int ai_p2p_done(const ai_p2p *req);
void ai_p2p_free(ai_p2p *req);
/* Receive from any rank: a request like ai_irecv's whose sender is the
 * rank of the first point-to-point message, of exactly `bytes` bytes (at
 * least 1), that arrives at this rank unclaimed by a receive posted for
 * its sender (ai_p2p_progress matches it; messages are not tagged).
 * Several such receives are matched in the order they are passed to
 * ai_p2p_progress. Once matched it is a receive from that rank, ordered
 * after the receives already posted from it. ai_p2p_source: the sender
 * (for ai_irecv the peer it names), -1 before the match and for sends.
 * An unmatched one fails with AI_ERR_TIMEOUT once no message came for the
 * communicator's timeout after its posting (the communicator failed). */
ai_status_t ai_irecv_any(ai_comm *comm, void *buf, size_t bytes, ai_p2p **req);
int ai_p2p_source(const ai_p2p *req);

/* The algorithm `auto` would run for this call (for reporting). */
const char *ai_coll_auto_algo(const ai_comm *comm, ai_coll coll, size_t bytes);

/* ------------------------ job level: specs, model, planner (plan/spec/plan_api.c) */

/*
 * The three specs of docs/formats.md. Loaders validate everything; on
 * failure ai_last_error() names the file, the JSON path (for example
 * node_groups[1].nic.bw_Gbps) and, for syntax errors, line and column.
 * Destroy functions accept NULL.
 */
typedef struct ai_cluster ai_cluster;
typedef struct ai_model_spec ai_model_spec;
typedef struct ai_training ai_training;

ai_status_t ai_cluster_load(const char *path, ai_cluster **out);
void ai_cluster_destroy(ai_cluster *cluster);
int ai_cluster_devices(const ai_cluster *cluster);
ai_status_t ai_model_spec_load(const char *path, ai_model_spec **out);
void ai_model_spec_destroy(ai_model_spec *model);
ai_status_t ai_training_load(const char *path, ai_training **out);
void ai_training_destroy(ai_training *training);

typedef struct ai_plan_options {
    const char *fix;     /* pinned plan fields, "tp=8,pp=16,recompute=full"; NULL: none */
    int top;             /* how many plans to keep, fastest first (< 1: 1) */
    int baseline_manual; /* also evaluate the manual baseline (docs/planner.md) */
} ai_plan_options;
/* Baselines to evaluate, or-ed into ai_plan_options.baseline_manual (1, the
 * manual one, keeps its meaning): */
#define AI_PLAN_BASELINE_MANUAL 1
#define AI_PLAN_BASELINE_HOMOGENEOUS 2 /* this search on the all-slowest cluster */
#define AI_PLAN_BASELINE_EXPERT 4      /* published practice, fastest group and whole cluster */
#define AI_PLAN_BASELINE_ALL 7

/* Key figures of one plan (index 0 = best), for programs that do not want
 * to parse JSON. recompute: 0 none, 1 selective, 2 full. */
typedef struct ai_plan_summary {
    int tp, pp, dp, cp, micro_batch, interleave, recompute, sequence_parallel, zero;
    int feasible;
    double step_time_s, tokens_per_s, model_tflops_per_device, hw_tflops_per_device, mfu;
    double memory_GB_per_device;
    double baseline_step_time_s; /* 0 without a baseline */
    double speedup_vs_baseline;  /* 0 without a baseline */
} ai_plan_summary;

typedef struct ai_plan_report ai_plan_report;

/* Search for the fastest plans that fit (AI_ERR_INFEASIBLE if none). With
 * every scalar plan field pinned by opts->fix the plan is evaluated and
 * reported even if it does not fit (summary.feasible = 0). The report keeps
 * no reference to the specs. */
ai_status_t ai_plan(const ai_cluster *cluster, const ai_model_spec *model,
                    const ai_training *training, const ai_plan_options *opts,
                    ai_plan_report **out);
void ai_plan_report_destroy(ai_plan_report *report);
int ai_plan_report_count(const ai_plan_report *report);
ai_status_t ai_plan_report_summary(const ai_plan_report *report, int index,
                                   ai_plan_summary *out);
/* The report as JSON (docs/planner.md lists the fields) or as a readable
 * table. The caller frees *out with free(). */
ai_status_t ai_plan_report_json(const ai_plan_report *report, char **out);
ai_status_t ai_plan_report_text(const ai_plan_report *report, char **out);

/* Fidelity of the step model on the published tables in `calib_dir`
 * (data/calibration): per row predicted vs published, MAPE, memory. With
 * refit nonzero the parameters are refitted first (Nelder-Mead from the
 * shipped values) and the report includes them; `holdout` (NULL: none)
 * names a source ("megatron_core_h100", "korthikanti_table5") left out of
 * the fit and reported separately. JSON or text; the caller free()s. */
ai_status_t ai_model_fidelity(const char *calib_dir, int refit, const char *holdout, int as_json,
                              char **out);

/* ------------------------------- cluster queries (plan/spec/plan_cluster.c)
 * The testbed's and the network model's view of a cluster. */

typedef struct ai_node_info {
    char name[64];   /* "<group>-<index>" */
    char group[64];
    char rack[64];   /* "" when attached to the core */
    int devices;
    double nic_Gbps; /* count x bw, after overrides */
    double nic_latency_us;
    double speed;    /* compute relative to full speed, (0, 1] (docs/formats.md) */
} ai_node_info;

typedef struct ai_rack_info {
    char name[64];
    double uplink_Gbps;
    int nodes;
} ai_rack_info;

int ai_cluster_node_count(const ai_cluster *cluster);
ai_status_t ai_cluster_node(const ai_cluster *cluster, int index, ai_node_info *out);
int ai_cluster_rack_count(const ai_cluster *cluster);
ai_status_t ai_cluster_rack(const ai_cluster *cluster, int index, ai_rack_info *out);
/* Lower bound (seconds) on a collective of `bytes` (nccl-tests sizes) over
 * the cluster's network, ranks_per_node ranks per node (0: one per device),
 * root 0: cut bounds on every node and rack (docs/runtime.md). */
ai_status_t ai_cluster_coll_bound(const ai_cluster *cluster, ai_coll coll, size_t bytes,
                                  int ranks_per_node, double *seconds);

/* ------------------------------- Slurm (topo/topo_slurm.c, docs/slurm.md)
 * A cluster spec from Slurm's node lines (slurm.conf, or `scontrol show
 * node -o` and `scontrol show partition -o`) and a tree topology
 * (topology.conf, or `scontrol show topology`), with what Slurm does not
 * know given here; and a topology.conf from a cluster spec. */
typedef struct ai_slurm_source {
    const char *nodes_text, *nodes_label;       /* NULL text: nodes from the topology; a label
                                                 * "scontrol..." reads '#' as text, not a comment */
    const char *topology_text, *topology_label; /* NULL: no racks */
    const char *partition;                      /* NULL: every node */
    const char *nodelist;                       /* NULL: every node; a hostlist keeps those */
    const char *const *devices;                 /* "PATTERN=KIND[:N]", later ones win */
    int ndevices;
    double nic_Gbps;                            /* per NIC, required */
    int nics;                                   /* NICs per node (< 1: 1) */
    double intra_GBps;                          /* required when a node has several devices */
    double uplink_Gbps;                         /* every rack's uplink; 0: LinkSpeed or non-blocking */
    int linkspeed_mbps;                         /* read LinkSpeed= as the uplink in Mbit/s */
    const char *name;                           /* the cluster's name; NULL: "slurm" */
    const char *devices_file;                   /* names devices[0..ndevices_file) in errors */
    int ndevices_file;                          /* (those from a file; the rest are --device) */
} ai_slurm_source;
/* The cluster JSON (docs/formats.md), checked by the loader; free() it. */
ai_status_t ai_slurm_cluster_json(const ai_slurm_source *src, char **out);
/* topology.conf text for the cluster spec at spec_path; free() it. */
ai_status_t ai_slurm_topology_conf(const char *spec_path, char **out);

/* ----------------------------- learner and knowledge base (tune/kb*.c) */

/*
 * The learner behind `auto` (algorithm x chunk x channels per collective,
 * power-of-two size bucket and communicator fingerprint) is attached to
 * every communicator; AUTOINFRA_TUNE=0 turns it off (model / fixed rule
 * only). What it learns is kept in a SQLite knowledge base: AUTOINFRA_KB,
 * else $XDG_CACHE_HOME/autoinfra/kb.sqlite, else ~/.cache/autoinfra/kb.sqlite.
 * Rank 0 is the job's only writer.
 */

typedef struct ai_kb ai_kb;

/* The default path described above, in buf (AI_ERR_INVALID if it does not
 * fit or no home directory is known). */
ai_status_t ai_kb_default_path(char *buf, size_t len);
/* Open or create (readonly = 0; parent directories are created). NULL
 * path: the default. */
ai_status_t ai_kb_open(const char *path, int readonly, ai_kb **out);
void ai_kb_close(ai_kb *kb);
/* A communicator's fingerprint (hex, 16 chars + NUL): what its learner
 * keys the KB by (autoinfra kb show; the NCCL tuner's AUTOINFRA_FINGERPRINT).
 * Implemented in tune/learn.c. */
ai_status_t ai_comm_fingerprint(const ai_comm *comm, char out[17]);

/* One arm's statistics in one bucket of one fingerprint. */
typedef struct ai_kb_arm {
    char fingerprint[17];
    int nranks, nhosts;
    char description[128]; /* the fingerprint's: ranks, hosts, measured rates */
    ai_coll coll;
    size_t bytes;       /* bucket: calls of [bytes, 2 * bytes) */
    char algo[32];
    size_t chunk_bytes;
    int channels;
    long samples;       /* measured calls (slowest rank's time each) */
    double mean_us;     /* posterior mean time, at `bytes` */
    double std_us;      /* posterior standard deviation of that mean */
    int best;           /* 1 for the bucket's best arm (lowest mean) */
    double confidence;  /* best arm only: P(it is truly the fastest), 0..1 */
} ai_kb_arm;

/* Visit every arm (fingerprint NULL: all fingerprints), ordered by
 * fingerprint, collective, bytes, mean. fn returns 0 to go on, nonzero to
 * stop early (ai_kb_foreach still returns AI_OK). */
typedef int (*ai_kb_visit_fn)(const ai_kb_arm *arm, void *arg);
ai_status_t ai_kb_foreach(ai_kb *kb, const char *fingerprint, ai_kb_visit_fn fn, void *arg);
/* One choice of `auto` (the KB's choices table, docs/learner.md): the arm
 * a bucket settled on ("settled"), switched to ("switched") or started
 * warm on ("warm"), and the runner-up then (runner_algo "" if none was
 * measured). */
typedef struct ai_kb_choice {
    char fingerprint[17];
    int nranks, nhosts;
    ai_coll coll;
    size_t bytes;
    char algo[32];
    size_t chunk_bytes;
    int channels;
    double mean_us;
    long samples;
    double confidence; /* P(it is the fastest) when chosen */
    char runner_algo[32];
    size_t runner_chunk_bytes;
    int runner_channels;
    double runner_mean_us;
    long runner_samples;
    char reason[16];
    double at; /* seconds since the epoch */
} ai_kb_choice;
/* Visit the choices (fingerprint NULL: all), oldest first; fn returns
 * nonzero to stop. A KB older than the choices table has none. */
typedef int (*ai_kb_choice_fn)(const ai_kb_choice *choice, void *arg);
ai_status_t ai_kb_log_foreach(ai_kb *kb, const char *fingerprint, ai_kb_choice_fn fn, void *arg);
/* Whole-KB JSON export / import (merges; docs/learner.md has the format). */
ai_status_t ai_kb_export_json(ai_kb *kb, const char *fingerprint, const char *path);
ai_status_t ai_kb_import_json(ai_kb *kb, const char *path);

/*
 * Compute profiles: what each rank of a training job measured of its own
 * compute for one model (docs/formats.md, "Compute profile"), kept beside
 * the arms under the communicator's fingerprint, one per (fingerprint,
 * model preset, rank); the training-job planner reads them. point[]:
 * the seconds of a forward and backward pass of `batch` samples.
 */
#define AI_PROFILE_POINTS 16
typedef struct ai_kb_profile {
    char fingerprint[17];
    char preset[32];  /* the model's name ("medium") */
    int layers, dim, heads, ctx;
    long long params, grad_bytes;
    int rank;
    char host[64];
    double gemm_gflops, attention_gflops; /* measured at the model's shapes */
    double optimizer_s;                   /* one optimizer step */
    int npoints;
    struct { int batch; double fwd_bwd_s; } point[AI_PROFILE_POINTS];
    double measured_at; /* seconds since the epoch it was stored; ignored by put */
    /* Optional terms of a job step (0: not measured): the seconds a
     * micro-batch takes longer with an allreduce of grad_bytes beside it,
     * and the step's work outside forward, backward and the optimizer
     * (docs/formats.md, "Compute profile"). */
    double allreduce_beside_s, step_overhead_s;
} ai_kb_profile;

/* Store one rank's profile (replacing the one of that fingerprint, preset
 * and rank); AI_ERR_INVALID for figures out of range. */
ai_status_t ai_kb_profile_put(ai_kb *kb, const ai_kb_profile *profile);
/* Visit every profile (fingerprint NULL: all), ordered by fingerprint,
 * preset, rank, each with its points by batch; fn returns nonzero to stop. */
typedef int (*ai_kb_profile_fn)(const ai_kb_profile *profile, void *arg);
ai_status_t ai_kb_profile_foreach(ai_kb *kb, const char *fingerprint, ai_kb_profile_fn fn,
                                  void *arg);
/* Import a profile JSON file (all ranks in one transaction, nothing when
 * any figure is bad: ai_last_error names the JSON path and what is wanted);
 * *nranks (may be NULL) receives how many ranks it held. */
ai_status_t ai_kb_profile_import(ai_kb *kb, const char *path, int *nranks);

/* ---------------------- training-job planner (plan/job/plan_train.c)
 * The data-parallel training job (autoinfra.train) planned from what the
 * knowledge base measured: each rank's compute profile and the learner's
 * allreduce timings of the same fingerprint (docs/planner.md, "Planning
 * the training job from the knowledge base"). */

typedef struct ai_train_plan_options {
    const char *fingerprint; /* NULL: the one fingerprint the KB has profiles of */
    const char *model;       /* model preset; NULL: the fingerprint's one profiled model */
    int global_batch;        /* samples per step over all ranks */
    int ranks;               /* 0: every profiled rank */
    const char *fix;         /* "shares=8/8/4/4,micro_batch=4,bucket_cap_mb=25,pipeline=2" */
    const ai_cluster *cluster; /* NULL, or the spec whose slowest NIC is the catalogue link
                                * for sizes the KB cannot say (default 10 Gbit/s, 50 us) */
} ai_train_plan_options;

typedef struct ai_train_plan ai_train_plan;
/* Choose shares, micro-batch, DDP bucket cap and pipeline; AI_ERR_NOTFOUND
 * when the KB lacks the profiles. The plan keeps no reference to kb. */
ai_status_t ai_plan_train(ai_kb *kb, const ai_train_plan_options *opts, ai_train_plan **out);
void ai_train_plan_destroy(ai_train_plan *plan);
double ai_train_plan_step_time(const ai_train_plan *plan);
/* The plan as the training-plan JSON of docs/formats.md (what autoinfra.train
 * --plan runs), or as text (explain: every term with its source, and what
 * else was considered). The caller free()s *out. */
ai_status_t ai_train_plan_json(const ai_train_plan *plan, char **out);
ai_status_t ai_train_plan_text(const ai_train_plan *plan, int explain, char **out);

/* ------------------------------ training-run simulation (sim/sim_api.c)
 * Whole training runs under failures, checkpoints and recovery, simulated
 * as events (docs/sim.md): how long a run of a plan takes on a cluster
 * that fails at published rates, and which checkpoint policy and
 * recovery make the most of it. */

/* The reliability spec (docs/formats.md, "Reliability"): failure rates and
 * causes, recovery and checkpoint costs, spares. path NULL: the defaults
 * (Llama 3's interruption rate and causes). ai_last_error names the file
 * and the JSON path of a bad value. */
typedef struct ai_reliability ai_reliability;
ai_status_t ai_reliability_load(const char *path, ai_reliability **out);
void ai_reliability_destroy(ai_reliability *rel);

typedef enum ai_sim_policy {
    AI_SIM_POLICY_NONE,       /* no checkpoints, or every checkpoint_every_min */
    AI_SIM_POLICY_YOUNG_DALY, /* Daly's interval for the checkpoint cost and the job's MTBF */
    AI_SIM_POLICY_ORACLE,     /* a checkpoint completes just before each failure */
    AI_SIM_POLICY_LEARNED,    /* a failure predictor on simulated telemetry decides */
    AI_SIM_POLICY_RL          /* drain, exclude or checkpoint on warnings: a policy trained
                               * in the simulator by cross-entropy search (docs/sim.md) */
} ai_sim_policy;
/* "none", "young-daly", "oracle", "learned", "rl"; AI_ERR_INVALID otherwise. */
ai_status_t ai_sim_policy_parse(const char *name, ai_sim_policy *out);

typedef enum ai_sim_recovery {
    AI_SIM_RESTART, /* the whole job restarts from the last checkpoint */
    AI_SIM_SHRINK   /* survivors shrink and go on on fewer devices until a spare joins */
} ai_sim_recovery;

typedef struct ai_sim_options {
    double tokens;        /* > 0: train this many tokens; 0: the training spec's tokens */
    double days;          /* > 0: simulate this many days of wall time instead */
    ai_sim_policy policy;
    double checkpoint_every_min; /* > 0 with policy none: a fixed interval of compute */
    ai_sim_recovery recovery;
    int runs;             /* Monte Carlo runs (< 1: 1) */
    uint64_t seed;        /* the same seed gives the same results */
    double step_time_s;   /* > 0: a measured step time; the planner is not run */
    int rl_train_runs;    /* policy rl: training runs per candidate (< 1: 16) */
    int rl_iters;         /* policy rl: cross-entropy generations (< 1: 8) */
    /* Replaying one measured run (needs step_time_s, no random failures):
     * > 0, one failure strikes in this step, its node is back as a spare
     * when step rejoin_at_step is reached, and the shrunk group steps in
     * shrunk_step_time_s (0: replicas left / replicas of the throughput). */
    double fail_at_step, rejoin_at_step, shrunk_step_time_s;
    /* With runs 1: the report's JSON holds the run's timeline, an `events`
     * array of up to AI_SIM_EVENTS_MAX entries (docs/sim.md). */
    int events;
    /* > 0: the job's ranks share this many cores (a CPU testbed): its
     * throughput is proportional to min(ranks, shared_cores), so a shrink
     * that leaves as many ranks as cores costs no throughput. */
    int shared_cores;
} ai_sim_options;
#define AI_SIM_EVENTS_MAX 200000

/* Means over the runs; *_ci95 are 95% confidence intervals of the mean. */
typedef struct ai_sim_summary {
    int runs, finished_runs;
    double interruptions_mean;
    double mtbf_h;        /* wall time per interruption over all runs (0 when none) */
    double ettr_mean, ettr_ci95[2]; /* effective training time ratio: useful compute / wall */
    double ettr_first_order; /* 1 - C/tau - (tau/2 + R)/M; 0 without a checkpoint interval */
    double goodput_tokens_per_s;
    double days_mean, days_ci95[2];
    double checkpoint_every_min; /* the fixed interval (0: none, oracle, learned) */
    double checkpoint_s;  /* the job's stall per checkpoint */
    double step_time_s, tokens_per_s; /* at full scale */
    double job_mtbf_h;    /* the rates' MTBF of the whole job */
    double plan_s, sim_s; /* seconds planning, and simulating */
} ai_sim_summary;

typedef struct ai_sim_report ai_sim_report;
/* Plan (unless opts->step_time_s), then simulate opts->runs runs. rel
 * NULL: the default reliability. The report keeps no reference to the
 * specs. */
ai_status_t ai_sim(const ai_cluster *cluster, const ai_model_spec *model,
                   const ai_training *training, const ai_reliability *rel,
                   const ai_sim_options *opts, ai_sim_report **out);
void ai_sim_report_destroy(ai_sim_report *report);
ai_status_t ai_sim_report_summary(const ai_sim_report *report, ai_sim_summary *out);
/* JSON (docs/sim.md lists the fields) or text; the caller free()s. */
ai_status_t ai_sim_report_json(const ai_sim_report *report, char **out);
ai_status_t ai_sim_report_text(const ai_sim_report *report, char **out);

/* Which nodes fail in the next window, from each node's fault history in
 * a fault trace (a JSON array of fault_start / fault_end events, the
 * InfiniteHBD trace's format; docs/sim.md): a logistic regression fitted
 * on the first train_share of the trace, measured on the rest against the
 * nodes that failed most so far. Zero fields take the defaults. The
 * report (JSON or text) is the caller's to free(). */
typedef struct ai_sim_predict_options {
    int nodes;            /* the cluster's nodes, failing or not (0: those in the trace) */
    double window_days;   /* default 7 */
    double train_share;   /* default 0.5 */
    int topk;             /* nodes flagged per window, default 10 */
} ai_sim_predict_options;
ai_status_t ai_sim_predict(const char *trace_path, const ai_sim_predict_options *opts, int as_json,
                           char **out);

/* ------------------------------- Open MPI export (tune/export/ompi.c) */

/* Teach other stacks what the KB learned (docs/exports.md). Each bucket
 * gets the fastest arm the KB holds that the stack has; fingerprint NULL:
 * the KB's only one (AI_ERR_INVALID, listing them, when it holds several).
 *
 * An Open MPI coll/tuned dynamic rules file (use with --mca
 * coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename
 * PATH). */
ai_status_t ai_kb_export_ompi_rules(ai_kb *kb, const char *fingerprint, const char *path);

/* ---------------------------------- MPICH export (tune/export/mpich.c) */

/* An MPICH 4 collective selection JSON file
 * (MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=PATH); buckets and
 * fingerprint as for the Open MPI export. */
ai_status_t ai_kb_export_mpich_json(ai_kb *kb, const char *fingerprint, const char *path);

/* --------------------------------------- batch shares (balance/shares.c)
 * How a global batch of B samples is split over data-parallel ranks of
 * different speeds, and re-split as the ranks' measured step times say.
 * Python reaches these through the torch extension's bindings
 * (plugins/torch/shares_binding.cpp: autoinfra.torch.Shares), the
 * training job's only user.
 */

/* Integer local batches proportional to throughput[i] (samples/s, or any
 * relative speed) that sum exactly to global_batch: largest-remainder
 * rounding, every rank with throughput > 0 at least 1 sample, a rank with
 * throughput 0 excluded (0 samples). AI_ERR_INVALID when a throughput is
 * negative or not finite, none is positive, or global_batch is smaller
 * than the ranks that take part. */
ai_status_t ai_shares_split(int nranks, const double *throughput, int global_batch,
                            int *local_batch);

/* Gradient weights w_i = b_i / B (B the sum of the b_i): sum_i w_i x
 * (rank i's mean gradient over its b_i samples) is the mean over all B
 * samples, exactly up to float64 rounding. With an averaging allreduce
 * over P ranks (DDP), rank i scales its mean gradient by P x w_i first. */
ai_status_t ai_shares_grad_weights(int nranks, const int *local_batch, double *weights);

/* The online balancer: per rank a model of step time t(b) = a + c b
 * (fixed seconds per step, seconds per sample) fitted to the rank's own
 * (b, t) observations, and the shares that minimise the largest
 * predicted step time. hysteresis (0..1, e.g. 0.03): new shares replace
 * the current ones only when they lower the predicted step time by more
 * than that fraction. Starts from even shares. */
typedef struct ai_shares ai_shares;
ai_status_t ai_shares_create(int nranks, int global_batch, double hysteresis, ai_shares **out);
void ai_shares_destroy(ai_shares *shares);
/* One step of rank `rank`: `batch` samples took `seconds` (compute up to
 * the gradient reduction, without the time spent waiting for others). */
ai_status_t ai_shares_observe(ai_shares *shares, int rank, int batch, double seconds);
/* The fitted model of a rank (AI_ERR_INVALID before its first step);
 * affine is 1 when a and c were fitted, 0 when too few distinct batch
 * sizes were seen and t = c b is assumed (a = 0). */
ai_status_t ai_shares_model(const ai_shares *shares, int rank, double *fixed_s,
                            double *per_sample_s, int *affine);
/* Re-balance: local_batch[nranks] receives the shares to run next
 * (summing to the global batch), *changed 1 when they differ from the
 * previous ones, *predicted_s the largest predicted step time under them.
 * Until every rank has been observed the shares stay as they are. */
ai_status_t ai_shares_rebalance(ai_shares *shares, int *local_batch, int *changed,
                                double *predicted_s);
/* Make local_batch[nranks] (each >= 1, summing to the global batch) the
 * current shares, e.g. a plan's, that re-balancing then starts from. */
ai_status_t ai_shares_set(ai_shares *shares, const int *local_batch);


/* ------------------------------------------------ clock (util/misc.c) */

/* Monotonic seconds. */
double ai_now(void);

/* ------------------------------------------- settings (util/param.c)
 * Every AUTOINFRA_* variable the library reads, from one table: its
 * value in effect and where that came from (`autoinfra env`,
 * docs/runtime.md "Settings"). The environment is read at the first use
 * and again at each communicator creation. Strings stay valid for the
 * life of the process. */
typedef struct ai_setting {
    const char *name;          /* "AUTOINFRA_TIMEOUT" */
    const char *type;          /* "int", "double", "size", "choice", "string" */
    const char *value;         /* as text; NULL when unset and without default */
    const char *default_value; /* NULL: none */
    const char *range;         /* "0..8", "error|warn|info|debug"; "" for strings */
    const char *source;        /* "environment", "default", or "unset" (no default) */
    const char *doc;           /* one line */
    const char *problem;       /* NULL, or why the environment's value is refused
                                * (every call that needs the setting fails) */
} ai_setting;
int ai_setting_count(void);
ai_status_t ai_setting_get(int index, ai_setting *out);

#ifdef __cplusplus
}
#endif
#endif /* AUTOINFRA_H */
