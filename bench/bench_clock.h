#pragma once
// Clocks for the benchmark programs.

#include <chrono>
#include <ctime>

namespace rowlm::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: on a shared machine it ignores the time
// other processes hold the core (single-threaded measurements only).
inline double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace rowlm::bench
