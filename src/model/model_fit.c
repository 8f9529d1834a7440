/*
 * Calibration rows (data/calibration/ CSV files) and the parameter fit.
 *
 * Each row is rebuilt as a real cluster/model/training/plan and evaluated by
 * the same model_plan_eval the planner uses, so the fit exercises exactly
 * the code that makes predictions. The fit is Nelder-Mead (Nelder & Mead,
 * Computer Journal 1965) on a logistic transform of each parameter into its
 * physical bounds, minimizing the mean squared log error (relative errors,
 * so the 1.1 s and the 94 s rows weigh the same).
 */
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- CSV */

#define CSV_MAX_COLS 40
#define CSV_MAX_ROWS 64

typedef struct csv {
    int ncols, nrows;
    char head[CSV_MAX_COLS][48];
    char cell[CSV_MAX_ROWS][CSV_MAX_COLS][48];
} csv;

static void csv_split(char *line, char out[][48], int *n)
{
    *n = 0;
    char *save = NULL;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *tok = strtok_r(line, ",", &save); tok && *n < CSV_MAX_COLS;
         tok = strtok_r(NULL, ",", &save))
        snprintf(out[(*n)++], 48, "%s", tok);
}

static ai_status_t csv_read(const char *path, csv *c)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return util_fail(AI_ERR_IO, "%s: %s", path, strerror(errno));
    char line[1024];
    memset(c, 0, sizeof *c);
    ai_status_t st = AI_OK;
    if (!fgets(line, sizeof line, f)) {
        st = util_fail(AI_ERR_PARSE, "%s: empty file", path);
        goto out;
    }
    csv_split(line, c->head, &c->ncols);
    int lineno = 1;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        if (c->nrows == CSV_MAX_ROWS) {
            st = util_fail(AI_ERR_PARSE, "%s: more than %d rows", path, CSV_MAX_ROWS);
            goto out;
        }
        int n;
        csv_split(line, c->cell[c->nrows], &n);
        if (n != c->ncols) {
            st = util_fail(AI_ERR_PARSE, "%s:%d: %d fields, header has %d", path, lineno, n, c->ncols);
            goto out;
        }
        c->nrows++;
    }
out:
    fclose(f);
    return st;
}

static const char *csv_get(const csv *c, int row, const char *col)
{
    for (int i = 0; i < c->ncols; i++)
        if (strcmp(c->head[i], col) == 0)
            return c->cell[row][i];
    return NULL;
}

static ai_status_t csv_num(const csv *c, const char *path, int row, const char *col, double *out)
{
    const char *s = csv_get(c, row, col);
    if (!s)
        return util_fail(AI_ERR_PARSE, "%s: no column '%s'", path, col);
    if (util_parse_double(s, out) != AI_OK)
        return util_fail(AI_ERR_PARSE, "%s: row %d column %s: '%s' is not a number", path, row + 2, col, s);
    return AI_OK;
}

/* ------------------------------------------------------------- rows */

/* A cluster of `gpus` devices in nodes of `per_node`, with `intra_GBps`
 * per direction between the devices of a node and `nics` NICs of
 * `nic_Gbps` per node. DGX A100: NVLink3 600 GB/s bidirectional per GPU
 * = 300 per direction, 8 x 200 Gb/s HDR (NVIDIA DGX A100 user guide).
 * DGX H100: NVLink4 450 per direction, 8 x 400 Gb/s NDR (DGX H100 user
 * guide). DGX B200: NVLink5 900 per direction, 8 x 400 Gb/s (DGX B200
 * user guide). */
static ai_status_t calib_node_cluster(const char *device, int gpus, int per_node, double intra_GBps,
                                      int nics, double nic_Gbps, topo_cluster **out)
{
    json_t *doc = json_pack("{s:s, s:[{s:s, s:i, s:s, s:i, s:{s:f, s:f}, s:{s:i, s:f, s:f}}]}",
                            "name", "calibration", "node_groups", "name", "node", "count",
                            AI_MAX(1, (gpus + per_node - 1) / per_node), "device", device,
                            "devices_per_node", AI_MIN(per_node, gpus), "intra", "bw_GBps", intra_GBps,
                            "latency_us", 2.0, "nic", "count", nics, "bw_Gbps", nic_Gbps, "latency_us", 5.0);
    if (!doc)
        return util_fail(AI_ERR_NOMEM, "calibration cluster");
    ai_status_t st = topo_cluster_from_json(doc, "(calibration cluster)", out);
    json_decref(doc);
    return st;
}

