/*
 * The transformer training-step model.
 *
 * Step time of a plan = for the slowest set of pipeline replicas:
 *   m * t_crit + (sum_i t_i - t_crit) / v        (1F1B / interleaved pipeline)
 *   + exposed data-parallel traffic + optimizer step
 * where t_i is the forward+backward time of stage i for one micro-batch:
 * GEMMs and attention at a shape-dependent fraction of peak, elementwise
 * kernels at a fraction of HBM bandwidth, tensor/context-parallel traffic
 * costed with the alpha-beta collectives on the stage's links, and pipeline
 * sends. The (m-1)*max + sum form for uneven stages is the standard 1F1B
 * bound (Narayanan et al., "Efficient Large-Scale Language Model Training on
 * GPU Clusters Using Megatron-LM", SC'21, section 2.2); interleaving divides
 * the fill/drain part by v (same paper, 2.2.2).
 *
 * Memory follows Korthikanti et al., "Reducing Activation Recomputation in
 * Large Transformer Models" (MLSys 2023), sections 4.1-4.3, and Rajbhandari
 * et al., "ZeRO" (SC'20) for the per-stage optimizer-state split.
 * docs/model.md walks through every term.
 */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

const char *model_recompute_name(model_recompute r)
{
    switch (r) {
    case MODEL_RC_NONE: return "none";
    case MODEL_RC_SELECTIVE: return "selective";
    case MODEL_RC_FULL: return "full";
    }
    return "?";
}

/* ------------------------------------------------------------- FLOPs */

static double ffn_mats(const topo_model *m) { return m->ffn_kind == TOPO_FFN_SWIGLU ? 3 : 2; }

double model_layer_fwd_flops_per_token(const topo_model *m, int seq_len)
{
    double h = m->hidden, g = (double)m->kv_heads / m->heads;
    return 2 * h * (h + 2 * h * g) + 2 * h * h + 2 * ffn_mats(m) * h * m->ffn_hidden +
           4.0 * seq_len * h;
}

double model_step_model_flops(const topo_model *m, const topo_training *t)
{
    double tokens = (double)t->global_batch * t->seq_len;
    double fwd = m->layers * model_layer_fwd_flops_per_token(m, t->seq_len) +
                 2.0 * m->vocab * m->hidden;
    return 3 * fwd * tokens;
}

double model_step_hw_flops(const topo_model *m, const topo_training *t, model_recompute rc)
{
    double tokens = (double)t->global_batch * t->seq_len;
    double extra = 0;
    if (rc == MODEL_RC_FULL)
        extra = m->layers * model_layer_fwd_flops_per_token(m, t->seq_len);
    else if (rc == MODEL_RC_SELECTIVE && !t->flash_attention)
        extra = m->layers * 4.0 * t->seq_len * m->hidden; /* attention core again */
    /* (With flash attention selective recompute has nothing to redo: the
     * kernel's own backward recomputation is not counted, as in
     * formats.md.) */
    return model_step_model_flops(m, t) + extra * tokens;
}

/* --------------------------------------------------------- activations */

static double act_elem_bytes(const topo_training *t) { return t->precision == TOPO_FP32 ? 4 : 2; }

/*
 * Korthikanti et al. count, per layer and micro-batch, 34 s b h bytes (10 of
 * them not split by tensor parallelism: layernorm inputs, dropout masks and
 * the QKV/FFN inputs) plus 5 a s^2 b for the attention scores. Generalized:
 * K and V scale with kv_heads/heads, the FFN terms with ffn_hidden (SwiGLU
 * keeps gate and up projections, 3 f instead of 2 f). Sequence parallelism
 * splits the 10; selective recompute drops the scores; flash attention never
 * materializes them. Full recompute keeps only each layer's input.
 */
double model_layer_act_bytes(const topo_model *m, const topo_training *t, int tp, int cp,
                             int micro_batch, model_recompute rc, int sp)
{
    double h = m->hidden, f = m->ffn_hidden, a = m->heads, s = t->seq_len;
    double g = (double)m->kv_heads / m->heads;
    double tok = (double)micro_batch * s / cp; /* tokens of one micro-batch on this device */
    double scale = act_elem_bytes(t) / 2.0;
    double ffn = m->ffn_kind == TOPO_FFN_SWIGLU ? 6 * f / h : 4 * f / h;
    double par = 2 + 4 * g + 2 + ffn; /* Q, K+V, proj input, FFN activations */
    double nonpar = 10;
    if (rc == MODEL_RC_FULL)
        return scale * 2 * tok * h / (sp ? tp : 1);
    double bytes = tok * h * (nonpar / (sp ? tp : 1) + par / tp);
    if (rc == MODEL_RC_NONE && !t->flash_attention)
        bytes += 5 * a * s * tok / tp;
    return scale * bytes;
}

/* ------------------------------------------------------ per-layer costs */

typedef struct layer_cost {
    double f, b, rc;          /* compute: forward, backward, recompute (s) */
    double f_tp, b_tp, rc_tp; /* exposed tensor-parallel traffic (s) */
    double cp;                /* exposed context-parallel traffic, fwd+bwd (s) */
    double logits_f, logits_b;/* output layer + loss on the last stage */
    double p2p_intra, p2p_inter; /* one pipeline send (s) */
    double peak;              /* FLOP/s of the precision used */
} layer_cost;

/*
 * One GEMM (M x K) . (K x N) in 16-bit: the roofline (Williams, Waterman &
 * Patterson, CACM 2009) of the device. Compute at a shape-dependent
 * fraction of peak (tile quantization makes thin GEMMs slow), or the
 * operands and result through HBM, whichever is longer: a skinny GEMM on a
 * device with a high peak-to-bandwidth ratio becomes memory bound. The
 * calibration GEMMs are all compute bound; the memory side uses the same
 * mem_eff as the elementwise kernels.
 */
