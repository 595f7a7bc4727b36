// KV benchmark: prints one JSON object.
//   bytes_per_token  per codec for Gemma-like layers, and the ratio to bf16;
//   decode_attention one query per row over context T, per codec, and the
//                    speed relative to bf16 blocks at the same context;
//   join_retire      cost of a row joining (restore / fork / attach) and
//                    retiring while other rows hold 0 .. 32K tokens each;
//   precision_switch cost of re-encoding a row bf16 -> q8:64 / q4:64
//                    (KvCache::switch_precision), per stored token.
// Usage: kv_bench [--quick | --decode [THREADS,... [CONTEXTS,...]]]
//   --decode: decode_attention alone for the given thread counts (default
//             1,2) and contexts (default 1024,4096): A/B runs of the
//             attention kernels without the other sections.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "bench_clock.h"
#include "core/isa.h"
#include "kv/kv_cache.h"
#include "kv/row_cache.h"

using namespace rowlm;
using namespace rowlm::kv;

using bench::now_s;
using bench::thread_cpu_s;

namespace {

// Best (least disturbed) seconds per call over `reps` batches of `inner` calls.
double time_per_call(const std::function<void()>& fn, int reps, int inner, bool cpu_time = false) {
  fn();  // warm
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_time ? thread_cpu_s() : now_s();
    for (int i = 0; i < inner; ++i) fn();
    best = std::min(best, ((cpu_time ? thread_cpu_s() : now_s()) - t0) / inner);
  }
  return best;
}

LayerSpec spec(int kv_heads, int head_dim, int window, const std::string& codec) {
  LayerSpec s;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.window = window;
  s.codec = parse_codec(codec);
  return s;
}

// Fills `rows` rows with `tokens` tokens each of pseudo-random K/V.
void fill(KvCache& c, const std::vector<RowId>& rows, int64_t tokens) {
  const int chunk = 256;
  std::vector<float> k, v;
  uint64_t s = 1;
  for (RowId r : rows) {
    int64_t done = 0;
    while (done < tokens) {
      const int32_t n = int32_t(std::min<int64_t>(chunk, tokens - done));
      c.begin_step({&r, 1}, {&n, 1});
      for (int l = 0; l < c.num_layers(); ++l) {
        const LayerSpec& ls = c.layer(l);
        const std::size_t per = std::size_t(ls.kv_heads) * ls.head_dim * std::size_t(n);
        k.resize(per);
        v.resize(per);
        for (std::size_t i = 0; i < per; ++i) {
          s = s * 6364136223846793005ull + 1442695040888963407ull;
          k[i] = float(int64_t(s >> 40) - (1 << 23)) / float(1 << 23);
          v[i] = float(int64_t((s >> 20) & 0xfffff) - (1 << 19)) / float(1 << 19);
        }
        const Shape shape = {n, int64_t(ls.kv_heads) * ls.head_dim};
        const TokenRun run{r, done, n};
        c.write(l, {&run, 1}, Tensor::view(DType::F32, shape, k.data(), nullptr),
                Tensor::view(DType::F32, shape, v.data(), nullptr));
      }
      c.end_step();
      done += n;
    }
  }
}

std::string bytes_per_token_json(Backend& be) {
  std::string out = "{";
  bool first = true;
  for (const char* codec : {"f32", "bf16", "f16", "q8:64", "q4:64", "q8:32", "q4:32", "q4:128"}) {
    KvCache c({{spec(1, 256, 512, codec), spec(1, 512, 0, codec)}, 16, 0, 0}, be);
    KvCache ref({{spec(1, 256, 512, "bf16"), spec(1, 512, 0, "bf16")}, 16, 0, 0}, be);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s\"%s\": {\"hd256\": %zu, \"hd512\": %zu, \"ratio_to_bf16\": %.4f}",
                  first ? "" : ", ", codec, c.bytes_per_token(0), c.bytes_per_token(1),
                  double(c.bytes_per_token()) / double(ref.bytes_per_token()));
    out += buf;
    first = false;
  }
  return out + "}";
}

struct DecodeConfig {
  const char* name;
  int heads, kv_heads, head_dim;
};

