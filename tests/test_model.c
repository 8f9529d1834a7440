/* model layer: closed forms for collectives, FLOPs, memory; pipeline and
 * overlap behaviour of the step model. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"

#include <math.h>
#include <string.h>

#define assert_close(a, b, rel)                                                                    \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (rel) * fabs(b_))) {                                                \
            print_error("%s = %.9g, expected %.9g (rel %g)\n", #a, a_, b_, (double)(rel));         \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

static topo_model gpt(int L, int h, int a, int V)
{
    topo_model m;
    memset(&m, 0, sizeof m);
    m.layers = L;
    m.hidden = h;
    m.heads = a;
    m.kv_heads = a;
    m.ffn_hidden = 4 * h;
    m.vocab = V;
    return m;
}

static topo_training train(int s, int B)
{
    topo_training t;
    memset(&t, 0, sizeof t);
    t.seq_len = s;
    t.global_batch = B;
    t.precision = TOPO_BF16;
    t.optimizer = TOPO_OPT_ADAM;
    t.flash_attention = 1;
    t.grad_fp32 = 1;
    return t;
}

static void test_collective_closed_forms(void **state)
{
    (void)state;
    double a = 5e-6, b = 1.0 / 25e9, n = 64e6;
    for (int p = 2; p <= 64; p *= 2) {
        assert_close(model_coll_time(AI_ALLREDUCE, MODEL_ALGO_RING, p, n, a, b),
                     2 * (p - 1) * a + 2.0 * (p - 1) / p * n * b, 1e-12);
        assert_close(model_coll_time(AI_REDUCE_SCATTER, MODEL_ALGO_RING, p, n, a, b),
                     (p - 1) * a + (double)(p - 1) / p * n * b, 1e-12);
        assert_close(model_coll_time(AI_ALLGATHER, MODEL_ALGO_RING, p, n, a, b),
                     (p - 1) * a + (double)(p - 1) / p * n * b, 1e-12);
        assert_close(model_coll_time(AI_ALLREDUCE, MODEL_ALGO_TREE, p, n, a, b), log2(p) * (a + n * b), 1e-12);
    }
    assert_true(model_coll_time(AI_ALLREDUCE, MODEL_ALGO_RING, 1, n, a, b) == 0);
    /* Small messages: latency-bound, recursive doubling wins; large: ring. */
    model_algo algo;
    model_coll_best(AI_ALLREDUCE, 64, 8, a, b, &algo);
    assert_int_equal(algo, MODEL_ALGO_TREE);
    model_coll_best(AI_ALLREDUCE, 64, 1e9, a, b, &algo);
    assert_int_equal(algo, MODEL_ALGO_RING);

    /* On nodes: within one node only intra links count; across nodes the
     * rings of the k members per node use k NICs (8 x 25 GB/s = 200 GB/s,
     * under the 300 GB/s NVLink), one member per node one NIC. */
    model_group g = {8, 8, 300e9, 2e-6, 25e9, 5e-6};
    assert_close(model_group_coll_time(AI_ALLREDUCE, &g, 1e9, 1.0),
                 model_coll_best(AI_ALLREDUCE, 8, 1e9, 2e-6, 1 / 300e9, NULL), 1e-12);
    g.ranks = 32;
    assert_close(model_group_coll_time(AI_ALLREDUCE, &g, 1e9, 0.5),
                 model_coll_best(AI_ALLREDUCE, 32, 1e9, 5e-6, 1 / (200e9 * 0.5), NULL), 1e-12);
    g.per_node = 1;
    assert_close(model_group_coll_time(AI_ALLREDUCE, &g, 1e9, 0.5),
                 model_coll_best(AI_ALLREDUCE, 32, 1e9, 5e-6, 1 / (25e9 * 0.5), NULL), 1e-12);
    g.per_node = 8;
    g.intra_Bps = 100e9;
    assert_close(model_group_coll_time(AI_ALLREDUCE, &g, 1e9, 1.0),
                 model_coll_best(AI_ALLREDUCE, 32, 1e9, 5e-6, 1 / 100e9, NULL), 1e-12);
}

