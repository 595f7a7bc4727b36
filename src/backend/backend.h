#pragma once
// The compute interface. Model code and the KV module call only these
// operations, on tensors that live on the backend's device (the workspace,
// upload, prepared weights, KV arenas); a backend never reads another
// backend's memory. The CPU backend (backend/cpu) is the reference that
// other backends must agree with; make_backend (backend/factory) builds one
// from BackendOptions.
//
// Batch invariance: every operation computes each output row (token) from
// that row's inputs alone, in one fixed reduction order, so a token's result
// does not depend on how many other tokens share the call or where they sit.
// Attention reduces a query's keys in fixed-size splits at fixed multiples
// along its row's own positions (the CPU: one split per KV block; the CUDA
// backend's tensor-core precision: 64 positions), merged in increasing order.
// The fused operations below (add_rms_norm, rms_norm_rope, matmul_each,
// rms_norm_matmul_each) compute the bits of the separate calls they stand
// for; their defaults here are those calls.
//
// Errors: a bad argument (shape, dtype, device, an index out of range)
// throws rowlm::Error naming the operation before anything is written.
//
// Threads: one caller at a time per backend.
//
// Between backends (tensor parallelism's shards): a backend reads another's
// memory only through copy_from_backend, after a mark_work of the other.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/thread_pool.h"
#include <string>
#include <string_view>
#include <vector>

#include "backend/kv_storage.h"
#include "backend/row_sampling.h"
#include "backend/weight.h"
#include "backend/workspace.h"
#include "core/error.h"
#include "core/tensor.h"
#include "rowlm/backend_options.h"

namespace rowlm {

enum class NormKind {
  Plain,    // y = x̂ · w        (Gemma 3n/4, Llama, Qwen)
  OnePlus,  // y = x̂ · (1 + w)  (Gemma 1-3)
  NoScale,  // y = x̂            (w ignored)
};

// The activation of a gated MLP: out = act(gate) ⊙ up.
enum class Activation {
  GeluTanh,  // PyTorch gelu(approximate="tanh") (Gemma)
  Silu,      // x · sigmoid(x) (Llama, Qwen, Mistral)
};
std::string_view activation_name(Activation a);

// A layer type's RoPE frequencies, prepared by a backend. reserve(n) makes
// positions [0, n) usable; the model calls it once per step, before the
// layers, with one past the step's largest position (a backend that
// tabulates cos and sin grows its table there, never inside a step).
class RopeTable {
 public:
  virtual ~RopeTable() = default;
  virtual int head_dim() const = 0;
  virtual void reserve(int64_t positions) = 0;
};

// A point in the work a backend has issued (Backend::mark_work): another
// backend's copy_from_backend waits for it before it reads memory that
// work wrote. A CUDA backend's is an event recorded on its stream.
class WorkMark {
 public:
  virtual ~WorkMark() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // e.g. "cpu (avx512, 16 threads)"
  virtual Device device() const = 0;
  virtual MatmulPrecision matmul_precision() const = 0;
  virtual int host_threads() const = 0;

  // Ceilings, measured now on this backend's device (for benchmarks that
  // judge a kernel against the hardware in the same run; each takes about a
  // second): read bandwidth in GB/s streaming `bytes`, and the multiply-add
  // peak in GFLOP/s of the arithmetic a matmul runs at `precision` (for
  // Int8, integer Gop/s, or 0 where the backend has no native integer dot
  // product and runs its portable kernels).
  virtual double measure_read_bandwidth(std::size_t bytes = std::size_t(1) << 30, int repeats = 3) = 0;
  virtual double measure_matmul_peak(MatmulPrecision precision, int repeats = 3) = 0;

  // --- Deferred launches --------------------------------------------------
  // Between begin_deferred() and end_deferred() a backend may hold its
  // launches back and issue them together: the CUDA backend replays a
  // sequence it has seen before as one CUDA graph (cuda/launch_queue.h).
  // Results are the same bits either way. Whatever reads results on the
  // host (copy_to_host) or frees memory first issues what is held.
  // end_deferred(true) issues the rest; end_deferred(false) drops it (a step
  // abandoned by an error, whose writes are discarded anyway). Windows nest;
  // DeferredLaunches below is the scope that opens one.
  virtual void begin_deferred() {}
  virtual void end_deferred(bool issue) { (void)issue; }
  struct LaunchStats {
    int64_t sequences = 0;  // held sequences issued
    int64_t captured = 0;   // of which captured into a new graph
    int64_t replayed = 0;   // of which replayed from a graph
    int64_t launches = 0;   // launches in all of them
  };
  virtual LaunchStats launch_stats() const { return {}; }
  // The host thread pool's narrowing (core/thread_pool.h: regions, stalls,
  // regions run on fewer threads): a benchmark whose regions were often
  // narrowed had cores taken by something else. Zeros without a pool.
  virtual ThreadPool::Stats host_pool_stats() const { return {}; }

