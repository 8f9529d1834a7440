/*
 * Element types, reduction operators, the local reduction kernels and the
 * f16 / bf16 conversions.
 *
 * The kernels are the inner loop of every reducing collective (the engine
 * calls comm_reduce_local on each piece of incoming data), so they are
 * written for the vectorizer:
 *  - one loop per (dtype, op), no per-element dispatch;
 *  - restrict operands: the "dst is distinct" and "dst is one operand"
 *    (accumulate) cases get separate loops instead of one aliasing loop;
 *  - elements are loaded and stored with memcpy, which compiles to plain
 *    (unaligned) vector loads, so a caller may hand us any byte address
 *    without undefined behaviour and without a slower fallback path;
 *  - f16 and bf16 are widened to float, combined and rounded back (round to
 *    nearest even) per element; on x86-64 CPUs with F16C / AVX2 (checked at
 *    run time) with 8-wide conversion instructions, same results.
 *
 * Integer semantics: sums and products wrap modulo 2^bits (signed types are
 * computed in the unsigned type of the same width, so overflow is never
 * undefined behaviour); AVG divides truncating toward zero.
 *
 * Floating-point min/max: a NaN operand propagates (the result is NaN if
 * either input is NaN), so one NaN anywhere in a collective shows up in the
 * result whatever the reduction order. Signed zeros compare equal; which of
 * -0 and +0 a min/max returns is unspecified.
 */
#include "comm/kernel/reduce.h"

#include <string.h>
#include <strings.h>

/* Nothing here reads floating-point exception flags, so let GCC assume FP
 * operations don't trap: that lets it compute both sides of the branchless
 * f16 selects and vectorize the f16 loops (values are unchanged; only the
 * sticky exception flags may differ). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/* ------------------------------------------------------------- names */

static const struct {
    const char *name;
    size_t size;
} dtype_info[AI_DTYPE_COUNT] = {
    [AI_F32] = {"f32", 4}, [AI_F64] = {"f64", 8}, [AI_F16] = {"f16", 2},
    [AI_BF16] = {"bf16", 2}, [AI_I32] = {"i32", 4}, [AI_I64] = {"i64", 8},
    [AI_U8] = {"u8", 1},
};

static const char *const op_names[AI_OP_COUNT] = {
    [AI_SUM] = "sum", [AI_PROD] = "prod", [AI_MIN] = "min", [AI_MAX] = "max", [AI_AVG] = "avg",
};

size_t ai_dtype_size(ai_dtype dt)
{
    return ((unsigned)dt < AI_DTYPE_COUNT) ? dtype_info[dt].size : 0;
}

const char *ai_dtype_name(ai_dtype dt)
{
    return ((unsigned)dt < AI_DTYPE_COUNT) ? dtype_info[dt].name : "unknown";
}

const char *ai_op_name(ai_op op)
{
    return ((unsigned)op < AI_OP_COUNT) ? op_names[op] : "unknown";
}

void ai_elem_set(void *buf, ai_dtype dt, size_t i, double v)
{
    switch (dt) {
    case AI_F32: ((float *)buf)[i] = (float)v; break;
    case AI_F64: ((double *)buf)[i] = v; break;
    case AI_F16: ((uint16_t *)buf)[i] = ai_f32_to_f16((float)v); break;
    case AI_BF16: ((uint16_t *)buf)[i] = ai_f32_to_bf16((float)v); break;
    case AI_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case AI_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case AI_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: break;
    }
}

