// Encoding and verified decoding of schemas/messages.fbs (see common/messaging.h).
#include "common/messaging.h"

#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "schemas/messages_generated.h"

namespace zipmoe::messaging {
namespace {

namespace wire = ::zipmoe::fb;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

static_assert(static_cast<int>(wire::StatusCode::MAX) == static_cast<int>(StatusCode::kInternal),
              "schemas/messages.fbs StatusCode must mirror common/status.h");
static_assert(static_cast<int>(wire::DecodeKind::MAX) == static_cast<int>(DecodeKind::kRecoverBf16));
static_assert(static_cast<int>(wire::Codec::MAX) == static_cast<int>(Codec::kLz4));
static_assert(static_cast<int>(wire::ChunkKind::MAX) == static_cast<int>(ChunkKind::kSm));
static_assert(static_cast<size_t>(wire::Body::MAX) == std::variant_size_v<Body>,
              "messaging::Body must list the union members of schemas/messages.fbs in order");

// Verifier limits: messages are flat (Envelope -> body -> [ChunkRead] -> string), so a small depth
// suffices; the table count bounds the work a hostile ReadRequest can cause.
constexpr flatbuffers::uoffset_t kMaxDepth = 8;
constexpr flatbuffers::uoffset_t kMaxTables = 1u << 20;

// An empty string is left out of the buffer (it reads back as "").
Offset<flatbuffers::String> Str(FlatBufferBuilder& fbb, const std::string& s) {
  return s.empty() ? 0 : fbb.CreateString(s);
}
std::string Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

// Optional vectors: an empty one is left out of the buffer (defined below).
template <typename T>
Offset<flatbuffers::Vector<T>> Vec(FlatBufferBuilder& fbb, const std::vector<T>& v);
template <typename T>
std::vector<T> VecOf(const flatbuffers::Vector<T>* v);

bool SameStatus(const Status& a, const Status& b) {
  return a.code() == b.code() && a.message() == b.message();
}

// ---- Encode ------------------------------------------------------------------------------------

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const ReadRequest& m) {
  std::vector<Offset<wire::ChunkRead>> ops;
  ops.reserve(m.ops.size());
  for (const ChunkRead& op : m.ops) {
    const auto name = Str(fbb, op.tensor_name);
    ops.push_back(wire::CreateChunkRead(fbb, op.op_id, op.attempt, op.file_offset, op.stored_bytes,
                                        op.dst_offset, op.dst_capacity_bytes, op.xxh64, name, op.layer_id,
                                        op.expert_id, static_cast<wire::ChunkKind>(op.kind), op.chunk_index));
  }
  return wire::CreateReadRequest(fbb, fbb.CreateVector(ops)).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const ReadCompletion& m) {
  const auto message = Str(fbb, m.status.message());
  return wire::CreateReadCompletion(fbb, m.op_id, m.attempt, static_cast<wire::StatusCode>(m.status.code()),
                                    message, static_cast<wire::ChunkKind>(m.kind), m.stored_bytes, m.read_bytes,
                                    m.read_us, m.verify_us)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const DecodeRequest& m) {
  const auto name = Str(fbb, m.tensor_name);
  flatbuffers::Optional<uint64_t> expected = flatbuffers::nullopt;
  if (m.expected_xxh64.has_value()) expected = *m.expected_xxh64;
  return wire::CreateDecodeRequest(fbb, m.op_id, m.attempt, m.priority, static_cast<wire::DecodeKind>(m.kind),
                                   static_cast<wire::Codec>(m.codec), m.src_offset, m.stored_bytes, m.sm_offset,
                                   m.dst_offset, m.raw_bytes, expected, name, m.layer_id, m.expert_id,
                                   m.chunk_index)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const DecodeCompletion& m) {
  const auto message = Str(fbb, m.status.message());
  return wire::CreateDecodeCompletion(fbb, m.op_id, m.attempt, static_cast<wire::StatusCode>(m.status.code()),
                                      message, m.worker_index, m.run_us)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const WorkerReady& m) {
  const auto arena = Str(fbb, m.arena_name);
  const auto role = Str(fbb, m.role);
  return wire::CreateWorkerReady(fbb, m.n_threads, m.credits, arena, m.arena_bytes, m.pid,
                                 m.heartbeat_interval_ms, role)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const Heartbeat& m) {
  return wire::CreateHeartbeat(fbb, m.interval_ms, m.in_flight).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const Disconnect& m) {
  return wire::CreateDisconnect(fbb, Str(fbb, m.reason)).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const LayerRequest& m) {
  const auto ids = fbb.CreateVector(m.expert_ids);
  const auto tokens = fbb.CreateVector(m.tokens_per_expert);
  const auto scores = fbb.CreateVector(m.mean_scores);
  return wire::CreateLayerRequest(fbb, m.layer_id, ids, tokens, scores, m.substituted, m.prefetch).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const ExpertReady& m) {
  const auto message = Str(fbb, m.status.message());
  const auto e_planes = Vec(fbb, m.e_plane_offsets);
  const auto sm = Vec(fbb, m.sm_offsets);
  return wire::CreateExpertReady(fbb, m.layer_id, m.expert_id, static_cast<wire::StatusCode>(m.status.code()),
                                 message, m.gate_offset, m.up_offset, m.down_offset, m.intermediate, m.hidden,
                                 e_planes, sm)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const LeaseRelease& m) {
  return wire::CreateLeaseRelease(fbb, m.layer_id, m.expert_id).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const LayerEnd& m) {
  return wire::CreateLayerEnd(fbb, m.layer_id).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const Ack& m) {
  const auto message = Str(fbb, m.status.message());
  return wire::CreateAck(fbb, static_cast<wire::StatusCode>(m.status.code()), message).Union();
}

template <typename T>
Offset<flatbuffers::Vector<T>> Vec(FlatBufferBuilder& fbb, const std::vector<T>& v) {
  return v.empty() ? 0 : fbb.CreateVector(v);
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheHello& m) {
  const auto arena = Str(fbb, m.arena_name);
  return wire::CreateCacheHello(fbb, m.request_id, m.pid, m.heartbeat_interval_ms, arena).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheHelloReply& m) {
  const auto message = Str(fbb, m.status.message());
  const auto arena = Str(fbb, m.arena_name);
  const auto pools = Str(fbb, m.pools);
  const auto staging = Vec(fbb, m.staging_offsets);
  return wire::CreateCacheHelloReply(fbb, m.request_id, static_cast<wire::StatusCode>(m.status.code()), message,
                                     arena, m.arena_bytes, m.budget_bytes, m.policy, pools, staging,
                                     m.staging_e_sm_bytes, m.staging_e_plane_offset, m.staging_bf16_offset,
                                     m.staging_slot_bytes, m.sm_read_us, m.e_read_us, m.decompress_us,
                                     m.recovery_us, m.expert_compute_us, m.n_shards)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheLookup& m) {
  const auto ids = fbb.CreateVector(m.expert_ids);
  const auto scores = fbb.CreateVector(m.scores);
  return wire::CreateCacheLookup(fbb, m.request_id, m.layer_id, ids, scores, m.pin_only).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheLookupReply& m) {
  const auto message = Str(fbb, m.status.message());
  std::vector<wire::CacheEntry> entries;
  entries.reserve(m.entries.size());
  for (const CacheEntry& e : m.entries) entries.emplace_back(e.expert_id, e.state, e.slot_offset, e.lease_id);
  const auto entries_vec = fbb.CreateVectorOfStructs(entries);
  const auto outcomes = Vec(fbb, m.admit_outcomes);
  const auto admit_message = Str(fbb, m.admit_status.message());
  return wire::CreateCacheLookupReply(fbb, m.request_id, static_cast<wire::StatusCode>(m.status.code()), message,
                                      m.layer_id, entries_vec, m.admit_calls, outcomes,
                                      static_cast<wire::StatusCode>(m.admit_status.code()), admit_message)
      .Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheAdmit& m) {
  std::vector<Offset<wire::CacheAdmitItem>> items;
  items.reserve(m.items.size());
  for (const CacheAdmitItem& it : m.items) {
    const auto e = Vec(fbb, it.e_offsets);
    const auto sm = Vec(fbb, it.sm_offsets);
    const auto bf16 = Vec(fbb, it.bf16_offsets);
    const auto e_planes = Vec(fbb, it.e_plane_offsets);
    items.push_back(wire::CreateCacheAdmitItem(fbb, it.layer_id, it.expert_id, it.lease_id, it.admit, it.parts, e, sm,
                                               bf16, e_planes, it.bf16_from_planes));
  }
  return wire::CreateCacheAdmit(fbb, m.request_id, fbb.CreateVector(items), m.want_reply).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheReply& m) {
  const auto message = Str(fbb, m.status.message());
  return wire::CreateCacheReply(fbb, m.request_id, static_cast<wire::StatusCode>(m.status.code()), message).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheStatsRequest& m) {
  return wire::CreateCacheStatsRequest(fbb, m.request_id).Union();
}

Offset<void> EncodeBody(FlatBufferBuilder& fbb, const CacheStats& m) {
  const auto pools = Vec(fbb, m.pool_counters);
  const auto layers = Vec(fbb, m.layer_requests);
  return wire::CreateCacheStats(fbb, m.request_id, m.lookups, m.misses, m.drops, m.pinned_skips, pools, layers)
      .Union();
}

// ---- Decode ------------------------------------------------------------------------------------

// Checks that a wire enum value is one this build knows; the Verifier does not look at enum ranges.
template <typename WireEnum>
Status CheckEnum(WireEnum value, WireEnum max, const char* table, const char* field) {
  const auto raw = static_cast<unsigned>(value);
  if (raw > static_cast<unsigned>(max)) {
    return Status::InvalidArgument(
        fmt::format("{}.{} = {} is out of range (0..{})", table, field, raw, static_cast<unsigned>(max)));
  }
  return Status::Ok();
}

// *out = the carried status (the message is dropped for Ok).
Status DecodeStatus(wire::StatusCode code, const flatbuffers::String* message, const char* table, Status* out) {
  ZM_RETURN_IF_ERROR(CheckEnum(code, wire::StatusCode::MAX, table, "status_code"));
  *out = code == wire::StatusCode::Ok ? Status::Ok() : Status(static_cast<StatusCode>(code), Str(message));
  return Status::Ok();
}

Result<Body> DecodeBody(const wire::ReadRequest& t) {
  ReadRequest m;
  if (t.ops() != nullptr) {
    m.ops.reserve(t.ops()->size());
    for (flatbuffers::uoffset_t i = 0; i < t.ops()->size(); ++i) {
      const wire::ChunkRead* w = t.ops()->Get(i);
      if (w == nullptr) return Status::InvalidArgument(fmt::format("ReadRequest.ops[{}] is null", i));
      ZM_RETURN_IF_ERROR(CheckEnum(w->kind(), wire::ChunkKind::MAX, "ChunkRead", "kind")
                             .WithContext(fmt::format("ReadRequest.ops[{}]", i)));
      ChunkRead op;
      op.op_id = w->op_id();
      op.attempt = w->attempt();
      op.file_offset = w->file_offset();
      op.stored_bytes = w->stored_bytes();
      op.dst_offset = w->dst_offset();
      op.dst_capacity_bytes = w->dst_capacity_bytes();
      op.xxh64 = w->xxh64();
      op.tensor_name = Str(w->tensor_name());
      op.layer_id = w->layer_id();
      op.expert_id = w->expert_id();
      op.kind = static_cast<ChunkKind>(w->kind());
      op.chunk_index = w->chunk_index();
      m.ops.push_back(std::move(op));
    }
  }
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::ReadCompletion& t) {
  ReadCompletion m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "ReadCompletion", &m.status));
  ZM_RETURN_IF_ERROR(CheckEnum(t.kind(), wire::ChunkKind::MAX, "ReadCompletion", "kind"));
  m.op_id = t.op_id();
  m.attempt = t.attempt();
  m.kind = static_cast<ChunkKind>(t.kind());
  m.stored_bytes = t.stored_bytes();
  m.read_bytes = t.read_bytes();
  m.read_us = t.read_us();
  m.verify_us = t.verify_us();
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::DecodeRequest& t) {
  ZM_RETURN_IF_ERROR(CheckEnum(t.kind(), wire::DecodeKind::MAX, "DecodeRequest", "kind"));
  ZM_RETURN_IF_ERROR(CheckEnum(t.codec(), wire::Codec::MAX, "DecodeRequest", "codec"));
  DecodeRequest m;
  m.op_id = t.op_id();
  m.attempt = t.attempt();
  m.priority = t.priority();
  m.kind = static_cast<DecodeKind>(t.kind());
  m.codec = static_cast<Codec>(t.codec());
  m.src_offset = t.src_offset();
  m.stored_bytes = t.stored_bytes();
  m.sm_offset = t.sm_offset();
  m.dst_offset = t.dst_offset();
  m.raw_bytes = t.raw_bytes();
  if (t.expected_xxh64().has_value()) m.expected_xxh64 = t.expected_xxh64().value();
  m.tensor_name = Str(t.tensor_name());
  m.layer_id = t.layer_id();
  m.expert_id = t.expert_id();
  m.chunk_index = t.chunk_index();
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::DecodeCompletion& t) {
  DecodeCompletion m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "DecodeCompletion", &m.status));
  m.op_id = t.op_id();
  m.attempt = t.attempt();
  m.worker_index = t.worker_index();
  m.run_us = t.run_us();
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::WorkerReady& t) {
  WorkerReady m;
  m.n_threads = t.n_threads();
  m.credits = t.credits();
  m.arena_name = Str(t.arena_name());
  m.arena_bytes = t.arena_bytes();
  m.pid = t.pid();
  m.heartbeat_interval_ms = t.heartbeat_interval_ms();
  m.role = Str(t.role());
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::Heartbeat& t) { return Body(Heartbeat{t.interval_ms(), t.in_flight()}); }

