// The offline converter (ZipMoE §3.1 "Offline Initialization", Fig. 5 ➊➋): turns a Hugging Face MoE
// checkpoint directory into a compressed zipmoe directory.
//
// Output (docs/format.md): manifest.bin (header + FlatBuffers, schemas/manifest.fbs), experts.bin
// (per routed-expert tensor: K E-chunks, then the raw SM-chunk, each 4 KiB-aligned, one expert's
// gate/up/down tensors adjacent, ordered by (layer, expert, proj)), dense.safetensors (every other
// tensor, unchanged), and the checkpoint's other files (config.json, tokenizer*.json, ...) copied.
// The directory is built under "<out>.partial" (services/convert/compress_journal.h) and renamed into
// place only when complete, so a failure or interruption never leaves a half-written OUT_DIR; a run
// killed at any moment is resumed, per expert tensor, by the next run of the same command.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/codec.h"
#include "common/status.h"

namespace zipmoe::convert {

struct CompressOptions {
  std::string model_dir;  // Hugging Face checkpoint directory
  std::string out_dir;
  CodecOptions codec;     // of the E-chunks; level 0 = codec default
  int n_shards = 4;       // K: E-chunks per tensor (>= 1; clamped to the element count)
  int n_threads = 0;      // 0 = hardware concurrency
  bool convert_dtype = false;  // round F16/F32 expert tensors to BF16 (lossy!); without it they are split
                               // losslessly in their own dtype (served when all experts share one)
  bool overwrite = false;      // replace an existing OUT_DIR
};

struct CompressProgress {
  int64_t tensors_done = 0;
  int64_t tensors_total = 0;
  uint64_t raw_bytes_done = 0;     // original bytes (BF16 after --convert-dtype) of the expert tensors so far
  uint64_t stored_bytes_done = 0;  // chunk bytes written so far (no padding)
};

struct CompressSummary {
  int64_t expert_tensors = 0;
  int64_t dense_tensors = 0;
  uint64_t expert_bytes_raw = 0;
  uint64_t expert_bytes_stored = 0;
  uint64_t experts_file_bytes = 0;
  double seconds = 0;
  // Temporary directories of an interrupted compress of the same OUT_DIR whose process is gone removed
  // at the start: OUT.old.PID (a killed --force replace) and OUT.tmp.PID (builds before OUT.partial).
  int64_t stale_temp_dirs_removed = 0;
  // Expert tensors a killed run of the same command had written (OUT_DIR.partial), kept, not encoded again.
  int64_t resumed_tensors = 0;
  // Tensors of multi-token-prediction layers (model.layers.L, L >= num_hidden_layers) left out: not
  // used for decoding (expert_names.h IsNotDecodedTensor), and their bytes.
  int64_t mtp_tensors_skipped = 0;
  uint64_t mtp_bytes_skipped = 0;
};

// Expert tensors keep their dtype bit-exactly: BF16, F16 and F32 each get their own E/SM planes
// (common/bitfield.h); convert_dtype rounds F16/F32 to BF16 instead.
// Errors: those of Checkpoint::Open; kInvalidArgument (OUT_DIR exists without overwrite, no routed
// expert tensors found, an expert tensor that is not BF16/F16/F32 — naming it, a tensor that is not
// 2-D); kIoError writing (ENOSPC, EFBIG, ...) naming the file; kUnavailable when another compress of
// the same OUT_DIR is running. The output is built in OUT_DIR.partial and renamed into place at the
// end, so neither a failure nor a kill ever leaves a directory at OUT_DIR that looks complete.
// Resuming: experts.bin is written there in its final order and journaled per tensor; a run killed
// at any moment leaves OUT_DIR.partial, and the next run with the same inputs and options (the
// fingerprint: model files' names, sizes and mtimes, codec, level, shards, convert_dtype, the build;
// not the thread count) keeps the tensors it finds intact and continues after them, printing
// "I: compress: resuming OUT_DIR: N of M expert tensors already written"; the result is byte-identical
// to an uninterrupted run's. Other inputs or options start over (saying why). Any error (a write that
// fails with ENOSPC included) removes OUT_DIR.partial, saying so in the message, so a failed run frees
// its space. OUT_DIR.tmp.PID / OUT_DIR.old.PID directories of older, killed runs are removed at the
// start. `progress` (optional) is called from the calling thread, first right after resuming.
Result<CompressSummary> CompressModel(const CompressOptions& options,
                                      const std::function<void(const CompressProgress&)>& progress = nullptr);

}  // namespace zipmoe::convert
