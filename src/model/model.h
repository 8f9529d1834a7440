/*
 * model layer: cost models. Pure, deterministic functions of their inputs.
 *
 *  - Collective alpha-beta costs (closed forms per algorithm) and their
 *    cost on a group of ranks laid out on real nodes.
 *  - The transformer training-step model: FLOPs (formats.md accounting),
 *    memory per device, and step time of a parallel plan on a cluster.
 *  - Its few fitted parameters (model_params.c) and the fit itself
 *    (model_fit.c) against the published tables in data/calibration.
 *
 * docs/model.md derives every formula and cites where constants come from.
 */
#ifndef AI_MODEL_H
#define AI_MODEL_H

#include "topo/topo.h"

#include <math.h>

/* ------------------------------------------------------------ params */

/*
 * The free parameters. Each is a physical quantity a profiler could
 * measure; the fit only decides values the literature does not pin down.
 */
typedef struct model_params {
    double gemm_eff;      /* fraction of the device's large-GEMM throughput (topo gemm_eff) reached */
    double gemm_half_dim; /* GEMM dimension where that fraction is halved */
    double attn_eff;      /* fraction of peak reached by fused (flash) attention */
    double mem_eff;       /* fraction of HBM bandwidth reached by elementwise kernels */
    double link_eff;      /* fraction of link bandwidth reached by collectives */
    double dp_overlap;    /* fraction of a micro-batch's compute that hides DP traffic */
    double tp_overlap;    /* fraction of TP traffic hidden when tp_comm_overlap is on */
    double fp8_gemm_eff;  /* the same for FP8 GEMMs */
    double step_fixed_s;  /* seconds per step that do not shrink with scale */
} model_params;

#define MODEL_NPARAMS 9
#define MODEL_NFITTED 8 /* tp_overlap is held at its prior (docs/model.md) */
extern const int model_param_fitted[MODEL_NPARAMS];
/* Literature values the fit is weakly pulled towards (model_params.c). */
extern const double model_param_prior[MODEL_NPARAMS];
#define MODEL_PRIOR_WEIGHT 0.002
extern const model_params model_params_fitted;
extern const char *const model_param_names[MODEL_NPARAMS];
/* Bounds that keep each parameter physical (fractions in (0,1], ...). */
extern const double model_param_lo[MODEL_NPARAMS], model_param_hi[MODEL_NPARAMS];
double *model_params_slot(model_params *p, int i);

/* -------------------------------------------------------- collectives */

typedef enum { MODEL_ALGO_RING, MODEL_ALGO_TREE, MODEL_ALGO_COUNT } model_algo;

/*
 * Alpha-beta time of one collective among p ranks. `bytes` is the full
 * vector each rank contributes/holds (allreduce, broadcast, reduce: the
 * buffer; reduce_scatter/allgather/alltoall: the whole p-part vector).
 * alpha: seconds per message; beta: seconds per byte.
 *   ring allreduce  2(p-1)a + 2(p-1)/p n b
 *   ring rs/ag/a2a   (p-1)a +  (p-1)/p n b
 *   ring bcast/reduce (pipelined chain)  (p-1)a + n b
 *   tree allreduce (recursive doubling)  log2(p) (a + n b)
 *   tree rs/ag (recursive halving/doubling) log2(p) a + (p-1)/p n b
 *   tree bcast/reduce (binomial) ceil(log2 p)(a + n b)
 *   barrier: ring 2(p-1)a, tree 2 ceil(log2 p) a
 */
double model_coll_time(ai_coll coll, model_algo algo, int p, double bytes, double alpha_s,
                       double beta_s_per_byte);
/* Best algorithm's time; *algo_out (may be NULL) gets which one. */
double model_coll_best(ai_coll coll, int p, double bytes, double alpha_s, double beta_s_per_byte,
                       model_algo *algo_out);

/* A communicator laid out on nodes: `ranks` members, `per_node` of them on
 * each node they touch. intra/inter: per-rank bandwidth (bytes/s) and
 * latency (s). Inter bandwidth is the rank's share of its node's NICs. */
