#include "services/convert/inspect.h"

#include <map>
#include <set>

#include "common/bitfield.h"

namespace zipmoe::convert {

nlohmann::json InspectManifest(const Manifest& m) {
  uint64_t raw = 0, stored = 0, e_stored = 0, sm_stored = 0, values = 0, chunks = 0;
  struct LayerStats {
    std::set<int32_t> experts;
    uint64_t raw = 0, stored = 0;
  };
  std::map<int32_t, LayerStats> layers;
  for (const auto& t : m.expert_tensors) {
    raw += t.raw_bytes();
    stored += t.stored_bytes();
    e_stored += t.e_stored_bytes();
    values += static_cast<uint64_t>(t.numel());
    chunks += t.chunks.size();
    LayerStats& l = layers[t.layer_id];
    l.experts.insert(t.expert_id);
    l.raw += t.raw_bytes();
    l.stored += t.stored_bytes();
  }
  sm_stored = stored - e_stored;
  uint64_t hist[256];
  for (int i = 0; i < 256; ++i) hist[i] = m.exponent_histogram[static_cast<size_t>(i)];
  const double entropy = ShannonEntropyBits(hist);

  // Per dtype: sizes from the records, entropy from that dtype's exponent histogram.
  nlohmann::json dtypes = nlohmann::json::array();
  double bound_bits = 0;  // Σ values · (SM bits + H) over dtypes
  for (const DTypeHistogram& h : m.exponent_histograms) {
    uint64_t d_tensors = 0, d_values = 0, d_raw = 0, d_stored = 0, d_e_stored = 0, d_e_raw = 0, d_scales_stored = 0;
    for (const auto& t : m.expert_tensors) {
      if (t.dtype != h.dtype) continue;
      ++d_tensors;
      if (t.codec == Codec::kNone && m.codec != Codec::kNone) ++d_e_raw;
      d_values += static_cast<uint64_t>(t.numel());
      d_raw += t.raw_bytes();
      d_stored += t.stored_bytes();
      d_e_stored += t.e_stored_bytes();
      for (const ChunkInfo& c : t.chunks)
        if (c.kind == ChunkKind::kE && EChunkDType(t, c) == DType::kU8) d_scales_stored += c.stored_bytes;
    }
    for (int i = 0; i < 256; ++i) hist[i] = h.counts[static_cast<size_t>(i)];
    const double d_entropy = ShannonEntropyBits(hist);
    // The SM plane is stored raw, the exponent plane at best at its entropy (MXFP4's: the 2-bit fields and,
    // 1 byte per 32 values, the block scales at theirs), over the raw bits (4.25 a value for MXFP4).
    const double sm_bits = SmBitsPerValue(h.dtype);
    const double total_bits = RawBitsPerValue(h.dtype);
    double scale_entropy = 0;
    if (h.dtype == DType::kMXFP4) {
      for (int i = 0; i < 256; ++i) hist[i] = m.mxfp4_scale_histogram[static_cast<size_t>(i)];
      scale_entropy = ShannonEntropyBits(hist);
    }
    const double e_bits = d_entropy + scale_entropy / 32.0;
    bound_bits += static_cast<double>(d_values) * (sm_bits + e_bits);
    nlohmann::json d = {{"dtype", DTypeName(h.dtype)},
                      {"tensors", d_tensors},
                      {"values", d_values},
                      {"raw_bytes", d_raw},
                      {"stored_bytes", d_stored},
                      {"e_bytes_stored", d_e_stored},
                      {"sm_bytes_stored", d_stored - d_e_stored},
                      {"ratio", d_raw ? static_cast<double>(d_stored) / static_cast<double>(d_raw) : 0.0},
                      {"sm_bits_per_value", sm_bits},
                      {"e_chunks_raw", d_e_raw},
                      {"exponent_entropy_bits", d_entropy},
                      {"entropy_bound_ratio", (sm_bits + e_bits) / total_bits}};
    if (h.dtype == DType::kMXFP4) {  // the block scales: one byte per 32 values, in an E-chunk of their own
      d["scale_entropy_bits"] = scale_entropy;
      d["scale_bytes_raw"] = d_values / 32;
      d["scale_bytes_stored"] = d_scales_stored;
    }
    dtypes.push_back(std::move(d));
  }

  nlohmann::json per_layer = nlohmann::json::array();
  for (const auto& [layer_id, l] : layers) {
    per_layer.push_back({{"layer_id", layer_id},
                         {"experts", l.experts.size()},
                         {"raw_bytes", l.raw},
                         {"stored_bytes", l.stored}});
  }
  nlohmann::json j;
  j["arch"] = m.arch;
  j["codec"] = CodecName(m.codec);
  j["level"] = m.level;
  j["shards"] = m.n_shards;
  j["n_layers"] = m.n_layers;
  j["n_experts"] = m.n_experts;
  j["tensors"] = m.expert_tensors.size();
  j["dense_tensors"] = m.dense_tensors.size();
  j["chunks"] = chunks;
  j["expert_bytes_raw"] = raw;
  j["expert_bytes_stored"] = stored;
  j["e_bytes_stored"] = e_stored;
  j["sm_bytes_stored"] = sm_stored;
  j["experts_file_bytes"] = m.experts_file_bytes;
  j["ratio"] = raw ? static_cast<double>(stored) / static_cast<double>(raw) : 0.0;
  j["file_ratio"] = raw ? static_cast<double>(m.experts_file_bytes) / static_cast<double>(raw) : 0.0;
  j["e_bits_per_value"] = values ? 8.0 * static_cast<double>(e_stored) / static_cast<double>(values) : 0.0;
  j["exponent_entropy_bits"] = entropy;
  // All BF16: exactly (H + 8)/16 as before; otherwise the value-weighted bound of the dtypes present.
  const bool all_bf16 = m.exponent_histograms.size() == 1 && m.exponent_histograms[0].dtype == DType::kBF16;
  j["entropy_bound_ratio"] = all_bf16 || raw == 0 ? (entropy + 8.0) / 16.0 : bound_bits / (8.0 * raw);
  j["dtypes"] = dtypes;
  j["per_layer"] = per_layer;
  return j;
}

Result<nlohmann::json> InspectCompressed(const std::string& dir) {
  ZM_ASSIGN_OR_RETURN(Manifest m, ReadManifest(dir));
  return InspectManifest(m);
}

}  // namespace zipmoe::convert
