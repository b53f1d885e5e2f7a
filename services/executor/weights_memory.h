// Where a loaded model's weights live in memory: the files' mappings or private anonymous copies
// (LoadOptions::weights_memory, GeneratorOptions::weights_memory), and how much ended up where.
// Torch-free, for the Generator's public header and the CLI.
#pragma once

#include <cstdint>
#include <string>

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
};
inline constexpr int64_t kAnonymousWeightsReserveBytes = int64_t{1} << 30;

// How much of the loaded files ended up where (LoadOptions::weights_memory), in bytes.
struct WeightsMemoryStats {
  int64_t anonymous_bytes = 0;  // copied into anonymous memory
  int64_t mapped_bytes = 0;     // still served from file mappings (page cache)
  int files_left_mapped = 0;    // files kAnonymous left mapped because they did not fit
};

// One line for stderr: how many GiB of weights loading copied into anonymous memory and how many stay
// mapped (and why), e.g. "I: weights: 7.00 GiB in anonymous memory, 0.0 MiB mapped from the files\n";
// "" when loading read no file in full.
std::string WeightsMemoryLine(const WeightsMemoryStats& stats);

}  // namespace zipmoe::executor
