// Typed control messages between zipmoe services (services issue "Messaging"; docs/messaging.md):
// plain C++ values for each table of schemas/messages.fbs, EncodeMessage() to FlatBuffers bytes and
// DecodeMessage() back, which runs the FlatBuffers Verifier first and then checks version, union
// type and enum ranges, so a malformed, truncated or foreign message is an error value, never a
// crash or an out-of-bounds read. The transport (ZeroMQ sockets) is common/messaging_channel.h.
//
// The values mirror the in-process structs of the services they replace, with every byte pointer
// turned into an arena offset (bytes from the base of the shared-memory arena, the same in every
// process; common/shm_region.h, SlotArena::SlotOffset) plus a length:
//   ChunkRead/ReadRequest, ReadCompletion   <- storage::ReadOp / Submit, storage::ReadCompletion
//   DecodeRequest, DecodeCompletion         <- decompressor::DecompressOp, DecompressCompletion
//   WorkerReady, Heartbeat, Disconnect      pull-worker control (Paranoid Pirate, ZeroMQ guide ch. 4)
// Bytes themselves never travel over ZeroMQ.
//
// Units: sizes and offsets in bytes, durations in microseconds (_us) or milliseconds (_ms).
// Requests carry op_id and attempt, so a request re-issued after its worker died is idempotent.
//
// Thread-safety: everything here is pure; callable from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/codec.h"
#include "common/manifest.h"
#include "common/status.h"

namespace zipmoe::messaging {

// Envelope.version this build writes and the only one it accepts. Bumped only for a change an older
// peer would misread; adding fields or union members at the end keeps it (docs/messaging.md).
inline constexpr uint16_t kMessageVersion = 1;
// Largest encoded message accepted (Decode) or produced (Channel::Send). A ReadRequest of 10 000
// chunk reads is ~1.5 MiB.
inline constexpr size_t kMaxMessageBytes = 16u << 20;

// Pull-worker defaults (Paranoid Pirate, ZeroMQ guide ch. 4; docs/messaging.md "Pull workers"). The
// services' config may override them; peers learn each other's interval from WorkerReady/Heartbeat.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{500};
inline constexpr int kDefaultLiveness = 3;  // silent intervals before a peer is declared dead
inline constexpr std::chrono::milliseconds kReconnectBackoffMin{1000};   // doubles per failed attempt
inline constexpr std::chrono::milliseconds kReconnectBackoffMax{32000};

// One chunk read: storage::ReadOp with dst -> dst_offset.
struct ChunkRead {
  uint64_t op_id = 0;               // unique among the scheduler's ops not yet completed
  uint32_t attempt = 0;             // 0 first; +1 per re-issue of the same op_id
  uint64_t file_offset = 0;         // in experts.bin, multiple of 4096
  uint64_t stored_bytes = 0;        // chunk bytes in the file
  uint64_t dst_offset = 0;          // arena offset of the destination, 4 KiB-aligned
  uint64_t dst_capacity_bytes = 0;  // >= stored_bytes rounded up to 4096
  uint64_t xxh64 = 0;               // expected xxHash64 (seed 0) of the stored bytes
  std::string tensor_name;          // labels, for messages and metrics only
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  ChunkKind kind = ChunkKind::kE;
  int32_t chunk_index = -1;         // index into the tensor's manifest chunks

  bool operator==(const ChunkRead& o) const;
};

// scheduler -> storage: reads in the order to perform them (E before SM within an Alg. 1 block).
struct ReadRequest {
  std::vector<ChunkRead> ops;
  bool operator==(const ReadRequest& o) const { return ops == o.ops; }
};

// storage -> scheduler: one per ChunkRead.
struct ReadCompletion {
  uint64_t op_id = 0;
  uint32_t attempt = 0;       // copied from the ChunkRead
  Status status;              // OK: arena[dst_offset, + stored_bytes) holds the verified chunk
  ChunkKind kind = ChunkKind::kE;
  uint64_t stored_bytes = 0;
  uint64_t read_bytes = 0;    // bytes transferred from the file (incl. 4 KiB padding under O_DIRECT)
  uint64_t read_us = 0;       // time in pread (u, ZipMoE §3.3, for an SM-chunk)
  uint64_t verify_us = 0;     // time hashing the stored bytes