static double gemm_time(const model_params *p, double eff_large, double peak, double membw, double M, double K,
                        double N)
{
    double d = AI_MIN(M, AI_MIN(K, N));
    double eff = eff_large * d / (d + p->gemm_half_dim);
    double compute = 2 * M * K * N / (peak * eff);
    double memory = 2 * (M * K + K * N + M * N) / membw;
    return AI_MAX(compute, memory);
}

static void pool_layer_cost_raw(const model_ctx *ctx, const model_plan *pl, const topo_pool *pool,
                                layer_cost *lc)
{
    const topo_model *m = ctx->model;
    const topo_training *t = ctx->train;
    const model_params *p = &ctx->params;
    double h = m->hidden, f = m->ffn_hidden, a = m->heads, s = t->seq_len, V = m->vocab;
    double g = (double)m->kv_heads / m->heads;
    double tp = pl->tp, cp = pl->cp;
    double T = (double)pl->micro_batch * s / cp;
    double ab = act_elem_bytes(t);
    double peak = pool->device.peak_tflops[t->precision] * 1e12;
    /* FP8 training (Transformer Engine) runs only the layers' linear GEMMs
     * in FP8: attention and the output layer stay in 16-bit, at the 16-bit
     * peak. */
    int fp8 = t->precision == TOPO_FP8;
    double peak16 = pool->device.peak_tflops[fp8 ? TOPO_BF16 : t->precision] * 1e12;
    double membw = pool->device.memory_bw_GBps * 1e9 * p->mem_eff;
    int sp = pl->sequence_parallel && pl->tp > 1;

    memset(lc, 0, sizeof *lc);
    lc->peak = peak;
    /* GEMM efficiency: the device's achieved fraction of peak on large
     * GEMMs (a catalog input, measured per device and precision) times the
     * fraction of that a training step's GEMMs reach (fitted, one for all
     * devices: the software generation's kernels and shapes). */
    double dev16 = topo_device_gemm_eff(&pool->device, fp8 ? TOPO_BF16 : t->precision);
    double ge16 = p->gemm_eff * dev16;
    double ge = fp8 ? p->fp8_gemm_eff * topo_device_gemm_eff(&pool->device, TOPO_FP8) : ge16;
    double gemm = gemm_time(p, ge, peak, membw, T, h, h * (1 + 2 * g) / tp) + gemm_time(p, ge, peak, membw, T, h / tp, h) +
                  gemm_time(p, ge, peak, membw, T, h, f * (ffn_mats(m) - 1) / tp) +
                  gemm_time(p, ge, peak, membw, T, f / tp, h);
    double attn_flops = 4 * T * s * h / tp;
    double attn;
    if (t->flash_attention) {
        /* Causal flash attention skips the masked half of the scores. */
        attn = 0.5 * attn_flops / (peak16 * p->attn_eff);
    } else {
        /* Two batched GEMMs per local head (Q K^T and scores x V, inner
         * size head_dim and s), plus the scores going
         * through HBM: write, scale-mask-softmax read+write, dropout
         * read+write+mask, read by the second GEMM: 13 bytes per score in
         * 16-bit (Korthikanti et al.'s 5 a s^2 b stored is the subset kept
         * for backward). */
        double scores = a / tp * T * s;
        attn = 2 * (a / tp) * gemm_time(p, ge16, peak16, membw, T, h / a, s) + 13 * ab / 2 * scores / membw;
    }
    /* Elementwise traffic in 16-bit elements per token of hidden size:
     * 2 layernorms (read+write, 2 each), 2 bias-dropout-residual adds (read
     * 2, write 1, mask 0.5: 3.5 each) = 11, not split without SP; the FFN
     * activation reads and writes its f-wide input (2 f/h, SwiGLU 3 f/h). */
    double ffn_elem = (m->ffn_kind == TOPO_FFN_SWIGLU ? 3 : 2) * f / h;
    double elem = ab * T * h * (11 / (sp ? tp : 1) + ffn_elem / tp) / membw;
    /* FP8: every GEMM input is quantized first, a fused cast-transpose that
     * reads 16-bit and writes the FP8 tensor and its transpose (2 + 1 + 1
     * bytes per element): forward the inputs of QKV, projection, FC1, FC2
     * (h, h, h, f), backward the gradients of their outputs. */
    double cast_f = fp8 ? 4 * T * (3 * h + f) / tp / membw : 0;
    double cast_b = fp8 ? 4 * T * (h * (1 + 2 * g) + h + f * (ffn_mats(m) - 1) + h) / tp / membw : 0;

    lc->f = gemm + attn + elem;
    /* Backward does twice the GEMM work (input and weight gradients) and
     * twice the elementwise traffic. Flash attention's backward runs five
     * matrix products to the forward's two (it recomputes the scores,
     * then dV, dP, dQ, dK: Dao, "FlashAttention-2", 2023, section 3.1.2),
     * 2.5 times the forward's FLOPs; materialized attention's backward is
     * two products per forward one, like any GEMM. */
    double attn_bwd = t->flash_attention ? MODEL_FLASH_BWD_RATIO : 2;
    lc->b = 2 * (gemm + elem) + attn_bwd * attn + cast_b;
    lc->f += cast_f;
    if (pl->recompute == MODEL_RC_FULL)
        lc->rc = lc->f;
    else if (pl->recompute == MODEL_RC_SELECTIVE && !t->flash_attention)
        lc->rc = attn;

    /* Tensor parallelism: two all-reduces per layer forward and two in
     * backward (Shoeybi et al., Megatron-LM 2019, Fig. 4); with sequence
     * parallelism each becomes a reduce-scatter + all-gather pair of the
     * same volume (Korthikanti et al. 4.2.2). */
    if (pl->tp > 1) {
        int dpn = pool->devices_per_node;
        model_group gtp = {pl->tp, AI_MIN(pl->tp, dpn), pool->intra_bw_GBps * 1e9,
                           pool->intra_latency_us * 1e-6, pool->node_net_GBps * 1e9 / dpn,
                           pool->net_latency_us * 1e-6};
        double bytes = T * h * ab;
        double one = sp ? model_group_coll_time(AI_REDUCE_SCATTER, &gtp, bytes, p->link_eff) +
                              model_group_coll_time(AI_ALLGATHER, &gtp, bytes, p->link_eff)
                        : model_group_coll_time(AI_ALLREDUCE, &gtp, bytes, p->link_eff);
        double exposed = t->tp_comm_overlap ? 1 - p->tp_overlap : 1;
        lc->f_tp = 2 * one * exposed;
        /* Backward: the input-gradient collective of each column-parallel
         * GEMM runs asynchronously under that GEMM's weight-gradient
         * computation (Megatron's async tensor-parallel all-reduce, and
         * with SP the all-gather overlap, Korthikanti et al. 4.2.2), so one
         * of the two is exposed. */
        lc->b_tp = one * exposed;
        if (pl->recompute == MODEL_RC_FULL)
            lc->rc_tp = lc->f_tp;
    }
    /* Context parallelism (ring attention, Liu et al. 2023; Megatron-Core
     * and Transformer Engine run it with the causal load balancing of 2*cp
     * sequence chunks): the attention of a layer runs as cp steps, one per
     * K/V chunk held, and step i+1's K/V chunk travels around the ring
     * while step i computes, so each of the cp-1 transfers is exposed only
     * beyond the attention of the step it overlaps. Backward sends K, V
     * and the partial dK, dV (twice the bytes) under twice the compute.
     * Splitting the attention costs more than the transfers: every step
     * writes a partial output that is merged into an fp32 accumulator
     * with its log-sum-exp correction (read the 16-bit partial, read and
     * write the fp32 sum), and backward accumulates dQ, and dK, dV per
     * step the same way; and each step's kernel sees only a K/V block of
     * s/(2cp) tokens, so the tile efficiency of the shorter block applies. */
    if (pl->cp > 1) {
        int dpn = pool->devices_per_node;
        int in_node = pl->tp * pl->cp <= dpn;
        double bw = in_node ? pool->intra_bw_GBps * 1e9
                            : AI_MIN(pool->intra_bw_GBps * 1e9, pool->node_net_GBps * 1e9 / dpn);
        double lat = (in_node ? pool->intra_latency_us : pool->net_latency_us) * 1e-6;
        double kv = 2 * T * h * g / tp * ab;
        double step = lat + kv / (bw * p->link_eff);
        double blk = s / (2 * cp);
        double attn_cp = attn * (blk + p->gemm_half_dim) / blk;
        double a_step = attn_cp / cp;
        double merge_f = cp * (ab + 8) * T * h / tp / membw;
        double merge_b = cp * (ab + 8) * T * h * (1 + 2 * g) / tp / membw;
        double split = attn_cp - attn;
        lc->f += split + merge_f;
        lc->b += attn_bwd * split + merge_b;
        if (pl->recompute == MODEL_RC_FULL)
            lc->rc += split + merge_f;
        lc->cp = (cp - 1) * (AI_MAX(0, step - a_step) + AI_MAX(0, 2 * step - attn_bwd * a_step));
    }
    /* Output layer (logits GEMM) and the fp32 cross-entropy on the last
     * stage, which is memory bound: per logit, forward writes the 16-bit
     * GEMM output and upcasts it (2+2+4 bytes), takes the max (4), the
     * shifted exponentials (4+4), their sum (4) and the normalized
     * probabilities (4+4): ~32 bytes; backward reads and writes the
     * softmax gradient and downcasts it (4+4+4+2 = 14). The pass structure
     * is Megatron's vocab-parallel cross entropy. */
    lc->logits_f = gemm_time(p, ge16, peak16, membw, T, h, V / tp) + 32 * T * V / tp / membw;
    lc->logits_b = 2 * gemm_time(p, ge16, peak16, membw, T, h, V / tp) + 14 * T * V / tp / membw;

    /* Pipeline sends carry one tensor-parallel slice each; the receiver
     * all-gathers over NVLink (the scatter/gather optimization of
     * Narayanan et al. SC'21, 4.1; with SP the tensor is already split). */
    double pbytes = T * h * ab / tp;
    lc->p2p_intra = pool->intra_latency_us * 1e-6 + pbytes / (pool->intra_bw_GBps * 1e9 * p->link_eff);
    lc->p2p_inter = pool->net_latency_us * 1e-6 +
                    pbytes / (pool->node_net_GBps * 1e9 / pool->devices_per_node * p->link_eff);
}

