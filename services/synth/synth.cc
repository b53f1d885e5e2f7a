// SynthesizeCheckpoint and the router-share measurement entry points (see synth.h).
#include "services/synth/synth.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "common/dtype.h"
#include "common/file_util.h"
#include "common/parallel.h"
#include "common/checkpoint/safetensors.h"
#include "services/synth/bpe_tokenizer_builder.h"
#include "services/synth/model_layout.h"
#include "services/synth/presets.h"
#include "services/synth/router_skew.h"
#include "services/synth/tensor_init.h"
#include "services/synth/thread_pool.h"
#include "services/synth/tokenizer_files.h"
#include "services/synth/unigram_tokenizer_builder.h"

namespace zipmoe::synth {
namespace {

namespace fs = std::filesystem;

const char kIndexFile[] = "model.safetensors.index.json";
const char kSingleFile[] = "model.safetensors";

bool IsShardName(const std::string& name) {
  const std::string ext = ".safetensors";
  return name.size() > ext.size() && name.compare(0, 6, "model-") == 0 &&
         name.find("-of-") != std::string::npos &&
         name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
}

// Removes weight files of an earlier run so they cannot be mistaken for this run's.
Status RemoveStaleWeights(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kIndexFile || name == kSingleFile || IsShardName(name)) stale.push_back(it->path());
  }
  if (ec) return Status::IoError(fmt::format("{}: cannot list directory: {}", dir, ec.message()));
  for (const fs::path& p : stale) {
    if (!fs::remove(p, ec) && ec) {
      return Status::IoError(fmt::format("{}: cannot remove stale weight file: {}", p.string(), ec.message()));
    }
  }
  return Status::Ok();
}

Status WriteJson(const std::string& dir, const char* name, const nlohmann::json& j) {
  return WriteFileAtomic(JoinPath(dir, name), j.dump(2) + "\n");
}

// Names of the weight files WriteCheckpointWeights produced in `dir`.
Result<std::vector<std::string>> WeightFiles(const std::string& dir) {
  const std::string index_path = JoinPath(dir, kIndexFile);
  if (!FileExists(index_path)) return std::vector<std::string>{kSingleFile};
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Status::Corruption(fmt::format("{}: no weight_map object", index_path));
  }
  std::set<std::string> shards;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (file.is_string()) shards.insert(file.get<std::string>());
  }
  std::vector<std::string> files(shards.begin(), shards.end());
  files.push_back(kIndexFile);
  return files;
}

Status ValidateOptions(const SynthOptions& o) {
  if (o.out_dir.empty()) return Status::InvalidArgument("synth: --out directory is required");
  if (o.shard_size_bytes == 0) return Status::InvalidArgument("synth: shard size must be > 0 bytes");
  if (o.n_threads < 0) return Status::InvalidArgument(fmt::format("synth: threads must be >= 0, got {}", o.n_threads));
  return Status::Ok();
}

struct PreparedModel {
  nlohmann::json config;
  ModelLayout layout;
  SkewModel skew;
};