std::string decode_json(bool quick, const std::vector<int>& thread_counts = {1, 2},
                        const std::vector<int64_t>& decode_contexts = {}) {
  const std::vector<DecodeConfig> configs = {{"gemma4_e2b_sliding_gqa8", 8, 1, 256},
                                             {"gemma4_full_hd512_gqa8", 8, 1, 512},
                                             {"mha_8x128", 8, 8, 128}};
  const std::vector<int64_t> contexts = !decode_contexts.empty() ? decode_contexts
                                        : quick                    ? std::vector<int64_t>{1024}
                                                                   : std::vector<int64_t>{1024, 4096, 16384};
  const std::vector<const char*> codecs = {"bf16", "q8:64", "q4:64", "f16", "f32"};
  std::string out = "[";
  bool first_entry = true;
  for (const DecodeConfig& cfg : configs) {
    for (int64_t T : contexts) {
      for (int R : {1, 8}) {
        if (T * R > 65536) continue;  // keep the run short
        // For each thread count (a backend of its own), every codec's cache
        // is built first; timings then rotate through the codecs so that
        // machine noise hits them alike. Single-thread runs are timed in
        // thread CPU time, multi-thread runs in wall time.
        for (int threads : thread_counts) {
          const auto backend = make_cpu_backend(threads);
          std::vector<std::unique_ptr<KvCache>> caches;
          std::vector<std::vector<AttentionQuery>> queries;
          for (const char* codec : codecs) {
            caches.push_back(
                std::make_unique<KvCache>(CacheOptions{{spec(cfg.kv_heads, cfg.head_dim, 0, codec)}, 16, 0, 0}, *backend));
            std::vector<RowId> rows;
            for (int i = 0; i < R; ++i) rows.push_back(caches.back()->create_row());
            fill(*caches.back(), rows, T);
            queries.emplace_back();
            for (RowId r : rows) queries.back().push_back({r, T - 1});
          }
          std::vector<float> q(std::size_t(R) * cfg.heads * cfg.head_dim), out_buf(q.size());
          for (std::size_t i = 0; i < q.size(); ++i) q[i] = float(int(i % 17) - 8) * 0.03f;
          const AttentionParams p{cfg.heads, cfg.head_dim, 0, 1.0f, 0.0f};
          const Shape qs = {R, int64_t(cfg.heads) * cfg.head_dim};
          const Tensor qt = Tensor::view(DType::F32, qs, q.data(), nullptr);
          Tensor ot = Tensor::view(DType::F32, qs, out_buf.data(), nullptr);
          std::vector<double> best(codecs.size(), 1e30);
          for (int round = 0; round < (quick ? 3 : 6); ++round)
            for (std::size_t c = 0; c < codecs.size(); ++c) {
              const double kv_bytes = double(caches[c]->bytes_per_token(0)) * double(T) * R;
              const int inner = std::clamp(int(3e7 / (kv_bytes + 1)), 2, 100);
              best[c] = std::min(best[c], time_per_call([&] { caches[c]->attend(0, queries[c], qt, p, ot); }, 1, inner,
                                                        threads == 1));
            }
          std::string per_codec;
          for (std::size_t c = 0; c < codecs.size(); ++c) {
            const double kv_bytes = double(caches[c]->bytes_per_token(0)) * double(T) * R;
            char buf[320];
            std::snprintf(buf, sizeof buf,
                          "%s\"%s\": {\"us_per_step\": %.1f, \"kv_GBps\": %.2f, \"speed_vs_bf16\": %.3f}",
                          c ? ", " : "", codecs[c], best[c] * 1e6, kv_bytes / best[c] / 1e9, best[0] / best[c]);
            per_codec += buf;
          }
          char head[256];
          std::snprintf(head, sizeof head,
                        "%s{\"config\": \"%s\", \"context\": %lld, \"rows\": %d, \"threads\": %d, \"clock\": \"%s\", ",
                        first_entry ? "" : ",\n    ", cfg.name, (long long)T, R, threads, threads == 1 ? "thread_cpu" : "wall");
          out += head;
          out += "\"codecs\": {" + per_codec + "}}";
          first_entry = false;
        }
      }
    }
  }
  return out + "]";
}

