/*
 * Public job-level API (autoinfra.h, "job level" section): thin wrappers
 * that own the topo specs, run the planner and render reports. The report
 * is built once as a JSON document; the text table is rendered from it, so
 * the two can never disagree.
 */
#include "plan/spec/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ai_plan_report {
    json_t *doc;
    int n;
    ai_plan_summary *sum;
};

ai_status_t ai_cluster_load(const char *path, ai_cluster **out)
{
    ai_cluster *w = calloc(1, sizeof *w);
    if (!w)
        return util_fail(AI_ERR_NOMEM, "cluster");
    ai_status_t st = topo_cluster_load(path, &w->c);
    if (st != AI_OK) {
        free(w);
        return st;
    }
    *out = w;
    return AI_OK;
}

void ai_cluster_destroy(ai_cluster *cluster)
{
    if (!cluster)
        return;
    topo_cluster_free(cluster->c);
    free(cluster);
}

int ai_cluster_devices(const ai_cluster *cluster) { return cluster ? cluster->c->devices : 0; }

ai_status_t ai_model_spec_load(const char *path, ai_model_spec **out)
{
    ai_model_spec *w = calloc(1, sizeof *w);
    if (!w)
        return util_fail(AI_ERR_NOMEM, "model");
    ai_status_t st = topo_model_load(path, &w->m);
    if (st != AI_OK) {
        free(w);
        return st;
    }
    *out = w;
    return AI_OK;
}

void ai_model_spec_destroy(ai_model_spec *model) { free(model); }

ai_status_t ai_training_load(const char *path, ai_training **out)
{
    ai_training *w = calloc(1, sizeof *w);
    if (!w)
        return util_fail(AI_ERR_NOMEM, "training");
    ai_status_t st = topo_training_load(path, &w->t);
    if (st != AI_OK) {
        free(w);
        return st;
    }
    *out = w;
    return AI_OK;
}

void ai_training_destroy(ai_training *training) { free(training); }

/* ------------------------------------------------------------ planning */

static void summary_of(const plan_candidate *pc, ai_plan_summary *s)
{
    const model_plan *pl = &pc->plan;
    memset(s, 0, sizeof *s);
    s->tp = pl->tp;
    s->pp = pl->pp;
    for (int k = 0; k < pl->nsets; k++)
        s->dp += pl->sets[k].dp;
    s->cp = pl->cp;
    s->micro_batch = pl->micro_batch;
    s->interleave = pl->interleave;
    s->recompute = (int)pl->recompute;
    s->sequence_parallel = pl->sequence_parallel && pl->tp > 1;
    s->zero = pl->zero;
    s->feasible = pc->res.feasible;
    s->step_time_s = pc->res.step_s;
    s->tokens_per_s = pc->res.tokens_per_s;
    s->model_tflops_per_device = pc->res.model_tflops_per_device;
    s->hw_tflops_per_device = pc->res.hw_tflops_per_device;
    s->mfu = pc->res.mfu;
    s->memory_GB_per_device = pc->res.memory_GB;
}

/* Merge another object's members into dst (steals nothing). */
static void json_merge(json_t *dst, json_t *src)
{
    json_object_update(dst, src);
    json_decref(src);
}

/* ---- why the best plan: runner-ups and the rules that decided ---- */

static const char *const why_field[PLAN_WHY_NDIMS] = {"tp", "pp", "cp", "micro_batch", "interleave",
                                                      "recompute", "zero", "layout"};
static const char *const layout_name[3] = {"one node group", "split by stage", "split by data"};

static json_t *why_value(int dim, int v)
{
    if (dim == PLAN_WHY_RC)
        return json_string(model_recompute_name((model_recompute)v));
    if (dim == PLAN_WHY_LAYOUT)
        return json_string(layout_name[v]);
    return json_integer(v);
}

static int fix_of(const plan_fix *f, int dim)
{
    switch (dim) {
    case PLAN_WHY_TP: return f->tp;
    case PLAN_WHY_PP: return f->pp;
    case PLAN_WHY_CP: return f->cp;
    case PLAN_WHY_MB: return f->micro_batch;
    case PLAN_WHY_VP: return f->interleave;
    case PLAN_WHY_RC: return f->recompute;
    case PLAN_WHY_ZERO: return f->zero;
    default: return -1;
    }
}

#define PLAN_TIE_RULE                                                                              \
    "a tie on the predicted step: the plan found first is kept (tp from large to small, then cp, "  \
    "micro-batch, pp from small to large)"

static double rel(double a, double b) { return round((a / b - 1) * 1e4) / 1e4; }

/* Why no other value of a field came second: pinned, a dominance rule of
 * the search, memory, or nothing else applied. */
