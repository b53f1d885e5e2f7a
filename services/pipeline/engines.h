// Where the runtime's chunk reads and decodes run (ZipMoE §3.3: one I/O thread, L decompression
// workers). OffloadExpertProvider (offload_provider.h) drives a ReadEngine and a DecodeEngine with
// the same calls whether they are threads of this process (CreateLocalEngines: embedded mode, the
// default) or other processes reached over ZeroMQ (worker_dispatcher.h: `zipmoe up`, compose).
//
// Both engines take ops whose byte pointers lie in the shared arena (the cache manager's ShmRegion),
// so a remote engine can turn them into arena offsets that another process resolves in its own
// mapping. Completions are delivered through the callbacks of EngineSetup, once per op, on an
// engine thread, without any engine lock held (they may call Add/MarkReady/Cancel/Submit).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/decompressor/decompressor_pool.h"
#include "services/storage/storage_service.h"

namespace zipmoe::runtime {

// Chunk reads into the arena (storage::StorageService semantics: all-or-nothing Submit, reads run in
// submission order, one completion per op).
class ReadEngine {
 public:
  virtual ~ReadEngine() = default;
  // Errors: kInvalidArgument (an op fails validation or points outside the arena), kUnavailable (stopped).
  virtual Status Submit(std::vector<storage::ReadOp> ops) = 0;
  // Completes every op not yet completed (kUnavailable) and stops; idempotent.
  virtual void Stop() = 0;
  virtual bool direct_io() const = 0;  // reads bypass the page cache (local engine; remote: as configured)
};

// E-chunk decodes and BF16 recoveries (decompressor::DecompressorPool semantics: an idle worker takes
// the READY op with the smallest priority).
class DecodeEngine {
 public:
  virtual ~DecodeEngine() = default;
  // Errors: kInvalidArgument (invalid op, op_id in use, pointers outside the arena), kUnavailable.
  virtual Status Add(decompressor::DecompressOp op, bool ready) = 0;
  // Errors: kNotFound (unknown, running or completed op), kUnavailable.
  virtual Status MarkReady(uint64_t op_id) = 0;
  // Completes a pending op that has not started with `reason` (callback on this thread).
  // Errors: kNotFound (unknown, running or completed), kInvalidArgument (reason OK).
  virtual Status Cancel(uint64_t op_id, Status reason) = 0;
  virtual void Stop() = 0;  // pending ops complete with kUnavailable; idempotent
};

struct EngineSetup {
  std::string experts_path;  // the compressed directory's experts.bin
  bool page_cache = false;   // buffered reads instead of O_DIRECT
  int n_workers = 1;         // L (local engine)
  uint8_t* arena_base = nullptr;  // the cache manager's arena mapping in this process
  uint64_t arena_bytes = 0;
  std::string arena_name;    // its POSIX shm name ("" = not shared: remote engines refuse it)
  std::function<void(const storage::ReadCompletion&)> on_read;
  std::function<void(const decompressor::DecompressCompletion&)> on_decode;
};

struct Engines {
  std::unique_ptr<ReadEngine> reads;
  std::unique_ptr<DecodeEngine> decodes;
};

// Builds the engines of one runtime; OffloadConfig::engines, empty = CreateLocalEngines.
using EngineFactory = std::function<Result<Engines>(const EngineSetup&)>;

// A StorageService (one I/O thread) and a DecompressorPool (n_workers threads) in this process.
// Errors: StorageService::Create's (experts file), DecompressorPool::Create's.
Result<Engines> CreateLocalEngines(const EngineSetup& setup);

}  // namespace zipmoe::runtime
