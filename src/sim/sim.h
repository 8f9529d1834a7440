/*
 * sim layer: discrete-event simulation of whole training runs under
 * failures (docs/sim.md).
 *
 * A run is a handful of event kinds on one timeline: failures (one
 * exponential clock over the whole job, since the minimum of independent
 * exponential clocks is exponential with the summed rate), checkpoint
 * starts and ends, recoveries, repairs and spares joining, and the end of
 * the run. Steps are never simulated one by one: between events progress
 * is a rate times a duration, so a run costs O(failures + checkpoints)
 * whatever the number of steps or devices.
 *
 * The engine allocates nothing while it runs (the repair queue is sized
 * up front) and is deterministic for a given RNG state.
 */
#ifndef AI_SIM_H
#define AI_SIM_H

#include "topo/topo.h"

#define SIM_MAX_CAUSES 32
#define SIM_CAUSE_NAME 48

typedef struct sim_cause {
    char name[SIM_CAUSE_NAME];
    double share;    /* relative weight; normalised over the causes */
    int needs_repair; /* 1: the node goes to repair; 0: it is healthy after a restart */
    int restart;      /* 1: the whole job rolls back to its checkpoint even under live shrink */
} sim_cause;

/* The reliability spec (docs/formats.md, "Reliability"), defaults filled. */
typedef struct sim_reliability {
    double failures_per_node_day; /* mean over the job's nodes */
    double restart_s, shrink_s, grow_s, join_s, detect_s;
    double checkpoint_write_s;    /* < 0: from the checkpoint's size and storage_GBps */
    double storage_GBps;          /* aggregate write bandwidth of the checkpoint store */
    int checkpoint_async;         /* 1: snapshot to host memory, persist in the background */
    double host_copy_GBps;        /* per device, device to host memory */
    int spares;                   /* < 0: 1% of the job's nodes, at least 1 */
    double repair_h;
    int lemon_nodes;
    double lemon_factor;          /* a lemon's rate over a normal node's */
    /* Simulated telemetry for the learned policy. */
    double warn_recall, warn_lead_s, warn_separation, warn_window_s;
    double false_alarms_per_node_day;
    double warn_precision;        /* > 0: false alarms set so that this share of warnings is true */
    int ncauses;
    sim_cause causes[SIM_MAX_CAUSES];
} sim_reliability;

/* Defaults (Llama 3's interruption rate and cause mix, autoinfra's own
 * measured shrink, grow and join). */
void sim_reliability_defaults(sim_reliability *r);
/* Load and validate; errors name the file and the JSON path. */
ai_status_t sim_reliability_from_json(json_t *doc, const char *path, sim_reliability *out);
ai_status_t sim_reliability_load(const char *path, sim_reliability *out);

typedef enum { SIM_RESTART, SIM_SHRINK } sim_recovery;

/* Everything one run needs, in seconds and node counts. */
/* One entry of a run's timeline (sim_params.events): a span [t0, t1] of
 * wall time in one state, or a failure (t0 == t1). Consecutive spans of
 * the same kind are merged. */
typedef enum {
    SIM_EV_COMPUTE,    /* running at full scale */
    SIM_EV_DEGRADED,   /* running below full scale (live shrink, exclusion) */
    SIM_EV_CHECKPOINT, /* stalled for a checkpoint (one that a failure cuts short too) */
    SIM_EV_FAILURE,    /* a failure of cause `cause`; lost_s: compute it rolled back */
    SIM_EV_DETECT,     /* from a failure to the start of its recovery */
    SIM_EV_RESTART,    /* restarting from the last checkpoint */
    SIM_EV_WAIT,       /* waiting for a repaired node to restart on */
    SIM_EV_SHRINK,     /* the survivors rebuild without the failed node */
    SIM_EV_GROW,       /* the group grows back with a spare */
    SIM_EV_DRAIN,      /* rl: a warned node swapped for a spare */
    SIM_EV_NKINDS
} sim_event_kind;

