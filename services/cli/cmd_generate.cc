// `zipmoe generate`: text in, text out with the libtorch executor (services/executor/generator.h).
//
//   zipmoe generate --model DIR [--prompt TEXT | --prompt-ids 1,2,3 | --prompts-file F [--prompt-index I]]
//                   [--max-new-tokens N] [--batch N]
//                   [--temperature T] [--top-k K] [--top-p P] [--min-p M] [--repetition-penalty R]
//                   [--seed S] [--threads N]
//                   [--device cpu] [--logits-out FILE] [--json] [--chat]
//                   [--memory-budget B [--policy P] [--pools FCSE] [--decompress-threads L]
//                    [--stats-json FILE] ...]   (runtime flags: services/cli/runtime_flags.h)
//
// DIR is a Hugging Face checkpoint or a compressed zipmoe directory. Without --memory-budget every
// expert is held resident; with it (compressed DIR only) experts are served by the embedded ZipMoE
// runtime (services/pipeline/offload_provider.h) within that budget, with bit-identical outputs.
// --policy mmap (a benchmark baseline) needs the uncompressed HF DIR instead: experts are read through
// the page cache of its memory map (services/pipeline/mmap_provider.h); --memory-budget is ignored.
// --prompts-file F (a JSON array of strings or ShareGPT conversations, e.g.
// bench/data/sharegpt-first-turn-500.json): sequence i of --batch N is prompt (I + i) mod |F|, so a
// batch is a mix of real prompts of different lengths; without it --batch rotates the one prompt.
// Text prompts use DIR/tokenizer.json: Encode(text, add_special_tokens=true), or with --chat the
// tokenizer_config.json chat template around one user message (then add_special_tokens=false).
// --logits-out FILE: float32 little-endian rows [n_rows, vocab], one per position fed through the
// model in order (every prompt position, then each generated token fed back), so
// --max-new-tokens 0 writes exactly the prompt's logits.
// An encoder-decoder model (switch_transformers) feeds the prompt to its encoder; its rows are the
// decoder's: one for decoder_start_token_id, then one per generated token fed back, so a sequence has
// max(1, generated) rows. With --batch N the sequences' rows follow each other in batch order.
// --json prints {prompt_ids, generated_ids, text, ttft_s, tpot_s, tokens_per_s, batch, threads (the
// compute threads: --threads, or the physical cores this process may run on), gemm_isa and
// gemv_prefetch, f8_tile_check (the CPU matrix kernel's variant, its weight prefetch and how its FP8 tiles
// meet NaN / subnormal codes: kernels/bf16_gemm.h),
// prompt_tokens_total, generated_tokens_total} (ids and text of the first sequence), plus
// batch_prompt_ids, batch_generated_ids and batch_logits_rows: one entry per sequence of the batch
// (batch_logits_rows counts its --logits-out rows, 0 without the flag), where
// tokens_per_s = generated tokens (all sequences) / wall time of the whole generation (prefill
// included); otherwise
// the text streams to stdout as it is generated and a timing line goes to stderr.
// Torch-free: only the executor's .cc files include torch.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "common/tokenizer/tokenizer.h"
#include "kernels/bf16_gemm.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cli/cli_util.h"
#include "services/cli/commands.h"
#include "services/cli/runtime_flags.h"
#include "services/executor/generator.h"
#include "services/pipeline/mmap_provider.h"

namespace zipmoe::cli {
namespace {

// --threads above this is a typo (OpenMP would start that many threads; 100000 hung the process).
constexpr int kMaxThreads = 4096;

// A finite number >= 0, or > 0 when `positive` (CLI::NonNegativeNumber lets "nan" through: a NaN
// temperature sampled the least likely token whatever the seed).
CLI::Validator FiniteNonNegative(bool positive = false) {
  return CLI::Validator(
      [positive](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || !std::isfinite(v) || v < 0 || (positive && v == 0))
          return "'" + text + (positive ? "' is not a finite number > 0" : "' is not a finite number >= 0");
        return std::string();
      },
      positive ? "NUMBER > 0" : "NUMBER >= 0");
}

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;
  std::string prompts_file;
  int64_t prompt_index = 0;
  int64_t max_new_tokens = 32;
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  executor::WeightsMemory weights_memory = executor::WeightsMemory::kBackground;  // --no-mmap / --mmap
  std::string device = "cpu";
  std::string device_assignment = "none";
  std::string device_memory_budget;
  bool kv_cache_bf16 = false;  // --kv-cache-dtype bf16
  bool kv_window_full = false;  // --swa-full
  int64_t prefill_chunk = 0;  // --prefill-chunk (a single request: nothing waits between its chunks)
  std::string logits_out;
  std::string trace_out;
  std::string trace_events;
  bool json = false;
  bool chat = false;
  bool ignore_eos = false;
  int64_t batch = 1;
  RuntimeFlags runtime;
};

