// kv_layers_with_codecs (model.h): one reading of --kv-codec's per-layer map
// for every caller, whatever the tensor-parallel split.

#include <string>

#include "core/error.h"
#include "kvcodec/codec.h"
#include "model/model.h"

namespace rowlm {

std::vector<kv::LayerSpec> kv_layers_with_codecs(const Model& model, std::string_view codec_map) {
  std::vector<kv::LayerSpec> layers = model.kv_layers(kv::CodecSpec{});
  // A split model lists each unsplit storage layer i as layers i·N … i·N + N − 1.
  const int shards = model.info().tensor_parallel;
  ROWLM_CHECK(shards >= 1 && layers.size() % std::size_t(shards) == 0,
              "kv_layers_with_codecs: " + std::to_string(layers.size()) + " storage layers over " +
                  std::to_string(shards) + " shards");
  const std::vector<kv::CodecSpec> codecs = kv::parse_codec_map(codec_map, int(layers.size()) / shards);
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i].codec = codecs[i / std::size_t(shards)];
  return layers;
}

}  // namespace rowlm