// Join (restore of a 512-token row, fork, attach of a cached prefix) and
// retire while 8 other rows hold `context` tokens each. Paged rows never move
// another row's K/V, so the cost must not grow with `context`.
std::string join_retire_json(Backend& be, bool quick) {
  const std::vector<int64_t> contexts = quick ? std::vector<int64_t>{0, 4096} : std::vector<int64_t>{0, 1024, 8192, 32768};
  std::string out = "[";
  for (std::size_t i = 0; i < contexts.size(); ++i) {
    const int64_t ctx = contexts[i];
    KvCache c({{spec(1, 64, 0, "bf16"), spec(1, 64, 512, "q4:64")}, 16, 0, std::size_t(64) << 20}, be);
    std::vector<RowId> others;
    for (int r = 0; r < 8; ++r) others.push_back(c.create_row());
    fill(c, others, ctx);
    const RowId src = c.create_row();
    fill(c, {src}, 512);
    std::vector<int32_t> tokens(512);
    for (int t = 0; t < 512; ++t) tokens[std::size_t(t)] = t * 7 % 101;
    c.retain_for_publish(src);
    c.publish(src, tokens);
    const RowCache saved = c.extract(src);
    const int reps = quick ? 5 : 9, inner = 200;
    const double restore_retire = time_per_call([&] { c.retire(c.restore(saved)); }, reps, inner, true);
    const double fork_retire = time_per_call([&] { c.retire(c.fork(src)); }, reps, inner, true);
    const double attach_retire = time_per_call(
        [&] {
          const RowId r = c.create_row();
          c.attach_prefix(r, tokens, 511);
          c.retire(r);
        },
        reps, inner, true);
    const double create_retire = time_per_call([&] { c.retire(c.create_row()); }, reps, inner * 10, true);
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%s{\"other_rows\": 8, \"other_context\": %lld, \"restore512_retire_us\": %.2f, "
                  "\"fork512_retire_us\": %.2f, \"attach511_retire_us\": %.2f, \"create_retire_us\": %.3f}",
                  i ? ",\n    " : "", (long long)ctx, restore_retire * 1e6, fork_retire * 1e6, attach_retire * 1e6,
                  create_retire * 1e6);
    out += buf;
  }
  return out + "]";
}

// switch_precision of a row of T tokens in one Gemma 4 E2B-shaped layer
// (1 kv head of 256, and the full layers' 512): restore + switch + retire
// less restore + retire, in thread CPU time.
std::string switch_json(Backend& be, bool quick) {
  std::string out = "[";
  bool first = true;
  for (int head_dim : {256, 512}) {
    for (const char* to : {"q8:64", "q4:64"}) {
      for (int64_t T : quick ? std::vector<int64_t>{1024} : std::vector<int64_t>{1024, 8192}) {
        CacheOptions o{{spec(1, head_dim, 0, "bf16")}, 16, 0, 0};
        o.precision_switch = PrecisionSwitch{T, {parse_codec(to)}};
        KvCache c(std::move(o), be);
        const RowId src = c.create_row();
        fill(c, {src}, T);
        const RowCache saved = c.extract(src);
        const int reps = quick ? 3 : 5, inner = T > 4096 ? 3 : 10;
        const double plain = time_per_call([&] { c.retire(c.restore(saved)); }, reps, inner, true);
        const double switched = time_per_call(
            [&] {
              const RowId r = c.restore(saved);
              c.switch_precision(r);
              c.retire(r);
            },
            reps, inner, true);
        char buf[300];
        std::snprintf(buf, sizeof buf,
                      "%s{\"head_dim\": %d, \"to\": \"%s\", \"tokens\": %lld, \"switch_us\": %.1f, \"ns_per_token\": %.1f}",
                      first ? "" : ",\n    ", head_dim, to, (long long)T, (switched - plain) * 1e6,
                      (switched - plain) * 1e9 / double(T));
        out += buf;
        first = false;
      }
    }
  }
  return out + "]";
}

// "1,2,16" -> {1, 2, 16}.
std::vector<int> int_list(const std::string& list) {
  std::vector<int> out;
  for (std::size_t i = 0; i < list.size();) {
    const std::size_t comma = std::min(list.find(',', i), list.size());
    out.push_back(std::stoi(list.substr(i, comma - i)));
    i = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool decode_only = argc > 1 && std::strcmp(argv[1], "--decode") == 0;
  std::printf("{\n  \"isa\": \"%s\",\n", std::string(cpu::isa_name(cpu::isa_from_env())).c_str());
  if (decode_only) {
    const auto threads = int_list(argc > 2 ? argv[2] : "1,2");
    const auto contexts = int_list(argc > 3 ? argv[3] : "1024,4096");
    std::printf("  \"decode_attention\": %s\n}\n",
                decode_json(false, threads, std::vector<int64_t>(contexts.begin(), contexts.end())).c_str());
    return 0;
  }
  const auto backend = make_cpu_backend(1);
  std::printf("  \"bytes_per_token\": %s,\n", bytes_per_token_json(*backend).c_str());
  std::fflush(stdout);
  std::printf("  \"join_retire\": %s,\n", join_retire_json(*backend, quick).c_str());
  std::fflush(stdout);
  std::printf("  \"precision_switch\": %s,\n", switch_json(*backend, quick).c_str());
  std::fflush(stdout);
  std::printf("  \"decode_attention\": %s\n}\n", decode_json(quick).c_str());
  return 0;
}
