/*
 * Which nodes fail next, from each node's fault history (sim.h,
 * docs/sim.md "Predicting failing nodes from a fault trace").
 *
 * A trace is a JSON array of events {node_id, event_time (days),
 * event_type "fault_start" | "fault_end", fault_type {Level, Class,
 * Desc}}, the format of the InfiniteHBD trace. At evaluation times every
 * `window` days each node is described by its history up to then, and
 * labelled by whether a fault starts on it within the next window. A
 * logistic regression on those features is fitted on the times whose
 * windows end within the training part, and measured on the rest against
 * the baseline "the nodes that failed most so far": area under the ROC
 * curve, and precision and recall of the top k nodes per window.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fault {
    int node;
    double t;
    int hw; /* Level "Hardware Failure" */
} fault;

static int by_time(const void *a, const void *b)
{
    double x = ((const fault *)a)->t, y = ((const fault *)b)->t;
    return x < y ? -1 : x > y ? 1 : ((const fault *)a)->node - ((const fault *)b)->node;
}

/* Features of node n at time t from the faults before t. */
static void features(const fault *f, int nf, int n, double t, double *x)
{
    double count = 0, recent = 0, hw = 0, last = -INFINITY;
    for (int i = 0; i < nf && f[i].t < t; i++) {
        if (f[i].node != n)
            continue;
        count += 1;
        hw += f[i].hw;
        if (f[i].t >= t - 30)
            recent += 1;
        last = f[i].t;
    }
    x[0] = 1;
    x[1] = log1p(count);
    x[2] = log1p(recent);
    x[3] = isfinite(last) ? exp(-(t - last) / 30) : 0;
    x[4] = log1p(hw);
}

/* Area under the ROC curve (Mann-Whitney, ties counted half). */
static double auc(const double *score, const unsigned char *y, long n)
{
    long *idx = malloc(sizeof(long) * (size_t)n);
    if (!idx)
        return NAN;
    for (long i = 0; i < n; i++)
        idx[i] = i;
    /* Insertion-free: sort indices by score with a simple merge sort. */
    long *tmp = malloc(sizeof(long) * (size_t)n);
    if (!tmp) {
        free(idx);
        return NAN;
    }
    for (long w = 1; w < n; w *= 2)
        for (long lo = 0; lo < n; lo += 2 * w) {
            long mid = AI_MIN(lo + w, n), hi = AI_MIN(lo + 2 * w, n), a = lo, b = mid, k = lo;
            while (a < mid || b < hi)
                tmp[k++] = (b >= hi || (a < mid && score[idx[a]] <= score[idx[b]])) ? idx[a++] : idx[b++];
            memcpy(idx + lo, tmp + lo, sizeof(long) * (size_t)(hi - lo));
        }
    double rank_pos = 0;
    long pos = 0;
    for (long i = 0; i < n;) {
        long j = i;
        while (j < n && score[idx[j]] == score[idx[i]])
            j++;
        double r = (i + 1 + j) / 2.0; /* mean rank of the tied block, 1-based */
        for (long k = i; k < j; k++)
            if (y[idx[k]]) {
                rank_pos += r;
                pos++;
            }
        i = j;
    }
    free(idx);
    free(tmp);
    long neg = n - pos;
    if (pos == 0 || neg == 0)
        return NAN;
    return (rank_pos - pos * (pos + 1) / 2.0) / ((double)pos * neg);
}

/* Per evaluation time, flag the k highest-scoring nodes (ties broken by
 * node order): the flagged that fail are hits. */
static void topk(const double *score, const unsigned char *y, int nodes, int times, int k,
                 long *hits, long *flagged, long *positives)
{
    int *order = malloc(sizeof(int) * (size_t)nodes);
    if (!order)
        return;
    for (int t = 0; t < times; t++) {
        const double *s = score + (long)t * nodes;
        const unsigned char *l = y + (long)t * nodes;
        for (int i = 0; i < nodes; i++) {
            order[i] = i;
            *positives += l[i];
        }
        for (int a = 0; a < k && a < nodes; a++) { /* partial selection sort */
            int best = a;
            for (int b = a + 1; b < nodes; b++)
                if (s[order[b]] > s[order[best]])
                    best = b;
            int tmp = order[a];
            order[a] = order[best];
            order[best] = tmp;
            *hits += l[order[a]];
            (*flagged)++;
        }
    }
    free(order);
}