// --dtype fp8: every *_proj.weight matrix (attention, dense MLPs, shared and routed experts; not the
// routers, embeddings, norms or lm_head, as DeepSeek-V3's FP8 release) becomes F8_E4M3 with a
// `<name>_scale_inv` F32 tensor of block x block scales, and config.json gets the quantization_config
// DeepSeek-V3 ships.
Status QuantizeToFp8(int64_t block, PreparedModel& m) {
  std::vector<TensorRecipe> scales;
  static const std::string kSuffix = "_proj.weight";
  for (TensorRecipe& r : m.layout.tensors) {
    const std::string& name = r.spec.name;
    if (r.spec.shape.size() != 2 || name.size() < kSuffix.size() ||
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    r.spec.dtype = DType::kF8E4M3;
    r.fp8_block_rows = block;
    r.fp8_block_cols = block;
    TensorRecipe s;
    s.spec.name = name + "_scale_inv";
    s.spec.dtype = DType::kF32;
    s.spec.shape = {(r.spec.shape[0] + block - 1) / block, (r.spec.shape[1] + block - 1) / block};
    s.layer_id = r.layer_id;
    s.expert_id = r.expert_id;
    s.fp8_source = name;  // FillFp8 reads the blocks from the weight's recipe
    scales.push_back(std::move(s));
  }
  for (TensorRecipe& s : scales) m.layout.tensors.push_back(std::move(s));
  m.config["quantization_config"] = {{"activation_scheme", "dynamic"},
                                     {"fmt", "e4m3"},
                                     {"quant_method", "fp8"},
                                     {"weight_block_size", {block, block}}};
  return Status::Ok();
}

Result<PreparedModel> Prepare(const SynthOptions& options) {
  PreparedModel m;
  ZM_ASSIGN_OR_RETURN(m.config, BuildPresetConfig(options.arch, options.preset, options.q_lora_rank));
  ZM_ASSIGN_OR_RETURN(m.layout, BuildModelLayout(m.config));
  if (!(options.embedding_std > 0.0) || !std::isfinite(options.embedding_std)) {
    return Status::InvalidArgument(fmt::format("synth: --embedding-std must be > 0, got {}", options.embedding_std));
  }
  for (TensorRecipe& r : m.layout.tensors) {
    if (r.kind == InitKind::kEmbedding) r.std = static_cast<float>(options.embedding_std);
  }
  if (options.dtype == "fp8") {
    if (options.arch == "switch_transformers" || options.arch == "gpt_oss" || options.arch == "qwen3_5_moe")
      return Status::InvalidArgument(fmt::format(
          "synth: --dtype fp8 is not for arch '{}' ({})", options.arch,
          options.arch == "gpt_oss"       ? "gpt_oss ships MXFP4 experts, which synth writes already"
          : options.arch == "qwen3_5_moe" ? "its fused experts would stay BF16 beside FP8 projections, which the "
                                            "loaders do not read"
                                          : "an encoder-decoder"));
    ZM_RETURN_IF_ERROR(QuantizeToFp8(options.preset == "tiny" ? 32 : 128, m));
  } else if (!options.dtype.empty()) {
    if (options.arch != "switch_transformers" || (options.dtype != "bf16" && options.dtype != "f32"))
      return Status::InvalidArgument(fmt::format("synth: --dtype '{}' for arch '{}': switch_transformers takes bf16 "
                                                 "or f32, the decoder-only archs fp8",
                                                 options.dtype, options.arch));
    const DType dtype = options.dtype == "bf16" ? DType::kBF16 : DType::kF32;
    for (TensorRecipe& r : m.layout.tensors) r.spec.dtype = dtype;
    m.config["torch_dtype"] = options.dtype == "bf16" ? "bfloat16" : "float32";
  }
  ZM_ASSIGN_OR_RETURN(m.skew, MakeSkewModel(m.layout.hidden_size, options.seed, options.router_skew,
                                            options.skew_channel_scale, options.embedding_std));
  return m;
}

std::vector<float> Bf16RowsToFloat(const uint8_t* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, data + 2 * i, 2);
    out[static_cast<size_t>(i)] = Bf16ToFloat(bits);
  }
  return out;
}

}  // namespace

Result<nlohmann::json> PresetConfig(const std::string& arch, const std::string& preset, int64_t q_lora_rank) {
  return BuildPresetConfig(arch, preset, q_lora_rank);
}

Result<uint64_t> ParseByteSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  std::string number = text.substr(0, pos);
  std::string unit = text.substr(pos);
  auto bad = [&] {
    return Status::InvalidArgument(fmt::format(
        "byte size '{}': expected a number with an optional K/M/G/T suffix, e.g. 512M or 2G", text));
  };
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1) return bad();
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "IB") == 0) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit.back() == 'B') unit.resize(1);
  else if (unit == "B") unit.clear();
  int shift = 0;
  if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else if (!unit.empty()) return bad();
  const double value = std::strtod(number.c_str(), nullptr) * std::ldexp(1.0, shift);
  if (!std::isfinite(value) || value >= 1.8e19) return bad();
  if (value != std::floor(value)) {
    return Status::InvalidArgument(fmt::format("byte size '{}' is not a whole number of bytes", text));
  }
  return static_cast<uint64_t>(value);
}

