#pragma once
// The CUDA backend's launches on its stream: issued at once, or, inside a
// deferred window (a forward step), recorded and submitted together, with a
// sequence seen before replayed as one CUDA graph.
//
// A decode step issues about fifty small kernels per layer. Launched one by
// one, each costs the host several microseconds, about what the kernel
// itself takes, so the GPU waits on the host. Inside a window, launch()
// records the launcher and its arguments instead; submit() issues the
// sequence. A sequence whose every launch equals (launcher and argument
// values) one submitted before is captured into a CUDA graph on its second
// occurrence and replayed from then on: one launch for the whole step.
//
// Why a replay is exact: a graph issues the recorded launches with the
// recorded arguments in the recorded order, which is what issuing them one
// by one does. What changes from step to step (token ids, positions, KV
// slots, block tables) is data the launches read from memory: host data is
// staged in pinned memory and copied by a recorded copy, whose addresses,
// like the workspace's, repeat when the step's shapes repeat. Any argument
// that differs (a pointer, a size, a scalar) makes a different sequence.
// So replays change neither results nor batch invariance.
//
// Freed memory: equal addresses are not enough. A graph's copy and memset
// nodes hold what the driver resolved about their memory when the graph was
// made; once that memory is freed, replaying them, even after an allocation
// at the same address, reads freed driver state (a segfault inside
// cudaGraphLaunch, seen on a q8 swap schedule after the pinned staging was
// coalesced). So every allocation a launch may reference is freed through
// released(): the next submit() then destroys every graph and forgets every
// sequence seen, and capture starts over from the memory that now exists.
//
// Errors: an argument error or a failed launch is reported (rowlm::Error
// naming the operation) by launch() outside a window and by submit()
// inside one; after an error the rest of the sequence is dropped.
//
// Profiling: with set_profiling(true) every launch runs eagerly between two
// events and its GPU time is added to its name's total (profile()). No graph
// is replayed then (a graph's nodes cannot be timed one by one), so a
// profiled step pays the host's launch cost; what it measures is the GPU
// time of each kind of launch, which a replay does not change.
//
// Threads: one caller at a time (the backend's).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <memory>
#include <map>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace rowlm::cuda {

class LaunchQueue {
 public:
  LaunchQueue(int device, cudaStream_t stream);
  ~LaunchQueue();
  LaunchQueue(const LaunchQueue&) = delete;
  LaunchQueue& operator=(const LaunchQueue&) = delete;

  // fn(args..., stream): a kernel launcher, cudaMemcpyAsync or
  // cudaMemsetAsync. Arguments are copied (trivially copyable values).
  template <class Fn, class... A>
  void launch(const char* what, Fn* fn, const A&... args) {
    auto call = [fn, args...](cudaStream_t s) { return fn(args..., s); };
    using Call = decltype(call);
    static_assert(std::is_trivially_copyable_v<Call> && alignof(Call) <= kAlign,
                  "launch arguments must be trivially copyable values");
    if (depth_ == 0) {
      timed(what, [&] { check(result_of(call, stream_), what); });
      return;
    }
    const std::size_t key_start = keys_.size();
    keys_.push_back(reinterpret_cast<uintptr_t>(&invoke<Call>));
    keys_.push_back(reinterpret_cast<uintptr_t>(fn));
    (append_key(args), ...);
    const std::size_t offset = (bytes_.size() + kAlign - 1) / kAlign * kAlign;
    bytes_.resize(offset + sizeof(Call));
    std::memcpy(bytes_.data() + offset, &call, sizeof(Call));
    commands_.push_back({&invoke<Call>, what, offset, key_start});
  }

  // Opens (or nests) a window: launches until the matching submit_and_close()
  // are recorded.
  void open();
  // Issues what was recorded; the window stays open.
  void submit();
  // submit(), then closes one level of window.
  void submit_and_close();
  // Forgets what was recorded (nothing of it runs) and closes one level.
  void drop_and_close();
  bool deferring() const { return depth_ > 0; }