Result<Body> DecodeBody(const wire::Disconnect& t) { return Body(Disconnect{Str(t.reason())}); }

Result<Body> DecodeBody(const wire::LayerRequest& t) {
  LayerRequest m;
  m.layer_id = t.layer_id();
  if (t.expert_ids() != nullptr) m.expert_ids.assign(t.expert_ids()->begin(), t.expert_ids()->end());
  if (t.tokens_per_expert() != nullptr) {
    m.tokens_per_expert.assign(t.tokens_per_expert()->begin(), t.tokens_per_expert()->end());
  }
  if (t.mean_scores() != nullptr) m.mean_scores.assign(t.mean_scores()->begin(), t.mean_scores()->end());
  m.substituted = t.substituted();
  m.prefetch = t.prefetch();
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::ExpertReady& t) {
  ExpertReady m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "ExpertReady", &m.status));
  m.layer_id = t.layer_id();
  m.expert_id = t.expert_id();
  m.gate_offset = t.gate_offset();
  m.up_offset = t.up_offset();
  m.down_offset = t.down_offset();
  m.intermediate = t.intermediate();
  m.hidden = t.hidden();
  m.e_plane_offsets = VecOf(t.e_plane_offsets());
  m.sm_offsets = VecOf(t.sm_offsets());
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::LeaseRelease& t) { return Body(LeaseRelease{t.layer_id(), t.expert_id()}); }

