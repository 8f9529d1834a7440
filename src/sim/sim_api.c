/*
 * Public simulation API (autoinfra.h, "training-run simulation"): turns
 * the specs, the planner's best plan and the reliability spec into the
 * engine's parameters, runs the Monte Carlo and builds the report. The
 * report is one JSON document; the text form is rendered from it.
 */
#include "plan/spec/plan.h"
#include "sim/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct ai_reliability {
    sim_reliability r;
};

struct ai_sim_report {
    ai_sim_summary sum;
    json_t *doc;
};

ai_status_t ai_reliability_load(const char *path, ai_reliability **out)
{
    if (!out)
        return util_fail(AI_ERR_INVALID, "ai_reliability_load: NULL argument");
    ai_reliability *w = calloc(1, sizeof *w);
    if (!w)
        return util_fail(AI_ERR_NOMEM, "reliability");
    ai_status_t st = AI_OK;
    if (path)
        st = sim_reliability_load(path, &w->r);
    else
        sim_reliability_defaults(&w->r);
    if (st != AI_OK) {
        free(w);
        return st;
    }
    *out = w;
    return AI_OK;
}

void ai_reliability_destroy(ai_reliability *rel) { free(rel); }

ai_status_t ai_sim_policy_parse(const char *name, ai_sim_policy *out)
{
    static const char *const names[] = {"none", "young-daly", "oracle", "learned", "rl"};
    for (int i = 0; i < 5; i++)
        if (name && !strcasecmp(name, names[i])) {
            *out = (ai_sim_policy)i;
            return AI_OK;
        }
    return util_fail(AI_ERR_INVALID, "policy '%s': want none, young-daly, oracle, learned or rl",
                     name ? name : "(null)");
}

static const char *policy_name(ai_sim_policy p)
{
    switch (p) {
    case AI_SIM_POLICY_NONE: return "none";
    case AI_SIM_POLICY_YOUNG_DALY: return "young-daly";
    case AI_SIM_POLICY_ORACLE: return "oracle";
    case AI_SIM_POLICY_LEARNED: return "learned";
    default: return "rl";
    }
}

/* Mean and 95% half-width (normal approximation) of n values. */
static void mean_ci(const double *v, int n, double *mean, double *half)
{
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    double m = s / n;
    for (int i = 0; i < n; i++)
        ss += (v[i] - m) * (v[i] - m);
    *mean = m;
    *half = n > 1 ? 1.96 * sqrt(ss / (n - 1) / n) : 0;
}

static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* One simulation through its steps: what the engine is given, what its
 * runs sum to. */
typedef struct {
    sim_reliability r;
    double tokens, step_s, plan_s, tokens_per_s;
    int dp, nodes;
    ai_plan_summary ps;
    double bytes, block_s, persist_s; /* a checkpoint: size, blocking and persisting time */
    double rate_node_s, job_mtbf_s;
    double tot, rb_share, rb_mtbf_s;  /* the causes' shares: in all, of those rolled back */
    int shrinks;
    double young_s, daly_s;
    sim_params p;
    sim_rl_train_opts ro;
    double rl_train, rl_base, rl_train_s, eff_interval_s;
    double fail_at[1];
    int runs;
    sim_event *events;
    /* the runs' sums (from zero) */
    double *ettr, *days;
    double sum_wall, sum_useful, sum_ckpt_s, sum_lost, sum_down, sum_degr;
    long sum_int, sum_ckpts, by_cause[SIM_MAX_CAUSES];
    long sum_wt, sum_wf, sum_drains, sum_excl, sum_avert;
    int finished, nevents;
    long events_dropped;
    double sim_s;
} sim_job;

