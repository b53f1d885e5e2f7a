#include "common/checkpoint/manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/bitfield.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/checkpoint/safetensors.h"
#include "schemas/manifest_generated.h"

namespace zipmoe {
namespace {

constexpr char kMagic[8] = {'Z', 'M', 'O', 'E', 'M', 'A', 'N', 'I'};
constexpr size_t kHeaderBytes = 32;

void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string Where(const ExpertTensorInfo& t) {
  return fmt::format("tensor '{}' (layer {}, expert {})", t.name, t.layer_id, t.expert_id);
}

// Field-level consistency of one record (structure the converter guarantees).
Status CheckRecord(const std::string& path, const Manifest& m, const ExpertTensorInfo& t) {
  const int64_t numel = t.numel();
  if (numel < 0)
    return Status::Corruption(
        fmt::format("{}: {}: negative dimension or more than 2^63 elements in its shape", path, Where(t)));
  if (!HasExponentSplit(t.dtype))
    return Status::Corruption(fmt::format("{}: {}: dtype {} (expected BF16, F16, F32, F8_E4M3 or MXFP4)", path,
                                          Where(t), DTypeName(t.dtype)));
  if (t.dtype == DType::kMXFP4 && numel % 32 != 0)
    return Status::Corruption(fmt::format("{}: {}: MXFP4 tensor of {} elements (not whole blocks of 32)", path,
                                          Where(t), numel));
  if (t.n_shards < 1 || t.chunks.size() != static_cast<size_t>(t.n_shards) + 1)
    return Status::Corruption(fmt::format("{}: {}: {} chunks for K={} (expected K E-chunks + 1 SM-chunk)", path,
                                          Where(t), t.chunks.size(), t.n_shards));
  if (t.dtype == DType::kMXFP4) {
    // The first MXFP4 layout (2026-11) kept the scales raw at the end of the SM-chunk; they are E-chunk K-1 now.
    const ChunkInfo& sm = t.chunks.back();
    if (sm.raw_bytes == static_cast<uint64_t>(numel / 4 + numel / 32) && numel > 0)
      return Status::InvalidArgument(fmt::format(
          "{}: {}: MXFP4 tensor in the earlier layout (block scales in the SM-chunk); this build reads them from an "
          "E-chunk of their own: run `zipmoe compress` on the checkpoint again",
          path, Where(t)));
    const ChunkInfo& scales = t.chunks[t.chunks.size() - 2];
    if (t.n_shards < 2 || scales.elem_offset != static_cast<uint64_t>(numel) ||
        scales.elem_count != static_cast<uint64_t>(numel / 32))
      return Status::Corruption(fmt::format("{}: {}: MXFP4 E-chunk {} covers [{}, +{}) of the E plane, expected the "
                                            "{} block scales [{}, +{})",
                                            path, Where(t), t.chunks.size() - 2, scales.elem_offset, scales.elem_count,
                                            numel / 32, numel, numel / 32));
  }
  uint64_t next = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const ChunkInfo& c = t.chunks[i];
    const bool is_sm = i + 1 == t.chunks.size();
    const char* kind = is_sm ? "SM-chunk" : "E-chunk";
    if (c.kind != (is_sm ? ChunkKind::kSm : ChunkKind::kE))
      return Status::Corruption(fmt::format("{}: {}: chunk {} has the wrong kind", path, Where(t), i));
    if (c.file_offset % m.alignment != 0)
      return Status::Corruption(fmt::format("{}: {}: {} {} at offset {} is not {}-byte aligned", path, Where(t),
                                            kind, i, c.file_offset, m.alignment));
    if (!is_sm && c.raw_bytes != c.elem_count)
      return Status::Corruption(fmt::format("{}: {}: {} {} raw_bytes {} != elem_count {}", path, Where(t), kind, i,
                                            c.raw_bytes, c.elem_count));
    if (m.experts_file_bytes != 0 &&
        (c.file_offset > m.experts_file_bytes || c.stored_bytes > m.experts_file_bytes - c.file_offset))
      return Status::Corruption(fmt::format("{}: {}: {} {} [{}, +{}) beyond experts.bin ({} bytes)", path, Where(t),
                                            kind, i, c.file_offset, c.stored_bytes, m.experts_file_bytes));
    if (is_sm) {
      if (c.elem_offset != 0 || c.elem_count != static_cast<uint64_t>(numel))
        return Status::Corruption(fmt::format("{}: {}: SM-chunk covers [{}, +{}), expected [0, {})", path, Where(t),
                                              c.elem_offset, c.elem_count, numel));
      const uint64_t want = SmPlaneBytes(t.dtype, numel);
      if (c.raw_bytes != want || c.stored_bytes != want)
        return Status::Corruption(fmt::format("{}: {}: {} SM-chunk of {} elements has raw_bytes {}, stored_bytes {}; "
                                              "expected {} (stored raw)",
                                              path, Where(t), DTypeName(t.dtype), numel, c.raw_bytes, c.stored_bytes,
                                              want));
    } else {
      if (c.elem_offset != next)
        return Status::Corruption(fmt::format("{}: {}: E-chunk {} starts at element {}, expected {}", path, Where(t),
                                              i, c.elem_offset, next));
      next += c.elem_count;
      if (t.codec == Codec::kNone && c.stored_bytes != EChunkStreamBytes(EChunkDType(t, c), c.raw_bytes))
        return Status::Corruption(fmt::format("{}: {}: uncompressed E-chunk {} size mismatch", path, Where(t), i));
    }
  }
  if (next != EPlaneBytes(t.dtype, numel))
    return Status::Corruption(fmt::format("{}: {}: E-chunks cover {} bytes of the E plane, {} elements of {} have {}",
                                          path, Where(t), next, numel, DTypeName(t.dtype),
                                          EPlaneBytes(t.dtype, numel)));
  return Status::Ok();
}

template <typename E>
bool EnumInRange(E v, E max) {
  return static_cast<int>(v) <= static_cast<int>(max);
}

}  // namespace

