/*
 * The planner's search.
 *
 * Order (outer to inner): tp (large first), cp, micro-batch, sequence
 * parallelism, then the layout (pp and dp, which pools host which stages,
 * how layers or micro-batches split), then recompute and ZeRO stage. Exact
 * rules of the step model keep the inner loops short:
 *  - recompute none <= selective <= full in time, so once a mode fits with
 *    ZeRO 0 or 1 the costlier modes are not tried;
 *  - ZeRO 2 and 3 only add traffic over ZeRO 1, so they are tried only when
 *    ZeRO 1 does not fit;
 *  - a layout whose lower bound cannot beat the kept plans is skipped.
 * Everything else is evaluated; plans that do not fit are counted and
 * dropped, never returned.
 */
#include "plan/spec/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_fix_init(plan_fix *f)
{
    f->tp = f->pp = f->dp = f->cp = f->micro_batch = f->interleave = -1;
    f->recompute = f->sequence_parallel = f->zero = -1;
}

static ai_status_t fix_bool(const char *key, const char *v, int *out)
{
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "yes"))
        *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "no"))
        *out = 0;
    else
        return util_fail(AI_ERR_INVALID, "--fix %s=%s: expected true or false", key, v);
    return AI_OK;
}

ai_status_t plan_fix_parse(const char *text, plan_fix *out)
{
    plan_fix f;
    plan_fix_init(&f);
    if (!text) {
        *out = f;
        return AI_OK;
    }
    char buf[512];
    if (strlen(text) >= sizeof buf)
        return util_fail(AI_ERR_INVALID, "--fix: value too long");
    snprintf(buf, sizeof buf, "%s", text);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1])
            return util_fail(AI_ERR_INVALID, "--fix: '%s' is not key=value", item);
        *eq = '\0';
        const char *k = item, *v = eq + 1;
        int *slot = NULL;
        if (!strcmp(k, "tp")) slot = &f.tp;
        else if (!strcmp(k, "pp")) slot = &f.pp;
        else if (!strcmp(k, "dp")) slot = &f.dp;
        else if (!strcmp(k, "cp")) slot = &f.cp;
        else if (!strcmp(k, "micro_batch") || !strcmp(k, "mb")) slot = &f.micro_batch;
        else if (!strcmp(k, "interleave") || !strcmp(k, "vp")) slot = &f.interleave;
        else if (!strcmp(k, "zero")) slot = &f.zero;
        if (slot) {
            long n;
            if (util_parse_long(v, &n) != AI_OK || n < 0 || n > 1000000 || (n < 1 && slot != &f.zero))
                return util_fail(AI_ERR_INVALID, "--fix %s=%s: expected a positive integer%s", k, v,
                                 slot == &f.zero ? " (zero: 0..3)" : "");
            if (slot == &f.zero && n > 3)
                return util_fail(AI_ERR_INVALID, "--fix zero=%s: ZeRO stage is 0..3", v);
            *slot = (int)n;
        } else if (!strcmp(k, "recompute")) {
            if (!strcmp(v, "none")) f.recompute = MODEL_RC_NONE;
            else if (!strcmp(v, "selective")) f.recompute = MODEL_RC_SELECTIVE;
            else if (!strcmp(v, "full")) f.recompute = MODEL_RC_FULL;
            else
                return util_fail(AI_ERR_INVALID, "--fix recompute=%s: expected none, selective or full", v);
        } else if (!strcmp(k, "sequence_parallel") || !strcmp(k, "sp")) {
            ai_status_t st = fix_bool(k, v, &f.sequence_parallel);
            if (st != AI_OK)
                return st;
        } else {
            return util_fail(AI_ERR_INVALID,
                             "--fix: unknown key '%s' (tp, pp, dp, cp, micro_batch, interleave, "
                             "recompute, sequence_parallel, zero)", k);
        }
    }
    *out = f;
    return AI_OK;
}

/* ------------------------------------------------------------ search */

typedef struct search {
    const model_ctx *ctx;
    const plan_fix *fix;
    int top, nbest;
    plan_candidate *best;
    plan_stats st;
    /* closest miss, for the infeasible message */
    double closest_ratio;
    model_result closest;
    model_plan closest_plan;
    /* per-pool layer times for the current (tp, cp, mb, sp, rc) */
    double layer_s[64], extra_s[64];
    long layer_gen; /* bumped when they change */
    /* the data split does not depend on the ZeRO stage: computed once per
     * layer_gen, its plan kept in the search's plan between the stages */
    long split_gen;
    int split_ret;
} search;

