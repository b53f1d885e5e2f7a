// Writes the generated seed inputs of tests/fuzz/corpus/: one service message per body type
// (message/), a small manifest as a whole file and as a bare body (manifest/), small safetensors
// files (safetensors/). Real-model seeds (tokenizer.json, config.json, manifest.bin of a synthesized
// tiny model) come from tests/fuzz/make_corpus.py.
//   make_seeds CORPUS_DIR     (scripts/fuzz.sh --make-seeds runs it on tests/fuzz/corpus)
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "common/file_util.h"
#include "common/hash.h"
#include "common/checkpoint/manifest.h"
#include "common/ipc/messaging.h"
#include "common/checkpoint/safetensors.h"
#include "tests/common/messaging_samples.h"

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

// The first sample of each message type (tests/common/messaging_samples.h).
void WriteMessages(const std::string& dir) {
  std::set<size_t> written;
  for (const msg::Body& body : msg::samples::AllBodies()) {
    if (!written.insert(body.index()).second) continue;
    Write(JoinPath(dir, std::string("message/") + msg::BodyName(body) + ".bin"), msg::EncodeMessage("fuzz-1", body));
  }
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

// gpt-oss-style MXFP4 experts (issue 41): per tensor of 256 values K = 3 E-chunks, two of packed 2-bit
// exponent fields and the last of the 8 block scales (EChunkRanges), and an SM-chunk of n/4 bytes; the
// manifest's scale histogram set.
Manifest SmallMxfp4Manifest() {
  Manifest m;
  m.arch = "gpt_oss";
  m.config_json = "{\"model_type\": \"gpt_oss\"}";
  m.n_shards = 3;
  m.n_layers = 1;
  m.n_experts = 1;
  m.exponent_histograms = {{DType::kMXFP4, {}}};
  m.exponent_histograms[0].counts[1] = 512;
  m.mxfp4_scale_histogram[121] = 10;
  m.mxfp4_scale_histogram[122] = 6;
  uint64_t offset = 0;
  for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kDown}) {
    ExpertTensorInfo t;
    t.name = std::string("model.layers.0.mlp.experts.0.") + ExpertProjName(proj);
    t.proj = proj;
    t.shape = {4, 64};
    t.dtype = DType::kMXFP4;
    t.codec = Codec::kZstd;
    t.level = 1;
    t.n_shards = 3;
    t.chunks = {{ChunkKind::kE, 0, 128, offset, 20, 128, 1},
                {ChunkKind::kE, 128, 128, offset + 4096, 20, 128, 2},
                {ChunkKind::kE, 256, 8, offset + 8192, 8, 8, 3},
                {ChunkKind::kSm, 0, 256, offset + 12288, 64, 64, 4}};
    offset += 4 * 4096;
    t.bf16_xxh64 = 7;
    t.record_xxh64 = RecordHash(t);
    m.expert_tensors.push_back(t);
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
  const std::string mxfp4 = SerializeManifest(SmallMxfp4Manifest());
  if (const auto parsed = ParseManifest("seed", mxfp4); !parsed.ok()) {
    std::fprintf(stderr, "make_seeds: the MXFP4 manifest does not parse: %s\n", parsed.status().ToString().c_str());
    ++failures;
  }
  Write(JoinPath(dir, "manifest/mxfp4_small.bin"), mxfp4);
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
