/* tma_ptx.cuh — Hopper's tensor memory accelerator (TMA, cp.async.bulk.tensor) and the
 * transaction barriers (mbarrier) that its copies complete on, as the few PTX instructions
 * megafold's kernels use, plus the host side: a tiled tensor map encoded through the
 * driver's entry point (cudaGetDriverEntryPointByVersion, so nothing links libcuda), and
 * the cluster instructions of the kernels that exchange data between the CTAs of a thread
 * block cluster (rank, mapa, st.async, remote arrivals, the cluster barrier).
 * Written by hand (PTX ISA 8.x, "Tensor Copy" and "mbarrier") for the same reason as
 * wgmma_ptx.cuh: five instructions do not justify CUTLASS/CuTe. Not a public header.
 *
 * Swizzled boxes: with CU_TENSOR_MAP_SWIZZLE_64B / _128B the copy permutes the 16-byte
 * chunks of each row of the box in shared memory: chunk c of the row at byte offset o goes
 * to c ^ ((o >> 7) & 3) (64B) or c ^ ((o >> 7) & 7) (128B), o counted from a 512- / 1024-
 * byte aligned base. mf_sw64() / mf_sw128_chunk() (wgmma_ptx.cuh) give those offsets. */
#ifndef MF_OPS_CUDA_TMA_PTX_CUH
#define MF_OPS_CUDA_TMA_PTX_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

/* Byte offset of the 16-byte chunk ch (0..3) of row r in a box of 64-byte rows written with
 * the 64-byte swizzle. */
static __device__ __forceinline__ uint32_t mf_sw64(int r, int ch) {
  return (uint32_t)(r * 64 + (((ch ^ (r >> 1)) & 3) << 4));
}

static __device__ __forceinline__ void mf_mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* Makes the initialised barriers visible to the async proxy (before a __syncthreads). */
static __device__ __forceinline__ void mf_mbar_init_fence(void) {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* One arrival that also announces `bytes` of copies completing on the barrier. */
static __device__ __forceinline__ void mf_mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* One plain arrival (release: this thread's earlier shared-memory accesses are ordered
 * before the phase completes). */
static __device__ __forceinline__ void mf_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* Waits until the barrier's phase with this parity has completed; CLUSTER = acquire at
 * cluster scope (mf_mbar_wait_cluster below), else the default (CTA scope). */
template <bool CLUSTER>
static __device__ __forceinline__ void mf_mbar_wait_scope(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    if (CLUSTER)
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                   " selp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
    else
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                   " selp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done)
                   : "r"(bar), "r"(parity)
                   : "memory");
  } while (!done);
}
static __device__ __forceinline__ void mf_mbar_wait(uint32_t bar, uint32_t parity) {
  mf_mbar_wait_scope<false>(bar, parity);
}

/* Thread block clusters (sm_90): this CTA's rank in its cluster, the cluster's index and
 * count in the grid (1-D clusters and grids). */
/* The release of item q of a weight ring (NS slots, nq items in all, full / empty
 * mbarriers 8 bytes apart from `empty`): this thread's arrival on its slot's empty barrier,
 * then, on the refilling thread, the wait for every arrival and issue(q + NS) into the
 * freed slot. Every thread of the warp calls it (it ends in __syncwarp). */
template <int NS, class Issue>
static __device__ __forceinline__ void mf_ring_release(uint32_t empty, int64_t q, int64_t nq, bool refiller,
                                                       Issue &&issue) {
  const uint32_t s = (uint32_t)(q % NS);
  mf_mbar_arrive(empty + 8 * s);
  if (refiller && q + NS < nq) {
    mf_mbar_wait(empty + 8 * s, (uint32_t)(q / NS) & 1u);
    issue(q + NS);
  }
  __syncwarp();
}

static __device__ __forceinline__ uint32_t mf_cluster_rank(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
static __device__ __forceinline__ uint32_t mf_cluster_id(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
static __device__ __forceinline__ uint32_t mf_cluster_count(void) {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}
/* The shared::cluster address of shared::cta address saddr in the CTA of rank `rank`. */
static __device__ __forceinline__ uint32_t mf_mapa(uint32_t saddr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(saddr), "r"(rank));
  return r;
}
/* Every thread of every CTA of the cluster: arrive (release) and wait (acquire). */
static __device__ __forceinline__ void mf_cluster_sync(void) {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* 16 bytes into another CTA's shared memory (raddr from mf_mapa, 16-byte aligned),
 * completing 16 bytes of transactions on that CTA's barrier rbar (also from mf_mapa).
 * Remote shared memory wants coalesced stores, as global memory does: a warp's 32 lanes
 * writing 512 contiguous bytes ran 2.2× the rate of scattered 8-byte pieces. */
static __device__ __forceinline__ void mf_st_async_v4(uint32_t raddr, uint32_t x, uint32_t y, uint32_t z, uint32_t w,
                                                      uint32_t rbar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(raddr),
               "r"(x), "r"(y), "r"(z), "r"(w), "r"(rbar)
               : "memory");
}
/* One arrival at cluster scope on the barrier at shared::cluster address rbar, relaxed:
 * for a signal that orders only shared-memory reads whose values the thread has already
 * used (a release arrival would first wait for the thread's outstanding global stores:
 * measured ≈ 0.4 µs per arrival). */
static __device__ __forceinline__ void mf_mbar_arrive_remote_relaxed(uint32_t rbar) {
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(rbar) : "memory");
}
/* mf_mbar_wait with acquire at cluster scope: for phases that other CTAs' arrivals or
 * st.async transactions complete. */