/* ------------------------------------------------------------ cache */

#define CACHE_POOLS 64

struct model_cache {
    double layer_params; /* 0: not yet */
    struct {
        int valid, tp, cp, mb, sp, rc;
        double act, act_none; /* model_layer_act_bytes at rc and at none */
    } act;
    struct {
        int valid, tp, cp, mb, sp, rc;
        layer_cost lc;
    } pool[CACHE_POOLS];
};

model_cache *model_cache_new(void) { return calloc(1, sizeof(model_cache)); }

void model_cache_free(model_cache *c) { free(c); }

static _Thread_local const model_ctx *bound_ctx;
static _Thread_local model_cache *bound_cache;

void model_cache_bind(const model_ctx *ctx, model_cache *c)
{
    bound_ctx = c ? ctx : NULL;
    bound_cache = ctx ? c : NULL;
}

static model_cache *cache_of(const model_ctx *ctx) { return ctx == bound_ctx ? bound_cache : NULL; }

static double layer_params(const model_ctx *ctx, model_cache *c)
{
    if (!c)
        return topo_model_layer_params(ctx->model);
    if (c->layer_params == 0)
        c->layer_params = topo_model_layer_params(ctx->model);
    return c->layer_params;
}

/* Activation bytes per layer at the plan's recompute mode and, for full
 * recompute's working layer, at none. */
