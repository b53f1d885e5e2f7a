// libFuzzer target: manifest.bin through ParseManifest. Two input forms:
//   - starting with the magic "ZMOEMANI": parsed as it is (header, checksums and all);
//   - anything else is taken as a FlatBuffers body: where it verifies, each expert record's
//     record_xxh64 is set to RecordHash of its fields, then a valid header (size, body xxh64) is
//     prepended, so mutations get past the checksums into the field checks (CheckRecord).
// A manifest that parses must serialise and parse back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "common/checkpoint/manifest.h"
#include "schemas/manifest_generated.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

namespace fb = zipmoe::fb;

constexpr char kMagic[] = "ZMOEMANI";

void PutLe(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Sets every expert record's record_xxh64 (where the field is present) to the hash of its fields,
// converted as FromFlatBuffer in common/checkpoint/manifest.cc converts them. Every hash is computed before any
// is written: in a fuzzed buffer one record's hash field may overlap another table's offsets, and a
// write during the walk would send the rest of the walk outside the verified buffer.
void FixRecordHashes(std::string* body) {
  auto* base = reinterpret_cast<uint8_t*>(body->data());
  flatbuffers::Verifier verifier(base, body->size());
  if (!fb::VerifyManifestBuffer(verifier)) return;
  const fb::Manifest* m = fb::GetManifest(base);
  if (m->expert_tensors() == nullptr) return;
  std::vector<std::pair<uint8_t*, uint64_t>> writes;
  for (const fb::ExpertTensor* e : *m->expert_tensors()) {
    zipmoe::ExpertTensorInfo t;
    t.name = e->name() != nullptr ? e->name()->str() : "";
    t.layer_id = e->layer_id();
    t.expert_id = e->expert_id();
    const std::string proj = e->proj() != nullptr ? e->proj()->str() : "";
    t.proj = proj == "up_proj" ? zipmoe::ExpertProj::kUp
             : proj == "down_proj" ? zipmoe::ExpertProj::kDown : zipmoe::ExpertProj::kGate;
    if (e->shape() != nullptr) {  // memcpy: the elements may be misaligned (see ToShape in manifest.cc)
      t.shape.resize(e->shape()->size());
      if (!t.shape.empty()) std::memcpy(t.shape.data(), e->shape()->Data(), t.shape.size() * sizeof(int64_t));
    }
    t.dtype = static_cast<zipmoe::DType>(e->dtype());
    t.codec = static_cast<zipmoe::Codec>(e->codec());
    t.level = e->level();
    t.n_shards = e->n_shards();
    if (e->chunks() != nullptr)
      for (const fb::Chunk* c : *e->chunks())
        t.chunks.push_back({static_cast<zipmoe::ChunkKind>(c->kind()), c->elem_offset(), c->elem_count(),
                            c->file_offset(), c->stored_bytes(), c->raw_bytes(), c->xxh64()});
    t.bf16_xxh64 = e->bf16_xxh64();
    // The generated table inherits flatbuffers::Table privately; the object is one.
    const auto* table = reinterpret_cast<const flatbuffers::Table*>(e);
    const uint8_t* field = table->GetAddressOf(fb::ExpertTensor::VT_RECORD_XXH64);
    if (field != nullptr) writes.emplace_back(const_cast<uint8_t*>(field), zipmoe::RecordHash(t));
  }
  for (const auto& [field, hash] : writes) flatbuffers::WriteScalar<uint64_t>(field, hash);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size < 8 || std::memcmp(data, kMagic, 8) != 0) {
    std::string body = std::move(bytes);
    FixRecordHashes(&body);
    bytes.assign(kMagic, 8);
    PutLe(&bytes, zipmoe::kManifestHeaderVersion, 4);
    PutLe(&bytes, 0, 4);
    PutLe(&bytes, body.size(), 8);
    PutLe(&bytes, zipmoe::Xxh64(body.data(), body.size()), 8);
    bytes += body;
  }
  auto manifest = zipmoe::ParseManifest("fuzz/manifest.bin", bytes);
  if (!manifest.ok()) return 0;
  const std::string again = zipmoe::SerializeManifest(*manifest);
  auto reparsed = zipmoe::ParseManifest("fuzz/manifest.bin (re-serialised)", again);
  if (!reparsed.ok()) zipmoe::fuzz::Fail("a parsed manifest does not parse back: " + reparsed.status().ToString());
  if (zipmoe::SerializeManifest(*reparsed) != again) zipmoe::fuzz::Fail("manifest round trip changed the bytes");
  return 0;
}
