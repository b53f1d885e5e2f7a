// Where a loaded model's weights live in memory: the files' mappings or private anonymous copies
// (LoadOptions::weights_memory, GeneratorOptions::weights_memory), how much ended up where, and the
// thread that moves them into anonymous memory while the model serves (BackgroundWeightsCopy).
// Torch-free, for the Generator's public header and the CLI.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace zipmoe::executor {

// Where the weights that the CPU kernels stream are held after loading.
enum class WeightsMemory {
  // The files' read-only memory maps (page cache): shared with other processes, droppable by the
  // kernel under memory pressure (and read back from disk then). The default, as llama.cpp's.
  kMapped,
  // Private anonymous copies in 2 MiB transparent huge pages at the same addresses
  // (MappedFile::CopyToAnonymousMemory), for a CPU device only and only when they fit: each file's
  // copy is made while MemAvailable (/proc/meminfo, page cache counted as available) exceeds its
  // size by kAnonymousWeightsReserveBytes; the others stay mapped. `--no-mmap`. On a 2-vCPU Xeon VM
  // (issue 35) decode took ~11 % less time and prefill ~20 %, while loading took ~13 s longer for
  // 7 GB (the kernel clearing fresh pages, which that VM's host backs on first touch); a kernel that
  // maps the page cache with 4 KiB pages only (no large folios for the file system) should gain more.
  // The bytes computed with are the same either way.
  kAnonymous,
  // kMapped at load (the fast start), then the same copies as kAnonymous made file by file by a
  // thread of their own at SCHED_IDLE (BackgroundWeightsCopy: it runs only on a core that has nothing
  // else to do, so it never slows a request, and a short run may end before it is done), each moved
  // over its mapping at the same addresses while the model serves: a read sees the file's bytes at any
  // moment (MappedFile::CopyToAnonymousMemory). Each file is copied only while the memory headroom
  // (MemoryHeadroomBytes: MemAvailable, and the room left under a cgroup memory limit) exceeds its size
  // by kAnonymousWeightsReserveBytes when its turn comes. The CLI's default on a CPU device (`--mmap`
  // keeps the mappings, `--no-mmap` copies before serving). On the 2-vCPU Xeon VM of issue 35 a BF16
  // read of the mapped checkpoint ran at 19 GB/s against 27-28 on its anonymous copy, and decode took
  // 6-33 % less time once the copy was done, depending on the hour (docs/benchmarks.md "Background: (m)
  // on other machines").
  kBackground,
};
inline constexpr int64_t kAnonymousWeightsReserveBytes = int64_t{1} << 30;

// "mapped", "anonymous", "background".
const char* WeightsMemoryName(WeightsMemory memory);
// Parses WeightsMemoryName's words. Errors: kInvalidArgument naming `what` (a flag or config key) and
// the text.
Result<WeightsMemory> ParseWeightsMemory(const std::string& text, const std::string& what);

// How much of the loaded files ended up where (LoadOptions::weights_memory), in bytes.
struct WeightsMemoryStats {
  int64_t anonymous_bytes = 0;  // copied into anonymous memory
  int64_t mapped_bytes = 0;     // still served from file mappings (page cache)
  int files_left_mapped = 0;    // files kAnonymous / kBackground left mapped because they did not fit
  int64_t pending_bytes = 0;    // kBackground: of mapped_bytes, the files still queued for the copy
  double background_seconds = 0;  // kBackground: from the start of the copy to its end (0 until then)
};

// The thread of WeightsMemory::kBackground: copies files into anonymous memory one at a time, in the
// order given, at SCHED_IDLE (common/thread_priority.h LowerThreadToIdle), each only when
// `headroom()` (bytes) exceeds its size by kAnonymousWeightsReserveBytes at its turn; a file whose copy
// fails or does not fit stays mapped (files_left_mapped; one whose copy failed or was cancelled part
// way counts as mapped in the stats, though the pieces moved before are anonymous). The destructor
// cancels the copy in progress (CopyToAnonymousMemory checks before each 32 MiB piece) and joins, so
// it must be destroyed before the files (LoadedModel's destructor does it first). Thread-safe: stats() and Wait() may be
// called from any thread while it runs.
class BackgroundWeightsCopy {
 public:
  struct File {
    std::string path;
    int64_t bytes = 0;
    // Copies the file into anonymous memory (SafetensorsFile::CopyToAnonymousMemory); checks the
    // flag for cancellation.
    std::function<Status(const std::atomic<bool>* cancel)> copy;
  };
  // `initial`: the stats after loading (every file in `files` counted in mapped_bytes).
  BackgroundWeightsCopy(std::vector<File> files, WeightsMemoryStats initial, std::function<int64_t()> headroom);
  ~BackgroundWeightsCopy();
  BackgroundWeightsCopy(const BackgroundWeightsCopy&) = delete;
  BackgroundWeightsCopy& operator=(const BackgroundWeightsCopy&) = delete;

  WeightsMemoryStats stats() const;
  // Blocks until every file is copied or left mapped, at most `timeout`; true when done.
  bool Wait(std::chrono::milliseconds timeout);

 private:
  void Run();

  std::vector<File> files_;
  std::function<int64_t()> headroom_;
  std::atomic<bool> cancel_{false};
  mutable Mutex mu_;
  CondVar done_cv_;
  WeightsMemoryStats stats_ ZM_GUARDED_BY(mu_);
  bool done_ ZM_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once everything above is set
};

// One line for stderr: how many GiB of weights loading copied into anonymous memory and how many stay
// mapped (and why), e.g. "I: weights: 7.00 GiB in anonymous memory, 0.0 MiB mapped from the files\n"
// (kBackground: how much is still queued, or how long the copy took); "" when loading read no file in
// full.
std::string WeightsMemoryLine(const WeightsMemoryStats& stats);

}  // namespace zipmoe::executor
