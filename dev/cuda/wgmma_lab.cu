/* wgmma_lab.cu — checks and times the wgmma wrappers of src/ops/cuda/wgmma_ptx.cuh on an
 * sm_90a GPU: one warpgroup computes D (64 × N) = A (64 × K)·Bᵀ (B: N × K) with A from
 * swizzled shared memory (ss) or from registers (rs), N = 64 and 128, K = 128, B K-major
 * and MN-major (the transposed operand), and both operands MN-major (mf_wg_ss_*_tt), against a
 * double-precision CPU product of the same bf16 inputs; then the tensor-core rate of a
 * loop of m64n128k16 (ss) with two warpgroups per CTA on every SM. Exits non-zero when a
 * product is wrong. Lab only: the kernels that use the wrappers are tested in
 * tests/gpu/test_fusion_gpu.cu.
 *
 * Run: build/dev/wgmma_lab */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/wgmma_ptx.cuh"

typedef __nv_bfloat16 bf16;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

#define LAB_K 128

static __device__ __forceinline__ uint32_t pack2(bf16 lo, bf16 hi) {
  return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

/* A (rows × K) row-major bf16 from global into the swizzled layout at s (1024-aligned). */
static __device__ void lab_fill(unsigned char *s, const bf16 *g, int rows, int K) {
  const int pieces = rows * (K / 8);
  for (int idx = threadIdx.x; idx < pieces; idx += blockDim.x) {
    const int r = idx / (K / 8), p = idx % (K / 8), kb = p / 8, ch = p % 8;
    *(uint4 *)(s + kb * rows * 128 + mf_sw128_chunk(r, ch)) = *(const uint4 *)(g + (size_t)r * K + p * 8);
  }
}

/* B (N × K) row-major from global into the MN-major swizzled layout: atoms of 64 n ×
 * K rows of k (128 bytes each), atom a at a·K·128 bytes. */
static __device__ void lab_fill_mn(unsigned char *s, const bf16 *g, int N, int K) {
  for (int idx = threadIdx.x; idx < N * K; idx += blockDim.x) {
    const int n = idx / K, k = idx % K;
    *(bf16 *)(s + (n / 64) * K * 128 + mf_sw128(k, n % 64)) = g[(size_t)n * K + k];
  }
}

/* TB = 1: B in the MN-major layout, descriptor encoding swap (mf_wg_desc_mn<SWAP>). */
template <int N, bool RS, int TB>
__global__ void lab_gemm(float *out, const bf16 *A, const bf16 *B, int swap) {
  extern __shared__ unsigned char raw[];
  unsigned char *sm = raw + ((1024 - (mf_smem_u32(raw) & 1023)) & 1023);
  unsigned char *As = sm, *Bs = sm + 64 * LAB_K * 2;
  lab_fill(As, A, 64, LAB_K);
  if (TB) lab_fill_mn(Bs, B, N, LAB_K);
  else lab_fill(Bs, B, N, LAB_K);
  mf_fence_proxy_async();
  __syncthreads();
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, t = l % 4, r = 16 * w + l / 4;
  uint32_t af[LAB_K / 16][4];
  if (RS)
    for (int k = 0; k < LAB_K / 16; k++) {
      const int k0 = 16 * k + 2 * t;
      af[k][0] = pack2(A[r * LAB_K + k0], A[r * LAB_K + k0 + 1]);
      af[k][1] = pack2(A[(r + 8) * LAB_K + k0], A[(r + 8) * LAB_K + k0 + 1]);
      af[k][2] = pack2(A[r * LAB_K + k0 + 8], A[r * LAB_K + k0 + 9]);
      af[k][3] = pack2(A[(r + 8) * LAB_K + k0 + 8], A[(r + 8) * LAB_K + k0 + 9]);
    }
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; i++) d[i] = -1.0f; /* overwritten by the first step (acc = 0) */
  mf_wg_fence();
#pragma unroll
  for (int k = 0; k < LAB_K / 16; k++) {
    const int kb = k / 4, kk = k % 4;
    const uint32_t bmn = mf_smem_u32(Bs + k * 2048);
    const uint64_t db = TB ? (swap ? mf_wg_desc_mn<1>(bmn, LAB_K * 128) : mf_wg_desc_mn<0>(bmn, LAB_K * 128))
                           : mf_wg_desc(mf_smem_u32(Bs + kb * N * 128 + kk * 32));
    if (RS) {
      if (N == 64) mf_wg_rs_n64<TB>(*(float(*)[32]) d, af[k], db, k > 0);
      else mf_wg_rs_n128<TB>(*(float(*)[64]) d, af[k], db, k > 0);
    } else {
      const uint64_t da = mf_wg_desc(mf_smem_u32(As + kb * 64 * 128 + kk * 32));
      if (N == 64) mf_wg_ss_n64<TB>(*(float(*)[32]) d, da, db, k > 0);
      else mf_wg_ss_n128<TB>(*(float(*)[64]) d, da, db, k > 0);
    }
  }
  mf_wg_commit();
  mf_wg_wait<0>();
  mf_wg_pin(d);
  for (int i = 0; i < N / 8; i++) {
    const int c = 8 * i + 2 * t;
    out[r * N + c] = d[4 * i];
    out[r * N + c + 1] = d[4 * i + 1];
    out[(r + 8) * N + c] = d[4 * i + 2];
    out[(r + 8) * N + c + 1] = d[4 * i + 3];
  }
}

