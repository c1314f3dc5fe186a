/* goccl_nccl.h: the few NCCL types and entry points goccl calls, declared
 * here from NCCL's documented API so that building goccl needs no nccl.h.
 * libnccl.so.2 is opened at run time (lib.go); these declarations are the
 * contract the loader's function pointers are cast to, and the one the
 * fake NCCL (fakenccl/) implements. The values are NCCL's ABI (stable
 * since 2.x: a comm is an opaque pointer, a unique id 128 bytes). */
#ifndef GOCCL_NCCL_H
#define GOCCL_NCCL_H

#include <stddef.h>

typedef struct goccl_ncclComm *ncclComm_t;
typedef void *cudaStream_t;

#define GOCCL_NCCL_ID_BYTES 128
typedef struct { char internal[GOCCL_NCCL_ID_BYTES]; } ncclUniqueId;

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7
} ncclResult_t;

typedef enum {
	ncclInt8 = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclFloat32 = 7,
	ncclFloat64 = 8,
	ncclBfloat16 = 9
} ncclDataType_t;

typedef enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4 /* NCCL 2.10 and later */
} ncclRedOp_t;

#define GOCCL_NCCL_SPLIT_NOCOLOR (-1)

typedef ncclResult_t (*goccl_ncclGetVersion_t)(int *version);
typedef const char *(*goccl_ncclGetErrorString_t)(ncclResult_t result);
typedef ncclResult_t (*goccl_ncclGetUniqueId_t)(ncclUniqueId *id);
typedef ncclResult_t (*goccl_ncclCommInitRank_t)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
/* config: NULL takes the parent's (goccl passes NULL). */
typedef ncclResult_t (*goccl_ncclCommSplit_t)(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config);
typedef ncclResult_t (*goccl_ncclCommAbort_t)(ncclComm_t comm);
typedef ncclResult_t (*goccl_ncclCommDestroy_t)(ncclComm_t comm);
typedef ncclResult_t (*goccl_ncclCommGetAsyncError_t)(ncclComm_t comm, ncclResult_t *err);
typedef ncclResult_t (*goccl_ncclAllReduce_t)(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclBroadcast_t)(const void *send, void *recv, size_t count, ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclReduce_t)(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclAllGather_t)(const void *send, void *recv, size_t sendcount, ncclDataType_t dt, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclReduceScatter_t)(const void *send, void *recv, size_t recvcount, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclSend_t)(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclRecv_t)(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s);
typedef ncclResult_t (*goccl_ncclGroup_t)(void);

#endif
