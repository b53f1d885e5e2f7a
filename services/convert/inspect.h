// `zipmoe inspect`: summarises a compressed directory from its manifest (no decoding).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/checkpoint/manifest.h"
#include "common/status.h"

namespace zipmoe::convert {

// One JSON object with: arch, codec, level, shards, n_layers, n_experts, tensors (expert tensors),
// dense_tensors, chunks, expert_bytes_raw (original bytes, any dtype), expert_bytes_stored (sum of chunk
// sizes, no padding), e_bytes_stored, sm_bytes_stored, experts_file_bytes (with 4 KiB alignment
// padding), ratio (stored/raw), e_bits_per_value (8·E bytes/values), exponent_entropy_bits (Shannon
// entropy of all expert exponent bytes), entropy_bound_ratio (Σ_dtype values·(SM bits + H_dtype) / raw
// bits; (H + 8)/16 when all experts are BF16), file_ratio (experts_file_bytes/raw), dtypes [{dtype,
// tensors, values, raw_bytes, stored_bytes, e_bytes_stored, sm_bytes_stored, ratio, sm_bits_per_value,
// exponent_entropy_bits, entropy_bound_ratio = (SM plane bits + H_dtype) / raw bits (common/bitfield.h SmPlaneBitsPerValue, RawBitsPerValue)}] one per expert
// dtype present, per_layer [{layer_id, experts, raw, stored}].
nlohmann::json InspectManifest(const Manifest& manifest);

// Reads DIR/manifest.bin (errors as ReadManifest) and summarises it.
Result<nlohmann::json> InspectCompressed(const std::string& dir);

}  // namespace zipmoe::convert
