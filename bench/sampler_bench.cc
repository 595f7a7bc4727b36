// The sampler's cost per row on a Gemma-sized vocabulary (262,144 logits),
// as JSON: greedy, plain temperature, top-k, top-p, min-p and penalties,
// each against a ceiling measured in the same run: one pass that reads the
// row (max_value's cost; every sampling mode must read the row at least
// once). Single-threaded, timed in thread CPU time (a shared machine's other
// tenants do not count), median of the repetitions.
//
//   sampler_bench [--vocab N] [--reps N]

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "backend/cpu/kernels.h"
#include "core/isa.h"
#include "sampling/sampler.h"

namespace rowlm {
namespace {

// A logits row shaped like a language model's: a few likely tokens over a
// long tail (normal scores plus a handful of large ones).
std::vector<float> make_row(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> row(std::size_t(vocab), 0.0f);
  for (float& x : row) x = dist(rng);
  for (int i = 0; i < 8; ++i) row[std::size_t(rng() % uint32_t(vocab))] = 14.0f + float(i);
  return row;
}

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double start = bench::thread_cpu_s();
    f(r);
    t.push_back(bench::thread_cpu_s() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace
}  // namespace rowlm

int main(int argc, char** argv) {
  using namespace rowlm;
  int64_t vocab = 262144;
  int reps = 51;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--vocab" && i + 1 < argc) vocab = std::atoll(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: sampler_bench [--vocab N] [--reps N]\n");
      return 2;
    }
  }
  if (vocab < 16 || reps < 1) {
    std::fprintf(stderr, "sampler_bench: --vocab must be at least 16 and --reps at least 1\n");
    return 2;
  }
  std::vector<std::vector<float>> rows;
  for (uint32_t s = 0; s < 4; ++s) rows.push_back(make_row(vocab, s + 1));

  // The ceiling: one read of the row with the CPU kernels' vector loads (the
  // read-bandwidth probe), the least any mode does.
  const cpu::Kernels& kernels = cpu::kernels_for(cpu::isa_from_env());
  volatile uint64_t sink = 0;
  const double one_pass = median_seconds(reps, [&](int r) {
    // The probe reads whole aligned 64-byte lines: the row's, less its ragged ends.
    const auto& row = rows[std::size_t(r) % rows.size()];
    const auto begin = (reinterpret_cast<std::uintptr_t>(row.data()) + 63) / 64 * 64;
    const auto end = reinterpret_cast<std::uintptr_t>(row.data() + row.size()) / 64 * 64;
    sink = sink + kernels.stream_read(reinterpret_cast<const void*>(begin), end - begin);
  });

  struct Mode {
    const char* name;
    sampling::SamplingParams params;
  };
  std::vector<Mode> modes;
  auto add = [&](const char* name, auto edit) {
    sampling::SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 1;
    edit(p);
    modes.push_back({name, p});
  };
  add("greedy", [](sampling::SamplingParams& p) { p.temperature = 0.0f; });
  add("temperature", [](sampling::SamplingParams&) {});
  add("top_k_40", [](sampling::SamplingParams& p) { p.top_k = 40; });
  add("top_p_0.9", [](sampling::SamplingParams& p) { p.top_p = 0.9f; });
  add("min_p_0.05", [](sampling::SamplingParams& p) { p.min_p = 0.05f; });
  add("penalties", [](sampling::SamplingParams& p) {
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.5f;
  });
  add("logprobs_5", [](sampling::SamplingParams& p) { p.logprobs = 5; });

  std::vector<int32_t> prompt(512);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919) % std::size_t(vocab));
  std::printf("{\"vocab\": %lld, \"reps\": %d, \"one_pass_us\": %.1f, \"modes\": [", (long long)vocab, reps,
              one_pass * 1e6);
  for (std::size_t i = 0; i < modes.size(); ++i) {
    sampling::Sampler sampler(modes[i].params, vocab, prompt);
    int64_t checksum = 0;
    const double s = median_seconds(reps, [&](int r) {
      checksum += sampler.sample(rows[std::size_t(r) % rows.size()]).token;
    });
    std::printf("%s\n  {\"mode\": \"%s\", \"us_per_row\": %.1f, \"passes_of_the_ceiling\": %.1f, \"checksum\": %lld}",
                i ? "," : "", modes[i].name, s * 1e6, s / one_pass, (long long)checksum);
  }
  std::printf("\n]}\n");
  return sink == 12345 ? 1 : 0;
}