Result<SynthReport> SynthesizeCheckpoint(const SynthOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ZM_RETURN_IF_ERROR(ValidateOptions(options));
  ZM_ASSIGN_OR_RETURN(PreparedModel model, Prepare(options));
  const ModelLayout& layout = model.layout;
  const bool t5 = options.arch == "switch_transformers";
  SpecialTokenLayout tokens;
  BpeTokenizer tokenizer;
  UnigramTokenizer unigram;
  if (t5) {
    ZM_ASSIGN_OR_RETURN(unigram, BuildUnigramTokenizer(layout.vocab_size, EnglishCorpus()));
  } else {
    ZM_ASSIGN_OR_RETURN(tokens, SpecialTokensForArch(options.arch, layout.vocab_size));
    ZM_ASSIGN_OR_RETURN(tokenizer, BuildBpeTokenizer(tokens));
  }

  const std::string& dir = options.out_dir;
  ZM_RETURN_IF_ERROR(CreateDirectories(dir));
  ZM_RETURN_IF_ERROR(RemoveStaleWeights(dir));

  // Weights first, config.json last: a directory without config.json is visibly incomplete.
  ParallelRunner runner(ResolveThreadCount(options.n_threads));
  std::unordered_map<std::string, const TensorRecipe*> recipes;
  for (const TensorRecipe& r : layout.tensors) recipes.emplace(r.spec.name, &r);
  const TensorFiller fill = [&](const TensorSpec& spec, uint8_t* out) -> Status {
    auto it = recipes.find(spec.name);
    if (it == recipes.end()) return Status::Internal(fmt::format("synth: no recipe for tensor '{}'", spec.name));
    const TensorRecipe& recipe = *it->second;
    if (recipe.spec.dtype == DType::kF8E4M3) return FillFp8(recipe, model.skew, options.seed, runner, out, nullptr);
    if (!recipe.mxfp4_source.empty()) {
      auto source = recipes.find(recipe.mxfp4_source);
      if (source == recipes.end())
        return Status::Internal(fmt::format("synth: '{}' quantizes a tensor '{}' not in the layout", spec.name,
                                            recipe.mxfp4_source));
      return FillMxfp4(*source->second, model.skew, options.seed, runner, recipe.mxfp4_scales ? nullptr : out,
                       recipe.mxfp4_scales ? out : nullptr);
    }
    if (!recipe.fp8_source.empty()) {
      auto source = recipes.find(recipe.fp8_source);
      if (source == recipes.end())
        return Status::Internal(fmt::format("synth: '{}' scales a tensor '{}' not in the layout", spec.name,
                                            recipe.fp8_source));
      return FillFp8(*source->second, model.skew, options.seed, runner, nullptr, out);
    }
    return FillTensorBf16(recipe, model.skew, options.seed, runner, out);
  };
  ZM_RETURN_IF_ERROR(WriteCheckpointWeights(dir, layout.Specs(), options.shard_size_bytes, fill));

  if (t5) {
    ZM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "tokenizer.json"), unigram.json_text));
    nlohmann::json sentinels = nlohmann::json::array();
    for (int64_t i = 0; i < unigram.n_sentinels; ++i) sentinels.push_back(fmt::format("<extra_id_{}>", i));
    ZM_RETURN_IF_ERROR(WriteJson(dir, "tokenizer_config.json",
                                 nlohmann::json{{"tokenizer_class", "T5Tokenizer"}, {"eos_token", "</s>"},
                                                {"pad_token", "<pad>"}, {"unk_token", "<unk>"},
                                                {"extra_ids", unigram.n_sentinels}, {"model_max_length", 512},
                                                {"additional_special_tokens", sentinels}}));
    ZM_RETURN_IF_ERROR(WriteJson(dir, "generation_config.json",
                                 nlohmann::json{{"_from_model_config", true}, {"decoder_start_token_id", 0},
                                                {"eos_token_id", 1}, {"pad_token_id", 0}}));
  } else {
    ZM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "tokenizer.json"), tokenizer.json_text));
    ZM_RETURN_IF_ERROR(WriteJson(dir, "tokenizer_config.json", TokenizerConfigJson(options.arch, tokens)));
    ZM_RETURN_IF_ERROR(WriteJson(dir, "generation_config.json", GenerationConfigJson(model.config)));
  }
  ZM_RETURN_IF_ERROR(WriteJson(dir, "config.json", model.config));

  SynthReport report;
  ZM_ASSIGN_OR_RETURN(std::vector<std::string> names, WeightFiles(dir));
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::error_code ec;
    const uint64_t size = fs::file_size(JoinPath(dir, name), ec);
    if (ec) return Status::IoError(fmt::format("{}: {}", JoinPath(dir, name), ec.message()));
    report.files.push_back({name, size});
    report.total_bytes += size;
  }
  report.n_tensors = static_cast<int64_t>(layout.Specs().size());
  report.weight_bytes = layout.total_bytes();
  report.vocab_size = layout.vocab_size;
  report.n_learned_merges = tokenizer.n_learned_merges;
  report.n_synthetic_merges = tokenizer.n_synthetic_merges;
  report.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

