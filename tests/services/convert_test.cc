// Offline converter, verify and inspect: bit-exact round trips for every architecture, codec and K,
// and failure paths (corrupt files, wrong dtypes, existing output, missing inputs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bitfield.h"
#include "common/dtype.h"
#include "common/checkpoint/expert_store.h"
#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"
#include "services/convert/compress.h"
#include "services/convert/inspect.h"
#include "services/convert/verify.h"
#include "tests/services/convert_test_util.h"
#include "tests/services/executor/test_models.h"
#include "tests/test_util.h"

namespace zipmoe::convert {
namespace {

namespace fs = std::filesystem;
using testing::RunCli;
using testing::TempDir;
using test::WriteToyCheckpoint;

const char* const kArchs[] = {"qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "glm4_moe",
                               "glm4_moe_lite", "ernie4_5_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe"};

// Tiny synthetic checkpoint of `arch` (seed 7), shared across test processes (read-only).
std::string TinyModel(const std::string& arch) { return testing::CachedSynth("--arch " + arch + " --preset tiny --seed 7"); }

CompressOptions Options(const std::string& model, const std::string& out, Codec codec, int k) {
  CompressOptions o;
  o.model_dir = model;
  o.out_dir = out;
  o.codec.codec = codec;
  o.n_shards = k;
  o.n_threads = 2;
  return o;
}

class ConvertRoundTripTest : public ::testing::TestWithParam<std::tuple<const char*, Codec, int>> {};

TEST_P(ConvertRoundTripTest, CompressVerifyBitExact) {
  const auto [arch, codec, k] = GetParam();
  const std::string model = TinyModel(arch);
  TempDir out;
  const std::string dir = out.Sub("c");
  auto summary = CompressModel(Options(model, dir, codec, k));
  if (std::string(arch) == "gpt_oss" && k == 1) {  // one E-chunk of the K holds the MXFP4 block scales
    ASSERT_FALSE(summary.ok());
    EXPECT_EQ(summary.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(summary.status().message().find("--shards 1: MXFP4 expert tensors"), std::string::npos)
        << summary.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(dir)) << "nothing written";
    return;
  }
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_GT(summary->expert_tensors, 0);

  auto verified = VerifyCompressed({model, dir, 2});
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(verified->expert_tensors, summary->expert_tensors);

  // Independently of verify: every expert tensor decodes to the checkpoint's bytes, and every
  // chunk is 4 KiB aligned with K E-chunks + 1 SM-chunk.
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto ckpt = Checkpoint::Open(model);
  ASSERT_TRUE(ckpt.ok());
  // Multi-token-prediction layers (model.layers.L, L >= num_hidden_layers; deepseek_v3 and glm4_moe
  // tiny have one; qwen3_next's mtp.*) are left out.
  const int64_t n_layers = (*ckpt)->config().value("num_hidden_layers", int64_t{0});
  if (std::string(arch) == "gpt_oss") {
    // Fused MXFP4 experts: every expert tensor read back from the store (blocks then scales) is put
    // back into its place in the fused tensors (gate = even rows of gate_up, up = odd), which must then
    // equal the checkpoint's bytes.
    std::map<std::string, std::vector<uint8_t>> rebuilt;
    for (const auto& t : (*store)->manifest().expert_tensors) {
      ASSERT_EQ(t.dtype, DType::kMXFP4) << t.name;
      // K - 1 E-chunks of 2-bit fields, one of the n/32 scales (bytes), the SM-chunk.
      ASSERT_EQ(t.chunks.size(), static_cast<size_t>(k) + 1) << t.name;
      const ChunkInfo& scales = t.chunks[static_cast<size_t>(k) - 1];
      EXPECT_EQ(scales.elem_offset, static_cast<uint64_t>(t.numel())) << t.name;
      EXPECT_EQ(scales.raw_bytes, static_cast<uint64_t>(t.numel() / 32)) << t.name;
      EXPECT_EQ(EChunkDType(t, scales), DType::kU8) << t.name;
      EXPECT_EQ(t.chunks.back().raw_bytes, static_cast<uint64_t>(t.numel() / 4)) << t.name;
      std::vector<uint8_t> raw(t.raw_bytes());
      ASSERT_TRUE((*store)->ReadTensor(t, raw.data()).ok()) << t.name;
      const bool down = t.proj == ExpertProj::kDown;
      const std::string p = fmt::format("model.layers.{}.mlp.experts.{}", t.layer_id, down ? "down_proj" : "gate_up_proj");
      const int64_t rows = t.shape[0], cols = t.shape[1], fused_rows = down ? rows : 2 * rows;
      for (const char* part : {"_blocks", "_scales"}) {
        auto v = (*ckpt)->Find(p + part);
        ASSERT_TRUE(v.ok()) << p + part;
        rebuilt[p + part].resize(v->size_bytes());
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t dst = t.expert_id * fused_rows + (down ? r : 2 * r + (t.proj == ExpertProj::kUp ? 1 : 0));
        std::memcpy(rebuilt[p + "_blocks"].data() + dst * cols / 2, raw.data() + r * cols / 2, cols / 2);
        std::memcpy(rebuilt[p + "_scales"].data() + dst * cols / 32, raw.data() + rows * cols / 2 + r * cols / 32,
                    cols / 32);
      }
    }
    ASSERT_EQ(rebuilt.size(), static_cast<size_t>(4 * n_layers));
    for (const auto& [name, bytes] : rebuilt) {
      auto v = (*ckpt)->Find(name);
      ASSERT_TRUE(v.ok());
      EXPECT_EQ(std::memcmp(bytes.data(), v->data, bytes.size()), 0) << name;
    }
    return;
  }
  if (std::string(arch) == "qwen3_5_moe") {
    // Fused BF16 experts gate_up_proj [E, 2I, H] (gate rows first) and down_proj [E, H, I]: every expert
    // tensor read back from the store goes back into its place, and the rebuilt tensors must equal the
    // checkpoint's bytes.
    std::map<std::string, std::vector<uint8_t>> rebuilt;
    for (const auto& t : (*store)->manifest().expert_tensors) {
      ASSERT_EQ(t.dtype, DType::kBF16) << t.name;
      std::vector<uint8_t> raw(t.raw_bytes());
      ASSERT_TRUE((*store)->ReadTensor(t, raw.data()).ok()) << t.name;
      const bool down = t.proj == ExpertProj::kDown;
      const std::string name = fmt::format("model.language_model.layers.{}.mlp.experts.{}", t.layer_id,
                                           down ? "down_proj" : "gate_up_proj");
      auto v = (*ckpt)->Find(name);
      ASSERT_TRUE(v.ok()) << name;
      rebuilt[name].resize(v->size_bytes());
      const size_t per_expert = v->size_bytes() / static_cast<size_t>(v->spec.shape[0]);
      const size_t offset = t.expert_id * per_expert + (t.proj == ExpertProj::kUp ? per_expert / 2 : 0);
      ASSERT_LE(offset + raw.size(), rebuilt[name].size()) << t.name;
      std::memcpy(rebuilt[name].data() + offset, raw.data(), raw.size());
    }
    const int64_t text_layers = (*ckpt)->config()["text_config"].value("num_hidden_layers", int64_t{0});
    ASSERT_EQ(rebuilt.size(), static_cast<size_t>(2 * text_layers));
    for (const auto& [name, bytes] : rebuilt) {
      auto v = (*ckpt)->Find(name);
      ASSERT_TRUE(v.ok());
      EXPECT_EQ(std::memcmp(bytes.data(), v->data, bytes.size()), 0) << name;
    }
    return;
  }
  int64_t experts_in_ckpt = 0;
  for (const auto& name : (*ckpt)->names()) {
    if (name.find(".experts.") == std::string::npos || name.rfind("mtp.", 0) == 0) continue;
    if (name.rfind("model.layers.", 0) == 0 && std::stoll(name.substr(13)) >= n_layers) continue;
    ++experts_in_ckpt;
  }
  ASSERT_EQ(static_cast<int64_t>((*store)->manifest().expert_tensors.size()), experts_in_ckpt);
  for (const auto& t : (*store)->manifest().expert_tensors) {
    EXPECT_EQ(t.chunks.size(), static_cast<size_t>(std::min<int64_t>(k, t.numel())) + 1) << t.name;
    for (const auto& c : t.chunks) EXPECT_EQ(c.file_offset % 4096, 0u);
    std::vector<uint16_t> got(static_cast<size_t>(t.numel()));
    ASSERT_TRUE((*store)->ReadTensorBf16(t, got.data()).ok());
    auto view = (*ckpt)->Find(t.name);
    ASSERT_TRUE(view.ok());
    ASSERT_EQ(std::memcmp(got.data(), view->data, got.size() * 2), 0) << t.name;
  }
  // One expert's tensors are adjacent: gate, up, down of (layer, expert) follow each other.
  const auto& ts = (*store)->manifest().expert_tensors;
  for (size_t i = 1; i < ts.size(); ++i)
    EXPECT_LT(std::make_tuple(ts[i - 1].layer_id, ts[i - 1].expert_id, int(ts[i - 1].proj)),
              std::make_tuple(ts[i].layer_id, ts[i].expert_id, int(ts[i].proj)));
  // Non-expert files travel along.
  EXPECT_TRUE(FileExists(JoinPath(dir, "config.json")));
  EXPECT_TRUE(FileExists(JoinPath(dir, "tokenizer.json")));
  EXPECT_TRUE(FileExists(JoinPath(dir, "dense.safetensors")));
}

INSTANTIATE_TEST_SUITE_P(AllArchs, ConvertRoundTripTest,
                         ::testing::Combine(::testing::ValuesIn(kArchs), ::testing::Values(Codec::kZstd, Codec::kLz4),
                                            ::testing::Values(1, 4, 16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + CodecName(std::get<1>(info.param)) +
                                  "_K" + std::to_string(std::get<2>(info.param));
                         });

// A compressed copy of the tiny qwen2_moe model, shared by the corruption tests.
struct Compressed {
  TempDir tmp;
  std::string model;
  std::string dir;
};

std::unique_ptr<Compressed> MakeCompressed(int k = 4) {
  auto c = std::make_unique<Compressed>();
  c->model = TinyModel("qwen2_moe");
  c->dir = c->tmp.Sub("c");
  auto s = CompressModel(Options(c->model, c->dir, Codec::kZstd, k));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return c;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::string bytes = testing::ReadAll(path);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x40);
  testing::WriteAll(path, bytes);
}

TEST(ConvertCorruptionTest, FlippedChunkByteNamesTensorAndChunk) {
  auto c = MakeCompressed();
  auto store = ExpertStore::Open(c->dir);
  ASSERT_TRUE(store.ok());
  const Manifest m = (*store)->manifest();
  store->reset();
  const std::string experts = JoinPath(c->dir, "experts.bin");
  const std::string original = testing::ReadAll(experts);
  // Hit an E-chunk and the SM-chunk of tensors spread over the file.
  for (size_t ti : {size_t{0}, m.expert_tensors.size() / 2, m.expert_tensors.size() - 1}) {
    const ExpertTensorInfo& t = m.expert_tensors[ti];
    for (size_t ci : {size_t{1}, t.chunks.size() - 1}) {
      const ChunkInfo& chunk = t.chunks[ci];
      FlipByte(experts, chunk.file_offset + chunk.stored_bytes / 2);
      auto r = VerifyCompressed({c->model, c->dir, 2});
      ASSERT_FALSE(r.ok()) << t.name << " chunk " << ci;
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
      EXPECT_NE(r.status().message().find("'" + t.name + "'"), std::string::npos) << r.status().ToString();
      EXPECT_NE(r.status().message().find(ci + 1 == t.chunks.size() ? "SM-chunk" : "E-chunk " + std::to_string(ci)),
                std::string::npos)
          << r.status().ToString();
      EXPECT_NE(r.status().message().find("experts.bin"), std::string::npos);
      testing::WriteAll(experts, original);
    }
  }
  ASSERT_TRUE(VerifyCompressed({c->model, c->dir, 2}).ok());
}

TEST(ConvertCorruptionTest, AnyFlippedByteOfExpertsBinFailsVerify) {
  auto c = MakeCompressed();
  const std::string experts = JoinPath(c->dir, "experts.bin");
  const std::string original = testing::ReadAll(experts);
  // A stride that is co-prime with 4096 visits chunk bodies, chunk tails and alignment padding.
  const uint64_t stride = std::max<uint64_t>(1, original.size() / 40) | 1;
  for (uint64_t off = 0; off < original.size(); off += stride) {
    FlipByte(experts, off);
    auto r = VerifyCompressed({c->model, c->dir, 2});
    ASSERT_FALSE(r.ok()) << "flip at " << off << " went unnoticed";
    EXPECT_NE(r.status().message().find("model.layers."), std::string::npos) << r.status().ToString();
    testing::WriteAll(experts, original);
  }
  // Truncation.
  testing::WriteAll(experts, original.substr(0, original.size() - 4096));
  auto r = VerifyCompressed({c->model, c->dir, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("experts.bin"), std::string::npos) << r.status().ToString();
}

TEST(ConvertCorruptionTest, AnyFlippedByteOfManifestFailsVerify) {
  auto c = MakeCompressed();
  const std::string manifest = JoinPath(c->dir, "manifest.bin");
  const std::string original = testing::ReadAll(manifest);
  int named = 0, total = 0;
  for (uint64_t off = 0; off < original.size(); off += 7) {
    FlipByte(manifest, off);
    auto r = VerifyCompressed({c->model, c->dir, 2});
    ASSERT_FALSE(r.ok()) << "flip at " << off << " went unnoticed";
    EXPECT_NE(r.status().message().find("manifest.bin"), std::string::npos) << r.status().ToString();
    named += r.status().message().find("model.layers.") != std::string::npos;
    ++total;
    testing::WriteAll(manifest, original);
  }
  // Expert records are most of the manifest: most flips must be traced to a named tensor.
  EXPECT_GT(named, total / 2) << named << " of " << total;
}

TEST(ConvertCorruptionTest, ChangedDenseTensorFailsVerify) {
  auto c = MakeCompressed();
  const std::string path = JoinPath(c->dir, "dense.safetensors");
  std::string bytes = testing::ReadAll(path);
  bytes[bytes.size() - 1] ^= 0x01;  // the last byte belongs to the last tensor's data
  testing::WriteAll(path, bytes);
  auto r = VerifyCompressed({c->model, c->dir, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dense.safetensors"), std::string::npos) << r.status().ToString();
}

// An edited config.json (or tokenizer file) in the compressed directory changes what is served while every
// tensor stays bit-exact: verify names the file.
TEST(ConvertCorruptionTest, EditedConfigOrTokenizerFileFailsVerify) {
  auto c = MakeCompressed();
  ASSERT_TRUE(VerifyCompressed({c->model, c->dir, 2}).ok());
  const std::string config = JoinPath(c->dir, "config.json");
  const std::string original = testing::ReadAll(config);
  nlohmann::json edited = nlohmann::json::parse(original);
  edited["num_experts"] = edited["num_experts"].get<int>() + 1;
  testing::WriteAll(config, edited.dump());
  auto r = VerifyCompressed({c->model, c->dir, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json"), std::string::npos) << r.status().ToString();
  testing::WriteAll(config, original);
  ASSERT_TRUE(VerifyCompressed({c->model, c->dir, 2}).ok());
  // Another copied file (the model directory is shared: only the copy is edited), then one missing.
  ASSERT_TRUE(FileExists(JoinPath(c->dir, "tokenizer_config.json")));
  testing::WriteAll(JoinPath(c->dir, "tokenizer_config.json"), R"({"chat_template": "x"})");
  r = VerifyCompressed({c->model, c->dir, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos) << r.status().ToString();
  fs::remove(JoinPath(c->dir, "tokenizer_config.json"));
  r = VerifyCompressed({c->model, c->dir, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos) << r.status().ToString();
}

TEST(ConvertTest, ZstdMeetsTheEntropyBoundOnGaussianWeights) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kBF16, 4, 512, 704, 11);
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto j = InspectCompressed(tmp.Sub("c"));
  ASSERT_TRUE(j.ok());
  const double ratio = (*j)["ratio"].get<double>();
  const double bound = (*j)["entropy_bound_ratio"].get<double>();
  EXPECT_LE(ratio, 0.665) << j->dump();
  EXPECT_GT(ratio, bound) << "cannot beat the Shannon bound";
  EXPECT_NEAR(bound, (2.55 + 8) / 16, 0.01) << "N(0, 0.02^2) BF16 exponent entropy is about 2.55 bits";
  EXPECT_EQ((*j)["tensors"].get<int>(), 12);
  EXPECT_EQ((*j)["expert_bytes_raw"].get<uint64_t>(), 12u * 512 * 704 * 2);
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2}).ok());
}

// MXFP4 (gpt-oss, issue 41): the block scales (E8M0 bytes, one per 32 values) are exponents too and ride
// in an E-chunk of their own, compressed; inspect's bound counts them at their entropy: (2 SM bits +
// H(exponent fields) + H(scales) / 32) / 4.25, both entropies computed here from the checkpoint's fused
// tensors. The stored ratio beats what keeping the scales raw could reach even at the fields' entropy.
TEST(ConvertTest, Mxfp4ScalesAreCompressedInTheirOwnEChunkWithinTheEntropyBound) {
  const std::string model = TinyModel("gpt_oss");
  TempDir tmp;
  auto s = CompressModel(Options(model, tmp.Sub("c"), Codec::kZstd, 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto ckpt = Checkpoint::Open(model);
  ASSERT_TRUE(ckpt.ok());
  uint64_t fields[256] = {}, scales[256] = {}, values = 0;
  for (const std::string& name : (*ckpt)->names()) {
    auto v = (*ckpt)->Find(name);
    ASSERT_TRUE(v.ok());
    if (name.find("_scales") != std::string::npos) {
      AccumulateHistogram(v->data, static_cast<int64_t>(v->size_bytes()), scales);
    } else if (name.find("_blocks") != std::string::npos) {
      for (uint64_t i = 0; i < v->size_bytes(); ++i) {  // two E2M1 nibbles a byte: exponent bits 2-1
        ++fields[(v->data[i] >> 1) & 3];
        ++fields[(v->data[i] >> 5) & 3];
      }
      values += 2 * v->size_bytes();
    }
  }
  const double h_fields = ShannonEntropyBits(fields), h_scales = ShannonEntropyBits(scales);
  auto j = InspectCompressed(tmp.Sub("c"));
  ASSERT_TRUE(j.ok());
  ASSERT_EQ((*j)["dtypes"].size(), 1u);
  const auto& d = (*j)["dtypes"][0];
  EXPECT_EQ(d["dtype"], "MXFP4");
  EXPECT_EQ(d["values"].get<uint64_t>(), values);
  EXPECT_NEAR(d["exponent_entropy_bits"].get<double>(), h_fields, 1e-9);
  EXPECT_NEAR(d["scale_entropy_bits"].get<double>(), h_scales, 1e-9);
  const double bound = (2.0 + h_fields + h_scales / 32.0) / 4.25;
  EXPECT_NEAR(d["entropy_bound_ratio"].get<double>(), bound, 1e-9);
  EXPECT_EQ(d["scale_bytes_raw"].get<uint64_t>(), values / 32);
  EXPECT_LT(d["scale_bytes_stored"].get<uint64_t>(), values / 32 / 2) << j->dump();
  const double ratio = d["ratio"].get<double>();
  EXPECT_GT(ratio, bound) << "cannot beat the Shannon bound";
  EXPECT_LT(ratio, (2.25 + h_fields) / 4.25) << "the scales raw, the fields at their entropy: " << j->dump();
  EXPECT_TRUE(VerifyCompressed({model, tmp.Sub("c"), 2}).ok());
}

// F16/F32 experts are kept bit-exact since issue 19 (tests/services/convert_fp_test.cc); a dtype without
// an exponent/sign-mantissa split is refused, naming the tensor, and --convert-dtype still rounds F32.
// FP8 checkpoints (DeepSeek-V3 / GLM FP8 releases): F8_E4M3 experts with 128x128 block scales, made
// here as DeepSeek's weight_quant makes them from N(0, 0.02^2) weights. compress splits them into a
// 4-bit exponent plane (stored packed two per byte, common/codec.h) and a sign|mantissa nibble plane,
// the scales go to dense.safetensors bit-exact; verify passes; the ratio is within 0.6 pt of the
// bound (4 SM bits + exponent entropy) / 8.
TEST(ConvertTest, Fp8ExpertsRoundTripWithinTheEntropyBound) {
  TempDir tmp;
  const std::string dir = tmp.Sub("m");
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"),
                              R"({"model_type": "qwen2_moe", "num_hidden_layers": 1, "num_experts": 4,
                                  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic", "weight_block_size": [128, 128]}})")
                  .ok());
  const int64_t rows = 512, cols = 704, block = 128;
  std::vector<TensorSpec> specs;
  for (int e = 0; e < 4; ++e) {
    const std::string p = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = std::string(proj) == "down_proj";
      const int64_t r = down ? cols : rows, c = down ? rows : cols;
      specs.push_back({p + proj + ".weight", DType::kF8E4M3, {r, c}});
      specs.push_back({p + proj + ".weight_scale_inv", DType::kF32, {(r + block - 1) / block, (c + block - 1) / block}});
    }
  }
  // Both tensors of a pair come from the same weights: quantize once per weight name.
  std::map<std::string, std::pair<std::vector<uint8_t>, std::vector<float>>> quantized;
  auto quantize = [&](const std::string& weight, int64_t r, int64_t c) -> const std::pair<std::vector<uint8_t>, std::vector<float>>& {
    auto it = quantized.find(weight);
    if (it != quantized.end()) return it->second;
    std::mt19937_64 rng(std::hash<std::string>()(weight));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> w(static_cast<size_t>(r * c));
    for (float& v : w) v = normal(rng);
    const int64_t sr = (r + block - 1) / block, sc = (c + block - 1) / block;
    std::vector<float> scale(static_cast<size_t>(sr * sc), 0.0f);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) {
        float& m = scale[static_cast<size_t>((i / block) * sc + j / block)];
        m = std::max(m, std::fabs(w[static_cast<size_t>(i * c + j)]));
      }
    for (float& v : scale) v /= 448.0f;
    std::vector<uint8_t> q(w.size());
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j)
        q[static_cast<size_t>(i * c + j)] =
            FloatToF8E4M3(w[static_cast<size_t>(i * c + j)] / scale[static_cast<size_t>((i / block) * sc + j / block)]);
    return quantized.emplace(weight, std::make_pair(std::move(q), std::move(scale))).first->second;
  };
  auto st = WriteCheckpointWeights(dir, specs, uint64_t{1} << 40, [&](const TensorSpec& spec, uint8_t* out) {
    const bool is_scale = spec.dtype == DType::kF32;
    const std::string weight = is_scale ? spec.name.substr(0, spec.name.size() - 10) : spec.name;
    const bool down = weight.find("down_proj") != std::string::npos;
    const auto& [q, scale] = quantize(weight, down ? cols : rows, down ? rows : cols);
    if (is_scale) {
      std::memcpy(out, scale.data(), scale.size() * sizeof(float));
    } else {
      std::memcpy(out, q.data(), q.size());
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto s = CompressModel(Options(dir, tmp.Sub("c"), Codec::kZstd, 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->expert_tensors, 12);
  EXPECT_EQ(s->dense_tensors, 12);  // the scales
  auto verified = VerifyCompressed({dir, tmp.Sub("c"), 2});
  EXPECT_TRUE(verified.ok()) << verified.status().ToString();
  auto j = InspectCompressed(tmp.Sub("c"));
  ASSERT_TRUE(j.ok());
  const double ratio = (*j)["ratio"].get<double>();
  const double bound = (*j)["entropy_bound_ratio"].get<double>();
  EXPECT_GT(ratio, bound) << "cannot beat the Shannon bound";
  EXPECT_LE(ratio, bound + 0.006) << j->dump();
  EXPECT_NEAR(bound, (4 + 2.55) / 8, 0.02) << "block-scaled N(0, 0.02^2) FP8 exponents carry about 2.55 bits";
  // Read back through the store: every F8 tensor equals the checkpoint's bytes.
  auto store = ExpertStore::Open(tmp.Sub("c"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->expert_dtype(), DType::kF8E4M3);
  for (const auto& t : (*store)->manifest().expert_tensors) {
    std::vector<uint8_t> got(static_cast<size_t>(t.numel()));
    ASSERT_TRUE((*store)->ReadTensor(t, got.data()).ok()) << t.name;
    EXPECT_EQ(got, quantized.at(t.name).first) << t.name;
  }
}

TEST(ConvertTest, RefusesUnsplittableExpertsAndRoundsF32OnRequest) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m64"), DType::kF64, 2, 16, 24, 3);
  auto s = CompressModel(Options(tmp.Sub("m64"), tmp.Sub("c"), Codec::kZstd, 2));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("model.layers.0.mlp.experts.0.down_proj.weight"), std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("F64"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.Sub("c")));

  WriteToyCheckpoint(tmp.Sub("m"), DType::kF32, 2, 16, 24, 3);
  CompressOptions o = Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 2);
  o.convert_dtype = true;
  s = CompressModel(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // The stored BF16 is the round-to-nearest-even image of the F32 checkpoint.
  auto store = ExpertStore::Open(tmp.Sub("c"));
  auto ckpt = Checkpoint::Open(tmp.Sub("m"));
  ASSERT_TRUE(store.ok() && ckpt.ok());
  const auto& t = (*store)->manifest().expert_tensors.front();
  std::vector<uint16_t> got(static_cast<size_t>(t.numel()));
  ASSERT_TRUE((*store)->ReadTensorBf16(t, got.data()).ok());
  auto view = (*ckpt)->Find(t.name);
  for (size_t i = 0; i < got.size(); ++i) {
    float f;
    std::memcpy(&f, view->data + 4 * i, 4);
    ASSERT_EQ(got[i], FloatToBf16(f)) << i;
  }
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2}).ok());
}

TEST(ConvertTest, ExistingOutputIsKeptUnlessForced) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kBF16, 2, 8, 8, 5);
  ASSERT_TRUE(CreateDirectories(tmp.Sub("c")).ok());
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("c/keep.txt"), "mine").ok());
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 2));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("exists"), std::string::npos);
  EXPECT_TRUE(FileExists(tmp.Sub("c/keep.txt")));
  CompressOptions o = Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 2);
  o.overwrite = true;
  ASSERT_TRUE(CompressModel(o).ok());
  EXPECT_FALSE(FileExists(tmp.Sub("c/keep.txt")));
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2}).ok());
}