static ai_status_t calib_cluster(const char *device, int gpus, topo_cluster **out)
{
    int h100 = strstr(device, "H100") != NULL;
    return calib_node_cluster(device, gpus, 8, h100 ? 450.0 : 300.0, 8, h100 ? 400.0 : 200.0, out);
}

static void uniform_plan(model_plan *pl, const topo_model *m, int tp, int pp, int dp, int mb,
                         int v, model_recompute rc, int sp, int zero, int global_batch)
{
    memset(pl, 0, sizeof *pl);
    pl->tp = tp;
    pl->pp = pp;
    pl->cp = 1;
    pl->micro_batch = mb;
    pl->interleave = v;
    pl->recompute = rc;
    pl->sequence_parallel = sp;
    pl->zero = zero;
    pl->nsets = 1;
    pl->sets[0].dp = dp;
    pl->sets[0].micro_batches = global_batch / (dp * mb);
    pl->sets[0].nsegs = 1;
    pl->sets[0].seg_pool[0] = 0;
    pl->sets[0].seg_stages[0] = pp;
    for (int i = 0; i < pp; i++)
        pl->layers[i] = (short)(m->layers / pp + (i < m->layers % pp ? 1 : 0));
}

static void gpt(topo_model *m, const char *name, int layers, int hidden, int heads, int vocab)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->layers = layers;
    m->hidden = hidden;
    m->heads = heads;
    m->kv_heads = heads;
    m->ffn_hidden = 4 * hidden;
    m->ffn_kind = TOPO_FFN_GELU;
    m->vocab = vocab;
}

void model_calib_free(model_calib *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nrows; i++)
        topo_cluster_free(c->rows[i].cluster);
    for (int i = 0; i < c->nmem; i++)
        topo_cluster_free(c->mem[i].cluster);
    free(c->rows);
    free(c->mem);
    free(c);
}

static model_recompute parse_rc(const char *s)
{
    if (s && strcmp(s, "full") == 0)
        return MODEL_RC_FULL;
    if (s && strcmp(s, "selective") == 0)
        return MODEL_RC_SELECTIVE;
    return MODEL_RC_NONE;
}