static int pinned(int fixv, int v) { return fixv < 0 || fixv == v; }

int plan_why_value(const model_plan *pl, int dim)
{
    switch (dim) {
    case PLAN_WHY_TP: return pl->tp;
    case PLAN_WHY_PP: return pl->pp;
    case PLAN_WHY_CP: return pl->cp;
    case PLAN_WHY_MB: return pl->micro_batch;
    case PLAN_WHY_VP: return pl->interleave;
    case PLAN_WHY_RC: return (int)pl->recompute;
    case PLAN_WHY_ZERO: return pl->zero;
    default: return pl->nsets > 1 ? 2 : pl->sets[0].nsegs > 1 ? 1 : 0;
    }
}

/* Record a plan the step model evaluated for the explanation. */
static void why_note(search *s, const model_plan *pl, int fits, const model_result *r)
{
    plan_why *w = &s->st.why;
    for (int d = 0; d < PLAN_WHY_NDIMS; d++) {
        int v = plan_why_value(pl, d);
        if (v < 0 || v >= PLAN_WHY_VALUES)
            continue;
        if (!fits)
            w->unfit[d][v]++;
        else if (r->step_s < w->best_s[d][v])
            w->best_s[d][v] = r->step_s;
    }
    unsigned long long used = 0;
    for (int k = 0; k < pl->nsets; k++)
        for (int j = 0; j < pl->sets[k].nsegs; j++)
            if (pl->sets[k].seg_pool[j] < PLAN_WHY_POOLS)
                used |= 1ULL << pl->sets[k].seg_pool[j];
    for (int g = 0; g < PLAN_WHY_POOLS && used >> g; g++) {
        if (!(used >> g & 1))
            continue;
        if (!fits)
            w->pool_unfit[g]++;
        else if (r->step_s < w->pool_best_s[g])
            w->pool_best_s[g] = r->step_s;
    }
    if (!fits)
        return;
    if (r->step_s < w->first_s) {
        /* the old best becomes the runner-up */
        if (s->nbest > 0) {
            w->second = s->best[0];
            w->has_second = 1;
        }
        w->first_s = r->step_s;
    } else if (!w->has_second || r->step_s < w->second.res.step_s) {
        w->second.plan = *pl;
        w->second.res = *r;
        w->has_second = 1;
    }
}

/* Evaluate; keep if feasible and among the best. Returns feasibility. */
static int consider(search *s, const model_plan *pl)
{
    if (model_plan_check(s->ctx, pl) != AI_OK) {
        util_clear_error();
        return 0;
    }
    model_result r;
    s->st.evaluated++;
    double ratio;
    if (!model_plan_fits(s->ctx, pl, &ratio)) {
        s->st.pruned_memory++;
        why_note(s, pl, 0, NULL);
        if (ratio < s->closest_ratio) {
            model_plan_eval(s->ctx, pl, &r);
            s->closest_ratio = ratio;
            s->closest = r;
            s->closest_plan = *pl;
        }
        return 0;
    }
    model_plan_eval(s->ctx, pl, &r);
    why_note(s, pl, 1, &r);
    if (s->nbest == s->top && r.step_s >= s->best[s->nbest - 1].res.step_s)
        return 1;
    int i = s->nbest < s->top ? s->nbest++ : s->nbest - 1;
    while (i > 0 && s->best[i - 1].res.step_s > r.step_s) {
        s->best[i] = s->best[i - 1];
        i--;
    }
    s->best[i].plan = *pl;
    s->best[i].res = r;
    return 1;
}

/* Per-pool layer times for the plan's (tp, cp, mb, sp, recompute), used by
 * the layer balancer and the lower bound; refreshed per recompute mode. */
static void refresh_layer_times(search *s, const model_plan *pl)
{
    s->layer_gen++;
    for (int g = 0; g < s->ctx->cluster->npools && g < 64; g++)
        model_pool_layer_time(s->ctx, pl, g, &s->layer_s[g], &s->extra_s[g]);
}

