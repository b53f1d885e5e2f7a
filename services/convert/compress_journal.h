// The work directory of a resumable compress (docs/format.md, "Resuming"): "<out>.partial" holds
// experts.bin, written in its final order, and compress.journal, one record per expert tensor whose
// chunks are in experts.bin and synced. A compress killed at any moment (SIGKILL, power loss) leaves
// both consistent up to the last record; the next run of the same command reopens the directory,
// keeps every recorded tensor whose chunks still hash to their recorded XXH64, truncates experts.bin
// after the last one and continues with the next tensor, so the output is byte-identical to an
// uninterrupted run's.
//
// compress.journal:
//   header  "ZMCJRNL1", u32 LE version (kCompressJournalVersion), u32 LE fingerprint length F,
//           F bytes of fingerprint text (CompressFingerprint: one "key value" line per input file and
//           option), u64 LE XXH64 of the F bytes
//   records u32 LE body length B, u64 LE XXH64 of the body, B body bytes: u32 tensor index, u64
//           experts.bin length after the tensor (unpadded), the tensor's name, dtype, codec, level,
//           n_shards, bf16_xxh64, chunks, its exponent histogram and its MXFP4 scale histogram (each
//           sparse: u32 count of index, count pairs; the second empty for other dtypes)
// A record whose length or hash does not check (a write torn by a kill) ends the journal.
//
// A CompressWorkDir holds an exclusive flock(2) on the directory for its lifetime, so a second compress
// of the same OUT_DIR fails instead of interleaving writes. Not thread-safe: one thread writes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint/manifest.h"
#include "common/file_util.h"
#include "common/status.h"

namespace zipmoe::convert {

inline constexpr uint32_t kCompressJournalVersion = 2;  // 2: the MXFP4 scale histogram
inline constexpr const char* kCompressJournalFileName = "compress.journal";

// One expert tensor as journaled: what EncodeTensor produced, placed.
struct JournaledTensor {
  // name, dtype, codec, level, n_shards, chunks (with file offsets) and bf16_xxh64; layer_id,
  // expert_id, proj, shape and record_xxh64 are not journaled (the caller derives them again).
  ExpertTensorInfo info;
  std::array<uint64_t, 256> histogram{};        // exponent histogram of the tensor
  std::array<uint64_t, 256> scale_histogram{};  // of its MXFP4 block scales (zero for other dtypes)
  uint64_t end = 0;                       // experts.bin length after its last chunk (no padding)
};

class CompressWorkDir {
 public:
  // Opens `dir` (creating it) and locks it. An existing journal whose fingerprint text equals
  // `fingerprint` is resumed: its records for tensors 0, 1, ... are kept while each names
  // tensor_names[index] and its chunks' bytes in experts.bin still hash to the recorded XXH64 and the
  // gaps between them are zero; experts.bin and the journal are truncated after the last kept one,
  // and every other file in `dir` (dense.safetensors, manifest.bin, temp files of a killed run) is
  // removed. Any other content of `dir` (no or unreadable journal, another fingerprint) is removed and
  // the work starts over; restart_reason() then says why. Errors: kUnavailable when another process
  // holds the lock (another compress of the same OUT_DIR); kInvalidArgument when `dir` exists and is
  // not a directory; kIoError naming the file.
  static Result<std::unique_ptr<CompressWorkDir>> Open(const std::string& dir, const std::string& fingerprint,
                                                       const std::vector<std::string>& tensor_names);
  ~CompressWorkDir() = default;  // closes the files and releases the lock; the directory stays
  CompressWorkDir(const CompressWorkDir&) = delete;
  CompressWorkDir& operator=(const CompressWorkDir&) = delete;

  const std::string& dir() const { return dir_; }
  const std::vector<JournaledTensor>& kept() const { return kept_; }  // resumed tensors, in index order
  const std::string& restart_reason() const { return restart_reason_; }  // "" = fresh or resumed

  // experts.bin: append at position(), zero-pad to `alignment`. Errors: kIoError naming the file.
  uint64_t position() const { return position_; }
  Status Write(const void* data, uint64_t size_bytes);
  Status PadTo(uint64_t alignment);
  // fdatasync experts.bin, then append one record per tensor (indices kept().size() + journaled so far
  // onwards) and fdatasync the journal: after it returns, a kill loses none of `tensors`.
  Status Journal(const std::vector<JournaledTensor>& tensors);
  // fsync experts.bin and close it (the caller then writes the remaining files into dir()).
  Status CloseExperts();
  // Removes the journal and closes it: dir() then holds only the output, ready to be renamed.
  Status RemoveJournal();

 private:
  CompressWorkDir() = default;
  Status StartOver(const std::string& reason);
  Status Resume(const std::string& journal_bytes, size_t header_bytes, const std::vector<std::string>& tensor_names);

  std::string dir_;
  std::string experts_path_;
  std::string journal_path_;
  UniqueFd lock_fd_;
  UniqueFd experts_fd_;
  UniqueFd journal_fd_;
  uint64_t position_ = 0;       // experts.bin append position
  uint64_t journal_bytes_ = 0;  // journal append position
  uint32_t next_index_ = 0;     // index of the next journaled tensor
  std::vector<JournaledTensor> kept_;
  std::string restart_reason_;
};

// The text a journal's fingerprint holds: the journal version, the build (version, commit), the
// options that change the output (codec, resolved level, shards, convert_dtype; not the thread count),
// every regular file of `model_dir` with its size and modification time in ns, and the expert tensor
// names in order. Errors: kIoError naming a file that cannot be stat'ed.
Result<std::string> CompressFingerprint(const std::string& model_dir, const std::string& options_line,
                                        const std::vector<std::string>& tensor_names);

// The first line in which two fingerprints differ, as "'<old line>' -> '<new line>'" (for messages).
std::string FingerprintDifference(const std::string& old_text, const std::string& new_text);

}  // namespace zipmoe::convert