typedef struct sim_event {
    sim_event_kind kind;
    int cause;         /* SIM_EV_FAILURE: index into the causes; else -1 */
    double t0, t1;     /* wall seconds */
    double lost_s;     /* SIM_EV_FAILURE: compute redone */
} sim_event;

/* The kind's name in reports ("compute", "failure", ...). */
const char *sim_event_kind_name(sim_event_kind k);

typedef struct sim_params {
    double work_s;        /* compute to finish at full scale (> 0), or 0 with horizon_s */
    double horizon_s;     /* > 0: stop at this wall time instead */
    double step_s;        /* one step at full scale (the work lost by a live shrink) */
    int nodes;            /* in the job */
    int units;            /* shrink granularity: data-parallel replicas (>= 1) */
    double rate_per_node_s; /* mean failure rate per node and second */
    int lemon_nodes;
    double lemon_factor;
    double detect_s, restart_s, shrink_s, grow_s, join_s;
    double ckpt_block_s;  /* the job stalls this long per checkpoint */
    double ckpt_persist_s; /* async: durable this long after the stall; 0: blocking */
    double interval_s;    /* compute between checkpoints; 0: none */
    int oracle;           /* checkpoint just before each failure (knows the future) */
    int learned;          /* the learned policy on simulated telemetry (sim_engine.c) */
    double warn_recall;   /* P(a failure needing repair is preceded by a warning) */
    double warn_lead_s;   /* mean lead of a warning before its failure */
    double warn_separation; /* true scores ~ u^(1/s), false ones 1 - u^(1/s) */
    double warn_window_s; /* a warning counts as right when a failure follows within it */
    double false_per_s;   /* false alarms per second, whole job */
    double mtbf_s;        /* learned: the MTBF of the failures that roll the job back */
    int warn_lead_fixed;  /* tests: every warning exactly warn_lead_s before its failure */
    /* The action policy (sim_rl.c): on each warning drain the node onto a
     * spare, exclude it (shrink without a spare), checkpoint, or nothing;
     * checkpoints every interval_s x its multiplier. rl_theta holds its
     * SIM_RL_NPARAM parameters, each in [0, 1] (sim_rl_decode). */
    int rl;
    double rl_theta[8];
    sim_recovery recovery;
    int spares;
    double repair_s;
    int ncauses;
    double cause_cum[SIM_MAX_CAUSES];  /* cumulative normalised shares */
    int cause_repair[SIM_MAX_CAUSES];
    int cause_restart[SIM_MAX_CAUSES];
    /* Tests: failures at these wall times instead of random ones. */
    const double *fail_at;
    int nfail_at;
    double max_wall_s;    /* give up past this wall time (unfinished); 0: 1000 x work_s */
    /* Replaying a measured run: > 0, the first node in repair is back as a
     * spare when the progress reaches this (a rank restarted at a step);
     * and the step time while shrunk (capacity step_s / shrunk_step_s
     * instead of replicas left / replicas). */
    double rejoin_at_work_s;
    double shrunk_step_s;
    /* > 0: the units share this many cores; capacity min(active, cores) /
     * min(units, cores) instead of active / units. */
    int shared_cores;
    /* Optional: the run's timeline, up to events_cap entries (the rest
     * are counted in sim_result.events_dropped). */
    sim_event *events;
    int events_cap;
} sim_params;

typedef struct sim_result {
    double wall_s;        /* run's wall time */
    double useful_s;      /* compute kept, at full scale (work_s when finished) */
    int finished;
    long interruptions;
    long checkpoints;
    double ckpt_s;        /* stalled for checkpoints */
    double lost_s;        /* compute redone */
    double down_s;        /* detection, restart, shrink, grow, waiting for nodes */
    double degraded_s;    /* running below full scale (live shrink) */
    long by_cause[SIM_MAX_CAUSES];
    long warnings_true, warnings_false; /* telemetry raised (learned, rl) */
    long drains, excludes; /* rl: warned nodes swapped for a spare, or dropped */
    long averted;         /* failures that struck a node already drained or excluded */
    int nevents;          /* entries written to sim_params.events */
    long events_dropped;  /* entries past events_cap */
} sim_result;