  // --- Profiling ----------------------------------------------------------
  // While on, a backend that can times each operation and sums the time per
  // operation name (the CUDA backend: device time of each launch; the CPU
  // backend: wall time of each operation, its worker threads included);
  // profile() lists the sums since profiling was turned on or cleared.
  // Results are unchanged; the speed is not (the CUDA backend issues every
  // launch on its own to time it). A backend that cannot time returns an
  // empty profile.
  struct OpProfile {
    std::string op;
    int64_t launches = 0;
    double seconds = 0;  // device time
  };
  virtual void set_profiling(bool on) { (void)on; }
  virtual std::vector<OpProfile> profile() const { return {}; }
  virtual void clear_profile() {}

  // --- Memory -------------------------------------------------------------
  // Bytes of the device's memory free now (the host's MemAvailable for the
  // CPU; 0 if unknown): what default KV budgets are sized from.
  virtual std::size_t available_memory() const = 0;
  // The scratch of the step in progress (workspace.h).
  virtual Workspace& workspace() = 0;
  // A copy of a host tensor resident on this device, owned by the result
  // (the CPU backend returns the tensor itself).
  virtual Tensor upload(const Tensor& host) = 0;
  // dst.nbytes() bytes from host memory into dst (a tensor on this device).
  virtual void copy_from_host(const void* src, Tensor& dst) = 0;
  // src (a tensor on this device) into src.nbytes() bytes of host memory.
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;
  // --- Between backends (tensor parallelism) -----------------------------
  // Whether copy_from_backend can read `from`'s tensors: by default both in
  // host memory (CPU backends); the CUDA backend reads other CUDA backends'
  // (the same GPU or another). A mix of host and device memory is not
  // copied (a model's shards are refused one at set-up).
  virtual bool reads_from(const Backend& from) const {
    return device().is_host() && from.device().is_host();
  }
  // A mark of the work issued on this backend so far (held launches are
  // issued first): what copy_from_backend then waits for. Null where every
  // operation has finished when it returns (the CPU backend). Called on
  // this backend's caller.
  virtual std::shared_ptr<const WorkMark> mark_work() { return nullptr; }
  // dst (this backend's) = src (a tensor of `from`, of dst's byte size),
  // exact bytes, once `after` (from's mark_work, taken after src was
  // written; null for a host backend) is reached. Called on this backend's
  // caller; `from` itself is not called (its caller may be busy with work
  // that does not write src), only src's memory read. The read is ordered
  // before this backend's later work and may still be in flight when this
  // returns (a GPU copies on its stream): `from` must neither write nor
  // free src until this backend's work up to here is done (the caller sees
  // to it, e.g. `from` waits for a later mark of this backend). An Error if
  // !reads_from(from) or the sizes differ. The default: a host copy.
  virtual void copy_from_backend(const Backend& from, const Tensor& src, const WorkMark* after, Tensor& dst) {
    (void)after;
    if (!reads_from(from))
      throw Error("copy_from_backend: " + name() + " does not read tensors of " + from.name());
    if (src.nbytes() != dst.nbytes())
      throw Error("copy_from_backend: " + std::to_string(src.nbytes()) + " bytes into " +
                  std::to_string(dst.nbytes()));
    copy_from_host(src.raw(), dst);
  }
  // A host tensor (uninitialized) for what copy_to_host reads back each step,
  // such as logits: a GPU backend returns page-locked memory, which the copy
  // fills at the bus's speed (a fresh pageable buffer is faulted in page by
  // page and staged by the driver: E2B's batch-256 step on an H200 took 229
  // ms with its 268 MB of logits copied so, 37 ms into pinned memory), and
  // reuses a buffer once every Tensor holding it is gone. The CPU backend returns plain memory.
  // Threads: the tensor may be dropped on any thread.
  virtual Tensor host_output(DType dtype, Shape shape) { return Tensor::uninitialized(dtype, std::move(shape)); }
  // Makes a checkpoint matrix (a host view) usable by matmul and embed:
  // validates it and, as the backend needs, uploads or repacks it. The
  // result is what the model keeps; the source may then be dropped.
  virtual Weight prepare_weight(const Weight& source) = 0;
  // RoPE frequencies (head_dim / 2 entries; an entry 0 leaves its pair
  // unchanged: proportional RoPE) in the form rope() needs on this device.
  virtual std::unique_ptr<RopeTable> make_rope_table(std::span<const float> inv_freq) = 0;
  // Storage for one KV layer's blocks (kv_storage.h).
  virtual std::unique_ptr<KvArena> make_kv_arena(const kv::LayerSpec& spec, int block_size) = 0;

