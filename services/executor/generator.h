// Generator: the executor's torch-free facade. Loads a model directory (Hugging Face checkpoint or
// compressed zipmoe directory, see model_weights.h), runs batched generation (greedy or sampled)
// over ragged prompts, and returns token ids, optional logits and timings. Callers (the CLI, the
// future HTTP service, tests, benchmarks) never see torch: only services/executor/*.cc include it.
//
// Numerics: the CPU path computes in float32 (BF16 weights upcast exactly); a CUDA libtorch path
// ("cuda" device) computes in BF16 with float32 softmax/norm/router (run on an H200: docs/benchmarks.md,
// "the first GPU run"; same tokens as the CPU, logits within ~1e-2 of max |logit|). Results are
// bit-identical run to run for the same inputs, thread count and machine, and identical whichever
// provider supplies the experts.
//
// Thread-safety: Create sets the process-wide torch intra-op thread count. One Generator runs one
// call at a time (Generate/ForwardChunks are not reentrant); distinct Generators are independent
// but share torch's thread pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "services/executor/prefetch_residuals.h"
#include "services/executor/sampler.h"
#include "services/executor/weights_memory.h"
#include "services/scheduler/device_assignment.h"

namespace zipmoe::executor {

struct GeneratorOptions {
  std::string model_dir;
  int n_threads = 0;           // compute threads: the CPU kernels' WorkPool, and torch's intra-op threads on a
                               // GPU (on the CPU torch gets 1: generator.cc); 0 = the physical cores this
                               // process may run on (ResolveComputeThreadCount, common/parallel.h)
  std::string device = "cpu";  // "cpu", or "cuda" / "cuda:N" with a CUDA build of libtorch
  // Where the weights loading reads in full are held (weights_memory.h): the files' mappings (the
  // library's default; the CLI's `--mmap`), private anonymous copies where they fit (`--no-mmap`, CPU
  // device only), or mapped first and copied by a thread at SCHED_IDLE while serving (kBackground, the
  // CLI's default on a CPU device).
  WeightsMemory weights_memory = WeightsMemory::kMapped;
  // Borrowed provider of routed experts (must outlive the Generator); null = every expert resident
  // (ResidentExpertProvider from the directory).
  ExpertProvider* expert_provider = nullptr;
  // Called with every MoE layer's routing (on the generating thread) before the provider sees it;
  // empty = no observer. Used for routing traces (`zipmoe generate --trace-out`).
  std::function<void(const LayerRouting&)> on_routing;
  // PrefetchMode::kResidual (the provider's prefetch_mode()): DALI's residual vectors
  // (prefetch_residuals.h); "" = MODEL_DIR/prefetch_residuals.safetensors.
  std::string prefetch_residuals;
  // SMoE expert substitution threshold α (importance-driven-expert-scheduling §IV-B; routing.h
  // SubstituteExperts): 0 = exact, the default; (0, 1) replaces low-score experts the provider does
  // not hold by cached ones with a close score, which changes the output. Outside [0, 1):
  // kInvalidArgument from Create.
  double substitution_alpha = 0.0;
  // DALI's Greedy Assignment (dali.txt §4.1, services/scheduler/device_assignment.h): with kGreedy
  // and an accelerator `device`, each MoE layer's activated experts are split between the CPU and
  // the accelerator by a cost model that Create measures by warm-up profiling (device_profile.h)
  // unless `device_cost` is given; CPU experts compute in float32, so logits then differ from an
  // all-accelerator run by rounding. On the CPU (float32) there is no accelerator: every expert runs
  // there and nothing changes. kNone (the default): every expert on `device`.
  scheduler::DeviceAssignmentMode device_assignment = scheduler::DeviceAssignmentMode::kNone;
  const scheduler::DeviceCostModel* device_cost = nullptr;  // borrowed for Create only; null = profile
  // The GPU executor's device F slots (issue 36; device_expert_cache.h), used on a CUDA device with
  // CUDA kernels in the binary and no device assignment, for the decoder architectures:
  //   device_memory_budget_bytes < 0 and percent 0 (auto, the default): a discrete GPU keeps every
  //     routed expert that fits in 90 % of its free memory less 2 GiB (activations, KV cache); an
  //     integrated GPU (Jetson: one memory) keeps none between layers, as the host budget holds them;
  //   device_memory_budget_percent > 0: that share of the model's routed-expert bytes (in BF16);
  //   device_memory_budget_bytes >= 0: that many bytes; 0 = stage every expert per use.
  // Ignored elsewhere.
  int64_t device_memory_budget_bytes = -1;
  double device_memory_budget_percent = 0;
  // Prefix reuse (prefix_cache.h): bytes of finished sequences' KV caches kept so that a later prompt
  // starting with their tokens continues from a copy instead of feeding them again (a multi-turn chat
  // re-sends its history). 0 = off (the default: benchmarks measure full prefills). Sequences that
  // record logits and encoder-decoder models never use it. Negative: kInvalidArgument from Create.
  int64_t prefix_cache_bytes = 0;
  // A bound on the KV caches of the sequences a session runs (issue 43): caches grow in pages of
  // kv_page_positions positions and every page counts against kv_budget_bytes. A step admits a waiting
  // prompt only when its pages fit (oldest first, no overtaking); a running sequence that needs a page
  // that is not free preempts the most recently admitted running sequence (itself, when it is that one):
  // its cache is dropped, it waits again, and when readmitted it re-prefills its prompt and every token
  // it generated, then samples on: the same tokens and log-probabilities as an uninterrupted run (the
  // kernels do not depend on the batch). A prompt whose pages alone exceed the budget is refused
  // (AddSequence: kInvalidArgument); a sequence ends, as at max_position_embeddings, where it alone would
  // not fit. Encoder-decoder models are not bounded. 0 = unbounded (the default). Negative budget or
  // page < 1: kInvalidArgument from Create.
  int64_t kv_budget_bytes = 0;
  int64_t kv_page_positions = 64;
  // Keys and values cached as BF16 instead of float32 on the CPU executor (opt-in: `--kv-cache-dtype
  // bf16`; llama.cpp's F16 cache type is its default): half the memory per position (twice the context
  // in the same KV budget) and half the bytes a long context's decode step reads. Each key and value is
  // rounded to BF16 once, as transformers' BF16 inference caches them; the logits then differ from the
  // float32 cache's within BF16 rounding (tests/services/executor/kv_cache_bf16_test.cc), and are still
  // the same bits for any batch, budget, policy and ISA. No effect on a GPU (its cache is BF16 already)
  // or an encoder-decoder model.
  bool kv_cache_bf16 = false;
  // Sliding-window layers (gpt_oss's and afmoe's sliding_attention layers, mixtral's sliding_window) cache
  // every position instead of the last window's (`--swa-full`, llama.cpp's name). By default the CPU
  // executor's caches hold only what a later query can see (KvCache::set_trim_windows): the same logits,
  // those layers' bytes bounded by their window, and the KV budget counts them so. What the default costs:
  // the prefix cache reuses such a cache only from where its windows are still whole (a chat's next turn
  // starts from a copy kept right after the prompt, as for the recurrent models). No effect on a GPU.
  bool kv_window_full = false;
  // A prompt is fed in steps of at most this many tokens (chunked prefill, as vLLM's and llama.cpp's
  // servers do): the other sequences of a session decode a token between two of its chunks instead of
  // waiting for the whole prompt, and a step's activations (and a trimmed sliding-window layer's rows,
  // KvCache::set_trim_windows) are bounded by the chunk, not the prompt. The logits are the same bits (the
  // kernels do not depend on how many tokens a step feeds). Costs: a MoE layer reads its experts once a
  // chunk (under a memory budget, a chunk's misses). 0 = the whole prompt in one step (the default here and
  // in `generate`; `serve` / `up` feed 512: docs/api.md "Chunked prefill"). Encoder-decoder models feed
  // their encoder whole. Negative: kInvalidArgument from Create.
  int64_t prefill_chunk = 0;
};

// "f32" (the default) or "bf16": GeneratorOptions::kv_cache_bf16 from `--kv-cache-dtype` /
// http.kv_cache_dtype. kInvalidArgument naming `where` otherwise.
Result<bool> ParseKvCacheDtype(const std::string& value, const std::string& where);

// The KV budget's state (Generator::kv_budget_stats).
struct KvBudgetCounters {
  bool enabled = false;
  int64_t budget_bytes = 0, used_bytes = 0;
  int64_t bytes_per_position = 0;  // every attention layer's keys and values of one position
  int64_t fixed_bytes = 0;         // per sequence, whatever its length (Gated DeltaNet state)
  uint64_t preemptions = 0;
};

// What the prefix cache did (Generator::prefix_cache_stats; prefix_cache.h keeps them).
struct PrefixCacheCounters {
  bool enabled = false;        // GeneratorOptions::prefix_cache_bytes > 0
  uint64_t lookups = 0;        // prompts looked up
  uint64_t hits = 0;           // of them, continued from an entry
  uint64_t reused_tokens = 0;  // prompt tokens not fed thanks to hits
  uint64_t inserted = 0;       // caches kept
  uint64_t evicted = 0;        // entries dropped for the budget or superseded
  int64_t entries = 0;         // entries now
  int64_t bytes = 0;           // their bytes now
  int64_t budget_bytes = 0;
};

// What the GPU executor's device F slots did (Generator::device_expert_stats).
struct DeviceExpertStats {
  bool active = false;       // the device path runs (CUDA device, device slots made)
  int64_t capacity = 0;      // experts kept between layers
  int64_t resident = 0;      // experts in slots now
  uint64_t hits = 0, misses = 0, evictions = 0, staged = 0;
  uint64_t slot_bytes = 0;   // one expert's BF16 bytes
  // Pool F on the device (the provider's cache decides: ExpertProvider::device_f_slots): its slots,
  // how many are allocated, and the leases that found their expert there / wrote it there.
  int64_t managed_slots = -1;  // -1: the executor's own LRU cache decides
  int64_t managed_allocated = 0;
  uint64_t managed_hits = 0, managed_fills = 0;
};

// A rule on what a sequence may generate (structured outputs: services/api/json_constraint.h). Each
// step, Mask() sets the logits of every token the rule forbids to -inf (after logit_bias and the
// penalties, before sampling); Accept() then moves it past the sampled token. Logprobs stay those of
// the model's raw distribution. One object per sequence; called from the generating thread only.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual void Mask(float* logits, int64_t vocab) = 0;
  virtual void Accept(int32_t token) = 0;
};