static ai_status_t sim_check_opts(const ai_sim_options *opts)
{
    if ((unsigned)opts->policy > AI_SIM_POLICY_RL)
        return util_fail(AI_ERR_INVALID, "ai_sim: unknown policy %d", (int)opts->policy);
    if (opts->checkpoint_every_min < 0 || !isfinite(opts->checkpoint_every_min))
        return util_fail(AI_ERR_INVALID, "checkpoint interval %g min: want > 0",
                         opts->checkpoint_every_min);
    if (opts->checkpoint_every_min > 0 && opts->policy != AI_SIM_POLICY_NONE)
        return util_fail(AI_ERR_INVALID, "a fixed checkpoint interval goes with policy none, "
                                       "not %s (which sets its own)", policy_name(opts->policy));
    if (opts->tokens < 0 || opts->days < 0 || (opts->tokens > 0 && opts->days > 0))
        return util_fail(AI_ERR_INVALID, "give a token count or a number of days, not both");
    if (!(opts->step_time_s >= 0) || opts->step_time_s > 1e7)
        return util_fail(AI_ERR_INVALID, "step time %g s: want 0 < s <= 1e7", opts->step_time_s);
    return AI_OK;
}

/* The run's length and step: measured, or the planner's best plan. */
static ai_status_t sim_step(sim_job *j, const ai_cluster *cluster, const ai_model_spec *model,
                            const ai_training *training, const ai_reliability *rel,
                            const ai_sim_options *opts)
{
    const topo_cluster *c = cluster->c;
    if (rel)
        j->r = rel->r;
    else
        sim_reliability_defaults(&j->r);
    const topo_training *t = &training->t;
    j->tokens = opts->tokens > 0 ? opts->tokens : t->tokens;
    if (!(opts->days > 0) && !(j->tokens > 0))
        return util_fail(AI_ERR_INVALID, "no run length: the training spec has no 'tokens'; "
                                       "give a token count or a number of days");
    j->step_s = opts->step_time_s;
    if (!(j->step_s > 0)) {
        ai_plan_report *pr = NULL;
        ai_plan_options po = {NULL, 1, 0};
        double t0 = ai_now();
        ai_status_t st = ai_plan(cluster, model, training, &po, &pr);
        j->plan_s = ai_now() - t0;
        if (st != AI_OK)
            return util_fail_prefix(st, "planning the step");
        st = ai_plan_report_summary(pr, 0, &j->ps);
        ai_plan_report_destroy(pr);
        if (st != AI_OK)
            return st;
        j->step_s = j->ps.step_time_s;
        j->dp = j->ps.dp;
    }
    double tokens_per_step = (double)t->global_batch * t->seq_len;
    j->tokens_per_s = tokens_per_step / j->step_s;
    j->nodes = c->nnodes;
    return AI_OK;
}

/* The engine's parameters: checkpoint cost, failure rates and causes,
 * the policy's interval, warnings, and the horizon or the work. */