Result<Body> DecodeBody(const wire::LayerEnd& t) { return Body(LayerEnd{t.layer_id()}); }

Result<Body> DecodeBody(const wire::Ack& t) {
  Ack m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "Ack", &m.status));
  return Body(std::move(m));
}

// Copies a vector of scalars out of the buffer. Through memcpy, not the FlatBuffers iterator: the
// Verifier checks the alignment of a vector's length only, so a peer's [ulong] may start 4 bytes off
// its 8-byte alignment, and reading it in place would be a misaligned load (found by fuzzing).
template <typename T>
std::vector<T> VecOf(const flatbuffers::Vector<T>* v) {
  std::vector<T> out(v == nullptr ? 0 : v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  for (T& x : out) x = flatbuffers::EndianScalar(x);
  return out;
}

Result<Body> DecodeBody(const wire::CacheHello& t) {
  return Body(CacheHello{t.request_id(), t.pid(), t.heartbeat_interval_ms(), Str(t.arena_name())});
}

Result<Body> DecodeBody(const wire::CacheHelloReply& t) {
  CacheHelloReply m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "CacheHelloReply", &m.status));
  m.request_id = t.request_id();
  m.arena_name = Str(t.arena_name());
  m.arena_bytes = t.arena_bytes();
  m.budget_bytes = t.budget_bytes();
  m.policy = t.policy();
  m.pools = Str(t.pools());
  m.staging_offsets = VecOf(t.staging_offsets());
  m.staging_e_sm_bytes = t.staging_e_sm_bytes();
  m.staging_e_plane_offset = t.staging_e_plane_offset();
  m.staging_bf16_offset = t.staging_bf16_offset();
  m.staging_slot_bytes = t.staging_slot_bytes();
  m.sm_read_us = t.sm_read_us();
  m.e_read_us = t.e_read_us();
  m.decompress_us = t.decompress_us();
  m.recovery_us = t.recovery_us();
  m.expert_compute_us = t.expert_compute_us();
  m.n_shards = t.n_shards();
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::CacheLookup& t) {
  CacheLookup m{t.request_id(), t.layer_id(), VecOf(t.expert_ids()), {}, t.pin_only()};
  if (t.scores() != nullptr) m.scores.assign(t.scores()->begin(), t.scores()->end());
  return Body(std::move(m));
}