static void test_flops_closed_forms(void **state)
{
    (void)state;
    /* formats.md: model = 72 B s L h^2 (1 + s/6h + V/(12 L h)),
     * full recompute hardware = 96 B s L h^2 (1 + s/6h + V/(16 L h)). */
    int Ls[] = {48, 96, 128}, hs[] = {6144, 12288, 25600}, ss[] = {2048, 4096, 2048};
    for (int i = 0; i < 3; i++) {
        topo_model m = gpt(Ls[i], hs[i], 64, 51200);
        topo_training t = train(ss[i], 512);
        double B = 512, s = ss[i], L = Ls[i], h = hs[i], V = 51200;
        double model = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
        double hw = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
        /* The closed forms drop the bias-free form's O(h) terms: exact. */
        assert_close(model_step_model_flops(&m, &t), model, 1e-12);
        assert_close(model_step_hw_flops(&m, &t, MODEL_RC_FULL), hw, 1e-12);
        assert_true(model_step_hw_flops(&m, &t, MODEL_RC_NONE) == model_step_model_flops(&m, &t));
    }
    /* SwiGLU + GQA per token per layer: 2h(h + 2h g) + 2h^2 + 6 h f + 4 s h. */
    topo_model m = gpt(80, 8192, 64, 32000);
    m.kv_heads = 8;
    m.ffn_hidden = 28672;
    m.ffn_kind = TOPO_FFN_SWIGLU;
    double h = 8192, g = 8.0 / 64;
    assert_close(model_layer_fwd_flops_per_token(&m, 4096),
                 2 * h * (h + 2 * h * g) + 2 * h * h + 6 * h * 28672 + 4 * 4096 * h, 1e-12);
}

static void test_activation_closed_forms(void **state)
{
    (void)state;
    /* Korthikanti et al. Table 2, per layer: no parallelism 34 sbh + 5 a s^2 b;
     * tensor parallel sbh(10 + 24/t + 5as/(ht)); + sequence parallel
     * sbh(34/t + 5as/(ht)); + selective: sbh 34/t; full: 2 sbh (/t with SP). */
    topo_model m = gpt(96, 12288, 96, 51200);
    topo_training t = train(2048, 64);
    t.flash_attention = 0;
    double s = 2048, b = 2, h = 12288, a = 96;
    for (int tp = 1; tp <= 8; tp *= 2) {
        assert_close(model_layer_act_bytes(&m, &t, tp, 1, 2, MODEL_RC_NONE, 0),
                     s * b * h * (10 + 24.0 / tp + 5 * a * s / (h * tp)), 1e-12);
        assert_close(model_layer_act_bytes(&m, &t, tp, 1, 2, MODEL_RC_NONE, 1),
                     s * b * h * (34.0 / tp + 5 * a * s / (h * tp)), 1e-12);
        assert_close(model_layer_act_bytes(&m, &t, tp, 1, 2, MODEL_RC_SELECTIVE, 1), s * b * h * 34.0 / tp, 1e-12);
        assert_close(model_layer_act_bytes(&m, &t, tp, 1, 2, MODEL_RC_FULL, 0), 2 * s * b * h, 1e-12);
        assert_close(model_layer_act_bytes(&m, &t, tp, 1, 2, MODEL_RC_FULL, 1), 2 * s * b * h / tp, 1e-12);
    }
    /* Flash attention stores no scores; context parallelism splits tokens. */
    t.flash_attention = 1;
    assert_close(model_layer_act_bytes(&m, &t, 8, 1, 2, MODEL_RC_NONE, 1), s * b * h * 34.0 / 8, 1e-12);
    assert_close(model_layer_act_bytes(&m, &t, 8, 4, 2, MODEL_RC_NONE, 1), s * b * h * 34.0 / 32, 1e-12);
}

/* One DGX-like pool of `nodes` nodes. */
static topo_cluster *make_cluster(const char *dev, int nodes)
{
    json_t *doc = json_pack("{s:[{s:s, s:i, s:s, s:i, s:{s:f}, s:{s:i, s:f}}]}", "node_groups", "name", "g",
                            "count", nodes, "device", dev, "devices_per_node", 8, "intra", "bw_GBps", 300.0,
                            "nic", "count", 8, "bw_Gbps", 200.0);
    topo_cluster *c = NULL;
    assert_int_equal(topo_cluster_from_json(doc, "test", &c), AI_OK);
    json_decref(doc);
    return c;
}