static void layer_act(const model_ctx *ctx, model_cache *c, const model_plan *pl, int sp,
                      double *act, double *act_none)
{
    int full = pl->recompute == MODEL_RC_FULL;
    if (c && c->act.valid && c->act.tp == pl->tp && c->act.cp == pl->cp &&
        c->act.mb == pl->micro_batch && c->act.sp == sp && c->act.rc == (int)pl->recompute) {
        *act = c->act.act;
        *act_none = c->act.act_none;
        return;
    }
    const topo_model *m = ctx->model;
    const topo_training *t = ctx->train;
    *act = model_layer_act_bytes(m, t, pl->tp, pl->cp, pl->micro_batch, pl->recompute, sp);
    *act_none = full ? model_layer_act_bytes(m, t, pl->tp, pl->cp, pl->micro_batch, MODEL_RC_NONE, sp)
                     : 0;
    if (c) {
        c->act.valid = 1;
        c->act.tp = pl->tp;
        c->act.cp = pl->cp;
        c->act.mb = pl->micro_batch;
        c->act.sp = sp;
        c->act.rc = (int)pl->recompute;
        c->act.act = *act;
        c->act.act_none = *act_none;
    }
}

static void pool_layer_cost(const model_ctx *ctx, model_cache *c, const model_plan *pl, int pool,
                            layer_cost *lc)
{
    int sp = pl->sequence_parallel && pl->tp > 1;
    if (!c || pool >= CACHE_POOLS) {
        pool_layer_cost_raw(ctx, pl, &ctx->cluster->pools[pool], lc);
        return;
    }
    if (!(c->pool[pool].valid && c->pool[pool].tp == pl->tp && c->pool[pool].cp == pl->cp &&
          c->pool[pool].mb == pl->micro_batch && c->pool[pool].sp == sp &&
          c->pool[pool].rc == (int)pl->recompute)) {
        pool_layer_cost_raw(ctx, pl, &ctx->cluster->pools[pool], &c->pool[pool].lc);
        c->pool[pool].valid = 1;
        c->pool[pool].tp = pl->tp;
        c->pool[pool].cp = pl->cp;
        c->pool[pool].mb = pl->micro_batch;
        c->pool[pool].sp = sp;
        c->pool[pool].rc = (int)pl->recompute;
    }
    *lc = c->pool[pool].lc;
}

/* ----------------------------------------------------------- memory */

static inline double stage_params_n(const model_ctx *ctx, model_cache *c, const model_plan *pl,
                                    int stage, int layers)
{
    const topo_model *m = ctx->model;
    double n = layers * layer_params(ctx, c);
    double emb = (double)m->vocab * m->hidden;
    if (stage == 0)
        n += emb;
    if (stage == pl->pp - 1 && (!m->tied_embeddings || pl->pp > 1))
        n += emb;
    return n / pl->tp;
}

static double stage_params(const model_ctx *ctx, model_cache *c, const model_plan *pl, int stage)
{
    return stage_params_n(ctx, c, pl, stage, pl->layers[stage]);
}

static int plan_total_dp(const model_plan *pl)
{
    int dp = 0;
    for (int k = 0; k < pl->nsets; k++)
        dp += pl->sets[k].dp;
    return dp;
}

static inline void stage_memory(const model_ctx *ctx, model_cache *c, const model_plan *pl,
                                int stage, int layers, int micro_batches, double *params_bytes,
                                double *act_bytes)
{
    const topo_model *m = ctx->model;
    const topo_training *t = ctx->train;
    double P = stage_params_n(ctx, c, pl, stage, layers);
    /* Mixed precision (Micikevicius et al. 2018) as Megatron runs it: 16-bit
     * weights, fp32 main gradients, fp32 master weights + two Adam moments
     * = 2 + 4 + 12 bytes per parameter. fp32 training keeps no master copy. */
    int mixed = t->precision != TOPO_FP32;
    double wb = mixed ? 2 : 4, gb = mixed && !t->grad_fp32 ? 2 : 4;
    double ob = t->optimizer == TOPO_OPT_ADAM ? (mixed ? 12 : 8) : (mixed ? 8 : 4);
    double D = (double)plan_total_dp(pl) * pl->cp; /* distributed optimizer shards over dp x cp */
    double pb;
    switch (pl->zero) {
    case 0: pb = P * (wb + gb + ob); break;
    case 1: pb = P * (wb + gb + ob / D); break;
    case 2: pb = P * (wb + (gb + ob) / D); break;
    default:
        /* Fully sharded, plus the gathered weights of the layers in use
         * (prefetch keeps about two). */
        pb = P * (wb + gb + ob) / D +
             2 * layer_params(ctx, c) / pl->tp * wb * (layers > 1 ? 1 : 0.5);
        break;
    }
    int sp = pl->sequence_parallel && pl->tp > 1;
    int v = pl->interleave, pp = pl->pp;
    /* Micro-batches in flight on this stage: 1F1B warm-up (pp - stage),
     * interleaved: 2(pp - stage - 1) + (v - 1) pp + 1 model chunks (Megatron's
     * schedule; Korthikanti et al. eq. for the first stage). */
    double chunks = v == 1 ? AI_MIN(pp - stage, micro_batches)
                           : AI_MIN(2.0 * (pp - stage - 1) + (v - 1) * pp + 1, (double)micro_batches * v);
    double layers_live = chunks * layers / v;
    double per_layer, per_layer_none;
    layer_act(ctx, c, pl, sp, &per_layer, &per_layer_none);
    double act = layers_live * per_layer;
    if (pl->recompute == MODEL_RC_FULL) /* one layer rebuilt at a time */
        act += per_layer_none;
    if (stage == pp - 1) /* fp32 logits for the loss */
        act += 4.0 * pl->micro_batch * t->seq_len / pl->cp * m->vocab / pl->tp;
    *params_bytes = pb;
    *act_bytes = act;
}