Result<RouterShareReport> MeasureRouterTopShare(const std::string& checkpoint_dir, int64_t n_tokens,
                                                uint64_t sample_seed) {
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(checkpoint_dir));
  ZM_ASSIGN_OR_RETURN(ModelLayout layout, BuildModelLayout(ckpt->config()));
  const TensorRowReader read = [&](const std::string& name, int64_t row,
                                   int64_t n_rows) -> Result<std::vector<float>> {
    ZM_ASSIGN_OR_RETURN(TensorView view, ckpt->Find(name));
    const int64_t row_len = RowLength(view.spec);
    if (row < 0 || n_rows < 0 || row + n_rows > RowCount(view.spec)) {
      return Status::InvalidArgument(fmt::format("{}: '{}' has {} rows, asked for rows [{}, {})", view.file, name,
                                                 RowCount(view.spec), row, row + n_rows));
    }
    const int64_t n = n_rows * row_len;
    if (view.spec.dtype == DType::kBF16) return Bf16RowsToFloat(view.data + 2 * row * row_len, n);
    if (view.spec.dtype == DType::kF32) {
      std::vector<float> out(static_cast<size_t>(n));
      std::memcpy(out.data(), view.data + 4 * row * row_len, static_cast<size_t>(n) * 4);
      return out;
    }
    return Status::InvalidArgument(fmt::format("{}: tensor '{}' is {}, expected BF16 or F32", view.file, name,
                                               DTypeName(view.spec.dtype)));
  };
  return MeasureTopShare(layout, read, n_tokens, sample_seed);
}

Result<RouterShareReport> MeasureSynthRouterTopShare(const SynthOptions& options, int64_t n_tokens,
                                                     uint64_t sample_seed) {
  ZM_ASSIGN_OR_RETURN(PreparedModel model, Prepare(options));
  std::unordered_map<std::string, const TensorRecipe*> recipes;
  for (const TensorRecipe& r : model.layout.tensors) recipes.emplace(r.spec.name, &r);
  const TensorRowReader read = [&](const std::string& name, int64_t row,
                                   int64_t n_rows) -> Result<std::vector<float>> {
    auto it = recipes.find(name);
    if (it == recipes.end()) return Status::NotFound(fmt::format("synth model has no tensor '{}'", name));
    const TensorRecipe& r = *it->second;
    if (row < 0 || n_rows < 0 || row + n_rows > RowCount(r.spec)) {
      return Status::InvalidArgument(fmt::format("'{}' has {} rows, asked for rows [{}, {})", name,
                                                 RowCount(r.spec), row, row + n_rows));
    }
    std::vector<uint16_t> bits(static_cast<size_t>(n_rows * RowLength(r.spec)));
    GenerateRowsBf16(r, model.skew, options.seed, row, row + n_rows, bits.data());
    return Bf16RowsToFloat(reinterpret_cast<const uint8_t*>(bits.data()), static_cast<int64_t>(bits.size()));
  };
  return MeasureTopShare(model.layout, read, n_tokens, sample_seed);
}

}  // namespace zipmoe::synth
