// Offline profiling of the planner's delays on this machine (ZipMoE Appendix C: "average
// decompression and I/O delays derived from offline profiling"): u (SM-chunk read), v (E-chunk
// read) and c (E-chunk decode), measured on the real chunks of a compressed directory, and the
// profile.json file that stores them (docs/planner.md "Profile file").
//
// ProfileStorage does blocking file I/O and takes seconds; it owns everything it opens. The JSON
// helpers are pure. Callable from any thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/cache_manager/plan_cost.h"

namespace zipmoe::cache_manager {

inline constexpr int32_t kProfileVersion = 1;
inline constexpr const char* kProfileFileName = "profile.json";

struct StorageProfile {
  int32_t version = kProfileVersion;
  double sm_read_us = 0;     // u: mean time to read one SM-chunk
  double e_read_us = 0;      // v: mean time to read one E-chunk
  double decompress_us = 0;  // c: mean time to decode one E-chunk on one thread
  double recovery_us = 0;        // recovery of one tensor (its dtype) on one CPU worker incl. its hash check
                                 // (the runtime's path); 0 = excluded (e.g. set by hand for a GPU)
  double expert_compute_us = 0;  // not measured; may be set by hand, 0 = excluded
  double sm_chunk_bytes = 0;        // mean bytes of the SM-chunks read
  double e_chunk_stored_bytes = 0;  // mean stored bytes of the E-chunks read
  double e_chunk_raw_bytes = 0;     // mean decoded bytes of the E-chunks decoded
  std::string io_mode;              // "o_direct", or "buffered" when O_DIRECT was refused
  std::string io_note;              // why O_DIRECT was refused ("" if it was used)
  int64_t sm_reads = 0;             // samples behind each mean
  int64_t e_reads = 0;
  int64_t decodes = 0;
  std::string codec;                // of the profiled directory
  int32_t n_shards = 0;
};

struct ProfileOptions {
  int32_t max_tensors = 96;    // expert tensors sampled (all chunks of each are read)
  int32_t decode_repeats = 5;  // decodes per E-chunk
  uint64_t seed = 1;           // which tensors are sampled (fixed: reproducible runs)
  bool try_o_direct = true;    // false: buffered reads straight away
};

// Reads up to max_tensors random expert tensors of DIR/experts.bin (every E-chunk and the SM-chunk,
// each read timed on its own, in the order E-chunks then SM-chunk as Alg. 1 issues them) and decodes
// each E-chunk decode_repeats times with DecompressChunk. Reads use O_DIRECT with 4 KiB-aligned
// buffers (chunks are 4 KiB-aligned, docs/format.md); if the file system refuses O_DIRECT, reads are
// buffered and each range is dropped from the page cache first (posix_fadvise DONTNEED), and
// io_mode/io_note say so.
// Errors: ReadManifest's, kNotFound (experts.bin), kIoError (read failed or short, naming the file
// and offset), kCorruption (an E-chunk does not decode, naming the tensor and chunk).
Result<StorageProfile> ProfileStorage(const std::string& dir, const ProfileOptions& options = {});

nlohmann::json StorageProfileToJson(const StorageProfile& profile);
// Errors: kInvalidArgument naming `where` and the missing/ill-typed field, or an unsupported version.
Result<StorageProfile> StorageProfileFromJson(const nlohmann::json& j, const std::string& where);
// Atomic write (temp + rename). Errors: kIoError.
Status WriteStorageProfile(const std::string& path, const StorageProfile& profile);
// Errors: kNotFound / kIoError naming the file, kInvalidArgument (not JSON, bad fields).
Result<StorageProfile> ReadStorageProfile(const std::string& path);

// The planner's cost model from a profile: u, v, c, recovery and compute as measured/stored; K and
// n from `model`; L = n_workers.
CostModel CostModelFromProfile(const StorageProfile& profile, const ModelPlanInputs& model, int32_t n_workers);

}  // namespace zipmoe::cache_manager
