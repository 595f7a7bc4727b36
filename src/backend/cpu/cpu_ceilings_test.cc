// The ceiling probes run on every thread and report finite, positive rates;
// the rates themselves are the benchmark's business, not a unit test's.

#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/amx_bf16.h"
#include "backend/cpu/ceilings.h"
#include "core/error.h"

namespace rowlm {
namespace {

TEST(CpuCeilings, ProbesReportFinitePositiveRates) {
  ThreadPool pool(2);
  const double gbps = cpu::measure_read_bandwidth(pool, std::size_t(1) << 20, 1);
  EXPECT_TRUE(std::isfinite(gbps) && gbps > 0) << gbps;
  const double gflops = cpu::measure_fma_peak(pool, 1, 1 << 14);
  EXPECT_TRUE(std::isfinite(gflops) && gflops > 0) << gflops;
  const double bf16 = cpu::measure_bf16_dot_peak(pool, 1, 1 << 12);
  EXPECT_TRUE(std::isfinite(bf16) && bf16 > 0) << bf16;
}

TEST(CpuCeilings, RejectsDegenerateArguments) {
  ThreadPool pool(1);
  EXPECT_THROW(cpu::measure_read_bandwidth(pool, 100, 1), Error);
  EXPECT_THROW(cpu::measure_read_bandwidth(pool, std::size_t(1) << 20, 0), Error);
  EXPECT_THROW(cpu::measure_fma_peak(pool, 0), Error);
  EXPECT_THROW(cpu::measure_fma_peak(pool, 1, 0), Error);
  EXPECT_THROW(cpu::measure_bf16_dot_peak(pool, 1, 0), Error);
}

// The AMX probe where the tiles exist; a clear error where they do not.
TEST(CpuCeilings, AmxProbeRunsWhereTheTilesExistAndSaysSoElsewhere) {
  ThreadPool pool(2);
  if (!cpu::amx_bf16_usable()) {
    EXPECT_THROW(cpu::measure_amx_bf16_peak(pool, 1, 1 << 8), Error);
    return;
  }
  const double amx = cpu::measure_amx_bf16_peak(pool, 1, 1 << 8);
  EXPECT_TRUE(std::isfinite(amx) && amx > 0) << amx;
}

}  // namespace
}  // namespace rowlm
