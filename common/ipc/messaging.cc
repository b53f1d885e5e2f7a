// Encoding and verified decoding of schemas/messages.fbs (see common/ipc/messaging.h). The message types
// and their Pack/UnPack are generated (flatc --gen-object-api); this file adds the envelope, the
// checks the Verifier does not do (version, body type, enum ranges) and the status/enum mappings.
#include "common/ipc/messaging.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "common/compression_state.h"

namespace zipmoe::messaging {
namespace {

namespace wire = ::zipmoe::fb;
using flatbuffers::FlatBufferBuilder;

static_assert(static_cast<int>(wire::StatusCode::MAX) == static_cast<int>(StatusCode::kInternal),
              "schemas/messages.fbs StatusCode must mirror common/status.h");
static_assert(static_cast<int>(wire::Codec::MAX) == static_cast<int>(Codec::kLz4));
static_assert(static_cast<int>(wire::ChunkKind::MAX) == static_cast<int>(ChunkKind::kSm));
static_assert(static_cast<size_t>(wire::Body::MAX) == std::variant_size_v<Body>,
              "messaging::Body must list the union members of schemas/messages.fbs");

// Body alternative I is union member I + 1 (checked for every member at compile time).
template <size_t... I>
constexpr bool BodyOrderMatches(std::index_sequence<I...>) {
  return ((static_cast<size_t>(wire::BodyUnionTraits<std::variant_alternative_t<I, Body>>::enum_value) == I + 1) &&
          ...);
}
static_assert(BodyOrderMatches(std::make_index_sequence<std::variant_size_v<Body>>()),
              "messaging::Body must list the union members of schemas/messages.fbs in order");

// Verifier limits: messages are flat (Envelope -> body -> [ChunkRead] -> string), so a small depth
// suffices; the table count bounds the work a hostile ReadRequest can cause.
constexpr flatbuffers::uoffset_t kMaxDepth = 8;
constexpr flatbuffers::uoffset_t kMaxTables = 1u << 20;

// ---- Enum ranges (the Verifier does not look at them) -----------------------------------------

template <typename WireEnum>
Status CheckEnum(WireEnum value, const char* table, const char* field) {
  const auto raw = static_cast<unsigned>(value);
  const auto max = static_cast<unsigned>(WireEnum::MAX);
  if (raw > max) return Status::InvalidArgument(fmt::format("{}.{} = {} is out of range (0..{})", table, field, raw, max));
  return Status::Ok();
}

template <typename M, typename = void>
struct HasStatusCode : std::false_type {};
template <typename M>
struct HasStatusCode<M, std::void_t<decltype(std::declval<M>().status_code)>> : std::true_type {};

template <typename M>
const char* TableName() {
  return wire::EnumNameBody(wire::BodyUnionTraits<M>::enum_value);
}

// Every message: its status_code, when it has one.
template <typename M>
Status CheckEnums(const M& m) {
  if constexpr (HasStatusCode<M>::value) return CheckEnum(m.status_code, TableName<M>(), "status_code");
  return Status::Ok();
}

Status CheckEnums(const ReadRequest& m) {
  for (size_t i = 0; i < m.ops.size(); ++i) {
    ZM_RETURN_IF_ERROR(
        CheckEnum(m.ops[i]->kind, "ChunkRead", "kind").WithContext(fmt::format("ReadRequest.ops[{}]", i)));
  }
  return Status::Ok();
}

Status CheckEnums(const ReadCompletion& m) {
  ZM_RETURN_IF_ERROR(CheckEnum(m.status_code, "ReadCompletion", "status_code"));
  return CheckEnum(m.kind, "ReadCompletion", "kind");
}

Status CheckEnums(const DecodeRequest& m) {
  ZM_RETURN_IF_ERROR(CheckEnum(m.kind, "DecodeRequest", "kind"));
  return CheckEnum(m.codec, "DecodeRequest", "codec");
}

// A batch: each item as if it had come alone, the failing one named by its index.
template <typename Batch>
Status CheckItems(const Batch& batch) {
  for (size_t i = 0; i < batch.items.size(); ++i) {
    ZM_RETURN_IF_ERROR(CheckEnums(*batch.items[i]).WithContext(fmt::format("{}.items[{}]", TableName<Batch>(), i)));
  }
  return Status::Ok();
}
Status CheckEnums(const ReadCompletions& m) { return CheckItems(m); }
Status CheckEnums(const DecodeRequests& m) { return CheckItems(m); }
Status CheckEnums(const DecodeCompletions& m) { return CheckItems(m); }
Status CheckEnums(const ExpertsReady& m) { return CheckItems(m); }

Status CheckEnums(const CacheLookupReply& m) {
  ZM_RETURN_IF_ERROR(CheckEnum(m.status_code, "CacheLookupReply", "status_code"));
  ZM_RETURN_IF_ERROR(CheckEnum(m.admit_status_code, "CacheLookupReply", "admit_status_code"));
  constexpr unsigned kMaxState = static_cast<unsigned>(CompressionState::kF);
  for (size_t i = 0; i < m.entries.size(); ++i) {
    if (m.entries[i].state() > kMaxState) {
      return Status::InvalidArgument(fmt::format("CacheLookupReply.entries[{}].state = {} is out of range (0..{})", i,
                                                 m.entries[i].state(), kMaxState));
    }
  }
  return Status::Ok();
}

// ---- Alignment (before UnPack) ----------------------------------------------------------------
// UnPack reads a vector's elements in place, which needs their alignment; the Verifier checks only
// the alignment of a vector's length (4 bytes), so a peer's vector of 8-byte elements may start 4
// bytes off (found by fuzzing). Checked for every vector of every table reachable from the body,
// driven by the generated field types (flatc --reflect-types), so a new field is covered too.

// Alignment an element of `type` needs (structs: their widest scalar).
size_t ElementAlignment(flatbuffers::ElementaryType type, const flatbuffers::TypeTable* ref) {
  switch (type) {
    case flatbuffers::ET_LONG: case flatbuffers::ET_ULONG: case flatbuffers::ET_DOUBLE: return 8;
    case flatbuffers::ET_SHORT: case flatbuffers::ET_USHORT: return 2;
    case flatbuffers::ET_INT: case flatbuffers::ET_UINT: case flatbuffers::ET_FLOAT: case flatbuffers::ET_STRING:
      return 4;
    case flatbuffers::ET_SEQUENCE: {
      if (ref == nullptr || ref->st != flatbuffers::ST_STRUCT) return 4;  // tables, unions: offsets
      size_t align = 1;
      for (size_t i = 0; i < ref->num_elems; ++i) {
        const flatbuffers::TypeCode tc = ref->type_codes[i];
        const auto* inner = tc.sequence_ref >= 0 ? ref->type_refs[tc.sequence_ref]() : nullptr;
        align = std::max(align, ElementAlignment(static_cast<flatbuffers::ElementaryType>(tc.base_type), inner));
      }
      return align;
    }
    default: return 1;
  }
}

// Whether every vector of `table` (described by `type`) and of the tables it holds is aligned for
// its elements. `path` names the first one that is not (field names: flatc --reflect-names).
bool VectorsAligned(const flatbuffers::Table& table, const flatbuffers::TypeTable& type, std::string* path) {
  for (size_t i = 0; i < type.num_elems; ++i) {
    const flatbuffers::TypeCode tc = type.type_codes[i];
    const auto base = static_cast<flatbuffers::ElementaryType>(tc.base_type);
    const flatbuffers::TypeTable* ref = tc.sequence_ref >= 0 ? type.type_refs[tc.sequence_ref]() : nullptr;
    const bool holds_tables = base == flatbuffers::ET_SEQUENCE && ref != nullptr && ref->st == flatbuffers::ST_TABLE;
    const auto field = flatbuffers::FieldIndexToOffset(static_cast<flatbuffers::voffset_t>(i));
    if (!tc.is_repeating) {
      const auto* nested = holds_tables ? table.GetPointer<const flatbuffers::Table*>(field) : nullptr;
      if (nested != nullptr && !VectorsAligned(*nested, *ref, path)) return false;
      continue;
    }
    const auto* vec = table.GetPointer<const flatbuffers::Vector<uint8_t>*>(field);
    if (vec == nullptr) continue;
    if (reinterpret_cast<uintptr_t>(vec->Data()) % ElementAlignment(base, ref) != 0) {
      *path = type.names[i];
      return false;
    }
    if (!holds_tables) continue;
    const auto* tables = reinterpret_cast<const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>*>(vec);
    for (flatbuffers::uoffset_t j = 0; j < tables->size(); ++j) {
      if (!VectorsAligned(*tables->Get(j), *ref, path)) {
        *path = fmt::format("{}[{}].{}", type.names[i], j, *path);
        return false;
      }
    }
  }
  return true;
}

template <typename Table>
Status CheckBeforeUnpack(const Table& table) {
  std::string path;
  if (VectorsAligned(reinterpret_cast<const flatbuffers::Table&>(table), *Table::MiniReflectTypeTable(), &path)) {
    return Status::Ok();
  }
  return Status::Corruption(fmt::format("malformed message: {}.{} is not aligned for its elements",
                                        wire::EnumNameBody(wire::BodyTraits<Table>::enum_value), path));
}

// ---- Decode ------------------------------------------------------------------------------------

// Unpacks the envelope's body as Body alternative I (union member I + 1), or the next one.
template <size_t I = 0>
Result<Body> UnpackBody(const wire::Envelope& envelope) {
  if constexpr (I == std::variant_size_v<Body>) {
    return Status::Internal("unreachable: body type checked before");
  } else {
    using M = std::variant_alternative_t<I, Body>;
    if (static_cast<size_t>(envelope.body_type()) != I + 1) return UnpackBody<I + 1>(envelope);
    const auto* table = static_cast<const typename M::TableType*>(envelope.body());
    ZM_RETURN_IF_ERROR(CheckBeforeUnpack(*table));
    M m;
    table->UnPackTo(&m);
    ZM_RETURN_IF_ERROR(CheckEnums(m));
    return Body(std::move(m));
  }
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
  out.sender = envelope->sender() == nullptr ? std::string() : envelope->sender()->str();
  const std::string from = out.sender.empty() ? std::string() : fmt::format(" from '{}'", out.sender);
  if (out.version != kMessageVersion) {
    return Status::InvalidArgument(fmt::format("message version {}{}, this build speaks version {}",
                                               out.version, from, kMessageVersion));
  }
  const wire::Body type = envelope->body_type();
  if (type == wire::Body::NONE || envelope->body() == nullptr) {
    return Status::InvalidArgument(fmt::format("message{} has no body", from));
  }
  if (static_cast<unsigned>(type) > static_cast<unsigned>(wire::Body::MAX)) {
    return Status::InvalidArgument(fmt::format("message{} has unknown body type {} (this build knows 1..{})", from,
                                               static_cast<unsigned>(type), static_cast<unsigned>(wire::Body::MAX)));
  }
  Result<Body> body = UnpackBody(*envelope);
  if (!body.ok()) return body.status().WithContext(fmt::format("message{}", from));
  out.body = std::move(body).value();
  return out;
}

}  // namespace

Status StatusFrom(fb::StatusCode code, const std::string& message) {
  return code == fb::StatusCode::Ok ? Status::Ok() : Status(static_cast<StatusCode>(code), message);
}

void StatusTo(const Status& status, fb::StatusCode* code, std::string* message) {
  *code = static_cast<fb::StatusCode>(status.code());
  *message = status.ok() ? std::string() : status.message();
}

fb::ChunkKind ToWire(ChunkKind kind) { return static_cast<fb::ChunkKind>(kind); }
ChunkKind FromWire(fb::ChunkKind kind) { return static_cast<ChunkKind>(kind); }
fb::Codec ToWire(Codec codec) { return static_cast<fb::Codec>(codec); }
Codec FromWire(fb::Codec codec) { return static_cast<Codec>(codec); }

const char* BodyName(const Body& body) {
  return wire::EnumNameBody(static_cast<wire::Body>(body.index() + 1));
}

std::string EncodeMessage(const Message& message) {
  FlatBufferBuilder fbb(256);
  const flatbuffers::Offset<void> body = std::visit(
      [&fbb](const auto& m) { return std::decay_t<decltype(m)>::TableType::Pack(fbb, &m).Union(); }, message.body);
  const auto sender = message.sender.empty() ? 0 : fbb.CreateString(message.sender);
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