DType EChunkDType(const ExpertTensorInfo& t, const ChunkInfo& c) {
  if (t.dtype == DType::kMXFP4 && c.kind == ChunkKind::kE && t.numel() >= 0 &&
      c.elem_offset >= static_cast<uint64_t>(t.numel()))
    return DType::kU8;
  return t.dtype;
}

const char* ExpertProjName(ExpertProj proj) {
  switch (proj) {
    case ExpertProj::kGate: return "gate_proj";
    case ExpertProj::kUp: return "up_proj";
    case ExpertProj::kDown: return "down_proj";
  }
  return "?";
}

int64_t ExpertTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (__builtin_mul_overflow(n, d, &n)) return -1;  // a crafted shape (found by fuzzing)
  }
  return n;
}

uint64_t ExpertTensorInfo::raw_bytes() const {
  return DTypeBytes(dtype, static_cast<uint64_t>(numel()));
}

uint64_t Manifest::expert_raw_bytes() const {
  uint64_t total = 0;
  for (const ExpertTensorInfo& t : expert_tensors) total += t.raw_bytes();
  return total;
}

uint64_t ExpertTensorInfo::stored_bytes() const {
  uint64_t s = 0;
  for (const auto& c : chunks) s += c.stored_bytes;
  return s;
}

uint64_t ExpertTensorInfo::e_stored_bytes() const {
  uint64_t s = 0;
  for (const auto& c : chunks)
    if (c.kind == ChunkKind::kE) s += c.stored_bytes;
  return s;
}