/* ------------------------------------------------- published/ sources */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Megatron places layers evenly and, when they do not divide, gives the
 * first and the last stage the fewer (those also hold the embedding and the
 * output layer: Llama 3's 126 layers over 16 stages, 7 on each end). */
static void split_layers(model_plan *pl, int layers, int pp)
{
    int base = (layers + pp - 1) / pp, deficit = base * pp - layers;
    for (int i = 0; i < pp; i++)
        pl->layers[i] = (short)base;
    for (int k = 0; deficit > 0; k++, deficit--)
        pl->layers[k % 2 ? k / 2 : pp - 1 - k / 2] -= 1;
}

static ai_status_t pub_num(const csv *t, const char *path, int i, const char *col, double lo, double *out)
{
    ai_status_t st = csv_num(t, path, i, col, out);
    if (st == AI_OK && !(*out >= lo))
        return util_fail(AI_ERR_PARSE, "%s: row %d column %s: %g is below %g", path, i + 2, col, *out, lo);
    return st;
}

static ai_status_t pub_str(const csv *t, const char *path, int i, const char *col, const char **out)
{
    *out = csv_get(t, i, col);
    if (!*out)
        return util_fail(AI_ERR_PARSE, "%s: no column '%s'", path, col);
    return AI_OK;
}

static ai_status_t pub_row(const csv *t, const char *path, int i, model_calib_row *r)
{
    static const char *const nums[] = {"gpus_per_node", "intra_GBps", "nics", "nic_Gbps", "layers", "hidden",
                                       "heads", "kv_heads", "ffn", "vocab", "seq", "gbs", "mbs", "tp", "pp",
                                       "cp", "dp", "vp", "sp", "zero", "flash", "tp_overlap", "grad_fp32",
                                       "value"};
    enum { NN = sizeof nums / sizeof nums[0] };
    double v[NN];
    const char *src, *row, *cite, *sw, *dev, *prec, *kind, *rc, *metric;
    ai_status_t st;
    for (int k = 0; k < NN; k++)
        if ((st = pub_num(t, path, i, nums[k], k >= 17 && k < 23 ? 0 : 1e-9, &v[k])) != AI_OK)
            return st;
    if ((st = pub_str(t, path, i, "source", &src)) || (st = pub_str(t, path, i, "row", &row)) ||
        (st = pub_str(t, path, i, "cite", &cite)) || (st = pub_str(t, path, i, "software", &sw)) ||
        (st = pub_str(t, path, i, "device", &dev)) || (st = pub_str(t, path, i, "precision", &prec)) ||
        (st = pub_str(t, path, i, "ffn_kind", &kind)) || (st = pub_str(t, path, i, "recompute", &rc)) ||
        (st = pub_str(t, path, i, "metric", &metric)))
        return st;
    int dpn = (int)v[0], L = (int)v[4], seq = (int)v[10], gbs = (int)v[11], mb = (int)v[12], tp = (int)v[13],
        pp = (int)v[14], cp = (int)v[15], dp = (int)v[16], vp = (int)v[17];
    int gpus = tp * pp * cp * dp;
    if (gbs % (dp * mb))
        return util_fail(AI_ERR_PARSE, "%s: row %d: global batch %d is not a multiple of dp x micro-batch %d",
                         path, i + 2, gbs, dp * mb);
    if (vp < 1 || pp > MODEL_MAX_STAGES || pp > L)
        return util_fail(AI_ERR_PARSE, "%s: row %d: bad pp=%d or vp=%d", path, i + 2, pp, vp);
    topo_precision precision;
    if (!strcmp(prec, "bf16"))
        precision = TOPO_BF16;
    else if (!strcmp(prec, "fp16"))
        precision = TOPO_FP16;
    else if (!strcmp(prec, "fp8"))
        precision = TOPO_FP8;
    else
        return util_fail(AI_ERR_PARSE, "%s: row %d: precision '%s' is not bf16, fp16 or fp8", path, i + 2, prec);
    if (!strcmp(metric, "step_s"))
        r->metric = MODEL_METRIC_STEP_S, r->published = v[23];
    else if (!strcmp(metric, "tokens_per_s_per_gpu"))
        r->metric = MODEL_METRIC_STEP_S, r->published = (double)gbs * seq / (v[23] * gpus);
    else if (!strcmp(metric, "model_tflops_per_gpu"))
        r->metric = MODEL_METRIC_MODEL_TFLOPS, r->published = v[23];
    else if (!strcmp(metric, "hw_tflops_per_gpu"))
        r->metric = MODEL_METRIC_HW_TFLOPS, r->published = v[23];
    else
        return util_fail(AI_ERR_PARSE, "%s: row %d: unknown metric '%s'", path, i + 2, metric);
    snprintf(r->source, sizeof r->source, "%s", src);
    snprintf(r->name, sizeof r->name, "%s", row);
    snprintf(r->cite, sizeof r->cite, "%s", cite);
    snprintf(r->software, sizeof r->software, "%s", sw);
    memset(&r->model, 0, sizeof r->model);
    snprintf(r->model.name, sizeof r->model.name, "%s", row);
    r->model.layers = L;
    r->model.hidden = (int)v[5];
    r->model.heads = (int)v[6];
    r->model.kv_heads = (int)v[7];
    r->model.ffn_hidden = (int)v[8];
    r->model.vocab = (int)v[9];
    r->model.ffn_kind = !strcmp(kind, "swiglu") ? TOPO_FFN_SWIGLU : TOPO_FFN_GELU;
    r->train = (topo_training){.seq_len = seq, .global_batch = gbs, .precision = precision,
                               .optimizer = TOPO_OPT_ADAM, .flash_attention = v[20] != 0,
                               .tp_comm_overlap = v[21] != 0, .grad_fp32 = v[22] != 0};
    uniform_plan(&r->plan, &r->model, tp, pp, dp, mb, vp, parse_rc(rc), v[18] != 0 && tp > 1, (int)v[19], gbs);
    r->plan.cp = cp;
    split_layers(&r->plan, L, pp);
    return calib_node_cluster(dev, gpus, dpn, v[1], (int)v[2], v[3], &r->cluster);
}

/* Every *.csv of dir, in name order (the fit sums over rows: a fixed
 * order keeps it bit-for-bit repeatable). A missing directory is no
 * error: the reference tables alone still load. */
static ai_status_t load_published(const char *dir, model_calib *c)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? AI_OK : util_fail(AI_ERR_IO, "%s: %s", dir, strerror(errno));
    char *names[64];
    int n = 0;
    ai_status_t st = AI_OK;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t len = strlen(e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".csv") && !(names[n] = strdup(e->d_name))) {
            st = util_fail(AI_ERR_NOMEM, "calibration");
            break;
        }
        n += len > 4 && !strcmp(e->d_name + len - 4, ".csv");
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], name_cmp);
    csv *t = malloc(sizeof *t);
    if (!t && st == AI_OK)
        st = util_fail(AI_ERR_NOMEM, "calibration");
    for (int f = 0; f < n && st == AI_OK; f++) {
        char path[1280];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        if ((st = csv_read(path, t)) != AI_OK)
            break;
        model_calib_row *rows = realloc(c->rows, (size_t)(c->nrows + t->nrows) * sizeof *rows);
        if (!rows) {
            st = util_fail(AI_ERR_NOMEM, "calibration");
            break;
        }
        c->rows = rows;
        for (int i = 0; i < t->nrows && st == AI_OK; i++) {
            memset(&c->rows[c->nrows], 0, sizeof c->rows[0]);
            if ((st = pub_row(t, path, i, &c->rows[c->nrows])) == AI_OK)
                c->nrows++;
        }
    }
    free(t);
    for (int f = 0; f < n; f++)
        free(names[f]);
    return st;
}