/* Try recompute modes and ZeRO stages on a layout (plan with everything
 * else set). The layout callback re-derives layer splits that depend on
 * recompute (memory caps), so it is called per mode. */
typedef int (*layout_fn)(search *s, model_plan *pl, void *arg);

static void try_modes(search *s, model_plan *pl, layout_fn layout, void *arg)
{
    const plan_fix *f = s->fix;
    for (int rc = MODEL_RC_NONE; rc <= MODEL_RC_FULL; rc++) {
        if (!pinned(f->recompute, rc))
            continue;
        /* Selective recompute only drops attention scores; with flash
         * attention there are none, so it equals "none". */
        if (rc == MODEL_RC_SELECTIVE && s->ctx->train->flash_attention && f->recompute < 0)
            continue;
        pl->recompute = (model_recompute)rc;
        refresh_layer_times(s, pl);
        /* ZeRO 0 and 1 first. If ZeRO-1 fits, 2 and 3 cannot be faster (they
         * add traffic, same optimizer shard); if 1 does not fit, 0 does not
         * either, so 2 and 3 are tried. */
        int fit01 = 0;
        for (int pass = 0; pass < 2 && !fit01; pass++) {
            for (int z = pass ? 2 : 0; z <= (pass ? 3 : 1); z++) {
                if (!pinned(f->zero, z))
                    continue;
                pl->zero = z;
                if (!layout(s, pl, arg))
                    continue;
                int ok = consider(s, pl);
                if (!pass)
                    fit01 |= ok;
            }
        }
        /* Costlier recompute only adds time (its longer backward can hide
         * more DP traffic, but never more than the time it adds), so once a
         * mode fits with ZeRO 0/1 the costlier modes are not tried. */
        if (fit01 && f->recompute < 0)
            break;
    }
}

/* Pool hosting `stage` of set `set`. */
static int stage_pool_of(const model_plan *pl, int set, int stage)
{
    const model_set *st = &pl->sets[set];
    for (int j = 0, base = 0; j < st->nsegs; base += st->seg_stages[j], j++)
        if (stage < base + st->seg_stages[j])
            return st->seg_pool[j];
    return st->seg_pool[st->nsegs - 1];
}

/*
 * Branch and bound: a layout whose step time cannot beat the slowest plan
 * already kept is skipped before its layers are split or its memory is
 * computed. The bound is exact for the model: the critical stage time is at
 * least the balanced continuous optimum L / sum_i(1 / c_i), c_i the
 * per-layer time of stage i's pool, and the step is at least m times it.
 */
static int bound_prunes(search *s, double lower_bound)
{
    if (s->nbest < s->top || lower_bound < s->best[s->nbest - 1].res.step_s)
        return 0;
    s->st.pruned_bound++;
    return 1;
}

typedef struct stage_run {
    double c, ex;
    int cap, n;
} stage_run;

/* Do the stages hold L layers when each takes min(cap, (tau - ex) / c)? */
static int covers(const stage_run *r, int nruns, double tau, int L)
{
    long sum = 0;
    for (int k = 0; k < nruns && sum < L; k++)
        sum += (long)r[k].n * AI_MIN(r[k].cap, (int)AI_MAX(0, floor((tau - r[k].ex) / r[k].c)));
    return sum >= L;
}

/*
 * Uneven layer split for one set's stages: the smallest time target tau
 * such that stages can hold all layers when stage i takes
 * min((tau - extra_i) / layer_time_i, memory cap_i) layers. Memory per
 * stage is linear in its layer count (model_stage_memory), so two probes
 * give its slope and intercept.
 */