// CompressionState values (common/compression_state.h): kMiss .. kF.
constexpr uint8_t kMaxCompressionState = 4;

Result<Body> DecodeBody(const wire::CacheLookupReply& t) {
  CacheLookupReply m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "CacheLookupReply", &m.status));
  ZM_RETURN_IF_ERROR(DecodeStatus(t.admit_status_code(), t.admit_message(), "CacheLookupReply", &m.admit_status));
  m.request_id = t.request_id();
  m.layer_id = t.layer_id();
  if (t.entries() != nullptr) {
    m.entries.reserve(t.entries()->size());
    for (flatbuffers::uoffset_t i = 0; i < t.entries()->size(); ++i) {
      wire::CacheEntry e;  // copied out: a vector of structs may be misaligned, as in VecOf
      std::memcpy(static_cast<void*>(&e), t.entries()->Get(i), sizeof e);
      if (e.state() > kMaxCompressionState) {
        return Status::InvalidArgument(fmt::format("CacheLookupReply.entries[{}].state = {} is out of range (0..{})",
                                                   i, e.state(), kMaxCompressionState));
      }
      m.entries.push_back(CacheEntry{e.expert_id(), e.state(), e.slot_offset(), e.lease_id()});
    }
  }
  m.admit_calls = t.admit_calls();
  m.admit_outcomes = VecOf(t.admit_outcomes());
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::CacheAdmit& t) {
  CacheAdmit m;
  m.request_id = t.request_id();
  m.want_reply = t.want_reply();
  if (t.items() != nullptr) {
    m.items.reserve(t.items()->size());
    for (flatbuffers::uoffset_t i = 0; i < t.items()->size(); ++i) {
      const wire::CacheAdmitItem* w = t.items()->Get(i);
      if (w == nullptr) return Status::InvalidArgument(fmt::format("CacheAdmit.items[{}] is null", i));
      CacheAdmitItem it;
      it.layer_id = w->layer_id();
      it.expert_id = w->expert_id();
      it.lease_id = w->lease_id();
      it.admit = w->admit();
      it.parts = w->parts();
      it.e_offsets = VecOf(w->e_offsets());
      it.sm_offsets = VecOf(w->sm_offsets());
      it.bf16_offsets = VecOf(w->bf16_offsets());
      it.e_plane_offsets = VecOf(w->e_plane_offsets());
      it.bf16_from_planes = w->bf16_from_planes();
      m.items.push_back(std::move(it));
    }
  }
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::CacheReply& t) {
  CacheReply m;
  ZM_RETURN_IF_ERROR(DecodeStatus(t.status_code(), t.message(), "CacheReply", &m.status));
  m.request_id = t.request_id();
  return Body(std::move(m));
}

