/*
 * plan layer: the job-level planner and its manual baseline.
 *
 * plan_search enumerates parallel plans (tp, cp, pp, dp, micro-batch,
 * interleave, recompute, sequence parallelism, ZeRO stage and, on mixed
 * clusters, which pools host which stages with how many layers, or how
 * micro-batches split between pools), evaluates each with the step model
 * and keeps the fastest that fit in memory. docs/planner.md describes the
 * search order and its pruning rules.
 *
 * The room's one header: the search and baselines for the files that
 * implement the job-level API (plan_api.c, plan_cluster.c), and the public
 * wrapper types for the layers above that take them (sim).
 */
#ifndef AI_PLAN_H
#define AI_PLAN_H

#include "model/model.h"
#include "topo/topo.h"

/* The public wrapper types of the job-level API. */
struct ai_cluster {
    topo_cluster *c;
};
struct ai_model_spec {
    topo_model m;
};
struct ai_training {
    topo_training t;
};

/* Plan fields pinned by --fix; -1 = free. */
typedef struct plan_fix {
    int tp, pp, dp, cp, micro_batch, interleave, recompute, sequence_parallel, zero;
} plan_fix;

void plan_fix_init(plan_fix *f);
/* "tp=8,pp=16,dp=6,recompute=full" (keys: tp pp dp cp micro_batch|mb
 * interleave|vp recompute sequence_parallel|sp zero). */
ai_status_t plan_fix_parse(const char *text, plan_fix *out);

typedef struct plan_candidate {
    model_plan plan;
    model_result res;
} plan_candidate;

/* What the search saw of each choice, to explain the one it made: per
 * field and value the fastest feasible plan evaluated with it and how
 * many with it did not fit; per pool the same over plans that use it; the
 * fastest evaluated plan other than the best. */
enum {
    PLAN_WHY_TP,
    PLAN_WHY_PP,
    PLAN_WHY_CP,
    PLAN_WHY_MB,
    PLAN_WHY_VP,
    PLAN_WHY_RC,
    PLAN_WHY_ZERO,
    PLAN_WHY_LAYOUT, /* 0: one pool, 1: split by stage, 2: split by data */
    PLAN_WHY_NDIMS
};
#define PLAN_WHY_VALUES (MODEL_MAX_STAGES + 1)
#define PLAN_WHY_POOLS 64

typedef struct plan_why {
    double best_s[PLAN_WHY_NDIMS][PLAN_WHY_VALUES]; /* INFINITY: none feasible */
    int unfit[PLAN_WHY_NDIMS][PLAN_WHY_VALUES];
    double pool_best_s[PLAN_WHY_POOLS];
    long pool_unfit[PLAN_WHY_POOLS];
    double first_s;
    int has_second;
    plan_candidate second;
} plan_why;

/* The value of field `dim` in a plan (PLAN_WHY_*), and the layout kind. */
int plan_why_value(const model_plan *pl, int dim);

typedef struct plan_stats {
    long evaluated;        /* plans the step model evaluated */
    long pruned_memory;    /* of those, rejected because they do not fit */
    long pruned_bound;     /* layouts skipped: lower bound above the kept plans */
    double seconds;
    /* When nothing fits: the plan that came closest (res.feasible = 0). */
    int has_closest;
    plan_candidate closest;
    plan_why why;
} plan_stats;

/*
 * Search. Writes up to `top` best feasible plans, fastest first, into a
 * new array (*out, free() it) of *nout entries. AI_ERR_INFEASIBLE if no
 * plan fits; the message says what came closest and stats->closest holds
 * it (so a fully pinned plan can still be reported, marked infeasible).
 */
ai_status_t plan_search(const model_ctx *ctx, const plan_fix *fix, int top, plan_candidate **out,
                        int *nout, plan_stats *stats);
/* (It binds a model_cache of its own to ctx while it runs and unbinds it
 * on return.) */

/*
 * The manual baseline (docs/planner.md): tp = devices per node (largest
 * divisor of heads not above it), pp = the smallest power of two that fits
 * with a uniform layer split and full recompute, dp = the rest, micro-batch
 * 1, ZeRO-1, no sequence parallelism, every device treated as the slowest
 * one present. Evaluated on that all-slowest cluster, which *slow_out
 * receives (free with topo_cluster_free) so the plan can be reported.
 */
ai_status_t plan_manual_baseline(const model_ctx *ctx, plan_candidate *out, topo_cluster **slow_out);

/*
 * The homogeneous baseline: this planner's own search on the all-slowest
 * cluster of the manual baseline (what the search gains from using the
 * faster devices as they are). *slow_out as for the manual one.
 */
ai_status_t plan_homogeneous_baseline(const model_ctx *ctx, plan_candidate *out,
                                      topo_cluster **slow_out);

/*
 * The expert baseline (published practice, docs/planner.md): tp = devices
 * per node, selective recompute with sequence parallelism, ZeRO-1, the
 * smallest power-of-two pp that fits, at it the interleave that predicts
 * fastest, each with the largest micro-batch (8, 4, 2, 1) that fits; dp
 * the rest. fastest_only: on the fastest node group alone (highest peak
 * at the training precision); else on the whole cluster taken as its
 * slowest device. *cl_out gets the cluster it was evaluated on.
 */
ai_status_t plan_expert_baseline(const model_ctx *ctx, int fastest_only, plan_candidate *out,
                                 topo_cluster **cl_out);

/* JSON of one candidate (formats.md plan fields + results). */
json_t *plan_candidate_json(const topo_cluster *c, const plan_candidate *pc);

#endif
