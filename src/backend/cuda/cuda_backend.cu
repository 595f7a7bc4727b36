#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/argmax_code.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dense_kernels.h"
#include "backend/cuda/gemm_affine.h"
#include "backend/cuda/gemm_bf16.h"
#include "backend/cuda/kv_kernels.h"
#include "backend/cuda/launch_queue.h"
#include "backend/cuda/pinned_output_pool.h"
#include "backend/cuda/sampling_kernels.h"
#include "backend/kv_block_layout.h"
#include "backend/kv_checks.h"
#include "backend/moe_routing.h"
#include "backend/rope_angles.h"
#include "core/error.h"
#include "quant/affine.h"

namespace rowlm {
namespace {

using cuda::Storage;

#define ROWLM_REQUIRE(ok, message) \
  do {                             \
    if (!(ok)) throw Error(message); \
  } while (false)

using cuda::check;
using cuda::DeviceGuard;
using cuda::LaunchQueue;
using cuda::PinnedOutputPool;

// Device memory owned by the returned pointer (freed on `device`). Its
// free is counted in `released`: the launch queue's graphs may hold it
// (launch_queue.h).
std::shared_ptr<void> device_alloc(int device, std::size_t bytes, const char* what,
                                   const LaunchQueue::ReleaseCounter& released) {
  void* p = nullptr;
  if (bytes > 0) check(cudaMalloc(&p, bytes), what);
  return std::shared_ptr<void>(p, [device, released](void* q) {
    if (q == nullptr) return;
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaFree(q);
    cudaSetDevice(previous);
    released->fetch_add(1, std::memory_order_release);
  });
}

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) + " on " + t.device().name();
}

