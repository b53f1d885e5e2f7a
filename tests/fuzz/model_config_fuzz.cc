// libFuzzer target: config.json through ParseModelConfig (input that is not JSON is dropped). A
// config that parses has its derived sizes and per-layer predicates evaluated.
#include <cstddef>
#include <cstdint>

#include "common/checkpoint/model_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto json = zipmoe::fuzz::ParseJsonOrNull(data, size);
  if (!json) return 0;
  auto config = zipmoe::ParseModelConfig(*json, "fuzz/config.json");
  if (!config.ok()) return 0;
  volatile double sink = config->softmax_scale() + config->rope_dim() + config->q_head_dim() + config->v_dim();
  for (int64_t layer = 0; layer < config->num_hidden_layers && layer < 1024; ++layer)
    sink = sink + config->IsMoeLayer(layer);
  sink = sink + config->IsEos(0);
  (void)sink;
  return 0;
}
