/* fusion_util.cuh — small device and host helpers private to the EvoFusion .cu files
 * (ln_linear, transition, trimul, dropout, attn_pair_bias, triatt): the workspace carver,
 * sigmoid, vector loads/stores, the SM count, the warp-per-row channel layout and row load, and the
 * pointer-type shorthands. Not a public header; C code never includes it. */
#ifndef MF_OPS_CUDA_FUSION_UTIL_CUH
#define MF_OPS_CUDA_FUSION_UTIL_CUH

#include <stddef.h>
#include <stdint.h>

#include "gemm_cuda.h"
#include "gpu.h"

typedef __nv_bfloat16 bf16;

/* Carves a device workspace into 256-byte-aligned slices; with base = NULL it only
 * counts (the *_workspace() size functions run the same carving code). */
typedef struct {
  char *base;
  size_t used;
} mf_carver;

static inline void *mf_carve(mf_carver *c, size_t bytes) {
  void *p = c->base ? c->base + c->used : NULL;
  c->used += mf_cuda_align(bytes ? bytes : 1);
  return p;
}

static __device__ __forceinline__ float mf_sigmoidf(float x) { return 1.0f / (1.0f + __expf(-x)); }
/* Sigmoid for hot loops: σ(x) = 1/(1 + 2^(−x·log2 e)) with the approximate ex2 and
 * reciprocal (flush to zero): four instructions and no range fix-ups (__expf and
 * __fdividef added a compare and two predicated multiplies: the trimul phase-3 kernel's
 * gate loop, README step 33); relative error a few ulp, exactly 0 and 1 in the tails. */
static __device__ __forceinline__ float mf_sigmoidf_fast(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
}

/* σ(x) = (1 + tanh(x/2))/2: one MUFU operation and no branch (tanh.approx, relative error
 * about 2⁻¹¹: for values that are rounded to bf16). */
static __device__ __forceinline__ float mf_sigmoidf_tanh(float x) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * x));
  return fmaf(0.5f, t, 0.5f);
}

/* Two floats as a bf16x2 word (lo in the low half, round to nearest), and back. */
static __device__ __forceinline__ uint32_t mf_pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *(const uint32_t *)&h;
}
static __device__ __forceinline__ float2 mf_unpack_bf16x2(uint32_t u) {
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}

/* VEC consecutive values as fp32: VEC = 8 moves 16 bytes of bf16 (32 of fp32) per access
 * and needs 16-byte alignment; VEC = 1 is the scalar fallback for widths not divisible by 8. */
template <int VEC>
static __device__ __forceinline__ void mf_ldv(float *f, const bf16 *p) {
  if constexpr (VEC == 8) {
    const uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      f[2 * k] = __low2float(h[k]);
      f[2 * k + 1] = __high2float(h[k]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) f[k] = __bfloat162float(p[k]);
  }
}
template <int VEC>
static __device__ __forceinline__ void mf_stv(bf16 *p, const float *f) {
  if constexpr (VEC == 8) {
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *(uint4 *)p = u;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) p[k] = __float2bfloat16_rn(f[k]);
  }
}
template <int VEC>
static __device__ __forceinline__ void mf_ldvf(float *f, const float *p) {
  if constexpr (VEC == 8) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) f[k] = p[k];
  }
}

/* One warp per row of C channels, V values per lane (C <= 32·V). Channel of value i of a
 * lane: contiguous when CONTIG (C == 32·V, V even: each lane owns V consecutive channels,
 * loaded as bf16 pairs, so a warp moves whole 128-byte lines), else lane-strided
 * (c = i·32 + lane, any C). */
template <int V, bool CONTIG>
static __device__ __forceinline__ int mf_row_chan(int lane, int i) {
  return CONTIG ? lane * V + i : i * MF_WARP_SIZE + lane;
}

/* v[0..V) = row values (0 past C), as fp32. */
template <int V, bool CONTIG>
static __device__ __forceinline__ void mf_row_load_bf16(float *v, const bf16 *__restrict__ row,
                                                        int lane, int C) {
  if (CONTIG) {
#pragma unroll
    for (int i = 0; i < V; i += 2) {
      const __nv_bfloat162 p = *(const __nv_bfloat162 *)(row + lane * V + i);
      v[i] = __low2float(p);
      v[i + 1] = __high2float(p);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; i++) {
      const int c = i * MF_WARP_SIZE + lane;
      v[i] = c < C ? mf_bf16_to_f32(row[c]) : 0.0f;
    }
  }
}

