/*
 * The NCCL tuner plugin ABI, struct versions 2 to 6, as this plugin and its
 * test harness use them. Our own declarations of the layouts NCCL's headers
 * define (names, values, field order and types are facts of the ABI).
 *
 * Sources, all of github.com/NVIDIA/nccl, read at these release tags:
 *  - v2.21.5-1  src/include/nccl_tuner.h: ncclTuner_v2_t, symbol
 *    "ncclTunerPlugin_v2" (the only one 2.21 looks for);
 *    src/include/nccl_common.h: 6 algorithms (no PAT), ncclFunc_t up to Recv
 *  - v2.22.3-1  src/include/nccl_tuner.h: ncclTuner_v3_t (cost table, no
 *    regBuff); 2.22 passes a float[6][3] table, 2.23 (v2.23.4-1) a float[7][3]
 *  - v2.24.3-1  src/include/nccl_tuner.h: ncclTuner_v4_t (regBuff added);
 *    unchanged to v2.27.5-1 (src/include/plugin/tuner/tuner_v4.h)
 *  - v2.28.3-1  src/include/plugin/tuner/tuner_v5.h: ncclTuner_v5_t,
 *    ncclNvlDomainInfo_v5_t, ncclTunerConstants_v5_t (same at v2.29.2-1)
 *  - v2.30.3-1  src/include/plugin/tuner/tuner_v6.h: ncclTuner_v6_t = v5
 *    plus getChunkSize; its constants / NVLink info types are the v5 ones
 *  - every tag: src/include/nccl_common.h for ncclDebugLogLevel,
 *    ncclDebugLogSubSys (NCCL_TUNING = 0x40 at all of them), the logger
 *    type, the NCCL_ALGO_* / NCCL_PROTO_* indices and NCCL_ALGO_PROTO_IGNORE
 *
 * Which symbol each release tries, newest first (src/misc/tuner.cc at
 * v2.21.5-1 .. v2.24.3-1, src/plugin/tuner.cc from v2.27.5-1):
 *   2.21: v2 | 2.22-2.23: v3, v2 | 2.24-2.27: v4, v3, v2 |
 *   2.28-2.29: v5, v4, v3, v2 | 2.30: v6, v5, v4, v3, v2
 * The calls each release makes are described at the structs below and
 * played by tests/test_nccl_tuner.c.
 */
#ifndef AUTOINFRA_NCCL_TUNER_ABI_H
#define AUTOINFRA_NCCL_TUNER_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Types every NCCL plugin interface shares; the same block is in
 * plugins/nccl_tuner/nccl_tuner_abi.h and plugins/nccl_profiler/
 * nccl_profiler_abi.h (a plugin includes only its own headers), guarded
 * so that a program may include both. */
#ifndef AUTOINFRA_NCCL_COMMON_TYPES
#define AUTOINFRA_NCCL_COMMON_TYPES

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

/* Logger (nccl_common.h). NCCL filters by NCCL_DEBUG and, for INFO and
 * TRACE, by NCCL_DEBUG_SUBSYS against the flags passed. */
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

#endif /* AUTOINFRA_NCCL_COMMON_TYPES */

/* Collective kinds (nccl_common.h). Values 0..7 are the same in every
 * release; 2.28 added the copy-engine AlltoAll / Scatter / Gather, 2.29
 * AllGatherV and the signal operations. The tuner is asked about the first
 * five (and, from 2.29, about grouped broadcasts as AllGather, see
 * docs/nccl-tuner.md); a plugin must tolerate any value. */
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
    ncclFuncAllGatherV = 11,
    ncclFuncPutSignal = 12,
    ncclFuncSignal = 13,
    ncclFuncWaitSignal = 14
} ncclFunc_t;

/* Algorithm and protocol indices: rows and columns of the cost table.
 * 2.21 and 2.22 have six algorithms (no PAT); 2.23 on, seven. */
#define NCCL_ALGO_UNDEF (-1)
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS_2_21 6
#define NCCL_NUM_ALGORITHMS 7

#define NCCL_PROTO_UNDEF (-1)
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3

/* Value NCCL writes into cells it cannot or will not run; its selection
 * skips every negative value. */
#define NCCL_ALGO_PROTO_IGNORE (-1.0)

/*
 * v2 (2.21.5; accepted by every later release as the last resort).
 *   init(nRanks, nNodes, ncclDebugLog, &comm->tunerContext)
 *   per collective: algorithm = protocol = -1 (UNDEF), nChannels = 0;
 *   getCollInfo(ctx, func, nBytes, collNetSupport, nvlsSupport, numPipeOps,
 *               &algorithm, &protocol, &nChannels)
 *   2.21 then runs algorithm/protocol as given when both are set (its own
 *   search is skipped: no check against NCCL_ALGO / NCCL_PROTO or what the
 *   platform enables), and nChannels when nonzero.
 *   destroy(ctx) when the communicator is destroyed.
 */
