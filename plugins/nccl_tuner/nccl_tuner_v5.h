/*
 * The NCCL 2.28 tuner plugin ABI, struct version 5, as this plugin and its
 * test harness use it. Written here from the documented layout (names,
 * values, field order and types are facts of the ABI); no NCCL text is
 * copied.
 *
 * Sources: github.com/NVIDIA/nccl at commit
 * f1308997d0420148b1be1c24d63f19d902ae589b (makefiles/version.mk: 2.28.3):
 *  - src/include/plugin/tuner/tuner_v5.h   the v5 struct, init / getCollInfo /
 *    finalize signatures, ncclNvlDomainInfo_v5_t, ncclTunerConstants_v5_t
 *  - src/include/plugin/nccl_tuner.h       NCCL_ALGO_* / NCCL_PROTO_* indices,
 *    NCCL_ALGO_PROTO_IGNORE, hardware / compute-capability / scale indices
 *  - src/include/nccl_common.h, nccl.h     ncclFunc_t, ncclResult_t, the
 *    logger type, log levels and subsystems
 *    (these two were read at later commits of the same repository and at
 *    plugins/tuner/example/nccl/; the values used here are the same in all
 *    of them. ncclFuncAlltoAll / Scatter / Gather = 8 / 9 / 10 are the
 *    copy-engine collectives 2.28 added; the plugin never acts on them)
 *  - src/plugin/tuner/tuner_v5.cc          the symbol NCCL looks up:
 *    "ncclTunerPlugin_v5" (2.28 tries v5, then v4, v3, v2)
 *  - src/init.cc, src/enqueue.cc           how NCCL calls the plugin (below)
 *  - plugins/tuner/README.md               "set costs to 0.0 to prefer";
 *    returning an error is only advisable in init / finalize
 *
 * How NCCL 2.28 drives a v5 tuner (src/init.cc, src/enqueue.cc):
 *  - once per communicator, after its default tuning constants are set and
 *    before its cost model is built:
 *      init(&ctx, commHash, nRanks, nNodes, ncclDebugLog,
 *           &comm->nvlDomainInfo, &comm->tunerConstants)
 *    a non-success return fails communicator creation;
 *  - per collective (aggregated group of same fn/op/type):
 *      float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];   every cell -1.0,
 *      then the cost (us) of every algorithm/protocol NCCL can run here;
 *      int nChannels = 0;
 *      getCollInfo(ctx, func, nBytes, numPipeOps, (float **)table,
 *                  NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, regBuff, &nChannels);
 *    then NCCL takes the cheapest cell with a value >= 0 (ties: first in
 *    algorithm-major order) and uses nChannels only if the plugin made it
 *    nonzero. nBytes = element size x ncclFuncMaxSendRecvCount(func, nRanks,
 *    count): the whole vector for AllReduce / Broadcast / Reduce, and
 *    nRanks x the per-rank block for AllGather / ReduceScatter.
 *    A non-success return from getCollInfo fails the collective (NCCLCHECK);
 *    it does NOT make NCCL fall back to its own choice: leaving the table
 *    untouched does.
 *  - finalize(ctx) when the communicator is destroyed.
 *
 * What v5 changed relative to v4: init gained commId (uint64_t, second
 * argument, after the context pointer which moved to the front), the NVLink
 * domain information and the in/out tuning constants; the last member is
 * finalize (v4: destroy). getCollInfo is unchanged from v4 (regBuff,
 * nChannels).
 */
#ifndef AUTOINFRA_NCCL_TUNER_V5_H
#define AUTOINFRA_NCCL_TUNER_V5_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes (nccl.h). */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

/* Logger (nccl_common.h). NCCL filters by its NCCL_DEBUG level itself. */
typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
    NCCL_INIT = 0x1,
    NCCL_COLL = 0x2,
    NCCL_P2P = 0x4,
    NCCL_SHM = 0x8,
    NCCL_NET = 0x10,
    NCCL_GRAPH = 0x20,
    NCCL_TUNING = 0x40,
    NCCL_ENV = 0x80,
    NCCL_ALLOC = 0x100,
    NCCL_CALL = 0x200,
    NCCL_PROXY = 0x400,
    NCCL_NVLS = 0x800,
    NCCL_BOOTSTRAP = 0x1000,
    NCCL_REG = 0x2000,
    NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);

