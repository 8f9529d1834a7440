/*
 * The manual baseline: what a careful engineer does by rule of thumb
 * (docs/planner.md, "The manual baseline"). Tensor parallelism fills a
 * node, pipeline parallelism is the smallest power of two that fits with
 * full recompute and a uniform layer split, data parallelism takes the
 * rest; micro-batch 1, ZeRO-1 (distributed optimizer), no sequence
 * parallelism, no interleaving. On a mixed cluster every device is taken
 * to be the slowest present: one pool with the smallest peak, memory, HBM
 * and link bandwidths of all pools.
 */
#include "plan/spec/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cluster of one pool: `devices` devices of `p`, whose nodes have the
 * NIC share net_share GB/s per device. */
static ai_status_t one_pool_cluster(const char *name, const topo_pool *p, int devices,
                                    double net_share, topo_cluster **out)
{
    double net_node = net_share * p->devices_per_node;
    json_t *doc = json_pack(
        "{s:s, s:[{s:s, s:i, s:{s:s, s:{s:f, s:f, s:f, s:f}, s:f, s:f, s:{s:f, s:f, s:f, s:f}}, s:i, s:{s:f, s:f}, "
        "s:{s:i, s:f, s:f}}]}",
        "name", name, "node_groups", "name", name, "count", devices / p->devices_per_node, "device",
        "name", p->device.name, "peak_tflops", "bf16", p->device.peak_tflops[TOPO_BF16], "fp16",
        p->device.peak_tflops[TOPO_FP16], "fp8", p->device.peak_tflops[TOPO_FP8], "fp32",
        p->device.peak_tflops[TOPO_FP32], "memory_GB", p->device.memory_GB, "memory_bw_GBps",
        p->device.memory_bw_GBps, "gemm_eff", "bf16", topo_device_gemm_eff(&p->device, TOPO_BF16), "fp16",
        topo_device_gemm_eff(&p->device, TOPO_FP16), "fp8", topo_device_gemm_eff(&p->device, TOPO_FP8), "fp32",
        topo_device_gemm_eff(&p->device, TOPO_FP32), "devices_per_node", p->devices_per_node, "intra", "bw_GBps",
        p->intra_bw_GBps, "latency_us", p->intra_latency_us, "nic", "count", 1, "bw_Gbps",
        net_node * 8, "latency_us", p->net_latency_us);
    if (!doc)
        return util_fail(AI_ERR_NOMEM, "baseline cluster");
    char what[96];
    snprintf(what, sizeof what, "(%s cluster)", name);
    ai_status_t st = topo_cluster_from_json(doc, what, out);
    json_decref(doc);
    return st;
}

