/* device.cu — device selection and the cudaMalloc-backed allocator registered with
 * src/core/alloc (see device.h). */
#include "device.h"
#include "gpu.h"

#include <stdio.h>

static void *cuda_alloc(size_t bytes, char *err, size_t errlen) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    snprintf(err, errlen, "%s", cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

static void cuda_free(void *p) { MF_CHECK_CUDA(cudaFree(p)); }

static const mf_device_allocator g_cuda_allocator = {cuda_alloc, cuda_free};

extern "C" mf_status mf_cuda_init(int device) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return mf_error_set(MF_ERR_RUNTIME, "no CUDA device: %s",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  if (device < 0 || device >= n)
    return mf_error_set(MF_ERR_CONFIG, "CUDA device %d requested, %d present", device, n);
  MF_CHECK_CUDA(cudaSetDevice(device));
  mf_alloc_set_device(&g_cuda_allocator);
  return MF_OK;
}

extern "C" const char *mf_cuda_describe(char *buf, size_t n) {
  int dev = 0;
  cudaDeviceProp p;
  MF_CHECK_CUDA(cudaGetDevice(&dev));
  MF_CHECK_CUDA(cudaGetDeviceProperties(&p, dev));
  snprintf(buf, n, "%s, sm_%d%d, %.1f GiB", p.name, p.major, p.minor,
           (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
  return buf;
}