uint64_t RecordHash(const ExpertTensorInfo& t) {
  std::string buf;
  buf.reserve(256);
  PutU64(&buf, t.name.size());
  buf += t.name;
  PutU32(&buf, static_cast<uint32_t>(t.layer_id));
  PutU32(&buf, static_cast<uint32_t>(t.expert_id));
  buf.push_back(static_cast<char>(t.proj));
  PutU64(&buf, t.shape.size());
  for (int64_t d : t.shape) PutU64(&buf, static_cast<uint64_t>(d));
  buf.push_back(static_cast<char>(t.dtype));
  buf.push_back(static_cast<char>(t.codec));
  PutU32(&buf, static_cast<uint32_t>(t.level));
  PutU32(&buf, static_cast<uint32_t>(t.n_shards));
  PutU64(&buf, t.chunks.size());
  for (const auto& c : t.chunks) {
    buf.push_back(static_cast<char>(c.kind));
    PutU64(&buf, c.elem_offset);
    PutU64(&buf, c.elem_count);
    PutU64(&buf, c.file_offset);
    PutU64(&buf, c.stored_bytes);
    PutU64(&buf, c.raw_bytes);
    PutU64(&buf, c.xxh64);
  }
  PutU64(&buf, t.bf16_xxh64);
  return Xxh64(buf.data(), buf.size());
}