double ai_elem_get(const void *buf, ai_dtype dt, size_t i)
{
    switch (dt) {
    case AI_F32: return ((const float *)buf)[i];
    case AI_F64: return ((const double *)buf)[i];
    case AI_F16: return ai_f16_to_f32(((const uint16_t *)buf)[i]);
    case AI_BF16: return ai_bf16_to_f32(((const uint16_t *)buf)[i]);
    case AI_I32: return ((const int32_t *)buf)[i];
    case AI_I64: return (double)((const int64_t *)buf)[i];
    case AI_U8: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

ai_status_t ai_dtype_parse(const char *name, ai_dtype *out)
{
    if (!name)
        return util_fail(AI_ERR_INVALID, "dtype name is NULL");
    for (int i = 0; i < AI_DTYPE_COUNT; i++) {
        if (strcasecmp(name, dtype_info[i].name) == 0) {
            *out = (ai_dtype)i;
            return AI_OK;
        }
    }
    return util_fail(AI_ERR_INVALID, "unknown dtype '%s' (valid: f32, f64, f16, bf16, i32, i64, u8)",
                     name);
}

ai_status_t ai_op_parse(const char *name, ai_op *out)
{
    if (!name)
        return util_fail(AI_ERR_INVALID, "op name is NULL");
    for (int i = 0; i < AI_OP_COUNT; i++) {
        if (strcasecmp(name, op_names[i]) == 0) {
            *out = (ai_op)i;
            return AI_OK;
        }
    }
    return util_fail(AI_ERR_INVALID, "unknown op '%s' (valid: sum, prod, min, max, avg)", name);
}

/* -------------------------------------------------------- conversions */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The f16 conversions are written without branches: every case (normal,
 * subnormal, Inf/NaN, overflow) is computed and the right one selected, so
 * the kernel loops that call them still vectorize. */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t normal = ((exp + 112u) << 23) | (man << 13);
    uint32_t special = 0x7f800000u | (man << 13); /* Inf / NaN, payload kept */
    /* zero and subnormals: man * 2^-24 is exact in float */
    uint32_t sub = f32_bits((float)man * 0x1p-24f);
    uint32_t mag = exp == 0 ? sub : exp == 0x1f ? special : normal;
    return bits_f32(sign | mag);
}

static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    /* Normal: rebias the exponent and round the 13 dropped bits to nearest
     * even (the increment is 1 iff rem + lsb > 0x1000); a carry out of the
     * mantissa correctly bumps the exponent. */
    uint32_t base = (ax >> 13) - (112u << 10);
    uint32_t normal = base + (((ax & 0x1fffu) + (base & 1u) + 0xfffu) >> 13);
    /* Subnormal results (|f| < 2^-14): adding 0.5 puts the ulp at 2^-24,
     * the subnormal spacing, so the FPU's own round-to-nearest-even does
     * the rounding; the low bits are then the f16 encoding (0x400, the
     * smallest normal, when it rounds up). */
    uint32_t sub = f32_bits(bits_f32(ax) + 0.5f) - 0x3f000000u;
    /* NaN keeps its top payload bits with the quiet bit forced, so a
     * payload only in the low bits does not turn into Inf. 65520 is the
     * midpoint between 65504 (max, odd mantissa) and 2^16: it and all
     * above round to Inf. */
    uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
    uint32_t mag = ax > 0x7f800000u ? nan
                 : ax >= 0x477ff000u ? 0x7c00u
                 : ax < 0x38800000u ? sub
                 : normal;
    return (uint16_t)(sign | mag);
}

static inline float bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    /* Round to nearest even by adding 0x7fff plus the lowest kept bit; a
     * carry into the exponent is correct, including overflow to Inf. */
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    /* NaN: truncate (the rounding add could carry it into Inf or flip the
     * sign) and force the quiet bit so the payload cannot vanish. */
    if ((u & 0x7fffffffu) > 0x7f800000u)
        r = (uint16_t)((u >> 16) | 0x40u);
    return r;
}

float ai_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t ai_f32_to_f16(float f) { return f32_to_f16(f); }
float ai_bf16_to_f32(uint16_t h) { return bf16_to_f32(h); }
uint16_t ai_f32_to_bf16(float f) { return f32_to_bf16(f); }

/* ------------------------------------------------------------ kernels */

/* Alignment-agnostic element access (see the header comment). */
#define DEF_LDST(tn, T)                                                        \
    static inline T ld_##tn(const unsigned char *p, size_t i)                  \
    {                                                                          \
        T v;                                                                   \
        memcpy(&v, p + i * sizeof(T), sizeof(T));                              \
        return v;                                                              \
    }                                                                          \
    static inline void st_##tn(unsigned char *p, size_t i, T v)                \
    {                                                                          \
        memcpy(p + i * sizeof(T), &v, sizeof(T));                              \
    }

DEF_LDST(f32, float)
DEF_LDST(f64, double)
DEF_LDST(i32, int32_t)
DEF_LDST(i64, int64_t)
DEF_LDST(u8, uint8_t)
DEF_LDST(h16, uint16_t)

/* Operators. Float min/max propagate NaN: "x < y || x is NaN" picks x when x
 * is NaN, and y when y is NaN (the comparison is false); this compiles to
 * compare + blend, so it still vectorizes. */
