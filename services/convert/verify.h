// `zipmoe verify`: proves a compressed directory reproduces its Hugging Face checkpoint bit for bit.
//
// Checks, in order: manifest.bin (header checksum, record hashes, structure — see ReadManifest);
// experts.bin size, chunk placement (aligned, non-overlapping) and zero padding between chunks; for
// every expert tensor, every chunk's xxHash64, E-chunk decoding, the recovered tensor's hash, and the
// recovered bytes (BF16, F16 or F32, bit-exact) against the checkpoint tensor; every dense tensor's
// bytes against the checkpoint; and that the two directories hold exactly the same tensor names, shapes and dtypes
// (but for the multi-token-prediction layers compress leaves out: expert_names.h IsNotDecodedTensor).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace zipmoe::convert {

struct VerifyOptions {
  std::string model_dir;
  std::string compressed_dir;
  int n_threads = 0;  // 0 = hardware concurrency
};

struct VerifySummary {
  int64_t expert_tensors = 0;
  int64_t dense_tensors = 0;
  int64_t chunks = 0;
  uint64_t expert_bytes_raw = 0;
  double seconds = 0;
};

// OK iff everything is bit-exact. Otherwise the Status (kCorruption for damaged/mismatching data,
// kNotFound for missing files/tensors) describes the first bad tensor in manifest order, naming the
// file, tensor, layer/expert and chunk. `progress(done, total)` is optional, called on this thread.
Result<VerifySummary> VerifyCompressed(const VerifyOptions& options,
                                       const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace zipmoe::convert
