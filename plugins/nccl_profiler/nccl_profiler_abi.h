/*
 * The NCCL profiler plugin ABI, versions 4 to 6, as this plugin and its test
 * harness use them: our own declarations of the layouts NCCL's headers
 * define. Only the event kinds this plugin asks for (Coll, KernelCh) have
 * their union members spelled out; the union is sized by the largest
 * member of each version so that a descriptor NCCL builds is never read
 * past its end.
 *
 * Sources, github.com/NVIDIA/nccl at these tags:
 *  - v2.27.5-1  src/include/plugin/profiler/profiler_v4.h (ncclProfiler_v4_t,
 *    ncclProfilerEventDescr_v4_t: type is uint8_t), src/plugin/profiler.cc
 *    (tries v4, v3, v2, v1), src/plugin/profiler/profiler_v4.cc (symbol
 *    "ncclProfiler_v4")
 *  - v2.28.3-1  profiler_v5.h (type uint64_t; init(ctx, commId, mask, ...);
 *    new API event kinds; coll gains parentGroup), profiler.cc (v5 first)
 *  - v2.29.2-1, v2.30.3-1  profiler_v6.h (v5 plus copy-engine events),
 *    profiler.cc (v6 first)
 *  - src/include/plugin/nccl_profiler.h at each: event type bits
 *    (ncclProfileColl = 1 << 1, ncclProfileKernelCh = 1 << 6) and states
 *    (ncclProfilerKernelChStop = 22)
 *
 * How NCCL (2.27 to 2.30) drives it, for what this plugin uses
 * (src/plugin/profiler.cc, src/enqueue.cc):
 *  - init once per communicator; *eActivationMask (process-wide) says which
 *    events NCCL generates;
 *  - Coll: startEvent when the host hands the collective to the proxy
 *    (descriptor: func "AllReduce"..., count, datatype "ncclFloat32"...,
 *    nChannels, algo "RING"..., proto "LL128"...), stopEvent right after:
 *    the stop marks "enqueued", not "done";
 *  - with KernelCh enabled NCCL adds one profiler proxy op per channel the
 *    collective uses (so coll.nChannels of them): startEvent(KernelCh,
 *    parentObj = the Coll's handle, pTimer = the kernel's start on that
 *    channel, GPU globaltimer ns), later recordEventState(handle,
 *    ncclProfilerKernelChStop, pTimer = its end) and stopEvent, from the
 *    proxy thread;
 *  - finalize when the communicator is destroyed.
 */
#ifndef AUTOINFRA_NCCL_PROFILER_ABI_H
#define AUTOINFRA_NCCL_PROFILER_ABI_H

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


/* Logger subsystem of NCCL's profiler lines (nccl_common.h, 2.27 to 2.30). */
#define NCCL_PROFILE_SUBSYS 0x4000

#define NCCL_PROFILE_COLL (1 << 1)
#define NCCL_PROFILE_KERNEL_CH (1 << 6)
#define NCCL_PROFILER_KERNEL_CH_STOP 22

/* The Coll member, identical in v4, v5 and v6 up to algo / proto. */
typedef struct {
    uint64_t seqNumber;
    const char *func;
    const void *sendBuff;
    void *recvBuff;
    size_t count;
    int root;
    const char *datatype;
    uint8_t nChannels;
    uint8_t nWarps;
    const char *algo;
    const char *proto;
} ncclProfilerColl_v4_t;

typedef struct {
    ncclProfilerColl_v4_t base;
    void *parentGroup;
} ncclProfilerColl_v5_t;

typedef struct {
    uint8_t channelId;
    uint64_t pTimer;
} ncclProfilerKernelCh_t;

/* v4: uint8_t type. Largest member: coll (80 bytes). */
typedef struct {
    uint8_t type;
    void *parentObj;
    int rank;
    union {
        ncclProfilerColl_v4_t coll;
        ncclProfilerKernelCh_t kernelCh;
    };
} ncclProfilerEventDescr_v4_t;

/* v5: uint64_t type. Largest member: coll with parentGroup (88 bytes). */
typedef struct {
    uint64_t type;
    void *parentObj;
    int rank;
    union {
        ncclProfilerColl_v5_t coll;
        ncclProfilerKernelCh_t kernelCh;
    };
} ncclProfilerEventDescr_v5_t;

/* v6: as v5 plus copy-engine members; the largest of those (ceColl) is 88
 * bytes, as coll, so the descriptor keeps v5's size. */
typedef ncclProfilerEventDescr_v5_t ncclProfilerEventDescr_v6_t;

/* State arguments (v4 to v6): a union of 8-byte members. */
typedef union {
    size_t proxyStepTransSize;
    int proxyCtrlAppendedProxyOps;
    void *netPluginData;
    struct {
        uint64_t pTimer;
    } kernelCh;
} ncclProfilerEventStateArgs_v4_t;
typedef ncclProfilerEventStateArgs_v4_t ncclProfilerEventStateArgs_v5_t;
typedef ncclProfilerEventStateArgs_v4_t ncclProfilerEventStateArgs_v6_t;

typedef int ncclProfilerEventState_t; /* an enum in NCCL's header */

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                         uint64_t commHash, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_t eState,
                                     ncclProfilerEventStateArgs_v4_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v4_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                         const char *commName, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_t eState,
                                     ncclProfilerEventStateArgs_v5_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
                         const char *commName, int nNodes, int nranks, int rank,
                         ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v6_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_t eState,
                                     ncclProfilerEventStateArgs_v6_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v6_t;

/* Layout checks (LP64): offsets NCCL writes. */
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll) == 24, "v4 union offset");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll) == 24, "v5 union offset");
_Static_assert(offsetof(ncclProfilerColl_v4_t, count) == 32, "coll.count");
_Static_assert(offsetof(ncclProfilerColl_v4_t, nChannels) == 56, "coll.nChannels");
_Static_assert(offsetof(ncclProfilerColl_v4_t, algo) == 64, "coll.algo");
_Static_assert(sizeof(ncclProfilerColl_v4_t) == 80, "v4 coll size");
_Static_assert(sizeof(ncclProfilerEventDescr_v4_t) == 104, "v4 descriptor size");
_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) == 112, "v5 descriptor size");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, kernelCh.pTimer) == 32, "kernelCh.pTimer");
_Static_assert(sizeof(ncclProfilerEventStateArgs_v4_t) == 8, "state args");
_Static_assert(sizeof(ncclProfiler_v4_t) == 6 * sizeof(void *), "v4: name + 5 functions");

#ifdef __cplusplus
}
#endif
#endif /* AUTOINFRA_NCCL_PROFILER_ABI_H */