// "1,2, 3" -> {1, 2, 3}. Errors: kInvalidArgument naming the bad item.
Result<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
      return Status::InvalidArgument(fmt::format("--prompt-ids: '{}' is not a token id (in '{}')", item, text));
    ids.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return ids;
}

// Writes logits rows as float32 little-endian, atomically.
Status WriteLogits(const std::string& path, const std::vector<float>& logits) {
  static_assert(sizeof(float) == 4, "float32 expected");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  std::string bytes(logits.size() * 4, '\0');
  for (size_t i = 0; i < logits.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &logits[i], 4);
    u = __builtin_bswap32(u);
    std::memcpy(&bytes[i * 4], &u, 4);
  }
  return WriteFileAtomic(path, bytes);
#else
  return WriteFileAtomic(path, std::string_view(reinterpret_cast<const char*>(logits.data()), logits.size() * 4));
#endif
}

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

int RunGenerate(const GenerateArgs& args) {
  const int given = !args.prompt.empty() + !args.prompt_ids.empty() + !args.prompts_file.empty();
  if (given > 1) return Fail(Status::InvalidArgument("give one of --prompt, --prompt-ids or --prompts-file"));
  if (given == 0) return Fail(Status::InvalidArgument("one of --prompt, --prompt-ids or --prompts-file is required"));
  std::vector<std::string> file_prompts;
  if (!args.prompts_file.empty()) {
    Result<std::vector<std::string>> loaded = LoadPromptsFile(args.prompts_file);
    if (!loaded.ok()) return Fail(loaded.status());
    file_prompts = std::move(loaded).value();
    if (args.prompt_index < 0 || args.prompt_index >= static_cast<int64_t>(file_prompts.size())) {
      return Fail(Status::InvalidArgument(fmt::format("--prompt-index {} is outside {} ({} prompts)", args.prompt_index,
                                                      args.prompts_file, file_prompts.size())));
    }
  }
  if (args.chat && !args.prompt_ids.empty()) {
    return Fail(Status::InvalidArgument("--chat needs a text prompt (--prompt or --prompts-file)"));
  }

  // Tokenizer: required for text prompts, optional (for output text) with --prompt-ids.
  std::unique_ptr<Tokenizer> tokenizer;
  if (args.prompt_ids.empty() || Tokenizer::DirHasTokenizer(args.model_dir)) {
    Result<std::unique_ptr<Tokenizer>> loaded = Tokenizer::LoadDir(args.model_dir);
    if (!loaded.ok()) return Fail(loaded.status());
    tokenizer = std::move(loaded).value();
  }
  // Text -> ids as the server does: the chat template around one user message, or plain text with the
  // tokenizer's special tokens.
  auto encode = [&](const std::string& text) -> Result<std::vector<int32_t>> {
    if (args.chat) {
      ZM_ASSIGN_OR_RETURN(std::string templated, tokenizer->ApplyChatTemplate({ChatMessage{"user", text}}, true));
      return tokenizer->Encode(templated, /*add_special_tokens=*/false);
    }
    return tokenizer->Encode(text, /*add_special_tokens=*/true);
  };
  std::vector<int32_t> prompt_ids;
  if (!args.prompt_ids.empty()) {
    Result<std::vector<int32_t>> ids = ParseIds(args.prompt_ids);
    if (!ids.ok()) return Fail(ids.status());
    prompt_ids = std::move(ids).value();
  } else if (file_prompts.empty()) {
    Result<std::vector<int32_t>> ids = encode(args.prompt);
    if (!ids.ok()) return Fail(ids.status());
    prompt_ids = std::move(ids).value();
  }
  const TraceToFile trace_file(args.trace_events, "zipmoe generate");
  if (!trace_file.status().ok()) return Fail(trace_file.status());
  executor::GeneratorOptions options;
  options.model_dir = args.model_dir;
  options.n_threads = args.threads;
  options.weights_memory = args.weights_memory;
  options.kv_cache_bf16 = args.kv_cache_bf16;
  options.kv_window_full = args.kv_window_full;
  options.prefill_chunk = args.prefill_chunk;
  options.device = args.device;
  Result<scheduler::DeviceAssignmentMode> assignment = scheduler::ParseDeviceAssignmentMode(args.device_assignment);
  if (!assignment.ok()) return Fail(assignment.status());
  options.device_assignment = *assignment;
  if (Status st = runtime::ParseDeviceMemoryBudget(args.device_memory_budget, "--device-memory-budget",
                                                   &options.device_memory_budget_bytes,
                                                   &options.device_memory_budget_percent);
      !st.ok())
    return Fail(st);
  // Routing trace (docs/planner.md "Trace format"): one record per forward step and MoE layer; a
  // new step starts when the layer id does not increase.
  std::vector<cache_manager::ActivationRecord> trace;
  if (!args.trace_out.empty()) {
    options.on_routing = [&trace](const LayerRouting& routing) {
      cache_manager::ActivationRecord rec;
      rec.step = trace.empty() ? 0 : trace.back().step + (routing.layer_id <= trace.back().layer_id ? 1 : 0);
      rec.layer_id = routing.layer_id;
      rec.expert_ids = routing.expert_ids;
      rec.tokens_per_expert = routing.tokens_per_expert;
      trace.push_back(std::move(rec));
    };
  }
  const bool mmap_baseline = UsesMmapBaseline(args.runtime);
  if (args.runtime.memory_budget.empty() && !args.runtime.stats_json.empty() && !mmap_baseline) {
    return Fail(Status::InvalidArgument("--stats-json needs --memory-budget (the runtime's statistics)"));
  }
  std::unique_ptr<runtime::OffloadExpertProvider> provider;
  std::unique_ptr<runtime::MmapExpertProvider> mmap_provider;  // --policy mmap: the llama.cpp-like baseline
  if (mmap_baseline) {
    Result<std::unique_ptr<runtime::MmapExpertProvider>> created = runtime::MmapExpertProvider::Create(args.model_dir);
    if (!created.ok()) return Fail(created.status());
    mmap_provider = std::move(created).value();
    options.expert_provider = mmap_provider.get();
    std::fprintf(stderr, "%s",
                 fmt::format("I: runtime: policy mmap, experts demand-paged from the memory map of {} (no cache of "
                             "its own: the page cache, under whatever memory cap the process runs in){}\n",
                             args.model_dir, args.runtime.memory_budget.empty() ? "" : "; --memory-budget ignored")
                     .c_str());
  } else {
    Result<std::unique_ptr<runtime::OffloadExpertProvider>> created = CreateRuntime(
        args.runtime, args.model_dir, args.device, options.device_assignment == scheduler::DeviceAssignmentMode::kNone,
        args.device_memory_budget);
    if (!created.ok()) return Fail(created.status());
    provider = std::move(created).value();
    options.expert_provider = provider.get();
  }
  options.substitution_alpha = args.runtime.substitution_alpha;
  if (options.substitution_alpha != 0 && provider == nullptr)
    std::fprintf(stderr, "W: --substitution-alpha has no effect without --memory-budget: every expert is served as is\n");
  Result<std::unique_ptr<executor::Generator>> generator = executor::Generator::Create(options);
  if (!generator.ok()) return Fail(generator.status());
  if (const std::string unused = (*generator)->config().UnusedParts(); !unused.empty())
    std::fprintf(stderr, "I: the checkpoint's %s: not used for decoding, not loaded\n", unused.c_str());
  if (args.weights_memory == executor::WeightsMemory::kAnonymous)
    std::fprintf(stderr, "%s", executor::WeightsMemoryLine((*generator)->weights_memory()).c_str());
  const bool assigning = options.device_assignment == scheduler::DeviceAssignmentMode::kGreedy;
  if (assigning) std::fprintf(stderr, "%s", DeviceAssignmentLine(**generator, "profiled").c_str());

  executor::GenerationParams params;
  params.max_new_tokens = args.max_new_tokens;
  params.stop_on_eos = !args.ignore_eos;
  params.sampling.temperature = args.temperature;
  params.sampling.top_k = args.top_k;
  params.sampling.top_p = args.top_p;
  params.sampling.min_p = args.min_p;
  params.sampling.repetition_penalty = args.repetition_penalty;
  params.sampling.seed = args.seed;
  params.record_logits = !args.logits_out.empty();

  std::unique_ptr<StreamDecoder> stream;
  if (tokenizer && !args.json) stream = std::make_unique<StreamDecoder>(*tokenizer, /*skip_special_tokens=*/true);
  // The runtime's counters when the first token is sampled: what the prefill read and missed
  // (--stats-json "prefill"), so the decode steps' share needs no second run.
  std::optional<runtime::RuntimeStats> prefill_stats;
  auto on_token = [&](size_t sequence, int32_t id) {
    if (provider != nullptr && !prefill_stats) prefill_stats = provider->stats();
    if (args.json || sequence != 0) return;  // streams the first sequence only
    const std::string piece = stream ? stream->Step(id) : fmt::format("{} ", id);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  executor::GenerationStats stats;
  // --batch N: sequence i is prompt (I + i) mod |F| of --prompts-file, or else the one prompt rotated
  // left by i mod its length (distinct routing, same length).
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < args.batch; ++i) {
    if (!file_prompts.empty()) {
      const size_t index = static_cast<size_t>(args.prompt_index + i) % file_prompts.size();
      Result<std::vector<int32_t>> ids = encode(file_prompts[index]);
      if (!ids.ok()) {
        return Fail(Status::InvalidArgument(fmt::format("{} prompt {}: {}", args.prompts_file, index,
                                                        ids.status().ToString())));
      }
      prompts.push_back(std::move(ids).value());
      continue;
    }
    std::vector<int32_t> p = prompt_ids;
    if (!p.empty()) std::rotate(p.begin(), p.begin() + static_cast<ptrdiff_t>(i % static_cast<int64_t>(p.size())), p.end());
    prompts.push_back(std::move(p));
  }
  Result<std::vector<executor::GenerationResult>> results = (*generator)->Generate(prompts, params, on_token, &stats);
  if (!results.ok()) return Fail(results.status());
  const executor::GenerationResult& r = results->front();
  size_t generated_total = 0, prompt_total = 0;
  for (const executor::GenerationResult& row : *results) {
    generated_total += row.generated_ids.size();
    prompt_total += row.prompt_ids.size();
  }

  if (!args.logits_out.empty()) {
    std::vector<float> all;
    for (const executor::GenerationResult& row : *results) all.insert(all.end(), row.logits.begin(), row.logits.end());
    Status st = WriteLogits(args.logits_out, all);
    if (!st.ok()) return Fail(st);
  }
  if (!args.trace_out.empty()) {
    std::string lines;
    for (const auto& rec : trace) lines += cache_manager::FormatTraceLine(rec) + "\n";
    Status st = WriteFileAtomic(args.trace_out, lines);
    if (!st.ok()) return Fail(st);
  }
  // --stats-json: the provider's statistics plus this generation's timings and token counts.
  auto write_stats_json = [&](nlohmann::json j) {
    j["ttft_s"] = stats.ttft_seconds;
    j["tpot_s"] = stats.tpot_seconds;
    j["total_s"] = stats.total_seconds;
    j["prompt_tokens"] = r.prompt_ids.size();
    j["generated_tokens"] = r.generated_ids.size();
    j["batch"] = args.batch;
    j["generated_tokens_total"] = generated_total;
    j["prompt_tokens_total"] = prompt_total;
    return WriteFileAtomic(args.runtime.stats_json, j.dump(2) + "\n");
  };
  if (mmap_provider != nullptr) {
    const runtime::MmapProviderStats ms = mmap_provider->stats();
    if (!args.runtime.stats_json.empty()) {
      nlohmann::json j;
      j["model"] = args.model_dir;
      j["policy"] = "mmap";
      j["mmap"] = {{"experts_served", ms.experts_served},
                   {"expert_bytes", ms.expert_bytes},
                   {"major_faults", ms.major_faults},
                   {"minor_faults", ms.minor_faults}};
      Status st = write_stats_json(std::move(j));
      if (!st.ok()) return Fail(st);
    }
    std::fprintf(stderr, "%s", fmt::format("I: runtime: mmap served {} experts ({:.1f} MiB of BF16), {} major / {} minor "
                                           "page faults\n",
                                           ms.experts_served, ms.expert_bytes / 1048576.0, ms.major_faults,
                                           ms.minor_faults).c_str());
  }
  if (provider != nullptr) {
    const runtime::RuntimeStats rs = provider->stats();
    if (!args.runtime.stats_json.empty()) {
      nlohmann::json j = runtime::RuntimeStatsToJson(rs);
      j["model"] = args.model_dir;
      j["policy"] = cache_manager::CachePolicyName(provider->config().policy);
      j["pools_enabled"] = provider->config().pools;
      j["decompress_threads"] = provider->config().n_workers;
      j["substitution"]["alpha"] = args.runtime.substitution_alpha;
      if (prefill_stats) {
        const runtime::RuntimeStats& p = *prefill_stats;
        j["prefill"] = {{"requests", p.cache.lookups},
                        {"misses", p.cache.misses},
                        {"io", {{"ops", p.io_ops},
                                {"bytes_e", p.io_bytes_e},
                                {"bytes_sm", p.io_bytes_sm},
                                {"bytes_transferred", p.io_read_bytes}}}};
      }
      Status st = write_stats_json(std::move(j));
      if (!st.ok()) return Fail(st);
    }
    std::fprintf(stderr, "%s", fmt::format("I: runtime: {} requests, {} misses, hit rate {:.1f}%, read {:.1f} MiB "
                                           "(E {:.1f}, SM {:.1f}), {} decodes, mean makespan/bound {:.2f}{}\n",
                                           rs.cache.lookups, rs.cache.misses,
                                           rs.cache.lookups ? 100.0 * rs.cache.HitsTotal() / rs.cache.lookups : 0.0,
                                           (rs.io_bytes_e + rs.io_bytes_sm) / 1048576.0, rs.io_bytes_e / 1048576.0,
                                           rs.io_bytes_sm / 1048576.0, rs.decode_ops,
                                           runtime::MeanMakespanOverBound(rs),
                                           args.runtime.substitution_alpha > 0
                                               ? fmt::format(", {} of {} routed experts substituted (alpha {})",
                                                             rs.substitution.substituted, rs.substitution.routed,
                                                             args.runtime.substitution_alpha)
                                               : std::string()).c_str());
  }
  if (assigning) std::fprintf(stderr, "%s", DeviceAssignmentLine(**generator, "decided").c_str());
  std::fprintf(stderr, "%s", DeviceExpertsLine(**generator).c_str());
  const double tokens_per_s =
      stats.total_seconds > 0 ? static_cast<double>(generated_total) / stats.total_seconds : 0.0;
  if (args.json) {
    nlohmann::json out;
    out["prompt_ids"] = r.prompt_ids;
    out["generated_ids"] = r.generated_ids;
    out["text"] = tokenizer ? tokenizer->Decode(r.generated_ids, /*skip_special_tokens=*/true) : std::string();
    out["ttft_s"] = stats.ttft_seconds;
    out["tpot_s"] = stats.tpot_seconds;
    out["tokens_per_s"] = tokens_per_s;
    out["batch"] = args.batch;
    out["threads"] = (*generator)->n_threads();
    out["gemm_isa"] = kernels::GemmIsaName(kernels::BestGemmIsa());
    out["gemv_prefetch"] = kernels::GemvPrefetchName(kernels::ActiveGemvPrefetch());
    out["f8_tile_check"] = kernels::F8TileCheckName(kernels::ActiveF8TileCheck());
    out["prompt_tokens_total"] = prompt_total;
    out["generated_tokens_total"] = generated_total;
    // Every sequence of the batch, as parallel arrays (no nested objects: callers find the line's
    // object by its last `{"`).
    nlohmann::json prompts_ids = nlohmann::json::array(), generated_ids = nlohmann::json::array(),
                   logits_rows = nlohmann::json::array();
    for (const executor::GenerationResult& row : *results) {
      prompts_ids.push_back(row.prompt_ids);
      generated_ids.push_back(row.generated_ids);
      logits_rows.push_back(row.logits_rows);
    }
    out["batch_prompt_ids"] = std::move(prompts_ids);
    out["batch_generated_ids"] = std::move(generated_ids);
    out["batch_logits_rows"] = std::move(logits_rows);
    if (assigning) out["device_assignment"] = DeviceAssignmentJson(**generator);
    out["device_experts"] = DeviceExpertsJson(**generator);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (stream) {
    const std::string rest = stream->Flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "I: prompt %zu tokens, generated %zu tokens%s; ttft %.3f s, tpot %.3f s, %.2f tokens/s (%d compute threads)\n",
               r.prompt_ids.size(), r.generated_ids.size(), r.stopped_on_eos ? " (eos)" : "", stats.ttft_seconds,
               stats.tpot_seconds, tokens_per_s, (*generator)->n_threads());
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GenerateArgs>();  // shared: outlives this function, owned by the callback
  CLI::App* cmd = app.add_subcommand("generate", "generate text with a MoE model (HF or compressed directory)");
  cmd->add_option("--model", args->model_dir, "model directory (Hugging Face checkpoint or compressed)")
      ->required();
  cmd->add_option("--prompt", args->prompt, "prompt text (needs tokenizer.json or tiktoken.model in the model directory)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "prompt token ids, comma-separated (e.g. 1,2,3)");
  cmd->add_option("--prompts-file", args->prompts_file,
                  "JSON array of prompt strings or ShareGPT conversations (bench/data/sharegpt-first-turn-500.json): "
                  "sequence i of --batch takes prompt --prompt-index + i");
  cmd->add_option("--prompt-index", args->prompt_index, "first prompt of --prompts-file to use")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", args->max_new_tokens, "tokens to generate (0 = prompt only)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", args->temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()
      ->check(FiniteNonNegative());
  cmd->add_option("--top-k", args->top_k, "keep the K most likely tokens (0 = all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->top_p, "nucleus sampling mass (1 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->check(FiniteNonNegative());
  cmd->add_option("--min-p", args->min_p, "keep tokens at least this fraction of the most likely one's probability (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition-penalty", args->repetition_penalty,
                  "divide (positive) / multiply (negative) the logits of tokens seen in the prompt or the answer (1 = off)")
      ->capture_default_str()
      ->check(FiniteNonNegative(/*positive=*/true));
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", args->threads, "compute threads (0 = the physical cores this process may run on)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxThreads));
  AddWeightsMemoryFlags(cmd, &args->weights_memory);
  cmd->add_option("--device", args->device, "cpu, or cuda[:N] with a CUDA libtorch")->capture_default_str();
  cmd->add_option("--device-assignment", args->device_assignment, kDeviceAssignmentHelp)->capture_default_str();
  cmd->add_option("--device-memory-budget", args->device_memory_budget, kDeviceMemoryBudgetHelp);
  AddKvCacheDtypeFlag(cmd, &args->kv_cache_bf16);
  AddSwaFullFlag(cmd, &args->kv_window_full);
  AddPrefillChunkFlag(cmd, &args->prefill_chunk);
  cmd->add_option("--logits-out", args->logits_out,
                  "write float32 LE logits [n_rows, vocab], one row per position fed through the model");
  cmd->add_flag("--json", args->json, "print {prompt_ids, generated_ids, text, ttft_s, tpot_s, tokens_per_s}");
  cmd->add_flag("--chat", args->chat, "wrap --prompt in the model's chat template as a user message");
  cmd->add_option("--trace-events", args->trace_events,
                  "write this run's timeline (layers, expert waits, reads, decodes) as Chrome trace JSON to FILE "
                  "(open it in ui.perfetto.dev)");
  cmd->add_option("--trace-out", args->trace_out,
                  "write the routing trace (JSON lines: step, layer, experts, tokens) for `zipmoe plan --trace`");
  AddRuntimeFlags(cmd, &args->runtime, /*budget_required=*/false);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past EOS until --max-new-tokens (benchmarks)");
  cmd->add_option("--batch", args->batch,
                  "generate N sequences at once (sequence i: prompt --prompt-index + i of --prompts-file, else the prompt "
                  "rotated left by i mod its length; "
                  "--logits-out writes every sequence's rows, in order; text/--json show the first)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([args, exit_code] { *exit_code = RunGenerate(*args); });
}

}  // namespace zipmoe::cli