static int balance_layers(search *s, model_plan *pl, int set)
{
    const model_ctx *ctx = s->ctx;
    int pp = pl->pp, L = ctx->model->layers;
    int cap[MODEL_MAX_STAGES];
    double c[MODEL_MAX_STAGES], ex[MODEL_MAX_STAGES];
    int m = pl->sets[set].micro_batches;
    if (pp < 1 || pp > MODEL_MAX_STAGES)
        return 0;
    for (int i = 0; i < pp; i++) {
        int pool = stage_pool_of(pl, set, i);
        c[i] = s->layer_s[pool];
        ex[i] = i == pp - 1 ? s->extra_s[pool] : 0;
    }
    if (bound_prunes(s, model_1f1b_bound(m, L, pp, c)))
        return 0;
    for (int i = 0; i < pp; i++)
        pl->layers[i] = 1;
    for (int i = 0; i < pp; i++) {
        int pool = stage_pool_of(pl, set, i);
        double m1, m2;
        model_stage_memory_probe(ctx, pl, i, m, &m1, &m2);
        double slope = m2 - m1, base = m1 - slope;
        double mem = ctx->cluster->pools[pool].device.memory_GB * 1e9 * MODEL_MEM_USABLE;
        double k = slope > 0 ? floor((mem - base) / slope) : L;
        if (k < 1)
            return 0;
        cap[i] = (int)AI_MIN(k, (double)L);
    }
    long total = 0;
    for (int i = 0; i < pp; i++)
        total += cap[i];
    if (total < L)
        return 0;
    /* Bracket: without caps the unrounded capacity is tau S - E, so tau
     * in [(L + E)/S, (L + pp + E)/S] covers the rounding loss of at most
     * one layer per stage; caps can only push tau up (then widen). */
    double S = 0, E = 0, wide = 0;
    for (int i = 0; i < pp; i++) {
        S += 1 / c[i];
        E += ex[i] / c[i];
        wide = AI_MAX(wide, ex[i] + c[i] * cap[i]);
    }
    /* Runs of consecutive stages alike (same per-layer time, extra and
     * cap: the same pool away from the pipeline's ends) count once. */
    stage_run runs[MODEL_MAX_STAGES];
    int nruns = 0;
    for (int i = 0; i < pp; i++) {
        if (nruns && runs[nruns - 1].c == c[i] && runs[nruns - 1].ex == ex[i] &&
            runs[nruns - 1].cap == cap[i]) {
            runs[nruns - 1].n++;
        } else {
            runs[nruns++] = (stage_run){c[i], ex[i], cap[i], 1};
        }
    }
    double lo = (L + E) / S, hi = (L + pp + E) / S;
    if (!covers(runs, nruns, hi, L)) {
        lo = hi;
        hi = wide;
    }
    for (int it = 0; it < 30; it++) {
        double tau = 0.5 * (lo + hi);
        if (covers(runs, nruns, tau, L))
            hi = tau;
        else
            lo = tau;
    }
    int sum = 0;
    for (int i = 0; i < pp; i++) {
        int l = AI_MIN(cap[i], (int)AI_MAX(0, floor((hi - ex[i]) / c[i])));
        pl->layers[i] = (short)AI_MAX(1, l);
        sum += pl->layers[i];
    }
    /* Trim the excess from the slowest stages that can give a layer. */
    while (sum > L) {
        int w = -1;
        for (int i = 0; i < pp; i++)
            if (pl->layers[i] > 1 && (w < 0 || pl->layers[i] * c[i] + ex[i] > pl->layers[w] * c[w] + ex[w]))
                w = i;
        if (w < 0)
            return 0;
        pl->layers[w]--;
        sum--;
    }
    return sum == L;
}

/* Even split; the remainder goes to the middle stages (the first holds the
 * most activations, the last the output layer). */
static void uniform_layers(model_plan *pl, int L)
{
    int pp = pl->pp, base = L / pp, rem = L % pp;
    for (int i = 0; i < pp; i++)
        pl->layers[i] = (short)base;
    for (int k = 0, i = pp > 2 ? 1 : 0; k < rem; k++, i = (i + 1 < pp ? i + 1 : 0))
        pl->layers[i]++;
}

/* ---- layouts ---- */

typedef struct uni_arg {
    int balanced;
} uni_arg;

static int layout_single(search *s, model_plan *pl, void *arg)
{
    const uni_arg *a = arg;
    if (!a->balanced) {
        int L = s->ctx->model->layers;
        if (bound_prunes(s, model_1f1b_uniform_bound(pl->sets[0].micro_batches, L, pl->pp,
                                                     s->layer_s[0])))
            return 0;
        uniform_layers(pl, L);
        return 1;
    }
    return balance_layers(s, pl, 0);
}

static int layout_stage_split(search *s, model_plan *pl, void *arg)
{
    (void)arg;
    return balance_layers(s, pl, 0);
}

/* The same split, kept only when every stage's layers divide into the
 * plan's virtual stages (pools of equal speed give equal stages). */