struct GenerationParams {
  int64_t max_new_tokens = 32;  // >= 0; 0 runs the prompt only (for its logits)
  SamplingParams sampling;      // temperature 0 = greedy
  // Log-probabilities handed to the BatchSession callback with every sampled token: -1 = none;
  // k >= 0 = the sampled token's and the k most likely tokens' (SampledToken).
  int32_t logprobs = -1;
  bool record_logits = false;   // keep float32 logits of every position fed through the model
  bool stop_on_eos = true;      // stop a sequence once it generates one of config().eos_token_ids
  // vLLM's stop_token_ids: a sequence that generates one of these stops as at EOS (stopped_on_eos), even
  // with stop_on_eos false.
  std::vector<int32_t> stop_token_ids;
  bool IsStopToken(int32_t t) const {
    return std::find(stop_token_ids.begin(), stop_token_ids.end(), t) != stop_token_ids.end();
  }
  // vLLM's min_tokens: while fewer tokens than this are generated, the EOS tokens (with stop_on_eos) and
  // stop_token_ids have logit -inf (cannot be sampled). 0 = off. Not with a constraint that could leave
  // nothing else (the API refuses the pair).
  int64_t min_new_tokens = 0;
  std::shared_ptr<TokenConstraint> constraint;  // null: unconstrained
};

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;  // includes the EOS (or stop_token_ids) token that stopped the sequence, if any
  bool stopped_on_eos = false;         // EOS, or one of GenerationParams::stop_token_ids
  // record_logits: float32 [logits_rows, vocab_size], one row per position fed, in order: every
  // prompt position, then each generated token that was fed back (the last generated token is not
  // fed), so logits_rows = prompt length + max(0, generated - 1). An encoder-decoder model
  // (switch_transformers) feeds the prompt to its encoder and the decoder starts from
  // decoder_start_token_id: logits_rows = 1 + max(0, generated - 1).
  std::vector<float> logits;
  int64_t logits_rows = 0;
  // Prompt tokens not fed because the prefix cache held them (GeneratorOptions::prefix_cache_bytes).
  int64_t cached_prompt_tokens = 0;
  // Forward passes of this sequence that failed with a transient error (BatchSession::Step) and were
  // run again from a re-prefill.
  int32_t transient_retries = 0;
};