  bool operator==(const ReadCompletion& o) const;
};

// Mirrors decompressor::DecompressOpKind value for value.
enum class DecodeKind : uint8_t {
  kDecodeEChunk = 0,  // src [stored_bytes] compressed with `codec` -> dst [raw_bytes] uint8 E-plane slice
  kRecoverBf16 = 1,   // src = E plane [raw_bytes] uint8, sm = SM plane [raw_bytes] uint8
                      //   -> dst [2 * raw_bytes] bytes = [raw_bytes] uint16 BF16 bit patterns
};

// scheduler -> decompressor: decompressor::DecompressOp with src/sm/dst -> arena offsets.
struct DecodeRequest {
  uint64_t op_id = 0;
  uint32_t attempt = 0;        // 0 first; +1 per re-issue after the holder died
  int32_t priority = 0;        // lower = more urgent (position in the Alg. 1 block order)
  DecodeKind kind = DecodeKind::kDecodeEChunk;
  Codec codec = Codec::kZstd;  // kDecodeEChunk
  uint64_t src_offset = 0;     // see DecodeKind
  uint64_t stored_bytes = 0;   // kDecodeEChunk: compressed bytes at src
  uint64_t sm_offset = 0;      // kRecoverBf16: SM plane
  uint64_t dst_offset = 0;     // see DecodeKind
  uint64_t raw_bytes = 0;      // decoded bytes (kDecodeEChunk) / elements (kRecoverBf16)
  std::optional<uint64_t> expected_xxh64;  // kRecoverBf16: xxHash64 of the BF16 output
  std::string tensor_name;     // labels, for messages and metrics only
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  int32_t chunk_index = -1;    // kDecodeEChunk: index into the tensor's manifest chunks

  bool operator==(const DecodeRequest& o) const;
};

// decompressor -> scheduler: one per DecodeRequest; also gives back the credit the request used.
struct DecodeCompletion {
  uint64_t op_id = 0;
  uint32_t attempt = 0;       // copied from the DecodeRequest
  Status status;              // OK: the op's destination holds its output
  int32_t worker_index = -1;  // thread of the replica that ran it; -1 when it never ran
  uint64_t run_us = 0;        // time running the op (c, ZipMoE §3.3, for a decode)

  bool operator==(const DecodeCompletion& o) const;
};

// worker -> queue, first message after (re)connecting (Paranoid Pirate READY).
struct WorkerReady {
  int32_t n_threads = 0;               // L of this replica
  int32_t credits = 0;                 // requests it can take now (normally n_threads)
  std::string arena_name;              // POSIX shm name it mapped
  uint64_t arena_bytes = 0;            // size of that mapping
  int32_t pid = 0;                     // OS process id, for logs
  uint32_t heartbeat_interval_ms = 0;  // how often it will heartbeat
  std::string role;                    // kRoleDecompressor or kRoleStorage: the queue it pulls from

  bool operator==(const WorkerReady& o) const;
};

inline constexpr const char* kRoleDecompressor = "decompressor";
inline constexpr const char* kRoleStorage = "storage";

// Either direction, after one interval without any other message. Any message counts as liveness.
struct Heartbeat {
  uint32_t interval_ms = 0;  // sender's heartbeat interval
  uint32_t in_flight = 0;    // requests the sender holds (worker) / has outstanding to this peer (queue)

