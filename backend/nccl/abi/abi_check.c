/* abi_check.c: checks goccl_nccl.h, the header of goccl's own that
 * backend/nccl is built against, with NCCL's real nccl.h (Debian's
 * libnccl-dev, fetched by scripts/nccl-header.sh): every value goccl
 * passes, the unique id's size, the handles' sizes, and that each entry
 * point goccl looks up is one NCCL declares. It is compiled, never run:
 *
 *   gcc -fsyntax-only -I<nccl.h's dir> -I<cuda_runtime.h's dir> abi_check.c
 *
 * goccl's header comes first and keeps the names; NCCL's are renamed to
 * real_* as it is read. */
#include "../goccl_nccl.h"

#define ncclComm_t real_ncclComm_t
#define ncclUniqueId real_ncclUniqueId
#define ncclResult_t real_ncclResult_t
#define ncclDataType_t real_ncclDataType_t
#define ncclRedOp_t real_ncclRedOp_t
#define cudaStream_t real_cudaStream_t
#define ncclSuccess real_ncclSuccess
#define ncclUnhandledCudaError real_ncclUnhandledCudaError
#define ncclSystemError real_ncclSystemError
#define ncclInternalError real_ncclInternalError
#define ncclInvalidArgument real_ncclInvalidArgument
#define ncclInvalidUsage real_ncclInvalidUsage
#define ncclRemoteError real_ncclRemoteError
#define ncclInProgress real_ncclInProgress
#define ncclInt8 real_ncclInt8
#define ncclUint8 real_ncclUint8
#define ncclInt32 real_ncclInt32
#define ncclUint32 real_ncclUint32
#define ncclInt64 real_ncclInt64
#define ncclUint64 real_ncclUint64
#define ncclFloat16 real_ncclFloat16
#define ncclFloat32 real_ncclFloat32
#define ncclFloat64 real_ncclFloat64
#define ncclBfloat16 real_ncclBfloat16
#define ncclSum real_ncclSum
#define ncclProd real_ncclProd
#define ncclMax real_ncclMax
#define ncclMin real_ncclMin
#define ncclAvg real_ncclAvg
#define __CUDA_BF16_TYPES_EXIST__ /* as CUDA 11+ has in C++: nccl.h then names ncclBfloat16 */
#include <nccl.h>
#undef ncclComm_t
#undef ncclUniqueId
#undef ncclResult_t
#undef ncclDataType_t
#undef ncclRedOp_t
#undef cudaStream_t
#undef ncclSuccess
#undef ncclUnhandledCudaError
#undef ncclSystemError
#undef ncclInternalError
#undef ncclInvalidArgument
#undef ncclInvalidUsage
#undef ncclRemoteError
#undef ncclInProgress
#undef ncclInt8
#undef ncclUint8
#undef ncclInt32
#undef ncclUint32
#undef ncclInt64
#undef ncclUint64
#undef ncclFloat16
#undef ncclFloat32
#undef ncclFloat64
#undef ncclBfloat16
#undef ncclSum
#undef ncclProd
#undef ncclMax
#undef ncclMin
#undef ncclAvg