// Timings of one Generate call (wall clock, seconds).
struct GenerationStats {
  double ttft_seconds = 0.0;     // start of Generate -> first token of every sequence sampled (prefill)
  double tpot_seconds = 0.0;     // mean time of one batched decode step (0 if none)
  double total_seconds = 0.0;    // whole call
  int64_t prefill_tokens = 0;    // prompt tokens fed
  int64_t decode_steps = 0;      // batched single-token steps
  int64_t decode_tokens = 0;     // tokens fed by decode steps (over all sequences)
};

// One candidate of a step's distribution: token id and its log-probability (natural log).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// A token a BatchSession sampled. Log-probabilities are those of the model's distribution at this
// step: log_softmax of the raw float32 logits (before penalties, temperature, top-k/top-p), computed
// in double, as vLLM's default "raw logprobs" and OpenAI's `logprobs` report them.
struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;           // of `id`; 0 when GenerationParams::logprobs < 0
  std::vector<TokenLogprob> top;  // the GenerationParams::logprobs most likely tokens, logprob
                                  // descending, ties by lower id; empty when logprobs <= 0
};

// Called once per generated token, in generation order: (index of the prompt, token id).
using TokenCallback = std::function<void(size_t sequence, int32_t token_id)>;

class Generator;

// The libtorch version this executor was compiled against, e.g. "1.13.0" (build-info label).
std::string TorchVersion();

