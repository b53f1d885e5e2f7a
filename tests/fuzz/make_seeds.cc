// Writes the generated seed inputs of tests/fuzz/corpus/: one service message per body type
// (message/), a small manifest as a whole file and as a bare body (manifest/), small safetensors
// files (safetensors/). Real-model seeds (tokenizer.json, config.json, manifest.bin of a synthesized
// tiny model) come from tests/fuzz/make_corpus.py.
//   make_seeds CORPUS_DIR     (scripts/fuzz.sh --make-seeds runs it on tests/fuzz/corpus)
#include <cstdio>
#include <cstring>
#include <string>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/manifest.h"
#include "common/messaging.h"
#include "common/safetensors.h"

namespace {

using namespace zipmoe;
namespace msg = zipmoe::messaging;

int failures = 0;

void Write(const std::string& path, const std::string& bytes) {
  Status st = WriteFileAtomic(path, bytes);
  if (!st.ok()) {
    std::fprintf(stderr, "make_seeds: %s\n", st.ToString().c_str());
    ++failures;
  }
}

void WriteMessages(const std::string& dir) {
  msg::ChunkRead read{7, 1, 8192, 1000, 4096 * 3, 4096, 0x1234, "model.layers.0.mlp.experts.1.up_proj.weight",
                      0, 1, ChunkKind::kSm, 4};
  msg::DecodeRequest decode;
  decode.op_id = 9;
  decode.kind = msg::DecodeKind::kRecoverBf16;
  decode.raw_bytes = 4096;
  decode.expected_xxh64 = 42;
  decode.tensor_name = "t";
  msg::CacheLookupReply lookup_reply;
  lookup_reply.request_id = 3;
  lookup_reply.entries = {{1, 4, 4096, 11}, {2, 0, 0, 0}};
  lookup_reply.admit_outcomes = {1, 2, 3};
  lookup_reply.admit_status = Status::Unavailable("no slot");
  msg::CacheAdmitItem item{0, 1, 11, true, msg::kCachePartE | msg::kCachePartSm, {4096, 8192}, {1, 2, 3}, {}};
  msg::CacheHelloReply hello_reply;
  hello_reply.arena_name = "/zipmoe-arena";
  hello_reply.staging_offsets = {0, 4096};
  hello_reply.sm_read_us = 1.5;
  msg::CacheStats stats;
  stats.pool_counters.assign(28, 1);
  stats.layer_requests = {1, 2, 3, 4, 5};
  const msg::Body bodies[] = {
      msg::ReadRequest{{read, read}},
      msg::ReadCompletion{7, 1, Status::Corruption("xxh64 mismatch"), ChunkKind::kE, 100, 4096, 3, 1},
      decode,
      msg::DecodeCompletion{9, 0, Status::Ok(), 2, 17},
      msg::WorkerReady{4, 4, "/zipmoe-arena", 1 << 20, 1234, 500, msg::kRoleDecompressor},
      msg::Heartbeat{500, 2},
      msg::Disconnect{"bye"},
      msg::LayerRequest{3, {0, 5}, {2, 1}, {0.5f, 0.5f}, 0},
      msg::ExpertReady{3, 5, Status::Ok(), 0, 4096, 8192, 64, 32},
      msg::LeaseRelease{3, 5},
      msg::LayerEnd{3},
      msg::Ack{Status::Internal("x")},
      msg::CacheHello{1, 99, 500, ""},
      hello_reply,
      msg::CacheLookup{2, 3, {0, 5}, {0.25f}},
      lookup_reply,
      msg::CacheAdmit{4, {item}, true},
      msg::CacheReply{4, Status::Ok()},
      msg::CacheStatsRequest{5},
      stats,
  };
  for (const msg::Body& body : bodies)
    Write(JoinPath(dir, std::string("message/") + msg::BodyName(body) + ".bin"), msg::EncodeMessage("fuzz-1", body));
}

Manifest SmallManifest() {
  Manifest m;
  m.arch = "qwen2_moe";
  m.config_json = "{\"model_type\": \"qwen2_moe\"}";
  m.n_shards = 2;
  m.n_layers = 1;
  m.n_experts = 2;
  m.experts_file_bytes = 4096 * 8;
  m.exponent_histogram[127] = 64;
  m.source_files = {"tokenizer.json"};
  m.dense_tensors = {{"model.embed_tokens.weight", {16, 8}, DType::kBF16, 0x99}, {"lm_head.weight", {16, 8}, DType::kBF16, 0}};
  uint64_t offset = 0;
  for (int expert = 0; expert < 2; ++expert) {
    for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kDown}) {
      ExpertTensorInfo t;
      t.name = "model.layers.0.mlp.experts." + std::to_string(expert) + "." + ExpertProjName(proj) + ".weight";
      t.expert_id = expert;
      t.proj = proj;
      t.shape = {4, 8};
      t.codec = expert == 0 ? Codec::kZstd : Codec::kNone;
      t.level = 3;
      t.n_shards = 2;
      t.chunks = {{ChunkKind::kE, 0, 16, offset, 16, 16, 1}, {ChunkKind::kE, 16, 16, offset + 4096, 16, 16, 2},
                  {ChunkKind::kSm, 0, 32, offset + 8192, 32, 32, 3}};
      offset += 3 * 4096;
      t.bf16_xxh64 = 5;
      t.record_xxh64 = RecordHash(t);
      m.expert_tensors.push_back(t);
    }
  }
  m.experts_file_bytes = offset;
  return m;
}

void WriteManifests(const std::string& dir) {
  const std::string whole = SerializeManifest(SmallManifest());
  if (!ParseManifest("seed", whole).ok()) {
    std::fprintf(stderr, "make_seeds: the small manifest does not parse\n");
    ++failures;
  }
  Write(JoinPath(dir, "manifest/small.bin"), whole);
  Write(JoinPath(dir, "manifest/small_body.bin"), whole.substr(32));  // the harness adds the header
  Manifest empty;
  Write(JoinPath(dir, "manifest/empty_body.bin"), SerializeManifest(empty).substr(32));
}

void WriteSafetensorsSeeds(const std::string& dir) {
  auto fill = [](const TensorSpec& spec, uint8_t* out) {
    for (uint64_t i = 0; i < spec.size_bytes(); ++i) out[i] = static_cast<uint8_t>(i);
    return Status::Ok();
  };
  Status st = WriteSafetensors(JoinPath(dir, "safetensors/small.safetensors"),
                               {{"w", DType::kBF16, {2, 3}}, {"b", DType::kF32, {3}}, {"empty", DType::kI64, {0, 4}},
                                {"s", DType::kU8, {}}},
                               fill, {{"format", "pt"}, {"note", "seed"}});
  if (st.ok()) st = WriteSafetensors(JoinPath(dir, "safetensors/no_metadata.safetensors"),
                                     {{"x", DType::kF16, {1, 1, 2}}}, fill, {});
  if (!st.ok()) {
    std::fprintf(stderr, "make_seeds: %s\n", st.ToString().c_str());
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  for (const char* sub : {"message", "manifest", "safetensors"})
    if (!CreateDirectories(JoinPath(dir, sub)).ok()) ++failures;
  WriteMessages(dir);
  WriteManifests(dir);
  WriteSafetensorsSeeds(dir);
  return failures == 0 ? 0 : 1;
}