void model_stage_memory(const model_ctx *ctx, const model_plan *pl, int stage, int micro_batches,
                        double *params_bytes, double *act_bytes)
{
    stage_memory(ctx, cache_of(ctx), pl, stage, pl->layers[stage], micro_batches, params_bytes,
                 act_bytes);
}

void model_stage_memory_probe(const model_ctx *ctx, const model_plan *pl, int stage,
                              int micro_batches, double *mem1, double *mem2)
{
    model_cache *c = cache_of(ctx);
    double pb, ab;
    stage_memory(ctx, c, pl, stage, 1, micro_batches, &pb, &ab);
    *mem1 = pb + ab;
    stage_memory(ctx, c, pl, stage, 2, micro_batches, &pb, &ab);
    *mem2 = pb + ab;
}


/* ------------------------------------------------------------- check */

ai_status_t model_plan_check(const model_ctx *ctx, const model_plan *pl)
{
    const topo_model *m = ctx->model;
    const topo_training *t = ctx->train;
    const topo_cluster *c = ctx->cluster;
    if (pl->tp < 1 || m->heads % pl->tp)
        return util_fail(AI_ERR_INVALID, "tp=%d must divide heads (%d)", pl->tp, m->heads);
    if (m->kv_heads % pl->tp && pl->tp % m->kv_heads)
        return util_fail(AI_ERR_INVALID, "tp=%d and kv_heads=%d: one must divide the other", pl->tp,
                         m->kv_heads);
    if (pl->cp < 1 || (pl->cp > 1 && t->seq_len % (2 * pl->cp) != 0))
        return util_fail(AI_ERR_INVALID, "cp=%d: seq_len (%d) must split into 2*cp chunks", pl->cp,
                         t->seq_len);
    if (pl->pp < 1 || pl->pp > m->layers || pl->pp > MODEL_MAX_STAGES)
        return util_fail(AI_ERR_INVALID, "pp=%d must be in 1..layers (%d)", pl->pp,
                         AI_MIN(m->layers, MODEL_MAX_STAGES));
    if (pl->micro_batch < 1)
        return util_fail(AI_ERR_INVALID, "micro_batch must be >= 1");
    if (pl->zero < 0 || pl->zero > 3)
        return util_fail(AI_ERR_INVALID, "zero=%d must be 0..3", pl->zero);
    if (pl->interleave < 1 || (pl->interleave > 1 && pl->pp < 2))
        return util_fail(AI_ERR_INVALID, "interleave=%d needs pp >= 2", pl->interleave);
    int sum = 0;
    for (int i = 0; i < pl->pp; i++) {
        if (pl->layers[i] < 1 || pl->layers[i] % pl->interleave)
            return util_fail(AI_ERR_INVALID, "stage %d has %d layers (need >= 1 and a multiple of interleave=%d)",
                             i, pl->layers[i], pl->interleave);
        sum += pl->layers[i];
    }
    if (sum != m->layers)
        return util_fail(AI_ERR_INVALID, "stages hold %d layers, the model has %d", sum, m->layers);
    if (pl->nsets < 1 || pl->nsets > MODEL_MAX_SETS)
        return util_fail(AI_ERR_INVALID, "bad number of replica sets");
    int used[64] = {0};
    if (c->npools > 64)
        return util_fail(AI_ERR_UNSUPPORTED, "more than 64 distinct node pools");
    long capacity = 0, below = 0;
    for (int k = 0; k < pl->nsets; k++) {
        const model_set *s = &pl->sets[k];
        if (s->dp < 1 || s->micro_batches < 1 || s->nsegs < 1 || s->nsegs > MODEL_MAX_SEGS)
            return util_fail(AI_ERR_INVALID, "set %d: dp, micro-batches and segments must be >= 1", k);
        if (pl->interleave > 1 && s->micro_batches % pl->pp)
            return util_fail(AI_ERR_INVALID,
                             "interleaved schedule needs micro-batches (%d) to be a multiple of pp (%d)",
                             s->micro_batches, pl->pp);
        int stages = 0;
        for (int j = 0; j < s->nsegs; j++) {
            int pool = s->seg_pool[j];
            if (pool < 0 || pool >= c->npools || s->seg_stages[j] < 1)
                return util_fail(AI_ERR_INVALID, "set %d segment %d: bad pool or stage count", k, j);
            if (c->pools[pool].device.peak_tflops[t->precision] <= 0)
                return util_fail(AI_ERR_UNSUPPORTED, "device %s (pool %s) has no %s peak",
                                 c->pools[pool].device.name, c->pools[pool].name,
                                 topo_precision_name(t->precision));
            int dpn = c->pools[pool].devices_per_node;
            if (dpn % pl->tp && pl->tp % dpn)
                return util_fail(AI_ERR_INVALID, "tp=%d does not tile nodes of %d devices (pool %s)", pl->tp,
                                 dpn, c->pools[pool].name);
            /* A stage's devices (tp x cp x dp, laid out contiguously)
             * either fill whole nodes or share one node evenly, so that
             * every link the model charges is the link the ranks use. */
            int block = s->dp * pl->tp * pl->cp;
            if (block % dpn && dpn % block)
                return util_fail(AI_ERR_INVALID,
                                 "a stage of tp x cp x dp = %d devices does not tile nodes of %d devices (pool %s)",
                                 block, dpn, c->pools[pool].name);
            used[pool] += s->seg_stages[j] * block;
            stages += s->seg_stages[j];
        }
        if (stages != pl->pp)
            return util_fail(AI_ERR_INVALID, "set %d places %d stages, pp=%d", k, stages, pl->pp);
        capacity += (long)s->dp * s->micro_batches * pl->micro_batch;
        below += (long)s->dp * (s->micro_batches - 1) * pl->micro_batch;
    }
    for (int q = 0; q < c->npools; q++)
        if (used[q] > c->pools[q].nodes * c->pools[q].devices_per_node)
            return util_fail(AI_ERR_INVALID, "plan needs %d devices in pool %s, it has %d", used[q],
                             c->pools[q].name, c->pools[q].nodes * c->pools[q].devices_per_node);
    if (pl->nsets == 1 ? capacity != t->global_batch : (capacity < t->global_batch || below >= t->global_batch))
        return util_fail(AI_ERR_INVALID,
                         "dp x micro_batch x micro-batches = %ld does not make global_batch %d",
                         capacity, t->global_batch);
    return AI_OK;
}