/* MN-major (transposed) operands, both at once (mf_wg_ss_n64_tt / n128_tt): D (64 × N) =
 * Atᵀ·Bt with At (K × 64) and Bt (K × N) row-major, stored as they are (K rows, the M / N
 * elements contiguous, swizzled 64-column blocks of K rows at K·128 bytes), k16 step =
 * 16 rows = 2048 bytes; SWAP picks the descriptor encoding (mf_wg_desc_mn). */
template <int N, int SWAP>
__global__ void lab_gemm_mn(float *out, const bf16 *At, const bf16 *Bt) {
  extern __shared__ unsigned char raw[];
  unsigned char *sm = raw + ((1024 - (mf_smem_u32(raw) & 1023)) & 1023);
  unsigned char *As = sm, *Bs = sm + 64 * LAB_K * 2;
  lab_fill(As, At, LAB_K, 64);
  lab_fill(Bs, Bt, LAB_K, N);
  mf_fence_proxy_async();
  __syncthreads();
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, t = l % 4, r = 16 * w + l / 4;
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; i++) d[i] = -1.0f;
  mf_wg_fence();
#pragma unroll
  for (int k = 0; k < LAB_K / 16; k++) {
    const uint64_t da = mf_wg_desc_mn<SWAP>(mf_smem_u32(As + k * 2048), LAB_K * 128);
    const uint64_t db = mf_wg_desc_mn<SWAP>(mf_smem_u32(Bs + k * 2048), LAB_K * 128);
    if (N == 64) mf_wg_ss_n64_tt(*(float(*)[32]) d, da, db, k > 0);
    else mf_wg_ss_n128_tt(*(float(*)[64]) d, da, db, k > 0);
  }
  mf_wg_commit();
  mf_wg_wait<0>();
  mf_wg_pin(d);
  for (int i = 0; i < N / 8; i++) {
    const int c = 8 * i + 2 * t;
    out[r * N + c] = d[4 * i];
    out[r * N + c + 1] = d[4 * i + 1];
    out[(r + 8) * N + c] = d[4 * i + 2];
    out[(r + 8) * N + c + 1] = d[4 * i + 3];
  }
}