static void sim_fill_params(sim_job *j, const ai_cluster *cluster, const ai_model_spec *model,
                            const ai_training *training, const ai_sim_options *opts)
{
    const topo_cluster *c = cluster->c;
    const topo_training *t = &training->t;
    /* Checkpoint cost. */
    j->bytes = sim_checkpoint_bytes(&model->m, t);
    double write_s = j->r.checkpoint_write_s >= 0 ? j->r.checkpoint_write_s : j->bytes / (j->r.storage_GBps * 1e9);
    j->block_s = write_s;
    j->persist_s = 0;
    if (j->r.checkpoint_async) {
        j->block_s = j->bytes / c->devices / (j->r.host_copy_GBps * 1e9);
        j->persist_s = write_s;
    }

    j->rate_node_s = j->r.failures_per_node_day / 86400.0;
    j->job_mtbf_s = j->rate_node_s > 0 ? 1 / (j->rate_node_s * j->nodes) : INFINITY;

    j->p.step_s = j->step_s;
    j->p.nodes = j->nodes;
    /* A live shrink drops the failed node's data-parallel replica; a
     * replica smaller than a node takes the node's replicas with it. */
    j->p.units = j->dp > 0 ? AI_MIN(j->dp, j->nodes) : j->nodes;
    j->p.rate_per_node_s = j->rate_node_s;
    j->p.lemon_nodes = AI_MIN(j->r.lemon_nodes, j->nodes);
    j->p.lemon_factor = j->r.lemon_factor;
    j->p.detect_s = j->r.detect_s;
    j->p.restart_s = j->r.restart_s;
    j->p.shrink_s = j->r.shrink_s;
    j->p.grow_s = j->r.grow_s;
    j->p.join_s = j->r.join_s;
    j->p.ckpt_block_s = j->block_s;
    j->p.ckpt_persist_s = j->persist_s;
    j->p.recovery = opts->recovery == AI_SIM_SHRINK ? SIM_SHRINK : SIM_RESTART;
    j->p.spares = j->r.spares >= 0 ? j->r.spares : AI_MAX(1, (j->nodes + 99) / 100);
    j->p.repair_s = j->r.repair_h * 3600;
    for (int i = 0; i < j->r.ncauses; i++)
        j->tot += j->r.causes[i].share;
    j->p.ncauses = j->r.ncauses;
    for (int i = 0; i < j->r.ncauses; i++) {
        j->p.cause_cum[i] = (i ? j->p.cause_cum[i - 1] : 0) + j->r.causes[i].share / j->tot;
        j->p.cause_repair[i] = j->r.causes[i].needs_repair;
        j->p.cause_restart[i] = j->r.causes[i].restart;
    }
    j->p.cause_cum[j->r.ncauses - 1] = 1;

    /* Checkpoints only matter for the failures that roll the job back:
     * all of them under restart, those marked `restart` under a live
     * shrink (with more than one replica to shrink to). */
    j->shrinks = j->p.recovery == SIM_SHRINK && j->p.units > 1;
    for (int i = 0; i < j->r.ncauses; i++)
        j->rb_share += j->r.causes[i].restart ? j->r.causes[i].share / j->tot : 0;
    j->rb_mtbf_s = !j->shrinks ? j->job_mtbf_s : j->rb_share > 0 ? j->job_mtbf_s / j->rb_share : INFINITY;
    j->young_s = sim_young_interval(j->block_s, j->rb_mtbf_s);
    j->daly_s = sim_daly_interval(j->block_s, j->rb_mtbf_s);
    if (opts->policy == AI_SIM_POLICY_YOUNG_DALY)
        j->p.interval_s = isfinite(j->daly_s) ? AI_MAX(j->daly_s, j->persist_s) : 0;
    else if (opts->policy == AI_SIM_POLICY_ORACLE)
        j->p.oracle = 1;
    else if (opts->policy == AI_SIM_POLICY_LEARNED)
        j->p.learned = 1;
    else if (opts->policy == AI_SIM_POLICY_RL)
        j->p.interval_s = isfinite(j->daly_s) ? AI_MAX(j->daly_s, j->persist_s) : 0; /* the base, scaled */
    else
        j->p.interval_s = opts->checkpoint_every_min * 60;
    j->p.warn_recall = j->r.warn_recall;
    j->p.warn_lead_s = j->r.warn_lead_s;
    j->p.warn_separation = j->r.warn_separation;
    j->p.warn_window_s = j->r.warn_window_s;
    j->p.false_per_s = j->r.false_alarms_per_node_day * j->nodes / 86400.0;
    if (j->r.warn_precision > 0) {
        /* False alarms at the rate that makes this share of warnings true:
         * true ones come at recall x the rate of the causes that warn. */
        double warn_share = 0;
        for (int i = 0; i < j->r.ncauses; i++)
            warn_share += j->r.causes[i].needs_repair ? j->r.causes[i].share / j->tot : 0;
        double true_per_s = j->r.warn_recall * warn_share * j->rate_node_s * j->nodes;
        j->p.false_per_s = true_per_s * (1 - j->r.warn_precision) / j->r.warn_precision;
    }
    j->p.mtbf_s = j->rb_mtbf_s;
    if (opts->days > 0)
        j->p.horizon_s = opts->days * 86400;
    else
        j->p.work_s = j->tokens / j->tokens_per_s;
}

/* The rl policy, trained first on runs of its own seed domain, and the
 * interval in effect. */
