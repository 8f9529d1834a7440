/* The shipped parameters reproduce the published tables, and refitting
 * from them comes back to them (the fit is what produced them). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static model_calib *calib;

static int setup(void **state)
{
    (void)state;
    const char *src = getenv("AUTOINFRA_SOURCE_DIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/data/calibration", src ? src : ".");
    if (model_calib_load(dir, &calib) != AI_OK) {
        fprintf(stderr, "%s\n", ai_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_calib_free(calib);
    return 0;
}

/* The repo carries the published tables: the two reference ones and at
 * least six more sources with 60 rows between them, every row cited. */
static void test_published_sources(void **state)
{
    (void)state;
    char names[MODEL_LOSO_MAX][32];
    int n = model_calib_sources(calib, names, MODEL_LOSO_MAX);
    int extra = 0;
    for (int i = 0; i < calib->nrows; i++) {
        const model_calib_row *r = &calib->rows[i];
        assert_true(r->cite[0] && r->software[0] && r->published > 0);
        extra += strcmp(r->source, "korthikanti_table5") && strcmp(r->source, "megatron_core_h100");
    }
    assert_true(n >= 8);
    assert_true(extra >= 60);
}

/* Settings the sources state, as the rows carry them: the Megatron-LM
 * README's scaling runs overlap TP communication ("--tp-comm-overlap"),
 * and Llama 3 reduce-scatters its gradients in FP32 (arXiv:2407.21783,
 * section 3.3.2, numerical stability). */
static void test_stated_settings(void **state)
{
    (void)state;
    int mcore = 0, llama = 0;
    for (int i = 0; i < calib->nrows; i++) {
        const model_calib_row *r = &calib->rows[i];
        if (!strcmp(r->source, "megatron_core_h100")) {
            assert_true(r->train.tp_comm_overlap);
            mcore++;
        } else if (!strcmp(r->source, "llama3_2024")) {
            assert_true(r->train.grad_fp32);
            llama++;
        }
    }
    assert_int_equal(mcore, 9);
    assert_int_equal(llama, 3);
}

/* The shipped parameters (fitted on every row) reproduce the tables they
 * were fitted on: the in-sample error bounds of docs/model.md. */
static void test_rows_in_sample(void **state)
{
    (void)state;
    double mape = 0;
    for (int i = 0; i < calib->nrows; i++) {
        const model_calib_row *r = &calib->rows[i];
        double pred = model_calib_predict(r, &model_params_fitted);
        double err = pred / r->published - 1;
        if (fabs(err) > 0.25) {
            print_error("%s %s: predicted %.3f published %.3f (%+.1f%%)\n", r->source, r->name, pred,
                        r->published, 100 * err);
            fail();
        }
        mape += fabs(err) / calib->nrows;
    }
    assert_true(mape < 0.075);
}

static void test_memory_within_10pct(void **state)
{
    (void)state;
    const double GiB = 1024.0 * 1024 * 1024;
    assert_int_equal(calib->nmem, 8);
    for (int i = 0; i < calib->nmem; i++) {
        model_ctx ctx = {calib->mem[i].cluster, &calib->mem[i].model, &calib->mem[i].train, model_params_fitted};
        double pb, ab;
        model_stage_memory(&ctx, &calib->mem[i].plan, 0, calib->mem[i].plan.sets[0].micro_batches, &pb, &ab);
        double ep = pb / GiB / calib->mem[i].params_GiB - 1, ea = ab / GiB / calib->mem[i].act_GiB - 1;
        if (fabs(ep) > 0.10 || fabs(ea) > 0.10) {
            print_error("%s: params %+.1f%% activations %+.1f%%\n", calib->mem[i].name, 100 * ep, 100 * ea);
            fail();
        }
    }
}

static void test_refit_reproduces_shipped(void **state)
{
    (void)state;
    model_params fitted;
    double loss;
    assert_int_equal(model_fit(calib, &model_params_fitted, &fitted, &loss), AI_OK);
    model_params shipped = model_params_fitted;
    for (int i = 0; i < MODEL_NPARAMS; i++) {
        double a = *model_params_slot(&fitted, i), b = *model_params_slot(&shipped, i);
        double range = model_param_hi[i] - model_param_lo[i];
        if (fabs(a - b) > 0.02 * range) {
            print_error("%s: refit %.6g, shipped %.6g\n", model_param_names[i], a, b);
            fail();
        }
        assert_true(a >= model_param_lo[i] && a <= model_param_hi[i]);
    }
    /* Shipped values are (within noise) the optimum of the same loss. */
    double shipped_loss = model_fit_loss(calib, &shipped);
    assert_true(shipped_loss <= loss * 1.01 + 1e-9);
    /* A deliberately bad start still lands on a good fit: the fit, not the
     * starting values, carries the numbers. */
    model_params bad = shipped;
    bad.gemm_eff = 0.5;
    bad.mem_eff = 0.9;
    bad.dp_overlap = 0.2;
    double loss2;
    assert_int_equal(model_fit(calib, &bad, &fitted, &loss2), AI_OK);
    if (!(loss2 < 1.5 * loss + 1e-4)) {
        print_error("bad start: loss %.6g, shipped start %.6g\n", loss2, loss);
        fail();
    }
}