typedef struct model_group {
    int ranks;
    int per_node;
    double intra_Bps, intra_alpha_s;
    double inter_Bps, inter_alpha_s;
} model_group;

/* Time of a collective on that layout with the best algorithm; link_eff
 * scales the bandwidths (achieved vs nominal). */
double model_group_coll_time(ai_coll coll, const model_group *g, double bytes, double link_eff);

/* --------------------------------------------------------------- plan */

typedef enum { MODEL_RC_NONE, MODEL_RC_SELECTIVE, MODEL_RC_FULL } model_recompute;
const char *model_recompute_name(model_recompute r);

#define MODEL_MAX_STAGES 512
#define MODEL_MAX_SETS 8
#define MODEL_MAX_SEGS 8

/*
 * A parallel plan. Replicas of one pipeline form a "set"; a set's stages
 * run on pools (node classes) given as contiguous segments in pipeline
 * order. Homogeneous: one set, one segment. Heterogeneous, split by stage:
 * one set, one segment per pool. Split by data: one set per pool, each
 * with its own micro-batch count per replica (uneven data parallelism).
 * All sets share tp/cp/pp and the per-stage layer counts, so parameter
 * shards line up for the gradient reduction across sets.
 */
typedef struct model_set {
    int dp;                  /* replicas in this set */
    int micro_batches;       /* per replica per step (largest replica) */
    int total_micro;         /* over all replicas of the set; 0: dp x micro_batches */
    int nsegs;
    int seg_pool[MODEL_MAX_SEGS];
    int seg_stages[MODEL_MAX_SEGS];
} model_set;

typedef struct model_plan {
    int tp, pp, cp;
    int micro_batch;         /* sequences per micro-batch */
    int interleave;          /* virtual stages per device */
    model_recompute recompute;
    int sequence_parallel;
    int zero;                /* 0..3 */
    int nsets;
    model_set sets[MODEL_MAX_SETS];
    short layers[MODEL_MAX_STAGES]; /* per stage, sum = model layers */
} model_plan;

typedef struct model_result {
    int feasible;               /* memory fits everywhere */
    double step_s;
    /* Breakdown (sums to step_s): along the critical stage of the slowest set. */
    double compute_s, recompute_s, tp_comm_s, cp_comm_s, pp_comm_s, dp_comm_s, bubble_s,
        optimizer_s;
    double tokens_per_s;
    double model_flops, hw_flops;    /* per step, whole job */
    double model_tflops_per_device, hw_tflops_per_device, mfu;
    double memory_GB;                /* worst device */
    double mem_params_GB, mem_act_GB; /* of that device: weights+grads+optimizer, activations */
    double memory_cap_GB;            /* usable memory of that device */
    int devices;                     /* devices the plan uses */
    int worst_set, worst_stage;      /* where memory is tightest */
} model_result;

/* Flash attention's backward FLOPs over its forward's: five matrix
 * products to two (Dao, FlashAttention-2, 2023; docs/model.md). */
#define MODEL_FLASH_BWD_RATIO 2.5

/* Usable fraction of device memory: allocator fragmentation, CUDA/CANN
 * context, communication buffers (see docs/model.md). */
#define MODEL_MEM_USABLE 0.92

typedef struct model_ctx {
    const topo_cluster *cluster;
    const topo_model *model;
    const topo_training *train;
    model_params params;
} model_ctx;

/* Scratch a caller that evaluates many plans on one context may bind to it
 * (model_cache_bind): what depends only on the model, or per pool on (tp,
 * cp, micro-batch, sp, recompute), kept between calls. Results are
 * bit-identical with and without it. The binding holds for calls on this
 * thread with that context (the same pointer, not modified meanwhile)
 * until model_cache_bind(NULL, NULL). */
typedef struct model_cache model_cache;
model_cache *model_cache_new(void);
void model_cache_free(model_cache *c);
void model_cache_bind(const model_ctx *ctx, model_cache *c);

/* Check plan structure against model, training and cluster (divisibility,
 * device counts, batch); AI_ERR_INVALID naming the offending field. */