// Continuous batching (iteration-level scheduling, as in Orca / vLLM): sequences join a BatchSession
// between steps and leave it as soon as they end; each Step runs ONE forward pass over the prompts
// added since the last step (their prefill) and the next token of every running sequence (decode),
// so a request arriving mid-generation does not wait for the others to finish. Each sequence has its
// own KV cache, GenerationParams and Sampler. Generate() is a session whose sequences all join
// before the first step.
//
// Numerics: a sequence sees the same weights and positions in any batch. On the CPU every product is
// batch-invariant (kernels/bf16_gemm.h: each output in a fixed summation order whatever the batch), so
// a sequence's logits are bit-identical alone, in any batch, after a prefix-cache hit or after a
// preemption (tests/services/executor/prefix_cache_test.cc, kv_budget_test.cc). On a GPU (torch's
// BF16 matmuls) a batched step may round differently from a lone run, so greedy tokens of concurrent
// sequences can differ in rare near-ties (as in every batching server).
//
// Thread-safety: none; one thread drives a session (AddSequence/Step), and a Generator runs one
// session step or Generate call at a time. The session borrows its Generator (must outlive it).
class BatchSession {
 public:
  using SequenceId = uint64_t;
  // Called on the stepping thread for each token sampled for the sequence (with log-probabilities
  // when GenerationParams::logprobs >= 0); return false to end the sequence after this token (a stop
  // string matched, the client went away). Empty = never stop.
  using SequenceCallback = std::function<bool(const SampledToken& token)>;