  bool operator==(const Heartbeat& o) const;
};

// Either direction: the sender leaves cleanly; the peer re-issues its requests at once.
struct Disconnect {
  std::string reason;
  bool operator==(const Disconnect& o) const { return reason == o.reason; }
};

// executor -> scheduler: ExpertProvider::BeginLayer (common/expert_provider.h).
struct LayerRequest {
  int32_t layer_id = 0;
  std::vector<int32_t> expert_ids;         // distinct, ascending
  std::vector<int32_t> tokens_per_expert;  // same length
  std::vector<float> mean_scores;          // [n_experts] or empty (LayerRouting::mean_scores)
  int32_t substituted = 0;                 // LayerRouting::substituted
  bool prefetch = false;                   // a prediction for ExpertProvider::Prefetch, not a layer
  bool operator==(const LayerRequest& o) const;
};

// scheduler -> executor: one expert is ready (NextReady), or the layer failed (status not OK).
struct ExpertReady {
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  Status status;
  uint64_t gate_offset = 0;  // arena offsets of the BF16 weights (gate/up [intermediate, hidden],
  uint64_t up_offset = 0;    // down [hidden, intermediate], row-major)
  uint64_t down_offset = 0;
  int64_t intermediate = 0;
  int64_t hidden = 0;
  // Non-empty ([3] each): the expert is unrecovered (fused recovery on a CPU executor): arena
  // offsets of its decoded E planes and SM planes (one uint8 per weight), and the BF16 offsets
  // above are unused.
  std::vector<uint64_t> e_plane_offsets;
  std::vector<uint64_t> sm_offsets;
  bool operator==(const ExpertReady& o) const;
};

// executor -> scheduler: the lease on an expert's weights was released.
struct LeaseRelease {
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  bool operator==(const LeaseRelease& o) const { return layer_id == o.layer_id && expert_id == o.expert_id; }
};

// executor -> scheduler: ExpertProvider::EndLayer; answered by an Ack.
struct LayerEnd {
  int32_t layer_id = 0;
  bool operator==(const LayerEnd& o) const { return layer_id == o.layer_id; }
};

// A reply that carries only a status.
struct Ack {
  Status status;
  bool operator==(const Ack& o) const;
};

// ---- scheduler <-> cache-manager (services/runtime/cache_backend.h; schemas/messages.fbs) ----
// Every request carries request_id; its reply copies it.

// scheduler -> cache-manager, first message of a client: drops what earlier clients held, grants
// the staging slots.
struct CacheHello {
  uint64_t request_id = 0;
  int32_t pid = 0;
  uint32_t heartbeat_interval_ms = 0;
  std::string arena_name;  // expected arena; "" = any
  bool operator==(const CacheHello& o) const;
};

// cache-manager -> scheduler: the arena, staging slots and the planner's cost model.
struct CacheHelloReply {
  uint64_t request_id = 0;
  Status status;
  std::string arena_name;
  uint64_t arena_bytes = 0;
  uint64_t budget_bytes = 0;
  uint8_t policy = 0;                     // cache_manager::CachePolicy value
  std::string pools;                      // Λ in effect
  std::vector<uint64_t> staging_offsets;  // arena offsets of the granted staging slots
  uint64_t staging_e_sm_bytes = 0;        // cache_manager::StagingLayout
  uint64_t staging_e_plane_offset = 0;
  uint64_t staging_bf16_offset = 0;
  uint64_t staging_slot_bytes = 0;
  double sm_read_us = 0, e_read_us = 0, decompress_us = 0, recovery_us = 0, expert_compute_us = 0;
  int32_t n_shards = 1;
  bool operator==(const CacheHelloReply& o) const;
};

// One expert of a CacheLookupReply.
struct CacheEntry {
  int32_t expert_id = 0;
  uint8_t state = 0;         // CompressionState value (checked <= kF on receipt)
  uint64_t slot_offset = 0;  // arena offset of the cache slot (state != miss)
  uint64_t lease_id = 0;     // 0 for a miss
  bool operator==(const CacheEntry& o) const;
};

// scheduler -> cache-manager: every selected expert of one layer.
struct CacheLookup {
  uint64_t request_id = 0;
  int32_t layer_id = 0;
  std::vector<int32_t> expert_ids;
  std::vector<float> scores;  // the step's mean router scores, observed before the lookups; or empty
  bool pin_only = false;      // a prefetch: pin without an activation (CacheManager::Pin)
  bool operator==(const CacheLookup& o) const;
};

struct CacheLookupReply {
  uint64_t request_id = 0;
  Status status;
  int32_t layer_id = 0;
  std::vector<CacheEntry> entries;       // in request order
  uint64_t admit_calls = 0;              // cumulative admissions of this client
  std::vector<uint64_t> admit_outcomes;  // cumulative, by cache_manager::AdmitOutcome value
  Status admit_status;                   // first failed admission since the last reply
  bool operator==(const CacheLookupReply& o) const;
};

inline constexpr uint8_t kCachePartE = 1, kCachePartSm = 2, kCachePartBf16 = 4;

struct CacheAdmitItem {
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  uint64_t lease_id = 0;               // released after the admission; 0 = none
  bool admit = false;                  // false: only release the lease
  uint8_t parts = 0;                   // kCachePart* bits
  std::vector<uint64_t> e_offsets;     // stored E-chunks, proj-major
  std::vector<uint64_t> sm_offsets;    // [3]
  std::vector<uint64_t> bf16_offsets;  // [3]
  std::vector<uint64_t> e_plane_offsets;  // [3] decoded E planes (with bf16_from_planes)
  bool bf16_from_planes = false;       // F admission recovers the BF16 from the E/SM planes
  bool operator==(const CacheAdmitItem& o) const;
};

// scheduler -> cache-manager: admissions + lease releases; one-way unless want_reply.
struct CacheAdmit {
  uint64_t request_id = 0;
  std::vector<CacheAdmitItem> items;
  bool want_reply = false;
  bool operator==(const CacheAdmit& o) const;
};

struct CacheReply {
  uint64_t request_id = 0;
  Status status;
  bool operator==(const CacheReply& o) const;
};

struct CacheStatsRequest {
  uint64_t request_id = 0;
  bool operator==(const CacheStatsRequest& o) const { return request_id == o.request_id; }
};

// cache_manager::CacheCounters, flattened.
struct CacheStats {
  uint64_t request_id = 0;
  uint64_t lookups = 0, misses = 0, drops = 0, pinned_skips = 0;
  std::vector<uint64_t> pool_counters;   // [4][7] (see schemas/messages.fbs)
  std::vector<uint64_t> layer_requests;  // [n_layers][5]
  bool operator==(const CacheStats& o) const;
};

// Union order = schemas/messages.fbs Body order (index + 1 = the FlatBuffers union type).
using Body = std::variant<ReadRequest, ReadCompletion, DecodeRequest, DecodeCompletion, WorkerReady,
                          Heartbeat, Disconnect, LayerRequest, ExpertReady, LeaseRelease, LayerEnd, Ack,
                          CacheHello, CacheHelloReply, CacheLookup, CacheLookupReply, CacheAdmit, CacheReply,
                          CacheStatsRequest, CacheStats>;

struct Message {
  uint16_t version = kMessageVersion;  // filled by DecodeMessage; EncodeMessage always writes kMessageVersion
  std::string sender;                  // e.g. "decompressor-2"; logs only, routing uses ZeroMQ ids
  Body body;