ai_status_t model_plan_check(const model_ctx *ctx, const model_plan *plan);
/* Memory check alone (cheaper than model_plan_eval): 1 if every device
 * fits; *worst_ratio (may be NULL) gets the largest need / usable. */
int model_plan_fits(const model_ctx *ctx, const model_plan *plan, double *worst_ratio);
/* Evaluate a structurally valid plan (call model_plan_check first). */
void model_plan_eval(const model_ctx *ctx, const model_plan *plan, model_result *out);

/* Memory (bytes) of one device of stage `stage` in pool `pool`: split into
 * parameter state and activations. */
void model_stage_memory(const model_ctx *ctx, const model_plan *plan, int stage, int micro_batches,
                        double *params_bytes, double *act_bytes);
/* The stage's total bytes with 1 and with 2 layers instead of
 * plan->layers[stage] (memory is linear in them: the two give the line). */
void model_stage_memory_probe(const model_ctx *ctx, const model_plan *plan, int stage,
                              int micro_batches, double *mem1, double *mem2);

/* Time of one transformer layer for one micro-batch (forward, backward,
 * recompute, exposed TP/CP traffic) on a pool, and the last stage's extra
 * (output layer and loss). Used to balance uneven stages. */
void model_pool_layer_time(const model_ctx *ctx, const model_plan *pl, int pool, double *per_layer_s,
                           double *last_extra_s);

/* FLOPs of one training step (formats.md accounting). */
double model_step_model_flops(const topo_model *m, const topo_training *t);
double model_step_hw_flops(const topo_model *m, const topo_training *t, model_recompute rc);
/* Forward FLOPs of one transformer layer per token (formats.md). */
double model_layer_fwd_flops_per_token(const topo_model *m, int seq_len);

/* Activation bytes of one transformer layer for one micro-batch on one
 * device (Korthikanti et al. 2022, generalized to GQA and SwiGLU). */
double model_layer_act_bytes(const topo_model *m, const topo_training *t, int tp, int cp,
                             int micro_batch, model_recompute rc, int sp);


/* ------------------------------------------------------ pipelines (1F1B) */

/*
 * Step span of a 1F1B pipeline of `nstages` stages over M micro-batches,
 * stage i taking stage_s[i] per micro-batch (forward + backward) and v
 * virtual stages per device: M t_crit + (sum_i t_i - t_crit) / v (Narayanan
 * et al., SC'21; with uneven stages the critical stage runs all M, the
 * others' fill and drain form the bubble). *crit (may be NULL) gets the
 * critical stage (the first of equal ones).
 */
double model_1f1b_time(int M, int nstages, const double *stage_s, int v, int *crit);
/* Messages on the busiest boundary's critical path when sends are not in
 * stage_s: the first micro-batch crosses the P-1 boundaries forward and
 * back, every later one adds one crossing each way: 2 (M + P - 2) msg_s. */
double model_1f1b_p2p_time(int M, int nstages, double msg_s);
/* Micro-batches per replica that a pipeline of pp equal stages of stage_s
 * each finishes by time tau: floor(tau / stage_s) - (pp - 1), at least 0
 * (the inverse of model_1f1b_time on equal stages). */
static inline long model_1f1b_micro_within(double tau, double stage_s, int pp)
{
    double k = floor(tau / stage_s) - (pp - 1);
    return (long)(k > 0 ? k : 0);
}
/* The same with v virtual stages per device (interleaved 1F1B, whose
 * bubble is (pp - 1) stage_s / v): floor(tau / stage_s - (pp - 1) / v),
 * rounded down to a multiple of pp (the interleaved schedule runs
 * micro-batches in groups of pp); v = 1 is model_1f1b_micro_within. */
static inline long model_1f1b_micro_within_v(double tau, double stage_s, int pp, int v)
{
    if (v <= 1)
        return model_1f1b_micro_within(tau, stage_s, pp);
    double k = floor(tau / stage_s - (double)(pp - 1) / v);
    long n = (long)(k > 0 ? k : 0);
    return n - n % pp;
}
/* Lower bound of the step of M micro-batches of L layers over stages of
 * per-layer times c_i: M L / sum_i (1 / c_i), the critical stage of the
 * balanced continuous split. */