std::string SerializeManifest(const Manifest& m) {
  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  std::vector<flatbuffers::Offset<fb::ExpertTensor>> experts;
  experts.reserve(m.expert_tensors.size());
  for (const auto& t : m.expert_tensors) {
    std::vector<flatbuffers::Offset<fb::Chunk>> chunks;
    chunks.reserve(t.chunks.size());
    for (const auto& c : t.chunks) {
      chunks.push_back(fb::CreateChunk(fbb, static_cast<fb::ChunkKind>(c.kind), c.elem_offset, c.elem_count,
                                       c.file_offset, c.stored_bytes, c.raw_bytes, c.xxh64));
    }
    experts.push_back(fb::CreateExpertTensor(
        fbb, fbb.CreateString(t.name), t.layer_id, t.expert_id, fbb.CreateString(ExpertProjName(t.proj)),
        fbb.CreateVector(t.shape), static_cast<fb::DType>(t.dtype), static_cast<fb::Codec>(t.codec), t.level,
        t.n_shards, fbb.CreateVector(chunks), t.bf16_xxh64, t.record_xxh64));
  }
  std::vector<flatbuffers::Offset<fb::DenseTensor>> dense;
  dense.reserve(m.dense_tensors.size());
  for (const auto& d : m.dense_tensors) {
    dense.push_back(fb::CreateDenseTensor(fbb, fbb.CreateString(d.name), fbb.CreateVector(d.shape),
                                          static_cast<fb::DType>(d.dtype), d.xxh64));
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> sources;
  for (const auto& s : m.source_files) sources.push_back(fbb.CreateString(s));
  std::vector<uint64_t> hist(m.exponent_histogram.begin(), m.exponent_histogram.end());
  // Per-dtype histograms only when some dtype is not BF16: a BF16-only body stays byte-identical to one
  // written before the field existed (a null offset is not stored).
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::DTypeHistogram>>> per_dtype;
  if (std::any_of(m.exponent_histograms.begin(), m.exponent_histograms.end(),
                  [](const DTypeHistogram& h) { return h.dtype != DType::kBF16; })) {
    std::vector<flatbuffers::Offset<fb::DTypeHistogram>> entries;
    for (const DTypeHistogram& h : m.exponent_histograms) {
      std::vector<uint64_t> counts(h.counts.begin(), h.counts.end());
      entries.push_back(fb::CreateDTypeHistogram(fbb, static_cast<fb::DType>(h.dtype), fbb.CreateVector(counts)));
    }
    per_dtype = fbb.CreateVector(entries);
  }
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> scale_hist;
  if (std::any_of(m.mxfp4_scale_histogram.begin(), m.mxfp4_scale_histogram.end(), [](uint64_t c) { return c != 0; }))
    scale_hist =
        fbb.CreateVector(std::vector<uint64_t>(m.mxfp4_scale_histogram.begin(), m.mxfp4_scale_histogram.end()));
  auto root = fb::CreateManifest(
      fbb, m.version, fbb.CreateString(m.arch), fbb.CreateString(m.config_json), static_cast<fb::Codec>(m.codec),
      m.level, m.n_shards, m.alignment, fbb.CreateString(m.experts_file), m.experts_file_bytes,
      fbb.CreateString(m.dense_file), fbb.CreateVector(experts), fbb.CreateVector(dense), m.n_layers, m.n_experts,
      fbb.CreateVector(hist), fbb.CreateVector(sources), per_dtype, scale_hist);
  fb::FinishManifestBuffer(fbb, root);

  std::string out;
  out.reserve(kHeaderBytes + fbb.GetSize());
  out.append(kMagic, sizeof kMagic);
  PutU32(&out, kManifestHeaderVersion);
  PutU32(&out, 0);
  PutU64(&out, fbb.GetSize());
  PutU64(&out, Xxh64(fbb.GetBufferPointer(), fbb.GetSize()));
  out.append(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
  return out;
}

namespace {

// Copies a vector of 8-byte scalars out of the body through memcpy: the Verifier checks only the
// alignment of a vector's length, so the elements of a crafted [long] may sit 4 bytes off their
// alignment, and reading them in place would be a misaligned load (found by fuzzing).
template <typename T>
std::vector<T> CopyVector(const flatbuffers::Vector<T>* v) {
  std::vector<T> out(v == nullptr ? 0 : v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  for (T& x : out) x = flatbuffers::EndianScalar(x);
  return out;
}

std::vector<int64_t> ToShape(const flatbuffers::Vector<int64_t>* v) { return CopyVector(v); }

std::string Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

Result<ExpertProj> ParseProj(const std::string& path, const std::string& tensor, const std::string& s) {
  if (s == "gate_proj") return ExpertProj::kGate;
  if (s == "up_proj") return ExpertProj::kUp;
  if (s == "down_proj") return ExpertProj::kDown;
  return Status::Corruption(fmt::format("{}: tensor '{}': unknown proj '{}'", path, tensor, s));
}

// Converts a verified FlatBuffers body to the value type (no checksum or consistency checks).
Result<Manifest> FromFlatBuffer(const std::string& path, const fb::Manifest& f) {
  Manifest m;
  m.version = f.version();
  if (m.version != kManifestBodyVersion)
    return Status::InvalidArgument(fmt::format("{}: manifest body version {} (this build reads {})", path, m.version,
                                               kManifestBodyVersion));
  m.arch = Str(f.arch());
  m.config_json = Str(f.config_json());
  if (!EnumInRange(f.codec(), fb::Codec::MAX)) return Status::Corruption(path + ": unknown codec");
  m.codec = static_cast<Codec>(f.codec());
  m.level = f.level();
  m.n_shards = f.n_shards();
  m.alignment = f.alignment();
  if (m.alignment == 0) return Status::Corruption(path + ": alignment 0");
  m.experts_file = Str(f.experts_file());
  m.experts_file_bytes = f.experts_file_bytes();
  m.dense_file = Str(f.dense_file());
  m.n_layers = f.n_layers();
  m.n_experts = f.n_experts();
  if (f.exponent_histogram() != nullptr) {
    if (f.exponent_histogram()->size() != 256)
      return Status::Corruption(fmt::format("{}: exponent_histogram has {} bins", path, f.exponent_histogram()->size()));
    const std::vector<uint64_t> histogram = CopyVector(f.exponent_histogram());
    std::copy(histogram.begin(), histogram.end(), m.exponent_histogram.begin());
  }
  if (f.source_files() != nullptr)
    for (const auto* s : *f.source_files()) m.source_files.push_back(Str(s));
  if (f.dense_tensors() != nullptr) {
    for (const auto* d : *f.dense_tensors()) {
      if (!EnumInRange(d->dtype(), fb::DType::MAX))
        return Status::Corruption(fmt::format("{}: dense tensor '{}': unknown dtype", path, Str(d->name())));
      m.dense_tensors.push_back({Str(d->name()), ToShape(d->shape()), static_cast<DType>(d->dtype()), d->xxh64()});
    }
  }
  if (f.expert_tensors() != nullptr) {
    m.expert_tensors.reserve(f.expert_tensors()->size());
    for (const auto* e : *f.expert_tensors()) {
      ExpertTensorInfo t;
      t.name = Str(e->name());
      t.layer_id = e->layer_id();
      t.expert_id = e->expert_id();
      ZM_ASSIGN_OR_RETURN(t.proj, ParseProj(path, t.name, Str(e->proj())));
      t.shape = ToShape(e->shape());
      if (!EnumInRange(e->dtype(), fb::DType::MAX) || !EnumInRange(e->codec(), fb::Codec::MAX))
        return Status::Corruption(fmt::format("{}: {}: unknown dtype or codec", path, Where(t)));
      t.dtype = static_cast<DType>(e->dtype());
      t.codec = static_cast<Codec>(e->codec());
      t.level = e->level();
      t.n_shards = e->n_shards();
      if (e->chunks() != nullptr) {
        for (const auto* c : *e->chunks()) {
          if (!EnumInRange(c->kind(), fb::ChunkKind::MAX))
            return Status::Corruption(fmt::format("{}: {}: unknown chunk kind", path, Where(t)));
          t.chunks.push_back({static_cast<ChunkKind>(c->kind()), c->elem_offset(), c->elem_count(), c->file_offset(),
                              c->stored_bytes(), c->raw_bytes(), c->xxh64()});
        }
      }
      t.bf16_xxh64 = e->bf16_xxh64();
      t.record_xxh64 = e->record_xxh64();
      m.expert_tensors.push_back(std::move(t));
    }
  }
  if (f.exponent_histograms() != nullptr) {
    for (const auto* h : *f.exponent_histograms()) {
      if (!EnumInRange(h->dtype(), fb::DType::MAX) || h->counts() == nullptr || h->counts()->size() != 256)
        return Status::Corruption(path + ": a per-dtype exponent histogram has an unknown dtype or not 256 bins");
      DTypeHistogram d;
      d.dtype = static_cast<DType>(h->dtype());
      const std::vector<uint64_t> counts = CopyVector(h->counts());
      std::copy(counts.begin(), counts.end(), d.counts.begin());
      m.exponent_histograms.push_back(d);
    }
  } else if (!m.expert_tensors.empty()) {
    m.exponent_histograms.push_back({DType::kBF16, m.exponent_histogram});  // written before F16/F32 experts
  }
  if (f.mxfp4_scale_histogram() != nullptr) {
    if (f.mxfp4_scale_histogram()->size() != 256)
      return Status::Corruption(
          fmt::format("{}: mxfp4_scale_histogram has {} bins", path, f.mxfp4_scale_histogram()->size()));
    const std::vector<uint64_t> histogram = CopyVector(f.mxfp4_scale_histogram());
    std::copy(histogram.begin(), histogram.end(), m.mxfp4_scale_histogram.begin());
  }
  return m;
}

}  // namespace

Result<Manifest> ParseManifest(const std::string& path, const std::string& bytes) {
  if (bytes.size() < kHeaderBytes)
    return Status::Corruption(fmt::format("{}: {} bytes, shorter than the {}-byte header", path, bytes.size(),
                                          kHeaderBytes));
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return Status::Corruption(path + ": bad magic (not a zipmoe manifest)");
  const uint32_t header_version = GetU32(bytes.data() + 8);
  if (header_version != kManifestHeaderVersion)
    return Status::InvalidArgument(fmt::format("{}: header version {} (this build reads {})", path, header_version,
                                               kManifestHeaderVersion));
  if (GetU32(bytes.data() + 12) != 0) return Status::Corruption(path + ": nonzero reserved header field");
  const uint64_t body_bytes = GetU64(bytes.data() + 16);
  const uint64_t body_hash = GetU64(bytes.data() + 24);
  if (body_bytes != bytes.size() - kHeaderBytes)
    return Status::Corruption(fmt::format("{}: header says {} body bytes, file has {} (truncated or extended)", path,
                                          body_bytes, bytes.size() - kHeaderBytes));
  const auto* body = reinterpret_cast<const uint8_t*>(bytes.data() + kHeaderBytes);
  const bool checksum_ok = Xxh64(body, body_bytes) == body_hash;

  // A manifest holds 1 + (K + 1) tables per expert tensor (its chunks): a large model's (DeepSeek-V3: 44,544
  // expert tensors) passes the verifier's default 1,000,000 tables at K ~ 21. Every table takes at least 4
  // bytes, so the body's size bounds their number and the verifier's work stays linear in the file.
  flatbuffers::Verifier::Options verify_options;
  verify_options.max_tables = static_cast<flatbuffers::uoffset_t>(std::min<uint64_t>(body_bytes / 4 + 1, UINT32_MAX));
  flatbuffers::Verifier verifier(body, body_bytes, verify_options);
  if (!fb::VerifyManifestBuffer(verifier)) {
    return Status::Corruption(fmt::format("{}: {}FlatBuffers verification of the manifest body failed", path,
                                          checksum_ok ? "" : "checksum mismatch; "));
  }
  auto parsed = FromFlatBuffer(path, *fb::GetManifest(body));
  if (!checksum_ok) {
    // Name the damaged record when the corruption hit an expert tensor.
    if (parsed.ok()) {
      for (const auto& t : parsed->expert_tensors) {
        if (RecordHash(t) != t.record_xxh64)
          return Status::Corruption(fmt::format("{}: checksum mismatch in the record of {}", path, Where(t)));
      }
    }
    return Status::Corruption(fmt::format(
        "{}: body checksum mismatch (xxh64 {:016x}, header {:016x}) outside expert tensor records", path,
        Xxh64(body, body_bytes), body_hash));
  }
  if (!parsed.ok()) return parsed.status();
  Manifest& m = parsed.value();
  for (const auto& t : m.expert_tensors) {
    if (RecordHash(t) != t.record_xxh64)
      return Status::Corruption(fmt::format("{}: record hash mismatch for {}", path, Where(t)));
    ZM_RETURN_IF_ERROR(CheckRecord(path, m, t));
  }
  return std::move(parsed).value();
}

Status VerifyDenseTensors(const Manifest& manifest, const SafetensorsFile& dense) {
  for (const DenseTensorInfo& d : manifest.dense_tensors) {
    const TensorView* v = dense.Find(d.name);
    if (v == nullptr)
      return Status::Corruption(fmt::format("{}: tensor '{}' listed in the manifest is missing", dense.path(), d.name));
    if (v->spec.shape != d.shape || v->spec.dtype != d.dtype)
      return Status::Corruption(fmt::format("{}: tensor '{}' has another shape or dtype than the manifest records",
                                            dense.path(), d.name));
    if (d.xxh64 != 0 && Xxh64(v->data, v->size_bytes()) != d.xxh64)
      return Status::Corruption(fmt::format(
          "{}: tensor '{}': its bytes do not match the manifest's checksum (the file is damaged; restore it or "
          "compress the model again)",
          dense.path(), d.name));
  }
  return Status::Ok();
}

Result<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestFileName);
  if (!FileExists(path)) return Status::NotFound(path + ": no manifest (not a zipmoe compressed directory?)");
  ZM_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseManifest(path, bytes);
}

}  // namespace zipmoe