static int layout_stage_split_interleaved(search *s, model_plan *pl, void *arg)
{
    (void)arg;
    if (!balance_layers(s, pl, 0))
        return 0;
    for (int i = 0; i < pl->pp; i++)
        if (pl->layers[i] % pl->interleave)
            return 0;
    return 1;
}

/* Stage blocks of `block` devices tile nodes of dpn devices. */
static int tiles(int block, int dpn) { return block % dpn == 0 || dpn % block == 0; }

static int largest_dp(int gb, int mb, int limit, int fixdp, int unit, int dpn)
{
    if (fixdp > 0)
        return fixdp <= limit && gb % (fixdp * mb) == 0 ? fixdp : 0;
    for (int d = limit; d >= 1; d--)
        if (gb % (d * mb) == 0 && tiles(unit * d, dpn))
            return d;
    return 0;
}

static void search_single_pool(search *s, model_plan *pl)
{
    const model_ctx *ctx = s->ctx;
    const topo_pool *po = &ctx->cluster->pools[0];
    int N = po->nodes * po->devices_per_node;
    int L = ctx->model->layers, gb = ctx->train->global_batch;
    int maxpp = AI_MIN(L, MODEL_MAX_STAGES);
    for (int pp = 1; pp <= maxpp; pp++) {
        if (!pinned(s->fix->pp, pp))
            continue;
        int per = pl->tp * pl->cp * pp;
        if (per > N)
            break;
        int dp = largest_dp(gb, pl->micro_batch, N / per, s->fix->dp, pl->tp * pl->cp, po->devices_per_node);
        if (!dp)
            continue;
        pl->pp = pp;
        pl->nsets = 1;
        model_set *st = &pl->sets[0];
        memset(st, 0, sizeof *st);
        st->dp = dp;
        st->micro_batches = gb / (dp * pl->micro_batch);
        st->nsegs = 1;
        st->seg_pool[0] = 0;
        st->seg_stages[0] = pp;
        static const int vs[] = {1, 2, 3, 4, 6, 8};
        for (size_t k = 0; k < AI_ARRAY_LEN(vs); k++) {
            int v = vs[k];
            if (!pinned(s->fix->interleave, v))
                continue;
            if (v > 1 && (pp < 2 || L % (pp * v) || st->micro_batches % pp))
                continue;
            pl->interleave = v;
            uni_arg a = {0};
            try_modes(s, pl, layout_single, &a);
        }
        /* Uneven split that relieves the last stage of the output layer
         * and the first of its extra activations. */
        if (pp > 1 && pinned(s->fix->interleave, 1)) {
            pl->interleave = 1;
            uni_arg a = {1};
            try_modes(s, pl, layout_single, &a);
        }
    }
}

/* Heterogeneous, split by stage: pools in a given order host contiguous
 * runs of stages; all stages have the same dp. */
static void search_stage_split(search *s, model_plan *pl, const int *order, int norder)
{
    const model_ctx *ctx = s->ctx;
    const topo_cluster *c = ctx->cluster;
    int L = ctx->model->layers, gb = ctx->train->global_batch;
    int unit = pl->tp * pl->cp;
    int maxdev = 0;
    for (int k = 0; k < norder; k++)
        maxdev = AI_MAX(maxdev, c->pools[order[k]].nodes * c->pools[order[k]].devices_per_node);
    for (int dp = maxdev / unit; dp >= 1; dp--) {
        if (gb % (dp * pl->micro_batch) || !pinned(s->fix->dp, dp))
            continue;
        int stages[MODEL_MAX_SEGS], pp = 0, ok = 1;
        for (int k = 0; k < norder; k++) {
            const topo_pool *po = &c->pools[order[k]];
            stages[k] = po->nodes * po->devices_per_node / (unit * dp);
            if (stages[k] < 1)
                ok = 0;
            pp += stages[k];
        }
        if (!ok || pp > AI_MIN(L, MODEL_MAX_STAGES))
            continue;
        if (s->fix->pp > 0) {
            /* Drop stages from the back (the later pools) to meet it. */
            for (int k = norder - 1; k >= 0 && pp > s->fix->pp; k--) {
                int cut = AI_MIN(stages[k] - 1, pp - s->fix->pp);
                stages[k] -= cut;
                pp -= cut;
            }
            if (pp != s->fix->pp)
                continue;
        }
        pl->pp = pp;
        pl->interleave = 1;
        pl->nsets = 1;
        model_set *st = &pl->sets[0];
        memset(st, 0, sizeof *st);
        st->dp = dp;
        st->micro_batches = gb / (dp * pl->micro_batch);
        st->nsegs = norder;
        for (int k = 0; k < norder; k++) {
            st->seg_pool[k] = order[k];
            st->seg_stages[k] = stages[k];
        }
        if (pinned(s->fix->interleave, 1))
            try_modes(s, pl, layout_stage_split, NULL);
        /* Interleaving needs equal stages, which only pools of one device
         * give (they differ in links only): not worth trying otherwise. */
        int same = 1;
        for (int k = 1; k < norder; k++)
            same &= !strcmp(c->pools[order[k]].device.name, c->pools[order[0]].device.name);
        static const int vs[] = {2, 3, 4, 6, 8};
        for (size_t k = 0; k < AI_ARRAY_LEN(vs) && same && pp > 1 && st->micro_batches % pp == 0; k++) {
            if (!pinned(s->fix->interleave, vs[k]) || L % (pp * vs[k]))
                continue;
            pl->interleave = vs[k];
            try_modes(s, pl, layout_stage_split_interleaved, NULL);
        }
        pl->interleave = 1;
    }
}