// OUT_DIR that is MODEL_DIR, or holds it, is refused even with --force (replacing it would delete the
// checkpoint); "out/" is "out" (the work directory sits beside it, not inside).
TEST(ConvertTest, OutputThatHoldsTheCheckpointIsRefusedAndATrailingSlashIsTheSameDirectory) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("p/m"), DType::kBF16, 2, 8, 8, 5);
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("p/NOTES"), "mine").ok());
  for (const std::string& out : {tmp.Sub("p/m"), tmp.Sub("p/m/"), tmp.Sub("p"), tmp.Sub("p/m/..")}) {
    CompressOptions o = Options(tmp.Sub("p/m"), out, Codec::kZstd, 2);
    o.overwrite = true;
    auto s = CompressModel(o);
    ASSERT_FALSE(s.ok()) << out;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("would delete the checkpoint"), std::string::npos) << s.status().ToString();
  }
  EXPECT_TRUE(FileExists(tmp.Sub("p/m/model.safetensors")));
  EXPECT_TRUE(FileExists(tmp.Sub("p/NOTES")));
  // Inside MODEL_DIR is fine (nothing of the checkpoint is replaced).
  ASSERT_TRUE(CompressModel(Options(tmp.Sub("p/m"), tmp.Sub("p/m/c"), Codec::kZstd, 2)).ok());
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("p/m"), tmp.Sub("p/m/c"), 2}).ok());
  // A trailing slash: written as "out", replaced with --force.
  ASSERT_TRUE(CompressModel(Options(tmp.Sub("p/m"), tmp.Sub("out/"), Codec::kZstd, 2)).ok());
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("p/m"), tmp.Sub("out"), 2}).ok());
  CompressOptions again = Options(tmp.Sub("p/m"), tmp.Sub("out/"), Codec::kZstd, 2);
  again.overwrite = true;
  auto s = CompressModel(again);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(fs::exists(tmp.Sub("out/.partial")));
}