static void why_alone(char *buf, size_t len, const model_ctx *ctx, const plan_fix *f,
                      const plan_why *w, int dim, int v0)
{
    long unfit = 0;
    for (int v = 0; v < PLAN_WHY_VALUES; v++)
        if (v != v0)
            unfit += w->unfit[dim][v];
    if (fix_of(f, dim) >= 0)
        snprintf(buf, len, "pinned by --fix");
    else if (dim == PLAN_WHY_RC && !unfit)
        snprintf(buf, len, "a costlier recompute mode only adds time, so none is tried once a"
                           " cheaper one fits%s", ctx->train->flash_attention
                               ? " (selective equals none with flash attention)" : "");
    else if (dim == PLAN_WHY_ZERO && v0 <= 1 && !unfit)
        snprintf(buf, len, "ZeRO 2 and 3 only add traffic over ZeRO 1: tried only when 0 and 1"
                           " do not fit");
    else if (unfit)
        snprintf(buf, len, "the %ld plans evaluated with another value did not fit in memory",
                 unfit);
    else
        snprintf(buf, len, "no other value applies (divisibility, devices per node, layers), or"
                           " its layouts were cut by the lower bound (never faster than this)");
}

static json_t *why_json(const model_ctx *ctx, const plan_fix *f, const plan_stats *st,
                        const plan_candidate *best)
{
    const plan_why *w = &st->why;
    const topo_cluster *c = ctx->cluster;
    double t0 = best->res.step_s;
    char rule[512];
    snprintf(rule, sizeof rule, "the fastest predicted step of the plans that fit in memory (%ld"
             " evaluated, %ld did not fit; %ld layouts cut because their lower bound was already"
             " slower than the plans kept)", st->evaluated, st->pruned_memory, st->pruned_bound);
    json_t *o = json_pack("{s:s}", "rule", rule);
    if (w->has_second) {
        json_t *ru = plan_candidate_json(c, &w->second);
        json_object_set_new(o, "runner_up", ru);
        json_object_set_new(o, "runner_up_vs_chosen", json_real(rel(w->second.res.step_s, t0)));
        if (!(w->second.res.step_s > t0))
            json_object_set_new(o, "tie", json_string(PLAN_TIE_RULE));
    }
    json_t *ch = json_array();
    for (int d = 0; d < PLAN_WHY_NDIMS; d++) {
        int v0 = plan_why_value(&best->plan, d), ru = -1;
        for (int v = 0; v < PLAN_WHY_VALUES; v++)
            if (v != v0 && isfinite(w->best_s[d][v]) && (ru < 0 || w->best_s[d][v] < w->best_s[d][ru]))
                ru = v;
        json_t *e = json_pack("{s:s, s:o}", "field", why_field[d], "chosen", why_value(d, v0));
        if (ru >= 0) {
            json_object_set_new(e, "runner_up", why_value(d, ru));
            json_object_set_new(e, "runner_up_step_time_s", json_real(round(w->best_s[d][ru] * 1e4) / 1e4));
            json_object_set_new(e, "runner_up_vs_chosen", json_real(rel(w->best_s[d][ru], t0)));
            json_object_set_new(e, "rule", json_string(w->best_s[d][ru] > t0
                                                           ? "the fastest predicted step"
                                                           : PLAN_TIE_RULE));
        } else {
            why_alone(rule, sizeof rule, ctx, f, w, d, v0);
            json_object_set_new(e, "rule", json_string(rule));
        }
        json_array_append_new(ch, e);
    }
    /* the two fields the search derives rather than compares */
    const model_plan *bp = &best->plan;
    int dp = 0;
    for (int k = 0; k < bp->nsets; k++)
        dp += bp->sets[k].dp;
    json_array_append_new(
        ch, json_pack("{s:s, s:i, s:s}", "field", "dp", "chosen", dp, "rule",
                      f->dp > 0 ? "pinned by --fix"
                      : bp->nsets > 1
                          ? "per node group the replicas its devices hold (tp x cp x pp each);"
                            " micro-batches split between them by finishing time"
                      : bp->sets[0].nsegs > 1
                          ? "every dp dividing the global batch into micro-batches was tried,"
                            " each node group hosting the stages its devices hold: the fastest"
                          : "the largest that the devices left by tp x cp x pp hold, that"
                            " divides the global batch into micro-batches and tiles the nodes"));
    int sp = bp->sequence_parallel && bp->tp > 1;
    json_array_append_new(
        ch, json_pack("{s:s, s:b, s:s}", "field", "sequence_parallel", "chosen", sp, "rule",
                      f->sequence_parallel >= 0 ? "pinned by --fix"
                      : bp->tp == 1 ? "tp = 1: nothing to split"
                                    : "never costs time in the model (the same traffic, less"
                                      " memory and elementwise work): on with tp > 1 unless"
                                      " pinned off"));
    json_object_set_new(o, "choices", ch);
    /* node groups the best plan leaves idle */
    unsigned long long used = 0;
    for (int k = 0; k < best->plan.nsets; k++)
        for (int j = 0; j < best->plan.sets[k].nsegs; j++)
            used |= 1ULL << (best->plan.sets[k].seg_pool[j] & 63);
    json_t *idle = json_array();
    for (int g = 0; g < c->npools && g < PLAN_WHY_POOLS; g++) {
        if (used >> g & 1)
            continue;
        const topo_pool *po = &c->pools[g];
        if (po->device.peak_tflops[ctx->train->precision] <= 0)
            snprintf(rule, sizeof rule, "its devices (%s) have no %s peak: no plan can use them",
                     po->device.name, topo_precision_name(ctx->train->precision));
        else if (isfinite(w->pool_best_s[g]))
            snprintf(rule, sizeof rule, "the fastest plan using it predicts %.4g s, %.1f%% slower",
                     w->pool_best_s[g], 100 * (w->pool_best_s[g] / t0 - 1));
        else if (w->pool_unfit[g])
            snprintf(rule, sizeof rule, "the %ld plans using it did not fit in memory",
                     w->pool_unfit[g]);
        else
            snprintf(rule, sizeof rule, "no plan using it was evaluated: cut by the lower bound"
                                        " (never faster than this) or no layout applies");
        json_t *e = json_pack("{s:s, s:i, s:s}", "node_group", po->name, "devices",
                              po->nodes * po->devices_per_node, "reason", rule);
        if (isfinite(w->pool_best_s[g]))
            json_object_set_new(e, "best_step_time_s_using_it", json_real(round(w->pool_best_s[g] * 1e4) / 1e4));
        json_array_append_new(idle, e);
    }
    json_object_set_new(o, "idle_node_groups", idle);
    return o;
}