/*
 * Heterogeneous, split by data: each pool runs its own replicas of the
 * same pipeline; micro-batches go where they finish soonest. Given the
 * per-pool stage time t_g, a pool with dp_g replicas can do
 * floor(tau / t_g) - (pp - 1) micro-batches per replica by time tau
 * (1F1B); the smallest tau that covers the batch decides the split.
 */
static int layout_data_split_once(search *s, model_plan *pl);

static int layout_data_split(search *s, model_plan *pl, void *arg)
{
    (void)arg;
    if (s->split_gen != s->layer_gen) {
        s->split_ret = layout_data_split_once(s, pl);
        s->split_gen = s->layer_gen;
    }
    return s->split_ret;
}

static int layout_data_split_once(search *s, model_plan *pl)
{
    const model_ctx *ctx = s->ctx;
    const topo_cluster *c = ctx->cluster;
    int L = ctx->model->layers, gb = ctx->train->global_batch;
    int M = gb / pl->micro_batch;
    int np = AI_MIN(c->npools, MODEL_MAX_SETS);
    int pp = pl->pp, v = pl->interleave;
    int unit = pl->tp * pl->cp * pp;
    int dpg[MODEL_MAX_SETS], total = 0;
    /* Interleaving: equal stages of whole chunks, micro-batches in groups
     * of pp on every replica (so every pool's share is a multiple of pp). */
    int grp = v > 1 ? pp : 1;
    if (v > 1 && (L % (pp * v) || M % pp))
        return 0;
    double tg[MODEL_MAX_SETS];
    int lmax = (L + pp - 1) / pp;
    for (int g = 0; g < np; g++) {
        dpg[g] = c->pools[g].nodes * c->pools[g].devices_per_node / unit;
        while (dpg[g] > 0 && !tiles(pl->tp * pl->cp * dpg[g], c->pools[g].devices_per_node))
            dpg[g]--;
        total += dpg[g];
        tg[g] = lmax * s->layer_s[g] + s->extra_s[g] / pp;
    }
    if (total < 1 || (s->fix->dp > 0 && s->fix->dp != total))
        return 0;
    double lo = 0, hi = INFINITY;
    for (int g = 0; g < np; g++)
        if (dpg[g])
            hi = AI_MIN(hi, (double)(M / dpg[g] + pp + grp + 1) * tg[g]);
    for (int it = 0; it < 40; it++) {
        double tau = 0.5 * (lo + hi);
        long cap = 0;
        for (int g = 0; g < np; g++)
            if (dpg[g])
                cap += (long)dpg[g] * model_1f1b_micro_within_v(tau, tg[g], pp, v);
        if (cap >= M)
            hi = tau;
        else
            lo = tau;
    }
    int share[MODEL_MAX_SETS], left = M;
    for (int g = 0; g < np; g++) {
        long cap = dpg[g] ? (long)dpg[g] * model_1f1b_micro_within_v(hi, tg[g], pp, v) : 0;
        share[g] = (int)AI_MIN(cap, (long)left);
        left -= share[g];
    }
    if (left > 0)
        return 0;
    pl->nsets = 0;
    for (int g = 0; g < np; g++) {
        if (!share[g])
            continue;
        model_set *st = &pl->sets[pl->nsets++];
        memset(st, 0, sizeof *st);
        /* Only as many replicas as have work (groups of grp micro-batches). */
        int groups = share[g] / grp;
        st->dp = AI_MIN(dpg[g], groups);
        while (st->dp > 1 && !tiles(pl->tp * pl->cp * st->dp, c->pools[g].devices_per_node))
            st->dp--;
        st->micro_batches = (groups + st->dp - 1) / st->dp * grp;
        st->total_micro = share[g];
        st->nsegs = 1;
        st->seg_pool[0] = g;
        st->seg_stages[0] = pp;
    }
    if (pl->nsets < 2)
        return 0; /* one pool alone is covered by the stage-split search */
    uniform_layers(pl, L);
    return 1;
}