double model_calib_value(const model_calib_row *row, const model_result *r)
{
    switch (row->metric) {
    case MODEL_METRIC_MODEL_TFLOPS: return r->model_tflops_per_device;
    case MODEL_METRIC_HW_TFLOPS: return r->hw_tflops_per_device;
    default: return r->step_s;
    }
}

const char *model_metric_unit(model_metric m)
{
    switch (m) {
    case MODEL_METRIC_MODEL_TFLOPS: return "model TFLOP/s per GPU";
    case MODEL_METRIC_HW_TFLOPS: return "hw TFLOP/s per GPU";
    default: return "s per iteration";
    }
}

/* The step-time rows of Korthikanti et al. Table 5: DGX A100, fp16,
 * s 2048, V 51200, Megatron of 2022 (attention scores materialized, no TP
 * overlap), dp 1. */
static ai_status_t calib_table5(model_calib *c, const csv *k5, const char *path)
{
    ai_status_t st;
    for (int i = 0; i < k5->nrows; i++) {
        double heads, hidden, layers, tp, pp, dp, gpus, gb, mb, v, secs;
        if ((st = csv_num(k5, path, i, "heads", &heads)) || (st = csv_num(k5, path, i, "hidden", &hidden)) ||
            (st = csv_num(k5, path, i, "layers", &layers)) || (st = csv_num(k5, path, i, "tp", &tp)) ||
            (st = csv_num(k5, path, i, "pp", &pp)) || (st = csv_num(k5, path, i, "dp", &dp)) ||
            (st = csv_num(k5, path, i, "gpus", &gpus)) || (st = csv_num(k5, path, i, "global_batch", &gb)) ||
            (st = csv_num(k5, path, i, "micro_batch", &mb)) || (st = csv_num(k5, path, i, "interleave", &v)) ||
            (st = csv_num(k5, path, i, "seconds_per_iteration", &secs)))
            return st;
        model_calib_row *r = &c->rows[c->nrows];
        const char *rc = csv_get(k5, i, "recompute");
        const char *sp = csv_get(k5, i, "sequence_parallel");
        snprintf(r->source, sizeof r->source, "korthikanti_table5");
        snprintf(r->name, sizeof r->name, "%s/%s", csv_get(k5, i, "model"), rc ? rc : "?");
        gpt(&r->model, csv_get(k5, i, "model"), (int)layers, (int)hidden, (int)heads, 51200);
        r->train = (topo_training){.seq_len = 2048, .global_batch = (int)gb, .precision = TOPO_FP16,
                                   .optimizer = TOPO_OPT_ADAM, .flash_attention = 0, .tp_comm_overlap = 0,
                                   .grad_fp32 = 1};
        uniform_plan(&r->plan, &r->model, (int)tp, (int)pp, (int)dp, (int)mb, (int)v, parse_rc(rc),
                     sp && strcmp(sp, "true") == 0, 1, (int)gb);
        if ((st = calib_cluster("A100-SXM4-80GB", (int)gpus, &r->cluster)) != AI_OK)
            return st;
        r->published = secs;
        r->metric = MODEL_METRIC_STEP_S;
        snprintf(r->cite, sizeof r->cite, "arXiv:2205.05198 Table 5");
        snprintf(r->software, sizeof r->software, "Megatron-LM 2022");
        c->nrows++;
    }
    return AI_OK;
}

