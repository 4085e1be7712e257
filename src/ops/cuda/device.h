/* device.h — C entry points of the CUDA backend: choose a device, register the
 * device allocator with src/core/alloc, describe the device. Only linked in builds
 * with CUDA (libmegafold_cuda.a). */
#ifndef MF_CUDA_DEVICE_H
#define MF_CUDA_DEVICE_H

#include "../../core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Selects `device`, registers cudaMalloc/cudaFree as the mf_dmalloc backend.
 * MF_ERR_RUNTIME (with message) when no usable GPU is present. */
mf_status mf_cuda_init(int device);
/* "NVIDIA H200, sm_90, 139.8 GiB" into buf. */
const char *mf_cuda_describe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