/* Rate: each of the CTA's two warpgroups runs `iters` × 8 m64n128k16 on resident tiles. */
__global__ void __launch_bounds__(256, 1) lab_rate(float *sink, int iters) {
  extern __shared__ unsigned char raw[];
  unsigned char *sm = raw + ((1024 - (mf_smem_u32(raw) & 1023)) & 1023);
  for (int i = threadIdx.x; i < (2 * 64 + 128) * LAB_K * 2 / 4; i += blockDim.x)
    ((uint32_t *)sm)[i] = 0x3c003c00u * (uint32_t)(i & 1);
  mf_fence_proxy_async();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  unsigned char *As = sm + wg * 64 * LAB_K * 2, *Bs = sm + 2 * 64 * LAB_K * 2;
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; i++) d[i] = 0.0f;
  for (int it = 0; it < iters; it++) {
    mf_wg_fence();
#pragma unroll
    for (int k = 0; k < LAB_K / 16; k++) {
      const int kb = k / 4, kk = k % 4;
      mf_wg_ss_n128(d, mf_wg_desc(mf_smem_u32(As + kb * 64 * 128 + kk * 32)),
                    mf_wg_desc(mf_smem_u32(Bs + kb * 128 * 128 + kk * 32)), 1);
    }
    mf_wg_commit();
    mf_wg_wait<1>();
  }
  mf_wg_wait<0>();
  mf_wg_pin(d);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; i++) s += d[i];
  if (s == 12345.0f) sink[threadIdx.x] = s;
}

