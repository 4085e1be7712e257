/* wgmma_ptx.cuh — the Hopper (sm_90a) warpgroup-MMA wrappers of EvoFusion's wgmma kernels:
 * the 128-byte-swizzled K-major shared-memory operand layout, its matrix descriptor,
 * wgmma.mma_async m64n64k16 / m64n128k16 (bf16 in, fp32 accumulate; A from shared memory
 * or from registers; B K-major or MN-major; both MN-major: mf_wg_ss_*_tt), m64n32k16 with A
 * from registers or both operands MN-major, m64n136k16 both MN-major, the 64-byte-swizzled descriptor of EvoFlash-3D's TMA tiles, fence /
 * commit / wait, and the generic→async proxy fence. Written by
 * hand (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate") rather than
 * through CUTLASS/CuTe: four instructions and one layout are all we use, and the project's
 * dependencies stay C-callable libraries. Not a public header; C code never includes it.
 *
 * Operand layout (both A and B are "K-major": each row holds consecutive k): a tile of
 * R rows × K bf16 is stored as K/64 blocks of R × 64; inside a block row r occupies bytes
 * r·128 .. r·128 + 127 with its eight 16-byte chunks permuted by chunk ^= r % 8 (the
 * 128-byte swizzle), so a block's 8-row groups are 1024 bytes apart. Blocks must start on
 * 1024-byte boundaries. The descriptor of rows r0.. (r0 % 8 == 0) at k-step kk (16 columns)
 * of block kb is mf_wg_desc(block_base + r0·128 + kk·32); wgmma reads 64 (A) or N (B)
 * rows from it. */
#ifndef MF_OPS_CUDA_WGMMA_PTX_CUH
#define MF_OPS_CUDA_WGMMA_PTX_CUH

#include <stdint.h>

#include "mma_ptx.cuh"

/* Byte offset of element (r, c), c < 64, inside one swizzled 64-column block. */
static __device__ __forceinline__ uint32_t mf_sw128(int r, int c) {
  return (uint32_t)(r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2);
}
/* The same for the 16-byte chunk ch (0..7) of row r. */
static __device__ __forceinline__ uint32_t mf_sw128_chunk(int r, int ch) {
  return (uint32_t)(r * 128 + (((ch ^ r) & 7) << 4));
}

/* Matrix descriptor of a swizzled K-major operand starting at shared address saddr:
 * start address >> 4 (bits 0–13), leading-dimension byte offset 16 (unused by swizzled
 * K-major layouts, bits 16–29), stride byte offset 1024 between 8-row groups (bits 32–45),
 * base offset 0, swizzle mode 1 = 128 bytes (bits 62–63). */
static __device__ __forceinline__ uint64_t mf_wg_desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}

/* MN-major operands (wgmma's transpose flags, imm-trans-a / imm-trans-b = 1): the operand
 * is stored with M (A) or N (B) contiguous — i.e. a row-major (K × M) or (K × N) tile in
 * the same swizzled 64-column blocks as above, its rows being k. Per PTX ISA "Matrix
 * Descriptor" / CUTLASS make_gmma_desc<Major::MN> (SW128: ((T,8,m),(8,k)) :
 * ((1,T,LBO),(8T,SBO)), T = 16 bytes): 64 consecutive M/N elements fill one 128-byte row,
 * 8 consecutive k rows one 1024-byte swizzle atom; LBO = the byte distance between
 * 64-element blocks along M/N (our block stride, rows·128), SBO = the distance between
 * 8-row k groups (1024). MF_WG_MN_SWAP = 1 swaps the two fields — the other reading of
 * the ISA text; dev/cuda/wgmma_lab.cu checks both: 0 is right (H200, 2026-11-30). A k16 step advances the start address by 16 rows = 2048 bytes. */
#ifndef MF_WG_MN_SWAP
#define MF_WG_MN_SWAP 0
#endif
template <int SWAP = MF_WG_MN_SWAP>
static __device__ __forceinline__ uint64_t mf_wg_desc_mn(uint32_t saddr, uint32_t mn_block_bytes) {
  const uint32_t lbo = SWAP ? 1024u : mn_block_bytes, sbo = SWAP ? mn_block_bytes : 1024u;
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | ((uint64_t)1 << 62);
}

/* The descriptor of the operand `off` bytes (a multiple of 16) past the one desc describes,
 * by one 32-bit add: the start-address field is (address >> 4) in bits 0–13, and no shared
 * address reaches 2¹⁸, so the sum never carries into the other fields. Building each
 * descriptor from its address took five uniform instructions (add, mask, shift, or, the
 * constant high word) in front of every wgmma (dev/cuda/README.md step 27). */
static __device__ __forceinline__ uint64_t mf_wg_desc_off(uint64_t desc, uint32_t off) {
  return ((desc >> 32) << 32) | (uint32_t)((uint32_t)desc + (off >> 4));
}

/* Matrix descriptor with the 64-byte swizzle (layout type 2; the pattern TMA's
 * CU_TENSOR_MAP_SWIZZLE_64B writes, mf_sw64 in tma_ptx.cuh: chunk ^= (row / 2) % 4 on
 * 512-byte-aligned 8-row atoms of 64-byte rows). K-major: rows of 32 k (sbo = 512 between
 * 8-row groups; a k16 step is +32 bytes). MN-major: rows are k, each holding 32 M/N
 * elements (sbo = 512 between 8-row k groups, lbo between 32-element M/N blocks; a k16
 * step is +1024 bytes). */
static __device__ __forceinline__ uint64_t mf_wg_desc_sw64(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | ((uint64_t)2 << 62);
}

