// StorageService: the dedicated I/O thread of ZipMoE §3.3 ("We create a dedicated I/O thread for all
// SSD reads"): reads E-chunks and SM-chunks of experts.bin, strictly in the order they are submitted,
// into caller-owned 4 KiB-aligned destinations, and verifies each chunk's xxHash64 before reporting
// it. One StorageService per device (SSD) and file; it owns exactly one I/O thread.
//
// Flow for a scheduler:
//   1. Submit({ReadOp...}) appends ops to the FIFO in order (Alg. 1 block order: E-chunks before
//      SM-chunks within a block). Submit validates and returns at once.
//   2. The I/O thread preads each op (O_DIRECT by default, see ChunkFile; ops that continue each other in
//      the file in one preadv, see kMaxCoalescedChunks), hashes the stored bytes
//      and invokes `on_complete(ReadCompletion)` on the I/O thread, in submission order; a scheduler
//      reacts there, e.g. marks the E-chunk's decode op READY in the decompressor pool.
//   3. A non-OK completion means the destination bytes must not be used: kCorruption (hash
//      mismatch, or EOF inside the chunk) names file, offset, tensor, layer, expert and chunk;
//      kIoError names file, offset and errno text; kUnavailable = stopped before the op was read.
//   4. Shut down with Stop() (or RequestStop() from a callback): queued ops complete kUnavailable.
// Every submitted op completes exactly once. WaitFor(op_id) blocks for one op's completion (tests,
// simple callers) when `retain_completions` is set.
//
// Without an I/O thread (StorageConfig::io_thread = false) the thread that submits runs the reads
// too, with RunQueued(): the storage process's request loop reads a request's chunks itself, so a
// request that arrives through a shared-memory pipe starts its read without waking a second thread
// (one wake-up less on the path of a cache miss, docs/messaging.md). Order and callbacks are the same;
// "the I/O thread" below is then the thread in RunQueued().
//
// Thread-safety: Submit, WaitFor, stats and Stop may be called from any thread, including from
// `on_complete` (except Stop: it joins the I/O thread). Destinations must stay valid until the op
// completes. Lock order: mu_ only; never held while reading, hashing or calling back.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/checkpoint/manifest.h"
#include "common/mutex.h"
#include "common/status.h"
#include "services/storage/chunk_file.h"

namespace zipmoe::storage {

// One chunk read. Labels are for messages and metrics only.
struct ReadOp {
  uint64_t op_id = 0;             // unique among the ops not yet completed
  uint64_t file_offset = 0;       // multiple of kChunkAlignmentBytes (4096)
  uint64_t stored_bytes = 0;      // chunk bytes in the file (ChunkInfo::stored_bytes)
  uint8_t* dst = nullptr;         // [dst_capacity_bytes], 4 KiB-aligned; not owned
  uint64_t dst_capacity_bytes = 0;  // >= RoundUpBytes(stored_bytes): O_DIRECT reads the padding too
  uint64_t xxh64 = 0;             // expected xxHash64 of the stored bytes (ChunkInfo::xxh64)
  // Labels.
  std::string tensor_name;
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  ChunkKind kind = ChunkKind::kE;
  int32_t chunk_index = -1;       // index into ExpertTensorInfo::chunks
};

// The op for chunk `chunk_index` of tensor `t` into `dst` (capacity dst_capacity_bytes).
ReadOp MakeChunkReadOp(const ExpertTensorInfo& t, int chunk_index, uint64_t op_id, uint8_t* dst,
                       uint64_t dst_capacity_bytes);

struct ReadCompletion {
  uint64_t op_id = 0;
  Status status;                 // OK: dst[0, stored_bytes) holds the verified chunk
  ChunkKind kind = ChunkKind::kE;
  uint64_t stored_bytes = 0;
  uint64_t read_bytes = 0;       // bytes transferred from the file (incl. 4 KiB padding under O_DIRECT)
  uint64_t read_us = 0;          // time in pread (u in ZipMoE §3.3 for an SM-chunk)
  uint64_t verify_us = 0;        // time hashing the stored bytes
};

// The I/O thread reads the op at the head of its queue together with the ops queued right behind it
// whose chunks continue it in the file (Alg. 1 lists a tensor's E-chunks back to back, and the
// converter writes them back to back): one preadv of up to kMaxCoalescedChunks chunks and
// kMaxCoalescedBytes. Reads stay in submission order; each op still completes (and is verified) alone.
inline constexpr size_t kMaxCoalescedChunks = 64;
inline constexpr uint64_t kMaxCoalescedBytes = uint64_t{8} << 20;

struct StorageConfig {
  std::string path;              // experts.bin, or any file of 4 KiB-aligned chunks
  bool page_cache = false;       // false: O_DIRECT (buffered fallback if refused); true: buffered pread
  // Called once per op on the I/O thread (kUnavailable ones at Stop included), in submission order.
  // Must not throw and must not call Stop(). May call Submit(). Empty = no callback.
  std::function<void(const ReadCompletion&)> on_complete;
  // Called on the I/O thread after the on_complete calls of one read (a coalesced read completes
  // several ops at once), so a caller can send those completions together. Empty = none.
  std::function<void()> on_read_done;
  bool retain_completions = false;  // keep completions until WaitFor(op_id) takes them
  // false: no I/O thread is started; submitted ops are read when the owner calls RunQueued().
  bool io_thread = true;
};

struct StorageStats {
  uint64_t ops_ok = 0;
  uint64_t ops_failed = 0;       // kCorruption / kIoError
  uint64_t ops_unavailable = 0;  // dropped by Stop
  uint64_t reads = 0;            // pread/preadv calls made (fewer than ops when chunks were coalesced)
  uint64_t io_bytes_e = 0;       // verified stored bytes of E-chunks
  uint64_t io_bytes_sm = 0;      // verified stored bytes of SM-chunks
  uint64_t read_us = 0;          // total pread time
  uint64_t verify_us = 0;        // total hashing time
};

class StorageService {
 public:
  // Opens config.path (ChunkFile::Open's errors) and starts the I/O thread.
  static Result<std::unique_ptr<StorageService>> Create(const StorageConfig& config);
  ~StorageService();  // Stop()
  StorageService(const StorageService&) = delete;
  StorageService& operator=(const StorageService&) = delete;