/* Collective kinds (nccl_common.h). The tuner is consulted for the first
 * NCCL_NUM_FUNCTIONS; 2.28 adds the copy-engine collectives after Recv.
 * A plugin must tolerate any value. */
#define NCCL_NUM_FUNCTIONS 5
typedef enum {
    ncclFuncBroadcast = 0,
    ncclFuncReduce = 1,
    ncclFuncAllGather = 2,
    ncclFuncReduceScatter = 3,
    ncclFuncAllReduce = 4,
    ncclFuncSendRecv = 5,
    ncclFuncSend = 6,
    ncclFuncRecv = 7,
    ncclFuncAlltoAll = 8,
    ncclFuncScatter = 9,
    ncclFuncGather = 10,
    ncclNumFuncs = 11
} ncclFunc_t;

/* Cost-table geometry and indices (tuner_v5.h, nccl_tuner.h): row =
 * algorithm, column = protocol. */
#define NCCL_NUM_ALGORITHMS_V5 7
#define NCCL_NUM_PROTOCOLS_V5 3
#define NCCL_NUM_HW_LINKS_V5 3
#define NCCL_NUM_COMPCAPS_V5 4
#define NCCL_NUM_TUNING_SCALES_V5 3

#define NCCL_NUM_ALGORITHMS NCCL_NUM_ALGORITHMS_V5
#define NCCL_ALGO_UNDEF (-1)
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6

#define NCCL_NUM_PROTOCOLS NCCL_NUM_PROTOCOLS_V5
#define NCCL_PROTO_UNDEF (-1)
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2

/* Value NCCL writes into cells it cannot or will not run; its selection
 * also skips any other negative value. */
#define NCCL_TUNING_IGNORE (-1.0)
#define NCCL_ALGO_PROTO_IGNORE NCCL_TUNING_IGNORE

/* Indices into ncclTunerConstants_v5_t. */
#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_VOLTA_COMPCAP_IDX 0
#define NCCL_AMPERE_COMPCAP_IDX 1
#define NCCL_HOPPER_COMPCAP_IDX 2
#define NCCL_BLACKWELL_COMPCAP_IDX 3
#define NCCL_TUNING_SCALE_1NODE 0
#define NCCL_TUNING_SCALE_2NODES 1
#define NCCL_TUNING_SCALE_4NODES 2

/* NVLink domains of the communicator (init input). */
typedef struct {
    int nNvlDomains;          /* how many NVLink domains */
    int minRanksPerNvlDomain; /* fewest ranks in one domain */
    int maxRanksPerNvlDomain; /* most ranks in one domain */
} ncclNvlDomainInfo_v5_t;

/* NCCL's cost-model constants, handed to init for reading or editing
 * before NCCL builds its model (latencies in us, bandwidths in GB/s). */
typedef struct {
    double baseLatencies[NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
    double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS_V5][NCCL_NUM_PROTOCOLS_V5];
    double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;

/* The exported object. collCostTable is declared float ** but is really the
 * address of a contiguous float[numAlgo][numProto] array. */
typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                         ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                         ncclTunerConstants_v5_t *constants);
    ncclResult_t (*getCollInfo)(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int regBuff,
                                int *nChannels);
    ncclResult_t (*finalize)(void *ctx);
} ncclTuner_v5_t;

#define NCCL_TUNER_PLUGIN_SYMBOL_V5 "ncclTunerPlugin_v5"

/* Layout checks: NCCL 2.28 writes and reads exactly these sizes. */
_Static_assert(sizeof(ncclNvlDomainInfo_v5_t) == 3 * sizeof(int), "NVL domain info layout");
_Static_assert(sizeof(ncclTunerConstants_v5_t) == (21 + 63 + 5 * 12) * sizeof(double),
               "tuner constants layout (1152 bytes)");
_Static_assert(offsetof(ncclTuner_v5_t, init) == sizeof(void *), "v5 field order");
_Static_assert(offsetof(ncclTuner_v5_t, getCollInfo) == 2 * sizeof(void *), "v5 field order");
_Static_assert(offsetof(ncclTuner_v5_t, finalize) == 3 * sizeof(void *), "v5 field order");
_Static_assert(sizeof(ncclFunc_t) == sizeof(int) && sizeof(ncclResult_t) == sizeof(int),
               "enums passed as int");

#ifdef __cplusplus
}
#endif
#endif /* AUTOINFRA_NCCL_TUNER_V5_H */