/* The trace as the predictor uses it: the faults in time order, the rows
 * (one per node and evaluation time, training times first) with their
 * features, labels and scores. */
typedef struct pred_data {
    fault *f;
    const char **ids;     /* node names, borrowed from the trace */
    int nf, nids;
    double end;           /* the trace's last event, days */
    int nodes, ntrain, ntest;
    double split, w;
    long rows;
    double *xs, *score, *base;
    unsigned char *y;
} pred_data;

/* The fault_start events, each with its node's index (by first
 * appearance) and whether it was a hardware failure; every event counts
 * toward the trace's end. An event without its fields stops the read with
 * its index. */
static ai_status_t read_faults(json_t *trace, const char *path, pred_data *d)
{
    size_t n = json_array_size(trace);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(trace, i);
        const char *id = json_string_value(json_object_get(e, "node_id"));
        const char *type = json_string_value(json_object_get(e, "event_type"));
        json_t *tv = json_object_get(e, "event_time");
        if (!json_is_object(e) || !id || !type || !json_is_number(tv) ||
            !(json_number_value(tv) >= 0))
            return util_fail(AI_ERR_INVALID,
                             "%s: [%zu]: want node_id (string), event_type (string), event_time "
                             "(days >= 0)",
                             path, i);
        double t = json_number_value(tv);
        d->end = t > d->end ? t : d->end;
        if (strcmp(type, "fault_start") != 0)
            continue;
        int node = -1;
        for (int k = 0; k < d->nids; k++)
            if (!strcmp(d->ids[k], id)) {
                node = k;
                break;
            }
        if (node < 0) {
            node = d->nids;
            d->ids[d->nids++] = id;
        }
        const char *level =
            json_string_value(json_object_get(json_object_get(e, "fault_type"), "Level"));
        d->f[d->nf].node = node;
        d->f[d->nf].t = t;
        d->f[d->nf].hw = level && !strcmp(level, "Hardware Failure");
        d->nf++;
    }
    if (d->nf == 0)
        return util_fail(AI_ERR_INVALID, "%s: no fault_start events", path);
    return AI_OK;
}

/* Every row's features (from the faults before its time), the baseline's
 * score (the faults so far) and its label: a fault in the window after. */
static void build_rows(pred_data *d)
{
    int times = d->ntrain + d->ntest;
    double w = d->w;
    for (int k = 0; k < times; k++) {
        double t = k < d->ntrain ? w * (k + 1) : d->split + w * (k - d->ntrain);
        for (int node = 0; node < d->nodes; node++) {
            long r = (long)k * d->nodes + node;
            features(d->f, d->nf, node, t, d->xs + r * SIM_PREDICT_NFEAT);
            d->base[r] = d->xs[r * SIM_PREDICT_NFEAT + 1]; /* log1p(faults so far): same order */
            d->y[r] = 0;
            for (int i = 0; i < d->nf; i++)
                if (d->f[i].node == node && d->f[i].t >= t && d->f[i].t < t + w) {
                    d->y[r] = 1;
                    break;
                }
        }
    }
}

/* Logistic regression by gradient descent on the first ntr rows (a small
 * ridge keeps it finite when a feature separates them); then every row's
 * score. */
static void fit_and_score(pred_data *d, long ntr, double beta[SIM_PREDICT_NFEAT])
{
    const double *xs = d->xs;
    for (int it = 0; it < 3000; it++) {
        double g[SIM_PREDICT_NFEAT] = {0};
        for (long r = 0; r < ntr; r++) {
            const double *x = xs + r * SIM_PREDICT_NFEAT;
            double z = 0;
            for (int j = 0; j < SIM_PREDICT_NFEAT; j++)
                z += beta[j] * x[j];
            double err = 1 / (1 + exp(-z)) - d->y[r];
            for (int j = 0; j < SIM_PREDICT_NFEAT; j++)
                g[j] += err * x[j];
        }
        for (int j = 0; j < SIM_PREDICT_NFEAT; j++)
            beta[j] -= 0.5 * (g[j] / ntr + (j ? 1e-3 * beta[j] : 0));
    }
    for (long r = 0; r < d->rows; r++) {
        double z = 0;
        for (int j = 0; j < SIM_PREDICT_NFEAT; j++)
            z += beta[j] * xs[r * SIM_PREDICT_NFEAT + j];
        d->score[r] = z;
    }
}