static model_plan uniform(int tp, int pp, int dp, int mb, int v, int m_micro, int L, model_recompute rc, int sp,
                          int zero)
{
    model_plan p;
    memset(&p, 0, sizeof p);
    p.tp = tp;
    p.pp = pp;
    p.cp = 1;
    p.micro_batch = mb;
    p.interleave = v;
    p.recompute = rc;
    p.sequence_parallel = sp;
    p.zero = zero;
    p.nsets = 1;
    p.sets[0].dp = dp;
    p.sets[0].micro_batches = m_micro;
    p.sets[0].nsegs = 1;
    p.sets[0].seg_stages[0] = pp;
    for (int i = 0; i < pp; i++)
        p.layers[i] = (short)(L / pp);
    return p;
}

static void test_param_memory_per_zero_stage(void **state)
{
    (void)state;
    topo_model m = gpt(96, 12288, 96, 51200);
    topo_training t = train(2048, 64);
    topo_cluster *c = make_cluster("A100", 16);
    model_ctx ctx = {c, &m, &t, model_params_fitted};
    model_plan p = uniform(8, 8, 2, 1, 1, 32, 96, MODEL_RC_SELECTIVE, 1, 0);
    /* A middle stage holds 12 layers and no embeddings. */
    double P = 12 * topo_model_layer_params(&m) / 8, D = 2;
    double expect[4] = {P * 18, P * (2 + 4 + 12 / D), P * (2 + 16 / D), P * 18 / D};
    double prev = INFINITY;
    for (int z = 0; z <= 3; z++) {
        p.zero = z;
        double pb, ab;
        model_stage_memory(&ctx, &p, 3, 32, &pb, &ab);
        if (z < 3)
            assert_close(pb, expect[z], 1e-12);
        else
            assert_true(pb > expect[3] && pb < expect[2]); /* plus gathered layers */
        assert_true(pb < prev);
        prev = pb;
    }
    /* The first stage adds the embedding; it holds pp micro-batches of
     * activations (1F1B), the last stage only one plus fp32 logits. */
    p.zero = 0;
    double pb0, ab0, pbl, abl;
    model_stage_memory(&ctx, &p, 0, 32, &pb0, &ab0);
    model_stage_memory(&ctx, &p, 7, 32, &pbl, &abl);
    assert_close(pb0, (P + 51200.0 * 12288 / 8) * 18, 1e-12);
    double per_layer = model_layer_act_bytes(&m, &t, 8, 1, 1, MODEL_RC_SELECTIVE, 1);
    assert_close(ab0, 8 * 12 * per_layer, 1e-12);
    assert_close(abl, 12 * per_layer + 4.0 * 2048 * 51200 / 8, 1e-12);
    /* Interleaving: the first stage holds L(1 + (p-1)/(p v)) layers' worth. */
    p.interleave = 3;
    model_stage_memory(&ctx, &p, 0, 32, &pb0, &ab0);
    assert_close(ab0, 96 * (1 + 7.0 / 24) * per_layer, 1e-12);
    topo_cluster_free(c);
}

