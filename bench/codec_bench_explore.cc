// codec_bench section (a'): the zstd parameter exploration behind zipmoe's level 1, on exponent
// planes at the chunk sizes zipmoe produces, against the Shannon and Huffman bounds (see
// codec_bench.cc for the program and docs/benchmarks.md for results).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "bench/codec_bench.h"
#include "common/bitfield.h"

namespace zipmoe::codec_bench {
namespace {

// Mean code length in bits/symbol of an optimal (unbounded-length) Huffman code for data: the
// floor for any Huffman literal coder such as zstd's, table description not counted. Analysis only.
double HuffmanBits(const uint8_t* data, size_t n) {
  uint64_t hist[256] = {};
  AccumulateHistogram(data, static_cast<int64_t>(n), hist);
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap;
  for (uint64_t c : hist)
    if (c > 0) heap.push(c);
  if (heap.size() < 2) return heap.empty() ? 0.0 : 1.0;
  uint64_t total_bits = 0;  // each merge adds one bit to every symbol below it
  while (heap.size() > 1) {
    const uint64_t a = heap.top();
    heap.pop();
    const uint64_t b = heap.top();
    heap.pop();
    total_bits += a + b;
    heap.push(a + b);
  }
  return static_cast<double>(total_bits) / n;
}

// Explored zstd parameter sets, set directly through the advanced API.
struct ZstdParams {
  const char* name;
  int level = 0;  // if non-zero, ZSTD_c_compressionLevel first
  std::vector<std::pair<ZSTD_cParameter, int>> params;
  bool literal_only_producer = false;
};

#if ZSTD_VERSION_NUMBER >= 10504
// A sequence producer that emits no match: every block becomes Huffman literals only (the floor
// reachable with zstd's entropy stage).
size_t NoMatchProducer(void*, ZSTD_Sequence* out, size_t capacity, const void*, size_t src_size, const void*, size_t,
                       int, size_t) {
  if (capacity < 1) return ZSTD_SEQUENCE_PRODUCER_ERROR;
  out[0] = ZSTD_Sequence{0, static_cast<unsigned>(src_size), 0, 0};
  return 1;
}
#endif

std::vector<ZstdParams> ExploredParams() {
  const auto fast7 = [](int window_log, int hash_log, int target_length, bool force_literals) {
    std::vector<std::pair<ZSTD_cParameter, int>> p = {
        {ZSTD_c_strategy, ZSTD_fast}, {ZSTD_c_windowLog, window_log}, {ZSTD_c_hashLog, hash_log},
        {ZSTD_c_minMatch, 7},         {ZSTD_c_searchLog, 1},          {ZSTD_c_targetLength, target_length}};
    if (force_literals) p.push_back({ZSTD_c_literalCompressionMode, ZSTD_ps_enable});
    return p;
  };
  const auto opt7 = [](ZSTD_strategy strategy, int min_match, int hash_log, int search_log) {
    return std::vector<std::pair<ZSTD_cParameter, int>>{{ZSTD_c_strategy, strategy},    {ZSTD_c_windowLog, 17},
                                                        {ZSTD_c_hashLog, hash_log},     {ZSTD_c_chainLog, hash_log},
                                                        {ZSTD_c_searchLog, search_log}, {ZSTD_c_minMatch, min_match},
                                                        {ZSTD_c_targetLength, 999}};
  };
  std::vector<ZstdParams> sets = {
      {"zstd -1 (plain level 1)", 1, {}},
      {"zstd -3", 3, {}},
      {"zstd -9", 9, {}},
      {"zstd -19 (btultra2)", 19, {}},
      {"zstd -22", 22, {}},
      {"L1 + minMatch 7", 1, {{ZSTD_c_minMatch, 7}}},
      {"fast ml7 wlog10 (1 KiB blocks)", 0, fast7(10, 6, 0, true)},
      {"fast ml7 wlog17 hlog14", 0, fast7(17, 14, 0, true)},
      {"fast ml7 wlog17 hlog6", 0, fast7(17, 6, 0, true)},
      {"fast ml7 wlog17 hlog6 tlen131072 (no lit. flag)", 0, fast7(17, 6, 131072, false)},
      {"fast ml7 wlog17 hlog6 tlen131072 lit=on [level 1]", 0, fast7(17, 6, 131072, true)},
      {"hlog6 + targetCBlockSize 16K", 0, fast7(17, 6, 131072, true)},
      {"btopt ml7 hlog6 slog1 tlen999", 0, opt7(ZSTD_btopt, 7, 6, 1)},
      {"btultra2 ml3 hlog17 slog9 tlen999", 0, opt7(ZSTD_btultra2, 3, 17, 9)},
  };
  sets[11].params.push_back({ZSTD_c_targetCBlockSize, 16384});
#if ZSTD_VERSION_NUMBER >= 10504
  sets.push_back({"literal-only sequence producer (floor)", 1, {}, true});
#endif
  return sets;
}

}  // namespace

// (a') zstd parameter exploration on exponent planes at the chunk sizes zipmoe produces.
void RunExplore(const Flags& flags) {
  std::printf("\n## (a') zstd parameter exploration on exponent planes\n\n");
  const Bytes e = ExponentPlane(2 * kExpertValues, 42);
  const size_t chunk_sizes[] = {4096, 45056, 131072, 720896};
  std::printf("H = %.4f bits/value (entropy of the whole plane)\n\n", EntropyBits(e));
  std::printf(
      "| parameters | 4 KiB | 44 KiB | 128 KiB | 704 KiB | compress MB/s (44 KiB, CPU time) | decode GB/s (44 KiB) "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  // Bounds averaged over the chunks of each size.
  for (const char* bound : {"Shannon entropy H (per chunk)", "Huffman optimum (per chunk, no table)"}) {
    std::printf("| %s |", bound);
    for (size_t chunk : chunk_sizes) {
      const size_t n_chunks = e.size() / chunk;
      double sum = 0;
      for (size_t i = 0; i < n_chunks; ++i) {
        const Bytes one(e.begin() + i * chunk, e.begin() + (i + 1) * chunk);
        sum += bound[0] == 'S' ? EntropyBits(one) : HuffmanBits(one.data(), one.size());
      }
      std::printf(" %.4f |", sum / n_chunks);
    }
    std::printf(" | |\n");
  }
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  for (const ZstdParams& set : ExploredParams()) {
    std::printf("| %s |", set.name);
    double compress_mbps = 0;
    Rate decode;
    for (size_t chunk : chunk_sizes) {
      const size_t n_chunks = e.size() / chunk;
      std::vector<Bytes> stored(n_chunks);
      uint64_t stored_total = 0;
      const double c0 = ThreadCpuSeconds();
      for (size_t i = 0; i < n_chunks; ++i) {
        ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
        if (set.level != 0) ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, set.level);
        for (const auto& [param, value] : set.params) {
          const size_t rc = ZSTD_CCtx_setParameter(cctx.get(), param, value);
          if (ZSTD_isError(rc)) Die(std::string(set.name) + ": " + ZSTD_getErrorName(rc));
        }
#if ZSTD_VERSION_NUMBER >= 10504
        if (set.literal_only_producer) {
          ZSTD_registerSequenceProducer(cctx.get(), nullptr, NoMatchProducer);
          ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_enableSeqProducerFallback, 0);
        }
#endif
        stored[i].resize(ZSTD_compressBound(chunk));
        const size_t rc = ZSTD_compress2(cctx.get(), stored[i].data(), stored[i].size(), e.data() + i * chunk, chunk);
        if (ZSTD_isError(rc)) Die(std::string(set.name) + ": " + ZSTD_getErrorName(rc));
        stored[i].resize(rc);
        stored_total += rc;
      }
      const double seconds = ThreadCpuSeconds() - c0;
      std::printf(" %.4f |", 8.0 * stored_total / (n_chunks * chunk));
      if (chunk == 45056) {
        compress_mbps = n_chunks * chunk / seconds / 1e6;
        Bytes out(chunk);
        decode = Measure(static_cast<double>(n_chunks * chunk), flags.min_seconds / 2, [&] {
          for (const Bytes& s : stored) {
            const size_t rc = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), s.data(), s.size());
            if (rc != chunk) Die(std::string(set.name) + ": decode failed");
          }
        });
      }
    }
    std::printf(" %.1f | %s |\n", compress_mbps, CpuGbps(decode).c_str());
  }
}

}  // namespace zipmoe::codec_bench