#define DEF_FLOAT_OPS(tn, T)                                                   \
    static inline T sum_##tn(T x, T y) { return x + y; }                       \
    static inline T prod_##tn(T x, T y) { return x * y; }                      \
    static inline T min_##tn(T x, T y) { return (x < y || x != x) ? x : y; }   \
    static inline T max_##tn(T x, T y) { return (x > y || x != x) ? x : y; }

#define DEF_SINT_OPS(tn, T, UT)                                                \
    static inline T sum_##tn(T x, T y) { return (T)((UT)x + (UT)y); }          \
    static inline T prod_##tn(T x, T y) { return (T)((UT)x * (UT)y); }         \
    static inline T min_##tn(T x, T y) { return x < y ? x : y; }               \
    static inline T max_##tn(T x, T y) { return x > y ? x : y; }

DEF_FLOAT_OPS(f32, float)
DEF_FLOAT_OPS(f64, double)
DEF_SINT_OPS(i32, int32_t, uint32_t)
DEF_SINT_OPS(i64, int64_t, uint64_t)

static inline uint8_t sum_u8(uint8_t x, uint8_t y) { return (uint8_t)(x + y); }
static inline uint8_t prod_u8(uint8_t x, uint8_t y) { return (uint8_t)((unsigned)x * y); }
static inline uint8_t min_u8(uint8_t x, uint8_t y) { return x < y ? x : y; }
static inline uint8_t max_u8(uint8_t x, uint8_t y) { return x > y ? x : y; }

/* f16 / bf16 through float. */
#define DEF_HALF_OPS(tn, TO32, FROM32)                                         \
    static inline uint16_t sum_##tn(uint16_t x, uint16_t y)                    \
    { return FROM32(TO32(x) + TO32(y)); }                                      \
    static inline uint16_t prod_##tn(uint16_t x, uint16_t y)                   \
    { return FROM32(TO32(x) * TO32(y)); }                                      \
    static inline uint16_t min_##tn(uint16_t x, uint16_t y)                    \
    { return FROM32(min_f32(TO32(x), TO32(y))); }                              \
    static inline uint16_t max_##tn(uint16_t x, uint16_t y)                    \
    { return FROM32(max_f32(TO32(x), TO32(y))); }

DEF_HALF_OPS(f16, f16_to_f32, f32_to_f16)
DEF_HALF_OPS(bf16, bf16_to_f32, f32_to_bf16)

/* Two loops per (type, op): d = a op b with three distinct buffers, and
 * d = d op b (accumulate). */
#define DEF_KERNEL(op, tn, ldn, T)                                             \
    static void k3_##op##_##tn(unsigned char *restrict d,                      \
                               const unsigned char *restrict a,                \
                               const unsigned char *restrict b, size_t n)      \
    {                                                                          \
        for (size_t i = 0; i < n; i++)                                         \
            st_##ldn(d, i, op##_##tn(ld_##ldn(a, i), ld_##ldn(b, i)));         \
    }                                                                          \
    static void k2_##op##_##tn(unsigned char *restrict d,                      \
                               const unsigned char *restrict b, size_t n)      \
    {                                                                          \
        for (size_t i = 0; i < n; i++)                                         \
            st_##ldn(d, i, op##_##tn(ld_##ldn(d, i), ld_##ldn(b, i)));         \
    }

#define DEF_KERNELS(tn, ldn, T)                                                \
    DEF_KERNEL(sum, tn, ldn, T)                                                \
    DEF_KERNEL(prod, tn, ldn, T)                                               \
    DEF_KERNEL(min, tn, ldn, T)                                                \
    DEF_KERNEL(max, tn, ldn, T)

DEF_KERNELS(f32, f32, float)
DEF_KERNELS(f64, f64, double)
DEF_KERNELS(f16, h16, uint16_t)
DEF_KERNELS(bf16, h16, uint16_t)
DEF_KERNELS(i32, i32, int32_t)
DEF_KERNELS(i64, i64, int64_t)
DEF_KERNELS(u8, u8, uint8_t)

typedef void (*kernel3_fn)(unsigned char *restrict, const unsigned char *restrict,
                           const unsigned char *restrict, size_t);
typedef void (*kernel2_fn)(unsigned char *restrict, const unsigned char *restrict, size_t);

#define ROW3(tn) {k3_sum_##tn, k3_prod_##tn, k3_min_##tn, k3_max_##tn}
#define ROW2(tn) {k2_sum_##tn, k2_prod_##tn, k2_min_##tn, k2_max_##tn}