TEST(ConvertTest, FailureLeavesNothingBehind) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kBF16, 2, 8, 8, 5);
  // Break the checkpoint: the weights file is truncated.
  const std::string weights = tmp.Sub("m/model.safetensors");
  std::string bytes = testing::ReadAll(weights);
  testing::WriteAll(weights, bytes.substr(0, bytes.size() - 10));
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 2));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("model.safetensors"), std::string::npos) << s.status().ToString();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp.path())) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"m"});
}

// A compress killed mid-way left OUT.tmp.PID before OUT.partial (and, replacing, OUT.old.PID): the next run of the same
// command removes those whose process is gone, keeps a live one's, and never touches other names.
TEST(ConvertTest, ARerunRemovesWhatAKilledRunLeft) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kBF16, 2, 8, 8, 5);
  const std::string dead = "2147483646";  // above any pid_max: no such process
  for (const std::string& d : {"c.tmp." + dead, "c.old." + dead, "c.tmp." + std::to_string(::getpid() == 1 ? 2 : 1),
                               std::string("c.tmp.notapid"), "other.tmp." + dead}) {
    ASSERT_TRUE(CreateDirectories(tmp.Sub(d)).ok());
    ASSERT_TRUE(WriteFileAtomic(tmp.Sub(d + "/experts.bin"), "partial").ok());
  }
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->stale_temp_dirs_removed, 2);
  EXPECT_FALSE(FileExists(tmp.Sub("c.tmp." + dead)));
  EXPECT_FALSE(FileExists(tmp.Sub("c.old." + dead)));
  EXPECT_TRUE(FileExists(tmp.Sub("c.tmp.1")) || FileExists(tmp.Sub("c.tmp.2")));  // pid 1 (or 2) is alive
  EXPECT_TRUE(FileExists(tmp.Sub("c.tmp.notapid")));
  EXPECT_TRUE(FileExists(tmp.Sub("other.tmp." + dead)));
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2}).ok());
}