  bool operator==(const Message& o) const;
};

// The table name of `body`'s alternative, e.g. "DecodeRequest".
const char* BodyName(const Body& body);

// Serialises `message` as a size-prefixed FlatBuffer (4-byte little-endian length of the rest, then
// the buffer with identifier "ZMSG"; version kMessageVersion) and returns its bytes. The prefix lets
// DecodeMessage reject any truncation, even one that only cuts padding. Never fails; callers that send check the size against kMaxMessageBytes.
std::string EncodeMessage(const Message& message);
// Convenience: EncodeMessage({kMessageVersion, sender, body}).
std::string EncodeMessage(const std::string& sender, Body body);

// Verifies and decodes one message of `size` bytes at `data` (any alignment; copied when unaligned).
// Errors:
//   kCorruption      not a zipmoe message: too short, over kMaxMessageBytes, wrong file identifier,
//                    size prefix != frame size (truncated or extended), or the Verifier rejects it
//                    (out-of-bounds offsets, unterminated strings, too deep);
//   kInvalidArgument a well-formed Envelope this build cannot accept: version != kMessageVersion
//                    (names both), no body, an unknown body type (newer peer), an out-of-range enum
//                    (names the table and field).
// Each message starts with `what` (e.g. the endpoint and peer) when it is not empty.
Result<Message> DecodeMessage(const void* data, size_t size, const std::string& what = "");

}  // namespace zipmoe::messaging