/* The throughput rows of the Megatron-Core H100 table: bf16, s 4096,
 * V 131072, dp 48, selective recompute, sequence parallel with TP,
 * distributed optimizer (ZeRO-1), flash attention, micro-batch 1, 1F1B,
 * no TP communication overlap (off by default in Megatron-Core; the table
 * does not say), and
 * Megatron-Core DDP's default of reducing gradients in bf16
 * (grad_reduce_in_fp32 = False). */
static ai_status_t calib_mcore(model_calib *c, const csv *mc, const char *mcpath)
{
    ai_status_t st;
    for (int i = 0; i < mc->nrows; i++) {
        double heads, hidden, layers, tp, pp, dp, gpus, gb, tfl;
        if ((st = csv_num(mc, mcpath, i, "heads", &heads)) || (st = csv_num(mc, mcpath, i, "hidden", &hidden)) ||
            (st = csv_num(mc, mcpath, i, "layers", &layers)) || (st = csv_num(mc, mcpath, i, "tp", &tp)) ||
            (st = csv_num(mc, mcpath, i, "pp", &pp)) || (st = csv_num(mc, mcpath, i, "dp", &dp)) ||
            (st = csv_num(mc, mcpath, i, "gpus", &gpus)) || (st = csv_num(mc, mcpath, i, "global_batch", &gb)) ||
            (st = csv_num(mc, mcpath, i, "tflops_per_gpu", &tfl)))
            return st;
        model_calib_row *r = &c->rows[c->nrows];
        snprintf(r->source, sizeof r->source, "megatron_core_h100");
        snprintf(r->name, sizeof r->name, "%s", csv_get(mc, i, "model"));
        gpt(&r->model, csv_get(mc, i, "model"), (int)layers, (int)hidden, (int)heads, 131072);
        r->train = (topo_training){.seq_len = 4096, .global_batch = (int)gb, .precision = TOPO_BF16,
                                   .optimizer = TOPO_OPT_ADAM, .flash_attention = 1, .tp_comm_overlap = 1,
                                   .grad_fp32 = 0};
        uniform_plan(&r->plan, &r->model, (int)tp, (int)pp, (int)dp, 1, 1, MODEL_RC_SELECTIVE, tp > 1, 1,
                     (int)gb);
        if ((st = calib_cluster("H100-SXM5-80GB", (int)gpus, &r->cluster)) != AI_OK)
            return st;
        r->published = tfl;
        r->metric = MODEL_METRIC_MODEL_TFLOPS;
        snprintf(r->cite, sizeof r->cite, "Megatron-LM README scaling figure");
        snprintf(r->software, sizeof r->software, "Megatron-Core");
        c->nrows++;
    }
    return AI_OK;
}