/* ---- baselines: the speedup against each and where it comes from ---- */

static const char *const bd_keys[] = {"compute_s", "recompute_s", "tp_comm_s", "cp_comm_s",
                                      "pp_comm_s", "dp_comm_s", "bubble_s", "optimizer_s"};

static void bd_values(const model_result *r, double v[8])
{
    v[0] = r->compute_s;
    v[1] = r->recompute_s;
    v[2] = r->tp_comm_s;
    v[3] = r->cp_comm_s;
    v[4] = r->pp_comm_s;
    v[5] = r->dp_comm_s;
    v[6] = r->bubble_s;
    v[7] = r->optimizer_s;
}

/* One baseline's entry: its candidate, the speedup of the best plan over
 * it, the step-time terms it loses (baseline minus best, largest first:
 * they sum to the difference) and the plan fields that differ. */
static json_t *baseline_entry(const char *name, const char *assumes, const topo_cluster *c,
                              const plan_candidate *b, const plan_candidate *best)
{
    json_t *e = plan_candidate_json(c, b);
    if (!e)
        return NULL;
    json_t *head = json_pack("{s:s, s:s, s:f}", "name", name, "assumes", assumes, "speedup",
                             round(b->res.step_s / best->res.step_s * 1e4) / 1e4);
    json_object_update(head, e);
    json_decref(e);
    double vb[8], vs[8], d[8];
    int ord[8];
    bd_values(&b->res, vb);
    bd_values(&best->res, vs);
    for (int k = 0; k < 8; k++) {
        d[k] = vb[k] - vs[k];
        ord[k] = k;
    }
    for (int i = 1; i < 8; i++) /* by |difference|, largest first */
        for (int j = i; j > 0 && fabs(d[ord[j]]) > fabs(d[ord[j - 1]]); j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    json_t *from = json_array();
    for (int i = 0; i < 8; i++)
        if (fabs(d[ord[i]]) >= 5e-5)
            json_array_append_new(from, json_pack("{s:s, s:f, s:f, s:f}", "term", bd_keys[ord[i]],
                                                  "baseline_s", round(vb[ord[i]] * 1e4) / 1e4,
                                                  "best_s", round(vs[ord[i]] * 1e4) / 1e4,
                                                  "saved_s", round(d[ord[i]] * 1e4) / 1e4));
    json_object_set_new(head, "from", from);
    const model_plan *pb = &b->plan, *ps = &best->plan;
    int dpb = 0, dps = 0;
    for (int k = 0; k < pb->nsets; k++)
        dpb += pb->sets[k].dp;
    for (int k = 0; k < ps->nsets; k++)
        dps += ps->sets[k].dp;
    json_t *ch = json_array();
    char buf[96];
    const char *fn[] = {"tp", "pp", "dp", "cp", "micro_batch", "interleave", "zero", "devices"};
    int fb[] = {pb->tp, pb->pp, dpb, pb->cp, pb->micro_batch, pb->interleave, pb->zero, b->res.devices};
    int fs[] = {ps->tp, ps->pp, dps, ps->cp, ps->micro_batch, ps->interleave, ps->zero,
                best->res.devices};
    for (int k = 0; k < 8; k++)
        if (fb[k] != fs[k]) {
            snprintf(buf, sizeof buf, "%s %d -> %d", fn[k], fb[k], fs[k]);
            json_array_append_new(ch, json_string(buf));
        }
    if (pb->recompute != ps->recompute) {
        snprintf(buf, sizeof buf, "recompute %s -> %s", model_recompute_name(pb->recompute),
                 model_recompute_name(ps->recompute));
        json_array_append_new(ch, json_string(buf));
    }
    if ((pb->nsets > 1 || pb->sets[0].nsegs > 1) != (ps->nsets > 1 || ps->sets[0].nsegs > 1) ||
        ps->nsets > 1) {
        snprintf(buf, sizeof buf, "layout: %s", ps->nsets > 1 ? "micro-batches split by data"
                                                : ps->sets[0].nsegs > 1 ? "stages split by node group"
                                                                        : "one node group");
        json_array_append_new(ch, json_string(buf));
    }
    json_object_set_new(head, "plan_changes", ch);
    return head;
}

static json_t *baseline_failed(const char *name, const char *assumes)
{
    return json_pack("{s:s, s:s, s:s}", "name", name, "assumes", assumes, "error", ai_last_error());
}

static json_t *baselines_json(const model_ctx *ctx, int which, const topo_cluster *c,
                              const plan_candidate *best, const plan_candidate *manual,
                              const topo_cluster *manual_cl, const char *manual_err)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    static const char *const a_manual = "rule of thumb (tp = node, smallest power-of-two pp with"
                                        " full recompute, micro-batch 1, ZeRO-1), every device"
                                        " the slowest present";
    static const char *const a_homo = "this planner's search with every device the slowest"
                                      " present";
    static const char *const a_fast = "published practice (tp = node, selective recompute + sequence"
                                      " parallelism, ZeRO-1, interleaved pipeline, largest"
                                      " micro-batch that fits) on the fastest node group alone";
    static const char *const a_whole = "published practice (as above) on the whole cluster, every"
                                       " device the slowest present";
    if (manual)
        json_array_append_new(arr, baseline_entry("manual", a_manual, manual_cl, manual, best));
    else if (manual_err[0])
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "name", "manual", "assumes",
                                             a_manual, "error", manual_err));
    plan_candidate b;
    topo_cluster *cl = NULL;
    if (which & AI_PLAN_BASELINE_HOMOGENEOUS) {
        if (plan_homogeneous_baseline(ctx, &b, &cl) == AI_OK)
            json_array_append_new(arr, baseline_entry("homogeneous", a_homo, cl, &b, best));
        else
            json_array_append_new(arr, baseline_failed("homogeneous", a_homo));
        topo_cluster_free(cl);
        cl = NULL;
        util_clear_error();
    }
    if (which & AI_PLAN_BASELINE_EXPERT) {
        for (int whole = 0; whole < 2; whole++) {
            const char *nm = whole ? "expert (whole cluster)" : "expert (fastest node group)";
            const char *as = whole ? a_whole : a_fast;
            if (plan_expert_baseline(ctx, !whole, &b, &cl) == AI_OK)
                json_array_append_new(arr, baseline_entry(nm, as, cl, &b, best));
            else
                json_array_append_new(arr, baseline_failed(nm, as));
            topo_cluster_free(cl);
            cl = NULL;
            util_clear_error();
        }
    }
    return arr;
}