  // Counts frees of memory that launches may reference: the deleter of every
  // such allocation increments it (from any thread; it may outlive the queue).
  using ReleaseCounter = std::shared_ptr<std::atomic<uint64_t>>;
  const ReleaseCounter& released() const { return released_; }

  // How recorded sequences were issued (for tests and benchmarks).
  struct Stats {
    int64_t sequences = 0;  // non-empty submits
    int64_t captured = 0;   // of which captured into a new graph
    int64_t replayed = 0;   // of which replayed from a graph
    int64_t launches = 0;   // launches recorded in all of them
    int64_t forgotten = 0;  // times every graph was dropped after a free
  };
  const Stats& stats() const { return stats_; }

  // GPU time per launch name while profiling (see above).
  struct OpTime {
    int64_t launches = 0;
    double seconds = 0;
  };
  void set_profiling(bool on);
  bool profiling() const { return profiling_; }
  const std::map<std::string, OpTime>& profile() const { return profile_; }
  void clear_profile() { profile_.clear(); }
  // Runs f (work it puts on the stream, e.g. a copy) and, while profiling,
  // adds its GPU time to `what`'s total; waits for it then.
  template <class F>
  void timed(const char* what, F&& f) {
    if (!profiling_) {
      f();
      return;
    }
    record_event(0);
    f();
    record_event(1);
    add_times({what}, 1);
  }

 private:
  static constexpr std::size_t kAlign = 16;
  using Invoke = cudaError_t (*)(const std::byte*, cudaStream_t);
  struct Command {
    Invoke invoke;
    const char* what;
    std::size_t offset;     // of the closure in bytes_
    std::size_t key_start;  // of its key words in keys_
  };
  struct Graph {
    std::vector<uint64_t> keys;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_used = 0;
  };

  template <class Call>
  static cudaError_t result_of(const Call& call, cudaStream_t s) {
    if constexpr (std::is_same_v<std::invoke_result_t<const Call&, cudaStream_t>, cudaError_t>) {
      return call(s);
    } else {
      call(s);
      return cudaGetLastError();
    }
  }
  template <class Call>
  static cudaError_t invoke(const std::byte* p, cudaStream_t s) {
    return result_of(*std::launder(reinterpret_cast<const Call*>(p)), s);
  }

  // A key word per scalar or pointer; a struct by its bytes (padding, if a
  // struct had any, could only make equal launches look different).
  template <class T>
  void append_key(const T& v) {
    if constexpr (std::is_pointer_v<T>) {
      keys_.push_back(reinterpret_cast<uintptr_t>(v));
    } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
      keys_.push_back(uint64_t(v));
    } else if constexpr (std::is_same_v<T, float>) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      keys_.push_back(bits);
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "launch arguments must be trivially copyable");
      const std::size_t words = (sizeof(T) + 7) / 8;
      const std::size_t at = keys_.size();
      keys_.resize(at + words, 0);
      std::memcpy(keys_.data() + at, &v, sizeof(T));
    }
  }

  void run_eagerly();
  void run_profiled();
  // Event i of the reused pool, recorded now on the stream.
  void record_event(std::size_t i);
  // Waits for the events and adds event 2j → 2j+1 to whats[j]'s total.
  void add_times(const std::vector<const char*>& whats, std::size_t pairs);
  bool run_graph(uint64_t hash);
  void forget_graphs_if_memory_was_freed();
  void clear();

  int device_;
  cudaStream_t stream_;
  int depth_ = 0;
  std::vector<Command> commands_;
  std::vector<std::byte> bytes_;
  std::vector<uint64_t> keys_;
  std::unordered_map<uint64_t, Graph> graphs_;        // by the hash of their keys
  std::unordered_map<uint64_t, uint32_t> seen_once_;  // hashes submitted once, not yet captured
  uint64_t clock_ = 0;
  ReleaseCounter released_ = std::make_shared<std::atomic<uint64_t>>(0);
  uint64_t released_seen_ = 0;  // released_'s value when the graphs were last checked
  Stats stats_;
  bool profiling_ = false;
  std::vector<cudaEvent_t> events_;
  std::map<std::string, OpTime> profile_;
};

}  // namespace rowlm::cuda