/* One run. The RNG is only read when failures are random. */
ai_status_t sim_run(const sim_params *p, ai_rng *rng, sim_result *out);

/* The action policy's parameters, decoded from theta in [0, 1]^NPARAM. */
#define SIM_RL_NPARAM 6
typedef struct sim_rl_policy {
    double drain_score;   /* drain a warned node onto a spare when its score is at least this */
    double reserve;       /* ... and more than this share of the spares is free */
    double exclude_score; /* else exclude it (shrink by its unit) at this score */
    double ckpt_score;    /* else checkpoint now at this score ... */
    double ckpt_stake;    /* ... when the compute since the last one is this many checkpoint costs */
    double interval_mult; /* periodic interval: the base interval times this */
} sim_rl_policy;
void sim_rl_decode(const double *theta, sim_rl_policy *out);

/* Cross-entropy policy search (sim_rl.c): trains p's rl_theta on `runs`
 * simulated runs per candidate, drawn from a seed domain disjoint from
 * the evaluation's ((seed, i, 1) hashed against (seed, i)); `iters`
 * generations of `pop` candidates, the best `elite` refit a Gaussian.
 * Deterministic for a seed. Writes the best theta found and its mean
 * ETTR over the training runs. */
typedef struct sim_rl_train_opts {
    uint64_t seed;
    int runs, iters, pop, elite;
} sim_rl_train_opts;
ai_status_t sim_rl_train(sim_params *p, const sim_rl_train_opts *o, double *train_ettr,
                         double *baseline_ettr);

/* Failing nodes from a fault trace (sim_predict.c, docs/sim.md). */
#define SIM_PREDICT_NFEAT 5
typedef struct sim_predict_opts {
    int nodes;           /* the cluster's nodes (those never failing have no events) */
    double window_days;  /* predict a fault within the next window */
    double train_share;  /* fit on the first share of the trace's span */
    int topk;            /* flag this many nodes per window */
} sim_predict_opts;
typedef struct sim_predict_result {
    int nodes, nodes_failing, faults;
    double end_days, split_days;
    int train_times, test_times;
    long test_rows, test_positives; /* (node, window) pairs measured; those with a fault */
    double coef[SIM_PREDICT_NFEAT]; /* bias, log1p faults, log1p faults in 30 days,
                                     * recency exp(-days since the last / 30), log1p hardware */
    double auc_model, auc_baseline; /* NAN when the test part has one class only */
    double precision_model, recall_model, precision_baseline, recall_baseline; /* top k */
} sim_predict_result;
ai_status_t sim_predict(json_t *trace, const char *path, const sim_predict_opts *o,
                        sim_predict_result *out);
ai_status_t sim_predict_file(const char *path, const sim_predict_opts *o, sim_predict_result *out);

/* Checkpoint intervals (compute between checkpoints) for checkpoint cost
 * delta and MTBF m: Young 1974, sqrt(2 delta m); Daly 2006's higher-order
 * estimate, sqrt(2 delta m) (1 + sqrt(delta/(2m))/3 + delta/(18 m)) - delta
 * for delta < 2m, else m. */
double sim_young_interval(double delta, double m);
double sim_daly_interval(double delta, double m);
/* First-order ETTR with interval tau, checkpoint cost c, downtime per
 * failure r and MTBF m: 1 - c/tau - (tau/2 + r)/m (tau 0: no checkpoints
 * is not covered; returns NAN). */
double sim_ettr_first_order(double tau, double c, double r, double m);

/* Checkpoint size in bytes: weights in the compute precision plus the
 * optimizer state of model.h's accounting (fp32 master and moments). */
double sim_checkpoint_bytes(const topo_model *m, const topo_training *t);

#endif