_Static_assert((int)ncclSuccess == (int)real_ncclSuccess, "ncclSuccess differs from nccl.h");
_Static_assert((int)ncclUnhandledCudaError == (int)real_ncclUnhandledCudaError, "ncclUnhandledCudaError differs from nccl.h");
_Static_assert((int)ncclSystemError == (int)real_ncclSystemError, "ncclSystemError differs from nccl.h");
_Static_assert((int)ncclInternalError == (int)real_ncclInternalError, "ncclInternalError differs from nccl.h");
_Static_assert((int)ncclInvalidArgument == (int)real_ncclInvalidArgument, "ncclInvalidArgument differs from nccl.h");
_Static_assert((int)ncclInvalidUsage == (int)real_ncclInvalidUsage, "ncclInvalidUsage differs from nccl.h");
_Static_assert((int)ncclRemoteError == (int)real_ncclRemoteError, "ncclRemoteError differs from nccl.h");
_Static_assert((int)ncclInProgress == (int)real_ncclInProgress, "ncclInProgress differs from nccl.h");
_Static_assert((int)ncclInt8 == (int)real_ncclInt8, "ncclInt8 differs from nccl.h");
_Static_assert((int)ncclUint8 == (int)real_ncclUint8, "ncclUint8 differs from nccl.h");
_Static_assert((int)ncclInt32 == (int)real_ncclInt32, "ncclInt32 differs from nccl.h");
_Static_assert((int)ncclUint32 == (int)real_ncclUint32, "ncclUint32 differs from nccl.h");
_Static_assert((int)ncclInt64 == (int)real_ncclInt64, "ncclInt64 differs from nccl.h");
_Static_assert((int)ncclUint64 == (int)real_ncclUint64, "ncclUint64 differs from nccl.h");
_Static_assert((int)ncclFloat16 == (int)real_ncclFloat16, "ncclFloat16 differs from nccl.h");
_Static_assert((int)ncclFloat32 == (int)real_ncclFloat32, "ncclFloat32 differs from nccl.h");
_Static_assert((int)ncclFloat64 == (int)real_ncclFloat64, "ncclFloat64 differs from nccl.h");
_Static_assert((int)ncclBfloat16 == (int)real_ncclBfloat16, "ncclBfloat16 differs from nccl.h");
_Static_assert((int)ncclSum == (int)real_ncclSum, "ncclSum differs from nccl.h");
_Static_assert((int)ncclProd == (int)real_ncclProd, "ncclProd differs from nccl.h");
_Static_assert((int)ncclMax == (int)real_ncclMax, "ncclMax differs from nccl.h");
_Static_assert((int)ncclMin == (int)real_ncclMin, "ncclMin differs from nccl.h");
_Static_assert((int)ncclAvg == (int)real_ncclAvg, "ncclAvg differs from nccl.h");
_Static_assert(sizeof(ncclUniqueId) == sizeof(real_ncclUniqueId), "ncclUniqueId's size differs");
_Static_assert(GOCCL_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "the unique id's size differs");
_Static_assert(GOCCL_NCCL_SPLIT_NOCOLOR == NCCL_SPLIT_NOCOLOR, "NCCL_SPLIT_NOCOLOR differs");
_Static_assert(sizeof(ncclComm_t) == sizeof(real_ncclComm_t), "ncclComm_t's size differs");
_Static_assert(sizeof(cudaStream_t) == sizeof(real_cudaStream_t), "cudaStream_t's size differs");
_Static_assert(sizeof(ncclResult_t) == sizeof(real_ncclResult_t), "ncclResult_t's size differs");
_Static_assert(sizeof(ncclDataType_t) == sizeof(real_ncclDataType_t), "ncclDataType_t's size differs");
_Static_assert(sizeof(ncclRedOp_t) == sizeof(real_ncclRedOp_t), "ncclRedOp_t's size differs");

/* Each entry point goccl looks up by name is declared by NCCL. */
void *goccl_abi_entry_points[] = {
	(void *)&ncclGetVersion,
	(void *)&ncclGetErrorString,
	(void *)&ncclGetUniqueId,
	(void *)&ncclCommInitRank,
	(void *)&ncclCommSplit,
	(void *)&ncclCommAbort,
	(void *)&ncclCommDestroy,
	(void *)&ncclCommGetAsyncError,
	(void *)&ncclAllReduce,
	(void *)&ncclBroadcast,
	(void *)&ncclReduce,
	(void *)&ncclAllGather,
	(void *)&ncclReduceScatter,
	(void *)&ncclSend,
	(void *)&ncclRecv,
	(void *)&ncclGroupStart,
	(void *)&ncclGroupEnd,
};