/* The fit is a pure function of the rows and the start: two fits give
 * the same parameters to the last bit, and loading the data twice gives
 * the same rows in the same order. */
static void test_fit_deterministic(void **state)
{
    (void)state;
    model_params a, b;
    double la, lb;
    assert_int_equal(model_fit_without(calib, "nemo_h100", &a, &la), AI_OK);
    const char *src = getenv("AUTOINFRA_SOURCE_DIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/data/calibration", src ? src : ".");
    model_calib *again;
    assert_int_equal(model_calib_load(dir, &again), AI_OK);
    assert_int_equal(again->nrows, calib->nrows);
    for (int i = 0; i < calib->nrows; i++) {
        assert_string_equal(again->rows[i].name, calib->rows[i].name);
        assert_true(again->rows[i].published == calib->rows[i].published);
    }
    assert_int_equal(model_fit_without(again, "nemo_h100", &b, &lb), AI_OK);
    model_calib_free(again);
    assert_memory_equal(&a, &b, sizeof a);
    assert_true(la == lb);
}

/* Leave-one-source-out, recomputed from the repo's data: Narayanan et
 * al.'s Table 1 (A100, Megatron-LM 2021, 1.7B-1T) predicted by a fit on
 * the other sources (none of which has its software or its 2021 layouts)
 * within 10% on every row, as docs/model.md reports; and model_loso gives
 * the same numbers for that source. */
static void test_loso_held_out_source(void **state)
{
    (void)state;
    const char *held = "narayanan2021";
    model_params p;
    double loss;
    assert_int_equal(model_fit_without(calib, held, &p, &loss), AI_OK);
    int n = 0;
    double mape = 0, worst = 0;
    for (int i = 0; i < calib->nrows; i++) {
        const model_calib_row *r = &calib->rows[i];
        if (strcmp(r->source, held))
            continue;
        double e = 100 * (model_calib_predict(r, &p) / r->published - 1);
        if (fabs(e) > 10) {
            print_error("%s held out: %s %+.1f%%\n", held, r->name, e);
            fail();
        }
        mape += fabs(e);
        worst = AI_MAX(worst, fabs(e));
        n++;
    }
    assert_int_equal(n, 10);
    mape /= n;
    assert_true(mape < 6);
    model_loso_source src[MODEL_LOSO_MAX];
    int nsrc;
    assert_int_equal(model_loso(calib, src, MODEL_LOSO_MAX, &nsrc, NULL), AI_OK);
    int found = 0;
    for (int s = 0; s < nsrc; s++) {
        if (strcmp(src[s].source, held))
            continue;
        found = 1;
        assert_int_equal(src[s].nrows, 10);
        assert_int_equal(src[s].within_10, 10);
        assert_true(fabs(src[s].mape_pct - mape) < 1e-9);
        assert_true(fabs(fabs(src[s].worst_pct) - worst) < 1e-9);
    }
    assert_true(found);
    /* An unknown source is an error, not a fit on everything. */
    assert_int_equal(model_fit_without(calib, "no_such_source", &p, &loss), AI_ERR_NOTFOUND);
}

/* A second held-out source: the Megatron-Core H100 scaling table (bf16,
 * 1.7B-462B, 48-6,144 GPUs) predicted by a fit on the others, at the
 * figures docs/model.md reports (8 of 9 rows within 10%, MAPE 5.8%; it
 * was 5 of 9 and 10.0% before the table's TP overlap was read from its
 * README, flash attention's backward was costed as five products and
 * an interleaved pipeline's DP window was bounded). Required: 7 of 9,
 * MAPE under 7%. */
static void test_loso_megatron_core(void **state)
{
    (void)state;
    const char *held = "megatron_core_h100";
    model_params p;
    double loss;
    assert_int_equal(model_fit_without(calib, held, &p, &loss), AI_OK);
    int n = 0, within = 0;
    double mape = 0;
    for (int i = 0; i < calib->nrows; i++) {
        const model_calib_row *r = &calib->rows[i];
        if (strcmp(r->source, held))
            continue;
        double e = 100 * (model_calib_predict(r, &p) / r->published - 1);
        within += fabs(e) <= 10;
        mape += fabs(e);
        n++;
    }
    assert_int_equal(n, 9);
    mape /= n;
    if (within < 7 || mape > 7) {
        print_error("%s held out: %d of %d within 10%%, MAPE %.1f%%\n", held, within, n, mape);
        fail();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_sources),
        cmocka_unit_test(test_stated_settings),
        cmocka_unit_test(test_loso_megatron_core),
        cmocka_unit_test(test_rows_in_sample),
        cmocka_unit_test(test_fit_deterministic),
        cmocka_unit_test(test_loso_held_out_source),
        cmocka_unit_test(test_memory_within_10pct),
        cmocka_unit_test(test_refit_reproduces_shipped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