static void test_pipeline_bubble_and_overlap(void **state)
{
    (void)state;
    /* A tiny vocabulary keeps the output layer out of the stage times. */
    topo_model m = gpt(32, 4096, 32, 64);
    topo_training t = train(2048, 256);
    topo_cluster *c = make_cluster("A100", 8);
    model_ctx ctx = {c, &m, &t, model_params_fitted};
    /* Without DP traffic (dp = 1), step = m t + (p-1) t / v + tail terms;
     * the bubble term shrinks with interleaving by 1/v. */
    model_plan p1 = uniform(8, 4, 1, 1, 1, 256, 32, MODEL_RC_SELECTIVE, 1, 1);
    model_plan p2 = p1;
    p2.interleave = 2;
    assert_int_equal(model_plan_check(&ctx, &p1), AI_OK);
    assert_int_equal(model_plan_check(&ctx, &p2), AI_OK);
    model_result r1, r2;
    model_plan_eval(&ctx, &p1, &r1);
    model_plan_eval(&ctx, &p2, &r2);
    assert_true(r1.dp_comm_s == 0);
    assert_true(r2.bubble_s < r1.bubble_s);
    assert_close(r2.bubble_s / r1.bubble_s, 0.5, 0.05);
    /* The breakdown sums to the step. */
    double sum = r1.compute_s + r1.recompute_s + r1.tp_comm_s + r1.cp_comm_s + r1.pp_comm_s + r1.dp_comm_s +
                 r1.bubble_s + r1.optimizer_s;
    assert_close(sum, r1.step_s, 1e-9);
    /* Full recompute adds one forward: a third of forward + backward for
     * the GEMMs, less for flash attention (its backward is 2.5 forwards,
     * so the forward is 1/3.5 of it). */
    model_plan pf = p1;
    pf.recompute = MODEL_RC_FULL;
    model_result rf;
    model_plan_eval(&ctx, &pf, &rf);
    assert_true(rf.recompute_s < r1.compute_s / 3 && rf.recompute_s > r1.compute_s / 3.5);
    assert_true(rf.hw_tflops_per_device > rf.model_tflops_per_device);

    /* Gradient reduction hides behind the last micro-batch's backward:
     * more overlap never makes the step slower, none exposes it all. */
    model_plan pd = uniform(8, 1, 8, 1, 1, 32, 32, MODEL_RC_SELECTIVE, 1, 1);
    assert_int_equal(model_plan_check(&ctx, &pd), AI_OK);
    model_result rd0, rd1;
    ctx.params.dp_overlap = 0;
    model_plan_eval(&ctx, &pd, &rd0);
    ctx.params.dp_overlap = 1;
    model_plan_eval(&ctx, &pd, &rd1);
    assert_true(rd0.dp_comm_s > 0);
    assert_true(rd1.dp_comm_s < rd0.dp_comm_s);
    assert_close(rd0.step_s - rd1.step_s, rd0.dp_comm_s - rd1.dp_comm_s, 1e-9);
    topo_cluster_free(c);
}

/*
 * Compute time against FLOPs: with no shape penalty, near-infinite HBM
 * bandwidth and tp = 1 (no traffic), one layer's forward + backward
 * (3 forwards) must take its formats.md FLOPs over peak x efficiency;
 * with flash attention the causal kernel runs half of the counted
 * attention FLOPs at attn_eff.
 */
