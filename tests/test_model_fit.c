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

static void test_rows_within_10pct(void **state)
{
    (void)state;
    assert_int_equal(calib->nrows, 17);
    double mape = 0;
    for (int i = 0; i < calib->nrows; i++) {
        const model_calib_row *r = &calib->rows[i];
        double pred = model_calib_predict(r, &model_params_fitted);
        double err = pred / r->published - 1;
        if (fabs(err) > 0.10) {
            print_error("%s %s: predicted %.3f published %.3f (%+.1f%%)\n", r->source, r->name, pred,
                        r->published, 100 * err);
            fail();
        }
        mape += fabs(err) / calib->nrows;
    }
    assert_true(mape < 0.05);
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
    assert_true(loss2 < 1.5 * loss + 1e-4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_within_10pct),
        cmocka_unit_test(test_memory_within_10pct),
        cmocka_unit_test(test_refit_reproduces_shipped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