  // How a sequence ended.
  struct Finished {
    SequenceId id = 0;
    Status status;            // not ok: the step's forward failed (the sequence's tokens so far stay)
    GenerationResult result;  // prompt, generated ids (incl. the EOS that stopped it), logits if recorded
    bool cancelled = false;   // its callback returned false
  };

  ~BatchSession();
  BatchSession(const BatchSession&) = delete;
  BatchSession& operator=(const BatchSession&) = delete;

  // Queues a sequence; a later Step feeds its prompt (the next one, unless a KV budget makes it wait).
  // `sampler_stream` is the Sampler stream (sampler.h; Generate uses the prompt index, a server 0 so a
  // request samples alike in any batch). Errors (nothing queued): kInvalidArgument for an empty prompt, a
  // prompt longer than max_position_embeddings or than the KV budget holds, a token id outside
  // [0, vocab_size), negative max_new_tokens.
  //
  // `generated`: tokens this sequence already generated elsewhere (an executor that died mid-request,
  // resumed by the HTTP front: services/front/front_server.h). The sequence continues exactly as if it
  // had sampled them itself: its first step prefills prompt + generated, the Sampler skips their draws,
  // the penalties count them, params.constraint Accepts each (here, in order), they count against
  // max_new_tokens and appear first in GenerationResult::generated_ids; on_token is not called for
  // them. With batch-invariant kernels (the CPU) the tokens that follow are those of an uninterrupted
  // run. Errors: those above for prompt + generated, and kInvalidArgument when generated already holds
  // max_new_tokens tokens or more.
  Result<SequenceId> AddSequence(std::vector<int32_t> prompt, const GenerationParams& params,
                                 uint64_t sampler_stream = 0, SequenceCallback on_token = nullptr,
                                 std::vector<int32_t> generated = {});

  // One forward pass over every queued prompt and running sequence (with a KV budget: those that fit,
  // GeneratorOptions::kv_budget_bytes), in the order they were added; samples one token per sequence
  // fed (a sequence with max_new_tokens 0 ends after its prefill). A prompt longer than
  // GeneratorOptions::prefill_chunk is fed a chunk a step and samples after its last chunk (queued()
  // counts it until then).
  // Returns the sequences that ended in this step: EOS (when params.stop_on_eos), max_new_tokens,
  // the context length, or a callback returning false. If the forward fails, every sequence of the
  // step loses its KV cache (unusable): with a transient error (kUnavailable, kDeadlineExceeded: the
  // expert pipeline lost a process, e.g. `up` restarting the scheduler) a sequence waits again and
  // re-prefills its prompt and generated tokens, exactly as after a preemption, at most
  // kMaxTransientRetries times (GenerationResult::transient_retries); otherwise, or past that, or when
  // it records logits or the model is an encoder-decoder, it ends with that status. An exception
  // thrown by a callback propagates; the session is then only fit to be destroyed.
  std::vector<Finished> Step();

  static constexpr int32_t kMaxTransientRetries = 3;

  size_t queued() const;   // sequences waiting for their prefill
  size_t running() const;  // sequences past their prefill
  bool empty() const { return queued() + running() == 0; }
  int64_t steps() const;   // Step calls that ran a forward pass

