#include "backend/cuda/launch_queue.h"

#include <algorithm>

namespace rowlm::cuda {
namespace {

// Graphs kept at once: one per batch-size bucket of decode and of
// verification in practice; the least recently used goes first.
constexpr std::size_t kMaxGraphs = 32;
// Hashes remembered as seen once, before they are forgotten wholesale: a
// stream of one-off sequences (prefill chunks) must not grow without bound.
constexpr std::size_t kMaxSeen = 4096;

uint64_t hash_words(const std::vector<uint64_t>& words) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ words.size();
  for (uint64_t w : words) {
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h ^ (h >> 31);
}

}  // namespace

LaunchQueue::LaunchQueue(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

LaunchQueue::~LaunchQueue() {
  DeviceGuard guard(device_);
  cudaStreamSynchronize(stream_);
  for (auto& [hash, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void LaunchQueue::open() { ++depth_; }

void LaunchQueue::submit_and_close() {
  // The window closes even when the submit throws: the caller's scope ends.
  struct Close {
    int& depth;
    ~Close() { depth = std::max(0, depth - 1); }
  } close{depth_};
  submit();
}

void LaunchQueue::drop_and_close() {
  clear();
  depth_ = std::max(0, depth_ - 1);
}

void LaunchQueue::clear() {
  commands_.clear();
  bytes_.clear();
  keys_.clear();
}

void LaunchQueue::submit() {
  if (commands_.empty()) return;
  DeviceGuard guard(device_);
  ++stats_.sequences;
  stats_.launches += int64_t(commands_.size());
  const uint64_t hash = hash_words(keys_);
  try {
    forget_graphs_if_memory_was_freed();
    if (profiling_) {
      run_profiled();
    } else if (!run_graph(hash)) {
      run_eagerly();
    }
  } catch (...) {
    clear();
    throw;
  }
  clear();
}

void LaunchQueue::forget_graphs_if_memory_was_freed() {
  const uint64_t released = released_->load(std::memory_order_acquire);
  if (released == released_seen_) return;
  released_seen_ = released;
  if (graphs_.empty() && seen_once_.empty()) return;
  // A graph still running finishes first (its memory is the caller's to keep
  // until then, as for any launch on the stream).
  check(cudaStreamSynchronize(stream_), "graph release");
  for (auto& [hash, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
  graphs_.clear();
  seen_once_.clear();
  ++stats_.forgotten;
}

void LaunchQueue::run_eagerly() {
  for (const Command& c : commands_) check(c.invoke(bytes_.data() + c.offset, stream_), c.what);
}

void LaunchQueue::set_profiling(bool on) {
  if (on == profiling_) return;
  DeviceGuard guard(device_);
  check(cudaStreamSynchronize(stream_), "profiling");  // what ran before is not counted
  profiling_ = on;
}

void LaunchQueue::record_event(std::size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "profiling event");
    events_.push_back(e);
  }
  check(cudaEventRecord(events_[i], stream_), "profiling event");
}

void LaunchQueue::add_times(const std::vector<const char*>& whats, std::size_t pairs) {
  check(cudaEventSynchronize(events_[2 * pairs - 1]), "profiling");
  for (std::size_t j = 0; j < pairs; ++j) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[2 * j], events_[2 * j + 1]), "profiling");
    OpTime& t = profile_[whats[j]];
    ++t.launches;
    t.seconds += double(ms) / 1e3;
  }
}

void LaunchQueue::run_profiled() {
  std::vector<const char*> whats;
  whats.reserve(commands_.size());
  for (const Command& c : commands_) {
    record_event(2 * whats.size());
    check(c.invoke(bytes_.data() + c.offset, stream_), c.what);
    record_event(2 * whats.size() + 1);
    whats.push_back(c.what);
  }
  add_times(whats, whats.size());
}

// Replays the graph of this sequence, or captures one if the sequence was
// seen once before; false when it is to run eagerly.
bool LaunchQueue::run_graph(uint64_t hash) {
  if (auto it = graphs_.find(hash); it != graphs_.end()) {
    if (it->second.keys != keys_) return false;  // a hash collision: run it as it is
    it->second.last_used = ++clock_;
    check(cudaGraphLaunch(it->second.exec, stream_), "graph launch");
    ++stats_.replayed;
    return true;
  }
  if (seen_once_.size() >= kMaxSeen) seen_once_.clear();
  if (seen_once_[hash]++ == 0) return false;
  seen_once_.erase(hash);

  // Capture: the launches are recorded into a graph, not run.
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture");
  cudaError_t failed = cudaSuccess;
  for (const Command& c : commands_) {
    failed = c.invoke(bytes_.data() + c.offset, stream_);
    if (failed != cudaSuccess) break;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made =
      failed == cudaSuccess && ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : cudaErrorUnknown;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    // Not capturable (or a launch failed): clear the error and run the
    // sequence eagerly, where a real failure reports itself by name.
    cudaGetLastError();
    return false;
  }
  if (graphs_.size() >= kMaxGraphs) {
    auto oldest = std::min_element(graphs_.begin(), graphs_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_used < b.second.last_used; });
    check(cudaStreamSynchronize(stream_), "graph eviction");
    cudaGraphExecDestroy(oldest->second.exec);
    graphs_.erase(oldest);
  }
  Graph& g = graphs_[hash];
  g.keys = keys_;
  g.exec = exec;
  g.last_used = ++clock_;
  check(cudaGraphLaunch(exec, stream_), "graph launch");
  ++stats_.captured;
  return true;
}

}  // namespace rowlm::cuda