/* Indexed [dtype][op] for op in SUM, PROD, MIN, MAX (AVG reduces as SUM). */
static const kernel3_fn kernels3[AI_DTYPE_COUNT][4] = {
    [AI_F32] = ROW3(f32), [AI_F64] = ROW3(f64), [AI_F16] = ROW3(f16),
    [AI_BF16] = ROW3(bf16), [AI_I32] = ROW3(i32), [AI_I64] = ROW3(i64),
    [AI_U8] = ROW3(u8),
};
static const kernel2_fn kernels2[AI_DTYPE_COUNT][4] = {
    [AI_F32] = ROW2(f32), [AI_F64] = ROW2(f64), [AI_F16] = ROW2(f16),
    [AI_BF16] = ROW2(bf16), [AI_I32] = ROW2(i32), [AI_I64] = ROW2(i64),
    [AI_U8] = ROW2(u8),
};

/* f16 with the F16C conversion instructions (x86-64 CPUs since ~2012),
 * picked at run time: ~10x the portable loop, which must emulate the
 * conversions with integer code. Same results: the instructions round to
 * nearest even, keep subnormals (MXCSR is left at its default), and quiet
 * NaNs keeping the top payload bits, exactly like f32_to_f16; min/max use
 * the same NaN rule as min_f32/max_f32. d may equal a or b (each block of
 * 8 is loaded before it is stored). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define HAVE_X86_SIMD 1

#define F16C_LOOP(EXPR)                                                        \
    for (; i + 8 <= n; i += 8) {                                               \
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + 2 * i))); \
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 2 * i))); \
        __m256 r = EXPR;                                                       \
        _mm_storeu_si128((__m128i *)(d + 2 * i),                               \
                         _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));       \
    }

/* x where x is NaN, else m (min_ps/max_ps return the second operand when
 * the first is NaN). Plain and/andnot/or: GCC 12 turns blendv with a
 * compare mask into scalar branches here. */
__attribute__((target("avx"))) static inline __m256 nan_or(__m256 x, __m256 m)
{
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_or_ps(_mm256_and_ps(nan, x), _mm256_andnot_ps(nan, m));
}

__attribute__((target("avx,f16c"))) static void f16c_reduce(unsigned char *d,
                                                            const unsigned char *a,
                                                            const unsigned char *b, size_t n,
                                                            ai_op op)
{
    size_t i = 0;
    switch (op) {
    case AI_PROD: F16C_LOOP(_mm256_mul_ps(x, y)) break;
    case AI_MIN:
        F16C_LOOP(nan_or(x, _mm256_min_ps(x, y)))
        break;
    case AI_MAX:
        F16C_LOOP(nan_or(x, _mm256_max_ps(x, y)))
        break;
    default: F16C_LOOP(_mm256_add_ps(x, y)) break;
    }
    for (; i < n; i++) {
        uint16_t x = ld_h16(a, i), y = ld_h16(b, i), r;
        switch (op) {
        case AI_PROD: r = prod_f16(x, y); break;
        case AI_MIN: r = min_f16(x, y); break;
        case AI_MAX: r = max_f16(x, y); break;
        default: r = sum_f16(x, y); break;
        }
        st_h16(d, i, r);
    }
}
#undef F16C_LOOP

/* bf16 with AVX2: widening is a shift, narrowing the same rounding add
 * as f32_to_bf16 (NaNs truncated with the quiet bit forced), 8 at a time.
 * The portable loop vectorizes too, but only to SSE2 width. */