 private:
  friend class Generator;
  struct Impl;
  explicit BatchSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Generator {
 public:
  // Loads options.model_dir and sets the torch thread count. Errors: LoadModel's (kNotFound for a
  // missing directory/tensor, kInvalidArgument for unsupported model_type or mismatched shapes,
  // kCorruption from a damaged compressed directory), kInvalidArgument for an unknown device or a
  // CUDA device without CUDA support.
  static Result<std::unique_ptr<Generator>> Create(const GeneratorOptions& options);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  const ModelConfig& config() const;
  const std::string& model_dir() const;
  int n_threads() const;
  // How many bytes of the loaded files are anonymous copies and how many stay mapped (weights_memory.h),
  // now (kBackground: the copy's progress). Thread-safe.
  WeightsMemoryStats weights_memory() const;
  // kBackground: blocks until the background copy has handled every file (copied or left mapped), at
  // most `timeout_s` seconds; true when it has (at once without a background copy). For benchmarks
  // that measure the steady state (bench/executor_bench.cc) and tests.
  bool WaitForWeightsMemory(double timeout_s) const;

  // Generates for every prompt (a ragged batch; each sequence has its own KV cache; finished
  // sequences leave the batch). Results are in prompt order. Errors: kInvalidArgument for an empty
  // prompt, a prompt longer than max_position_embeddings (naming both lengths), a token id outside
  // the vocabulary, negative max_new_tokens; provider errors; kInternal (torch).
  // Generation also stops when a sequence reaches max_position_embeddings.
  Result<std::vector<GenerationResult>> Generate(const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerationParams& params,
                                                 const TokenCallback& on_token = nullptr,
                                                 GenerationStats* stats = nullptr);

  // Feeds `chunks` one after another through one fresh sequence and returns the float32 logits of
  // every position: [sum of chunk sizes, vocab_size] (e.g. one chunk = prefill, T chunks of one
  // token = T decode steps). Errors: as Generate.
  Result<std::vector<float>> ForwardChunks(const std::vector<std::vector<int32_t>>& chunks);

  // DALI residual calibration (prefetch_residuals.h, dali.txt Eq. 11): feeds each prompt through a
  // fresh sequence (prefill only) and averages, over every prompt token, the difference between the
  // next MoE layer's router input and this one's. Errors: as Generate; kInvalidArgument for no
  // prompts or a model with fewer than two MoE layers.
  Result<PrefetchResiduals> CalibratePrefetchResiduals(const std::vector<std::vector<int32_t>>& prompts);

  // A continuous-batching session over this Generator (see BatchSession).
  std::unique_ptr<BatchSession> NewSession();

  // CoServe's dependency-aware request grouping (coserve.txt §4.2, serve's --request-grouping):
  // which experts a request depends on, and which cost nothing to serve now. Both are indexed by
  // layer ([num_hidden_layers], empty for dense layers), with distinct expert ids ascending.
  // PredictExperts: an estimate made before the prompt's prefill, from its tokens alone: each MoE
  // layer's router applied to the normalised token embeddings (Model::PredictExperts; routing
  // follows token identity closely, most in early layers). Errors: kInvalidArgument for a token id
  // outside the vocabulary; kInternal (torch). Call between steps, on the stepping thread.
  Result<std::vector<std::vector<int32_t>>> PredictExperts(const std::vector<int32_t>& prompt) const;
  // ExpertsAtHand: the provider's CachedExperts (every expert for an all-resident model) plus the
  // experts the latest forward pass selected in each layer. Call between steps, on the stepping thread.
  std::vector<std::vector<int32_t>> ExpertsAtHand() const;
  // The cost model DALI's Greedy Assignment uses (options.device_assignment kGreedy on an
  // accelerator; has_accelerator false otherwise) and what it has decided so far.
  const scheduler::DeviceCostModel& device_cost() const;
  scheduler::DeviceAssignmentStats device_assignment_stats() const;
  // The device F slots' counters (active false without them).
  DeviceExpertStats device_expert_stats() const;
  // The prefix cache's counters (enabled false without one). Call between steps, on the stepping thread.
  PrefixCacheCounters prefix_cache_stats() const;
  // The KV budget's state (enabled false without one). Call between steps, on the stepping thread.
  KvBudgetCounters kv_budget_stats() const;
  // Sets GeneratorOptions::kv_budget_bytes after Create (a server sizes it once the model is loaded),
  // before any session runs a step. Errors: kInvalidArgument for a negative budget.
  Status set_kv_budget_bytes(int64_t bytes);

 private:
  struct Impl;
  explicit Generator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zipmoe::executor