double model_1f1b_bound(int M, int L, int nstages, const double *per_layer_s);
/* The critical stage of a uniform split of L layers over pp stages of
 * per-layer time c: M ceil(L / pp) c. */
double model_1f1b_uniform_bound(int M, int L, int pp, double per_layer_s);

/* ------------------------------------------- the step of a measured job */

/*
 * A data-parallel (DDP) or pipelined job whose pieces were measured
 * (plan train, docs/planner.md): these are its cost models; the planner
 * only gathers the measurements and names their sources.
 */

/* Backward's share of a forward+backward pass: twice the forward's FLOPs
 * (Narayanan et al., SC'21, the 3x forward rule). */
#define MODEL_BWD_FRACTION (2.0 / 3.0)
/* torch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES). */
#define MODEL_DDP_FIRST_BUCKET (1024.0 * 1024.0)

/* One rank's forward+backward seconds of a micro-batch of b samples from
 * measured points (batch sizes ascending): joined linearly between them,
 * the least-squares line t = a + c b outside (through the origin when the
 * line comes out with a < 0 or c <= 0). */
typedef struct model_job_rank {
    int n, b[AI_PROFILE_POINTS];
    double t[AI_PROFILE_POINTS];
    double a, c; /* set by model_job_rank_fit */
} model_job_rank;
void model_job_rank_fit(model_job_rank *r);
double model_job_fwd_bwd(const model_job_rank *r, int m);
/* b samples in micro-batches of m: floor(b/m) f(m) + f(b mod m). */
double model_job_compute(const model_job_rank *r, int b, int m);
/* The backward of the last micro-batch of a share of b in micro-batches of
 * m (MODEL_BWD_FRACTION of its pass): what the last buckets wait for. */
double model_job_last_backward(const model_job_rank *r, int b, int m);

/* A pipeline stage of `layers` of the model's L: its share of a whole-model
 * figure (seconds of a pass, per-sample cost, optimizer step, gradient
 * bytes), x layers / L. */
double model_job_stage_share(double whole, int layers, int L);
/* Bytes of the activations one micro-batch of m samples sends across a
 * stage boundary: m x ctx x dim fp32 values. */
double model_job_act_bytes(int m, int ctx, int dim);
/* One message of n bytes between two ranks from the time of a 2-rank ring
 * allreduce of 2n bytes (2 alpha + 2n beta): half of it, alpha + n beta. */
double model_p2p_from_pair_allreduce(double pair_allreduce_2n_s);

/* t = A + B x by least squares on relative error (weights 1/t^2); 0 when
 * there are fewer than two distinct x or B comes out not positive (A is
 * clamped at 0). */
int model_fit_line_rel(int n, const double *x, const double *t, double *A, double *B);
/* The ring's alpha and beta behind a fitted allreduce line t = A + B n of
 * p ranks: A = 2(p-1) alpha, B = 2(p-1)/p beta. */
void model_ring_from_line(double A, double B, int p, double *alpha, double *beta);

/* DDP's buckets in backward order: the first MODEL_DDP_FIRST_BUCKET, then
 * cap_bytes each, of grad_bytes; at most max; returns the count. */
int model_ddp_buckets(double grad_bytes, double cap_bytes, double *sizes, int max);
/* Bytes of the last bucket (reduced after the backward ends). */
double model_ddp_last_bucket(double grad_bytes, double cap_bytes);
/* Fraction of the gradients in the buckets reduced while the backward
 * still runs (all but the last). */
double model_ddp_beside_fraction(double grad_bytes, double cap_bytes);