/* The model and the baseline on the test rows (from row off): the area
 * under the ROC curve, and precision and recall of the top k per time. */
static void measure(const pred_data *d, long off, int k, sim_predict_result *out)
{
    long nte = d->rows - off;
    for (long r = off; r < d->rows; r++)
        out->test_positives += d->y[r];
    out->test_rows = nte;
    out->auc_model = auc(d->score + off, d->y + off, nte);
    out->auc_baseline = auc(d->base + off, d->y + off, nte);
    long hits = 0, flagged = 0, pos = 0;
    topk(d->score + off, d->y + off, d->nodes, d->ntest, k, &hits, &flagged, &pos);
    out->precision_model = flagged ? (double)hits / flagged : 0;
    out->recall_model = pos ? (double)hits / pos : 0;
    hits = flagged = pos = 0;
    topk(d->base + off, d->y + off, d->nodes, d->ntest, k, &hits, &flagged, &pos);
    out->precision_baseline = flagged ? (double)hits / flagged : 0;
    out->recall_baseline = pos ? (double)hits / pos : 0;
}

ai_status_t sim_predict(json_t *trace, const char *path, const sim_predict_opts *o,
                        sim_predict_result *out)
{
    if (!trace || !o || !out)
        return util_fail(AI_ERR_INVALID, "sim_predict: NULL argument");
    if (!json_is_array(trace))
        return util_fail(AI_ERR_INVALID, "%s: a fault trace is a JSON array of events", path);
    if (!(o->window_days > 0) || !(o->train_share > 0 && o->train_share < 1) || o->topk < 1)
        return util_fail(AI_ERR_INVALID, "sim_predict: window %g days, train share %g, top %d",
                         o->window_days, o->train_share, o->topk);
    size_t n = json_array_size(trace);
    pred_data d;
    memset(&d, 0, sizeof d);
    d.f = calloc(n ? n : 1, sizeof *d.f);
    d.ids = calloc(n ? n : 1, sizeof *d.ids);
    ai_status_t st = AI_OK;
    if (!d.f || !d.ids) {
        st = util_fail(AI_ERR_NOMEM, "sim_predict: %zu events", n);
        goto out;
    }
    if ((st = read_faults(trace, path, &d)) != AI_OK)
        goto out;
    qsort(d.f, (size_t)d.nf, sizeof *d.f, by_time);
    d.nodes = o->nodes > d.nids ? o->nodes : d.nids; /* nodes never failing have no events */
    d.split = o->train_share * d.end;
    d.w = o->window_days;
    /* Evaluation times: every window from one window in; training ones
     * end their window before the split, test ones start at it. */
    for (double t = d.w; t + d.w <= d.split; t += d.w)
        d.ntrain++;
    for (double t = d.split; t + d.w <= d.end; t += d.w)
        d.ntest++;
    if (d.ntrain < 1 || d.ntest < 1) {
        st = util_fail(AI_ERR_INVALID, "%s: %.4g days: too short for windows of %g days split at %g",
                       path, d.end, d.w, d.split);
        goto out;
    }
    d.rows = (long)(d.ntrain + d.ntest) * d.nodes;
    d.xs = malloc(sizeof(double) * (size_t)d.rows * SIM_PREDICT_NFEAT);
    d.y = malloc((size_t)d.rows);
    d.score = malloc(sizeof(double) * (size_t)d.rows);
    d.base = malloc(sizeof(double) * (size_t)d.rows);
    if (!d.xs || !d.y || !d.score || !d.base) {
        st = util_fail(AI_ERR_NOMEM, "sim_predict: %ld rows", d.rows);
        goto out;
    }
    build_rows(&d);
    long ntr = (long)d.ntrain * d.nodes;
    double beta[SIM_PREDICT_NFEAT] = {0};
    fit_and_score(&d, ntr, beta);
    memset(out, 0, sizeof *out);
    out->nodes = d.nodes;
    out->nodes_failing = d.nids;
    out->faults = d.nf;
    out->end_days = d.end;
    out->split_days = d.split;
    out->train_times = d.ntrain;
    out->test_times = d.ntest;
    memcpy(out->coef, beta, sizeof beta);
    measure(&d, ntr, o->topk, out);
out:
    free(d.f);
    free(d.ids);
    free(d.xs);
    free(d.y);
    free(d.score);
    free(d.base);
    return st;
}