/* ---------------------------------------------------------------- eval */

int model_plan_fits(const model_ctx *ctx, const model_plan *pl, double *worst_ratio)
{
    model_cache *mc = cache_of(ctx);
    double worst = 0;
    for (int k = 0; k < pl->nsets; k++) {
        const model_set *s = &pl->sets[k];
        for (int j = 0, stage = 0; j < s->nsegs; j++) {
            double cap = ctx->cluster->pools[s->seg_pool[j]].device.memory_GB * 1e9 * MODEL_MEM_USABLE;
            for (int q = 0; q < s->seg_stages[j]; q++, stage++) {
                double pb, ab;
                stage_memory(ctx, mc, pl, stage, pl->layers[stage], s->micro_batches, &pb, &ab);
                worst = AI_MAX(worst, (pb + ab) / cap);
            }
        }
    }
    if (worst_ratio)
        *worst_ratio = worst;
    return worst <= 1;
}

static int set_stage_pool(const model_set *s, int stage)
{
    for (int j = 0, base = 0; j < s->nsegs; base += s->seg_stages[j], j++)
        if (stage < base + s->seg_stages[j])
            return s->seg_pool[j];
    return s->seg_pool[s->nsegs - 1];
}

/* The data-parallel group of stage i has one member per replica of every
 * set; its ring runs at the slowest member's NIC share. */
static void stage_dp_group(const model_ctx *ctx, const model_plan *pl, int stage, int D, model_group *g)
{
    const topo_cluster *c = ctx->cluster;
    double share = INFINITY, lat = 0, intra = INFINITY, intra_lat = 0;
    int dpn = 1 << 30;
    for (int k = 0; k < pl->nsets; k++) {
        const topo_pool *po = &c->pools[set_stage_pool(&pl->sets[k], stage)];
        share = AI_MIN(share, po->node_net_GBps * 1e9 / po->devices_per_node);
        lat = AI_MAX(lat, po->net_latency_us * 1e-6);
        intra = AI_MIN(intra, po->intra_bw_GBps * 1e9);
        intra_lat = AI_MAX(intra_lat, po->intra_latency_us * 1e-6);
        dpn = AI_MIN(dpn, po->devices_per_node);
    }
    *g = (model_group){D, AI_MAX(1, AI_MIN(D, dpn / pl->tp)), intra, intra_lat, share, lat};
}

typedef struct stage_time {
    double f, b;        /* forward / backward(+recompute) per micro-batch */
    double comp, rc, tp, cp, p2p;
} stage_time;

/* What a plan's evaluation carries from set to set: the layer costs of
 * each pool (worked out once per pool), the bytes per parameter, the sums
 * over sets and the figures of the stage with the least memory left. */
typedef struct plan_eval {
    const model_ctx *ctx;
    model_cache *mc;
    const model_plan *pl;
    layer_cost lcs[64];
    int have[64];
    int D;                    /* the data-parallel group's members */
    double wb, gb;            /* bytes per weight, per gradient */
    double opt_bytes;         /* bytes the optimizer step moves per parameter */
    double worst_slack;       /* the least memory left on a stage so far */
    double peak_sum;          /* the devices' peak FLOP/s, for the MFU */
    model_result r;
} plan_eval;

/* One set's pipeline: each stage's times, and the slowest stage, send and
 * optimizer step, which set the step time. */
typedef struct set_times {
    stage_time st[MODEL_MAX_STAGES];
    double tot_s[MODEL_MAX_STAGES];
    int nstages;
    double tmax;
    int crit;                 /* the slowest stage */
    double send_max, opt_max;
} set_times;

static const layer_cost *eval_layer_cost(plan_eval *e, int pool)
{
    if (!e->have[pool]) {
        pool_layer_cost(e->ctx, e->mc, e->pl, pool, &e->lcs[pool]);
        e->have[pool] = 1;
    }
    return &e->lcs[pool];
}

/* A stage's time per micro-batch by part, its forward and backward
 * shares (the pipeline schedule needs both) and its p2p send. Returns
 * the stage's whole time. */
static double stage_times(const model_plan *pl, const layer_cost *lc, const topo_pool *po, int block,
                          int stage, stage_time *x, double *send)
{
    double L = pl->layers[stage];
    int last = stage == pl->pp - 1;
    x->comp = L * (lc->f + lc->b) + (last ? lc->logits_f + lc->logits_b : 0);
    x->rc = L * lc->rc;
    x->tp = L * (lc->f_tp + lc->b_tp + lc->rc_tp);
    x->cp = L * lc->cp;
    *send = block >= po->devices_per_node ? lc->p2p_inter : lc->p2p_intra;
    /* 1F1B waits for each send; the interleaved schedule posts them ahead
     * and overlaps them with the next chunk's compute (Megatron's
     * overlapped p2p communication): only the fill and the drain wait,
     * added by the caller. */
    x->p2p = pl->pp > 1 && pl->interleave == 1 ? 2 * *send : 0;
    x->f = L * (lc->f + lc->f_tp) + (last ? lc->logits_f : 0);
    double tot = x->comp + x->rc + x->tp + x->cp + x->p2p;
    x->b = tot - x->f;
    return tot;
}