static ai_status_t sim_train_policy(sim_job *j, const ai_sim_options *opts)
{
    j->ro = (sim_rl_train_opts){opts->seed, opts->rl_train_runs > 0 ? opts->rl_train_runs : 16,
                                opts->rl_iters > 0 ? opts->rl_iters : 8, 16, 4};
    if (opts->policy == AI_SIM_POLICY_RL) {
        double t1 = ai_now();
        ai_status_t st = sim_rl_train(&j->p, &j->ro, &j->rl_train, &j->rl_base);
        j->rl_train_s = ai_now() - t1;
        if (st != AI_OK)
            return util_fail_prefix(st, "training the rl policy");
    }

    j->eff_interval_s = j->p.interval_s; /* the periodic interval actually used */
    if (j->p.rl) {
        sim_rl_policy pol;
        sim_rl_decode(j->p.rl_theta, &pol);
        j->eff_interval_s *= pol.interval_mult;
    }
    return AI_OK;
}

/* A measured run replayed, the shared cores, the runs and their events. */
static ai_status_t sim_replay(sim_job *j, const ai_sim_options *opts)
{
    /* Replaying a measured run: one failure mid-step fail_at_step (with
     * no checkpoint before it, compute and wall time agree there). */
    if (opts->fail_at_step > 0 || opts->rejoin_at_step > 0 || opts->shrunk_step_time_s > 0) {
        if (!(opts->step_time_s > 0) || !(opts->fail_at_step >= 1) || j->p.interval_s > 0 || j->p.oracle ||
            j->p.learned || j->p.rl || opts->days > 0)
            return util_fail(AI_ERR_INVALID, "replaying a failure at a step needs a measured step "
                                           "time, a token count, and no checkpoint policy (none)");
        j->fail_at[0] = (opts->fail_at_step - 0.5) * j->step_s;
        j->p.fail_at = j->fail_at;
        j->p.nfail_at = 1;
        j->p.rejoin_at_work_s = opts->rejoin_at_step * j->step_s;
        j->p.shrunk_step_s = opts->shrunk_step_time_s;
    }
    if (opts->shared_cores < 0)
        return util_fail(AI_ERR_INVALID, "shared_cores %d: want 0 (none) or more", opts->shared_cores);
    j->p.shared_cores = opts->shared_cores;
    j->runs = opts->runs < 1 ? 1 : opts->runs;
    if (opts->events) {
        if (j->runs != 1)
            return util_fail(AI_ERR_INVALID, "the events of a run are reported for one run only "
                                           "(runs 1, not %d)", j->runs);
        j->events = malloc(sizeof *j->events * AI_SIM_EVENTS_MAX);
        if (!j->events)
            return util_fail(AI_ERR_NOMEM, "ai_sim: events");
        j->p.events = j->events;
        j->p.events_cap = AI_SIM_EVENTS_MAX;
    }
    return AI_OK;
}

/* The Monte Carlo: every run, summed. */
static ai_status_t sim_runs(sim_job *j, const ai_sim_options *opts)
{
    j->ettr = malloc(sizeof(double) * (size_t)j->runs);
    j->days = malloc(sizeof(double) * (size_t)j->runs);
    if (!j->ettr || !j->days)
        return util_fail(AI_ERR_NOMEM, "ai_sim: %d runs", j->runs);
    double t0 = ai_now();
    for (int i = 0; i < j->runs; i++) {
        /* Run i of seed S draws from its own stream: (S, i) hashed whole,
         * so that no run of one seed is a run of another. */
        uint64_t key[2] = {opts->seed, (uint64_t)i};
        ai_rng rng;
        util_rng_seed(&rng, util_hash64(key, sizeof key, 0));
        sim_result res;
        ai_status_t st = sim_run(&j->p, &rng, &res);
        if (st != AI_OK)
            return st;
        j->nevents = res.nevents;
        j->events_dropped = res.events_dropped;
        j->ettr[i] = res.wall_s > 0 ? res.useful_s / res.wall_s : 1;
        j->days[i] = res.wall_s / 86400;
        j->sum_wall += res.wall_s;
        j->sum_useful += res.useful_s;
        j->sum_int += res.interruptions;
        j->sum_ckpts += res.checkpoints;
        j->sum_ckpt_s += res.ckpt_s;
        j->sum_lost += res.lost_s;
        j->sum_down += res.down_s;
        j->sum_degr += res.degraded_s;
        j->finished += res.finished;
        j->sum_wt += res.warnings_true;
        j->sum_wf += res.warnings_false;
        j->sum_drains += res.drains;
        j->sum_excl += res.excludes;
        j->sum_avert += res.averted;
        for (int k = 0; k < j->p.ncauses; k++)
            j->by_cause[k] += res.by_cause[k];
    }
    j->sim_s = ai_now() - t0;
    return AI_OK;
}