ai_status_t sim_predict_file(const char *path, const sim_predict_opts *o, sim_predict_result *out)
{
    json_t *doc;
    ai_status_t st = topo_json_load_file(path, &doc);
    if (st != AI_OK)
        return st;
    st = sim_predict(doc, path, o, out);
    json_decref(doc);
    return st;
}

ai_status_t ai_sim_predict(const char *trace_path, const ai_sim_predict_options *opts, int as_json,
                           char **out)
{
    if (!trace_path || !opts || !out)
        return util_fail(AI_ERR_INVALID, "ai_sim_predict: NULL argument");
    sim_predict_opts o = {opts->nodes, opts->window_days > 0 ? opts->window_days : 7,
                          opts->train_share > 0 ? opts->train_share : 0.5,
                          opts->topk > 0 ? opts->topk : 10};
    sim_predict_result r;
    double t0 = ai_now();
    ai_status_t st = sim_predict_file(trace_path, &o, &r);
    if (st != AI_OK)
        return st;
    double secs = ai_now() - t0;
    json_t *d = json_pack(
        "{ss si si si sf sf sf sf si si si si s{sf sf sf sf sf} s{so sf sf} s{so sf sf} sf}", "trace",
        trace_path, "nodes", r.nodes, "nodes_failing", r.nodes_failing, "faults", r.faults,
        "days", r.end_days, "train_until_days", r.split_days, "window_days", o.window_days,
        "train_share", o.train_share, "topk", o.topk, "test_windows", r.test_times, "test_pairs",
        (int)r.test_rows, "test_failing_pairs", (int)r.test_positives, "coefficients", "bias",
        r.coef[0], "log1p_faults", r.coef[1], "log1p_faults_30d", r.coef[2], "recency_30d",
        r.coef[3], "log1p_hardware_faults", r.coef[4], "model", "auc",
        isfinite(r.auc_model) ? json_real(r.auc_model) : json_null(), "precision_at_k",
        r.precision_model, "recall_at_k", r.recall_model, "baseline_most_faults", "auc",
        isfinite(r.auc_baseline) ? json_real(r.auc_baseline) : json_null(), "precision_at_k",
        r.precision_baseline, "recall_at_k", r.recall_baseline, "seconds", secs);
    if (!d)
        return util_fail(AI_ERR_NOMEM, "ai_sim_predict: report");
    char *text = NULL;
    if (as_json) {
        text = json_dumps(d, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    } else {
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            fprintf(f,
                    "trace %s: %d faults on %d of %d nodes over %.1f days\n"
                    "fitted on days 0-%.1f, measured on %d windows of %g days after "
                    "(%ld node-windows, %ld with a fault)\n"
                    "                    AUC     precision@%d  recall@%d\n",
                    trace_path, r.faults, r.nodes_failing, r.nodes, r.end_days, r.split_days,
                    r.test_times, o.window_days, r.test_rows, r.test_positives, o.topk, o.topk);
            fprintf(f, "  model           %6.3f  %9.3f  %9.3f\n", r.auc_model, r.precision_model,
                    r.recall_model);
            fprintf(f, "  most faults     %6.3f  %9.3f  %9.3f\n", r.auc_baseline,
                    r.precision_baseline, r.recall_baseline);
            if (fclose(f) != 0) {
                free(text);
                text = NULL;
            }
        }
    }
    json_decref(d);
    if (!text)
        return util_fail(AI_ERR_NOMEM, "ai_sim_predict: report");
    *out = text;
    return AI_OK;
}