ai_status_t ai_plan(const ai_cluster *cluster, const ai_model_spec *model, const ai_training *training,
                    const ai_plan_options *opts, ai_plan_report **out)
{
    if (!cluster || !model || !training || !out)
        return util_fail(AI_ERR_INVALID, "ai_plan: NULL argument");
    ai_plan_options o = {NULL, 1, 0};
    if (opts)
        o = *opts;
    plan_fix fix;
    ai_status_t st = plan_fix_parse(o.fix, &fix);
    if (st != AI_OK)
        return st;
    model_ctx ctx = {cluster->c, &model->m, &training->t, model_params_fitted};
    plan_candidate *best = NULL, base;
    topo_cluster *slow = NULL;
    int n = 0;
    plan_stats stats;
    ai_plan_report *rep = calloc(1, sizeof *rep);
    if (!rep)
        return util_fail(AI_ERR_NOMEM, "plan report");
    st = plan_search(&ctx, &fix, AI_MAX(1, o.top), &best, &n, &stats);
    /* Everything pinned: that is an evaluation, not a search, so report the
     * plan even when it does not fit (feasible = false). */
    int pinned_all = fix.tp > 0 && fix.pp > 0 && fix.dp > 0 && fix.cp > 0 && fix.micro_batch > 0 &&
                     fix.interleave > 0 && fix.recompute >= 0 && fix.zero >= 0;
    if (st == AI_ERR_INFEASIBLE && pinned_all && stats.has_closest) {
        best = malloc(sizeof *best);
        if (!best) {
            st = util_fail(AI_ERR_NOMEM, "plan report");
            goto err;
        }
        best[0] = stats.closest;
        n = 1;
        st = AI_OK;
    }
    if (st != AI_OK)
        goto err;
    /* the manual baseline alone fails the command when it cannot be
     * evaluated (as it always has); among others it is reported as such */
    char manual_err[256] = "";
    if ((o.baseline_manual & AI_PLAN_BASELINE_MANUAL) &&
        (st = plan_manual_baseline(&ctx, &base, &slow)) != AI_OK) {
        if (o.baseline_manual == AI_PLAN_BASELINE_MANUAL)
            goto err;
        snprintf(manual_err, sizeof manual_err, "%s", ai_last_error());
        util_clear_error();
        slow = NULL;
        st = AI_OK;
    }
    rep->n = n;
    rep->sum = calloc((size_t)n, sizeof *rep->sum);
    rep->doc = json_pack("{s:s, s:s, s:i}", "cluster", cluster->c->name, "model", model->m.name, "devices",
                         cluster->c->devices);
    json_t *alts = json_array();
    if (!rep->sum || !rep->doc || !alts) {
        json_decref(alts);
        st = util_fail(AI_ERR_NOMEM, "plan report");
        goto err;
    }
    json_merge(rep->doc, plan_candidate_json(cluster->c, &best[0]));
    if (training->t.tokens > 0)
        json_object_set_new(rep->doc, "time_to_train_days",
                            json_real(round(training->t.tokens / best[0].res.tokens_per_s / 86400 * 100) / 100));
    for (int i = 0; i < n; i++) {
        summary_of(&best[i], &rep->sum[i]);
        if (i > 0)
            json_array_append_new(alts, plan_candidate_json(cluster->c, &best[i]));
    }
    if (n > 1)
        json_object_set_new(rep->doc, "alternatives", alts);
    else
        json_decref(alts);
    if (slow) {
        json_t *b = plan_candidate_json(slow, &base);
        json_object_set_new(b, "assumes", json_string("every device is the slowest present"));
        if (training->t.tokens > 0)
            json_object_set_new(b, "time_to_train_days",
                                json_real(round(training->t.tokens / base.res.tokens_per_s / 86400 * 100) / 100));
        json_object_set_new(rep->doc, "baseline", b);
        double speedup = base.res.step_s / best[0].res.step_s;
        json_object_set_new(rep->doc, "speedup_vs_baseline", json_real(round(speedup * 1e4) / 1e4));
        for (int i = 0; i < n; i++) {
            rep->sum[i].baseline_step_time_s = base.res.step_s;
            rep->sum[i].speedup_vs_baseline = base.res.step_s / best[i].res.step_s;
        }
    }
    if (best[0].res.feasible)
        json_object_set_new(rep->doc, "why", why_json(&ctx, &fix, &stats, &best[0]));
    if (o.baseline_manual & ~AI_PLAN_BASELINE_MANUAL) {
        json_t *bl = baselines_json(&ctx, o.baseline_manual, cluster->c, &best[0],
                                    slow ? &base : NULL, slow, manual_err);
        if (!bl) {
            st = util_fail(AI_ERR_NOMEM, "plan report");
            goto err;
        }
        json_object_set_new(rep->doc, "baselines", bl);
        /* the summary's baseline: the manual one, else the first evaluated */
        json_t *first = json_array_get(bl, 0);
        if (!slow && json_object_get(first, "step_time_s"))
            for (int i = 0; i < n; i++) {
                rep->sum[i].baseline_step_time_s =
                    json_number_value(json_object_get(first, "step_time_s"));
                rep->sum[i].speedup_vs_baseline =
                    rep->sum[i].baseline_step_time_s / best[i].res.step_s;
            }
    }
    json_object_set_new(rep->doc, "search",
                        json_pack("{s:I, s:I, s:I, s:f}", "evaluated", (json_int_t)stats.evaluated,
                                  "pruned_memory", (json_int_t)stats.pruned_memory, "pruned_bound",
                                  (json_int_t)stats.pruned_bound, "seconds",
                                  round(stats.seconds * 1e4) / 1e4));
    topo_cluster_free(slow);
    free(best);
    *out = rep;
    return AI_OK;
err:
    topo_cluster_free(slow);
    free(best);
    ai_plan_report_destroy(rep);
    return st;
}