/* A stage's memory against its device's: the plan is infeasible when one
 * stage does not fit, and the result reports the stage with the least
 * room left. */
static void stage_memory_check(plan_eval *e, const model_set *s, int k, int stage, const topo_pool *po)
{
    model_result *r = &e->r;
    double pbytes, abytes;
    stage_memory(e->ctx, e->mc, e->pl, stage, e->pl->layers[stage], s->micro_batches, &pbytes, &abytes);
    double cap = po->device.memory_GB * 1e9 * MODEL_MEM_USABLE;
    double mem = pbytes + abytes;
    if (mem > cap)
        r->feasible = 0;
    if (cap - mem < e->worst_slack) {
        e->worst_slack = cap - mem;
        r->memory_GB = mem / 1e9;
        r->mem_params_GB = pbytes / 1e9;
        r->mem_act_GB = abytes / 1e9;
        r->memory_cap_GB = cap / 1e9;
        r->worst_set = k;
        r->worst_stage = stage;
    }
}

/* Every stage of set k in pipeline order: its times, its memory, and its
 * optimizer step. */
static void set_stage_times(plan_eval *e, int k, set_times *ts)
{
    const model_plan *pl = e->pl;
    const model_set *s = &pl->sets[k];
    const model_params *p = &e->ctx->params;
    int stage = 0;
    int block = pl->tp * pl->cp * s->dp;
    double opt_P = -1, opt_t = 0;
    int opt_pool = -1;
    ts->tmax = 0;
    ts->crit = 0;
    ts->send_max = 0;
    ts->opt_max = 0;
    for (int j = 0; j < s->nsegs; j++) {
        int pool = s->seg_pool[j];
        const topo_pool *po = &e->ctx->cluster->pools[pool];
        const layer_cost *lc = eval_layer_cost(e, pool);
        e->peak_sum += (double)s->seg_stages[j] * block * lc->peak;
        for (int q = 0; q < s->seg_stages[j]; q++, stage++) {
            double send;
            double tot = stage_times(pl, lc, po, block, stage, &ts->st[stage], &send);
            ts->send_max = AI_MAX(ts->send_max, pl->pp > 1 ? send : 0);
            if (tot > ts->tmax) {
                ts->tmax = tot;
                ts->crit = stage;
            }
            ts->tot_s[stage] = tot;
            stage_memory_check(e, s, k, stage, po);
            /* Adam step over this device's shard: memory bound (the
             * same as the stage before when its size and pool are) */
            double P = stage_params(e->ctx, e->mc, pl, stage);
            if (P != opt_P || pool != opt_pool) {
                double shard = P / (pl->zero >= 1 ? e->D : 1);
                opt_t = shard * e->opt_bytes / (po->device.memory_bw_GBps * 1e9 * p->mem_eff);
                opt_P = P;
                opt_pool = pool;
            }
            ts->opt_max = AI_MAX(ts->opt_max, opt_t);
        }
    }
    ts->nstages = stage;
}

/* Data-parallel traffic per stage and what hides it. Gradients of the
 * last micro-batch are reduced during its backward (bucketed, Li et al.,
 * "PyTorch Distributed", VLDB 2020); stage i also has the drain of stages
 * 0..i-1 ahead of the end of the step. The distributed optimizer's
 * parameter all-gather overlaps the next step's first forward the same
 * way. The exposed parts, backward and forward, are the largest over
 * stages. */