static void sim_summarize(const sim_job *j, ai_sim_summary *s)
{
    double half;
    s->runs = j->runs;
    s->finished_runs = j->finished;
    s->interruptions_mean = (double)j->sum_int / j->runs;
    s->mtbf_h = j->sum_int > 0 ? j->sum_wall / j->sum_int / 3600 : 0;
    mean_ci(j->ettr, j->runs, &s->ettr_mean, &half);
    s->ettr_ci95[0] = s->ettr_mean - half;
    s->ettr_ci95[1] = s->ettr_mean + half;
    mean_ci(j->days, j->runs, &s->days_mean, &half);
    s->days_ci95[0] = s->days_mean - half;
    s->days_ci95[1] = s->days_mean + half;
    s->goodput_tokens_per_s = j->sum_wall > 0 ? j->sum_useful * j->tokens_per_s / j->sum_wall : 0;
    s->checkpoint_every_min = j->eff_interval_s / 60;
    s->checkpoint_s = j->block_s;
    s->step_time_s = j->step_s;
    s->tokens_per_s = j->tokens_per_s;
    s->job_mtbf_h = j->job_mtbf_s / 3600;
    /* The closed form for the rolled-back failures, less, under a live
     * shrink, what each survived failure costs: detection, the shrink,
     * half a step redone, the grow, and a replica missing until a spare
     * is ready. */
    s->ettr_first_order = 0;
    if (j->eff_interval_s > 0 && !j->p.rl) { /* the form knows no drains or exclusions */
        s->ettr_first_order =
            sim_ettr_first_order(j->eff_interval_s, j->block_s, j->p.detect_s + j->p.restart_s, j->rb_mtbf_s);
        if (j->shrinks && j->rb_share < 1)
            s->ettr_first_order -= (j->p.detect_s + j->p.shrink_s + j->step_s / 2 + j->p.grow_s +
                                    j->p.join_s / j->p.units) *
                                   (1 - j->rb_share) / j->job_mtbf_s;
    }
    s->plan_s = j->plan_s;
    s->sim_s = j->sim_s;
}