/* Orders this thread's earlier register writes (accumulators, A fragments) before the
 * warpgroup's next wgmma. */
static __device__ __forceinline__ void mf_wg_fence(void) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void mf_wg_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed wgmma groups of this warpgroup are pending. */
template <int N>
static __device__ __forceinline__ void mf_wg_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving reads or writes of d across a wgmma wait/issue: the
 * registers a pending wgmma writes are not operands of the wait instruction. */
template <int R>
static __device__ __forceinline__ void mf_wg_pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async after its
 * wait) visible to the async proxy that wgmma reads through; then a barrier. */
static __device__ __forceinline__ void mf_fence_proxy_async(void) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Accumulator layout (n = 64 or 128; the same as mma.sync's m16n8 C fragments): thread
 * 32·w + l of the warpgroup holds d[4i + 0, 1] = (row 16·w + l/4, columns 8·i + 2·(l%4) + 0, 1)
 * and d[4i + 2, 3] = (row 16·w + l/4 + 8, the same columns), i = 0 .. n/8 − 1. */
/* Byte offset, in a 64-row × 64-column bf16 block of the swizzled layout above, of this
 * thread's fragment pair (row 16·warp + lane/4 + 8·hh, columns 8i + 2·(lane % 4) + 0, 1)
 * of an n64 accumulator (the layout below): 4 conflict-free bytes per lane. */
static __device__ __forceinline__ uint32_t mf_frag_off(int warp, int lane, int hh, int i) {
  return mf_sw128_chunk(16 * warp + (lane >> 2) + 8 * hh, i) + 4 * (lane & 3);
}
/* All 16 of this thread's fragment pairs from two such blocks, every load issued before
 * any use (the epilogues then store in place, which would otherwise order each pair's
 * loads after the previous pair's generic stores). */
static __device__ __forceinline__ void mf_frag_load2(uint32_t (&a)[2][8], uint32_t (&b)[2][8],
                                                     const unsigned char *ba, const unsigned char *bb,
                                                     int warp, int lane) {
#pragma unroll
  for (int hh = 0; hh < 2; hh++)
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const uint32_t off = mf_frag_off(warp, lane, hh, i);
      a[hh][i] = *(const uint32_t *)(ba + off);
      b[hh][i] = *(const uint32_t *)(bb + off);
    }
}
/* The named barrier of warpgroup wg's 128 threads (barrier 1 + wg; 0 is __syncthreads). */
static __device__ __forceinline__ void mf_bar_wg(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

/* d (64 × 64 fp32, the warpgroup's fragments) (+)= A·B, A (64 × 16) and B (16 × 64) in
 * shared memory (descriptors); B is K-major (TB = 0: B stored as 64 rows of k) or
 * MN-major (TB = 1: 16 rows of 64 n); A is K-major (TA = 0) or MN-major (TA = 1: 16 rows
 * of 64 m, mf_wg_desc_mn); acc = 0 overwrites d. */
template <int TB = 0, int TA = 0>
static __device__ __forceinline__ void mf_wg_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %36, %35;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(acc), "n"(TB), "n"(TA));
}
/* The same with A from registers: a = the m64k16 A fragment (4 × bf16x2, mma.sync's
 * m16k16 layout for the thread's warp's 16 rows). */
template <int TB = 0>
static __device__ __forceinline__ void mf_wg_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}

/* d (64 × 32 fp32) (+)= A·B with A from registers (as mf_wg_rs_n64) and B (16 × 32) in
 * shared memory, K-major (TB = 0) or MN-major (TB = 1). */
template <int TB = 0>
static __device__ __forceinline__ void mf_wg_rs_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}

/* d (64 × 32 fp32) (+)= A·B with both operands MN-major in shared memory (as
 * mf_wg_ss_n64_tt). */
static __device__ __forceinline__ void mf_wg_ss_n32_tt(float (&d)[16], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(acc));
}

/* d (64 × 128 fp32, the warpgroup's fragments) (+)= A·B, A (64 × 16) and B (16 × 128) in
 * shared memory (descriptors); B is K-major (TB = 0: B stored as 128 rows of k) or
 * MN-major (TB = 1: 16 rows of 128 n); A is K-major (TA = 0) or MN-major (TA = 1: 16 rows
 * of 64 m, mf_wg_desc_mn); acc = 0 overwrites d. */
template <int TB = 0, int TA = 0>
static __device__ __forceinline__ void mf_wg_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %68, %67;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(acc), "n"(TB), "n"(TA));
}
/* The same with A from registers: a = the m64k16 A fragment (4 × bf16x2, mma.sync's
 * m16k16 layout for the thread's warp's 16 rows). */
template <int TB = 0>
static __device__ __forceinline__ void mf_wg_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}
/* d (+)= A·B with both operands MN-major in shared memory (trans-a = trans-b = 1):
 * A (64 M × 16 K) and B (16 K × N) described by mf_wg_desc_mn; the accumulator layout is
 * the one above. */
static __device__ __forceinline__ void mf_wg_ss_n64_tt(float (&d)[32], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(acc));
}
static __device__ __forceinline__ void mf_wg_ss_n128_tt(float (&d)[64], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(acc));
}
/* m64n136k16 with both operands MN-major (as mf_wg_ss_n128_tt): 128 columns and one more
 * 8-column group, which transition_bwd_cl.cu uses for per-row factors beside a tile. */
static __device__ __forceinline__ void mf_wg_ss_n136_tt(float (&d)[68], uint64_t da, uint64_t db, int acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}, %68, %69, p, 1, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
      : "l"(da), "l"(db), "r"(acc));
}
#endif
