#pragma once
// PTX wrappers for the warp-level tensor-core path (sm_80 and later), shared
// by the mma.sync GEMM tiles (gemm_bf16.cu) and the tensor-core attention
// (attention_mma.cu).

#include <cstdint>

namespace rowlm::cuda {

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared, asynchronously; `valid == false` writes zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid = true) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(const void* p, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_address(p)));
}
// The same, each matrix transposed: lane 4g + t receives rows 2t and 2t + 1
// of column g.
__device__ __forceinline__ void ldmatrix_x4_trans(const void* p, unsigned& r0, unsigned& r1, unsigned& r2,
                                                  unsigned& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_address(p)));
}

// d = a · b + d for one 16×8 tile over 16 k (bf16 in, f32 accumulate).
// Fragments (lane = 4g + t): a0 (row g, k 2t..2t+1), a1 (row g + 8, same k),
// a2 (row g, k 2t+8..), a3 (row g + 8, k 2t+8..); b0 (k 2t..2t+1, column
// g), b1 (k 2t+8..); d0, d1 (row g, columns 2t, 2t+1), d2, d3 (row g + 8).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace rowlm::cuda