void ai_plan_report_destroy(ai_plan_report *report)
{
    if (!report)
        return;
    json_decref(report->doc);
    free(report->sum);
    free(report);
}

int ai_plan_report_count(const ai_plan_report *report) { return report ? report->n : 0; }

ai_status_t ai_plan_report_summary(const ai_plan_report *report, int index, ai_plan_summary *out)
{
    if (!report || index < 0 || index >= report->n)
        return util_fail(AI_ERR_INVALID, "plan report has no entry %d", index);
    *out = report->sum[index];
    return AI_OK;
}

ai_status_t ai_plan_report_json(const ai_plan_report *report, char **out)
{
    char *s = json_dumps(report->doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    if (!s)
        return util_fail(AI_ERR_NOMEM, "plan report JSON");
    *out = s;
    return AI_OK;
}

/* ---- text rendering ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = AI_MAX(b->cap * 2, b->len + (size_t)n + 256);
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void text_plan(sbuf *b, const char *title, json_t *c)
{
    json_t *p = json_object_get(c, "plan");
    sb_printf(b, "%s\n", title);
    sb_printf(b, "  plan        tp=%d pp=%d dp=%d cp=%d micro_batch=%d interleave=%d recompute=%s "
                 "sequence_parallel=%s zero=%d\n",
              (int)num(p, "tp"), (int)num(p, "pp"), (int)num(p, "dp"), (int)num(p, "cp"),
              (int)num(p, "micro_batch"), (int)num(p, "interleave"),
              json_string_value(json_object_get(p, "recompute")),
              json_is_true(json_object_get(p, "sequence_parallel")) ? "true" : "false", (int)num(p, "zero"));
    json_t *stages = json_object_get(p, "stages");
    sb_printf(b, "  stages     ");
    size_t n = json_array_size(stages);
    for (size_t i = 0; i < n;) {
        json_t *s = json_array_get(stages, i);
        size_t j = i + 1;
        while (j < n && json_equal(json_array_get(stages, j), s))
            j++;
        sb_printf(b, " %s%zux[%s %d dev %d layers]", i ? "+ " : "", j - i,
                  json_string_value(json_object_get(s, "node_group")), (int)num(s, "devices"),
                  (int)num(s, "layers"));
        i = j;
    }
    sb_printf(b, "\n");
    json_t *ds = json_object_get(p, "data_split");
    for (size_t i = 0; i < json_array_size(ds); i++) {
        json_t *d = json_array_get(ds, i);
        sb_printf(b, "  data split  %s: %d replicas x %d micro-batches (%d sequences)\n",
                  json_string_value(json_object_get(d, "node_group")), (int)num(d, "replicas"),
                  (int)num(d, "micro_batches_per_replica"), (int)num(d, "sequences"));
    }
    sb_printf(b, "  step time   %.4g s   tokens/s %.4g   devices %d\n", num(c, "step_time_s"),
              num(c, "tokens_per_s"), (int)num(c, "devices"));
    sb_printf(b, "  TFLOP/s     model %.1f  hardware %.1f per device   MFU %.1f%%\n",
              num(c, "model_tflops_per_device"), num(c, "hw_tflops_per_device"), 100 * num(c, "mfu"));
    sb_printf(b, "  memory      %.1f GB per device (usable %.1f GB)\n", num(c, "memory_GB_per_device"),
              num(c, "memory_usable_GB"));
    if (json_object_get(c, "time_to_train_days"))
        sb_printf(b, "  time to train  %.1f days\n", num(c, "time_to_train_days"));
    json_t *bd = json_object_get(c, "breakdown");
    sb_printf(b, "  breakdown  ");
    const char *key;
    json_t *v;
    json_object_foreach(bd, key, v)
    {
        char name[32];
        snprintf(name, sizeof name, "%s", key);
        char *u = strstr(name, "_s");
        if (u)
            *u = '\0';
        sb_printf(b, " %s %.3g", name, json_number_value(v));
    }
    sb_printf(b, "  (s)\n");
}

ai_status_t ai_plan_report_text(const ai_plan_report *report, char **out)
{
    sbuf b = {0};
    json_t *d = report->doc;
    char title[256];
    snprintf(title, sizeof title, "%s for %s on %s (%d devices)",
             json_is_true(json_object_get(d, "feasible")) ? "best plan" : "pinned plan, DOES NOT FIT in memory,",
             json_string_value(json_object_get(d, "model")), json_string_value(json_object_get(d, "cluster")),
             (int)num(d, "devices"));
    text_plan(&b, title, d);
    json_t *alts = json_object_get(d, "alternatives");
    for (size_t i = 0; i < json_array_size(alts); i++) {
        snprintf(title, sizeof title, "alternative %zu", i + 2);
        text_plan(&b, title, json_array_get(alts, i));
    }
    json_t *base = json_object_get(d, "baseline");
    if (base) {
        text_plan(&b, "manual baseline (every device taken as the slowest)", base);
        sb_printf(&b, "speedup vs baseline: %.2fx\n", num(d, "speedup_vs_baseline"));
    }
    json_t *bls = json_object_get(d, "baselines");
    for (size_t i = 0; i < json_array_size(bls); i++) {
        json_t *e = json_array_get(bls, i);
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (!strcmp(nm, "manual") && !json_object_get(e, "error"))
            continue; /* printed above */
        char t2[512];
        snprintf(t2, sizeof t2, "%s baseline: %s", nm,
                 json_string_value(json_object_get(e, "assumes")));
        if (json_object_get(e, "error")) {
            sb_printf(&b, "%s\n  not evaluated: %s\n", t2,
                      json_string_value(json_object_get(e, "error")));
            continue;
        }
        text_plan(&b, t2, e);
    }
    for (size_t i = 0; i < json_array_size(bls); i++) {
        json_t *e = json_array_get(bls, i);
        if (json_object_get(e, "error"))
            continue;
        sb_printf(&b, "speedup vs %s baseline: %.2fx; from (baseline - best):",
                  json_string_value(json_object_get(e, "name")), num(e, "speedup"));
        json_t *from = json_object_get(e, "from");
        for (size_t k = 0; k < json_array_size(from); k++) {
            json_t *f = json_array_get(from, k);
            char name[32];
            snprintf(name, sizeof name, "%s", json_string_value(json_object_get(f, "term")));
            char *u = strstr(name, "_s");
            if (u)
                *u = '\0';
            sb_printf(&b, "%s %s %+.3g s", k ? "," : "", name, num(f, "saved_s"));
        }
        json_t *ch = json_object_get(e, "plan_changes");
        sb_printf(&b, "; plan:");
        for (size_t k = 0; k < json_array_size(ch); k++)
            sb_printf(&b, "%s %s", k ? "," : "", json_string_value(json_array_get(ch, k)));
        sb_printf(&b, "\n");
    }
    json_t *why = json_object_get(d, "why");
    if (why) {
        sb_printf(&b, "why: %s\n", json_string_value(json_object_get(why, "rule")));
        json_t *ru = json_object_get(why, "runner_up");
        if (ru) {
            json_t *p = json_object_get(ru, "plan");
            sb_printf(&b, "  runner-up plan tp=%d pp=%d dp=%d cp=%d micro_batch=%d interleave=%d"
                          " recompute=%s zero=%d: %.4g s (%+.2f%%)\n",
                      (int)num(p, "tp"), (int)num(p, "pp"), (int)num(p, "dp"), (int)num(p, "cp"),
                      (int)num(p, "micro_batch"), (int)num(p, "interleave"),
                      json_string_value(json_object_get(p, "recompute")), (int)num(p, "zero"),
                      num(ru, "step_time_s"), 100 * num(why, "runner_up_vs_chosen"));
            if (json_object_get(why, "tie"))
                sb_printf(&b, "  %s\n", json_string_value(json_object_get(why, "tie")));
        }
        json_t *ch = json_object_get(why, "choices");
        for (size_t i = 0; i < json_array_size(ch); i++) {
            json_t *e = json_array_get(ch, i), *v = json_object_get(e, "chosen");
            char val[64], rv[64];
            if (json_is_string(v))
                snprintf(val, sizeof val, "%s", json_string_value(v));
            else if (json_is_boolean(v))
                snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "false");
            else
                snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
            sb_printf(&b, "  %-17s %-15s", json_string_value(json_object_get(e, "field")), val);
            json_t *r = json_object_get(e, "runner_up");
            if (r) {
                if (json_is_string(r))
                    snprintf(rv, sizeof rv, "%s", json_string_value(r));
                else
                    snprintf(rv, sizeof rv, "%lld", (long long)json_integer_value(r));
                sb_printf(&b, " runner-up %s: %.4g s (%+.2f%%); ", rv,
                          num(e, "runner_up_step_time_s"), 100 * num(e, "runner_up_vs_chosen"));
            } else {
                sb_printf(&b, " ");
            }
            sb_printf(&b, "%s\n", json_string_value(json_object_get(e, "rule")));
        }
        json_t *idle = json_object_get(why, "idle_node_groups");
        for (size_t i = 0; i < json_array_size(idle); i++) {
            json_t *e = json_array_get(idle, i);
            sb_printf(&b, "  idle node group %s (%d devices): %s\n",
                      json_string_value(json_object_get(e, "node_group")), (int)num(e, "devices"),
                      json_string_value(json_object_get(e, "reason")));
        }
    }
    json_t *s = json_object_get(d, "search");
    sb_printf(&b, "search: %lld plans evaluated, %lld did not fit in memory, %lld layouts cut by the "
                  "lower bound, %.3f s\n",
              (long long)json_integer_value(json_object_get(s, "evaluated")),
              (long long)json_integer_value(json_object_get(s, "pruned_memory")),
              (long long)json_integer_value(json_object_get(s, "pruned_bound")), num(s, "seconds"));
    if (b.oom) {
        free(b.p);
        return util_fail(AI_ERR_NOMEM, "plan report text");
    }
    *out = b.p;
    return AI_OK;
}