static float frand(unsigned *st) {
  *st = *st * 1664525u + 1013904223u;
  return ((float)(*st >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

template <int N, bool RS, int TB = 0>
static int check(const char *name, int swap = 0) {
  const int K = LAB_K;
  bf16 *hA = (bf16 *)malloc(64 * K * 2), *hB = (bf16 *)malloc((size_t)N * K * 2);
  unsigned st = 12345u + N + (RS ? 7 : 0);
  for (int i = 0; i < 64 * K; i++) hA[i] = __float2bfloat16(frand(&st));
  for (int i = 0; i < N * K; i++) hB[i] = __float2bfloat16(frand(&st));
  bf16 *dA, *dB;
  float *dO;
  CK(cudaMalloc(&dA, 64 * K * 2));
  CK(cudaMalloc(&dB, (size_t)N * K * 2));
  CK(cudaMalloc(&dO, 64 * N * 4));
  CK(cudaMemcpy(dA, hA, 64 * K * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, hB, (size_t)N * K * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dO, 0xff, 64 * N * 4)); /* NaN poison: every element must be written */
  const int smem = (64 + N) * K * 2 + 1024;
  CK(cudaFuncSetAttribute(lab_gemm<N, RS, TB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  lab_gemm<N, RS, TB><<<1, 128, smem>>>(dO, dA, dB, swap);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  float *hO = (float *)malloc(64 * N * 4);
  CK(cudaMemcpy(hO, dO, 64 * N * 4, cudaMemcpyDeviceToHost));
  double err = 0.0, ref2 = 0.0;
  int bad = 0;
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) s += (double)__bfloat162float(hA[i * K + k]) * __bfloat162float(hB[j * K + k]);
      const double e = fabs(s - hO[i * N + j]);
      if (!(e <= 1e-3 * (1.0 + fabs(s)))) {
        if (bad < 4) printf("  %s: D[%d][%d] = %g, expected %g\n", name, i, j, hO[i * N + j], s);
        bad++;
      }
      err += e * e;
      ref2 += s * s;
    }
  printf("%s: rel err %.3g, %d bad of %d -> %s\n", name, sqrt(err / ref2), bad, 64 * N,
         bad ? "FAIL" : "ok");
  free(hA); free(hB); free(hO);
  CK(cudaFree(dA)); CK(cudaFree(dB)); CK(cudaFree(dO));
  return bad != 0;
}

/* The MN-major form with descriptor encoding SWAP: returns 1 when wrong. */
template <int N, int SWAP>
static int check_mn(const char *name) {
  const int K = LAB_K;
  bf16 *hA = (bf16 *)malloc((size_t)K * 64 * 2), *hB = (bf16 *)malloc((size_t)K * N * 2);
  unsigned st = 777u + N;
  for (int i = 0; i < K * 64; i++) hA[i] = __float2bfloat16(frand(&st));
  for (int i = 0; i < K * N; i++) hB[i] = __float2bfloat16(frand(&st));
  bf16 *dA, *dB;
  float *dO;
  CK(cudaMalloc(&dA, (size_t)K * 64 * 2));
  CK(cudaMalloc(&dB, (size_t)K * N * 2));
  CK(cudaMalloc(&dO, 64 * N * 4));
  CK(cudaMemcpy(dA, hA, (size_t)K * 64 * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, hB, (size_t)K * N * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dO, 0xff, 64 * N * 4));
  const int smem = (64 + N) * K * 2 + 1024;
  CK(cudaFuncSetAttribute(lab_gemm_mn<N, SWAP>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  lab_gemm_mn<N, SWAP><<<1, 128, smem>>>(dO, dA, dB);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  float *hO = (float *)malloc(64 * N * 4);
  CK(cudaMemcpy(hO, dO, 64 * N * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) s += (double)__bfloat162float(hA[k * 64 + i]) * __bfloat162float(hB[k * N + j]);
      const double e = fabs(s - hO[i * N + j]);
      if (!(e <= 1e-3 * (1.0 + fabs(s)))) {
        if (bad < 2) printf("  %s: D[%d][%d] = %g, expected %g\n", name, i, j, hO[i * N + j], s);
        bad++;
      }
    }
  printf("%s (MF_WG_MN_SWAP %d%s): %d bad of %d -> %s\n", name, SWAP,
         SWAP == MF_WG_MN_SWAP ? ", the kernels' choice" : ", the alternative", bad, 64 * N,
         bad ? "FAIL" : "ok");
  free(hA); free(hB); free(hO);
  CK(cudaFree(dA)); CK(cudaFree(dB)); CK(cudaFree(dO));
  return bad != 0;
}

int main(void) {
  int fails = 0;
  fails += check<64, false>("ss m64n64k16 K=128");
  fails += check<128, false>("ss m64n128k16 K=128");
  fails += check<64, true>("rs m64n64k16 K=128");
  fails += check<128, true>("rs m64n128k16 K=128");
  /* B MN-major, then both operands MN-major (mf_wg_ss_*_tt): the encoding of wgmma_ptx.cuh
   * (MF_WG_MN_SWAP 0: lbo = the atom stride along m/n = K·128 bytes, sbo = 1024 between
   * 8-row groups along k) counts; the swapped one is printed for the record (it must fail
   * at N = 128, where two atoms are read) */
  fails += check<64, false, 1>("ss m64n64k16 K=128 B MN-major");
  fails += check<128, false, 1>("ss m64n128k16 K=128 B MN-major");
  fails += check<64, true, 1>("rs m64n64k16 K=128 B MN-major");
  fails += check<128, true, 1>("rs m64n128k16 K=128 B MN-major");
  (void)check<128, true, 1>("rs m64n128k16 K=128 B MN-major, lbo/sbo swapped (info)", 1);
  fails += check_mn<64, MF_WG_MN_SWAP>("ss tt m64n64k16 K=128");
  fails += check_mn<128, MF_WG_MN_SWAP>("ss tt m64n128k16 K=128");
  (void)check_mn<128, !MF_WG_MN_SWAP>("ss tt m64n128k16 K=128 (info)");
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float *sink;
  CK(cudaMalloc(&sink, 256 * 4));
  const int smem = (2 * 64 + 128) * LAB_K * 2 + 1024, iters = 20000;
  CK(cudaFuncSetAttribute(lab_rate, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  lab_rate<<<sms, 256, smem>>>(sink, 100);
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  lab_rate<<<sms, 256, smem>>>(sink, iters);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0.0f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  const double fl = (double)sms * 2 * iters * 8 * 2.0 * 64 * 128 * 16;
  printf("rate: ss m64n128k16, 2 warpgroups x %d SMs: %.1f TFLOP/s (%.3f ms)\n", sms, fl / ms / 1e9, ms);
  CK(cudaFree(sink));
  printf("%d passed, %d failed\n", 10 - fails, fails);
  return fails != 0;
}