static ai_status_t slowest_cluster(const topo_cluster *c, const topo_training *t, topo_cluster **out)
{
    topo_pool slow = c->pools[0];
    double net_share = INFINITY;
    /* The slowest device's GEMMs: the least achieved throughput of any
     * pool, per precision, over the least peak. */
    double achieved[TOPO_PREC_COUNT];
    for (int k = 0; k < TOPO_PREC_COUNT; k++)
        achieved[k] = INFINITY;
    for (int g = 0; g < c->npools; g++) {
        const topo_pool *p = &c->pools[g];
        for (int k = 0; k < TOPO_PREC_COUNT; k++)
        {
            slow.device.peak_tflops[k] = AI_MIN(slow.device.peak_tflops[k], p->device.peak_tflops[k]);
            achieved[k] = AI_MIN(achieved[k], p->device.peak_tflops[k] * topo_device_gemm_eff(&p->device, k));
        }
        slow.device.memory_GB = AI_MIN(slow.device.memory_GB, p->device.memory_GB);
        slow.device.memory_bw_GBps = AI_MIN(slow.device.memory_bw_GBps, p->device.memory_bw_GBps);
        slow.intra_bw_GBps = AI_MIN(slow.intra_bw_GBps, p->intra_bw_GBps);
        slow.intra_latency_us = AI_MAX(slow.intra_latency_us, p->intra_latency_us);
        slow.net_latency_us = AI_MAX(slow.net_latency_us, p->net_latency_us);
        slow.devices_per_node = AI_MIN(slow.devices_per_node, p->devices_per_node);
        net_share = AI_MIN(net_share, p->node_net_GBps / p->devices_per_node);
    }
    for (int k = 0; k < TOPO_PREC_COUNT; k++)
        slow.device.gemm_eff[k] = slow.device.peak_tflops[k] > 0 ? AI_MIN(1, achieved[k] / slow.device.peak_tflops[k]) : 0;
    if (slow.device.peak_tflops[t->precision] <= 0)
        return util_fail(AI_ERR_UNSUPPORTED, "baseline: some device has no %s peak",
                         topo_precision_name(t->precision));
    double net_node = net_share * slow.devices_per_node;
    json_t *doc = json_pack(
        "{s:s, s:[{s:s, s:i, s:{s:s, s:{s:f, s:f, s:f, s:f}, s:f, s:f, s:{s:f, s:f, s:f, s:f}}, s:i, s:{s:f, s:f}, "
        "s:{s:i, s:f, s:f}}]}",
        "name", "all-slowest", "node_groups", "name", "slowest", "count",
        c->devices / slow.devices_per_node, "device", "name", "slowest", "peak_tflops", "bf16",
        slow.device.peak_tflops[TOPO_BF16], "fp16", slow.device.peak_tflops[TOPO_FP16], "fp8",
        slow.device.peak_tflops[TOPO_FP8], "fp32", slow.device.peak_tflops[TOPO_FP32], "memory_GB",
        slow.device.memory_GB, "memory_bw_GBps", slow.device.memory_bw_GBps, "gemm_eff", "bf16",
        topo_device_gemm_eff(&slow.device, TOPO_BF16), "fp16", topo_device_gemm_eff(&slow.device, TOPO_FP16), "fp8",
        topo_device_gemm_eff(&slow.device, TOPO_FP8), "fp32", topo_device_gemm_eff(&slow.device, TOPO_FP32),
        "devices_per_node",
        slow.devices_per_node, "intra", "bw_GBps", slow.intra_bw_GBps, "latency_us",
        slow.intra_latency_us, "nic", "count", 1, "bw_Gbps", net_node * 8, "latency_us",
        slow.net_latency_us);
    if (!doc)
        return util_fail(AI_ERR_NOMEM, "baseline cluster");
    ai_status_t st = topo_cluster_from_json(doc, "(all-slowest cluster)", out);
    json_decref(doc);
    return st;
}

ai_status_t plan_manual_baseline(const model_ctx *ctx, plan_candidate *out, topo_cluster **slow_out)
{
    topo_cluster *slow;
    ai_status_t st = slowest_cluster(ctx->cluster, ctx->train, &slow);
    if (st != AI_OK)
        return st;
    model_ctx sctx = *ctx;
    sctx.cluster = slow;
    const topo_model *m = ctx->model;
    int gb = ctx->train->global_batch, L = m->layers;
    int N = slow->devices, dpn = slow->pools[0].devices_per_node;
    int tp = dpn;
    while (tp > 1 && (m->heads % tp || (m->kv_heads % tp && tp % m->kv_heads)))
        tp--;
    plan_candidate pc;
    memset(&pc, 0, sizeof pc);
    double closest = INFINITY;
    for (int pp = 1; pp <= L && tp * pp <= N; pp *= 2) {
        if (L % pp)
            continue;
        int dp = N / (tp * pp);
        while (dp > 1 && gb % dp)
            dp--;
        model_plan *pl = &pc.plan;
        memset(pl, 0, sizeof *pl);
        pl->tp = tp;
        pl->pp = pp;
        pl->cp = 1;
        pl->micro_batch = 1;
        pl->interleave = 1;
        pl->recompute = MODEL_RC_FULL;
        pl->sequence_parallel = 0;
        pl->zero = 1;
        pl->nsets = 1;
        pl->sets[0].dp = dp;
        pl->sets[0].micro_batches = gb / dp;
        pl->sets[0].nsegs = 1;
        pl->sets[0].seg_stages[0] = pp;
        for (int i = 0; i < pp; i++)
            pl->layers[i] = (short)(L / pp);
        if ((st = model_plan_check(&sctx, pl)) != AI_OK) {
            util_clear_error();
            continue;
        }
        model_plan_eval(&sctx, pl, &pc.res);
        if (pc.res.feasible) {
            *out = pc;
            *slow_out = slow;
            return AI_OK;
        }
        closest = AI_MIN(closest, pc.res.memory_GB);
    }
    topo_cluster_free(slow);
    if (closest < INFINITY)
        return util_fail(AI_ERR_INFEASIBLE,
                         "manual baseline: no power-of-two pp dividing %d layers fits (best %.1f GB per device)",
                         L, closest);
    return util_fail(AI_ERR_INFEASIBLE, "manual baseline: no power-of-two pp divides %d layers within %d devices",
                     L, N);
}