// DeepSeek-V3 / GLM-4.5 ship num_nextn_predict_layers multi-token-prediction layers after the
// decoder's (synth tiny deepseek_v3 and glm4_moe write one): compress leaves them out and says how
// many, verify accepts exactly their absence, and the checkpoint's own experts all round-trip.
TEST(ConvertTest, MultiTokenPredictionLayersAreLeftOutAndVerifyAcceptsOnlyThat) {
  for (const char* arch : {"deepseek_v3", "glm4_moe"}) {
    const std::string model = TinyModel(arch);
    TempDir out;
    auto summary = CompressModel(Options(model, out.Sub("c"), Codec::kZstd, 2));
    ASSERT_TRUE(summary.ok()) << arch << ": " << summary.status().ToString();
    EXPECT_GT(summary->mtp_tensors_skipped, 16 * 3) << arch;  // its 16 routed experts and more
    EXPECT_GT(summary->mtp_bytes_skipped, 0u);
    EXPECT_EQ(summary->expert_tensors, 3 * 16 * 3) << arch;  // layers 1-3 are MoE, layer 4 is the MTP one
    auto verified = VerifyCompressed({model, out.Sub("c"), 2});
    EXPECT_TRUE(verified.ok()) << arch << ": " << verified.status().ToString();
  }
}

