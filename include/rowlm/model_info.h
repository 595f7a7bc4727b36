#pragma once
// What commands, the engine and its users need to know about a loaded model.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rowlm {

struct ModelInfo {
  std::string architecture;   // config.json's model_type, e.g. "gemma4_text", "qwen3"
  std::string directory;
  std::string device;         // the backend it runs on, e.g. "cpu (avx512, 16 threads)", "cuda:0 (NVIDIA H200, sm_90)"
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int tensor_parallel = 1;    // shards each layer is split over (EngineOptions::tensor_parallel)
  int max_position = 0;       // 0 = unknown
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  int64_t parameter_count = 0;
  std::size_t weight_bytes = 0;
};

}  // namespace rowlm