/*
 * Heterogeneous, split by data: each pool runs its own replicas of the
 * same pipeline; micro-batches go where they finish soonest. Given the
 * per-pool stage time t_g, a pool with dp_g replicas can do
 * floor(tau / t_g) - (pp - 1) micro-batches per replica by time tau
 * (1F1B); the smallest tau that covers the batch decides the split.
 */
static void search_data_split(search *s, model_plan *pl)
{
    const model_ctx *ctx = s->ctx;
    int L = ctx->model->layers, gb = ctx->train->global_batch;
    if (gb % pl->micro_batch)
        return;
    for (int pp = 1; pp <= AI_MIN(L, MODEL_MAX_STAGES); pp++) {
        if (!pinned(s->fix->pp, pp))
            continue;
        int unit = pl->tp * pl->cp * pp, any = 0;
        for (int g = 0; g < ctx->cluster->npools; g++)
            any |= ctx->cluster->pools[g].nodes * ctx->cluster->pools[g].devices_per_node >= unit;
        if (!any)
            break;
        pl->pp = pp;
        /* Every replica is a pipeline of equal stages on one pool, so it
         * can interleave as a homogeneous one does: any number of model
         * chunks up to 8 that divides the stage's layers. */
        for (int v = 1; v <= 8; v++) {
            if (!pinned(s->fix->interleave, v) || (v > 1 && (pp < 2 || L % (pp * v))))
                continue;
            pl->interleave = v;
            try_modes(s, pl, layout_data_split, NULL);
        }
        pl->interleave = 1;
    }
}

static int next_perm(int *a, int n)
{
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0)
        return 0;
    int j = n - 1;
    while (a[j] <= a[i])
        j--;
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return 1;
}

static void search_layouts(search *s, model_plan *pl)
{
    const topo_cluster *c = s->ctx->cluster;
    if (c->npools == 1) {
        search_single_pool(s, pl);
        return;
    }
    /* Stage split over every non-empty subset of pools, in every order
     * (subsets and orders are few: pools <= 4 in any real cluster; beyond
     * that only the given order is tried). */
    int np = c->npools;
    if (np <= 4) {
        for (int mask = 1; mask < (1 << np); mask++) {
            int order[MODEL_MAX_SEGS], n = 0;
            for (int g = 0; g < np; g++)
                if (mask & (1 << g))
                    order[n++] = g;
            do {
                search_stage_split(s, pl, order, n);
            } while (next_perm(order, n));
        }
    } else if (np <= MODEL_MAX_SEGS) {
        int order[MODEL_MAX_SEGS];
        for (int g = 0; g < np; g++)
            order[g] = g;
        search_stage_split(s, pl, order, np);
    }
    search_data_split(s, pl);
}