typedef struct {
    const char *name;
    ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         void **context);
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                                int collNetSupport, int nvlsSupport, int numPipeOps,
                                int *algorithm, int *protocol, int *nChannels);
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v2_t;

/*
 * v3 (2.22.3, 2.23.4). init / destroy as v2. Per collective:
 *   float table[NCCL_NUM_ALGORITHMS][3], every cell -1.0, then NCCL's cost
 *   (us) of what it can run; nChannels = 0;
 *   getCollInfo(ctx, func, nBytes, numPipeOps, (float **)table,
 *               NCCL_NUM_ALGORITHMS, 3, &nChannels)    (6 in 2.22, 7 in 2.23)
 *   then NCCL takes the cheapest cell >= 0.
 */
typedef struct {
    const char *name;
    ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         void **context);
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int *nChannels);
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v3_t;

/* v4 (2.24.3 .. 2.27.x): v3 with regBuff (user buffers registered, or graph
 * registration) before nChannels; a float[7][3] table. */
typedef struct {
    const char *name;
    ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                         void **context);
    ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int regBuff,
                                int *nChannels);
    ncclResult_t (*destroy)(void *context);
} ncclTuner_v4_t;

/* v5 (2.28.3 .. 2.29.x) additions. */
#define NCCL_NUM_HW_LINKS_V5 3
#define NCCL_NUM_COMPCAPS_V5 4
#define NCCL_NUM_TUNING_SCALES_V5 3

typedef struct {
    int nNvlDomains;
    int minRanksPerNvlDomain;
    int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

/* NCCL's cost-model constants, handed to init to read or edit before NCCL
 * builds its model (latencies in us, bandwidths in GB/s). */
typedef struct {
    double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    double hwLatencies[NCCL_NUM_HW_LINKS_V5][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    double llMaxBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
    double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS_V5][NCCL_NUM_TUNING_SCALES_V5];
} ncclTunerConstants_v5_t;

/*
 * v5: the context pointer moved to the front of init, which gained the
 * communicator id, the NVLink domain information and the in/out constants
 *   init(&ctx, commHash, nRanks, nNodes, ncclDebugLog, &nvlDomainInfo,
 *        &tunerConstants)
 * getCollInfo as v4; destroy renamed finalize.
 */
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

/*
 * v6 (2.30.3): v5 plus getChunkSize, called (when not NULL) once the
 * algorithm, protocol and channel count are fixed, with NCCL's chunk size
 * in *chunkSize; NCCL clamps a larger answer to its buffer's maximum and
 * rounds the result down to the protocol's grain (16 B LL, 1920 B LL128,
 * 512 B SIMPLE). nBytes there is the bytes of the part being scheduled.
 */
typedef struct {
    const char *name;
    ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                         ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                         ncclTunerConstants_v5_t *constants);
    ncclResult_t (*getCollInfo)(void *ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                float **collCostTable, int numAlgo, int numProto, int regBuff,
                                int *nChannels);
    ncclResult_t (*finalize)(void *ctx);
    ncclResult_t (*getChunkSize)(void *ctx, ncclFunc_t collType, size_t nBytes, int algo, int proto,
                                 int nChannels, size_t *chunkSize);
} ncclTuner_v6_t;

/* Layout checks. */
_Static_assert(sizeof(ncclNvlDomainInfo_v5_t) == 3 * sizeof(int), "NVL domain info layout");
_Static_assert(sizeof(ncclTunerConstants_v5_t) == (21 + 63 + 5 * 12) * sizeof(double),
               "tuner constants layout (1152 bytes)");
_Static_assert(sizeof(ncclTuner_v2_t) == 4 * sizeof(void *), "v2: name + 3 functions");
_Static_assert(sizeof(ncclTuner_v3_t) == 4 * sizeof(void *), "v3: name + 3 functions");
_Static_assert(sizeof(ncclTuner_v4_t) == 4 * sizeof(void *), "v4: name + 3 functions");
_Static_assert(sizeof(ncclTuner_v5_t) == 4 * sizeof(void *), "v5: name + 3 functions");
_Static_assert(sizeof(ncclTuner_v6_t) == 5 * sizeof(void *), "v6: name + 4 functions");
_Static_assert(offsetof(ncclTuner_v6_t, getChunkSize) == 4 * sizeof(void *), "v6 field order");
_Static_assert(offsetof(ncclTuner_v5_t, finalize) == 3 * sizeof(void *), "v5 field order");
_Static_assert(sizeof(ncclFunc_t) == sizeof(int) && sizeof(ncclResult_t) == sizeof(int),
               "enums passed as int");

#ifdef __cplusplus
}
#endif
#endif /* AUTOINFRA_NCCL_TUNER_ABI_H */
