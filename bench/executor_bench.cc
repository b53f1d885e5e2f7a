// executor_bench: prefill and decode throughput of the libtorch executor with every expert
// resident (the upper bound the offloading runtime is measured against).
//
//   executor_bench MODEL_DIR [--threads N] [--prompt-len P | --prompt-ids 1,2,3] [--decode-tokens D] [--batch B]
//                  [--reps R] [--no-mmap | --mmap] [--kv-budget-mib M]
//
// Where the weights live (services/executor/weights_memory.h), as in `zipmoe generate`/`serve`: by
// default mapped, then copied into anonymous memory by the background copy, which the bench waits for
// before the first repetition (it measures the steady state a server reaches; the wait is printed);
// --no-mmap copies them before (kAnonymous); --mmap keeps the files' memory maps (kMapped). The line
// "I: weights: ..." says where they ended up.
// --kv-budget-mib M bounds the KV caches as `serve` does (GeneratorOptions::kv_budget_bytes: caches grow in
// pages of kv_page_positions positions instead of doubling); 0, the default, leaves them unbounded.
// Prompts are random token ids (fixed seed), or the --prompt-ids given (every sequence of the batch
// gets them; bench/suite.py's experiment (m) gives llama.cpp the same ids). Each repetition runs one
// Generate call (greedy, EOS ignored) of D + 1 new tokens: prefill tokens/s = B * P / ttft, decode
// tokens/s = B / tpot. The best repetition after one warm-up is reported. A small driver, not a timed test.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16_gemm.h"
#include "services/executor/generator.h"

namespace {

struct BenchArgs {
  std::string model_dir;
  int threads = 0;
  int64_t prompt_len = 128;
  int64_t decode_tokens = 32;
  int64_t batch = 1;
  int reps = 3;
  bool no_mmap = false;
  bool mmap = false;
  int64_t kv_budget_mib = 0;
  std::vector<int32_t> prompt_ids;  // empty: random ids
};

bool ParseIds(const std::string& text, std::vector<int32_t>* out) {
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0) return false;
    out->push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return !out->empty();
}

bool ParseArgs(int argc, char** argv, BenchArgs* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&](int64_t* out) {
      if (i + 1 >= argc) return false;
      *out = std::strtoll(argv[++i], nullptr, 10);
      return true;
    };
    int64_t v = 0;
    if (arg == "--threads" && next(&v)) {
      a->threads = static_cast<int>(v);
    } else if (arg == "--prompt-len" && next(&v)) {
      a->prompt_len = v;
    } else if (arg == "--decode-tokens" && next(&v)) {
      a->decode_tokens = v;
    } else if (arg == "--batch" && next(&v)) {
      a->batch = v;
    } else if (arg == "--prompt-ids" && i + 1 < argc) {
      if (!ParseIds(argv[++i], &a->prompt_ids)) return false;
      a->prompt_len = static_cast<int64_t>(a->prompt_ids.size());
    } else if (arg == "--reps" && next(&v)) {
      a->reps = static_cast<int>(v);
    } else if (arg == "--kv-budget-mib" && next(&v)) {
      a->kv_budget_mib = v;
    } else if (arg == "--no-mmap" && !a->mmap) {
      a->no_mmap = true;
    } else if (arg == "--mmap" && !a->no_mmap) {
      a->mmap = true;
    } else if (!arg.empty() && arg[0] != '-' && a->model_dir.empty()) {
      a->model_dir = arg;
    } else {
      return false;
    }
  }
  return !a->model_dir.empty() && a->prompt_len > 0 && a->decode_tokens >= 0 && a->batch > 0 && a->reps > 0 &&
         a->kv_budget_mib >= 0 && a->kv_budget_mib <= (int64_t{1} << 40);  // bytes = MiB << 20 fits int64
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: executor_bench MODEL_DIR [--threads N] [--prompt-len P | --prompt-ids 1,2,3] "
                 "[--decode-tokens D] [--batch B] [--reps R] [--no-mmap | --mmap] [--kv-budget-mib M]\n");
    return 2;
  }
  zipmoe::executor::GeneratorOptions options;
  options.model_dir = args.model_dir;
  options.n_threads = args.threads;
  options.kv_budget_bytes = args.kv_budget_mib << 20;
  options.weights_memory = args.no_mmap ? zipmoe::executor::WeightsMemory::kAnonymous
                           : args.mmap  ? zipmoe::executor::WeightsMemory::kMapped
                                        : zipmoe::executor::WeightsMemory::kBackground;
  auto generator = zipmoe::executor::Generator::Create(options);
  if (!generator.ok()) {
    std::fprintf(stderr, "E: %s\n", generator.status().ToString().c_str());
    return 1;
  }
  (*generator)->WaitForWeightsMemory(3600.0);  // kBackground: the steady state (at once otherwise)
  std::fprintf(stderr, "%s", zipmoe::executor::WeightsMemoryLine((*generator)->weights_memory()).c_str());
  const zipmoe::ModelConfig& config = (*generator)->config();
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(args.batch));
  for (auto& p : prompts) {
    if (!args.prompt_ids.empty()) {
      p = args.prompt_ids;
      continue;
    }
    for (int64_t i = 0; i < args.prompt_len; ++i) p.push_back(token(rng));
  }

  zipmoe::executor::GenerationParams params;
  params.max_new_tokens = args.decode_tokens + 1;
  params.stop_on_eos = false;
  double best_prefill = 0.0, best_decode = 0.0;
  for (int rep = 0; rep <= args.reps; ++rep) {  // rep 0 warms up
    zipmoe::executor::GenerationStats stats;
    auto r = (*generator)->Generate(prompts, params, nullptr, &stats);
    if (!r.ok()) {
      std::fprintf(stderr, "E: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (rep == 0) continue;
    const double prefill = static_cast<double>(stats.prefill_tokens) / stats.ttft_seconds;
    const double decode = stats.tpot_seconds > 0 ? static_cast<double>(args.batch) / stats.tpot_seconds : 0.0;
    std::printf("I: rep %d: ttft %.4f s, tpot %.4f s, prefill %.1f tokens/s, decode %.2f tokens/s\n", rep,
                stats.ttft_seconds, stats.tpot_seconds, prefill, decode);
    best_prefill = std::max(best_prefill, prefill);
    best_decode = std::max(best_decode, decode);
  }
  // Which matrix kernel ran (ZIPMOE_GEMM_ISA or the CPU's best), how its GEMV prefetched
  // (ZIPMOE_GEMV_PREFETCH or the CPU's default) and how its FP8 tiles met NaN / subnormal codes
  // (ZIPMOE_F8_TILE_CHECK or the CPU's default): bench (m) reports the first two per machine.
  std::printf("I: gemm isa %s, gemv prefetch %s, f8 tile check %s\n",
              zipmoe::kernels::GemmIsaName(zipmoe::kernels::BestGemmIsa()),
              zipmoe::kernels::GemvPrefetchName(zipmoe::kernels::ActiveGemvPrefetch()),
              zipmoe::kernels::F8TileCheckName(zipmoe::kernels::ActiveF8TileCheck()));
  std::printf("%s (%s): threads %d, batch %lld, prompt %lld, decode %lld: prefill %.1f tokens/s, decode %.2f tokens/s\n",
              args.model_dir.c_str(), config.model_type.c_str(), (*generator)->n_threads(),
              static_cast<long long>(args.batch), static_cast<long long>(args.prompt_len),
              static_cast<long long>(args.decode_tokens), best_prefill, best_decode);
  return 0;
}
