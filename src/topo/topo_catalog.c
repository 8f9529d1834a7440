/*
 * Device catalog: public spec-sheet figures. Peak FLOP/s are the dense
 * (non-sparse) tensor-core figures; vendors print the 2:4-sparsity number
 * (twice as large) first, and using it would make every efficiency look
 * half as good as it is.
 *
 * The last figures of each entry, gemm_eff (bf16, fp16, fp8, fp32), are
 * the device's achieved fraction of that dense peak on large GEMMs. The
 * catalog leaves them unset, so every device takes TOPO_GEMM_EFF_DEFAULT:
 * a cluster file sets them for a device it has measured. The published
 * per-device figures, maximum achievable matmul throughput over a
 * brute-force search of GEMM shapes (S. Bekman, "Machine Learning
 * Engineering Open Book", compute/accelerator, "Maximum Achievable Matmul
 * FLOPS comparison table", 2025), are A100 SXM BF16 86.9%, H100 SXM BF16
 * 80.3% (H200 the same) and FP8 70.9%, H200 FP8 73.4%, B200 BF16 77.6%
 * and FP8 76.3%, MI300X BF16 51.4%. As catalog defaults they made the
 * step model's leave-one-source-out error worse (docs/model.md,
 * "Known weaknesses"): the training tables do not differ between A100,
 * H100 and B200 the way those single-GEMM figures do.
 */
#include "topo/topo.h"

#include <string.h>
#include <strings.h>

/* Order of peak_tflops: bf16, fp16, fp8, fp32 (non-tensor FP32 for GPUs). */
static const topo_device catalog[] = {
    /* NVIDIA A100 Tensor Core GPU datasheet (2021, SXM4 80GB column):
     * BF16/FP16 tensor 312 TFLOPS dense, FP32 19.5, no FP8; 80 GB HBM2e at
     * 2,039 GB/s. */
    {"A100-SXM4-80GB", {312, 312, 0, 19.5}, 80, 2039, {0, 0, 0, 0}},
    /* Same datasheet, SXM4 40GB column: 40 GB HBM2 at 1,555 GB/s. */
    {"A100-SXM4-40GB", {312, 312, 0, 19.5}, 40, 1555, {0, 0, 0, 0}},
    /* NVIDIA H100 Tensor Core GPU datasheet (2023, SXM5 column): BF16/FP16
     * 989 TFLOPS dense (1,979 with sparsity), FP8 1,979 dense, FP32 67;
     * 80 GB HBM3 at 3.35 TB/s. */
    {"H100-SXM5-80GB", {989, 989, 1979, 67}, 80, 3350, {0, 0, 0, 0}},
    /* NVIDIA H200 Tensor Core GPU datasheet (2024, SXM column): same
     * compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s. */
    {"H200-SXM-141GB", {989, 989, 1979, 67}, 141, 4800, {0, 0, 0, 0}},
    /* NVIDIA HGX B200 datasheet (2024, per GPU): FP16/BF16 2.25 PFLOPS
     * dense, FP8 4.5 PFLOPS dense (the sheet prints sparse 4.5/9), FP32 75;
     * 180 GB HBM3e at 7.7 TB/s (DGX B200: 1,440 GB over 8 GPUs). */
    {"B200", {2250, 2250, 4500, 75}, 180, 7700, {0, 0, 0, 0}},
    /* AMD Instinct MI300X data sheet (2023): FP16/BF16 1,307.4 TFLOPS
     * dense, FP8 2,614.9 dense, FP32 163.4 (matrix); 192 GB HBM3 at
     * 5.3 TB/s. */
    {"MI300X", {1307.4, 1307.4, 2614.9, 163.4}, 192, 5300, {0, 0, 0, 0}},
    /* Huawei Atlas 800T A2 training server (8 x Ascend 910B): about
     * 2.5 PFLOPS FP16 per server -> 313 TFLOPS per NPU (BF16 same path);
     * 64 GB HBM2e per NPU at 1.6 TB/s. No FP8. The 910B ships in bins
     * (910B1..B4) quoted from roughly 280 to 414 TFLOPS FP16; 313 is the
     * server-level figure divided by 8. Give an inline device for another
     * bin. */
    {"Ascend-910B", {313, 313, 0, 0}, 64, 1600, {0, 0, 0, 0}},
    /* One CPU process rank of the emulated testbed (design/testbed.md): a
     * nominal core, AVX2 FMA at ~3 GHz = 2 x 8 x 3e9 x 2 ~ 0.1 TFLOP/s
     * FP32, 4 GB share of RAM at ~20 GB/s. Only used so that testbed
     * cluster files validate; nobody plans a training job on it. */
    {"cpu", {0, 0, 0, 0.1}, 4, 20, {0, 0, 0, 0}},
};

static const struct {
    const char *alias;
    const char *name;
} aliases[] = {
    {"A100", "A100-SXM4-80GB"},      {"A100-80GB", "A100-SXM4-80GB"},
    {"A100-SXM4", "A100-SXM4-80GB"}, {"A100-40GB", "A100-SXM4-40GB"},
    {"H100", "H100-SXM5-80GB"},      {"H100-SXM5", "H100-SXM5-80GB"},
    {"H100-SXM", "H100-SXM5-80GB"},  {"H200", "H200-SXM-141GB"},
    {"B200-SXM", "B200"},            {"MI300", "MI300X"},
    {"910B", "Ascend-910B"},         {"Ascend910B", "Ascend-910B"},
};

const topo_device *topo_catalog_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < AI_ARRAY_LEN(aliases); i++)
        if (strcasecmp(name, aliases[i].alias) == 0) {
            name = aliases[i].name;
            break;
        }
    for (size_t i = 0; i < AI_ARRAY_LEN(catalog); i++)
        if (strcasecmp(name, catalog[i].name) == 0)
            return &catalog[i];
    return NULL;
}

double topo_device_gemm_eff(const topo_device *d, topo_precision p)
{
    double e = (unsigned)p < TOPO_PREC_COUNT ? d->gemm_eff[p] : 0;
    return e > 0 ? e : TOPO_GEMM_EFF_DEFAULT;
}

size_t topo_catalog_count(void) { return AI_ARRAY_LEN(catalog); }

const topo_device *topo_catalog_at(size_t i)
{
    return i < AI_ARRAY_LEN(catalog) ? &catalog[i] : NULL;
}

static const char *prec_names[TOPO_PREC_COUNT] = {"bf16", "fp16", "fp8", "fp32"};

const char *topo_precision_name(topo_precision p)
{
    return (unsigned)p < TOPO_PREC_COUNT ? prec_names[p] : "?";
}

ai_status_t topo_precision_parse(const char *name, topo_precision *out)
{
    for (int i = 0; i < TOPO_PREC_COUNT; i++)
        if (name && strcasecmp(name, prec_names[i]) == 0) {
            *out = (topo_precision)i;
            return AI_OK;
        }
    return util_fail(AI_ERR_INVALID, "unknown precision '%s' (bf16, fp16, fp8, fp32)",
                     name ? name : "");
}