/* Column sums in a fixed order: column j of src (rows, ld) is summed by the MF_CS_G
 * threads (tx, 0..MF_CS_G−1) of a 32-column block, thread g over rows g, g + MF_CS_G, …,
 * then the groups in order g = 0.. — deterministic (no atomics), with MF_CS_G loads in
 * flight per column. One thread per column walking all rows in turn had taken 19 µs for
 * the single attention's 264 dW_z partials, 30 µs for its 768-row b_q column sums and
 * 8 µs for a 128 × 128 dW over 132 partials at N = 768 (8 groups: 7 and 14 µs; H200 ncu).
 * Column j < n0 goes to d0[j], the next n1 columns to d1, the rest to d2, each += the sum
 * (a NULL destination is skipped). Templates only so that translation units that do not
 * use them instantiate nothing. */
#define MF_CS_G 32
static __device__ __forceinline__ float mf_to_f32(float x) { return x; }
static __device__ __forceinline__ float mf_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
static __global__ void __launch_bounds__(32 * MF_CS_G)
mf_colsum_kernel(float *__restrict__ d0, float *__restrict__ d1, float *__restrict__ d2, int n0, int n1,
                 const T *__restrict__ src, int64_t ld, int rows, int n) {
  __shared__ float part[MF_CS_G][33];
  const int tx = threadIdx.x % 32, g = threadIdx.x / 32, j = blockIdx.x * 32 + tx;
  float s = 0.0f;
  if (j < n)
#pragma unroll 8
    for (int i = g; i < rows; i += MF_CS_G) s += mf_to_f32(src[(int64_t)i * ld + j]);
  part[g][tx] = s;
  __syncthreads();
  if (g != 0 || j >= n) return;
  float t = 0.0f;
#pragma unroll
  for (int k = 0; k < MF_CS_G; k++) t += part[k][tx];
  float *dst = j < n0        ? (d0 ? d0 + j : NULL)
               : j < n0 + n1 ? (d1 ? d1 + (j - n0) : NULL)
                             : (d2 ? d2 + (j - n0 - n1) : NULL);
  if (dst) *dst += t;
}
template <typename T>
static inline void mf_colsum_cuda(float *d0, float *d1, float *d2, int n0, int n1, const T *src,
                                  int64_t ld, int rows, int n, cudaStream_t stream) {
  if (n <= 0) return;
  mf_colsum_kernel<T><<<(n + 31) / 32, 32 * MF_CS_G, 0, stream>>>(d0, d1, d2, n0, n1, src, ld, rows, n);
  MF_CHECK_LAUNCH();
}

/* dst[i] += Σ_b part[b·n + i], i < n, in a fixed order: the reduce of per-CTA
 * weight-gradient partials. */
template <typename F = float>
static inline void mf_sum_parts_cuda(F *dst, const F *part, int nparts, int n, cudaStream_t stream) {
  mf_colsum_cuda<F>(dst, NULL, NULL, n, 0, part, n, nparts, n, stream);
}

/* Whether the current device has compute capability 9.x (sm_90a kernels); 0 where no
 * device answers (the error is cleared). */
static inline int mf_dev_sm90(void) {
  static int cc = -1;
  if (cc < 0) {
    int dev = 0, major = 0;
    cc = cudaGetDevice(&dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess
             ? major
             : 0;
    (void)cudaGetLastError();
  }
  return cc == 9;
}

/* The SM count, or 132 where no device answers: workspace sizes of per-CTA partials are
 * then still an upper bound on an H100/H200. */
static inline int mf_sm_count_or132(void) {
  static int n = 0;
  if (!n) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        n < 1)
      n = 132;
    (void)cudaGetLastError();
  }
  return n;
}

/* The current device's SM count (read once per translation unit; at least 1). */
static inline int mf_sm_count(void) {
  static int n = 0;
  if (!n) {
    int dev = 0;
    MF_CHECK_CUDA(cudaGetDevice(&dev));
    MF_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (n < 1) n = 1;
  }
  return n;
}

/* Grid for a grid-stride elementwise kernel over n items (at most 16 blocks per SM). */
static inline unsigned mf_ew_blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  if (b > 132 * 16) b = 132 * 16;
  return (unsigned)(b < 1 ? 1 : b);
}

#endif