/* The report's JSON document (docs/sim.md). */
static json_t *sim_report_json(const sim_job *j, const ai_cluster *cluster,
                               const ai_sim_options *opts, const ai_sim_summary *s)
{
    const topo_cluster *c = cluster->c;
    json_t *d = json_object();
    json_object_set_new(d, "runs", json_integer(j->runs));
    json_object_set_new(d, "finished_runs", json_integer(j->finished));
    json_object_set_new(d, "seed", json_integer((json_int_t)opts->seed));
    json_object_set_new(d, "policy", json_string(policy_name(opts->policy)));
    json_object_set_new(d, "recovery", json_string(j->p.recovery == SIM_SHRINK ? "shrink" : "restart"));
    json_object_set_new(d, "interruptions_mean", json_real(s->interruptions_mean));
    json_object_set_new(d, "mtbf_h", json_real(s->mtbf_h));
    json_object_set_new(d, "job_mtbf_h", num_or_null(s->job_mtbf_h));
    json_object_set_new(d, "rollback_mtbf_h", num_or_null(j->rb_mtbf_s / 3600));
    json_object_set_new(d, "ettr_mean", json_real(s->ettr_mean));
    json_object_set_new(d, "ettr_ci95", json_pack("[ff]", s->ettr_ci95[0], s->ettr_ci95[1]));
    json_object_set_new(d, "ettr_first_order", json_real(s->ettr_first_order));
    json_object_set_new(d, "goodput_tokens_per_s", json_real(s->goodput_tokens_per_s));
    json_object_set_new(d, "days_mean", json_real(s->days_mean));
    json_object_set_new(d, "days_ci95", json_pack("[ff]", s->days_ci95[0], s->days_ci95[1]));
    json_object_set_new(d, "checkpoint_every_min", json_real(s->checkpoint_every_min));
    json_object_set_new(d, "young_min", num_or_null(j->young_s / 60));
    json_object_set_new(d, "daly_min", num_or_null(j->daly_s / 60));
    json_object_set_new(d, "checkpoint_GB", json_real(j->bytes / 1e9));
    json_object_set_new(d, "checkpoint_s", json_real(j->block_s));
    json_object_set_new(d, "checkpoint_persist_s", json_real(j->persist_s));
    json_object_set_new(d, "checkpoints_mean", json_real((double)j->sum_ckpts / j->runs));
    json_object_set_new(d, "tokens", opts->days > 0 ? json_null() : json_real(j->tokens));
    json_object_set_new(d, "days", opts->days > 0 ? json_real(opts->days) : json_null());
    json_object_set_new(d, "step_time_s", json_real(j->step_s));
    json_object_set_new(d, "step_source", json_string(j->dp > 0 ? "plan" : "measured"));
    json_object_set_new(d, "tokens_per_s", json_real(j->tokens_per_s));
    json_object_set_new(d, "devices", json_integer(c->devices));
    json_object_set_new(d, "nodes", json_integer(j->nodes));
    json_object_set_new(d, "replicas", json_integer(j->p.units));
    json_object_set_new(d, "spares", json_integer(j->p.spares));
    if (j->dp > 0)
        json_object_set_new(d, "plan",
                            json_pack("{si si si si si}", "tp", j->ps.tp, "pp", j->ps.pp, "dp", j->ps.dp, "cp",
                                      j->ps.cp, "micro_batch", j->ps.micro_batch));
    double wall_h = j->sum_wall / j->runs / 3600;
    json_object_set_new(
        d, "time_h_mean",
        json_pack("{sf sf sf sf sf}", "wall", wall_h, "checkpoint", j->sum_ckpt_s / j->runs / 3600, "lost",
                  j->sum_lost / j->runs / 3600, "down", j->sum_down / j->runs / 3600, "degraded",
                  j->sum_degr / j->runs / 3600));
    json_t *causes = json_array();
    for (int k = 0; k < j->p.ncauses; k++)
        json_array_append_new(causes, json_pack("{ss sf}", "cause", j->r.causes[k].name, "mean",
                                                (double)j->by_cause[k] / j->runs));
    json_object_set_new(d, "interruptions_by_cause", causes);
    if (j->p.learned || j->p.rl) {
        /* The telemetry as delivered: precision over all warnings, recall
         * over all failures (those averted included). */
        long wt = j->sum_wt, all = j->sum_wt + j->sum_wf, fails = j->sum_int + j->sum_avert;
        json_object_set_new(d, "warnings",
                            json_pack("{sf sf so so}", "true_mean", (double)wt / j->runs, "false_mean",
                                      (double)j->sum_wf / j->runs, "precision",
                                      all > 0 ? json_real((double)wt / all) : json_null(), "recall",
                                      fails > 0 ? json_real((double)wt / fails) : json_null()));
    }
    if (j->p.rl) {
        sim_rl_policy pol;
        sim_rl_decode(j->p.rl_theta, &pol);
        json_object_set_new(
            d, "rl",
            json_pack("{si si si sf sf sf s{sf sf sf sf sf sf} sf sf sf sf}", "train_runs", j->ro.runs,
                      "iterations", j->ro.iters, "population", j->ro.pop, "train_ettr", j->rl_train,
                      "train_ettr_young_daly", j->rl_base, "train_s", j->rl_train_s, "policy",
                      "drain_score", pol.drain_score, "reserve", pol.reserve, "exclude_score",
                      pol.exclude_score, "checkpoint_score", pol.ckpt_score, "checkpoint_stake",
                      pol.ckpt_stake, "interval_mult", pol.interval_mult, "drains_mean",
                      (double)j->sum_drains / j->runs, "excludes_mean", (double)j->sum_excl / j->runs,
                      "averted_mean", (double)j->sum_avert / j->runs, "base_interval_min",
                      j->p.interval_s / 60));
    }
    if (j->events) {
        /* The timeline: spans of one state each, failures as instants
         * with their cause and the compute they rolled back. */
        json_t *ev = json_array();
        for (int i = 0; i < j->nevents; i++) {
            const sim_event *e = &j->events[i];
            json_t *o = json_pack("{ss sf sf}", "kind", sim_event_kind_name(e->kind), "t0_s", e->t0,
                                  "t1_s", e->t1);
            if (e->kind == SIM_EV_FAILURE) {
                json_object_set_new(o, "cause", json_string(j->r.causes[e->cause].name));
                json_object_set_new(o, "lost_s", json_real(e->lost_s));
            }
            json_array_append_new(ev, o);
        }
        json_object_set_new(d, "events", ev);
        json_object_set_new(d, "events_dropped", json_integer(j->events_dropped));
    }
    json_object_set_new(d, "plan_s", json_real(j->plan_s));
    json_object_set_new(d, "sim_s", json_real(j->sim_s));
    return d;
}