  // --- Dense operations ---------------------------------------------------
  // y[m, n] = Σ_k x[m, k] · w[n, k].  x: [M, K] f32; y: [M, N] f32, separate
  // from x. Under MatmulPrecision::Bf16, x is first rounded to bf16 where w
  // is bf16.
  virtual void matmul(const Tensor& x, const Weight& w, Tensor& y) = 0;
  // matmul_each(rms_norm(x), w, y) where the normed x has no other use: the
  // same bits. A backend whose tensor-core matmul reads bf16 activations (the
  // CUDA backend) writes the norm rounded to bf16 straight from the norm's
  // kernel: one launch and half the bytes fewer.
  virtual void rms_norm_matmul_each(const Tensor& x, const Tensor* norm_weight, float eps, NormKind kind,
                                    std::span<const Weight* const> w, std::span<Tensor* const> y) {
    Tensor normed = workspace().tensor(DType::F32, x.shape());
    rms_norm(x, norm_weight, eps, kind, normed);
    matmul_each(normed, w, y);
  }
  // matmul(x, *w[i], *y[i]) for each i (w and y of one size): the same bits,
  // in one go where a backend can (the CUDA backend rounds x once and runs
  // one launch for up to four bf16 weights: q, k and v, gate and up).
  virtual void matmul_each(const Tensor& x, std::span<const Weight* const> w, std::span<Tensor* const> y) {
    for (std::size_t i = 0; i < w.size() && i < y.size(); ++i) matmul(x, *w[i], *y[i]);
  }
  // y[m, :] += bias (y [M, N] f32, bias [N] f32).
  virtual void add_bias(Tensor& y, const Tensor& bias) = 0;
  // out[t, :] = table[ids[t], :] · scale; ids: [T] i32, out: [T, D] f32.
  virtual void embed(const Tensor& ids, const Weight& table, float scale, Tensor& out) = 0;
  // Row-wise RMS norm over the last dimension of x ([..., D] f32); w has D
  // entries (f32; ignored for NoScale). y may be x.
  virtual void rms_norm(const Tensor& x, const Tensor* w, float eps, NormKind kind, Tensor& y) = 0;
  // y += rms_norm(x) (the norm of a sublayer's output added to the residual
  // stream), then y ·= then_scale unless it is 1 (a layer's closing scalar):
  // the bits of rms_norm into a temporary, add, then scale. x is left as it
  // is; y has x's shape and is separate from it. One kernel on the GPU.
  virtual void add_rms_norm(Tensor& y, const Tensor& x, const Tensor* w, float eps, NormKind kind,
                            float then_scale = 1.0f) {
    Tensor normed = workspace().tensor(DType::F32, x.shape());
    rms_norm(x, w, eps, kind, normed);
    add(y, normed);
    if (then_scale != 1.0f) scale(y, then_scale);
  }
  // In-place rotate-half RoPE of x viewed as [T, heads, head_dim]: pair k
  // rotates dims (k, k + head_dim/2) by the angle positions[t] · inv_freq[k]
  // (formed in f32, as transformers does; cos and sin in f32). positions:
  // [T] i32, non-negative and below what the table reserved.
  virtual void rope(Tensor& x, const Tensor& positions, RopeTable& table) = 0;
  // rms_norm of each head of x ([T, heads·head_dim] or [T, heads, head_dim];
  // w has head_dim entries), then rope, in place: the bits of the two calls
  // (the q/k norms of Gemma 3/4 and Qwen 3). One kernel on the GPU.
  virtual void rms_norm_rope(Tensor& x, const Tensor* w, float eps, NormKind kind, const Tensor& positions,
                             RopeTable& table) {
    const int64_t hd = table.head_dim();
    Tensor heads = x.reshaped({x.numel() / hd, hd});
    rms_norm(heads, w, eps, kind, heads);
    rope(x, positions, table);
  }
  // out = act(gate) ⊙ up, elementwise; all [M, I] f32. out may alias gate.
  virtual void gated_activation(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) = 0;
  // matmul(act(gate) ⊙ up, w, y) where the gated product has no other use
  // (gate's contents are left unspecified): the same bits. A backend whose
  // tensor-core matmul reads bf16 activations (the CUDA backend) writes the
  // product rounded to bf16 straight from the activation's kernel.
  virtual void gated_matmul(Tensor& gate, const Tensor& up, Activation act, const Weight& w, Tensor& y) {
    gated_activation(gate, up, act, gate);
    matmul(gate, w, y);
  }
  // dst = src (same dtype and element count; no overlap).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void add(Tensor& y, const Tensor& x) = 0;  // y += x (same shape)
  virtual void scale(Tensor& y, float s) = 0;        // y *= s
  virtual void softcap(Tensor& y, float cap) = 0;    // y = cap · tanh(y / cap)
  // dst[i, :] = src[rows[i], :]; rows: [n] i32.
  virtual void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) = 0;
  // dst[rows[i], :] += weights[i] · src[i, :], applied in order of i.
  virtual void scatter_add_rows(Tensor& dst, const Tensor& rows, const Tensor& weights, const Tensor& src) = 0;
  // codes[i] = the argmax code (argmax_code.h) of row i of x: x [n, V] f32
  // with 0 < V <= argmax_code::kMaxRow, codes [n] i32. The greedy rows of a
  // step need no more of their logits.
  virtual void argmax_rows(const Tensor& x, Tensor& codes) = 0;
  // Samples rows of x ([n, V] f32; a sampled row's contents are left
  // unspecified) where they lie, as row_sampling.h defines (the
  // token sampling::Sampler::sample gives): tokens[j] ([rows.size()] i32)
  // for rows[j], and for a row asking for logprobs its RowLogprobStats at
  // stats[j] (a u8 tensor of rows.size() of them; needed only then).
  // `edits` holds the rows' edit lists, `masks` their grammar masks. A row
  // that holds NaN or +inf, or no finite entry, where its mask leaves it,
  // gets its argmax code (< 0) for a token. A row with a draft verifies it
  // (row_sampling.h: the verdict of sampling::verify_draft_token), so a
  // speculative row's logits need not cross either. The default is an Error
  // (samples_rows() false): the CPU backend made without the host's row
  // sampler (make_cpu_backend; make_backend hands it one).
  virtual bool samples_rows() const { return false; }
  virtual void sample_rows(Tensor& x, std::span<const RowSampling> rows, std::span<const RowSamplingEdit> edits,
                           std::span<const uint64_t> masks, Tensor& tokens, Tensor* stats) {
    (void)x, (void)rows, (void)edits, (void)masks, (void)tokens, (void)stats;
    throw Error("sample_rows: " + name() + " leaves its logits rows to the host's sampler");
  }