/* --------------------------------------------------- homogeneous */

ai_status_t plan_homogeneous_baseline(const model_ctx *ctx, plan_candidate *out,
                                      topo_cluster **slow_out)
{
    topo_cluster *slow;
    ai_status_t st = slowest_cluster(ctx->cluster, ctx->train, &slow);
    if (st != AI_OK)
        return st;
    model_ctx sctx = *ctx;
    sctx.cluster = slow;
    plan_fix f;
    plan_fix_init(&f);
    plan_candidate *best = NULL;
    int n = 0;
    plan_stats stats;
    st = plan_search(&sctx, &f, 1, &best, &n, &stats);
    if (st != AI_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", ai_last_error());
        topo_cluster_free(slow);
        return util_fail(st, "homogeneous baseline: %s", why);
    }
    *out = best[0];
    free(best);
    *slow_out = slow;
    return AI_OK;
}

/* ------------------------------------------------------- expert */

/* The pool of the highest peak at the training precision (more devices on
 * a tie). */
static int fastest_pool(const topo_cluster *c, const topo_training *t)
{
    int best = 0;
    for (int g = 1; g < c->npools; g++) {
        const topo_pool *a = &c->pools[g], *b = &c->pools[best];
        double pa = a->device.peak_tflops[t->precision], pb = b->device.peak_tflops[t->precision];
        if (pa > pb || (pa == pb && a->nodes * a->devices_per_node > b->nodes * b->devices_per_node))
            best = g;
    }
    return best;
}

ai_status_t plan_expert_baseline(const model_ctx *ctx, int fastest_only, plan_candidate *out,
                                 topo_cluster **cl_out)
{
    topo_cluster *cl;
    ai_status_t st;
    if (fastest_only) {
        const topo_pool *p = &ctx->cluster->pools[fastest_pool(ctx->cluster, ctx->train)];
        if (p->device.peak_tflops[ctx->train->precision] <= 0)
            return util_fail(AI_ERR_UNSUPPORTED, "expert baseline: no device has a %s peak",
                             topo_precision_name(ctx->train->precision));
        char name[TOPO_NAME_MAX * 2 + 16];
        snprintf(name, sizeof name, "%s-only", p->name);
        st = one_pool_cluster(name, p, p->nodes * p->devices_per_node,
                              p->node_net_GBps / p->devices_per_node, &cl);
    } else {
        st = slowest_cluster(ctx->cluster, ctx->train, &cl);
    }
    if (st != AI_OK)
        return st;
    model_ctx ectx = *ctx;
    ectx.cluster = cl;
    const topo_model *m = ctx->model;
    int gb = ctx->train->global_batch, L = m->layers;
    int N = cl->devices, dpn = cl->pools[0].devices_per_node;
    int tp = dpn;
    while (tp > 1 && (m->heads % tp || (m->kv_heads % tp && tp % m->kv_heads)))
        tp--;
    static const int vs[] = {1, 2, 3, 4, 6, 8}, mbs[] = {8, 4, 2, 1};
    double closest = INFINITY;
    for (int pp = 1; pp <= L && tp * pp <= N; pp *= 2) {
        if (L % pp)
            continue;
        int found = 0;
        plan_candidate best;
        memset(&best, 0, sizeof best);
        best.res.step_s = INFINITY;
        for (size_t vi = 0; vi < AI_ARRAY_LEN(vs); vi++) {
            int v = vs[vi];
            if (v > 1 && (pp < 2 || L % (pp * v)))
                continue;
            /* the largest micro-batch that fits at this interleave */
            for (size_t mi = 0; mi < AI_ARRAY_LEN(mbs); mi++) {
                int mb = mbs[mi], dp = N / (tp * pp);
                while (dp > 1 && gb % (dp * mb))
                    dp--;
                if (gb % (dp * mb))
                    continue;
                plan_candidate pc;
                memset(&pc, 0, sizeof pc);
                model_plan *pl = &pc.plan;
                pl->tp = tp;
                pl->pp = pp;
                pl->cp = 1;
                pl->micro_batch = mb;
                pl->interleave = v;
                pl->recompute = MODEL_RC_SELECTIVE;
                pl->sequence_parallel = tp > 1;
                pl->zero = 1;
                pl->nsets = 1;
                pl->sets[0].dp = dp;
                pl->sets[0].micro_batches = gb / (dp * mb);
                pl->sets[0].nsegs = 1;
                pl->sets[0].seg_stages[0] = pp;
                for (int i = 0; i < pp; i++)
                    pl->layers[i] = (short)(L / pp);
                if (model_plan_check(&ectx, pl) != AI_OK) {
                    util_clear_error();
                    continue;
                }
                model_plan_eval(&ectx, pl, &pc.res);
                if (!pc.res.feasible) {
                    closest = AI_MIN(closest, pc.res.memory_GB);
                    continue;
                }
                found = 1;
                if (pc.res.step_s < best.res.step_s)
                    best = pc;
                break;
            }
        }
        if (found) {
            *out = best;
            *cl_out = cl;
            return AI_OK;
        }
    }
    topo_cluster_free(cl);
    if (closest < INFINITY)
        return util_fail(AI_ERR_INFEASIBLE, "expert baseline: no power-of-two pp dividing %d layers"
                         " fits (best %.1f GB per device)", L, closest);
    return util_fail(AI_ERR_INFEASIBLE, "expert baseline: no power-of-two pp divides %d layers"
                     " within %d devices", L, N);
}