Result<Body> DecodeBody(const wire::CacheStatsRequest& t) { return Body(CacheStatsRequest{t.request_id()}); }

Result<Body> DecodeBody(const wire::CacheStats& t) {
  CacheStats m;
  m.request_id = t.request_id();
  m.lookups = t.lookups();
  m.misses = t.misses();
  m.drops = t.drops();
  m.pinned_skips = t.pinned_skips();
  m.pool_counters = VecOf(t.pool_counters());
  m.layer_requests = VecOf(t.layer_requests());
  return Body(std::move(m));
}

template <typename WireTable>
Result<Body> DecodeTyped(const wire::Envelope& envelope) {
  const auto* table = static_cast<const WireTable*>(envelope.body());
  return DecodeBody(*table);
}

Result<Message> DecodeVerified(const uint8_t* data, size_t size) {
  if (!wire::SizePrefixedEnvelopeBufferHasIdentifier(data)) {
    return Status::Corruption(fmt::format("not a zipmoe message: file identifier is not \"{}\"",
                                          wire::EnvelopeIdentifier()));
  }
  const uint64_t prefix = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(data);
  if (prefix != size - sizeof(flatbuffers::uoffset_t)) {
    return Status::Corruption(fmt::format("malformed message: size prefix says {} bytes, frame holds {} "
                                          "(truncated or extended)", prefix, size - sizeof(flatbuffers::uoffset_t)));
  }
  flatbuffers::Verifier::Options options;
  options.max_depth = kMaxDepth;
  options.max_tables = kMaxTables;
  flatbuffers::Verifier verifier(data, size, options);
  if (!wire::VerifySizePrefixedEnvelopeBuffer(verifier)) {
    return Status::Corruption(fmt::format("malformed message: FlatBuffers verifier rejected {} bytes "
                                          "(out-of-bounds or misaligned offsets, unterminated string)", size));
  }
  const wire::Envelope* envelope = wire::GetSizePrefixedEnvelope(data);
  Message out;
  out.version = envelope->version();
  out.sender = Str(envelope->sender());
  const std::string from = out.sender.empty() ? std::string() : fmt::format(" from '{}'", out.sender);
  if (out.version != kMessageVersion) {
    return Status::InvalidArgument(fmt::format("message version {}{}, this build speaks version {}",
                                               out.version, from, kMessageVersion));
  }
  const wire::Body type = envelope->body_type();
  if (type == wire::Body::NONE || envelope->body() == nullptr) {
    return Status::InvalidArgument(fmt::format("message{} has no body", from));
  }
  Result<Body> body = Status::Internal("unreachable");
  switch (type) {
    case wire::Body::ReadRequest: body = DecodeTyped<wire::ReadRequest>(*envelope); break;
    case wire::Body::ReadCompletion: body = DecodeTyped<wire::ReadCompletion>(*envelope); break;
    case wire::Body::DecodeRequest: body = DecodeTyped<wire::DecodeRequest>(*envelope); break;
    case wire::Body::DecodeCompletion: body = DecodeTyped<wire::DecodeCompletion>(*envelope); break;
    case wire::Body::WorkerReady: body = DecodeTyped<wire::WorkerReady>(*envelope); break;
    case wire::Body::Heartbeat: body = DecodeTyped<wire::Heartbeat>(*envelope); break;
    case wire::Body::Disconnect: body = DecodeTyped<wire::Disconnect>(*envelope); break;
    case wire::Body::LayerRequest: body = DecodeTyped<wire::LayerRequest>(*envelope); break;
    case wire::Body::ExpertReady: body = DecodeTyped<wire::ExpertReady>(*envelope); break;
    case wire::Body::LeaseRelease: body = DecodeTyped<wire::LeaseRelease>(*envelope); break;
    case wire::Body::LayerEnd: body = DecodeTyped<wire::LayerEnd>(*envelope); break;
    case wire::Body::Ack: body = DecodeTyped<wire::Ack>(*envelope); break;
    case wire::Body::CacheHello: body = DecodeTyped<wire::CacheHello>(*envelope); break;
    case wire::Body::CacheHelloReply: body = DecodeTyped<wire::CacheHelloReply>(*envelope); break;
    case wire::Body::CacheLookup: body = DecodeTyped<wire::CacheLookup>(*envelope); break;
    case wire::Body::CacheLookupReply: body = DecodeTyped<wire::CacheLookupReply>(*envelope); break;
    case wire::Body::CacheAdmit: body = DecodeTyped<wire::CacheAdmit>(*envelope); break;
    case wire::Body::CacheReply: body = DecodeTyped<wire::CacheReply>(*envelope); break;
    case wire::Body::CacheStatsRequest: body = DecodeTyped<wire::CacheStatsRequest>(*envelope); break;
    case wire::Body::CacheStats: body = DecodeTyped<wire::CacheStats>(*envelope); break;
    default:
      return Status::InvalidArgument(fmt::format("message{} has unknown body type {} (this build knows 1..{})",
                                                 from, static_cast<unsigned>(type),
                                                 static_cast<unsigned>(wire::Body::MAX)));
  }
  if (!body.ok()) return body.status().WithContext(fmt::format("message{}", from));
  out.body = std::move(body).value();
  return out;
}

}  // namespace

