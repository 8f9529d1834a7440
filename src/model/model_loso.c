/*
 * Leave-one-source-out cross-validation of the step model.
 *
 * For each source of data/calibration (a paper's table, a vendor's
 * release notes), the free parameters are fitted on the rows of all the
 * other sources and the held-out source's rows are predicted with them.
 * The per-source error is what the model can promise on a table it has
 * never seen: a source shares its software, its cluster and its
 * conventions across its rows, so holding out single rows would leak them.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_calib_sources(const model_calib *c, char names[][32], int max)
{
    int n = 0;
    for (int i = 0; i < c->nrows; i++) {
        int k = 0;
        while (k < n && strcmp(names[k], c->rows[i].source))
            k++;
        if (k == n && n < max)
            snprintf(names[n++], 32, "%s", c->rows[i].source);
    }
    return n;
}

ai_status_t model_fit_without(const model_calib *c, const char *holdout, model_params *out, double *loss)
{
    model_calib train = *c;
    train.rows = calloc((size_t)c->nrows + 1, sizeof *train.rows);
    if (!train.rows)
        return util_fail(AI_ERR_NOMEM, "fit");
    train.nrows = 0;
    for (int i = 0; i < c->nrows; i++)
        if (!holdout || strcmp(c->rows[i].source, holdout) != 0)
            train.rows[train.nrows++] = c->rows[i];
    ai_status_t st;
    if (holdout && train.nrows == c->nrows)
        st = util_fail(AI_ERR_NOTFOUND, "no calibration source named '%s'", holdout);
    else
        st = model_fit(&train, &model_params_fitted, out, loss);
    free(train.rows);
    return st;
}

ai_status_t model_loso(const model_calib *c, model_loso_source *src, int max, int *nsrc, double *pred)
{
    char names[MODEL_LOSO_MAX][32];
    int n = model_calib_sources(c, names, AI_MIN(max, MODEL_LOSO_MAX));
    for (int s = 0; s < n; s++) {
        model_loso_source *o = &src[s];
        memset(o, 0, sizeof *o);
        snprintf(o->source, sizeof o->source, "%s", names[s]);
        ai_status_t st = model_fit_without(c, names[s], &o->params, &o->fit_loss);
        if (st != AI_OK)
            return st;
        o->worst_row = -1;
        for (int i = 0; i < c->nrows; i++) {
            if (strcmp(c->rows[i].source, names[s]))
                continue;
            double p = model_calib_predict(&c->rows[i], &o->params);
            double e = 100 * (p / c->rows[i].published - 1);
            if (pred)
                pred[i] = p;
            o->mape_pct += fabs(e);
            o->nrows++;
            if (o->worst_row < 0 || fabs(e) > fabs(o->worst_pct)) {
                o->worst_pct = e;
                o->worst_row = i;
            }
            o->within_10 += fabs(e) <= 10;
        }
        o->mape_pct /= AI_MAX(1, o->nrows);
    }
    *nsrc = n;
    return AI_OK;
}

ai_status_t model_loso_report(const char *calib_dir, int as_json, char **out)
{
    model_calib *c;
    ai_status_t st = model_calib_load(calib_dir, &c);
    if (st != AI_OK)
        return st;
    model_loso_source src[MODEL_LOSO_MAX];
    double *pred = calloc((size_t)c->nrows + 1, sizeof *pred);
    int n = 0;
    if (!pred)
        st = util_fail(AI_ERR_NOMEM, "leave-one-source-out");
    else
        st = model_loso(c, src, MODEL_LOSO_MAX, &n, pred);
    if (st != AI_OK) {
        free(pred);
        model_calib_free(c);
        return st;
    }
    int total = 0, within = 0;
    double mape = 0, worst = 0;
    for (int s = 0; s < n; s++) {
        total += src[s].nrows;
        within += src[s].within_10;
        mape += src[s].mape_pct * src[s].nrows;
        worst = AI_MAX(worst, fabs(src[s].worst_pct));
    }
    mape /= AI_MAX(1, total);
    char *text = NULL;
    if (as_json) {
        json_t *doc = json_object(), *arr = json_array(), *rows = json_array();
        for (int s = 0; s < n; s++) {
            json_t *params = json_object();
            for (int i = 0; i < MODEL_NPARAMS; i++)
                json_object_set_new(params, model_param_names[i], json_real(*model_params_slot(&src[s].params, i)));
            const model_calib_row *w = &c->rows[src[s].worst_row];
            json_array_append_new(arr, json_pack("{s:s, s:i, s:i, s:f, s:f, s:s, s:o}", "source", src[s].source,
                                                 "rows", src[s].nrows, "rows_within_10pct", src[s].within_10,
                                                 "mape_pct", src[s].mape_pct, "worst_error_pct", src[s].worst_pct,
                                                 "worst_row", w->name, "params_fitted_without", params));
        }
        for (int i = 0; i < c->nrows; i++) {
            const model_calib_row *r = &c->rows[i];
            json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:s, s:s, s:f, s:f, s:f}", "source", r->source,
                                                  "row", r->name, "cite", r->cite, "software", r->software, "unit",
                                                  model_metric_unit(r->metric), "published", r->published,
                                                  "predicted_held_out", pred[i], "error_pct",
                                                  100 * (pred[i] / r->published - 1)));
        }
        json_object_set_new(doc, "sources", arr);
        json_object_set_new(doc, "rows", rows);
        json_object_set_new(doc, "rows_total", json_integer(total));
        json_object_set_new(doc, "rows_within_10pct", json_integer(within));
        json_object_set_new(doc, "mape_pct", json_real(mape));
        json_object_set_new(doc, "max_abs_error_pct", json_real(worst));
        text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8));
        json_decref(doc);
    } else {
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            fprintf(f, "leave-one-source-out: each source predicted by a fit on all the others\n\n");
            fprintf(f, "%-20s %5s %8s %8s %9s  %s\n", "held-out source", "rows", "<=10%", "MAPE", "worst", "worst row");
            for (int s = 0; s < n; s++)
                fprintf(f, "%-20s %5d %8d %7.1f%% %+8.1f%%  %s\n", src[s].source, src[s].nrows, src[s].within_10,
                        src[s].mape_pct, src[s].worst_pct, c->rows[src[s].worst_row].name);
            fprintf(f, "%-20s %5d %8d %7.1f%% %8.1f%%\n\n", "all", total, within, mape, worst);
            fprintf(f, "%-20s %-32s %12s %12s %8s  %s\n", "source", "row", "published", "held-out", "error", "unit");
            for (int i = 0; i < c->nrows; i++) {
                const model_calib_row *r = &c->rows[i];
                fprintf(f, "%-20s %-32s %12.3f %12.3f %+7.1f%%  %s\n", r->source, r->name, r->published, pred[i],
                        100 * (pred[i] / r->published - 1), model_metric_unit(r->metric));
            }
            fclose(f);
        }
    }
    free(pred);
    model_calib_free(c);
    if (!text)
        return util_fail(AI_ERR_NOMEM, "leave-one-source-out report");
    *out = text;
    return AI_OK;
}