ai_status_t plan_search(const model_ctx *ctx, const plan_fix *fix, int top, plan_candidate **out,
                        int *nout, plan_stats *stats)
{
    double t0 = ai_now();
    search s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx;
    s.fix = fix;
    s.top = AI_MAX(1, top);
    s.closest_ratio = INFINITY;
    for (int d = 0; d < PLAN_WHY_NDIMS; d++)
        for (int v = 0; v < PLAN_WHY_VALUES; v++)
            s.st.why.best_s[d][v] = INFINITY;
    for (int g = 0; g < PLAN_WHY_POOLS; g++)
        s.st.why.pool_best_s[g] = INFINITY;
    s.st.why.first_s = INFINITY;
    s.best = calloc((size_t)s.top, sizeof *s.best);
    model_plan *pl = calloc(1, sizeof *pl);
    if (!s.best || !pl) {
        free(s.best);
        free(pl);
        return util_fail(AI_ERR_NOMEM, "planner");
    }
    if (ctx->cluster->npools > 64) {
        free(s.best);
        free(pl);
        return util_fail(AI_ERR_UNSUPPORTED, "more than 64 distinct node pools");
    }
    const topo_model *m = ctx->model;
    const topo_training *t = ctx->train;
    int maxdpn = 0;
    for (int g = 0; g < ctx->cluster->npools; g++)
        maxdpn = AI_MAX(maxdpn, ctx->cluster->pools[g].devices_per_node);
    int any_prec = 0;
    for (int g = 0; g < ctx->cluster->npools; g++)
        any_prec |= ctx->cluster->pools[g].device.peak_tflops[t->precision] > 0;
    if (!any_prec) {
        free(s.best);
        free(pl);
        return util_fail(AI_ERR_UNSUPPORTED, "no device of cluster %s has a %s peak (device %s)",
                         ctx->cluster->name, topo_precision_name(t->precision),
                         ctx->cluster->pools[0].device.name);
    }
    /* Candidate values, or the pinned one. */
    int cps[4] = {1, 2, 4, 8}, ncp = 4, mbs[4] = {1, 2, 4, 8}, nmb = 4;
    if (fix->cp > 0) {
        cps[0] = fix->cp;
        ncp = 1;
    }
    if (fix->micro_batch > 0) {
        mbs[0] = fix->micro_batch;
        nmb = 1;
    }
    /* per-pool layer costs and per-layer figures kept across the plans */
    model_cache *mc = model_cache_new();
    model_cache_bind(ctx, mc);
    /* Large tp first: it usually fits, so good plans are found early and
     * the lower bound cuts more of the rest. */
    for (int tp = AI_MAX(maxdpn, fix->tp); tp >= 1; tp--) {
        if (!pinned(fix->tp, tp) || m->heads % tp || (m->kv_heads % tp && tp % m->kv_heads))
            continue;
        for (int ci = 0; ci < ncp; ci++) {
            int cp = cps[ci];
            if (cp > 1 && t->seq_len % (2 * cp))
                continue;
            for (int mi = 0; mi < nmb; mi++) {
                int mb = mbs[mi];
                if (mb > t->global_batch)
                    continue;
                /* SP never costs time in the model (same traffic, less
                 * elementwise work and memory): sp = false is evaluated only
                 * when pinned. With tp = 1 it means nothing either way. */
                int sp = tp > 1 && fix->sequence_parallel != 0;
                memset(pl, 0, sizeof *pl);
                pl->tp = tp;
                pl->cp = cp;
                pl->micro_batch = mb;
                pl->sequence_parallel = sp;
                pl->interleave = 1;
                search_layouts(&s, pl);
            }
        }
    }
    model_cache_bind(NULL, NULL);
    model_cache_free(mc);
    s.st.seconds = ai_now() - t0;
    free(pl);
    if (s.nbest == 0 && s.closest_ratio < INFINITY) {
        s.st.closest.plan = s.closest_plan;
        s.st.closest.res = s.closest;
        s.st.has_closest = 1;
    }
    if (stats)
        *stats = s.st;
    if (s.nbest == 0) {
        free(s.best);
        if (s.st.evaluated == 0)
            return util_fail(AI_ERR_INFEASIBLE,
                             "no plan matches the constraints (check --fix against heads=%d, layers=%d, "
                             "global_batch=%d and %d devices)",
                             m->heads, m->layers, t->global_batch, ctx->cluster->devices);
        return util_fail(AI_ERR_INFEASIBLE,
                         "no plan fits in memory: %ld plans evaluated, the closest needs %.1f GB per "
                         "device where %.1f GB are usable",
                         s.st.evaluated, s.closest.memory_GB, s.closest.memory_cap_GB);
    }
    *out = s.best;
    *nout = s.nbest;
    return AI_OK;
}