bool ChunkRead::operator==(const ChunkRead& o) const {
  return op_id == o.op_id && attempt == o.attempt && file_offset == o.file_offset &&
         stored_bytes == o.stored_bytes && dst_offset == o.dst_offset &&
         dst_capacity_bytes == o.dst_capacity_bytes && xxh64 == o.xxh64 && tensor_name == o.tensor_name &&
         layer_id == o.layer_id && expert_id == o.expert_id && kind == o.kind && chunk_index == o.chunk_index;
}

bool ReadCompletion::operator==(const ReadCompletion& o) const {
  return op_id == o.op_id && attempt == o.attempt && SameStatus(status, o.status) && kind == o.kind &&
         stored_bytes == o.stored_bytes && read_bytes == o.read_bytes && read_us == o.read_us &&
         verify_us == o.verify_us;
}

bool DecodeRequest::operator==(const DecodeRequest& o) const {
  return op_id == o.op_id && attempt == o.attempt && priority == o.priority && kind == o.kind &&
         codec == o.codec && src_offset == o.src_offset && stored_bytes == o.stored_bytes &&
         sm_offset == o.sm_offset && dst_offset == o.dst_offset && raw_bytes == o.raw_bytes &&
         expected_xxh64 == o.expected_xxh64 && tensor_name == o.tensor_name && layer_id == o.layer_id &&
         expert_id == o.expert_id && chunk_index == o.chunk_index;
}

