/* mma_ptx.cuh — the sm_80+ PTX wrappers shared by the mma.sync kernels of EvoFusion
 * (ln_gemm.cu, ln_gemm_bwd.cu): shared-memory addresses, ldmatrix x4 (plain and
 * transposed), stmatrix x4 transposed (trimul_ph1_wg.cu), the m16n8k16 bf16 mma with fp32 accumulation, and the cp.async group
 * commit / wait. Only what two files wrote the same; each file keeps its own cp.async
 * copy (they differ: zero-fill, memory clobber). Not a public header; C code never
 * includes it. */
#ifndef MF_OPS_CUDA_MMA_PTX_CUH
#define MF_OPS_CUDA_MMA_PTX_CUH

#include <stdint.h>

#include "gpu.h"

/* The shared-state-space address of a generic pointer into shared memory. */
static __device__ __forceinline__ uint32_t mf_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
/* Four 8×8 bf16 matrices from shared memory (lane l gives the row address of matrix l / 8). */
static __device__ __forceinline__ void mf_ldsm_x4(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/* The same, each matrix transposed. */
static __device__ __forceinline__ void mf_ldsm_x4_t(uint32_t *r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/* Four 8×8 bf16 matrices to shared memory, each transposed (sm_90 stmatrix; lane l gives
 * the row address of matrix l / 8; register q of lane l holds the elements that
 * mf_ldsm_x4_t would load there). */
static __device__ __forceinline__ void mf_stsm_x4_t(uint32_t addr, const uint32_t *r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
/* c (16×8 fp32) += a (16×16 bf16, row) · b (16×8 bf16, col) */
static __device__ __forceinline__ void mf_mma_bf16(float *c, const uint32_t *a, uint32_t b0,
                                                   uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void mf_cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's cp.async groups are pending. */
template <int N>
static __device__ __forceinline__ void mf_cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