typedef struct model_ddp_rank {
    double compute_s;  /* its share's forward+backward */
    double last_bwd_s; /* the last micro-batch's backward */
    double lost_s;     /* compute lost to the buckets reduced beside it */
} model_ddp_rank;
/* When the last bucket's reduction ends: bucket k (sizes in backward
 * order, secs its allreduce) starts once every rank's backward has
 * produced it, compute_s - (1 - q_k) last_bwd_s plus the part of lost_s
 * spent by then (q_k the fraction of grad_bytes in buckets 0..k), and
 * after bucket k-1 ends. The exposed reduction is that end minus the
 * slowest rank's compute_s + lost_s, at least 0. */
double model_ddp_reduction_end(int nranks, const model_ddp_rank *r, double beside, int nbuckets,
                               const double *sizes, const double *secs, double grad_bytes);

/* ---------------------------------------------------------- fitting */

/* What a published figure measures. */
typedef enum {
    MODEL_METRIC_STEP_S,       /* seconds per iteration (tokens/s rows are converted) */
    MODEL_METRIC_MODEL_TFLOPS, /* model TFLOP/s per device (formats.md accounting) */
    MODEL_METRIC_HW_TFLOPS,    /* hardware TFLOP/s per device: recomputation counted */
} model_metric;

/* One published measurement. */
typedef struct model_calib_row {
    char source[32];         /* "megatron_core_h100", "korthikanti_table5", ... */
    char name[32];
    char cite[48];           /* paper and table, or document and release */
    char software[32];       /* the software generation that ran it */
    topo_cluster *cluster;   /* owned */
    topo_model model;
    topo_training train;
    model_plan plan;
    double published;        /* in the unit of `metric` */
    model_metric metric;
} model_calib_row;

typedef struct model_calib {
    int nrows;
    model_calib_row *rows;
    /* Memory check rows (Korthikanti Figure 1). */
    int nmem;
    struct {
        char name[32];
        topo_cluster *cluster;
        topo_model model;
        topo_training train;
        model_plan plan;
        double params_GiB, act_GiB;
    } *mem;
} model_calib;

/* Read the CSVs of data/calibration (directory): the two reference tables
 * and every published/<source>.csv (README there gives the columns). */
ai_status_t model_calib_load(const char *dir, model_calib **out);
/* The figure of a row's metric from an evaluation, and its unit. */
double model_calib_value(const model_calib_row *row, const model_result *r);
const char *model_metric_unit(model_metric m);
void model_calib_free(model_calib *c);
/* Predicted value of a row in the row's unit. */
double model_calib_predict(const model_calib_row *row, const model_params *p);
/* The fit's objective: mean squared log error over the rows plus the weak
 * prior term. */
double model_fit_loss(const model_calib *c, const model_params *p);
/* Nelder-Mead fit of the parameters from `start`, minimizing
 * model_fit_loss. */
ai_status_t model_fit(const model_calib *c, const model_params *start, model_params *out,
                      double *loss_out);

/* ------------------------------------- leave-one-source-out (model_loso.c) */

#define MODEL_LOSO_MAX 32
/* The distinct sources of c's rows, in order of first appearance. */
int model_calib_sources(const model_calib *c, char names[][32], int max);
/* Fit (from the shipped parameters) on every row whose source is not
 * `holdout` (NULL: all rows); AI_ERR_NOTFOUND when no row has it. */
ai_status_t model_fit_without(const model_calib *c, const char *holdout, model_params *out, double *loss);

typedef struct model_loso_source {
    char source[32];
    int nrows, within_10;     /* rows, and rows within 10% */
    double mape_pct;          /* mean |error| of its rows, fitted without it */
    double worst_pct;         /* signed error of its worst row */
    int worst_row;            /* index into c->rows */
    double fit_loss;
    model_params params;      /* fitted on the other sources */
} model_loso_source;
/* One fit per source on all the others; pred (c->nrows, may be NULL) gets
 * each row's prediction by the fit that did not see its source. */
ai_status_t model_loso(const model_calib *c, model_loso_source *src, int max, int *nsrc, double *pred);
/* Load calib_dir, run model_loso and write the per-source table (text or
 * JSON) into a malloc'd string. */
ai_status_t model_loso_report(const char *calib_dir, int as_json, char **out);

#endif