/* The memory rows of Korthikanti Figure 1, with the configuration of each
 * model from Table 5 and the per-figure settings in
 * korthikanti_memory_configs.csv (README explains them). */
static ai_status_t calib_memory(model_calib *c, const csv *km, const char *kmpath, const csv *k5,
                                const char *path, const csv *kc, const char *kcpath)
{
    ai_status_t st;
    for (int i = 0; i < km->nrows; i++) {
        const char *name = csv_get(km, i, "model");
        int row5 = -1, rowc = -1;
        for (int j = 0; j < k5->nrows && row5 < 0; j++)
            if (strcmp(csv_get(k5, j, "model"), name) == 0)
                row5 = j;
        for (int j = 0; j < kc->nrows && rowc < 0; j++)
            if (strcmp(csv_get(kc, j, "model"), name) == 0)
                rowc = j;
        if (row5 < 0 || rowc < 0)
            return util_fail(AI_ERR_PARSE, "%s: model %s has no Table 5 row or no memory config", kmpath, name);
        double heads, hidden, layers, tp, pp, gpus, gb, mb, v, pg, ag;
        if ((st = csv_num(k5, path, row5, "heads", &heads)) || (st = csv_num(k5, path, row5, "hidden", &hidden)) ||
            (st = csv_num(k5, path, row5, "layers", &layers)) || (st = csv_num(k5, path, row5, "tp", &tp)) ||
            (st = csv_num(k5, path, row5, "pp", &pp)) || (st = csv_num(k5, path, row5, "gpus", &gpus)) ||
            (st = csv_num(k5, path, row5, "global_batch", &gb)) ||
            (st = csv_num(kc, kcpath, rowc, "micro_batch", &mb)) ||
            (st = csv_num(kc, kcpath, rowc, "interleave", &v)) ||
            (st = csv_num(km, kmpath, i, "params_and_optimizer_GiB_per_gpu", &pg)) ||
            (st = csv_num(km, kmpath, i, "activations_GiB_per_gpu", &ag)))
            return st;
        const char *sp = csv_get(km, i, "sequence_parallel");
        snprintf(c->mem[c->nmem].name, 32, "%s/%s", name, csv_get(km, i, "recompute"));
        gpt(&c->mem[c->nmem].model, name, (int)layers, (int)hidden, (int)heads, 51200);
        c->mem[c->nmem].train = (topo_training){.seq_len = 2048, .global_batch = (int)gb,
                                                .precision = TOPO_FP16, .optimizer = TOPO_OPT_ADAM,
                                                .grad_fp32 = 1};
        uniform_plan(&c->mem[c->nmem].plan, &c->mem[c->nmem].model, (int)tp, (int)pp, 1, (int)mb, (int)v,
                     parse_rc(csv_get(km, i, "recompute")), sp && strcmp(sp, "true") == 0, 1, (int)gb);
        c->mem[c->nmem].params_GiB = pg;
        c->mem[c->nmem].act_GiB = ag;
        if ((st = calib_cluster("A100-SXM4-80GB", (int)gpus, &c->mem[c->nmem].cluster)) != AI_OK)
            return st;
        c->nmem++;
    }
    return AI_OK;
}