static __device__ __forceinline__ void mf_mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  mf_mbar_wait_scope<true>(bar, parity);
}

/* Box of a 5-D / 4-D tensor map at coordinates c (innermost first) → shared address dst;
 * completes `box bytes` of transactions on bar. Out-of-range elements are written as 0. */
static __device__ __forceinline__ void mf_tma_load_5d(uint32_t dst, const CUtensorMap *map, int c0,
                                                      int c1, int c2, int c3, int c4, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"((uint64_t)(uintptr_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
static __device__ __forceinline__ void mf_tma_load_1d(uint32_t dst, const CUtensorMap *map, int c0, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2}], [%3];\n" ::"r"(dst),
      "l"((uint64_t)(uintptr_t)map), "r"(c0), "r"(bar)
      : "memory");
}
static __device__ __forceinline__ void mf_tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                                      uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"((uint64_t)(uintptr_t)map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
static __device__ __forceinline__ void mf_tma_load_4d(uint32_t dst, const CUtensorMap *map,
                                                      int c0, int c1, int c2, int c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"((uint64_t)(uintptr_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

/* The reverse: shared address src → the box of a 2-D tensor map at (c0, c1) (innermost
 * first), one thread, in this thread's current bulk async-group; out-of-range elements are
 * not written (the map's dims clip partial boxes). The writing threads make their shared
 * stores visible first (mf_fence_proxy_async, then a barrier); src may be rewritten after
 * mf_bulk_wait_read, and the global writes are complete after mf_bulk_wait_all. */
static __device__ __forceinline__ void mf_tma_store_2d(const CUtensorMap *map, int c0, int c1, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                   (uint64_t)(uintptr_t)map),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}
static __device__ __forceinline__ void mf_bulk_commit(void) {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* This thread's committed bulk groups have finished reading their shared sources. */
static __device__ __forceinline__ void mf_bulk_wait_read(void) {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/* This thread's committed bulk groups are complete (their writes performed). */
static __device__ __forceinline__ void mf_bulk_wait_all(void) {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/* `bytes` (a multiple of 16) of contiguous global memory at src → shared address dst (both
 * 16-byte aligned), completing on bar. */
static __device__ __forceinline__ void mf_bulk_load(uint32_t dst, const void *src, uint32_t bytes,
                                                    uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"((uint64_t)(uintptr_t)src), "r"(bytes), "r"(bar)
      : "memory");
}

/* Host: the driver's cuTensorMapEncodeTiled, or NULL where the driver has none (looked up
 * once; a function-local static is initialised thread-safely). */
static inline PFN_cuTensorMapEncodeTiled_v12000 mf_tma_lookup(void) {
  void *p = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    return (PFN_cuTensorMapEncodeTiled_v12000)p;
  (void)cudaGetLastError();
  return NULL;
}
static inline PFN_cuTensorMapEncodeTiled_v12000 mf_tma_encoder(void) {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = mf_tma_lookup();
  return fn;
}

/* Host: a tensor map of `rank` dims of element type ty (dims innermost first, strides in
 * bytes of dims 1..rank-1, box sizes), zero fill out of range. Returns 0 on success, -1 when
 * the driver refuses the shape (callers then take a path without TMA). */
static inline int mf_tma_encode(CUtensorMap *map, CUtensorMapDataType ty, const void *base, int rank,
                                const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                                CUtensorMapSwizzle swizzle) {
  PFN_cuTensorMapEncodeTiled_v12000 enc = mf_tma_encoder();
  if (!enc) return -1;
  const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
  const CUresult r = enc(map, ty, (cuuint32_t)rank, const_cast<void *>(base),
                         (const cuuint64_t *)dims, (const cuuint64_t *)strides, (const cuuint32_t *)box,
                         ones, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : -1;
}
static inline int mf_tma_encode_bf16(CUtensorMap *map, const void *base, int rank,
                                     const uint64_t *dims, const uint64_t *strides,
                                     const uint32_t *box, CUtensorMapSwizzle swizzle) {
  return mf_tma_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, rank, dims, strides, box, swizzle);
}

#endif
