/*
 * Reduction kernels, dtype/op names and the f16 / bf16 conversions, checked
 * against independent references. Pure: no communicator.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "comm/kernel/reduce.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------------- names */

static void test_names(void **state)
{
    (void)state;
    static const char *const dn[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
    static const size_t ds[] = {4, 8, 2, 2, 4, 8, 1};
    for (int i = 0; i < AI_DTYPE_COUNT; i++) {
        ai_dtype d;
        assert_string_equal(ai_dtype_name((ai_dtype)i), dn[i]);
        assert_int_equal(ai_dtype_size((ai_dtype)i), ds[i]);
        assert_int_equal(ai_dtype_parse(dn[i], &d), AI_OK);
        assert_int_equal(d, i);
    }
    ai_dtype d = AI_F32;
    assert_int_equal(ai_dtype_parse("BF16", &d), AI_OK);
    assert_int_equal(d, AI_BF16);
    assert_int_equal(ai_dtype_parse("float128", &d), AI_ERR_INVALID);
    assert_non_null(strstr(ai_last_error(), "float128"));
    assert_int_equal(ai_dtype_parse(NULL, &d), AI_ERR_INVALID);
    assert_int_equal(ai_dtype_size(AI_DTYPE_COUNT), 0);

    static const char *const on[] = {"sum", "prod", "min", "max", "avg"};
    for (int i = 0; i < AI_OP_COUNT; i++) {
        ai_op op;
        assert_string_equal(ai_op_name((ai_op)i), on[i]);
        assert_int_equal(ai_op_parse(on[i], &op), AI_OK);
        assert_int_equal(op, i);
    }
    ai_op op = AI_SUM;
    assert_int_equal(ai_op_parse("Max", &op), AI_OK);
    assert_int_equal(op, AI_MAX);
    assert_int_equal(ai_op_parse("xor", &op), AI_ERR_INVALID);
    assert_int_equal(op, AI_MAX); /* untouched on failure */
}

/* -------------------------------------------------------- f16 / bf16 */

/* Decoding by the definition of binary16. */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, -24);
    else
        v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* Nearest representable by exhaustive table: finite positive encodings are
 * monotonic in their bits, so search the table; one virtual entry above
 * the maximum (the next power of two, encoded as Inf, an even encoding)
 * makes overflow round the same way as any other tie. */
static double f16_tab[0x7c01], bf16_tab[0x7f81];

static void build_tables(void)
{
    for (uint32_t h = 0; h < 0x7c00; h++)
        f16_tab[h] = f16_value((uint16_t)h);
    f16_tab[0x7c00] = 65536.0;
    for (uint32_t h = 0; h < 0x7f80; h++)
        bf16_tab[h] = (double)bitsf(h << 16);
    bf16_tab[0x7f80] = ldexp(1.0, 128);
}

