/*
 * topo layer: the three user specs of design/formats.md (cluster, model,
 * training), their validation, and the device catalog.
 *
 * Pure data. Loaders read a JSON file with jansson, validate every field and
 * report the first problem as "<file>: <json.path>: <what>" (syntax errors as
 * "<file>:<line>:<column>: <what>") through util_fail().
 *
 * Ownership: topo_*_load allocate; the matching topo_*_free releases
 * (NULL is a no-op). After a failed load nothing needs releasing.
 */
#ifndef AI_TOPO_H
#define AI_TOPO_H

#include "util/util.h"

#include <jansson.h>

#define TOPO_NAME_MAX 64

typedef enum { TOPO_BF16, TOPO_FP16, TOPO_FP8, TOPO_FP32, TOPO_PREC_COUNT } topo_precision;

/* One accelerator. Peak figures are dense (no structured sparsity), in
 * 1e12 FLOP/s; 0 means the device has no tensor path for that precision. */
typedef struct topo_device {
    char name[TOPO_NAME_MAX];
    double peak_tflops[TOPO_PREC_COUNT];
    double memory_GB;      /* 1e9 bytes */
    double memory_bw_GBps; /* HBM bandwidth */
    /* Achieved fraction of peak_tflops on large, well-shaped GEMMs per
     * precision (a measured maximum achievable matmul throughput over the
     * dense peak); 0: not measured, topo_device_gemm_eff gives the
     * default. A device input, not a fitted parameter: clock behaviour
     * under load and the vendor's GEMM library set it. */
    double gemm_eff[TOPO_PREC_COUNT];
} topo_device;

/* Used where a device has no GEMM efficiency for a precision: the H100
 * SXM's measured BF16 figure (80.3%, topo_catalog.c), the device most of
 * the calibration rows ran on. */
#define TOPO_GEMM_EFF_DEFAULT 0.80

/* d->gemm_eff[p], or TOPO_GEMM_EFF_DEFAULT where that is 0. */
double topo_device_gemm_eff(const topo_device *d, topo_precision p);

/* Catalog lookup: exact name or alias, case-insensitive. NULL if unknown. */
const topo_device *topo_catalog_find(const char *name);
size_t topo_catalog_count(void);
const topo_device *topo_catalog_at(size_t i);

const char *topo_precision_name(topo_precision p);
ai_status_t topo_precision_parse(const char *name, topo_precision *out);

/* Effective parameters of one node after overrides. */
typedef struct topo_node {
    int group;                 /* index into cluster->groups */
    int index;                 /* index within the group ("<group>-<index>") */
    int rack;                  /* index into cluster->racks, -1: on the core */
    topo_device device;
    double intra_bw_GBps;      /* per device, per direction */
    double intra_latency_us;
    int nic_count;
    double nic_bw_Gbps;        /* per NIC */
    double nic_latency_us;
    double speed;              /* compute relative to full speed, (0, 1]; cpu devices only */
    int pool;                  /* index into cluster->pools */
} topo_node;

typedef struct topo_group {
    char name[TOPO_NAME_MAX];
    int count;                 /* nodes */
    int devices_per_node;
    int first_node;            /* nodes[first_node .. first_node+count) */
} topo_group;

typedef struct topo_rack {
    char name[TOPO_NAME_MAX];
    double uplink_Gbps;
    int nodes;                 /* how many nodes hang off it */
} topo_rack;

/*
 * A pool is a set of nodes that are interchangeable for planning: same
 * group, same effective device and network, same rack uplink share. A
 * group without overrides is one pool; an override that slows a NIC splits
 * its node into a pool of its own (merged with identical ones).
 */
typedef struct topo_pool {
    char name[TOPO_NAME_MAX * 2];
    int group;
    int nodes;
    int devices_per_node;
    topo_device device;
    double intra_bw_GBps, intra_latency_us;
    double node_net_GBps;      /* min(NICs, rack uplink share), bytes/s / 1e9 */
    double net_latency_us;
} topo_pool;

typedef struct topo_cluster {
    char name[TOPO_NAME_MAX];
    char *path;                /* file it came from (for messages) */
    int ngroups, nnodes, nracks, npools;
    topo_group *groups;
    topo_node *nodes;
    topo_rack *racks;
    topo_pool *pools;
    int devices;               /* total */
} topo_cluster;

typedef enum { TOPO_FFN_GELU, TOPO_FFN_SWIGLU } topo_ffn_kind;

typedef struct topo_model {
    char name[TOPO_NAME_MAX];
    int layers, hidden, heads, kv_heads, ffn_hidden, vocab;
    topo_ffn_kind ffn_kind;
    int tied_embeddings;
} topo_model;

typedef enum { TOPO_OPT_ADAM, TOPO_OPT_SGD } topo_optimizer;

typedef struct topo_training {
    int seq_len;
    int global_batch;          /* sequences */
    topo_precision precision;
    topo_optimizer optimizer;
    double tokens;             /* whole run, 0 if not given */
    /* Extensions (optional, documented in docs/planner.md). */
    int flash_attention;       /* default 1: attention scores never stored */
    int tp_comm_overlap;       /* default 0: TP collectives overlapped with GEMMs */
    int grad_fp32;             /* default 1: fp32 main gradients (memory and DP traffic) */
} topo_training;

/* Load from a file, or from an already parsed document (`path` only names
 * it in messages). */
ai_status_t topo_cluster_load(const char *path, topo_cluster **out);
ai_status_t topo_cluster_from_json(json_t *doc, const char *path, topo_cluster **out);
void topo_cluster_free(topo_cluster *c);

ai_status_t topo_model_load(const char *path, topo_model *out);
ai_status_t topo_model_from_json(json_t *doc, const char *path, topo_model *out);
ai_status_t topo_training_load(const char *path, topo_training *out);
ai_status_t topo_training_from_json(json_t *doc, const char *path, topo_training *out);

/* Parse a JSON file; syntax errors name file, line and column. */
ai_status_t topo_json_load_file(const char *path, json_t **out);

/* Parameter counts (weights), for memory and for reporting. */
double topo_model_layer_params(const topo_model *m);   /* one transformer layer */
double topo_model_params(const topo_model *m);         /* whole model */

#endif