ai_status_t ai_sim(const ai_cluster *cluster, const ai_model_spec *model, const ai_training *training,
                   const ai_reliability *rel, const ai_sim_options *opts, ai_sim_report **out)
{
    if (!cluster || !model || !training || !opts || !out)
        return util_fail(AI_ERR_INVALID, "ai_sim: NULL argument");
    ai_status_t st = sim_check_opts(opts);
    if (st != AI_OK)
        return st;
    sim_job *j = calloc(1, sizeof *j);
    ai_sim_report *rep = NULL;
    if (!j)
        return util_fail(AI_ERR_NOMEM, "ai_sim");
    if ((st = sim_step(j, cluster, model, training, rel, opts)) != AI_OK)
        goto out;
    sim_fill_params(j, cluster, model, training, opts);
    if ((st = sim_train_policy(j, opts)) != AI_OK || (st = sim_replay(j, opts)) != AI_OK ||
        (st = sim_runs(j, opts)) != AI_OK)
        goto out;
    if (!(rep = calloc(1, sizeof *rep))) {
        st = util_fail(AI_ERR_NOMEM, "ai_sim: report");
        goto out;
    }
    sim_summarize(j, &rep->sum);
    rep->doc = sim_report_json(j, cluster, opts, &rep->sum);
    *out = rep;
out:
    free(j->ettr);
    free(j->days);
    free(j->events);
    free(j);
    return st;
}

void ai_sim_report_destroy(ai_sim_report *report)
{
    if (!report)
        return;
    json_decref(report->doc);
    free(report);
}

ai_status_t ai_sim_report_summary(const ai_sim_report *report, ai_sim_summary *out)
{
    if (!report || !out)
        return util_fail(AI_ERR_INVALID, "ai_sim_report_summary: NULL argument");
    *out = report->sum;
    return AI_OK;
}

ai_status_t ai_sim_report_json(const ai_sim_report *report, char **out)
{
    if (!report || !out)
        return util_fail(AI_ERR_INVALID, "ai_sim_report_json: NULL argument");
    /* A timeline's times need more digits than the figures: 1 ms over weeks. */
    int digits = json_object_get(report->doc, "events") ? 10 : 6;
    char *text = json_dumps(report->doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(digits));
    if (!text)
        return util_fail(AI_ERR_NOMEM, "ai_sim_report_json");
    *out = text;
    return AI_OK;
}