ai_status_t model_calib_load(const char *dir, model_calib **out)
{
    char path[1024];
    ai_status_t st;
    csv *k5 = malloc(sizeof *k5), *mc = malloc(sizeof *mc), *km = malloc(sizeof *km),
        *kc = malloc(sizeof *kc);
    model_calib *c = calloc(1, sizeof *c);
    if (!k5 || !mc || !km || !kc || !c) {
        st = util_fail(AI_ERR_NOMEM, "calibration");
        goto err;
    }
    snprintf(path, sizeof path, "%s/korthikanti_table5.csv", dir);
    if ((st = csv_read(path, k5)) != AI_OK)
        goto err;
    char mcpath[1024];
    snprintf(mcpath, sizeof mcpath, "%s/megatron_core_h100.csv", dir);
    if ((st = csv_read(mcpath, mc)) != AI_OK)
        goto err;
    char kmpath[1024];
    snprintf(kmpath, sizeof kmpath, "%s/korthikanti_memory.csv", dir);
    if ((st = csv_read(kmpath, km)) != AI_OK)
        goto err;
    char kcpath[1024];
    snprintf(kcpath, sizeof kcpath, "%s/korthikanti_memory_configs.csv", dir);
    if ((st = csv_read(kcpath, kc)) != AI_OK)
        goto err;
    c->rows = calloc((size_t)(k5->nrows + mc->nrows), sizeof *c->rows);
    c->mem = calloc((size_t)km->nrows + 1, sizeof *c->mem);
    if (!c->rows || !c->mem) {
        st = util_fail(AI_ERR_NOMEM, "calibration");
        goto err;
    }

    if ((st = calib_table5(c, k5, path)) != AI_OK || (st = calib_mcore(c, mc, mcpath)) != AI_OK ||
        (st = calib_memory(c, km, kmpath, k5, path, kc, kcpath)) != AI_OK)
        goto err;
    char pubdir[1024];
    snprintf(pubdir, sizeof pubdir, "%s/published", dir);
    if ((st = load_published(pubdir, c)) != AI_OK)
        goto err;
    free(k5);
    free(mc);
    free(km);
    free(kc);
    *out = c;
    return AI_OK;
err:
    free(k5);
    free(mc);
    free(km);
    free(kc);
    model_calib_free(c);
    return st;
}

double model_calib_predict(const model_calib_row *row, const model_params *p)
{
    model_ctx ctx = {row->cluster, &row->model, &row->train, *p};
    model_result r;
    model_plan_eval(&ctx, &row->plan, &r);
    return model_calib_value(row, &r);
}

/* ---------------------------------------------------------------- fit */

/*
 * Mean squared log error plus a weak pull of each parameter towards its
 * literature prior (model_param_prior), measured in units of its allowed
 * range. The pull only matters for a parameter the rows do not constrain
 * (a table with dp = 1 says nothing about DP overlap): it then stays at
 * the prior instead of drifting to a bound, which is what lets a fit on
 * one source predict the other (docs/model.md, cross-validation).
 */
double model_fit_loss(const model_calib *c, const model_params *p)
{
    double sum = 0;
    for (int i = 0; i < c->nrows; i++) {
        double e = log(model_calib_predict(&c->rows[i], p) / c->rows[i].published);
        sum += e * e;
    }
    double pen = 0;
    model_params q = *p;
    for (int i = 0; i < MODEL_NPARAMS; i++) {
        if (!model_param_fitted[i])
            continue;
        double d = (*model_params_slot(&q, i) - model_param_prior[i]) / (model_param_hi[i] - model_param_lo[i]);
        pen += d * d;
    }
    return sum / c->nrows + MODEL_PRIOR_WEIGHT * pen;
}

/* The optimizer's vector x holds the fitted parameters only; the others
 * keep their values from `base`. */
static void to_params(const double *x, const model_params *base, model_params *p)
{
    *p = *base;
    for (int i = 0, k = 0; i < MODEL_NPARAMS; i++) {
        if (!model_param_fitted[i])
            continue;
        double u = 1 / (1 + exp(-x[k++]));
        *model_params_slot(p, i) = model_param_lo[i] + u * (model_param_hi[i] - model_param_lo[i]);
    }
}

static void from_params(const model_params *p0, double *x)
{
    model_params p = *p0;
    for (int i = 0, k = 0; i < MODEL_NPARAMS; i++) {
        if (!model_param_fitted[i])
            continue;
        double u = (*model_params_slot(&p, i) - model_param_lo[i]) / (model_param_hi[i] - model_param_lo[i]);
        /* Start a little inside the bounds: at a bound the logistic
         * transform is flat and the simplex would never leave it. */
        u = AI_MIN(AI_MAX(u, 0.01), 0.99);
        x[k++] = log(u / (1 - u));
    }
}

