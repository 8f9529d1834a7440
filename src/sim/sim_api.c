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
        return ai_fail(AI_ERR_INVALID, "ai_reliability_load: NULL argument");
    ai_reliability *w = calloc(1, sizeof *w);
    if (!w)
        return ai_fail(AI_ERR_NOMEM, "reliability");
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
    return ai_fail(AI_ERR_INVALID, "policy '%s': want none, young-daly, oracle, learned or rl",
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

ai_status_t ai_sim(const ai_cluster *cluster, const ai_model_spec *model, const ai_training *training,
                   const ai_reliability *rel, const ai_sim_options *opts, ai_sim_report **out)
{
    if (!cluster || !model || !training || !opts || !out)
        return ai_fail(AI_ERR_INVALID, "ai_sim: NULL argument");
    if ((unsigned)opts->policy > AI_SIM_POLICY_RL)
        return ai_fail(AI_ERR_INVALID, "ai_sim: unknown policy %d", (int)opts->policy);
    if (opts->checkpoint_every_min < 0 || !isfinite(opts->checkpoint_every_min))
        return ai_fail(AI_ERR_INVALID, "checkpoint interval %g min: want > 0",
                       opts->checkpoint_every_min);
    if (opts->checkpoint_every_min > 0 && opts->policy != AI_SIM_POLICY_NONE)
        return ai_fail(AI_ERR_INVALID, "a fixed checkpoint interval goes with policy none, "
                                       "not %s (which sets its own)", policy_name(opts->policy));
    if (opts->tokens < 0 || opts->days < 0 || (opts->tokens > 0 && opts->days > 0))
        return ai_fail(AI_ERR_INVALID, "give a token count or a number of days, not both");
    if (!(opts->step_time_s >= 0) || opts->step_time_s > 1e7)
        return ai_fail(AI_ERR_INVALID, "step time %g s: want 0 < s <= 1e7", opts->step_time_s);

    sim_reliability r;
    if (rel)
        r = rel->r;
    else
        sim_reliability_defaults(&r);
    const topo_cluster *c = cluster->c;
    const topo_training *t = &training->t;
    double tokens = opts->tokens > 0 ? opts->tokens : t->tokens;
    if (!(opts->days > 0) && !(tokens > 0))
        return ai_fail(AI_ERR_INVALID, "no run length: the training spec has no 'tokens'; "
                                       "give a token count or a number of days");

    /* The step: measured, or the planner's best plan. */
    double step_s = opts->step_time_s, plan_s = 0;
    int dp = 0;
    ai_plan_summary ps;
    memset(&ps, 0, sizeof ps);
    if (!(step_s > 0)) {
        ai_plan_report *pr = NULL;
        ai_plan_options po = {NULL, 1, 0};
        double t0 = ai_now();
        ai_status_t st = ai_plan(cluster, model, training, &po, &pr);
        plan_s = ai_now() - t0;
        if (st != AI_OK)
            return ai_fail_prefix(st, "planning the step");
        st = ai_plan_report_summary(pr, 0, &ps);
        ai_plan_report_destroy(pr);
        if (st != AI_OK)
            return st;
        step_s = ps.step_time_s;
        dp = ps.dp;
    }
    double tokens_per_step = (double)t->global_batch * t->seq_len;
    double tokens_per_s = tokens_per_step / step_s;
    int nodes = c->nnodes;

    /* Checkpoint cost. */
    double bytes = sim_checkpoint_bytes(&model->m, t);
    double write_s = r.checkpoint_write_s >= 0 ? r.checkpoint_write_s : bytes / (r.storage_GBps * 1e9);
    double block_s = write_s, persist_s = 0;
    if (r.checkpoint_async) {
        block_s = bytes / c->devices / (r.host_copy_GBps * 1e9);
        persist_s = write_s;
    }

    double rate_node_s = r.failures_per_node_day / 86400.0;
    double job_mtbf_s = rate_node_s > 0 ? 1 / (rate_node_s * nodes) : INFINITY;

    sim_params p;
    memset(&p, 0, sizeof p);
    p.step_s = step_s;
    p.nodes = nodes;
    /* A live shrink drops the failed node's data-parallel replica; a
     * replica smaller than a node takes the node's replicas with it. */
    p.units = dp > 0 ? AI_MIN(dp, nodes) : nodes;
    p.rate_per_node_s = rate_node_s;
    p.lemon_nodes = AI_MIN(r.lemon_nodes, nodes);
    p.lemon_factor = r.lemon_factor;
    p.detect_s = r.detect_s;
    p.restart_s = r.restart_s;
    p.shrink_s = r.shrink_s;
    p.grow_s = r.grow_s;
    p.join_s = r.join_s;
    p.ckpt_block_s = block_s;
    p.ckpt_persist_s = persist_s;
    p.recovery = opts->recovery == AI_SIM_SHRINK ? SIM_SHRINK : SIM_RESTART;
    p.spares = r.spares >= 0 ? r.spares : AI_MAX(1, (nodes + 99) / 100);
    p.repair_s = r.repair_h * 3600;
    double tot = 0;
    for (int i = 0; i < r.ncauses; i++)
        tot += r.causes[i].share;
    p.ncauses = r.ncauses;
    for (int i = 0; i < r.ncauses; i++) {
        p.cause_cum[i] = (i ? p.cause_cum[i - 1] : 0) + r.causes[i].share / tot;
        p.cause_repair[i] = r.causes[i].needs_repair;
        p.cause_restart[i] = r.causes[i].restart;
    }
    p.cause_cum[r.ncauses - 1] = 1;

    /* Checkpoints only matter for the failures that roll the job back:
     * all of them under restart, those marked `restart` under a live
     * shrink (with more than one replica to shrink to). */
    int shrinks = p.recovery == SIM_SHRINK && p.units > 1;
    double rb_share = 0;
    for (int i = 0; i < r.ncauses; i++)
        rb_share += r.causes[i].restart ? r.causes[i].share / tot : 0;
    double rb_mtbf_s = !shrinks ? job_mtbf_s : rb_share > 0 ? job_mtbf_s / rb_share : INFINITY;
    double young_s = sim_young_interval(block_s, rb_mtbf_s);
    double daly_s = sim_daly_interval(block_s, rb_mtbf_s);
    if (opts->policy == AI_SIM_POLICY_YOUNG_DALY)
        p.interval_s = isfinite(daly_s) ? AI_MAX(daly_s, persist_s) : 0;
    else if (opts->policy == AI_SIM_POLICY_ORACLE)
        p.oracle = 1;
    else if (opts->policy == AI_SIM_POLICY_LEARNED)
        p.learned = 1;
    else if (opts->policy == AI_SIM_POLICY_RL)
        p.interval_s = isfinite(daly_s) ? AI_MAX(daly_s, persist_s) : 0; /* the base, scaled */
    else
        p.interval_s = opts->checkpoint_every_min * 60;
    p.warn_recall = r.warn_recall;
    p.warn_lead_s = r.warn_lead_s;
    p.warn_separation = r.warn_separation;
    p.warn_window_s = r.warn_window_s;
    p.false_per_s = r.false_alarms_per_node_day * nodes / 86400.0;
    if (r.warn_precision > 0) {
        /* False alarms at the rate that makes this share of warnings true:
         * true ones come at recall x the rate of the causes that warn. */
        double warn_share = 0;
        for (int i = 0; i < r.ncauses; i++)
            warn_share += r.causes[i].needs_repair ? r.causes[i].share / tot : 0;
        double true_per_s = r.warn_recall * warn_share * rate_node_s * nodes;
        p.false_per_s = true_per_s * (1 - r.warn_precision) / r.warn_precision;
    }
    p.mtbf_s = rb_mtbf_s;
    if (opts->days > 0)
        p.horizon_s = opts->days * 86400;
    else
        p.work_s = tokens / tokens_per_s;

    /* The rl policy is trained first, on runs of its own seed domain. */
    sim_rl_train_opts ro = {opts->seed, opts->rl_train_runs > 0 ? opts->rl_train_runs : 16,
                            opts->rl_iters > 0 ? opts->rl_iters : 8, 16, 4};
    double rl_train = 0, rl_base = 0, rl_train_s = 0;
    if (opts->policy == AI_SIM_POLICY_RL) {
        double t1 = ai_now();
        ai_status_t st = sim_rl_train(&p, &ro, &rl_train, &rl_base);
        rl_train_s = ai_now() - t1;
        if (st != AI_OK)
            return ai_fail_prefix(st, "training the rl policy");
    }

    double eff_interval_s = p.interval_s; /* the periodic interval actually used */
    if (p.rl) {
        sim_rl_policy pol;
        sim_rl_decode(p.rl_theta, &pol);
        eff_interval_s *= pol.interval_mult;
    }
    /* Replaying a measured run: one failure mid-step fail_at_step (with
     * no checkpoint before it, compute and wall time agree there). */
    double fail_at[1];
    if (opts->fail_at_step > 0 || opts->rejoin_at_step > 0 || opts->shrunk_step_time_s > 0) {
        if (!(opts->step_time_s > 0) || !(opts->fail_at_step >= 1) || p.interval_s > 0 || p.oracle ||
            p.learned || p.rl || opts->days > 0)
            return ai_fail(AI_ERR_INVALID, "replaying a failure at a step needs a measured step "
                                           "time, a token count, and no checkpoint policy (none)");
        fail_at[0] = (opts->fail_at_step - 0.5) * step_s;
        p.fail_at = fail_at;
        p.nfail_at = 1;
        p.rejoin_at_work_s = opts->rejoin_at_step * step_s;
        p.shrunk_step_s = opts->shrunk_step_time_s;
    }
    if (opts->shared_cores < 0)
        return ai_fail(AI_ERR_INVALID, "shared_cores %d: want 0 (none) or more", opts->shared_cores);
    p.shared_cores = opts->shared_cores;
    int runs = opts->runs < 1 ? 1 : opts->runs;
    sim_event *events = NULL;
    if (opts->events) {
        if (runs != 1)
            return ai_fail(AI_ERR_INVALID, "the events of a run are reported for one run only "
                                           "(runs 1, not %d)", runs);
        events = malloc(sizeof *events * AI_SIM_EVENTS_MAX);
        if (!events)
            return ai_fail(AI_ERR_NOMEM, "ai_sim: events");
        p.events = events;
        p.events_cap = AI_SIM_EVENTS_MAX;
    }
    int nevents = 0;
    long events_dropped = 0;
    double *ettr = malloc(sizeof(double) * (size_t)runs);
    double *days = malloc(sizeof(double) * (size_t)runs);
    if (!ettr || !days) {
        free(ettr);
        free(days);
        free(events);
        return ai_fail(AI_ERR_NOMEM, "ai_sim: %d runs", runs);
    }
    double sum_wall = 0, sum_useful = 0, sum_ckpt_s = 0, sum_lost = 0, sum_down = 0, sum_degr = 0;
    long sum_int = 0, sum_ckpts = 0, by_cause[SIM_MAX_CAUSES] = {0};
    long sum_wt = 0, sum_wf = 0, sum_drains = 0, sum_excl = 0, sum_avert = 0;
    int finished = 0;
    double t0 = ai_now();
    for (int i = 0; i < runs; i++) {
        /* Run i of seed S draws from its own stream: (S, i) hashed whole,
         * so that no run of one seed is a run of another. */
        uint64_t key[2] = {opts->seed, (uint64_t)i};
        ai_rng rng;
        ai_rng_seed(&rng, ai_hash64(key, sizeof key, 0));
        sim_result res;
        ai_status_t st = sim_run(&p, &rng, &res);
        if (st != AI_OK) {
            free(ettr);
            free(days);
            free(events);
            return st;
        }
        nevents = res.nevents;
        events_dropped = res.events_dropped;
        ettr[i] = res.wall_s > 0 ? res.useful_s / res.wall_s : 1;
        days[i] = res.wall_s / 86400;
        sum_wall += res.wall_s;
        sum_useful += res.useful_s;
        sum_int += res.interruptions;
        sum_ckpts += res.checkpoints;
        sum_ckpt_s += res.ckpt_s;
        sum_lost += res.lost_s;
        sum_down += res.down_s;
        sum_degr += res.degraded_s;
        finished += res.finished;
        sum_wt += res.warnings_true;
        sum_wf += res.warnings_false;
        sum_drains += res.drains;
        sum_excl += res.excludes;
        sum_avert += res.averted;
        for (int k = 0; k < p.ncauses; k++)
            by_cause[k] += res.by_cause[k];
    }
    double sim_s = ai_now() - t0;

    ai_sim_report *rep = calloc(1, sizeof *rep);
    if (!rep) {
        free(ettr);
        free(days);
        free(events);
        return ai_fail(AI_ERR_NOMEM, "ai_sim: report");
    }
    ai_sim_summary *s = &rep->sum;
    double half;
    s->runs = runs;
    s->finished_runs = finished;
    s->interruptions_mean = (double)sum_int / runs;
    s->mtbf_h = sum_int > 0 ? sum_wall / sum_int / 3600 : 0;
    mean_ci(ettr, runs, &s->ettr_mean, &half);
    s->ettr_ci95[0] = s->ettr_mean - half;
    s->ettr_ci95[1] = s->ettr_mean + half;
    mean_ci(days, runs, &s->days_mean, &half);
    s->days_ci95[0] = s->days_mean - half;
    s->days_ci95[1] = s->days_mean + half;
    s->goodput_tokens_per_s = sum_wall > 0 ? sum_useful * tokens_per_s / sum_wall : 0;
    s->checkpoint_every_min = eff_interval_s / 60;
    s->checkpoint_s = block_s;
    s->step_time_s = step_s;
    s->tokens_per_s = tokens_per_s;
    s->job_mtbf_h = job_mtbf_s / 3600;
    /* The closed form for the rolled-back failures, less, under a live
     * shrink, what each survived failure costs: detection, the shrink,
     * half a step redone, the grow, and a replica missing until a spare
     * is ready. */
    s->ettr_first_order = 0;
    if (eff_interval_s > 0 && !p.rl) { /* the form knows no drains or exclusions */
        s->ettr_first_order =
            sim_ettr_first_order(eff_interval_s, block_s, p.detect_s + p.restart_s, rb_mtbf_s);
        if (shrinks && rb_share < 1)
            s->ettr_first_order -= (p.detect_s + p.shrink_s + step_s / 2 + p.grow_s +
                                    p.join_s / p.units) *
                                   (1 - rb_share) / job_mtbf_s;
    }
    s->plan_s = plan_s;
    s->sim_s = sim_s;
    free(ettr);
    free(days);

    json_t *d = json_object();
    json_object_set_new(d, "runs", json_integer(runs));
    json_object_set_new(d, "finished_runs", json_integer(finished));
    json_object_set_new(d, "seed", json_integer((json_int_t)opts->seed));
    json_object_set_new(d, "policy", json_string(policy_name(opts->policy)));
    json_object_set_new(d, "recovery", json_string(p.recovery == SIM_SHRINK ? "shrink" : "restart"));
    json_object_set_new(d, "interruptions_mean", json_real(s->interruptions_mean));
    json_object_set_new(d, "mtbf_h", json_real(s->mtbf_h));
    json_object_set_new(d, "job_mtbf_h", num_or_null(s->job_mtbf_h));
    json_object_set_new(d, "rollback_mtbf_h", num_or_null(rb_mtbf_s / 3600));
    json_object_set_new(d, "ettr_mean", json_real(s->ettr_mean));
    json_object_set_new(d, "ettr_ci95", json_pack("[ff]", s->ettr_ci95[0], s->ettr_ci95[1]));
    json_object_set_new(d, "ettr_first_order", json_real(s->ettr_first_order));
    json_object_set_new(d, "goodput_tokens_per_s", json_real(s->goodput_tokens_per_s));
    json_object_set_new(d, "days_mean", json_real(s->days_mean));
    json_object_set_new(d, "days_ci95", json_pack("[ff]", s->days_ci95[0], s->days_ci95[1]));
    json_object_set_new(d, "checkpoint_every_min", json_real(s->checkpoint_every_min));
    json_object_set_new(d, "young_min", num_or_null(young_s / 60));
    json_object_set_new(d, "daly_min", num_or_null(daly_s / 60));
    json_object_set_new(d, "checkpoint_GB", json_real(bytes / 1e9));
    json_object_set_new(d, "checkpoint_s", json_real(block_s));
    json_object_set_new(d, "checkpoint_persist_s", json_real(persist_s));
    json_object_set_new(d, "checkpoints_mean", json_real((double)sum_ckpts / runs));
    json_object_set_new(d, "tokens", opts->days > 0 ? json_null() : json_real(tokens));
    json_object_set_new(d, "days", opts->days > 0 ? json_real(opts->days) : json_null());
    json_object_set_new(d, "step_time_s", json_real(step_s));
    json_object_set_new(d, "step_source", json_string(dp > 0 ? "plan" : "measured"));
    json_object_set_new(d, "tokens_per_s", json_real(tokens_per_s));
    json_object_set_new(d, "devices", json_integer(c->devices));
    json_object_set_new(d, "nodes", json_integer(nodes));
    json_object_set_new(d, "replicas", json_integer(p.units));
    json_object_set_new(d, "spares", json_integer(p.spares));
    if (dp > 0)
        json_object_set_new(d, "plan",
                            json_pack("{si si si si si}", "tp", ps.tp, "pp", ps.pp, "dp", ps.dp, "cp",
                                      ps.cp, "micro_batch", ps.micro_batch));
    double wall_h = sum_wall / runs / 3600;
    json_object_set_new(
        d, "time_h_mean",
        json_pack("{sf sf sf sf sf}", "wall", wall_h, "checkpoint", sum_ckpt_s / runs / 3600, "lost",
                  sum_lost / runs / 3600, "down", sum_down / runs / 3600, "degraded",
                  sum_degr / runs / 3600));
    json_t *causes = json_array();
    for (int k = 0; k < p.ncauses; k++)
        json_array_append_new(causes, json_pack("{ss sf}", "cause", r.causes[k].name, "mean",
                                                (double)by_cause[k] / runs));
    json_object_set_new(d, "interruptions_by_cause", causes);
    if (p.learned || p.rl) {
        /* The telemetry as delivered: precision over all warnings, recall
         * over all failures (those averted included). */
        long wt = sum_wt, all = sum_wt + sum_wf, fails = sum_int + sum_avert;
        json_object_set_new(d, "warnings",
                            json_pack("{sf sf so so}", "true_mean", (double)wt / runs, "false_mean",
                                      (double)sum_wf / runs, "precision",
                                      all > 0 ? json_real((double)wt / all) : json_null(), "recall",
                                      fails > 0 ? json_real((double)wt / fails) : json_null()));
    }
    if (p.rl) {
        sim_rl_policy pol;
        sim_rl_decode(p.rl_theta, &pol);
        json_object_set_new(
            d, "rl",
            json_pack("{si si si sf sf sf s{sf sf sf sf sf sf} sf sf sf sf}", "train_runs", ro.runs,
                      "iterations", ro.iters, "population", ro.pop, "train_ettr", rl_train,
                      "train_ettr_young_daly", rl_base, "train_s", rl_train_s, "policy",
                      "drain_score", pol.drain_score, "reserve", pol.reserve, "exclude_score",
                      pol.exclude_score, "checkpoint_score", pol.ckpt_score, "checkpoint_stake",
                      pol.ckpt_stake, "interval_mult", pol.interval_mult, "drains_mean",
                      (double)sum_drains / runs, "excludes_mean", (double)sum_excl / runs,
                      "averted_mean", (double)sum_avert / runs, "base_interval_min",
                      p.interval_s / 60));
    }
    if (events) {
        /* The timeline: spans of one state each, failures as instants
         * with their cause and the compute they rolled back. */
        json_t *ev = json_array();
        for (int i = 0; i < nevents; i++) {
            const sim_event *e = &events[i];
            json_t *o = json_pack("{ss sf sf}", "kind", sim_event_kind_name(e->kind), "t0_s", e->t0,
                                  "t1_s", e->t1);
            if (e->kind == SIM_EV_FAILURE) {
                json_object_set_new(o, "cause", json_string(r.causes[e->cause].name));
                json_object_set_new(o, "lost_s", json_real(e->lost_s));
            }
            json_array_append_new(ev, o);
        }
        json_object_set_new(d, "events", ev);
        json_object_set_new(d, "events_dropped", json_integer(events_dropped));
        free(events);
    }
    json_object_set_new(d, "plan_s", json_real(plan_s));
    json_object_set_new(d, "sim_s", json_real(sim_s));
    rep->doc = d;
    *out = rep;
    return AI_OK;
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
        return ai_fail(AI_ERR_INVALID, "ai_sim_report_summary: NULL argument");
    *out = report->sum;
    return AI_OK;
}

ai_status_t ai_sim_report_json(const ai_sim_report *report, char **out)
{
    if (!report || !out)
        return ai_fail(AI_ERR_INVALID, "ai_sim_report_json: NULL argument");
    /* A timeline's times need more digits than the figures: 1 ms over weeks. */
    int digits = json_object_get(report->doc, "events") ? 10 : 6;
    char *text = json_dumps(report->doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(digits));
    if (!text)
        return ai_fail(AI_ERR_NOMEM, "ai_sim_report_json");
    *out = text;
    return AI_OK;
}

ai_status_t ai_sim_report_text(const ai_sim_report *report, char **out)
{
    if (!report || !out)
        return ai_fail(AI_ERR_INVALID, "ai_sim_report_text: NULL argument");
    const ai_sim_summary *s = &report->sum;
    json_t *d = report->doc;
    json_t *th = json_object_get(d, "time_h_mean");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return ai_fail(AI_ERR_NOMEM, "ai_sim_report_text");
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
        return ai_fail(AI_ERR_NOMEM, "ai_sim_report_text");
    }
    *out = buf;
    return AI_OK;
}
