/* cuda_compat.h: CUDA 11 prototypes of driver API functions that
 * gorgonia.org/cu v0.9.6 calls and that the CUDA 13 cuda.h no longer declares
 * (or declares with a new signature). The driver library keeps exporting the
 * old symbols for old binaries, so declaring them is enough: the calls link
 * against the same entry points that CUDA 11 builds used.
 *
 * CUDA 12 headers still declare all of these (deprecated: warnings only), so
 * nothing here applies below CUDA_VERSION 13000.
 *
 * UNVERIFIED: written from the CUDA 11 driver API reference and reports of
 * the CUDA 13 changes; not yet compiled against a CUDA 13 cuda.h.
 */
#ifndef GOCCL_CUDA_COMPAT_H
#define GOCCL_CUDA_COMPAT_H

#if defined(CUDA_VERSION) && CUDA_VERSION >= 13000

#ifdef __cplusplus
extern "C" {
#endif

/* Context creation: CUDA 13 maps cuCtxCreate to cuCtxCreate_v4, which takes
 * a CUctxCreateParams*. gorgonia calls the three-argument form, exported by
 * the driver as cuCtxCreate_v2. */
#undef cuCtxCreate
#define cuCtxCreate cuCtxCreate_v2
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

/* Unified memory hints: CUDA 13 maps these to the _v2 forms that take a
 * CUmemLocation. The driver's unversioned symbols keep the CUdevice forms. */
#undef cuMemAdvise
CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
#undef cuMemPrefetchAsync
CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);

/* Texture and surface references, removed from the header in CUDA 13.
 * The versioned names are the ABI the CUDA 11 header selected; calling the
 * unversioned cuTexRefSetAddress etc. would reach 32-bit-size legacy entry
 * points. */
typedef struct CUtexref_st *CUtexref;
typedef struct CUsurfref_st *CUsurfref;

CUresult CUDAAPI cuModuleGetTexRef(CUtexref *pTexRef, CUmodule hmod, const char *name);
CUresult CUDAAPI cuModuleGetSurfRef(CUsurfref *pSurfRef, CUmodule hmod, const char *name);

#define cuTexRefSetAddress cuTexRefSetAddress_v2
#define cuTexRefSetAddress2D cuTexRefSetAddress2D_v3
#define cuTexRefGetAddress cuTexRefGetAddress_v2
CUresult CUDAAPI cuTexRefSetArray(CUtexref hTexRef, CUarray hArray, unsigned int Flags);
CUresult CUDAAPI cuTexRefSetAddress_v2(size_t *ByteOffset, CUtexref hTexRef, CUdeviceptr dptr, size_t bytes);
CUresult CUDAAPI cuTexRefSetAddress2D_v3(CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR *desc, CUdeviceptr dptr, size_t Pitch);
CUresult CUDAAPI cuTexRefSetFormat(CUtexref hTexRef, CUarray_format fmt, int NumPackedComponents);
CUresult CUDAAPI cuTexRefSetAddressMode(CUtexref hTexRef, int dim, CUaddress_mode am);
CUresult CUDAAPI cuTexRefSetFilterMode(CUtexref hTexRef, CUfilter_mode fm);
CUresult CUDAAPI cuTexRefSetMipmapFilterMode(CUtexref hTexRef, CUfilter_mode fm);
CUresult CUDAAPI cuTexRefSetMipmapLevelBias(CUtexref hTexRef, float bias);
CUresult CUDAAPI cuTexRefSetMipmapLevelClamp(CUtexref hTexRef, float minMipmapLevelClamp, float maxMipmapLevelClamp);
CUresult CUDAAPI cuTexRefSetMaxAnisotropy(CUtexref hTexRef, unsigned int maxAniso);
CUresult CUDAAPI cuTexRefSetBorderColor(CUtexref hTexRef, float *pBorderColor);
CUresult CUDAAPI cuTexRefSetFlags(CUtexref hTexRef, unsigned int Flags);
CUresult CUDAAPI cuTexRefGetAddress_v2(CUdeviceptr *pdptr, CUtexref hTexRef);
CUresult CUDAAPI cuTexRefGetArray(CUarray *phArray, CUtexref hTexRef);
CUresult CUDAAPI cuTexRefGetAddressMode(CUaddress_mode *pam, CUtexref hTexRef, int dim);
CUresult CUDAAPI cuTexRefGetFilterMode(CUfilter_mode *pfm, CUtexref hTexRef);
CUresult CUDAAPI cuTexRefGetFormat(CUarray_format *pFormat, int *pNumChannels, CUtexref hTexRef);
CUresult CUDAAPI cuTexRefGetMaxAnisotropy(int *pmaxAniso, CUtexref hTexRef);
CUresult CUDAAPI cuTexRefGetBorderColor(float *pBorderColor, CUtexref hTexRef);
CUresult CUDAAPI cuTexRefGetFlags(unsigned int *pFlags, CUtexref hTexRef);
CUresult CUDAAPI cuSurfRefSetArray(CUsurfref hSurfRef, CUarray hArray, unsigned int Flags);
CUresult CUDAAPI cuSurfRefGetArray(CUarray *phArray, CUsurfref hSurfRef);

#ifdef __cplusplus
}
#endif

#endif /* CUDA_VERSION >= 13000 */
#endif /* GOCCL_CUDA_COMPAT_H */