static void test_compute_time_matches_flops(void **state)
{
    (void)state;
    /* The device reaches its whole peak on large GEMMs (gemm_eff 1), so
     * the model's gemm_eff alone sets the GEMM rate. */
    json_t *doc = json_pack("{s:[{s:s, s:i, s:{s:s, s:{s:f}, s:f, s:f, s:{s:f}}, s:i, s:{s:f}, s:{s:i, s:f}}]}",
                            "node_groups", "name", "g", "count", 1, "device", "name", "ideal", "peak_tflops",
                            "bf16", 1000.0, "memory_GB", 1000.0, "memory_bw_GBps", 1e7, "gemm_eff", "bf16", 1.0,
                            "devices_per_node", 8,
                            "intra", "bw_GBps", 300.0, "nic", "count", 1, "bw_Gbps", 100.0);
    topo_cluster *c = NULL;
    assert_int_equal(topo_cluster_from_json(doc, "test", &c), AI_OK);
    json_decref(doc);
    topo_model m = gpt(4, 4096, 32, 64);
    topo_training t = train(2048, 8);
    model_ctx ctx = {c, &m, &t, model_params_fitted};
    ctx.params.gemm_half_dim = 0;
    ctx.params.gemm_eff = 0.5;
    ctx.params.attn_eff = 0.25;
    model_plan p = uniform(1, 1, 1, 2, 1, 4, 4, MODEL_RC_NONE, 0, 0);
    double tok = 2.0 * 2048, h = 4096, peak = 1000e12;
    double attn = 4 * 2048.0 * h * tok;
    double gemm = model_layer_fwd_flops_per_token(&m, 2048) * tok - attn;
    /* HBM traffic (tiny here, but counted): 19 16-bit passes over T x h
     * (layernorms, residual adds, GELU) and, with materialized attention,
     * 13 bytes per score. */
    double bw = 1e16 * ctx.params.mem_eff;
    double elem = 2 * tok * h * 19 / bw, scores = 13 * 32 * tok * 2048 / bw;
    double per_layer, extra;
    t.flash_attention = 0;
    model_pool_layer_time(&ctx, &p, 0, &per_layer, &extra);
    assert_close(per_layer, 3 * ((gemm + attn) / (peak * 0.5) + elem + scores), 1e-9);
    /* Flash attention: the forward runs the causal half of the counted
     * attention FLOPs, and its backward 2.5 times the forward's (five
     * matrix products to two: it recomputes the scores), so attention
     * takes 3.5 forwards where the GEMMs take 3. */
    t.flash_attention = 1;
    model_pool_layer_time(&ctx, &p, 0, &per_layer, &extra);
    double fa = 0.5 * attn / (peak * 0.25);
    assert_close(per_layer, 3 * (gemm / (peak * 0.5) + elem) + 3.5 * fa, 1e-9);
    /* Output layer: logits GEMM 2 V h per token, forward + backward, plus
     * the fp32 loss (32 + 14 bytes per logit). */
    assert_close(extra, 3 * 2.0 * 64 * h * tok / (peak * 0.5) + 46 * tok * 64 / bw, 1e-9);
    /* Full recompute adds exactly one forward. */
    p.recompute = MODEL_RC_FULL;
    double full;
    model_pool_layer_time(&ctx, &p, 0, &full, &extra);
    assert_close(full, per_layer + gemm / (peak * 0.5) + elem + fa, 1e-9);
    /* Context parallelism 2: each device holds half the tokens (so half
     * the GEMM, attention and elementwise work), and the split attention
     * merges its cp partial results through HBM: forward the output into
     * an fp32 accumulator (read 16-bit, read and write fp32: 10 bytes per
     * element and step), backward dQ, dK, dV the same way (MHA: g = 1).
     * gemm_half_dim 0 makes the shorter K/V blocks free. The one ring
     * transfer (K and V of the half sequence, over NVLink) is exposed
     * beyond the attention of its step, forward and (twice) backward. */
    p.recompute = MODEL_RC_NONE;
    double cp1;
    model_pool_layer_time(&ctx, &p, 0, &cp1, &extra);
    p.cp = 2;
    double cp2, half = tok / 2;
    model_pool_layer_time(&ctx, &p, 0, &cp2, &extra);
    const topo_pool *po = &c->pools[0];
    double ring = po->intra_latency_us * 1e-6 + 2 * half * h * 2 / (po->intra_bw_GBps * 1e9 * ctx.params.link_eff);
    double a_step = 0.5 * 4 * half * 2048 * h / (peak * 0.25) / 2;
    double exposed = AI_MAX(0, ring - a_step) + AI_MAX(0, 2 * ring - 2.5 * a_step);
    assert_true(exposed > 0);
    assert_close(cp2, cp1 / 2 + 2 * 10 * half * h / bw + 2 * 10 * half * h * 3 / bw + exposed, 1e-9);
    p.cp = 1;
    /* The device's measured GEMM efficiency multiplies the model's: at
     * 0.8 every GEMM (layer and logits) runs at 0.4 of peak. */
    c->pools[0].device.gemm_eff[TOPO_BF16] = 0.8;
    model_pool_layer_time(&ctx, &p, 0, &per_layer, &extra);
    assert_close(per_layer, 3 * (gemm / (peak * 0.4) + elem) + 3.5 * fa, 1e-9);
    assert_close(extra, 3 * 2.0 * 64 * h * tok / (peak * 0.4) + 46 * tok * 64 / bw, 1e-9);
    /* Not set: TOPO_GEMM_EFF_DEFAULT. */
    c->pools[0].device.gemm_eff[TOPO_BF16] = 0;
    model_pool_layer_time(&ctx, &p, 0, &per_layer, &extra);
    assert_close(per_layer, 3 * (gemm / (peak * 0.5 * TOPO_GEMM_EFF_DEFAULT) + elem) + 3.5 * fa, 1e-9);
    topo_cluster_free(c);
}

/*
 * Data-parallel traffic with an interleaved pipeline: the chunks'
 * reductions run one after another under the backward of the chunks that
 * finish later, (v-1)/v x p stage backwards of it (the schedule runs each
 * chunk for a group of p micro-batches). When the network keeps up, one
 * chunk's share is exposed; when it is far slower than that window, about
 * all of it is, as without interleaving (not a 1/v share).
 */