ai_status_t ai_sim_report_text(const ai_sim_report *report, char **out)
{
    if (!report || !out)
        return util_fail(AI_ERR_INVALID, "ai_sim_report_text: NULL argument");
    const ai_sim_summary *s = &report->sum;
    json_t *d = report->doc;
    json_t *th = json_object_get(d, "time_h_mean");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return util_fail(AI_ERR_NOMEM, "ai_sim_report_text");
    fprintf(f, "simulated %d run%s (%d finished), policy %s, recovery %s\n", s->runs,
            s->runs == 1 ? "" : "s", s->finished_runs,
            json_string_value(json_object_get(d, "policy")),
            json_string_value(json_object_get(d, "recovery")));
    fprintf(f, "  step          %.4g s (%s), %.4g tokens/s at full scale, %d nodes + %d spares\n",
            s->step_time_s, json_string_value(json_object_get(d, "step_source")), s->tokens_per_s,
            (int)json_integer_value(json_object_get(d, "nodes")),
            (int)json_integer_value(json_object_get(d, "spares")));
    fprintf(f, "  checkpoint    %.4g GB, stall %.4g s, every %.4g min (Young %.4g, Daly %.4g)\n",
            json_real_value(json_object_get(d, "checkpoint_GB")), s->checkpoint_s,
            s->checkpoint_every_min, json_number_value(json_object_get(d, "young_min")),
            json_number_value(json_object_get(d, "daly_min")));
    fprintf(f, "  interruptions %.1f per run, MTBF %.3g h (rates: %.3g h)\n", s->interruptions_mean,
            s->mtbf_h, s->job_mtbf_h);
    fprintf(f, "  ETTR          %.4f  95%% CI [%.4f, %.4f]", s->ettr_mean, s->ettr_ci95[0],
            s->ettr_ci95[1]);
    if (s->ettr_first_order != 0)
        fprintf(f, "  first-order %.4f", s->ettr_first_order);
    fprintf(f, "\n  wall          %.4g days [%.4g, %.4g]; goodput %.4g tokens/s\n", s->days_mean,
            s->days_ci95[0], s->days_ci95[1], s->goodput_tokens_per_s);
    fprintf(f, "  hours per run checkpoint %.3g, lost %.3g, down %.3g, degraded %.3g\n",
            json_real_value(json_object_get(th, "checkpoint")),
            json_real_value(json_object_get(th, "lost")), json_real_value(json_object_get(th, "down")),
            json_real_value(json_object_get(th, "degraded")));
    json_t *rl = json_object_get(d, "rl");
    if (rl) {
        json_t *pol = json_object_get(rl, "policy");
        fprintf(f,
                "  rl policy     drain at score >= %.3g with > %.3g of spares free, exclude at >= %.3g,\n"
                "                checkpoint at >= %.3g with %.3g costs at stake, interval x %.3g;\n"
                "                per run %.3g drains, %.3g excludes, %.3g failures averted;\n"
                "                trained in %.3g s: ETTR %.4f on its runs (Young/Daly %.4f)\n",
                json_real_value(json_object_get(pol, "drain_score")),
                json_real_value(json_object_get(pol, "reserve")),
                json_real_value(json_object_get(pol, "exclude_score")),
                json_real_value(json_object_get(pol, "checkpoint_score")),
                json_real_value(json_object_get(pol, "checkpoint_stake")),
                json_real_value(json_object_get(pol, "interval_mult")),
                json_real_value(json_object_get(rl, "drains_mean")),
                json_real_value(json_object_get(rl, "excludes_mean")),
                json_real_value(json_object_get(rl, "averted_mean")),
                json_real_value(json_object_get(rl, "train_s")),
                json_real_value(json_object_get(rl, "train_ettr")),
                json_real_value(json_object_get(rl, "train_ettr_young_daly")));
    }
    fprintf(f, "  simulated in  %.3g s (planning %.3g s)\n", s->sim_s, s->plan_s);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return util_fail(AI_ERR_NOMEM, "ai_sim_report_text");
    }
    *out = buf;
    return AI_OK;
}