/* ---------------------------------------------------------------- JSON */

static double r4(double x) { return x == 0 ? 0 : round(x * 1e4) / 1e4; }

json_t *plan_candidate_json(const topo_cluster *c, const plan_candidate *pc)
{
    const model_plan *pl = &pc->plan;
    const model_result *r = &pc->res;
    int dp = 0;
    for (int k = 0; k < pl->nsets; k++)
        dp += pl->sets[k].dp;
    json_t *plan = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:b, s:i}", "tp", pl->tp, "pp", pl->pp,
                             "dp", dp, "cp", pl->cp, "micro_batch", pl->micro_batch, "interleave",
                             pl->interleave, "recompute", model_recompute_name(pl->recompute),
                             "sequence_parallel", pl->sequence_parallel && pl->tp > 1, "zero", pl->zero);
    json_t *stages = json_array();
    if (!plan || !stages)
        goto err;
    if (pl->nsets == 1) {
        const model_set *s = &pl->sets[0];
        for (int j = 0, i = 0; j < s->nsegs; j++)
            for (int q = 0; q < s->seg_stages[j]; q++, i++)
                json_array_append_new(stages, json_pack("{s:s, s:i, s:i}", "node_group",
                                                        c->pools[s->seg_pool[j]].name, "devices",
                                                        pl->tp * pl->cp * s->dp, "layers", pl->layers[i]));
    } else {
        for (int i = 0; i < pl->pp; i++)
            json_array_append_new(stages, json_pack("{s:s, s:i, s:i}", "node_group", "*", "devices",
                                                    pl->tp * pl->cp * dp, "layers", pl->layers[i]));
        json_t *ds = json_array();
        for (int k = 0; k < pl->nsets; k++) {
            const model_set *s = &pl->sets[k];
            int total = s->total_micro ? s->total_micro : s->dp * s->micro_batches;
            json_array_append_new(ds, json_pack("{s:s, s:i, s:i, s:i}", "node_group",
                                                c->pools[s->seg_pool[0]].name, "replicas", s->dp,
                                                "micro_batches_per_replica", s->micro_batches,
                                                "sequences", total * pl->micro_batch));
        }
        json_object_set_new(plan, "data_split", ds);
    }
    json_object_set_new(plan, "stages", stages);
    stages = NULL;
    json_t *bd = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "compute_s", r4(r->compute_s),
                           "recompute_s", r4(r->recompute_s), "tp_comm_s", r4(r->tp_comm_s), "cp_comm_s",
                           r4(r->cp_comm_s), "pp_comm_s", r4(r->pp_comm_s), "dp_comm_s", r4(r->dp_comm_s),
                           "bubble_s", r4(r->bubble_s), "optimizer_s", r4(r->optimizer_s));
    json_t *o = json_pack("{s:o, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:o}", "plan", plan, "feasible",
                          r->feasible, "step_time_s", r4(r->step_s), "tokens_per_s", round(r->tokens_per_s),
                          "model_tflops_per_device", r4(r->model_tflops_per_device),
                          "hw_tflops_per_device", r4(r->hw_tflops_per_device), "mfu", r4(r->mfu),
                          "memory_GB_per_device", r4(r->memory_GB), "memory_usable_GB",
                          r4(r->memory_cap_GB), "devices", r->devices, "breakdown", bd);
    return o;
err:
    json_decref(plan);
    json_decref(stages);
    return NULL;
}