TEST(ConvertTest, NoExpertsIsAnError) {
  TempDir tmp;
  ASSERT_TRUE(CreateDirectories(tmp.Sub("m")).ok());
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("m/config.json"), R"({"model_type": "llama"})").ok());
  ASSERT_TRUE(WriteCheckpointWeights(tmp.Sub("m"), {{"lm_head.weight", DType::kBF16, {4, 4}}}, 1 << 20,
                                     [](const TensorSpec& s, uint8_t* out) {
                                       std::memset(out, 0, s.size_bytes());
                                       return Status::Ok();
                                     })
                  .ok());
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 2));
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("no routed-expert tensors"), std::string::npos);
}

TEST(ConvertTest, ShardedCheckpointRoundTrips) {
  TempDir tmp;
  auto r = RunCli("synth --arch mixtral --preset tiny --seed 3 --shard-size 1M --out " + tmp.Sub("m"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(FileExists(tmp.Sub("m/model.safetensors.index.json")));
  ASSERT_TRUE(CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), Codec::kZstd, 4)).ok());
  auto v = VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2});
  EXPECT_TRUE(v.ok()) << v.status().ToString();
}

// A config.json generate and serve refuse (here top-k above the expert count, or a model_type that is not
// a string) is refused by compress before any work, naming the file and key; nothing is written.
TEST(ConvertCliTest, CompressRefusesAConfigTheRuntimeRefuses) {
  TempDir tmp;
  testing::CopyModelWithConfig(TinyModel("qwen2_moe"), tmp.Sub("m"),
                               [](nlohmann::json& c) { c["num_experts_per_tok"] = c["num_experts"].get<int>() + 1; });
  auto r = RunCli("compress " + tmp.Sub("m") + " " + tmp.Sub("c"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("num_experts_per_tok"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp.Sub("c")));
  EXPECT_FALSE(fs::exists(tmp.Sub("c.partial")));
  testing::CopyModelWithConfig(TinyModel("qwen2_moe"), tmp.Sub("n"), [](nlohmann::json& c) { c["model_type"] = 5; });
  r = RunCli("compress " + tmp.Sub("n") + " " + tmp.Sub("c"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model_type"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("json.exception"), std::string::npos) << r.output;
}

TEST(ConvertCliTest, CompressVerifyInspect) {
  TempDir tmp;
  const std::string model = TinyModel("olmoe");
  auto r = RunCli("compress " + model + " " + tmp.Sub("c") + " --codec lz4 --shards 2 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // stderr is a pipe here, not a terminal: plain progress lines (docker logs), no '\r' redraws.
  EXPECT_NE(r.output.find("compress: 100% "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" s elapsed\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  r = RunCli("verify " + model + " " + tmp.Sub("c"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("verify OK"), std::string::npos);
  EXPECT_NE(r.output.find("verify: 100% "), std::string::npos) << r.output;
  r = RunCli("inspect " + tmp.Sub("c") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  for (const char* key : {"arch", "codec", "shards", "tensors", "expert_bytes_raw", "expert_bytes_stored", "ratio",
                          "exponent_entropy_bits", "entropy_bound_ratio"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["arch"], "olmoe");
  EXPECT_EQ(j["codec"], "lz4");
  EXPECT_EQ(j["shards"], 2);
  EXPECT_NEAR(j["ratio"].get<double>(),
              j["expert_bytes_stored"].get<double>() / j["expert_bytes_raw"].get<double>(), 1e-12);

  // A damaged chunk: verify exits non-zero and names the tensor.
  auto store = ExpertStore::Open(tmp.Sub("c"));
  ASSERT_TRUE(store.ok());
  const ExpertTensorInfo t = (*store)->manifest().expert_tensors[5];
  store->reset();
  FlipByte(tmp.Sub("c/experts.bin"), t.chunks[0].file_offset + 1);
  r = RunCli("verify " + model + " " + tmp.Sub("c"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(t.name), std::string::npos) << r.output;

  r = RunCli("compress " + model + " " + tmp.Sub("c2") + " --codec brotli");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("brotli"), std::string::npos) << r.output;
  r = RunCli("inspect " + tmp.Sub("nope"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("manifest.bin"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zipmoe::convert