/* ------------------------------------------------------------ fidelity */

ai_status_t ai_model_fidelity(const char *calib_dir, int refit, const char *holdout, int as_json,
                              char **out)
{
    if (refit && holdout && !strcmp(holdout, "all"))
        return model_loso_report(calib_dir, as_json, out);
    model_calib *c;
    ai_status_t st = model_calib_load(calib_dir, &c);
    if (st != AI_OK)
        return st;
    model_params p = model_params_fitted;
    double loss = NAN;
    if (holdout && !refit) {
        model_calib_free(c);
        return util_fail(AI_ERR_INVALID, "a holdout only makes sense when refitting");
    }
    if (refit) {
        /* Fit on the rows of the other sources: a shallow view of c. */
        model_calib train = *c;
        train.rows = calloc((size_t)c->nrows, sizeof *train.rows);
        if (!train.rows) {
            model_calib_free(c);
            return util_fail(AI_ERR_NOMEM, "fit");
        }
        train.nrows = 0;
        for (int i = 0; i < c->nrows; i++)
            if (!holdout || strcmp(c->rows[i].source, holdout) != 0)
                train.rows[train.nrows++] = c->rows[i];
        if (train.nrows == c->nrows && holdout)
            st = util_fail(AI_ERR_NOTFOUND, "no calibration source named '%s'", holdout);
        else
            st = model_fit(&train, &model_params_fitted, &p, &loss);
        free(train.rows);
        if (st != AI_OK) {
            model_calib_free(c);
            return st;
        }
    }
    json_t *doc = json_object();
    json_t *params = json_object(), *rows = json_array(), *mem = json_array();
    for (int i = 0; i < MODEL_NPARAMS; i++)
        json_object_set_new(params, model_param_names[i], json_real(*model_params_slot(&p, i)));
    double mape = 0, maxe = 0, ho_mape = 0;
    int ho_n = 0;
    for (int i = 0; i < c->nrows; i++) {
        const model_calib_row *r = &c->rows[i];
        model_ctx ctx = {r->cluster, &r->model, &r->train, p};
        model_result res;
        model_plan_eval(&ctx, &r->plan, &res);
        double pred = model_calib_value(r, &res);
        double e = 100 * (pred / r->published - 1);
        mape += fabs(e) / c->nrows;
        maxe = AI_MAX(maxe, fabs(e));
        int held = holdout && strcmp(r->source, holdout) == 0;
        if (held) {
            ho_mape += fabs(e);
            ho_n++;
        }
        json_array_append_new(rows, json_pack("{s:s, s:s, s:b, s:s, s:f, s:f, s:f, s:f, s:f, s:f}", "source",
                                              r->source, "row", r->name, "held_out", held, "unit",
                                              model_metric_unit(r->metric),
                                              "published", r->published, "predicted", pred, "error_pct", e,
                                              "step_time_s", res.step_s, "model_tflops_per_device",
                                              res.model_tflops_per_device, "hw_tflops_per_device",
                                              res.hw_tflops_per_device));
    }
    double mem_mape = 0, mem_max = 0;
    const double GiB = 1024.0 * 1024 * 1024;
    for (int i = 0; i < c->nmem; i++) {
        model_ctx ctx = {c->mem[i].cluster, &c->mem[i].model, &c->mem[i].train, p};
        double pb, ab;
        model_stage_memory(&ctx, &c->mem[i].plan, 0, c->mem[i].plan.sets[0].micro_batches, &pb, &ab);
        double ep = 100 * (pb / GiB / c->mem[i].params_GiB - 1), ea = 100 * (ab / GiB / c->mem[i].act_GiB - 1);
        mem_mape += (fabs(ep) + fabs(ea)) / (2 * c->nmem);
        mem_max = AI_MAX(mem_max, AI_MAX(fabs(ep), fabs(ea)));
        json_array_append_new(mem, json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:f}", "row", c->mem[i].name,
                                             "params_GiB_published", c->mem[i].params_GiB, "params_GiB_predicted",
                                             pb / GiB, "params_error_pct", ep, "activations_GiB_published",
                                             c->mem[i].act_GiB, "activations_GiB_predicted", ab / GiB,
                                             "activations_error_pct", ea));
    }
    json_object_set_new(doc, "params", params);
    json_object_set_new(doc, "refitted", json_boolean(refit));
    if (refit)
        json_object_set_new(doc, "fit_loss", json_real(loss));
    json_object_set_new(doc, "rows", rows);
    json_object_set_new(doc, "mape_pct", json_real(mape));
    json_object_set_new(doc, "max_abs_error_pct", json_real(maxe));
    if (holdout) {
        json_object_set_new(doc, "held_out_source", json_string(holdout));
        json_object_set_new(doc, "held_out_mape_pct", json_real(ho_n ? ho_mape / ho_n : 0));
    }
    json_object_set_new(doc, "memory", mem);
    json_object_set_new(doc, "memory_mape_pct", json_real(mem_mape));
    json_object_set_new(doc, "memory_max_abs_error_pct", json_real(mem_max));
    model_calib_free(c);

    char *s = NULL;
    if (as_json) {
        s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8));
    } else {
        sbuf b = {0};
        sb_printf(&b, "parameters%s%s%s:\n", refit ? " (refitted" : " (shipped)",
                  holdout ? " without " : "", refit ? (holdout ? holdout : ")") : "");
        if (holdout)
            sb_printf(&b, ")\n");
        for (int i = 0; i < MODEL_NPARAMS; i++)
            sb_printf(&b, "  %-14s %.6g%s\n", model_param_names[i], *model_params_slot(&p, i),
                      model_param_fitted[i] ? "" : "  (prior, not fitted)");
        sb_printf(&b, "\n%-20s %-20s %12s %12s %8s %10s %10s\n", "source", "row", "published", "predicted",
                  "error", "model TF/s", "hw TF/s");
        for (size_t i = 0; i < json_array_size(rows); i++) {
            json_t *r = json_array_get(rows, i);
            sb_printf(&b, "%-20s %-20s %12.2f %12.2f %+7.1f%% %10.1f %10.1f%s\n",
                      json_string_value(json_object_get(r, "source")), json_string_value(json_object_get(r, "row")),
                      num(r, "published"), num(r, "predicted"), num(r, "error_pct"),
                      num(r, "model_tflops_per_device"), num(r, "hw_tflops_per_device"),
                      json_is_true(json_object_get(r, "held_out")) ? "  (held out)" : "");
        }
        sb_printf(&b, "time/throughput MAPE %.2f%%, max |error| %.2f%%\n", mape, maxe);
        if (holdout)
            sb_printf(&b, "held-out rows (%s) MAPE %.2f%%\n", holdout, ho_n ? ho_mape / ho_n : 0);
        sb_printf(&b, "\n");
        sb_printf(&b, "%-22s %10s %10s %8s %10s %10s %8s\n", "memory row (GiB)", "params", "predicted", "error",
                  "activ.", "predicted", "error");
        for (size_t i = 0; i < json_array_size(mem); i++) {
            json_t *r = json_array_get(mem, i);
            sb_printf(&b, "%-22s %10.2f %10.2f %+7.1f%% %10.2f %10.2f %+7.1f%%\n",
                      json_string_value(json_object_get(r, "row")), num(r, "params_GiB_published"),
                      num(r, "params_GiB_predicted"), num(r, "params_error_pct"), num(r, "activations_GiB_published"),
                      num(r, "activations_GiB_predicted"), num(r, "activations_error_pct"));
        }
        sb_printf(&b, "memory MAPE %.2f%%, max |error| %.2f%%\n", mem_mape, mem_max);
        if (b.oom)
            free(b.p);
        else
            s = b.p;
    }
    json_decref(doc);
    if (!s)
        return util_fail(AI_ERR_NOMEM, "fidelity report");
    *out = s;
    return AI_OK;
}