static uint16_t ref_round(const double *tab, uint32_t n_enc, uint16_t inf, float f)
{
    uint32_t u = fbits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    double a = fabs((double)f);
    if (a >= tab[inf])
        return sign | inf;
    uint32_t lo = 0, hi = n_enc; /* tab[lo] <= a < tab[hi] */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (tab[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - tab[lo], dh = tab[hi] - a;
    uint32_t r = (dl < dh) ? lo : (dh < dl) ? hi : ((lo & 1) ? hi : lo);
    return (uint16_t)(sign | r);
}

static uint16_t ref_f16(float f) { return ref_round(f16_tab, 0x7c00, 0x7c00, f); }
static uint16_t ref_bf16(float f) { return ref_round(bf16_tab, 0x7f80, 0x7f80, f); }

static void check_f16(float f)
{
    if (isnan(f)) {
        uint16_t h = ai_f32_to_f16(f);
        assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
        assert_true(h & 0x200);
        assert_int_equal(h >> 15, fbits(f) >> 31);
        return;
    }
    uint16_t got = ai_f32_to_f16(f), want = ref_f16(f);
    if (got != want)
        fail_msg("f32_to_f16(%a = 0x%08x) = 0x%04x, want 0x%04x", (double)f, fbits(f), got,
                 want);
#ifdef __FLT16_MAX__
    _Float16 x = (_Float16)f;
    uint16_t hb;
    memcpy(&hb, &x, 2);
    if (got != hb)
        fail_msg("f32_to_f16(%a) = 0x%04x, compiler says 0x%04x", (double)f, got, hb);
#endif
}

static void check_bf16(float f)
{
    if (isnan(f)) {
        uint16_t h = ai_f32_to_bf16(f);
        assert_true((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
        assert_true(h & 0x40);
        assert_int_equal(h >> 15, fbits(f) >> 31);
        return;
    }
    uint16_t got = ai_f32_to_bf16(f), want = ref_bf16(f);
    if (got != want)
        fail_msg("f32_to_bf16(%a = 0x%08x) = 0x%04x, want 0x%04x", (double)f, fbits(f), got,
                 want);
}

/* Every encoding decodes to its defined value and survives a round trip
 * (NaNs stay NaN, keep their sign and come back quiet). */
static void test_f16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = ai_f16_to_f32((uint16_t)h);
        double want = f16_value((uint16_t)h);
        uint16_t back = ai_f32_to_f16(f);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_int_equal(back & 0x8000, h & 0x8000);
            assert_true((back & 0x7e00) == 0x7e00);
            if (h & 0x200) /* quiet NaNs come back bit-exact */
                assert_int_equal(back, h);
            continue;
        }
        if ((double)f != want || !!signbit(f) != (int)(h >> 15))
            fail_msg("f16_to_f32(0x%04x) = %a, want %a", h, (double)f, want);
        if (back != h)
            fail_msg("round trip of 0x%04x gives 0x%04x", h, back);
    }
}

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = ai_bf16_to_f32((uint16_t)h);
        assert_int_equal(fbits(f), h << 16);
        uint16_t back = ai_f32_to_bf16(f);
        if (isnan(f)) {
            assert_int_equal(back & 0x8000, h & 0x8000);
            assert_true((back & 0x7fc0) == 0x7fc0);
            if (h & 0x40)
                assert_int_equal(back, h);
            continue;
        }
        if (back != h)
            fail_msg("bf16 round trip of 0x%04x gives 0x%04x", h, back);
    }
}

/* Rounding: every representable value, every midpoint between neighbours
 * (the ties), and the floats just around both, for both signs; then random
 * bit patterns. */
static void rounding_sweep(const double *tab, uint32_t n_enc, void (*check)(float))
{
    for (uint32_t h = 0; h < n_enc; h++) {
        double v = tab[h], mid = (tab[h] + tab[h + 1]) / 2; /* exact in double */
        float pts[] = {(float)v, (float)mid};
        for (int k = 0; k < 2; k++) {
            uint32_t u = fbits(pts[k]);
            for (int d = -2; d <= 2; d++) {
                if ((int64_t)u + d < 0)
                    continue;
                float f = bitsf((uint32_t)((int64_t)u + d));
                check(f);
                check(-f);
            }
        }
    }
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        check(bitsf((uint32_t)x));
    }
    static const float special[] = {0.0f, INFINITY, 65504.0f, 65519.99f, 65520.0f, 0x1p-24f,
                                    0x1p-25f, 0x1.000002p-25f, 0x1p-14f, 3.4028235e38f, NAN};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        check(special[i]);
        check(-special[i]);
    }
}