  // Appends `ops` to the read queue, in order. All-or-nothing: errors enqueue nothing.
  // Errors: kInvalidArgument (offset not 4 KiB-aligned, dst null/unaligned, capacity below the
  // rounded size, duplicate op_id among ops not yet completed; names the op and tensor),
  // kUnavailable (RequestStop() or Stop() was called).
  Status Submit(std::vector<ReadOp> ops);

  // Without an I/O thread: reads every queued op on the calling thread (callbacks included) until the
  // queue is empty, and returns; after RequestStop the queued ops complete with kUnavailable. One
  // thread at a time (calls are serialised); not from on_complete. With an I/O thread: does nothing.
  void RunQueued();

  // Blocks until op_id completes and returns (and forgets) its completion (without an I/O thread it
  // runs the queue first). Errors: kInvalidArgument (retain_completions is off), kNotFound (op_id
  // unknown, or its completion was already taken).
  Result<ReadCompletion> WaitFor(uint64_t op_id);

  // Begins stopping without waiting: Submit() fails from now on; the read in progress finishes and
  // every op still queued completes with kUnavailable on the I/O thread. Callable from any thread,
  // on_complete included (e.g. a scheduler giving up after a fatal error).
  void RequestStop();
  // RequestStop(), then joins the I/O thread (without one: runs the queue, completing what is left
  // with kUnavailable), so every submitted op has completed when it returns. Idempotent; safe from any
  // thread but the I/O thread itself.
  void Stop();

  const std::string& path() const { return file_.path(); }
  bool direct_io() const { return file_.direct_io(); }  // reads bypass the page cache
  bool fell_back() const { return file_.fell_back(); }  // O_DIRECT was refused; buffered instead
  StorageStats stats() const;

 private:
  StorageService(StorageConfig config, ChunkFile file);
  void IoLoop();
  // Takes the op at the queue's head and the ops right behind it that continue it in the file.
  // wait: blocks until there is one or stopping_. False: nothing to take (queue empty).
  bool TakeGroup(bool wait, std::vector<ReadOp>* group, bool* stopped);
  // Reads (or, stopped, fails with kUnavailable) one group and calls back.
  void RunGroup(const std::vector<ReadOp>& group, bool stopped);
  // One chunk, one pread.
  ReadCompletion Execute(const ReadOp& op);
  // Chunks back to back in the file, one preadv; after an I/O error each chunk is read again alone.
  // *reads: the read calls made (1, or 1 + the group's size after an error).
  std::vector<ReadCompletion> ExecuteCoalesced(const std::vector<ReadOp>& group, uint64_t* reads);
  // The completion of `op` once read_bytes of it arrived: a short read is kCorruption, else its xxh64 is checked.
  ReadCompletion Finish(const ReadOp& op, uint64_t read_bytes, uint64_t read_us);
  void Complete(const ReadCompletion& completion);

  const StorageConfig config_;   // constant after construction
  ChunkFile file_;               // used by the I/O thread only (its flags are atomics)

  Mutex run_mu_;                 // serialises RunQueued() (no I/O thread)
  Mutex stop_mu_;                // serialises Stop() calls
  bool joined_ ZM_GUARDED_BY(stop_mu_) = false;

  mutable Mutex mu_;             // guards every field below
  CondVar queue_cv_;             // queue_ non-empty or stopping_
  CondVar done_cv_;              // a completion was published
  std::deque<ReadOp> queue_ ZM_GUARDED_BY(mu_);
  std::unordered_set<uint64_t> in_flight_ ZM_GUARDED_BY(mu_);  // submitted op ids not yet completed
  std::unordered_map<uint64_t, ReadCompletion> completions_ ZM_GUARDED_BY(mu_);  // when retain_completions
  bool stopping_ ZM_GUARDED_BY(mu_) = false;
  StorageStats stats_ ZM_GUARDED_BY(mu_);

  std::thread io_thread_;        // started in Create, joined in Stop
};

}  // namespace zipmoe::storage