static void set_dp_exposed(const plan_eval *e, const model_set *s, const stage_time *st, double *exp_b,
                           double *exp_f)
{
    const model_plan *pl = e->pl;
    const model_params *p = &e->ctx->params;
    double mb = s->micro_batches;
    double slack_b = 0, slack_f = 0;
    *exp_b = 0;
    *exp_f = 0;
    /* consecutive stages of the same size on the same group (one pool's
     * run) share their collective times */
    double prevP = -1, rs = 0, ag = 0, ar = 0;
    model_group prevg = {0}, gdp = {0};
    /* the group changes only where a set's pool does: never when every
     * set is one pool, at segment edges when there is one set */
    int one_seg = 1, gpool = -2;
    for (int q = 0; q < pl->nsets; q++)
        one_seg &= pl->sets[q].nsegs == 1;
    for (int i = 0; i < pl->pp && e->D > 1; i++) {
        double P = stage_params(e->ctx, e->mc, pl, i);
        double win_b = p->dp_overlap * st[i].b + slack_b;
        double win_f = p->dp_overlap * st[i].f + slack_f;
        double e_b = 0, e_f = 0;
        int key = one_seg ? -1 : pl->nsets == 1 ? set_stage_pool(&pl->sets[0], i) : -3 - i;
        if (key != gpool) {
            stage_dp_group(e->ctx, pl, i, e->D, &gdp);
            gpool = key;
        }
        if (P != prevP || gdp.ranks != prevg.ranks || gdp.per_node != prevg.per_node ||
            gdp.intra_Bps != prevg.intra_Bps || gdp.intra_alpha_s != prevg.intra_alpha_s ||
            gdp.inter_Bps != prevg.inter_Bps || gdp.inter_alpha_s != prevg.inter_alpha_s) {
            if (pl->zero == 0) {
                ar = model_group_coll_time(AI_ALLREDUCE, &gdp, P * e->gb, p->link_eff);
            } else {
                rs = model_group_coll_time(AI_REDUCE_SCATTER, &gdp, P * e->gb, p->link_eff);
                ag = model_group_coll_time(AI_ALLGATHER, &gdp, P * e->wb, p->link_eff);
            }
            prevP = P;
            prevg = gdp;
        }
        /* With v model chunks per device the buckets follow the chunks: a
         * chunk's gradients are reduced as soon as its last backward ends,
         * under the other chunks' backward, and its weights gathered under
         * the forward of the chunks before it. The interleaved schedule
         * runs each chunk for a group of p micro-batches before the next
         * (Narayanan et al. SC'21, 2.2.2), so chunk j's last backward is
         * followed by j groups of p chunk-backwards: the reductions of
         * chunks v-1..1 have (v-1)/v x p backwards of the stage to run in,
         * one after another on the network, and chunk 0's waits at the
         * end. What is exposed: one chunk's share when the network keeps
         * up, the excess over that window when it does not (for v = 1,
         * all of it). The gathers mirror this in the forward. */
        double v = pl->interleave;
        double groups = (v - 1) / v * AI_MIN(mb, pl->pp);
        switch (pl->zero) {
        case 0:
            e_b = AI_MAX(0, AI_MAX(ar / v, ar - groups * st[i].b) - win_b);
            break;
        case 1:
            e_b = AI_MAX(0, AI_MAX(rs / v, rs - groups * st[i].b) - win_b);
            e_f = AI_MAX(0, AI_MAX(ag / v, ag - groups * st[i].f) - win_f);
            break;
        case 2:
            /* Sharded gradients: reduce-scatter every micro-batch. */
            e_b = AI_MAX(0, rs - p->dp_overlap * st[i].b) * (mb - 1) + AI_MAX(0, rs - win_b);
            e_f = AI_MAX(0, ag - win_f);
            break;
        default:
            /* Weights gathered for forward and again for backward of
             * every micro-batch, gradients scattered every time. */
            e_f = mb * AI_MAX(0, ag - p->dp_overlap * st[i].f);
            e_b = mb * AI_MAX(0, ag + rs - p->dp_overlap * st[i].b);
            break;
        }
        *exp_b = AI_MAX(*exp_b, e_b);
        *exp_f = AI_MAX(*exp_f, e_f);
        slack_b += st[i].b;
        slack_f += st[i].f;
    }
}

void model_plan_eval(const model_ctx *ctx, const model_plan *pl, model_result *out)
{
    const topo_model *m = ctx->model;
    const topo_training *t = ctx->train;
    const model_params *p = &ctx->params;
    plan_eval e;
    memset(&e, 0, sizeof e);
    e.ctx = ctx;
    e.mc = cache_of(ctx);
    e.pl = pl;
    e.r.feasible = 1;
    e.worst_slack = INFINITY;
    int dp_total = plan_total_dp(pl);
    double best_step = -1;
    e.D = dp_total * pl->cp;
    int mixed = t->precision != TOPO_FP32;
    e.wb = mixed ? 2 : 4;
    e.gb = mixed && !t->grad_fp32 ? 2 : 4;
    e.opt_bytes = t->optimizer == TOPO_OPT_ADAM ? (mixed ? 30 : 28) : (mixed ? 18 : 12);
    model_result *r = &e.r;

    for (int k = 0; k < pl->nsets; k++) {
        const model_set *s = &pl->sets[k];
        set_times ts;
        set_stage_times(&e, k, &ts);
        double mb = s->micro_batches;
        double pipe = model_1f1b_time(s->micro_batches, ts.nstages, ts.tot_s, pl->interleave, NULL);
        double fill = pl->interleave > 1 ? 2 * (pl->pp - 1) * ts.send_max : 0;
        pipe += fill;
        double exp_b, exp_f;
        set_dp_exposed(&e, s, ts.st, &exp_b, &exp_f);
        /* What every step pays whatever the scale: the optimizer's launch
         * and gradient-norm all-reduce, the loss reduction, the data
         * loader's hand-over, logging. */
        double opt_max = ts.opt_max + p->step_fixed_s;
        double step = pipe + exp_b + exp_f + opt_max;
        if (step > best_step) {
            best_step = step;
            const stage_time *x = &ts.st[ts.crit];
            r->compute_s = mb * x->comp;
            r->recompute_s = mb * x->rc;
            r->tp_comm_s = mb * x->tp;
            r->cp_comm_s = mb * x->cp;
            r->pp_comm_s = mb * x->p2p + fill;
            r->bubble_s = pipe - fill - mb * ts.tmax;
            r->dp_comm_s = exp_b + exp_f;
            r->optimizer_s = opt_max;
        }
    }
    r->step_s = best_step;
    r->devices = dp_total * pl->tp * pl->cp * pl->pp;
    r->tokens_per_s = (double)t->global_batch * t->seq_len / r->step_s;
    r->model_flops = model_step_model_flops(m, t);
    r->hw_flops = model_step_hw_flops(m, t, pl->recompute);
    r->model_tflops_per_device = r->model_flops / r->step_s / r->devices / 1e12;
    r->hw_tflops_per_device = r->hw_flops / r->step_s / r->devices / 1e12;
    r->mfu = r->model_flops / r->step_s / e.peak_sum;
    *out = e.r;
}

void model_pool_layer_time(const model_ctx *ctx, const model_plan *pl, int pool, double *per_layer_s,
                           double *last_extra_s)
{
    layer_cost lc;
    pool_layer_cost(ctx, cache_of(ctx), pl, pool, &lc);
    *per_layer_s = lc.f + lc.b + lc.rc + lc.f_tp + lc.b_tp + lc.rc_tp + lc.cp;
    *last_extra_s = lc.logits_f + lc.logits_b;
}
