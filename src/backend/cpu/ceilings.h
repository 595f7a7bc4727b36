#pragma once
// Hardware ceilings measured in the same run as the kernels they judge:
// what fraction of the memory bandwidth a GEMV streams, what fraction of the
// FMA peak a GEMM reaches. Both use every thread of `pool` and the widest
// ISA this CPU runs, and report the best of `repeats` runs.

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace rowlm::cpu {

// Read bandwidth in GB/s (1e9 bytes/s): all threads stream their share of
// a `bytes` buffer (far larger than the last-level cache) with vector loads.
double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes = std::size_t(1) << 30, int repeats = 3);

// f32 FMA throughput in GFLOP/s (an FMA is 2 flops): all threads run
// independent FMA chains, enough of them to hide the FMA latency, each
// `chain_length` FMAs long per run.
double measure_fma_peak(ThreadPool& pool, int repeats = 3, int64_t chain_length = int64_t(1) << 22);

// The same for bf16 pair dot products (MatmulPrecision::Bf16's inner step;
// 2 flops per multiply-add): VDPBF16PS where the CPU has it, else the
// emulation the matmul would run.
double measure_bf16_dot_peak(ThreadPool& pool, int repeats = 3, int64_t chain_length = int64_t(1) << 21);
// The same for 8-bit integer dot products (MatmulPrecision::Int8's inner
// step: VPDPBUSD, 64 multiply-adds = 128 ops an instruction), where the
// best ISA's table has them natively (Kernels::native_int8); an Error
// elsewhere.
double measure_int8_dot_peak(ThreadPool& pool, int repeats = 3, int64_t chain_length = int64_t(1) << 20);
// The same for AMX tiles (TDPBF16PS), where amx_bf16_usable(); an Error elsewhere.
double measure_amx_bf16_peak(ThreadPool& pool, int repeats = 3, int64_t chain_length = int64_t(1) << 16);

}  // namespace rowlm::cpu