bool is_float_storage(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

Storage storage_of(DType t) {
  return t == DType::BF16 ? Storage::BF16 : t == DType::F16 ? Storage::F16 : Storage::F32;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* a0 = static_cast<const std::byte*>(a.raw());
  const auto* b0 = static_cast<const std::byte*>(b.raw());
  if (a0 == nullptr || b0 == nullptr || a.nbytes() == 0 || b.nbytes() == 0) return false;
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// The RoPE cos/sin of positions [0, reserved), [position][cos half, sin half],
// computed on the host by rope_angles (the CPU's arithmetic) and uploaded.
class CudaRopeTable final : public RopeTable {
 public:
  CudaRopeTable(int device, cudaStream_t stream, LaunchQueue& queue, std::vector<float> inv_freq)
      : device_(device), stream_(stream), queue_(queue), inv_freq_(std::move(inv_freq)) {}
  int head_dim() const override { return int(2 * inv_freq_.size()); }
  void reserve(int64_t positions) override {
    if (positions <= reserved_) return;
    // Held launches may read the table: they go first (the old table may be freed below).
    queue_.submit();
    const int64_t half = int64_t(inv_freq_.size());
    int64_t capacity = std::max<int64_t>(capacity_, 1024);
    while (capacity < positions) capacity *= 2;
    // The whole capacity is tabulated at once: the rope launches' bound (an
    // argument) then changes only when the table doubles, so decode steps
    // repeat one launch sequence (launch_queue.h).
    positions = capacity;
    DeviceGuard guard(device_);
    if (capacity > capacity_) {
      auto grown = device_alloc(device_, std::size_t(capacity * 2 * half) * sizeof(float), "RoPE table", queue_.released());
      if (reserved_ > 0)
        check(cudaMemcpyAsync(grown.get(), table_.get(), std::size_t(reserved_ * 2 * half) * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream_),
              "RoPE table copy");
      check(cudaStreamSynchronize(stream_), "RoPE table copy");
      table_ = std::move(grown);
      capacity_ = capacity;
    }
    std::vector<float> host(std::size_t((positions - reserved_) * 2 * half));
    for (int64_t p = reserved_; p < positions; ++p) {
      float* row = host.data() + (p - reserved_) * 2 * half;
      rope_angles(inv_freq_.data(), half, p, row, row + half);
    }
    // On the stream, so the kernels that read the new rows come after it.
    check(cudaMemcpyAsync(static_cast<float*>(table_.get()) + reserved_ * 2 * half, host.data(),
                          host.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "RoPE table upload");
    check(cudaStreamSynchronize(stream_), "RoPE table upload");
    reserved_ = positions;
  }
  int64_t reserved() const { return reserved_; }
  const float* table() const { return static_cast<const float*>(table_.get()); }

 private:
  int device_;
  cudaStream_t stream_;
  LaunchQueue& queue_;
  std::vector<float> inv_freq_;
  std::shared_ptr<void> table_;
  int64_t capacity_ = 0, reserved_ = 0;
};

// One storage layer's blocks in device memory, in chunks that never move;
// a device array of the chunks' addresses (the table) lets kernels find
// block b. A chunk whose blocks are all free can be given back
// (release_free_blocks): its table entry becomes null until reclaim() of one
// of its blocks allocates it again, in place in the same table, so launches
// and graphs recorded against the table stay valid.
class CudaKvArena final : public KvArena {
 public:
  CudaKvArena(int device, cudaStream_t stream, LaunchQueue& queue, const kv::LayerSpec& spec, int block_size)
      : device_(device), stream_(stream), queue_(queue), spec_(spec), layout_(spec, block_size) {
    chunk_blocks_ = std::clamp<int64_t>((int64_t(64) << 20) / int64_t(std::max<std::size_t>(layout_.block_bytes, 1)), 1, 256);
  }
  const kv::LayerSpec& spec() const override { return spec_; }
  int block_size() const override { return layout_.block_size; }
  std::size_t block_bytes() const override { return layout_.block_bytes; }
  int64_t blocks() const override { return blocks_; }
  void grow(int64_t count) override {
    if (count <= blocks_) return;
    DeviceGuard guard(device_);
    std::vector<std::shared_ptr<void>> added;
    while (int64_t(chunks_.size() + added.size()) * chunk_blocks_ < count)
      added.push_back(device_alloc(device_, chunk_bytes(), "KV arena", queue_.released()));
    if (!added.empty()) {
      // Held launches read the old chunk table, which is replaced below.
      queue_.submit();
      std::vector<uint8_t*> addresses = addresses_;
      for (auto& c : added) addresses.push_back(static_cast<uint8_t*>(c.get()));
      auto table = device_alloc(device_, addresses.size() * sizeof(uint8_t*), "KV arena table", queue_.released());
      write_table(table.get(), addresses);
      for (auto& c : added) chunks_.push_back(std::move(c));
      addresses_ = std::move(addresses);
      table_ = std::move(table);
    }
    blocks_ = count;
  }

  std::size_t release_free_blocks(std::span<const int32_t> free_blocks) override {
    std::vector<int64_t> free_in_chunk(chunks_.size(), 0);
    for (int32_t id : free_blocks) {
      ROWLM_CHECK(id >= 0 && id < blocks_, "release_free_blocks: no such block");
      ++free_in_chunk[std::size_t(id / chunk_blocks_)];
    }
    std::vector<std::size_t> whole;  // present chunks none of whose blocks is held
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      const int64_t existing = std::min(blocks_ - int64_t(c) * chunk_blocks_, chunk_blocks_);
      if (chunks_[c] && free_in_chunk[c] == existing) whole.push_back(c);
    }
    if (whole.empty()) return 0;
    DeviceGuard guard(device_);
    queue_.submit();
    std::vector<uint8_t*> addresses = addresses_;
    for (std::size_t c : whole) addresses[c] = nullptr;
    write_table(table_.get(), addresses);  // synchronises: nothing reads the chunks after this
    addresses_ = std::move(addresses);
    for (std::size_t c : whole) chunks_[c].reset();  // cudaFree: the memory goes back to the driver
    released_chunks_ += int64_t(whole.size());
    return whole.size() * chunk_bytes();
  }

  void reclaim(int32_t block) override {
    if (released_chunks_ == 0) return;
    ROWLM_CHECK(block >= 0 && block < blocks_, "reclaim: no such block");
    const std::size_t c = std::size_t(block / chunk_blocks_);
    if (chunks_[c]) return;
    DeviceGuard guard(device_);
    std::shared_ptr<void> chunk = device_alloc(device_, chunk_bytes(), "KV arena", queue_.released());
    // Held launches read the table before this write (they never read a
    // null entry's blocks, which are free).
    queue_.submit();
    std::vector<uint8_t*> addresses = addresses_;
    addresses[c] = static_cast<uint8_t*>(chunk.get());
    write_table(table_.get(), addresses);
    addresses_ = std::move(addresses);
    chunks_[c] = std::move(chunk);
    released_chunks_ -= 1;
  }

  std::size_t resident_bytes() const override {
    return std::size_t(int64_t(chunks_.size()) - released_chunks_) * chunk_bytes();
  }

  // A clear error, rather than a fault in a kernel, for a block whose chunk
  // was given back (the KV books never name one; this guards their bugs).
  // Nothing to check, and no cost, while no chunk is given back.
  bool present(int32_t block) const { return released_chunks_ == 0 || chunks_[std::size_t(block / chunk_blocks_)]; }
  void require_present(int32_t block, const char* op) const {
    if (!present(block))
      throw Error(std::string(op) + ": block " + std::to_string(block) + " was given back and not reclaimed");
  }
  void require_present(std::span<const int64_t> slots, const char* op) const {
    if (released_chunks_ > 0)
      for (int64_t s : slots) require_present(int32_t(s / layout_.block_size), op);
  }

  cuda::KvBlocks device_blocks() const {
    return {static_cast<uint8_t* const*>(table_.get()), chunk_blocks_, int64_t(layout_.block_bytes)};
  }
  cuda::KvLayout kernel_layout() const {
    cuda::KvLayout k;
    const kv::HeadFormat& h = layout_.head;
    k.codec = int(h.codec);
    k.head_dim = h.head_dim;
    k.bits = h.bits;
    k.group_size = h.group_size;
    k.groups = h.groups;
    k.elem_bytes = h.elem_bytes;
    k.kv_heads = layout_.kv_heads;
    k.block_size = layout_.block_size;
    k.value_bytes = int64_t(h.value_bytes);
    k.head_bytes = int64_t(h.head_bytes);
    k.k_head_bytes = int64_t(layout_.k_head_bytes);
    k.k_bytes = int64_t(layout_.k_bytes);
    k.v_head_bytes = int64_t(layout_.v_head_bytes);
    k.block_bytes = int64_t(layout_.block_bytes);
    k.k_scales_offset = int64_t(layout_.k_scales_offset());
    k.k_biases_offset = int64_t(layout_.k_biases_offset());
    return k;
  }

 private:
  std::size_t chunk_bytes() const { return std::size_t(chunk_blocks_) * layout_.block_bytes; }
  void write_table(void* table, const std::vector<uint8_t*>& addresses) {
    check(cudaMemcpyAsync(table, addresses.data(), addresses.size() * sizeof(uint8_t*), cudaMemcpyHostToDevice, stream_),
          "KV arena table");
    check(cudaStreamSynchronize(stream_), "KV arena table");
  }

  int device_;
  cudaStream_t stream_;
  LaunchQueue& queue_;
  kv::LayerSpec spec_;
  KvBlockLayout layout_;
  int64_t chunk_blocks_ = 1;
  int64_t blocks_ = 0;
  std::vector<std::shared_ptr<void>> chunks_;  // null where given back
  int64_t released_chunks_ = 0;
  std::vector<uint8_t*> addresses_;
  std::shared_ptr<void> table_;
};

// Pinned host memory that host data is copied into before an asynchronous
// copy to the device: the caller's buffer may go at once, and the stream
// need not wait (a copy from pageable memory synchronises it). Regions stay
// untouched until reset(), which the caller makes only after synchronising
// the stream; full chunks are kept until then and coalesced into one.
class PinnedStaging {
 public:
  explicit PinnedStaging(LaunchQueue::ReleaseCounter released) : released_(std::move(released)) {}
  std::byte* stage(const void* src, std::size_t size_in) {
    const std::size_t bytes = (size_in + 63) / 64 * 64;
    if (chunks_.empty() || chunks_.back().size - used_ < bytes) {
      std::size_t size = std::max<std::size_t>({bytes, std::size_t(1) << 20, capacity()});
      chunks_.push_back(allocate(size));
      used_ = 0;
    }
    Chunk& c = chunks_.back();
    std::byte* p = static_cast<std::byte*>(c.data.get()) + used_;
    used_ += bytes;
    high_water_ = std::max(high_water_, total_used());
    std::memcpy(p, src, size_in);
    return p;
  }
  void reset() {
    if (chunks_.size() > 1) {
      const std::size_t size = std::max(high_water_, capacity());
      chunks_.clear();
      chunks_.push_back(allocate(size));
    }
    used_ = 0;
  }

 private:
  struct Chunk {
    std::shared_ptr<void> data;
    std::size_t size = 0;
  };
  // Freed like device memory: counted, since recorded copies read it.
  Chunk allocate(std::size_t size) const {
    void* p = nullptr;
    check(cudaHostAlloc(&p, size, cudaHostAllocDefault), "pinned staging");
    return {std::shared_ptr<void>(p,
                                  [released = released_](void* q) {
                                    cudaFreeHost(q);
                                    released->fetch_add(1, std::memory_order_release);
                                  }),
            size};
  }
  std::size_t capacity() const {
    std::size_t n = 0;
    for (const Chunk& c : chunks_) n += c.size;
    return n;
  }
  std::size_t total_used() const {
    std::size_t n = used_;
    for (std::size_t i = 0; i + 1 < chunks_.size(); ++i) n += chunks_[i].size;
    return n;
  }
  LaunchQueue::ReleaseCounter released_;
  std::vector<Chunk> chunks_;
  std::size_t used_ = 0, high_water_ = 0;
};

// A point in a CUDA backend's stream (Backend::mark_work): an event
// recorded there, which other streams wait for (on the same GPU or another).
class CudaWorkMark final : public WorkMark {
 public:
  CudaWorkMark(int device, cudaStream_t stream) {
    DeviceGuard guard(device);
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "mark_work: cudaEventCreate");
    const cudaError_t e = cudaEventRecord(event_, stream);
    if (e != cudaSuccess) {
      cudaEventDestroy(event_);
      check(e, "mark_work: cudaEventRecord");
    }
  }
  // A stream still waiting for the event keeps what it needs: CUDA releases
  // the event once it has completed.
  ~CudaWorkMark() override { cudaEventDestroy(event_); }
  CudaWorkMark(const CudaWorkMark&) = delete;
  CudaWorkMark& operator=(const CudaWorkMark&) = delete;
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const BackendOptions& options)
      : device_(device),
        // The GPU's default is the tensor cores; f32 (the CPU's bits) on request.
        precision_(options.matmul_precision == MatmulPrecision::Auto ? MatmulPrecision::Bf16
                                                                      : options.matmul_precision),
        owned_stream_(new_stream(device)),
        stream_(owned_stream_.get()),
        queue_(device, stream_),
        workspace_(Device::cuda(device),
                   [device, released = queue_.released()](std::size_t bytes) {
                     auto p = device_alloc(device, bytes, "workspace", released);
                     return Workspace::Chunk{static_cast<std::byte*>(p.get()), p};
                   }),
        staging_(queue_.released()) {
    DeviceGuard guard(device_);
    check(cudaGetDeviceProperties(&props_, device_), "cudaGetDeviceProperties");
    sink_ = device_alloc(device_, 64, "sink", queue_.released());
    // The GEMM's split-K arrival counters: zero now, and every launch leaves them zero.
    gemm_arrivals_ = device_alloc(device_, std::size_t(cuda::kGemmArrivals) * sizeof(int), "GEMM arrivals", queue_.released());
    // On the backend's stream: it is non-blocking, so nothing on the legacy
    // default stream (where cudaMemset and cudaMemcpy go) is ordered before
    // its kernels. The probe kernel's synchronisation below covers this.
    check(cudaMemsetAsync(gemm_arrivals_.get(), 0, std::size_t(cuda::kGemmArrivals) * sizeof(int), stream_),
          "GEMM arrivals");
    // Split attention's arrival counters, the same way.
    attention_arrivals_ = device_alloc(device_, std::size_t(cuda::kAttentionArrivals) * sizeof(int),
                                       "attention arrivals", queue_.released());
    check(cudaMemsetAsync(attention_arrivals_.get(), 0, std::size_t(cuda::kAttentionArrivals) * sizeof(int), stream_),
          "attention arrivals");
    // The kernels' index errors land in mapped host memory, read after a sync.
    void* flag = nullptr;
    check(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped), "error flag");
    error_host_ = std::shared_ptr<int>(static_cast<int*>(flag), [](int* p) { cudaFreeHost(p); });
    *error_host_ = cuda::kNoError;
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_device_), flag, 0), "error flag");
    // A new step's workspace and staging are recycled once the last step's
    // copies and kernels are done.
    workspace_.on_reset([this] {
      synchronize("step");
      staging_.reset();
    });
    // A kernel runs only where the build carries code for this architecture:
    // find out now, with a clear message, rather than at the first step.
    cuda::add(static_cast<float*>(sink_.get()), static_cast<const float*>(sink_.get()), 1, stream_);
    const cudaError_t e = cudaGetLastError();
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
      throw Error("device 'cuda:" + std::to_string(device_) + "' (" + props_.name + ", sm_" +
                  std::to_string(props_.major) + std::to_string(props_.minor) +
                  ") is not among the architectures this rowlm was built for (set CMAKE_CUDA_ARCHITECTURES)");
    check(e, "probe kernel");
    check(cudaStreamSynchronize(stream_), "probe kernel");
    gemm_gpu_ = cuda::gemm_gpu();
  }
  ~CudaBackend() override {
    DeviceGuard guard(device_);
    cudaStreamSynchronize(stream_);
  }

  std::string name() const override {
    return "cuda:" + std::to_string(device_) + " (" + props_.name + ", sm_" + std::to_string(props_.major) +
           std::to_string(props_.minor) + (precision_ == MatmulPrecision::Bf16 ? ", bf16 matmul" : "") + ")";
  }
  Device device() const override { return Device::cuda(device_); }
  MatmulPrecision matmul_precision() const override { return precision_; }
  int host_threads() const override { return 1; }

  double measure_read_bandwidth(std::size_t bytes, int repeats) override {
    DeviceGuard guard(device_);
    bytes = std::max<std::size_t>(bytes, std::size_t(1) << 26) / 16 * 16;
    auto buffer = device_alloc(device_, bytes, "bandwidth probe", queue_.released());
    check(cudaMemsetAsync(buffer.get(), 0, bytes, stream_), "bandwidth probe");
    double best = 0;
    for (int r = 0; r < std::max(1, repeats) + 1; ++r) {
      check(cudaStreamSynchronize(stream_), "bandwidth probe");
      const auto t0 = std::chrono::steady_clock::now();
      cuda::stream_read(buffer.get(), bytes, static_cast<float*>(sink_.get()), stream_);
      check(cudaStreamSynchronize(stream_), "bandwidth probe");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::max(best, double(bytes) / s / 1e9);  // the first run warms up
    }
    return best;
  }
  // F32: FMA chains on the CUDA cores; Bf16: mma chains on the tensor
  // cores (the instruction gemm_bf16 issues).
  double measure_matmul_peak(MatmulPrecision precision, int repeats) override {
    DeviceGuard guard(device_);
    double best = 0;
    const bool tensor = precision == MatmulPrecision::Bf16;
    for (int r = 0; r < std::max(1, repeats) + 1; ++r) {
      check(cudaStreamSynchronize(stream_), "FMA probe");
      const auto t0 = std::chrono::steady_clock::now();
      float* sink = static_cast<float*>(sink_.get());
      const double flops = tensor ? cuda::mma_chains(int64_t(1) << 14, sink, props_.multiProcessorCount, stream_)
                                  : cuda::fma_chains(int64_t(1) << 16, sink, props_.multiProcessorCount, stream_);
      check(cudaStreamSynchronize(stream_), "FMA probe");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::max(best, flops / s / 1e9);
    }
    return best;
  }

  // --- Deferred launches (launch_queue.h)

  void begin_deferred() override { queue_.open(); }
  void end_deferred(bool issue) override {
    if (issue) {
      queue_.submit_and_close();
    } else {
      queue_.drop_and_close();
    }
  }
  LaunchStats launch_stats() const override {
    const LaunchQueue::Stats& s = queue_.stats();
    return {s.sequences, s.captured, s.replayed, s.launches};
  }

  // --- Profiling (launch_queue.h)

  void set_profiling(bool on) override {
    DeviceGuard guard(device_);
    queue_.set_profiling(on);
  }
  std::vector<OpProfile> profile() const override {
    std::vector<OpProfile> out;
    for (const auto& [op, t] : queue_.profile()) out.push_back({op, t.launches, t.seconds});
    return out;
  }
  void clear_profile() override { queue_.clear_profile(); }

  // --- Memory

  std::size_t available_memory() const override {
    DeviceGuard guard(device_);
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return free;
  }

  Workspace& workspace() override { return workspace_; }

  Tensor upload(const Tensor& host) override {
    ROWLM_REQUIRE(host.on_host(), "upload: the source must be a host tensor, got " + describe(host));
    DeviceGuard guard(device_);
    auto p = device_alloc(device_, host.nbytes(), "upload", queue_.released());
    // On the backend's stream, then waited for: cudaMemcpy from pageable
    // memory may return before its DMA lands, and on the legacy stream it is
    // not ordered before this stream's kernels (a batch-invariance test saw
    // a matmul's output overwritten by the zeros uploaded into it).
    if (host.nbytes()) {
      check(cudaMemcpyAsync(p.get(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, stream_), "upload");
      check(cudaStreamSynchronize(stream_), "upload");
    }
    return Tensor::view(host.dtype(), host.shape(), p.get(), p, device());
  }
  void copy_from_host(const void* src, Tensor& dst) override {
    ROWLM_REQUIRE(dst.device() == device(), "copy_from_host: dst must be on " + device().name() + ", got " + describe(dst));
    DeviceGuard guard(device_);
    if (dst.nbytes() == 0) return;
    const std::byte* staged = staging_.stage(src, dst.nbytes());
    queue_.launch("copy_from_host", &cudaMemcpyAsync, dst.raw(), static_cast<const void*>(staged), dst.nbytes(),
                  cudaMemcpyHostToDevice);
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    ROWLM_REQUIRE(src.device() == device(), "copy_to_host: src must be on " + device().name() + ", got " + describe(src));
    DeviceGuard guard(device_);
    queue_.submit();  // what is held comes first
    queue_.timed("copy_to_host", [&] {
      if (src.nbytes()) check(cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_), "copy_to_host");
    });
    synchronize("copy_to_host");
  }
  // --- Between backends: other CUDA backends' tensors, copied on this
  // backend's stream after the source's mark (the source's stream is not
  // touched, so its caller may go on meanwhile).

  bool reads_from(const Backend& from) const override { return dynamic_cast<const CudaBackend*>(&from) != nullptr; }

  std::shared_ptr<const WorkMark> mark_work() override {
    DeviceGuard guard(device_);
    queue_.submit();  // the held launches that wrote what the mark covers
    return std::make_shared<CudaWorkMark>(device_, stream_);
  }

  void copy_from_backend(const Backend& from, const Tensor& src, const WorkMark* after, Tensor& dst) override {
    const auto* peer = dynamic_cast<const CudaBackend*>(&from);
    ROWLM_REQUIRE(peer != nullptr, "copy_from_backend: " + name() + " does not read tensors of " + from.name() +
                                       " (only other CUDA backends')");
    require_here(dst, "copy_from_backend: dst");
    ROWLM_REQUIRE(src.device() == peer->device(),
                  "copy_from_backend: src must be on " + peer->device().name() + ", got " + describe(src));
    ROWLM_REQUIRE(src.nbytes() == dst.nbytes(), "copy_from_backend: " + describe(src) + " into " + describe(dst) +
                                                    ": the byte sizes differ");
    const auto* mark = dynamic_cast<const CudaWorkMark*>(after);
    ROWLM_REQUIRE(after == nullptr || mark != nullptr, "copy_from_backend: the mark is not a CUDA backend's");
    DeviceGuard guard(device_);
    // This stream's held launches first, so that they keep their place
    // before the copy and what follows it.
    queue_.submit();
    if (dst.nbytes() == 0) return;
    const int other = peer->device_;
    if (other != device_) enable_peer_access(other);
    queue_.timed("copy_from_backend", [&] {
      if (mark != nullptr) check(cudaStreamWaitEvent(stream_, mark->event(), 0), "copy_from_backend: wait");
      if (other == device_) {
        check(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_),
              "copy_from_backend");
      } else {
        // Direct over the GPUs' link where peer access is on; staged by the
        // driver otherwise. Not run: no machine with several GPUs was lent.
        check(cudaMemcpyPeerAsync(dst.raw(), device_, src.raw(), other, src.nbytes(), stream_),
              "copy_from_backend: peer copy");
      }
    });
  }

  Tensor host_output(DType dtype, Shape shape) override {
    const std::size_t bytes = std::size_t(shape_numel(shape)) * dtype_size(dtype);
    std::shared_ptr<void> buffer = outputs_->take(bytes);
    void* data = buffer.get();
    return Tensor::view(dtype, std::move(shape), data, std::move(buffer), Device::host());
  }

  Weight prepare_weight(const Weight& w) override {
    if (w.format == WeightFormat::Affine) return upload_affine(w);
    ROWLM_REQUIRE(w.format == WeightFormat::Dense, "prepare_weight: " + w.describe() + ": unknown weight format");
    ROWLM_REQUIRE(!w.values.empty() || w.rows * w.cols == 0, "prepare_weight: tensor has no data");
    ROWLM_REQUIRE(is_float_storage(w.values.dtype()) && w.values.rank() == 2 && w.values.dim(0) == w.rows &&
                      w.values.dim(1) == w.cols,
                  "prepare_weight: weights must be f32, bf16 or f16 [rows, cols], got " + describe(w.values));
    if (w.values.device() == device()) return w;
    Weight out = w;
    out.values = upload(w.values);
    return out;
  }

  std::unique_ptr<KvArena> make_kv_arena(const kv::LayerSpec& spec, int block_size) override {
    kv::check_layer_spec(spec, -1);
    ROWLM_REQUIRE(block_size > 0, "make_kv_arena: block_size must be positive");
    ROWLM_REQUIRE(spec.head_dim <= 512, "make_kv_arena: the CUDA attention kernel takes head_dim up to 512, not " +
                                            std::to_string(spec.head_dim));
    return std::make_unique<CudaKvArena>(device_, stream_, queue_, spec, block_size);
  }

  std::unique_ptr<RopeTable> make_rope_table(std::span<const float> inv_freq) override {
    ROWLM_REQUIRE(!inv_freq.empty(), "make_rope_table: no frequencies");
    return std::make_unique<CudaRopeTable>(device_, stream_, queue_,
                                           std::vector<float>(inv_freq.begin(), inv_freq.end()));
  }

  // --- Dense operations

  void matmul(const Tensor& x, const Weight& w, Tensor& y) override {
    check_matmul(x, w, y);
    DeviceGuard guard(device_);
    const int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    if (on_tensor_cores(w)) {
      const Weight* wp = &w;
      Tensor* yp = &y;
      gemm_bf16(x, outputs_of({&wp, 1}, {&yp, 1}));
    } else if (w.format == WeightFormat::Affine && w.code_order == CodeOrder::Mma16) {
      const std::size_t bytes = cuda::affine_mma_workspace_bytes(M, N, K, gemm_gpu_.sms);
      Tensor scratch;
      if (bytes) scratch = workspace_.tensor(DType::F32, {int64_t(bytes / sizeof(float))});
      queue_.launch("affine_mma", &cuda::affine_mma, x.data<float>(), weight_ref(w), y.data<float>(), M, N, K,
                    bytes ? scratch.data<float>() : static_cast<float*>(nullptr), int(gemm_gpu_.sms));
    } else {
      queue_.launch("matmul_f32", &cuda::matmul_f32, x.data<float>(), weight_ref(w), y.data<float>(), M, N, K);
    }
  }

  void rms_norm_matmul_each(const Tensor& x, const Tensor* norm_weight, float eps, NormKind kind,
                            std::span<const Weight* const> w, std::span<Tensor* const> y) override {
    if (!one_launch(x, w, y, 1, "rms_norm_matmul_each") || !cuda::staged_norm_fits(x.dim(-1))) {
      Backend::rms_norm_matmul_each(x, norm_weight, eps, kind, w, y);
      return;
    }
    const NormArgs a = norm_args(x, norm_weight, kind, x, "rms_norm_matmul_each");
    DeviceGuard guard(device_);
    const int64_t M = x.dim(0), K = x.dim(1);
    Tensor xb = workspace_.tensor(DType::BF16, {M, K});
    queue_.launch("rms_norm_bf16", &cuda::rms_norm_bf16, x.data<float>(), a.g, a.gs, a.norm, eps, xb.data<uint16_t>(),
                  a.rows, a.D);
    gemm_bf16_rounded(xb, outputs_of(w, y));
  }

  void matmul_each(const Tensor& x, std::span<const Weight* const> w, std::span<Tensor* const> y) override {
    if (!one_launch(x, w, y, 2, "matmul_each")) {
      for (std::size_t i = 0; i < w.size(); ++i) matmul(x, *w[i], *y[i]);
      return;
    }
    DeviceGuard guard(device_);
    gemm_bf16(x, outputs_of(w, y));
  }

  void add_bias(Tensor& y, const Tensor& bias) override {
    require_here(y, "add_bias: y");
    require_here(bias, "add_bias: bias");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.rank() == 2, "add_bias: y must be f32 [M, N], got " + describe(y));
    ROWLM_REQUIRE(bias.dtype() == DType::F32 && bias.numel() == y.dim(1),
                  "add_bias: bias must be f32 [" + std::to_string(y.dim(1)) + "], got " + describe(bias));
    DeviceGuard guard(device_);
    queue_.launch("add_bias", &cuda::add_bias, y.data<float>(), bias.data<float>(), y.dim(0), y.dim(1));
  }

  void embed(const Tensor& ids, const Weight& table, float scale, Tensor& out) override {
    ROWLM_REQUIRE(holds(table), "embed: table must be a dense (f32, bf16, f16) or affine [V, D] weight of this "
                                "backend, got " + table.describe());
    const int64_t V = table.rows, D = table.cols, T = ids.numel();
    require_here(out, "embed: out");
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.rank() == 2 && out.dim(0) == T && out.dim(1) == D,
                  "embed: out must be f32 [" + std::to_string(T) + ", " + std::to_string(D) + "], got " + describe(out));
    require_indices(ids, T, "embed");
    DeviceGuard guard(device_);
    queue_.launch("embed", &cuda::embed, ids.data<int32_t>(), T, weight_ref(table), V, D, scale, out.data<float>(),
                  error_device_);
  }

  void rms_norm(const Tensor& x, const Tensor* w, float eps, NormKind kind, Tensor& y) override {
    const NormArgs a = norm_args(x, w, kind, y, "rms_norm");
    ROWLM_REQUIRE(y.raw() == x.raw() || !overlaps(x, y), "rms_norm: y must be x itself or not overlap it");
    DeviceGuard guard(device_);
    queue_.launch("rms_norm", &cuda::rms_norm, x.data<float>(), a.g, a.gs, a.norm, eps, y.data<float>(), a.rows, a.D);
  }

  void add_rms_norm(Tensor& y, const Tensor& x, const Tensor* w, float eps, NormKind kind,
                    float then_scale = 1.0f) override {
    const NormArgs a = norm_args(x, w, kind, y, "add_rms_norm");
    ROWLM_REQUIRE(!overlaps(x, y), "add_rms_norm: y must not overlap x");
    DeviceGuard guard(device_);
    queue_.launch("add_rms_norm", &cuda::add_rms_norm, y.data<float>(), x.data<float>(), a.g, a.gs, a.norm, eps, a.rows,
                  a.D, then_scale);
  }

  void rope(Tensor& x, const Tensor& positions, RopeTable& rope_table) override {
    const RopeArgs r = rope_args(x, positions, rope_table, "rope");
    DeviceGuard guard(device_);
    queue_.launch("rope", &cuda::rope, x.data<float>(), positions.data<int32_t>(), r.T, r.heads, r.half,
                  r.table->table(), r.table->reserved(), error_device_);
  }

  void rms_norm_rope(Tensor& x, const Tensor* w, float eps, NormKind kind, const Tensor& positions,
                     RopeTable& rope_table) override {
    const RopeArgs r = rope_args(x, positions, rope_table, "rms_norm_rope");
    if (r.T == 0) return;
    const Tensor heads = x.reshaped({r.T * r.heads, 2 * r.half});
    const NormArgs a = norm_args(heads, w, kind, heads, "rms_norm_rope");
    if (!cuda::staged_norm_fits(2 * r.half)) {
      Backend::rms_norm_rope(x, w, eps, kind, positions, rope_table);
      return;
    }
    DeviceGuard guard(device_);
    queue_.launch("rms_norm_rope", &cuda::rms_norm_rope, x.data<float>(), a.g, a.gs, a.norm, eps,
                  positions.data<int32_t>(), r.T, r.heads, r.half, r.table->table(), r.table->reserved(),
                  error_device_);
  }

  void gated_activation(const Tensor& gate, const Tensor& up, Activation act, Tensor& out) override {
    require_here(gate, "gated_activation: gate");
    require_here(up, "gated_activation: up");
    require_here(out, "gated_activation: out");
    ROWLM_REQUIRE(gate.dtype() == DType::F32 && up.dtype() == DType::F32 && out.dtype() == DType::F32 &&
                      gate.shape() == up.shape() && out.shape() == gate.shape(),
                  "gated_activation: gate, up and out must be f32 of one shape, got " + describe(gate) + ", " +
                      describe(up) + ", " + describe(out));
    ROWLM_REQUIRE((out.raw() == gate.raw() || !overlaps(out, gate)) && (out.raw() == up.raw() || !overlaps(out, up)),
                  "gated_activation: out must be gate, up, or separate from both");
    DeviceGuard guard(device_);
    queue_.launch("gated_activation", &cuda::gated_activation, gate.data<float>(), up.data<float>(), act == Activation::Silu ? 1 : 0, out.data<float>(),
                           out.numel());
  }

  void gated_matmul(Tensor& gate, const Tensor& up, Activation act, const Weight& w, Tensor& y) override {
    if (!on_tensor_cores(w)) {
      Backend::gated_matmul(gate, up, act, w, y);
      return;
    }
    require_here(gate, "gated_matmul: gate");
    require_here(up, "gated_matmul: up");
    ROWLM_REQUIRE(gate.dtype() == DType::F32 && up.dtype() == DType::F32 && gate.rank() == 2 && up.shape() == gate.shape(),
                  "gated_matmul: gate and up must be f32 [M, K] of one shape, got " + describe(gate) + ", " +
                      describe(up));
    check_matmul(gate, w, y);
    DeviceGuard guard(device_);
    const int64_t M = gate.dim(0), K = gate.dim(1);
    Tensor xb = workspace_.tensor(DType::BF16, {M, K});
    queue_.launch("gated_activation", &cuda::gated_activation_bf16, gate.data<float>(), up.data<float>(),
                  act == Activation::Silu ? 1 : 0, xb.data<uint16_t>(), M * K);
    const Weight* wp = &w;
    Tensor* yp = &y;
    gemm_bf16_rounded(xb, outputs_of({&wp, 1}, {&yp, 1}));
  }

  void copy(const Tensor& src, Tensor& dst) override {
    require_here(src, "copy: src");
    require_here(dst, "copy: dst");
    ROWLM_REQUIRE(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
                  "copy: src and dst must have one dtype and size, got " + describe(src) + " and " + describe(dst));
    ROWLM_REQUIRE(!overlaps(src, dst), "copy: src and dst must not overlap");
    DeviceGuard guard(device_);
    if (src.nbytes())
      queue_.launch("copy", &cudaMemcpyAsync, dst.raw(), static_cast<const void*>(src.raw()), src.nbytes(),
                    cudaMemcpyDeviceToDevice);
  }

  void add(Tensor& y, const Tensor& x) override {
    require_here(y, "add: y");
    require_here(x, "add: x");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && x.dtype() == DType::F32 && y.shape() == x.shape(),
                  "add: y and x must be f32 of one shape, got " + describe(y) + " and " + describe(x));
    ROWLM_REQUIRE(y.raw() == x.raw() || !overlaps(x, y), "add: x must be y itself or not overlap it");
    DeviceGuard guard(device_);
    queue_.launch("add", &cuda::add, y.data<float>(), x.data<float>(), y.numel());
  }

  void scale(Tensor& y, float s) override {
    require_here(y, "scale: y");
    ROWLM_REQUIRE(y.dtype() == DType::F32, "scale: y must be f32, got " + describe(y));
    DeviceGuard guard(device_);
    queue_.launch("scale", &cuda::scale, y.data<float>(), s, y.numel());
  }

  void softcap(Tensor& y, float cap) override {
    require_here(y, "softcap: y");
    ROWLM_REQUIRE(y.dtype() == DType::F32, "softcap: y must be f32, got " + describe(y));
    ROWLM_REQUIRE(cap > 0.0f && std::isfinite(cap), "softcap: cap must be positive and finite, got " + std::to_string(cap));
    DeviceGuard guard(device_);
    queue_.launch("softcap", &cuda::softcap, y.data<float>(), cap, y.numel());
  }

  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) override {
    require_here(src, "gather_rows: src");
    require_here(dst, "gather_rows: dst");
    ROWLM_REQUIRE(src.rank() >= 1, "gather_rows: src must have at least one dimension");
    const int64_t R = src.dim(0), n = rows.numel();
    const int64_t row_elems = R == 0 ? 0 : src.numel() / R;
    Shape want = src.shape();
    want[0] = n;
    ROWLM_REQUIRE(dst.dtype() == src.dtype() && dst.shape() == want,
                  "gather_rows: dst must be " + std::string(dtype_name(src.dtype())) + " " + shape_str(want) +
                      ", got " + describe(dst));
    ROWLM_REQUIRE(!overlaps(dst, src), "gather_rows: dst must not overlap src");
    require_indices(rows, n, "gather_rows");
    DeviceGuard guard(device_);
    queue_.launch("gather_rows", &cuda::gather_rows, src.raw(), rows.data<int32_t>(), n, row_elems * int64_t(dtype_size(src.dtype())), R, dst.raw(),
                      error_device_);
  }

  void argmax_rows(const Tensor& x, Tensor& codes) override {
    check_argmax_rows(x, codes);
    require_here(x, "argmax_rows: x");
    require_here(codes, "argmax_rows: codes");
    DeviceGuard guard(device_);
    Tensor partials =
        workspace_.tensor(DType::U8, {int64_t(cuda::argmax_rows_workspace_bytes(x.dim(0), x.dim(1)))});
    queue_.launch("argmax_rows", &cuda::argmax_rows, x.data<float>(), x.dim(0), x.dim(1), codes.data<int32_t>(),
                  partials.raw());
  }

  bool samples_rows() const override { return true; }

  void sample_rows(Tensor& x, std::span<const RowSampling> rows, std::span<const RowSamplingEdit> edits,
                   std::span<const uint64_t> masks, Tensor& tokens, Tensor* stats) override {
    require_here(x, "sample_rows: x");
    require_here(tokens, "sample_rows: tokens");
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() == 2 && x.dim(1) > 0,
                  "sample_rows: x must be f32 [n, V], got " + describe(x));
    ROWLM_REQUIRE(tokens.dtype() == DType::I32 && tokens.shape() == Shape{int64_t(rows.size())},
                  "sample_rows: tokens must be i32 [" + std::to_string(rows.size()) + "], got " + describe(tokens));
    for (const RowSampling& r : rows)
      ROWLM_REQUIRE(r.row >= 0 && r.row < x.dim(0) && r.edits_begin >= 0 && r.edits_begin <= r.edits_end &&
                        std::size_t(r.edits_end) <= edits.size() && r.temperature >= 0.0f && r.u >= 0.0 && r.u < 1.0 &&
                        r.u_residual >= 0.0 && r.u_residual < 1.0 && r.draft < x.dim(1),
                    "sample_rows: a row's description is out of range (row " + std::to_string(r.row) + ")");
    const bool logprobs = std::any_of(rows.begin(), rows.end(), [](const RowSampling& r) { return r.logprobs >= 0; });
    const bool drafts = std::any_of(rows.begin(), rows.end(), [](const RowSampling& r) { return r.draft >= 0; });
    const int64_t mask_words = (x.dim(1) + 63) / 64;
    for (const RowSampling& r : rows) {
      ROWLM_REQUIRE(r.logprobs <= kMaxRowLogprobs, "sample_rows: more than 20 logprobs asked for");
      ROWLM_REQUIRE(r.mask_begin < 0 || int64_t(r.mask_begin) + mask_words <= int64_t(masks.size()),
                    "sample_rows: a row's mask lies outside the mask words");
    }
    if (logprobs) {
      ROWLM_REQUIRE(stats != nullptr, "sample_rows: rows ask for logprobs and no stats tensor was given");
      require_here(*stats, "sample_rows: stats");
      ROWLM_REQUIRE(std::size_t(stats->nbytes()) == rows.size() * sizeof(RowLogprobStats),
                    "sample_rows: stats must hold " + std::to_string(rows.size()) + " RowLogprobStats");
    }
    for (const RowSamplingEdit& e : edits)
      ROWLM_REQUIRE(e.id >= 0 && e.id < x.dim(1), "sample_rows: edit of token " + std::to_string(e.id) +
                                                      " outside the row of " + std::to_string(x.dim(1)));
    if (rows.empty()) return;
    DeviceGuard guard(device_);
    // The descriptions, edits and masks in one copy.
    const std::size_t row_bytes = rows.size_bytes(), edit_offset = (row_bytes + 15) / 16 * 16;
    const std::size_t mask_offset = (edit_offset + edits.size_bytes() + 15) / 16 * 16;
    std::vector<std::byte> packed(mask_offset + masks.size_bytes());
    std::memcpy(packed.data(), rows.data(), row_bytes);
    if (!edits.empty()) std::memcpy(packed.data() + edit_offset, edits.data(), edits.size_bytes());
    if (!masks.empty()) std::memcpy(packed.data() + mask_offset, masks.data(), masks.size_bytes());
    Tensor staged = workspace_.tensor(DType::U8, {int64_t(packed.size())});
    copy_from_host(packed.data(), staged);
    const int64_t blocks = (x.dim(1) + 1023) / 1024;
    Tensor sums = workspace_.tensor(DType::F32, {int64_t(rows.size()) * blocks});
    // A verifying row's residual sums, in double (draw_token's).
    Tensor lane_sums =
        drafts ? workspace_.tensor(DType::U8, {int64_t(rows.size()) * blocks * int64_t(sizeof(double))}) : Tensor();
    // A row asking for logprobs is processed in a copy: its raw logits stay.
    Tensor copies = logprobs ? workspace_.tensor(DType::F32, {int64_t(rows.size()), x.dim(1)}) : Tensor();
    const auto* base = static_cast<const std::byte*>(staged.raw());
    queue_.launch("sample_rows", &cuda::sample_rows, x.data<float>(), x.dim(1),
                  reinterpret_cast<const RowSampling*>(base), int64_t(rows.size()),
                  reinterpret_cast<const RowSamplingEdit*>(base + edit_offset),
                  reinterpret_cast<const uint64_t*>(base + mask_offset), sums.data<float>(),
                  drafts ? static_cast<double*>(lane_sums.raw()) : nullptr, logprobs ? copies.data<float>() : nullptr, tokens.data<int32_t>(),
                  logprobs ? static_cast<RowLogprobStats*>(stats->raw()) : nullptr);
  }

  void scatter_add_rows(Tensor& dst, const Tensor& rows, const Tensor& weights, const Tensor& src) override {
    require_here(dst, "scatter_add_rows: dst");
    require_here(src, "scatter_add_rows: src");
    require_here(weights, "scatter_add_rows: weights");
    ROWLM_REQUIRE(dst.dtype() == DType::F32 && dst.rank() >= 1, "scatter_add_rows: dst must be f32, got " + describe(dst));
    const int64_t R = dst.dim(0), n = rows.numel();
    const int64_t D = R == 0 ? 0 : dst.numel() / R;
    ROWLM_REQUIRE(weights.dtype() == DType::F32 && weights.numel() == n,
                  "scatter_add_rows: " + std::to_string(n) + " rows but weights " + describe(weights));
    Shape want = dst.shape();
    want[0] = n;
    ROWLM_REQUIRE(src.dtype() == DType::F32 && src.shape() == want,
                  "scatter_add_rows: src must be f32 " + shape_str(want) + ", got " + describe(src));
    ROWLM_REQUIRE(!overlaps(dst, src), "scatter_add_rows: src must not overlap dst");
    require_indices(rows, n, "scatter_add_rows");
    DeviceGuard guard(device_);
    queue_.launch("scatter_add_rows", &cuda::scatter_add_rows, dst.data<float>(), rows.data<int32_t>(), weights.data<float>(), src.data<float>(), n, D, R,
                           error_device_);
  }

  // --- Mixture of experts. Routing and the grouping of tokens by expert run
  // on the host with the CPU's code (route_token), so both backends choose
  // and order alike; the experts' arithmetic runs on the device.

  void moe_route(const Tensor& logits, int top_k, bool renormalize, const Tensor* per_expert_scale, Tensor& experts,
                 Tensor& weights) override {
    require_here(logits, "moe_route: logits");
    require_here(experts, "moe_route: experts");
    require_here(weights, "moe_route: weights");
    ROWLM_REQUIRE(logits.dtype() == DType::F32 && logits.rank() == 2 && logits.dim(1) > 0,
                  "moe_route: logits must be f32 [T, E], got " + describe(logits));
    const int64_t T = logits.dim(0), E = logits.dim(1);
    ROWLM_REQUIRE(top_k >= 1 && top_k <= E, "moe_route: top_k " + std::to_string(top_k) + " must be in [1, " +
                                                std::to_string(E) + "]");
    ROWLM_REQUIRE(experts.dtype() == DType::I32 && experts.numel() == T * top_k && weights.dtype() == DType::F32 &&
                      weights.numel() == T * top_k,
                  "moe_route: experts (i32) and weights (f32) need T·top_k = " + std::to_string(T * top_k) +
                      " entries, got " + describe(experts) + " and " + describe(weights));
    std::vector<float> scale;
    if (per_expert_scale != nullptr) {
      require_here(*per_expert_scale, "moe_route: per_expert_scale");
      ROWLM_REQUIRE(per_expert_scale->numel() == E && per_expert_scale->dtype() == DType::F32,
                    "moe_route: per_expert_scale must be f32 with " + std::to_string(E) + " entries, got " +
                        describe(*per_expert_scale));
      scale = download<float>(*per_expert_scale);
    }
    const std::vector<float> l = download<float>(logits);
    for (int64_t i = 0; i < T * E; ++i)
      ROWLM_REQUIRE(!std::isnan(l[std::size_t(i)]), "moe_route: logits row " + std::to_string(i / E) + " contains NaN");
    std::vector<int32_t> ex(std::size_t(T * top_k));
    std::vector<float> wt(std::size_t(T * top_k)), probs(static_cast<std::size_t>(E));
    for (int64_t t = 0; t < T; ++t)
      route_token(l.data() + t * E, E, top_k, renormalize, scale.empty() ? nullptr : scale.data(), probs.data(),
                  ex.data() + t * top_k, wt.data() + t * top_k);
    copy_from_host(ex.data(), experts);
    copy_from_host(wt.data(), weights);
  }

  void moe_experts(const Tensor& x, const Tensor& experts, const Tensor& weights, const ExpertBank& bank,
                   Activation act, Tensor& out) override {
    require_here(x, "moe_experts: x");
    require_here(out, "moe_experts: out");
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() == 2, "moe_experts: x must be f32 [T, H], got " + describe(x));
    const int64_t T = x.dim(0), H = x.dim(1);
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.shape() == x.shape() && !overlaps(out, x),
                  "moe_experts: out must be f32 " + shape_str(x.shape()) + " apart from x, got " + describe(out));
    const int E = bank.size();
    ROWLM_REQUIRE(E > 0 && int(bank.up.size()) == E && int(bank.down.size()) == E,
                  "moe_experts: the bank needs gate, up and down for every expert");
    ROWLM_REQUIRE(experts.dtype() == DType::I32 && experts.rank() == 2 && experts.dim(0) == T &&
                      weights.dtype() == DType::F32 && weights.shape() == experts.shape(),
                  "moe_experts: experts (i32) and weights (f32) must be [T, top_k], got " + describe(experts) +
                      " and " + describe(weights));
    const int64_t K = experts.dim(1);
    const std::vector<int32_t> ex = download<int32_t>(experts);
    const std::vector<float> wt = download<float>(weights);
    for (int64_t i = 0; i < T * K; ++i)
      ROWLM_REQUIRE(ex[std::size_t(i)] >= 0 && ex[std::size_t(i)] < E,
                    "moe_experts: row " + std::to_string(ex[std::size_t(i)]) + " at index " + std::to_string(i) +
                        " is outside the bank's " + std::to_string(E) + " rows");
    DeviceGuard guard(device_);
    queue_.launch("moe_experts", &cudaMemsetAsync, out.raw(), 0, out.nbytes());
    int64_t I = 0;
    for (const Weight& g : bank.gate) I = std::max(I, g.rows);
    Tensor xe_all = workspace_.tensor(DType::F32, {T, H}), ye_all = workspace_.tensor(DType::F32, {T, H});
    Tensor gate_all = workspace_.tensor(DType::F32, {T * I}), up_all = workspace_.tensor(DType::F32, {T * I});
    std::vector<int32_t> tokens;
    std::vector<float> token_weights;
    for (int e = 0; e < E; ++e) {
      tokens.clear();
      token_weights.clear();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < K; ++j)
          if (ex[std::size_t(t * K + j)] == e) {
            tokens.push_back(int32_t(t));
            token_weights.push_back(wt[std::size_t(t * K + j)]);
          }
      if (tokens.empty()) continue;
      const int64_t n = int64_t(tokens.size()), Ie = bank.gate[std::size_t(e)].rows;
      Tensor rows = workspace_.tensor(DType::I32, {n}), row_weights = workspace_.tensor(DType::F32, {n});
      copy_from_host(tokens.data(), rows);
      copy_from_host(token_weights.data(), row_weights);
      Tensor xt = xe_all.rows(0, n), yt = ye_all.rows(0, n);
      Tensor gt = gate_all.rows(0, n * Ie).reshaped({n, Ie}), ut = up_all.rows(0, n * Ie).reshaped({n, Ie});
      queue_.launch("gather_rows", &cuda::gather_rows, x.raw(), rows.data<int32_t>(), n, H * int64_t(sizeof(float)), T, xt.raw(), error_device_);
      matmul(xt, bank.gate[std::size_t(e)], gt);
      matmul(xt, bank.up[std::size_t(e)], ut);
      gated_matmul(gt, ut, act, bank.down[std::size_t(e)], yt);
      queue_.launch("scatter_add_rows", &cuda::scatter_add_rows, out.data<float>(), rows.data<int32_t>(), row_weights.data<float>(), yt.data<float>(), n,
                             H, T, error_device_);
    }
  }

  // --- KV bytes

  void kv_write(KvArena& arena, std::span<const int64_t> slots, const Tensor& k, const Tensor& v) override {
    CudaKvArena& a = own(arena, "kv_write");
    const kv::LayerSpec& spec = a.spec();
    const int64_t T = int64_t(slots.size()), width = int64_t(spec.kv_heads) * spec.head_dim;
    for (const Tensor* t : {&k, &v}) {
      require_here(*t, "kv_write: K/V");
      ROWLM_REQUIRE(t->dtype() == DType::F32 && t->numel() == T * width,
                    "kv_write: K and V must be f32 [" + std::to_string(T) + ", " + std::to_string(width) + "], got " +
                        describe(*t));
    }
    check_kv_slots(a, slots, "kv_write");
    a.require_present(slots, "kv_write");
    if (T == 0) return;
    DeviceGuard guard(device_);
    const Tensor s = device_copy(slots);
    queue_.launch("kv_write", &cuda::kv_write, a.kernel_layout(), a.device_blocks(), s.data<int64_t>(), T, k.data<float>(), v.data<float>());
  }

  void kv_copy_blocks(KvArena& arena, std::span<const KvBlockCopy> copies) override {
    CudaKvArena& a = own(arena, "kv_copy_blocks");
    std::vector<int32_t> src, dst;
    check_kv_copies(a, copies);
    for (const KvBlockCopy& c : copies) {
      a.require_present(c.src, "kv_copy_blocks");
      a.require_present(c.dst, "kv_copy_blocks");
    }
    for (const KvBlockCopy& c : copies) {
      src.push_back(c.src);
      dst.push_back(c.dst);
    }
    if (copies.empty()) return;
    DeviceGuard guard(device_);
    const Tensor s = device_copy(std::span<const int32_t>(src)), d = device_copy(std::span<const int32_t>(dst));
    queue_.launch("kv_copy_blocks", &cuda::kv_copy_blocks, a.kernel_layout(), a.device_blocks(), s.data<int32_t>(), d.data<int32_t>(),
                         int64_t(copies.size()));
  }

  void kv_read(const KvArena& arena, std::span<const int64_t> slots, std::span<std::byte> records) override {
    const CudaKvArena& a = own(arena, "kv_read");
    const std::size_t rec = kv::token_record_bytes(a.spec());
    ROWLM_REQUIRE(records.size() == slots.size() * rec, "kv_read: " + std::to_string(slots.size()) +
                                                             " slots need " + std::to_string(slots.size() * rec) +
                                                             " bytes, got " + std::to_string(records.size()));
    check_kv_slots(a, slots, "kv_read");
    a.require_present(slots, "kv_read");
    if (slots.empty()) return;
    DeviceGuard guard(device_);
    const Tensor s = device_copy(slots);
    Tensor out = workspace_.tensor(DType::U8, {int64_t(records.size())});
    queue_.launch("kv_read", &cuda::kv_read, a.kernel_layout(), a.device_blocks(), s.data<int64_t>(), int64_t(slots.size()), out.data<uint8_t>());
    copy_to_host(out, records.data());
  }

  void kv_store(KvArena& arena, std::span<const int64_t> slots, std::span<const std::byte> records) override {
    CudaKvArena& a = own(arena, "kv_store");
    const std::size_t rec = kv::token_record_bytes(a.spec());
    ROWLM_REQUIRE(records.size() == slots.size() * rec, "kv_store: " + std::to_string(slots.size()) +
                                                             " slots need " + std::to_string(slots.size() * rec) +
                                                             " bytes, got " + std::to_string(records.size()));
    check_kv_slots(a, slots, "kv_store");
    a.require_present(slots, "kv_store");
    if (slots.empty()) return;
    DeviceGuard guard(device_);
    const Tensor s = device_copy(slots);
    Tensor in = workspace_.tensor(DType::U8, {int64_t(records.size())});
    copy_from_host(records.data(), in);
    queue_.launch("kv_store", &cuda::kv_store, a.kernel_layout(), a.device_blocks(), s.data<int64_t>(), int64_t(slots.size()), in.data<uint8_t>());
  }

  void attention(const Tensor& q, const KvArena& arena, const AttentionBatch& batch, const AttentionParams& params,
                 Tensor& out) override {
    const CudaKvArena& a = own(arena, "attention");
    const kv::LayerSpec& spec = a.spec();
    require_here(q, "attention: q");
    require_here(out, "attention: out");
    ROWLM_REQUIRE(params.num_heads > 0 && params.head_dim == spec.head_dim && params.num_heads % spec.kv_heads == 0,
                  "attention: " + std::to_string(params.num_heads) + " heads of " + std::to_string(params.head_dim) +
                      " do not fit a layer of " + std::to_string(spec.kv_heads) + " kv heads of " +
                      std::to_string(spec.head_dim));
    ROWLM_REQUIRE(params.softcap == 0.0f, "attention: the CUDA backend has no attention softcap yet");
    const int64_t T = int64_t(batch.queries.size());
    const int64_t expect = T * params.num_heads * params.head_dim;
    ROWLM_REQUIRE(q.dtype() == DType::F32 && q.numel() == expect,
                  "attention: q must be f32 [" + std::to_string(T) + ", " + std::to_string(params.num_heads) + ", " +
                      std::to_string(params.head_dim) + "], got " + describe(q));
    ROWLM_REQUIRE(out.dtype() == DType::F32 && out.numel() == expect && !overlaps(out, q),
                  "attention: out must be f32 with q's shape and separate from q, got " + describe(out));
    if (T == 0) return;
    check_attention_batch(a, batch, [&a](int32_t block) { return a.present(block); });
    const cuda::KvLayout layout = a.kernel_layout();
    // The tensor-core precision runs attention on tensor cores where the
    // layout allows (the layout alone decides: a query's bits never depend
    // on the batch), else the scalar split kernel.
    const bool on_tensor_cores = precision_ == MatmulPrecision::Bf16 && cuda::attention_mma_supports(layout);
    // (It reads q four floats at a time: a contiguous q from GPU memory, or
    // a range of its rows, always starts on 16 bytes.)
    ROWLM_REQUIRE(!on_tensor_cores || reinterpret_cast<std::uintptr_t>(q.raw()) % 16 == 0,
                  "attention: q must start on a 16-byte boundary, got " + describe(q));
    const std::size_t smem = on_tensor_cores                          ? cuda::attention_mma_smem_bytes(layout)
                             : precision_ == MatmulPrecision::Bf16 ? cuda::attention_split_smem_bytes(layout)
                                                                   : cuda::attention_smem_bytes(layout);
    ROWLM_REQUIRE(smem <= props_.sharedMemPerBlockOptin,
                  "attention: a KV block of " + std::to_string(a.block_size()) + " positions of this layer (" +
                      std::to_string(spec.head_dim) + "-wide heads, " + kv::codec_name(spec.codec) +
                      ") needs " + std::to_string(smem) + " bytes of shared memory per thread block; " +
                      props_.name + " has " + std::to_string(props_.sharedMemPerBlockOptin));
    // The block tables flattened, each query naming its table's offset and
    // its key range: one host-to-device copy, [tables | offsets | lo | hi].
    std::vector<int32_t> tables;
    std::vector<int64_t> offsets_of_table;
    for (const auto& table : batch.tables) {
      offsets_of_table.push_back(int64_t(tables.size()));
      tables.insert(tables.end(), table.begin(), table.end());
    }
    // Padded to a power of two: the copy's size, an argument of the step's
    // launches, then changes only when the tables double, so decode steps
    // repeat one launch sequence (launch_queue.h) while the rows grow.
    std::size_t padded = 16;
    while (padded < tables.size()) padded *= 2;
    tables.resize(padded, 0);
    std::vector<int64_t> ranges(std::size_t(3 * T));
    int64_t most_splits = 0;
    for (int64_t t = 0; t < T; ++t) {
      const KvKeyRange& r = batch.queries[std::size_t(t)];
      ranges[std::size_t(t)] = r.hi >= r.lo ? offsets_of_table[std::size_t(r.table)] : 0;
      ranges[std::size_t(T + t)] = r.lo;
      ranges[std::size_t(2 * T + t)] = r.hi;
      if (r.hi >= r.lo) most_splits = std::max(most_splits, r.hi / cuda::kSplitPositions - r.lo / cuda::kSplitPositions + 1);
    }
    std::vector<std::byte> packed(padded * sizeof(int32_t) + ranges.size() * sizeof(int64_t));
    std::memcpy(packed.data(), tables.data(), padded * sizeof(int32_t));
    std::memcpy(packed.data() + padded * sizeof(int32_t), ranges.data(), ranges.size() * sizeof(int64_t));
    DeviceGuard guard(device_);
    Tensor dpacked = workspace_.tensor(DType::U8, {int64_t(packed.size())});
    copy_from_host(packed.data(), dpacked);
    const auto* dranges = reinterpret_cast<const int64_t*>(dpacked.data<uint8_t>() + padded * sizeof(int32_t));
    cuda::AttentionArgs args;
    args.q = q.data<float>();
    args.out = out.data<float>();
    args.tables = reinterpret_cast<const int32_t*>(dpacked.data<uint8_t>());
    args.table_offset = dranges;
    args.lo = dranges + T;
    args.hi = dranges + 2 * T;
    args.T = T;
    args.heads = params.num_heads;
    args.scale = params.scale;
    if (precision_ != MatmulPrecision::Bf16) {
      // f32: the CPU's order, bit for bit.
      queue_.launch("attention", &cuda::attention, layout, a.device_blocks(), args);
      return;
    }
    // The tensor-core precision: the keys in fixed splits (flash-decoding).
    // A block per split while the blocks of inline mode would not fill the
    // GPU and the partials stay small (decode), else blocks walking their
    // splits; the bits are the same either way.
    int splits = 1;
    while (splits < most_splits) splits *= 2;
    const int64_t sms = props_.multiProcessorCount;
    const int groups =
        on_tensor_cores ? cuda::attention_mma_column_groups(layout, T, params.num_heads, most_splits, sms) : 1;
    const std::size_t scratch_floats =
        on_tensor_cores ? cuda::attention_mma_scratch_floats(T, params.num_heads, spec.head_dim, splits, groups)
                        : cuda::attention_split_scratch_floats(T, params.num_heads, spec.head_dim, splits);
    bool per_split = scratch_floats * sizeof(float) <= (std::size_t(128) << 20);
    if (on_tensor_cores) {
      per_split = per_split && cuda::attention_mma_inline_blocks(layout, T, params.num_heads) < sms &&
                  cuda::attention_mma_split_columns(layout, T, params.num_heads, groups) <= cuda::kAttentionArrivals;
    } else {
      const int64_t query_blocks =
          T * spec.kv_heads * cuda::attention_split_head_groups(params.num_heads, spec.kv_heads);
      // (At most kSplitHeads times query_blocks count arrivals: one per query head.)
      per_split = per_split && query_blocks < 4 * sms && query_blocks * cuda::kSplitHeads <= cuda::kAttentionArrivals;
    }
    Tensor scratch;
    if (per_split) scratch = workspace_.tensor(DType::F32, {int64_t(scratch_floats)});
    float* const scratch_data = per_split ? scratch.data<float>() : nullptr;
    int* const arrivals = static_cast<int*>(attention_arrivals_.get());
    if (on_tensor_cores) {
      queue_.launch("attention", &cuda::attention_mma, layout, a.device_blocks(), args, splits, groups, scratch_data,
                    arrivals);
    } else {
      queue_.launch("attention", &cuda::attention_split, layout, a.device_blocks(), args, splits, scratch_data,
                    arrivals);
    }
  }

 private:
  // An affine-quantized weight (weight.h) lives here as it is stored: its
  // codes, scales and biases are uploaded; the device holds bits/32 of the
  // f32 bytes. Under f32 precision the f32 kernels dequantize each element
  // as they read it (cuda::WeightRef: scale·code + bias, two roundings, as
  // quant::dequantize): its matmul is bitwise the dense f32 matmul of the
  // dequantized matrix, the CPU backend's bits. Under bf16 precision 4-, 5-,
  // 6- and 8-bit codes go to the tensor cores (gemm_affine.h: the
  // activations rounded to bf16, as for bf16 weights) wherever their shape
  // allows; 2- and 3-bit codes, and shapes that do not fit, still to the f32
  // kernels.
  Weight upload_affine(const Weight& w) {
    if (holds(w)) return w;  // prepared already
    ROWLM_REQUIRE(w.code_order == CodeOrder::Stream,
                  "prepare_weight: " + w.describe() + ": codes in another backend's order (prepare the source)");
    const quant::AffineSpec spec{w.bits, w.group_size};
    quant::check_spec(spec);
    const int64_t words = w.cols * w.bits / 32, groups = w.cols / w.group_size;
    ROWLM_REQUIRE(w.values.dtype() == DType::U32 && w.values.numel() == w.rows * words &&
                      w.scales.numel() == w.rows * groups && w.biases.numel() == w.rows * groups &&
                      w.scales.dtype() == w.biases.dtype() && is_float_storage(w.scales.dtype()),
                  "prepare_weight: " + w.describe() + ": codes, scales or biases do not match its shape");
    ROWLM_REQUIRE(w.values.device() == w.scales.device() && w.values.device() == w.biases.device(),
                  "prepare_weight: " + w.describe() + ": codes, scales and biases must be on one device");
    if (w.values.device() == device()) return w;
    ROWLM_REQUIRE(w.values.on_host(), "prepare_weight: " + w.describe() + ": an affine weight must come from the host");
    Weight out = w;
    out.values = upload(w.values);
    out.scales = upload(w.scales);
    out.biases = upload(w.biases);
    // Codes go, on the device, into the order of the kernel that will read
    // them (weight.h): the tensor cores' fragments, or the lane kernel's
    // blocks for 4- and 8-bit codes.
    const bool mma = precision_ == MatmulPrecision::Bf16 && cuda::mma16_fits(w.rows, w.cols, w.bits, w.group_size);
    const bool lanes = (w.bits == 4 || w.bits == 8) && w.cols % lanes16_block_codes(w.bits) == 0;
    if ((mma || lanes) && out.values.nbytes()) {
      DeviceGuard guard(device_);
      auto p = device_alloc(device_, out.values.nbytes(), "affine codes", queue_.released());
      auto* to = static_cast<uint32_t*>(p.get());
      if (mma)
        cuda::affine_mma16_from_stream(out.values.data<uint32_t>(), to, w.rows, w.cols, w.bits, stream_);
      else
        cuda::affine_lanes16_from_stream(out.values.data<uint32_t>(), to, w.rows, w.cols, w.bits, stream_);
      check(cudaGetLastError(), "affine codes");
      check(cudaStreamSynchronize(stream_), "affine codes");
      out.values = Tensor::view(DType::U32, out.values.shape(), p.get(), p, device());
      out.code_order = mma ? CodeOrder::Mma16 : CodeOrder::Lanes16;
    }
    return out;
  }

  // A dense (f32, bf16, f16) or affine weight whose bytes are on this device.
  bool holds(const Weight& w) const {
    if (w.values.device() != device()) return false;
    if (w.format == WeightFormat::Dense) return is_float_storage(w.values.dtype());
    return w.format == WeightFormat::Affine && w.values.dtype() == DType::U32 && w.scales.device() == device() &&
           w.biases.device() == device() && is_float_storage(w.scales.dtype()) &&
           (w.code_order == CodeOrder::Stream ||
            (w.code_order == CodeOrder::Lanes16 && (w.bits == 4 || w.bits == 8) &&
             w.cols % lanes16_block_codes(w.bits) == 0) ||
            (w.code_order == CodeOrder::Mma16 && cuda::mma16_fits(w.rows, w.cols, w.bits, w.group_size)));
  }
  // The f32 kernels' view of a weight this backend holds.
  static cuda::WeightRef weight_ref(const Weight& w) {
    cuda::WeightRef r;
    r.values = w.values.raw();
    r.cols = w.cols;
    if (w.format == WeightFormat::Affine) {
      r.scales = w.scales.raw();
      r.biases = w.biases.raw();
      r.storage = storage_of(w.scales.dtype());
      r.bits = w.bits;
      r.group_size = w.group_size;
      r.order = w.code_order == CodeOrder::Lanes16 ? cuda::kLanes16Order
                : w.code_order == CodeOrder::Mma16   ? cuda::kMma16Order
                                                     : cuda::kStreamOrder;
    } else {
      r.storage = storage_of(w.values.dtype());
    }
    return r;
  }

  // rope's checks and the kernel's view of the shapes.
  struct RopeArgs {
    CudaRopeTable* table = nullptr;
    int64_t T = 0, heads = 0, half = 0;
  };
  RopeArgs rope_args(const Tensor& x, const Tensor& positions, RopeTable& rope_table, const std::string& op) const {
    auto* table = dynamic_cast<CudaRopeTable*>(&rope_table);
    ROWLM_REQUIRE(table != nullptr, op + ": the table belongs to another backend");
    const int64_t hd = table->head_dim(), half = hd / 2, T = positions.numel();
    require_here(x, (op + ": x").c_str());
    require_here(positions, (op + ": positions").c_str());
    ROWLM_REQUIRE(positions.dtype() == DType::I32 && positions.rank() == 1,
                  op + ": positions must be i32 [T], got " + describe(positions));
    const bool shape_ok = x.rank() == 3 ? x.dim(2) == hd : x.rank() == 2 && x.dim(1) % hd == 0;
    ROWLM_REQUIRE(x.dtype() == DType::F32 && shape_ok && x.dim(0) == T,
                  op + ": x must be f32 [" + std::to_string(T) + ", heads, " + std::to_string(hd) +
                      "] (or [T, heads·head_dim]), got " + describe(x));
    ROWLM_REQUIRE(T == 0 || table->reserved() > 0, op + ": the table reserved no positions");
    return {table, T, T == 0 ? 0 : x.numel() / (T * hd), half};
  }

  // rms_norm's and add_rms_norm's checks, and the kernel's view of the weight.
  struct NormArgs {
    const void* g = nullptr;
    Storage gs = Storage::F32;
    int norm = 0;
    int64_t rows = 0, D = 0;
  };
  NormArgs norm_args(const Tensor& x, const Tensor* w, NormKind kind, const Tensor& y, const std::string& op) const {
    require_here(x, (op + ": x").c_str());
    require_here(y, (op + ": y").c_str());
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() >= 1 && x.dim(-1) > 0,
                  op + ": x must be f32 [..., D] with D > 0, got " + describe(x));
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.shape() == x.shape(),
                  op + ": y must be f32 " + shape_str(x.shape()) + ", got " + describe(y));
    NormArgs a;
    a.D = x.dim(-1);
    a.rows = x.numel() / a.D;
    if (kind != NormKind::NoScale) {
      ROWLM_REQUIRE(w != nullptr, op + ": this norm kind needs a weight");
      require_here(*w, (op + ": weight").c_str());
      ROWLM_REQUIRE(w->numel() == a.D && is_float_storage(w->dtype()),
                    op + ": weight must be f32, bf16 or f16 with " + std::to_string(a.D) + " entries, got " +
                        describe(*w));
      a.g = w->raw();
      a.gs = storage_of(w->dtype());
    }
    a.norm = kind == NormKind::Plain ? 0 : kind == NormKind::OnePlus ? 1 : 2;
    return a;
  }

  void check_matmul(const Tensor& x, const Weight& w, const Tensor& y) const {
    require_here(x, "matmul: x");
    require_here(y, "matmul: y");
    ROWLM_REQUIRE(x.dtype() == DType::F32 && x.rank() == 2, "matmul: x must be f32 [M, K], got " + describe(x));
    ROWLM_REQUIRE(holds(w), "matmul: w must be a dense (f32, bf16, f16) or affine weight of this backend, got " +
                                w.describe());
    const int64_t M = x.dim(0), K = x.dim(1), N = w.rows;
    ROWLM_REQUIRE(w.cols == K, "matmul: w " + w.describe() + " does not match x " + describe(x) + " in K");
    ROWLM_REQUIRE(y.dtype() == DType::F32 && y.rank() == 2 && y.dim(0) == M && y.dim(1) == N,
                  "matmul: y must be f32 [" + std::to_string(M) + ", " + std::to_string(N) + "], got " + describe(y));
    ROWLM_REQUIRE(!overlaps(y, x) && !overlaps(y, w.values), "matmul: y must not overlap x or w");
  }
  // matmul_each's and rms_norm_matmul_each's checks (every pair as matmul
  // checks it, outputs apart); whether the products go out as one tensor-core
  // launch: at least `least` and at most GemmOutputs::kMax bf16 weights.
  bool one_launch(const Tensor& x, std::span<const Weight* const> w, std::span<Tensor* const> y, std::size_t least,
                  const char* op) const {
    ROWLM_REQUIRE(w.size() == y.size(), std::string(op) + ": " + std::to_string(w.size()) + " weights but " +
                                            std::to_string(y.size()) + " outputs");
    bool together = w.size() >= least && w.size() <= std::size_t(cuda::GemmOutputs::kMax);
    for (std::size_t i = 0; i < w.size(); ++i) {
      check_matmul(x, *w[i], *y[i]);
      together = together && on_tensor_cores(*w[i]);
      for (std::size_t j = 0; j < i; ++j)
        ROWLM_REQUIRE(!overlaps(*y[i], *y[j]), std::string(op) + ": outputs must not overlap");
    }
    return together;
  }
  // Tensor cores (gemm_bf16.h): bf16 activations, f32 accumulation, one
  // summation order for every M. f32 and f16 weights keep the f32 path.
  bool on_tensor_cores(const Weight& w) const {
    return precision_ == MatmulPrecision::Bf16 && w.values.dtype() == DType::BF16;
  }
  static cuda::GemmOutputs outputs_of(std::span<const Weight* const> w, std::span<Tensor* const> y) {
    cuda::GemmOutputs outs;
    for (std::size_t i = 0; i < w.size(); ++i) {
      outs.w[i] = w[i]->values.data<uint16_t>();
      outs.y[i] = y[i]->data<float>();
      outs.n[i] = w[i]->rows;
    }
    outs.count = int64_t(w.size());
    return outs;
  }
  // x rounded to bf16 once, then every output in one launch.
  void gemm_bf16(const Tensor& x, const cuda::GemmOutputs& outs) {
    const int64_t M = x.dim(0), K = x.dim(1);
    Tensor xb = workspace_.tensor(DType::BF16, {M, K});
    queue_.launch("round_to_bf16", &cuda::round_to_bf16, x.data<float>(), xb.data<uint16_t>(), M * K);
    gemm_bf16_rounded(xb, outs);
  }
  // xb: the activations already rounded to bf16 [M, K].
  void gemm_bf16_rounded(const Tensor& xb, const cuda::GemmOutputs& outs) {
    const int64_t M = xb.dim(0), K = xb.dim(1);
    const std::size_t scratch_bytes = cuda::gemm_bf16_scratch_bytes(M, outs, K, gemm_gpu_);
    Tensor scratch;
    if (scratch_bytes) scratch = workspace_.tensor(DType::F32, {int64_t(scratch_bytes / sizeof(float))});
    void (*launcher)(const uint16_t*, const cuda::GemmOutputs&, int64_t, int64_t, float*, int*, cuda::GemmGpu,
                     cudaStream_t) = &cuda::gemm_bf16;
    queue_.launch("gemm_bf16", launcher, static_cast<const uint16_t*>(xb.data<uint16_t>()), outs, M, K,
                  scratch_bytes ? scratch.data<float>() : nullptr, static_cast<int*>(gemm_arrivals_.get()),
                  gemm_gpu_);
  }

  void require_here(const Tensor& t, const char* what) const {
    ROWLM_REQUIRE(t.device() == device(), std::string(what) + " must be on " + device().name() + ", got " + describe(t));
  }

  // Index tensors are checked by the kernels that read them (an index out of
  // range reads nothing and raises the error flag, reported at the next
  // synchronisation); here only their type and size.
  void require_indices(const Tensor& t, int64_t count, const char* op) const {
    require_here(t, op);
    ROWLM_REQUIRE(t.dtype() == DType::I32 && t.numel() == count,
                  std::string(op) + ": indices must be i32 [" + std::to_string(count) + "], got " + describe(t));
  }

  // Waits for the stream, then reports an index error a kernel raised since
  // the last synchronisation (the step's results are not to be used then).
  void synchronize(const char* what) {
    queue_.submit();
    check(cudaStreamSynchronize(stream_), what);
    const int code = *error_host_;
    if (code == cuda::kNoError) return;
    *error_host_ = cuda::kNoError;
    const char* op = code == cuda::kEmbedIndex     ? "embed: a token id is outside the table"
                     : code == cuda::kGatherIndex  ? "gather_rows: a row index is outside src"
                     : code == cuda::kScatterIndex ? "scatter_add_rows: a row index is outside dst"
                                                   : "rope: a position is beyond what the table reserved";
    throw Error(std::string(op) + " (found by the GPU kernel; reported at " + what + ")");
  }

  template <class T>
  std::vector<T> download(const Tensor& t) {
    std::vector<T> out(std::size_t(t.numel()));
    copy_to_host(t, out.data());
    return out;
  }

  template <class T>
  Tensor device_copy(std::span<const T> host) {
    constexpr DType dt = sizeof(T) == 8 ? DType::I64 : DType::I32;
    Tensor t = workspace_.tensor(dt, {int64_t(host.size())});
    copy_from_host(host.data(), t);
    return t;
  }


  // Lets this GPU read `other`'s memory directly (peer copies then take the
  // link instead of host memory), once per pair; where the hardware cannot,
  // cudaMemcpyPeerAsync stages the copies itself. Called with this device current.
  void enable_peer_access(int other) {
    if (std::find(peers_tried_.begin(), peers_tried_.end(), other) != peers_tried_.end()) return;
    peers_tried_.push_back(other);
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device_, other) != cudaSuccess || !can) {
      cudaGetLastError();
      return;
    }
    const cudaError_t e = cudaDeviceEnablePeerAccess(other, 0);
    // Already on (another backend of this GPU enabled it): as good.
    if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    else check(e, "cudaDeviceEnablePeerAccess");
  }

  static CudaKvArena& own(KvArena& arena, const char* op) {
    auto* a = dynamic_cast<CudaKvArena*>(&arena);
    ROWLM_REQUIRE(a != nullptr, std::string(op) + ": the KV arena belongs to another backend");
    return *a;
  }
  static const CudaKvArena& own(const KvArena& arena, const char* op) { return own(const_cast<KvArena&>(arena), op); }

  int device_;
  MatmulPrecision precision_;
  cudaDeviceProp props_{};
  cuda::GemmGpu gemm_gpu_;  // what gemm_bf16 weighs of this GPU
  // The stream outlives the queue (whose graphs run on it): declared first.
  struct StreamDeleter {
    int device;
    void operator()(cudaStream_t s) const {
      int previous = 0;
      cudaGetDevice(&previous);
      cudaSetDevice(device);
      cudaStreamDestroy(s);
      cudaSetDevice(previous);
    }
  };
  static std::unique_ptr<CUstream_st, StreamDeleter> new_stream(int device) {
    DeviceGuard guard(device);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return {s, StreamDeleter{device}};
  }
  std::unique_ptr<CUstream_st, StreamDeleter> owned_stream_;
  cudaStream_t stream_ = nullptr;
  LaunchQueue queue_;
  Workspace workspace_;
  PinnedStaging staging_;
  std::shared_ptr<PinnedOutputPool> outputs_ = PinnedOutputPool::create();
  std::shared_ptr<void> sink_;
  std::shared_ptr<void> gemm_arrivals_;
  std::shared_ptr<void> attention_arrivals_;
  std::shared_ptr<int> error_host_;
  int* error_device_ = nullptr;
  std::vector<int> peers_tried_;  // GPUs enable_peer_access was tried for
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options) {
  const int count = cuda_device_count();
  if (index >= count)
    throw Error("device 'cuda:" + std::to_string(index) + "': " +
                (count == 0 ? std::string("no CUDA device (or driver) is available")
                            : "only " + std::to_string(count) + " CUDA device(s) are present"));
  if (options.matmul_precision == MatmulPrecision::Int8)
    throw Error("device 'cuda:" + std::to_string(index) +
                "': matmul precision int8 runs on the CPU only (--device cpu); the GPU takes f32, bf16 or auto");
  return std::make_unique<CudaBackend>(index, options);
}

}  // namespace rowlm

#undef ROWLM_REQUIRE