static void test_f16_rounding(void **state)
{
    (void)state;
    rounding_sweep(f16_tab, 0x7c00, check_f16);
    assert_int_equal(ai_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(ai_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(ai_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(ai_f32_to_f16(0x1.8p-25f), 0x0001);
    assert_int_equal(ai_f32_to_f16(0x1.8p-24f), 0x0002); /* tie to even */
    assert_int_equal(ai_f32_to_f16(-0.0f), 0x8000);
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    rounding_sweep(bf16_tab, 0x7f80, check_bf16);
    assert_int_equal(ai_f32_to_bf16(bitsf(0x3f808000u)), 0x3f80); /* tie, even stays */
    assert_int_equal(ai_f32_to_bf16(bitsf(0x3f818000u)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(ai_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* overflow to Inf */
    assert_int_equal(ai_f32_to_bf16(bitsf(0x7f800001u)) & 0x7fc0, 0x7fc0); /* sNaN stays NaN */
}

/* ----------------------------------------------------------- kernels */

/* Reference: element-wise, in the type's own semantics, written plainly. */
static void ref_elem(ai_dtype dt, ai_op op, const unsigned char *a, const unsigned char *b,
                     unsigned char *out)
{
    switch (dt) {
    case AI_F32: case AI_F64: case AI_F16: case AI_BF16: {
        double x, y, r;
        if (dt == AI_F32) {
            float fx, fy;
            memcpy(&fx, a, 4), memcpy(&fy, b, 4);
            x = fx, y = fy;
        } else if (dt == AI_F64) {
            memcpy(&x, a, 8), memcpy(&y, b, 8);
        } else {
            uint16_t hx, hy;
            memcpy(&hx, a, 2), memcpy(&hy, b, 2);
            x = dt == AI_F16 ? ai_f16_to_f32(hx) : ai_bf16_to_f32(hx);
            y = dt == AI_F16 ? ai_f16_to_f32(hy) : ai_bf16_to_f32(hy);
        }
        switch (op) {
        case AI_PROD: r = x * y; break;
        case AI_MIN: r = (isnan(x) || isnan(y)) ? NAN : (x < y ? x : y); break;
        case AI_MAX: r = (isnan(x) || isnan(y)) ? NAN : (x > y ? x : y); break;
        default: r = x + y; break;
        }
        /* float +,* computed in double and rounded once are correctly
         * rounded (double has > 2p + 2 bits) */
        if (dt == AI_F32) {
            float f = (float)r;
            memcpy(out, &f, 4);
        } else if (dt == AI_F64) {
            memcpy(out, &r, 8);
        } else {
            uint16_t h = dt == AI_F16 ? ai_f32_to_f16((float)r) : ai_f32_to_bf16((float)r);
            memcpy(out, &h, 2);
        }
        return;
    }
    case AI_I32: case AI_I64: case AI_U8: {
        int64_t x = 0, y = 0;
        uint64_t r;
        size_t es = ai_dtype_size(dt);
        if (dt == AI_I32) {
            int32_t v, w;
            memcpy(&v, a, 4), memcpy(&w, b, 4);
            x = v, y = w;
        } else if (dt == AI_I64) {
            memcpy(&x, a, 8), memcpy(&y, b, 8);
        } else {
            x = a[0], y = b[0];
        }
        switch (op) {
        case AI_PROD: r = (uint64_t)x * (uint64_t)y; break;
        case AI_MIN: r = (uint64_t)(x < y ? x : y); break;
        case AI_MAX: r = (uint64_t)(x > y ? x : y); break;
        default: r = (uint64_t)x + (uint64_t)y; break;
        }
        /* little endian: the low bytes are the wrapped result */
        memcpy(out, &r, es);
        return;
    }
    default:
        return;
    }
}

static void fill_random(ai_dtype dt, unsigned char *p, size_t n, uint64_t *x)
{
    for (size_t i = 0; i < n; i++) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        uint64_t r = *x;
        switch (dt) {
        case AI_F32: {
            float f = (float)((int64_t)(r % 2001) - 1000) / 8.0f;
            if (r % 97 == 0)
                f = bitsf((uint32_t)(r >> 11)); /* any bit pattern, NaN included */
            memcpy(p + 4 * i, &f, 4);
            break;
        }
        case AI_F64: {
            double d = (double)((int64_t)(r % 20001) - 10000) / 16.0;
            memcpy(p + 8 * i, &d, 8);
            break;
        }
        case AI_F16: case AI_BF16: {
            uint16_t h = (uint16_t)(r >> 20); /* every pattern, NaN/Inf/subnormal */
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        case AI_I32: {
            int32_t v = (int32_t)(uint32_t)(r >> 17);
            memcpy(p + 4 * i, &v, 4);
            break;
        }
        case AI_I64:
            memcpy(p + 8 * i, &r, 8);
            break;
        case AI_U8:
            p[i] = (uint8_t)(r >> 30);
            break;
        default:
            break;
        }
    }
}

/* Equal as the type defines equality for our purposes: bit-exact, except
 * that any NaN matches any NaN (payload propagation is not specified) and
 * -0 matches +0 (min/max may return either, see kernel/reduce_local.c). */
static int same_elem(ai_dtype dt, const unsigned char *x, const unsigned char *y)
{
    size_t es = ai_dtype_size(dt);
    if (memcmp(x, y, es) == 0)
        return 1;
    if (dt == AI_F32) {
        float a, b;
        memcpy(&a, x, 4), memcpy(&b, y, 4);
        return (isnan(a) && isnan(b)) || a == b;
    }
    if (dt == AI_F64) {
        double a, b;
        memcpy(&a, x, 8), memcpy(&b, y, 8);
        return (isnan(a) && isnan(b)) || a == b;
    }
    if (dt == AI_F16 || dt == AI_BF16) {
        uint16_t a, b;
        memcpy(&a, x, 2), memcpy(&b, y, 2);
        float fa = dt == AI_F16 ? ai_f16_to_f32(a) : ai_bf16_to_f32(a);
        float fb = dt == AI_F16 ? ai_f16_to_f32(b) : ai_bf16_to_f32(b);
        return (isnan(fa) && isnan(fb)) || fa == fb;
    }
    return 0;
}

typedef void (*reduce_fn)(void *, const void *, const void *, size_t, ai_dtype, ai_op);

/* Every dtype x op, lengths around vector widths, byte-misaligned operands,
 * dst distinct / dst == a / dst == b; the dispatching entry point (SIMD
 * paths where the CPU has them) and the portable loops. */
static void check_kernels(reduce_fn reduce)
{
    static const size_t lens[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 1000, 4099};
    enum { MAXN = 4099, PAD = 16 };
    unsigned char *a = malloc(MAXN * 8 + PAD), *b = malloc(MAXN * 8 + PAD);
    unsigned char *d = malloc(MAXN * 8 + PAD), *want = malloc(MAXN * 8 + PAD);
    unsigned char *a0 = malloc(MAXN * 8 + PAD);
    assert_non_null(a), assert_non_null(b), assert_non_null(d), assert_non_null(want);
    assert_non_null(a0);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int dt = 0; dt < AI_DTYPE_COUNT; dt++) {
        size_t es = ai_dtype_size((ai_dtype)dt);
        for (int op = 0; op < AI_OP_COUNT; op++) {
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                size_t n = lens[li];
                for (int mode = 0; mode < 4; mode++) {
                    /* mode 0: aligned, distinct; 1: misaligned by 1..3
                     * bytes; 2: dst == a; 3: dst == b */
                    size_t oa = mode == 1 ? 1 : 0, ob = mode == 1 ? 3 : 0, od = mode == 1 ? 2 : 0;
                    unsigned char *pa = a + oa, *pb = b + ob, *pd = d + od;
                    fill_random((ai_dtype)dt, pa, n, &seed);
                    fill_random((ai_dtype)dt, pb, n, &seed);
                    ai_op rop = op == AI_AVG ? AI_SUM : (ai_op)op;
                    for (size_t i = 0; i < n; i++)
                        ref_elem((ai_dtype)dt, rop, pa + i * es, pb + i * es, want + i * es);
                    memcpy(a0, pa, n * es);
                    memset(d, 0xcd, MAXN * 8 + PAD);
                    if (mode == 2) {
                        reduce(pa, pa, pb, n, (ai_dtype)dt, (ai_op)op);
                        pd = pa;
                    } else if (mode == 3) {
                        reduce(pb, pa, pb, n, (ai_dtype)dt, (ai_op)op);
                        pd = pb;
                    } else {
                        reduce(pd, pa, pb, n, (ai_dtype)dt, (ai_op)op);
                        assert_memory_equal(pa, a0, n * es); /* inputs untouched */
                        assert_int_equal(pd[n * es], 0xcd); /* no overrun */
                    }
                    for (size_t i = 0; i < n; i++)
                        if (!same_elem((ai_dtype)dt, pd + i * es, want + i * es))
                            fail_msg("%s %s n=%zu mode %d: element %zu differs",
                                     ai_dtype_name((ai_dtype)dt), ai_op_name((ai_op)op), n, mode,
                                     i);
                }
            }
        }
    }
    free(a), free(b), free(d), free(want), free(a0);
}

static void test_kernels(void **state)
{
    (void)state;
    check_kernels(comm_reduce_local);
}

static void test_kernels_portable(void **state)
{
    (void)state;
    check_kernels(comm_reduce_local_portable);
}

static void test_kernel_semantics(void **state)
{
    (void)state;
    /* signed overflow wraps (no UB under -fsanitize=undefined) */
    int32_t i32a[2] = {INT32_MAX, INT32_MIN}, i32b[2] = {1, -1}, i32r[2];
    comm_reduce_local(i32r, i32a, i32b, 2, AI_I32, AI_SUM);
    assert_int_equal(i32r[0], INT32_MIN);
    assert_int_equal(i32r[1], INT32_MAX);
    int64_t i64a[1] = {INT64_MAX}, i64b[1] = {2}, i64r[1];
    comm_reduce_local(i64r, i64a, i64b, 1, AI_I64, AI_PROD);
    assert_true(i64r[0] == -2);
    uint8_t ua[1] = {200}, ub[1] = {100}, ur[1];
    comm_reduce_local(ur, ua, ub, 1, AI_U8, AI_SUM);
    assert_int_equal(ur[0], 44);
    /* NaN propagates through min and max from either side */
    float fa[4] = {NAN, 1.0f, NAN, -0.0f}, fb[4] = {1.0f, NAN, NAN, 2.0f}, fr[4];
    comm_reduce_local(fr, fa, fb, 4, AI_F32, AI_MIN);
    assert_true(isnan(fr[0]) && isnan(fr[1]) && isnan(fr[2]));
    assert_true(fr[3] == 0.0f);
    comm_reduce_local(fr, fa, fb, 4, AI_F32, AI_MAX);
    assert_true(isnan(fr[0]) && isnan(fr[1]) && isnan(fr[2]));
    assert_true(fr[3] == 2.0f);
    double da[2] = {NAN, 3.0}, db[2] = {-1.0, 3.5}, dr[2];
    comm_reduce_local(dr, da, db, 2, AI_F64, AI_MAX);
    assert_true(isnan(dr[0]) && dr[1] == 3.5);
    /* AVG reduces as SUM (the division happens after the collective) */
    float s[1];
    comm_reduce_local(s, (float[]){1.5f}, (float[]){2.0f}, 1, AI_F32, AI_AVG);
    assert_true(s[0] == 3.5f);
}

static void test_scale_div(void **state)
{
    (void)state;
    float f[3] = {7.0f, -7.0f, 1.0f};
    comm_scale_div(f, 3, AI_F32, 2);
    assert_true(f[0] == 3.5f && f[1] == -3.5f && f[2] == 0.5f);
    double d[1] = {1.0};
    comm_scale_div(d, 1, AI_F64, 3);
    assert_true(d[0] == 1.0 / 3.0);
    int32_t i[3] = {7, -7, INT32_MIN};
    comm_scale_div(i, 3, AI_I32, 2);
    assert_int_equal(i[0], 3);
    assert_int_equal(i[1], -3); /* truncates toward zero */
    assert_int_equal(i[2], INT32_MIN / 2);
    int64_t l[1] = {-9};
    comm_scale_div(l, 1, AI_I64, 4);
    assert_true(l[0] == -2);
    uint8_t u[2] = {255, 5};
    comm_scale_div(u, 2, AI_U8, 2);
    assert_int_equal(u[0], 127);
    assert_int_equal(u[1], 2);
    uint16_t h[2] = {ai_f32_to_f16(3.0f), ai_f32_to_bf16(3.0f)};
    comm_scale_div(&h[0], 1, AI_F16, 3);
    comm_scale_div(&h[1], 1, AI_BF16, 2);
    assert_int_equal(h[0], ai_f32_to_f16(1.0f));
    assert_true(ai_bf16_to_f32(h[1]) == 1.5f);
    int32_t one[1] = {5};
    comm_scale_div(one, 1, AI_I32, 1);
    comm_scale_div(one, 1, AI_I32, 0); /* ignored, not a division by zero */
    assert_int_equal(one[0], 5);
}

int main(void)
{
    build_tables();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_kernels_portable),
        cmocka_unit_test(test_kernel_semantics),
        cmocka_unit_test(test_scale_div),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