  // --- Mixture of experts -------------------------------------------------
  // For each row of logits ([T, E] f32): softmax in f32, the top_k experts
  // by probability (ties to the lower index), with renormalize their
  // probabilities divided by the k's sum, times per_expert_scale[e] if
  // given. experts: [T, top_k] i32 and weights: [T, top_k] f32, in order of
  // descending probability. NaN logits are an Error.
  virtual void moe_route(const Tensor& logits, int top_k, bool renormalize, const Tensor* per_expert_scale,
                         Tensor& experts, Tensor& weights) = 0;
  // out[t] = Σ_j weights[t, j] · expert_{experts[t, j]}(x[t]), each expert
  // a gated MLP of `bank` with `act`, contributions added in increasing
  // expert order (so a token's sum does not depend on the other tokens).
  // x, out: [T, H] f32.
  virtual void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const ExpertBank& bank,
                           Activation act, Tensor& out) = 0;

  // --- KV bytes (kv_storage.h) --------------------------------------------
  // Encodes token t's K and V (rows of [T, kv_heads · head_dim] f32) with
  // the arena's codec into slots[t].
  virtual void kv_write(KvArena& arena, std::span<const int64_t> slots, const Tensor& k, const Tensor& v) = 0;
  virtual void kv_copy_blocks(KvArena& arena, std::span<const KvBlockCopy> copies) = 0;
  // Canonical token records (kvcodec/codec.h) of `slots`, in host memory:
  // records.size() == slots.size() · token_record_bytes(arena.spec()).
  virtual void kv_read(const KvArena& arena, std::span<const int64_t> slots, std::span<std::byte> records) = 0;
  virtual void kv_store(KvArena& arena, std::span<const int64_t> slots, std::span<const std::byte> records) = 0;
  // out[t] = attention of q[t] ([T, num_heads, head_dim] f32, already
  // rotated) over the keys batch.queries[t] names, read from `arena`; out
  // has q's shape and is separate from it.
  virtual void attention(const Tensor& q, const KvArena& arena, const AttentionBatch& batch,
                         const AttentionParams& params, Tensor& out) = 0;
};

// A deferred-launch window for one scope: issue() at the end of the work
// (it may throw what a held launch reports); leaving the scope without it
// (an exception) drops what is held.
class DeferredLaunches {
 public:
  explicit DeferredLaunches(Backend& backend) : backend_(&backend) { backend.begin_deferred(); }
  ~DeferredLaunches() {
    if (backend_ != nullptr) backend_->end_deferred(false);
  }
  DeferredLaunches(const DeferredLaunches&) = delete;
  DeferredLaunches& operator=(const DeferredLaunches&) = delete;
  void issue() {
    Backend* b = backend_;
    backend_ = nullptr;
    b->end_deferred(true);
  }

 private:
  Backend* backend_;
};

}  // namespace rowlm
