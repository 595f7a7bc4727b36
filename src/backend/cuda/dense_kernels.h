#pragma once
// Launchers of the CUDA backend's dense kernels (dense_kernels.cu). Each
// computes what the CPU backend's kernel of the same name computes, in the
// same order of IEEE operations, so the two agree bit for bit (tested in
// cuda_backend_test.cc). All pointers are device pointers; all launches are
// asynchronous on `stream`. The callers (cuda_backend.cu) validate shapes.

#include <cuda_runtime.h>

#include <cstdint>

namespace rowlm::cuda {

// How a weight is stored: f32, bf16 or f16.
enum class Storage : int { F32, BF16, F16 };

// A [rows, cols] weight as the f32 kernels read it: dense elements in
// `storage`, or MLX affine codes (backend/weight.h: bits 2-8, each row one
// little-endian bit stream in u32 words, or in another code order: `order`)
// with a scale and a bias per group
// of `group_size` columns in `storage`, each element dequantized as it is
// read: scale · code + bias in f32, two roundings (quant::dequantize's
// operations), so a kernel computes on it what it computes on the
// dequantized dense matrix, bit for bit. 32-bit fields after the pointers
// and no padding bytes (the launch queue keys launches by their bytes).
struct WeightRef {
  const void* values = nullptr;  // dense elements, or the code words
  const void* scales = nullptr;  // affine only
  const void* biases = nullptr;  // affine only
  int64_t cols = 0;
  Storage storage = Storage::F32;
  int32_t bits = 0;  // 0: dense
  int32_t group_size = 0;
  int32_t order = 0;  // affine only: kStreamOrder, kLanes16Order or kMma16Order
};
// WeightRef::order: CodeOrder::Stream, Lanes16 (4 or 8 bits), Mma16 (4, 5, 6 or 8 bits).
inline constexpr int32_t kStreamOrder = 0, kLanes16Order = 1, kMma16Order = 2;

// y[m, n] = Σ_k x[m, k] · w[n, k] in the CPU's canonical order: 16 lanes,
// lane j FMA-accumulating k ≡ j (mod 16) in increasing k over K rounded up
// to 16 (zeros beyond K), then the tree (j, j+8), (j, j+4), (j, j+2), (j, j+1).
// w: [N, K].
void matmul_f32(const float* x, const WeightRef& w, float* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream);
// Stream-order codes [rows, cols · bits / 32] words rewritten in
// CodeOrder::Lanes16 (bits 4 or 8, cols a multiple of 16 · 32 / bits).
void affine_lanes16_from_stream(const uint32_t* stream_words, uint32_t* lanes_words, int64_t rows, int64_t cols,
                                int bits, cudaStream_t stream);
// x rounded to bf16, nearest even, element by element.
void round_to_bf16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream);

void add_bias(float* y, const float* bias, int64_t M, int64_t N, cudaStream_t stream);
// Index arguments are checked in the kernels: an index outside [0, bound)
// reads nothing and sets *error to the operation's code (first one wins),
// which the backend reads at its next synchronisation.
enum ErrorCode : int { kNoError = 0, kEmbedIndex = 1, kGatherIndex = 2, kScatterIndex = 3, kRopePosition = 4 };

// out[t, d] = table[ids[t], d] · scale; table: [V, D].
void embed(const int32_t* ids, int64_t T, const WeightRef& table, int64_t V, int64_t D, float scale, float* out,
           int* error, cudaStream_t stream);
// norm: 0 plain, 1 one-plus, 2 no scale (w may be null then).
void rms_norm(const float* x, const void* w, Storage ws, int norm, float eps, float* y, int64_t rows, int64_t D,
              cudaStream_t stream);
// Whether a row of D features fits the norm kernels that stage a row in
// shared memory (D ≤ 12,288): rms_norm_bf16 and rms_norm_rope need them.
bool staged_norm_fits(int64_t D);
// rms_norm's output rounded to bf16 (nearest even, as round_to_bf16): the
// tensor-core matmul's input.
void rms_norm_bf16(const float* x, const void* w, Storage ws, int norm, float eps, uint16_t* y, int64_t rows, int64_t D,
                   cudaStream_t stream);
// rms_norm of each head of x [T, heads, 2·half] (w has 2·half entries), then
// rope, in place, in one kernel: the bits of the two launches.
void rms_norm_rope(float* x, const void* w, Storage ws, int norm, float eps, const int32_t* positions, int64_t T,
                   int64_t heads, int64_t half, const float* cos_sin, int64_t reserved, int* error,
                   cudaStream_t stream);
// y += rms_norm(x) (x unchanged; y separate from x): the norm's value, then
// the add, each rounded as rms_norm and add round them; then y ·= then_scale
// (rounded as scale rounds it) unless then_scale is 1.
void add_rms_norm(float* y, const float* x, const void* w, Storage ws, int norm, float eps, int64_t rows, int64_t D,
                  float then_scale, cudaStream_t stream);
// cos_sin: [positions][2][half] (cos first), from the host's std::cos/std::sin.
void rope(float* x, const int32_t* positions, int64_t T, int64_t heads, int64_t half, const float* cos_sin,
          int64_t reserved, int* error, cudaStream_t stream);
// act: 0 gelu_tanh, 1 silu. out may alias gate or up.
void gated_activation(const float* gate, const float* up, int act, float* out, int64_t n, cudaStream_t stream);
// gated_activation's value rounded to bf16 (as round_to_bf16 rounds it): the
// activations of a tensor-core matmul.
void gated_activation_bf16(const float* gate, const float* up, int act, uint16_t* out, int64_t n,
                           cudaStream_t stream);
void add(float* y, const float* x, int64_t n, cudaStream_t stream);
void scale(float* y, float s, int64_t n, cudaStream_t stream);
void softcap(float* y, float cap, int64_t n, cudaStream_t stream);
// dst[i, :] = src[rows[i], :], rows of `row_bytes` bytes.
void gather_rows(const void* src, const int32_t* rows, int64_t n, int64_t row_bytes, int64_t bound, void* dst,
                 int* error, cudaStream_t stream);
// codes[r] = the argmax code (backend/argmax_code.h) of row r of x [n, V]
// (larger value, then lower index; the first NaN or +inf by index): blocks
// over slices of each row, then a merge per row, through `workspace` (at
// least argmax_rows_workspace_bytes, 16-byte aligned). Any slicing gives the
// same code.
std::size_t argmax_rows_workspace_bytes(int64_t n, int64_t V);
void argmax_rows(const float* x, int64_t n, int64_t V, int32_t* codes, void* workspace, cudaStream_t stream);
// dst[rows[i], :] += weights[i] · src[i, :] in order of i, for every column.
void scatter_add_rows(float* dst, const int32_t* rows, const float* weights, const float* src, int64_t n, int64_t D,
                      int64_t bound, int* error, cudaStream_t stream);

// Ceiling probes: `bytes` read with 16-byte loads (returns nothing useful;
// the kernel's time is what matters), and FMA chains (flops returned).
void stream_read(const void* data, std::size_t bytes, float* sink, cudaStream_t stream);
double fma_chains(int64_t iters, float* sink, int sms, cudaStream_t stream);

}  // namespace rowlm::cuda