__attribute__((target("avx2"))) static inline __m256 bf16x8_load(const unsigned char *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

__attribute__((target("avx2"))) static inline void bf16x8_store(unsigned char *p, __m256 f)
{
    __m256i u = _mm256_castps_si256(f);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i r = _mm256_or_si256(_mm256_and_si256(nan, quiet), _mm256_andnot_si256(nan, rounded));
    /* 32 -> 16 bits: packus works per 128-bit lane, so fix the order */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}

#define BF16_LOOP(EXPR)                                                        \
    for (; i + 8 <= n; i += 8) {                                               \
        __m256 x = bf16x8_load(a + 2 * i), y = bf16x8_load(b + 2 * i);         \
        bf16x8_store(d + 2 * i, EXPR);                                         \
    }

__attribute__((target("avx2"))) static void avx2_bf16_reduce(unsigned char *d,
                                                             const unsigned char *a,
                                                             const unsigned char *b, size_t n,
                                                             ai_op op)
{
    size_t i = 0;
    switch (op) {
    case AI_PROD: BF16_LOOP(_mm256_mul_ps(x, y)) break;
    case AI_MIN: BF16_LOOP(nan_or(x, _mm256_min_ps(x, y))) break;
    case AI_MAX: BF16_LOOP(nan_or(x, _mm256_max_ps(x, y))) break;
    default: BF16_LOOP(_mm256_add_ps(x, y)) break;
    }
    for (; i < n; i++) {
        uint16_t x = ld_h16(a, i), y = ld_h16(b, i), r;
        switch (op) {
        case AI_PROD: r = prod_bf16(x, y); break;
        case AI_MIN: r = min_bf16(x, y); break;
        case AI_MAX: r = max_bf16(x, y); break;
        default: r = sum_bf16(x, y); break;
        }
        st_h16(d, i, r);
    }
}
#undef BF16_LOOP

static int avx2_usable(void)
{
    static int usable = -1;
    if (usable < 0)
        usable = __builtin_cpu_supports("avx2");
    return usable;
}

static int f16c_usable(void)
{
    static int usable = -1; /* racy first use is harmless: same answer */
    if (usable < 0)
        usable = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return usable;
}
#endif

void comm_reduce_local(void *dst, const void *a, const void *b, size_t count, ai_dtype dt,
                       ai_op op)
{
    if (count == 0 || (unsigned)dt >= AI_DTYPE_COUNT || (unsigned)op >= AI_OP_COUNT)
        return;
    if (op == AI_AVG) /* the division happens once, after the collective */
        op = AI_SUM;
#ifdef HAVE_X86_SIMD
    if (dt == AI_F16 && f16c_usable()) {
        f16c_reduce(dst, a, b, count, op);
        return;
    }
    if (dt == AI_BF16 && avx2_usable()) {
        avx2_bf16_reduce(dst, a, b, count, op);
        return;
    }
#endif
    comm_reduce_local_portable(dst, a, b, count, dt, op);
}

void comm_reduce_local_portable(void *dst, const void *a, const void *b, size_t count,
                                ai_dtype dt, ai_op op)
{
    if (count == 0 || (unsigned)dt >= AI_DTYPE_COUNT || (unsigned)op >= AI_OP_COUNT)
        return;
    if (op == AI_AVG)
        op = AI_SUM;
    /* All four operators are commutative, so "dst == b" is an accumulate
     * with the operands swapped. Partial overlap is not supported. */
    if (dst == a)
        kernels2[dt][op](dst, b, count);
    else if (dst == b)
        kernels2[dt][op](dst, a, count);
    else
        kernels3[dt][op](dst, a, b, count);
}

#define DEF_DIV(tn, ldn, T, EXPR)                                              \
    static void div_##tn(unsigned char *restrict p, size_t n, int divisor)     \
    {                                                                          \
        for (size_t i = 0; i < n; i++) {                                       \
            T x = ld_##ldn(p, i);                                              \
            st_##ldn(p, i, EXPR);                                              \
        }                                                                      \
    }

DEF_DIV(f32, f32, float, x / (float)divisor)
DEF_DIV(f64, f64, double, x / (double)divisor)
DEF_DIV(f16, h16, uint16_t, f32_to_f16(f16_to_f32(x) / (float)divisor))
DEF_DIV(bf16, h16, uint16_t, f32_to_bf16(bf16_to_f32(x) / (float)divisor))
DEF_DIV(i32, i32, int32_t, (int32_t)(x / divisor))
DEF_DIV(i64, i64, int64_t, x / (int64_t)divisor)
DEF_DIV(u8, u8, uint8_t, (uint8_t)(x / (unsigned)divisor))

void comm_scale_div(void *buf, size_t count, ai_dtype dt, int divisor)
{
    /* AVG divides by the communicator size, which is >= 1; anything else
     * is a caller bug that must not become a division by zero (or the
     * INT_MIN / -1 overflow). */
    if (count == 0 || divisor <= 1)
        return;
    switch (dt) {
    case AI_F32: div_f32(buf, count, divisor); break;
    case AI_F64: div_f64(buf, count, divisor); break;
    case AI_F16: div_f16(buf, count, divisor); break;
    case AI_BF16: div_bf16(buf, count, divisor); break;
    case AI_I32: div_i32(buf, count, divisor); break;
    case AI_I64: div_i64(buf, count, divisor); break;
    case AI_U8: div_u8(buf, count, divisor); break;
    default: break;
    }
}