bool DecodeCompletion::operator==(const DecodeCompletion& o) const {
  return op_id == o.op_id && attempt == o.attempt && SameStatus(status, o.status) &&
         worker_index == o.worker_index && run_us == o.run_us;
}

bool WorkerReady::operator==(const WorkerReady& o) const {
  return n_threads == o.n_threads && credits == o.credits && arena_name == o.arena_name &&
         arena_bytes == o.arena_bytes && pid == o.pid && heartbeat_interval_ms == o.heartbeat_interval_ms &&
         role == o.role;
}

bool LayerRequest::operator==(const LayerRequest& o) const {
  return layer_id == o.layer_id && expert_ids == o.expert_ids && tokens_per_expert == o.tokens_per_expert &&
         mean_scores == o.mean_scores && substituted == o.substituted && prefetch == o.prefetch;
}

bool ExpertReady::operator==(const ExpertReady& o) const {
  return layer_id == o.layer_id && expert_id == o.expert_id && SameStatus(status, o.status) &&
         gate_offset == o.gate_offset && up_offset == o.up_offset && down_offset == o.down_offset &&
         intermediate == o.intermediate && hidden == o.hidden && e_plane_offsets == o.e_plane_offsets &&
         sm_offsets == o.sm_offsets;
}

bool Ack::operator==(const Ack& o) const { return SameStatus(status, o.status); }

bool Heartbeat::operator==(const Heartbeat& o) const {
  return interval_ms == o.interval_ms && in_flight == o.in_flight;
}

bool CacheHello::operator==(const CacheHello& o) const {
  return request_id == o.request_id && pid == o.pid && heartbeat_interval_ms == o.heartbeat_interval_ms &&
         arena_name == o.arena_name;
}

bool CacheHelloReply::operator==(const CacheHelloReply& o) const {
  return request_id == o.request_id && SameStatus(status, o.status) && arena_name == o.arena_name &&
         arena_bytes == o.arena_bytes && budget_bytes == o.budget_bytes && policy == o.policy && pools == o.pools &&
         staging_offsets == o.staging_offsets && staging_e_sm_bytes == o.staging_e_sm_bytes &&
         staging_e_plane_offset == o.staging_e_plane_offset && staging_bf16_offset == o.staging_bf16_offset &&
         staging_slot_bytes == o.staging_slot_bytes && sm_read_us == o.sm_read_us && e_read_us == o.e_read_us &&
         decompress_us == o.decompress_us && recovery_us == o.recovery_us &&
         expert_compute_us == o.expert_compute_us && n_shards == o.n_shards;
}