static double nm_eval(const model_calib *c, const model_params *base, const double *x)
{
    model_params p;
    to_params(x, base, &p);
    return model_fit_loss(c, &p);
}

ai_status_t model_fit(const model_calib *c, const model_params *start, model_params *out,
                      double *loss_out)
{
    enum { N = MODEL_NFITTED };
    double s[N + 1][N], f[N + 1];
    if (c->nrows == 0)
        return util_fail(AI_ERR_INVALID, "no calibration rows to fit");
    from_params(start, s[0]);
    /* Restarts from the best point shake the simplex out of the flat
     * valleys a logistic transform creates near the bounds. */
    for (int restart = 0; restart < 4; restart++) {
        for (int i = 1; i <= N; i++) {
            memcpy(s[i], s[0], sizeof s[0]);
            s[i][i - 1] += 0.5;
        }
        for (int i = 0; i <= N; i++)
            f[i] = nm_eval(c, start, s[i]);
        for (int it = 0; it < 600 * N; it++) {
            /* order: best first */
            for (int i = 1; i <= N; i++)
                for (int j = i; j > 0 && f[j] < f[j - 1]; j--) {
                    double tf = f[j];
                    f[j] = f[j - 1];
                    f[j - 1] = tf;
                    double tx[N];
                    memcpy(tx, s[j], sizeof tx);
                    memcpy(s[j], s[j - 1], sizeof tx);
                    memcpy(s[j - 1], tx, sizeof tx);
                }
            if (f[N] - f[0] < 1e-12)
                break;
            double cen[N] = {0}, xr[N], xe[N], xc[N];
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++)
                    cen[j] += s[i][j] / N;
            for (int j = 0; j < N; j++)
                xr[j] = cen[j] + (cen[j] - s[N][j]);
            double fr = nm_eval(c, start, xr);
            if (fr < f[0]) {
                for (int j = 0; j < N; j++)
                    xe[j] = cen[j] + 2 * (cen[j] - s[N][j]);
                double fe = nm_eval(c, start, xe);
                if (fe < fr) {
                    memcpy(s[N], xe, sizeof xe);
                    f[N] = fe;
                } else {
                    memcpy(s[N], xr, sizeof xr);
                    f[N] = fr;
                }
            } else if (fr < f[N - 1]) {
                memcpy(s[N], xr, sizeof xr);
                f[N] = fr;
            } else {
                for (int j = 0; j < N; j++)
                    xc[j] = cen[j] + 0.5 * (s[N][j] - cen[j]);
                double fc = nm_eval(c, start, xc);
                if (fc < f[N]) {
                    memcpy(s[N], xc, sizeof xc);
                    f[N] = fc;
                } else {
                    for (int i = 1; i <= N; i++) {
                        for (int j = 0; j < N; j++)
                            s[i][j] = s[0][j] + 0.5 * (s[i][j] - s[0][j]);
                        f[i] = nm_eval(c, start, s[i]);
                    }
                }
            }
        }
        int best = 0;
        for (int i = 1; i <= N; i++)
            if (f[i] < f[best])
                best = i;
        if (best)
            memcpy(s[0], s[best], sizeof s[0]);
        f[0] = f[best];
    }
    model_params p;
    to_params(s[0], start, &p);
    /* The simplex starts inside the bounds, so it may end above a start
     * that sits on one: never return worse than the start (this also
     * makes the shipped values a fixed point of the fit). */
    int start_ok = 1;
    model_params q = *start;
    for (int i = 0; i < MODEL_NPARAMS; i++) {
        double v = *model_params_slot(&q, i);
        start_ok &= !model_param_fitted[i] || (v >= model_param_lo[i] && v <= model_param_hi[i]);
    }
    double f_start = start_ok ? model_fit_loss(c, start) : INFINITY;
    if (f_start <= f[0]) {
        p = *start;
        f[0] = f_start;
    }
    *out = p;
    if (loss_out)
        *loss_out = f[0];
    return AI_OK;
}