static void test_interleaved_dp_window(void **state)
{
    (void)state;
    topo_model m = gpt(32, 4096, 32, 51200);
    topo_training t = train(2048, 32);
    double nic_Gbps[2] = {1.0, 400.0};
    double ratio[2];
    for (int k = 0; k < 2; k++) {
        json_t *doc = json_pack("{s:[{s:s, s:i, s:s, s:i, s:{s:f}, s:{s:i, s:f}}]}", "node_groups", "name", "g",
                                "count", 16, "device", "A100", "devices_per_node", 8, "intra", "bw_GBps", 300.0,
                                "nic", "count", 8, "bw_Gbps", nic_Gbps[k]);
        topo_cluster *c = NULL;
        assert_int_equal(topo_cluster_from_json(doc, "test", &c), AI_OK);
        json_decref(doc);
        model_ctx ctx = {c, &m, &t, model_params_fitted};
        model_plan p1 = uniform(8, 4, 4, 1, 1, 8, 32, MODEL_RC_SELECTIVE, 1, 1);
        model_plan p2 = p1;
        p2.interleave = 2;
        assert_int_equal(model_plan_check(&ctx, &p1), AI_OK);
        assert_int_equal(model_plan_check(&ctx, &p2), AI_OK);
        model_result r1, r2;
        model_plan_eval(&ctx, &p1, &r1);
        model_plan_eval(&ctx, &p2, &r2);
        assert_true(r1.dp_comm_s > 0);
        ratio[k] = r2.dp_comm_s / r1.dp_comm_s;
        if (k == 0) {
            /* The closed form, with nothing hidden by a micro-batch
             * (dp_overlap 0): stage 0 (no stage ahead of it) exposes
             * R + G without interleaving and R + G - (v-1)/v x min(m, p)
             * x its forward + backward with it, as long as the network is
             * the bottleneck. */
            ctx.params.dp_overlap = 0;
            model_plan_eval(&ctx, &p1, &r1);
            model_plan_eval(&ctx, &p2, &r2);
            double per_layer, extra;
            model_pool_layer_time(&ctx, &p2, 0, &per_layer, &extra);
            assert_close(r1.dp_comm_s - r2.dp_comm_s, 0.5 * 4 * 8 * per_layer, 1e-9);
        }
        topo_cluster_free(c);
    }
    /* 1 Gb/s NICs: the reduction takes seconds, the window milliseconds. */
    assert_true(ratio[0] > 0.95 && ratio[0] < 1.05);
    /* 400 Gb/s: interleaving hides more than half of what 1F1B exposes. */
    assert_true(ratio[1] < 0.5);
}

static void test_plan_check_messages(void **state)
{
    (void)state;
    topo_model m = gpt(32, 4096, 32, 51200);
    topo_training t = train(2048, 256);
    topo_cluster *c = make_cluster("A100", 8);
    model_ctx ctx = {c, &m, &t, model_params_fitted};
    model_plan p = uniform(3, 4, 1, 1, 1, 256, 32, MODEL_RC_NONE, 0, 1);
    assert_int_equal(model_plan_check(&ctx, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "tp=3 must divide heads"));
    p = uniform(8, 4, 4, 1, 1, 64, 32, MODEL_RC_NONE, 0, 1);
    assert_int_equal(model_plan_check(&ctx, &p), AI_ERR_INVALID); /* 128 devices > 64 */
    assert_non_null(strstr(ai_last_error(), "devices in pool g"));
    p = uniform(8, 4, 2, 1, 1, 100, 32, MODEL_RC_NONE, 0, 1);
    assert_int_equal(model_plan_check(&ctx, &p), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "global_batch 256"));
    topo_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collective_closed_forms),
        cmocka_unit_test(test_flops_closed_forms),
        cmocka_unit_test(test_activation_closed_forms),
        cmocka_unit_test(test_param_memory_per_zero_stage),
        cmocka_unit_test(test_pipeline_bubble_and_overlap),
        cmocka_unit_test(test_compute_time_matches_flops),
        cmocka_unit_test(test_interleaved_dp_window),
        cmocka_unit_test(test_plan_check_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