bool CacheEntry::operator==(const CacheEntry& o) const {
  return expert_id == o.expert_id && state == o.state && slot_offset == o.slot_offset && lease_id == o.lease_id;
}

bool CacheLookup::operator==(const CacheLookup& o) const {
  return request_id == o.request_id && layer_id == o.layer_id && expert_ids == o.expert_ids && scores == o.scores &&
         pin_only == o.pin_only;
}

bool CacheLookupReply::operator==(const CacheLookupReply& o) const {
  return request_id == o.request_id && SameStatus(status, o.status) && layer_id == o.layer_id &&
         entries == o.entries && admit_calls == o.admit_calls && admit_outcomes == o.admit_outcomes &&
         SameStatus(admit_status, o.admit_status);
}

bool CacheAdmitItem::operator==(const CacheAdmitItem& o) const {
  return layer_id == o.layer_id && expert_id == o.expert_id && lease_id == o.lease_id && admit == o.admit &&
         parts == o.parts && e_offsets == o.e_offsets && sm_offsets == o.sm_offsets && bf16_offsets == o.bf16_offsets &&
         e_plane_offsets == o.e_plane_offsets && bf16_from_planes == o.bf16_from_planes;
}

bool CacheAdmit::operator==(const CacheAdmit& o) const {
  return request_id == o.request_id && items == o.items && want_reply == o.want_reply;
}

bool CacheReply::operator==(const CacheReply& o) const {
  return request_id == o.request_id && SameStatus(status, o.status);
}

bool CacheStats::operator==(const CacheStats& o) const {
  return request_id == o.request_id && lookups == o.lookups && misses == o.misses && drops == o.drops &&
         pinned_skips == o.pinned_skips && pool_counters == o.pool_counters && layer_requests == o.layer_requests;
}

bool Message::operator==(const Message& o) const {
  return version == o.version && sender == o.sender && body == o.body;
}

const char* BodyName(const Body& body) {
  return wire::EnumNameBody(static_cast<wire::Body>(body.index() + 1));
}

std::string EncodeMessage(const Message& message) {
  FlatBufferBuilder fbb(256);
  const Offset<void> body = std::visit([&fbb](const auto& m) { return EncodeBody(fbb, m); }, message.body);
  const auto sender = Str(fbb, message.sender);
  const auto type = static_cast<wire::Body>(message.body.index() + 1);
  fbb.FinishSizePrefixed(wire::CreateEnvelope(fbb, kMessageVersion, sender, type, body), wire::EnvelopeIdentifier());
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

std::string EncodeMessage(const std::string& sender, Body body) {
  Message message;
  message.sender = sender;
  message.body = std::move(body);
  return EncodeMessage(message);
}

Result<Message> DecodeMessage(const void* data, size_t size, const std::string& what) {
  auto with_context = [&what](Status s) { return what.empty() ? s : s.WithContext(what); };
  // Size prefix, root offset and identifier are read before the Verifier runs.
  constexpr size_t kMinBytes = 3 * sizeof(flatbuffers::uoffset_t);
  if (data == nullptr || size < kMinBytes) {
    return with_context(Status::Corruption(
        fmt::format("not a zipmoe message: {} bytes, a message has at least {}", size, kMinBytes)));
  }
  if (size > kMaxMessageBytes) {
    return with_context(Status::Corruption(
        fmt::format("message of {} bytes exceeds kMaxMessageBytes ({})", size, kMaxMessageBytes)));
  }
  // FlatBuffers reads scalars in place; a frame that is not 8-byte aligned (ZeroMQ keeps small
  // messages inside zmq_msg_t) is copied first.
  Result<Message> out = Status::Internal("unreachable");
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) == 0) {
    out = DecodeVerified(static_cast<const uint8_t*>(data), size);
  } else {
    std::vector<uint64_t> aligned((size + 7) / 8);
    std::memcpy(aligned.data(), data, size);
    out = DecodeVerified(reinterpret_cast<const uint8_t*>(aligned.data()), size);
  }
  if (!out.ok()) return with_context(out.status());
  return out;
}

}  // namespace zipmoe::messaging
