// Tests for common/safetensors: write -> read round trips (bit-exact), checkpoint directories
// (single file, sharded + index, fallback), and every header / directory corruption path.
#include "common/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace zipmoe {
namespace {

using ::testing::HasSubstr;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

// Deterministic bytes for a tensor: mt19937 seeded from `seed`.
std::string RandomBytes(uint32_t seed, uint64_t size_bytes) {
  std::mt19937 rng(seed);
  std::string out(size_bytes, '\0');
  for (auto& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

// Holds the expected bytes of each tensor and fills from them.
struct Payload {
  std::map<std::string, std::string> bytes;

  void Add(const TensorSpec& spec, uint32_t seed) { bytes[spec.name] = RandomBytes(seed, spec.size_bytes()); }
  TensorFiller Filler() const {
    return [this](const TensorSpec& spec, uint8_t* out) {
      const std::string& b = bytes.at(spec.name);
      if (b.size() != spec.size_bytes()) return Status::Internal("size mismatch for " + spec.name);
      if (!b.empty()) std::memcpy(out, b.data(), b.size());
      return Status::Ok();
    };
  }
};

std::string ViewBytes(const TensorView& view) {
  return std::string(reinterpret_cast<const char*>(view.data), view.size_bytes());
}

// u64 little-endian length + header + data, as a safetensors file.
std::string PackFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void ExpectError(const Status& st, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const auto& part : parts) EXPECT_THAT(st.message(), HasSubstr(part));
}

std::vector<TensorSpec> MixedSpecs() {
  return {{"model.embed_tokens.weight", DType::kBF16, {7, 5}},
          {"model.layers.0.mlp.experts.0.w1", DType::kF16, {3, 4, 2}},
          {"model.norm.weight", DType::kF32, {9}},
          {"model.empty", DType::kBF16, {0, 16}},
          {"lm_head.scale", DType::kF32, {}}};
}

Payload MakePayload(const std::vector<TensorSpec>& specs, uint32_t seed) {
  Payload p;
  for (size_t i = 0; i < specs.size(); ++i) p.Add(specs[i], seed + static_cast<uint32_t>(i));
  return p;
}

// ---------------------------------------------------------------------------------------------

TEST(SafetensorsTest, NumelAndSize) {
  EXPECT_EQ((TensorSpec{"a", DType::kBF16, {3, 4}}).numel(), 12);
  EXPECT_EQ((TensorSpec{"a", DType::kF32, {3, 4}}).size_bytes(), 48u);
  EXPECT_EQ((TensorSpec{"a", DType::kF32, {}}).numel(), 1);
  EXPECT_EQ((TensorSpec{"a", DType::kF16, {5, 0}}).size_bytes(), 0u);
}

TEST(SafetensorsTest, RoundTripBitExact) {
  TempDir tmp;
  const std::string path = tmp.Sub("t.safetensors");
  const auto specs = MixedSpecs();
  const Payload payload = MakePayload(specs, 42);
  ASSERT_TRUE(WriteSafetensors(path, specs, payload.Filler(), {{"format", "pt"}, {"note", "zipmoe"}}).ok());

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "zipmoe"}}));
  ASSERT_EQ((*file)->tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorView& v = (*file)->tensors()[i];
    EXPECT_EQ(v.spec.name, specs[i].name);  // written in spec order = file order
    EXPECT_EQ(v.spec.dtype, specs[i].dtype);
    EXPECT_EQ(v.spec.shape, specs[i].shape);
    EXPECT_EQ(v.file, path);
    EXPECT_EQ(ViewBytes(v), payload.bytes.at(specs[i].name)) << specs[i].name;
    EXPECT_EQ((*file)->Find(specs[i].name), &v);
  }
  EXPECT_EQ((*file)->Find("nope"), nullptr);

  // Header layout: data section 8-byte aligned, space padding, __metadata__ first, spec order.
  const std::string raw = ReadAll(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":", 0), 0u) << header;
  EXPECT_LT(header.find("model.embed_tokens.weight"), header.find("lm_head.scale"));
  EXPECT_EQ(header.find_first_not_of(' ', header.rfind('}') + 1), std::string::npos);
  uint64_t total = 0;
  for (const auto& s : specs) total += s.size_bytes();
  EXPECT_EQ(raw.size(), 8 + n + total);
}

TEST(SafetensorsTest, EmptyMetadataIsOmittedAndEmptyFileWorks) {
  TempDir tmp;
  const std::string path = tmp.Sub("empty.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}, nullptr, {}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_TRUE((*file)->metadata().empty());
  EXPECT_EQ(ReadAll(path).find("__metadata__"), std::string::npos);
}

TEST(SafetensorsTest, ViewsAreZeroCopyIntoTheMap) {
  TempDir tmp;
  const std::string path = tmp.Sub("z.safetensors");
  const auto specs = MixedSpecs();
  const Payload payload = MakePayload(specs, 7);
  ASSERT_TRUE(WriteSafetensors(path, specs, payload.Filler()).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::string raw = ReadAll(path);

  // All views lie inside one mapping of the file's size, at the same offsets as in the file.
  const TensorView& first = (*file)->tensors().front();
  const size_t first_offset = raw.find(payload.bytes.at(first.spec.name));
  ASSERT_NE(first_offset, std::string::npos);
  const uint8_t* base = first.data - first_offset;
  for (const TensorView& v : (*file)->tensors()) {
    ASSERT_GE(v.data, base);
    ASSERT_LE(v.data + v.size_bytes(), base + raw.size());
    EXPECT_EQ(std::memcmp(v.data, raw.data() + (v.data - base), v.size_bytes()), 0) << v.spec.name;
  }
  // Same address on every lookup: no copies are made.
  EXPECT_EQ((*file)->Find(first.spec.name)->data, first.data);
}

TEST(SafetensorsTest, TensorsAreInDataOffsetOrder) {
  TempDir tmp;
  const std::string path = tmp.Sub("o.safetensors");
  const std::string header =
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
      R"("z":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
      R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  WriteAll(path, PackFile(header, "\x01\x02\x03\x04"));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->tensors()[0].spec.name, "z");
  EXPECT_EQ((*file)->tensors()[1].spec.name, "a");
  EXPECT_EQ((*file)->tensors()[2].spec.name, "b");
  EXPECT_EQ(ViewBytes((*file)->tensors()[2]), "\x03\x04");
}

TEST(SafetensorsTest, OpenMissingFileIsNotFound) {
  TempDir tmp;
  auto file = SafetensorsFile::Open(tmp.Sub("missing.safetensors"));
  ASSERT_FALSE(file.ok());
  ExpectError(file.status(), StatusCode::kNotFound, {"missing.safetensors"});
}

TEST(SafetensorsTest, WriteRejectsBadSpecsAndLeavesNoFile) {
  TempDir tmp;
  const std::string path = tmp.Sub("bad.safetensors");
  const TensorFiller zeros = [](const TensorSpec&, uint8_t*) { return Status::Ok(); };
  ExpectError(WriteSafetensors(path, {{"a", DType::kF32, {1}}, {"a", DType::kF32, {2}}}, zeros),
              StatusCode::kInvalidArgument, {"bad.safetensors", "duplicate", "'a'"});
  ExpectError(WriteSafetensors(path, {{"", DType::kF32, {1}}}, zeros), StatusCode::kInvalidArgument,
              {"bad.safetensors", "empty name"});
  ExpectError(WriteSafetensors(path, {{"neg", DType::kF32, {2, -1}}}, zeros), StatusCode::kInvalidArgument,
              {"bad.safetensors", "'neg'", "negative"});
  ExpectError(WriteSafetensors(path, {{"__metadata__", DType::kF32, {1}}}, zeros),
              StatusCode::kInvalidArgument, {"bad.safetensors", "reserved"});
  EXPECT_TRUE(ListDir(tmp.path()).empty());
}

TEST(SafetensorsTest, FillErrorPropagatesAndLeavesNoFile) {
  TempDir tmp;
  const std::string path = tmp.Sub("fail.safetensors");
  const TensorFiller fail_second = [](const TensorSpec& spec, uint8_t*) {
    return spec.name == "second" ? Status::Unavailable("source went away") : Status::Ok();
  };
  Status st = WriteSafetensors(path, {{"first", DType::kF32, {4}}, {"second", DType::kF32, {4}}}, fail_second);
  ExpectError(st, StatusCode::kUnavailable, {"fail.safetensors", "'second'", "source went away"});
  EXPECT_TRUE(ListDir(tmp.path()).empty());  // neither final file nor temp file
}

TEST(SafetensorsTest, ReadsReferenceWriterLayout) {
  // Byte layout as produced by the Rust/Python reference (safetensors.torch.save_file): compact JSON,
  // space padded to 8, metadata first.
  TempDir tmp;
  const std::string path = tmp.Sub("ref.safetensors");
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data = RandomBytes(3, 8);
  WriteAll(path, PackFile(header, data));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_NE((*file)->Find("w"), nullptr);
  EXPECT_EQ(ViewBytes(*(*file)->Find("w")), data);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
}

// ---------------------------------------------------------------------------------------------
// Handcrafted corrupt files: each names the file and, where there is one, the tensor.

class SafetensorsCorruptTest : public ::testing::Test {
 protected:
  // Writes `contents` to bad.safetensors and returns the Open status (must fail).
  Status OpenRaw(const std::string& contents) {
    WriteAll(path_, contents);
    auto file = SafetensorsFile::Open(path_);
    EXPECT_FALSE(file.ok());
    return file.ok() ? Status::Ok() : file.status();
  }
  Status OpenHeader(const std::string& header, const std::string& data) {
    return OpenRaw(PackFile(header, data));
  }

  TempDir tmp_;
  const std::string path_ = tmp_.Sub("bad.safetensors");
};

TEST_F(SafetensorsCorruptTest, ShorterThanEightBytes) {
  ExpectError(OpenRaw("\x05\x00\x00"), StatusCode::kCorruption, {"bad.safetensors", "shorter than"});
}

TEST_F(SafetensorsCorruptTest, HeaderLengthBeyondFile) {
  std::string raw = PackFile(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  raw[0] = static_cast<char>(0xff);
  raw[1] = static_cast<char>(0x7f);
  ExpectError(OpenRaw(raw), StatusCode::kCorruption, {"bad.safetensors", "header length"});
}

TEST_F(SafetensorsCorruptTest, TruncatedFile) {
  const std::vector<TensorSpec> specs = {{"a", DType::kBF16, {8}}, {"last.weight", DType::kF32, {16}}};
  const Payload payload = MakePayload(specs, 11);
  ASSERT_TRUE(WriteSafetensors(path_, specs, payload.Filler()).ok());
  std::string raw = ReadAll(path_);
  raw.resize(raw.size() - 5);  // cut the tail of the last tensor
  Status st = OpenRaw(raw);
  ExpectError(st, StatusCode::kCorruption, {"bad.safetensors", "'last.weight'", "truncated"});
}

TEST_F(SafetensorsCorruptTest, InvalidJson) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8",)", ""), StatusCode::kCorruption,
              {"bad.safetensors", "invalid JSON"});
}

TEST_F(SafetensorsCorruptTest, HeaderNotAnObject) {
  ExpectError(OpenHeader("[1,2,3]", ""), StatusCode::kCorruption, {"bad.safetensors", "not a JSON object"});
}

TEST_F(SafetensorsCorruptTest, EntryNotAnObject) {
  ExpectError(OpenHeader(R"({"t":[1,2]})", ""), StatusCode::kCorruption,
              {"bad.safetensors", "'t'", "not an object"});
}

TEST_F(SafetensorsCorruptTest, MissingFields) {
  ExpectError(OpenHeader(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", "x"), StatusCode::kCorruption,
              {"bad.safetensors", "'t'", "dtype"});
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8","data_offsets":[0,1]}})", "x"), StatusCode::kCorruption,
              {"bad.safetensors", "'t'", "shape"});
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8","shape":[1]}})", "x"), StatusCode::kCorruption,
              {"bad.safetensors", "'t'", "data_offsets"});
}

TEST_F(SafetensorsCorruptTest, UnknownDtype) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", "x"),
              StatusCode::kInvalidArgument, {"bad.safetensors", "'t'", "Q4_K"});
}

TEST_F(SafetensorsCorruptTest, NegativeShape) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}})", ""),
              StatusCode::kCorruption, {"bad.safetensors", "'t'", "negative"});
}

TEST_F(SafetensorsCorruptTest, OffsetsOutOfRange) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", "abcd"),
              StatusCode::kCorruption, {"bad.safetensors", "'t'", "beyond the data section"});
}

TEST_F(SafetensorsCorruptTest, NegativeOffsets) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "abcd"),
              StatusCode::kCorruption, {"bad.safetensors", "'t'", "data_offsets"});
}

TEST_F(SafetensorsCorruptTest, ReversedOffsets) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[3,1]}})", "abcd"),
              StatusCode::kCorruption, {"bad.safetensors", "'t'", "reversed"});
}

TEST_F(SafetensorsCorruptTest, SizeShapeMismatch) {
  // F32 [2] needs 8 bytes; the offsets give 4.
  ExpectError(OpenHeader(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcdefgh"),
              StatusCode::kCorruption, {"bad.safetensors", "'t'", "needs 8 bytes"});
}

TEST_F(SafetensorsCorruptTest, OverlappingTensors) {
  ExpectError(OpenHeader(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                         "abcdefgh"),
              StatusCode::kCorruption, {"bad.safetensors", "'a'", "'b'", "overlap"});
}

TEST_F(SafetensorsCorruptTest, DuplicateNamesInHeader) {
  ExpectError(OpenHeader(R"({"dup":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                         R"("dup":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                         "ab"),
              StatusCode::kCorruption, {"bad.safetensors", "duplicate", "'dup'"});
}

TEST_F(SafetensorsCorruptTest, MetadataValuesMustBeStrings) {
  ExpectError(OpenHeader(R"({"__metadata__":{"format":1}})", ""), StatusCode::kCorruption,
              {"bad.safetensors", "__metadata__", "format"});
}

// ---------------------------------------------------------------------------------------------
// Checkpoint directories.

class CheckpointTest : public ::testing::Test {
 protected:
  void WriteConfig() { WriteAll(tmp_.Sub("config.json"), R"({"model_type":"mixtral","num_local_experts":8})"); }

  // Opens the directory and checks every tensor of `specs` bit-exact against `payload`.
  void ExpectReadsBack(const std::vector<TensorSpec>& specs, const Payload& payload) {
    auto ckpt = Checkpoint::Open(tmp_.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ((*ckpt)->config().at("model_type"), "mixtral");
    std::vector<std::string> want;
    for (const auto& s : specs) want.push_back(s.name);
    std::sort(want.begin(), want.end());
    EXPECT_EQ((*ckpt)->names(), want);
    for (const auto& s : specs) {
      auto view = (*ckpt)->Find(s.name);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      EXPECT_EQ(view->spec.shape, s.shape);
      EXPECT_EQ(view->spec.dtype, s.dtype);
      EXPECT_EQ(ViewBytes(*view), payload.bytes.at(s.name)) << s.name;
    }
  }

  Status OpenStatus() {
    auto ckpt = Checkpoint::Open(tmp_.path());
    EXPECT_FALSE(ckpt.ok());
    return ckpt.ok() ? Status::Ok() : ckpt.status();
  }

  // Writes a small valid file holding U8 tensors `names` (4 bytes each) into `file`.
  void WriteU8File(const std::string& file, const std::vector<std::string>& names) {
    std::vector<TensorSpec> specs;
    for (const auto& n : names) specs.push_back({n, DType::kU8, {4}});
    ASSERT_TRUE(WriteSafetensors(tmp_.Sub(file), specs, MakePayload(specs, 5).Filler()).ok());
  }

  TempDir tmp_;
};

std::vector<TensorSpec> ExpertSpecs() {
  std::vector<TensorSpec> specs;
  for (int e = 0; e < 4; ++e)
    for (const char* w : {"w1", "w2", "w3"})
      specs.push_back({"model.layers.0.block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight",
                       DType::kBF16, {16, 8}});  // 256 bytes each
  specs.push_back({"model.norm.weight", DType::kF32, {16}});
  specs.push_back({"model.zero", DType::kF16, {0}});
  return specs;
}

TEST_F(CheckpointTest, SingleFileRoundTrip) {
  WriteConfig();
  const auto specs = ExpertSpecs();
  const Payload payload = MakePayload(specs, 100);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1 << 20, payload.Filler()).ok());
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"config.json", "model.safetensors"}));
  ExpectReadsBack(specs, payload);
}

TEST_F(CheckpointTest, ShardedRoundTrip) {
  WriteConfig();
  const auto specs = ExpertSpecs();  // 12 x 256 + 64 + 0 bytes
  const Payload payload = MakePayload(specs, 200);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1000, payload.Filler()).ok());
  // Greedy: 3 x 256 per shard -> 4 shards of experts, the norm (64 B) and the 0-size tensor join the last.
  EXPECT_EQ(ListDir(tmp_.path()),
            (std::vector<std::string>{"config.json", "model-00001-of-00004.safetensors",
                                      "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
                                      "model-00004-of-00004.safetensors", "model.safetensors.index.json"}));
  const auto index = nlohmann::json::parse(ReadAll(tmp_.Sub("model.safetensors.index.json")));
  EXPECT_EQ(index.at("metadata").at("total_size"), 12 * 256 + 64);
  EXPECT_EQ(index.at("weight_map").size(), specs.size());
  EXPECT_EQ(index.at("weight_map").at(specs[0].name), "model-00001-of-00004.safetensors");
  EXPECT_EQ(index.at("weight_map").at("model.norm.weight"), "model-00004-of-00004.safetensors");
  EXPECT_THAT(ReadAll(tmp_.Sub("model.safetensors.index.json")), HasSubstr("\n  \"metadata\""));
  ExpectReadsBack(specs, payload);
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ((*ckpt)->files().size(), 4u);
}

TEST_F(CheckpointTest, OversizeTensorGetsItsOwnShard) {
  WriteConfig();
  const std::vector<TensorSpec> specs = {{"small.a", DType::kU8, {10}},
                                         {"big", DType::kU8, {100}},
                                         {"small.b", DType::kU8, {10}}};
  const Payload payload = MakePayload(specs, 300);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 50, payload.Filler()).ok());
  const auto index = nlohmann::json::parse(ReadAll(tmp_.Sub("model.safetensors.index.json")));
  EXPECT_EQ(index.at("weight_map").at("small.a"), "model-00001-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("big"), "model-00002-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("small.b"), "model-00003-of-00003.safetensors");
  ExpectReadsBack(specs, payload);
}

TEST_F(CheckpointTest, RewriteRemovesStaleWeightFiles) {
  WriteConfig();
  const auto specs = ExpertSpecs();
  const Payload payload = MakePayload(specs, 400);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1 << 20, payload.Filler()).ok());
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1000, payload.Filler()).ok());
  EXPECT_FALSE(FileExists(tmp_.Sub("model.safetensors")));
  ExpectReadsBack(specs, payload);
  // Sharded -> fewer shards -> single file: old index and shards go.
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 2000, payload.Filler()).ok());
  EXPECT_FALSE(FileExists(tmp_.Sub("model-00004-of-00004.safetensors")));
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1 << 20, payload.Filler()).ok());
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"config.json", "model.safetensors"}));
  ExpectReadsBack(specs, payload);
}

TEST_F(CheckpointTest, WriteRejectsDuplicateAcrossShards) {
  const std::vector<TensorSpec> specs = {{"x", DType::kU8, {100}}, {"x", DType::kU8, {100}}};
  const Payload payload = MakePayload({specs[0]}, 1);
  ExpectError(WriteCheckpointWeights(tmp_.path(), specs, 100, payload.Filler()), StatusCode::kInvalidArgument,
              {"duplicate", "'x'"});
  EXPECT_TRUE(ListDir(tmp_.path()).empty());
}

TEST_F(CheckpointTest, FallsBackToAnySafetensorsFile) {
  WriteConfig();
  WriteU8File("consolidated.safetensors", {"tok_embeddings.weight", "norm.weight"});
  WriteU8File("extra.safetensors", {"output.weight"});
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"norm.weight", "output.weight", "tok_embeddings.weight"}));
  ASSERT_EQ((*ckpt)->files().size(), 2u);
  EXPECT_EQ((*ckpt)->files()[0]->path(), tmp_.Sub("consolidated.safetensors"));
}

TEST_F(CheckpointTest, FollowsSymlinksLikeTheHubCache) {
  // huggingface_hub snapshots are symlinks into ../blobs.
  WriteConfig();
  const std::string blobs = tmp_.Sub("blobs");
  ASSERT_TRUE(CreateDirectories(blobs).ok());
  const std::string snapshot = tmp_.Sub("snapshot");
  ASSERT_TRUE(CreateDirectories(snapshot).ok());
  WriteU8File("blobs/abc123", {"w"});
  ASSERT_EQ(::symlink("../blobs/abc123", (snapshot + "/model.safetensors").c_str()), 0);
  ASSERT_EQ(::symlink("../config.json", (snapshot + "/config.json").c_str()), 0);
  auto ckpt = Checkpoint::Open(snapshot);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"w"}));
}

TEST_F(CheckpointTest, MissingConfigIsNotFound) {
  WriteU8File("model.safetensors", {"w"});
  ExpectError(OpenStatus(), StatusCode::kNotFound, {"config.json"});
}

TEST_F(CheckpointTest, BadConfigIsCorruption) {
  WriteU8File("model.safetensors", {"w"});
  WriteAll(tmp_.Sub("config.json"), "{\"model_type\": ");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"config.json", "invalid JSON"});
  WriteAll(tmp_.Sub("config.json"), "[1]");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"config.json", "not a JSON object"});
}

TEST_F(CheckpointTest, NoWeightsIsNotFound) {
  WriteConfig();
  ExpectError(OpenStatus(), StatusCode::kNotFound, {"no safetensors weights in", tmp_.path()});
}

TEST_F(CheckpointTest, IndexNamingMissingShardIsNotFound) {
  WriteConfig();
  WriteU8File("model-00001-of-00002.safetensors", {"a"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
           R"("b":"model-00002-of-00002.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kNotFound,
              {"model-00002-of-00002.safetensors", "model.safetensors.index.json"});
}

TEST_F(CheckpointTest, IndexTensorAbsentFromShardIsCorruption) {
  WriteConfig();
  WriteU8File("model-00001-of-00001.safetensors", {"a"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"model-00001-of-00001.safetensors","ghost":"model-00001-of-00001.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption,
              {"'ghost'", "model-00001-of-00001.safetensors", "absent"});
}

TEST_F(CheckpointTest, IndexTensorInWrongShardIsCorruption) {
  WriteConfig();
  WriteU8File("s1.safetensors", {"a"});
  WriteU8File("s2.safetensors", {"b"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"s2.safetensors","b":"s2.safetensors","c":"s1.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"'a'", "s1.safetensors", "s2.safetensors"});
}

TEST_F(CheckpointTest, SameTensorInTwoShardsIsCorruption) {
  WriteConfig();
  WriteU8File("model-00001-of-00002.safetensors", {"a", "shared"});
  WriteU8File("model-00002-of-00002.safetensors", {"b", "shared"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors",)"
           R"("shared":"model-00001-of-00002.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption,
              {"'shared'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST_F(CheckpointTest, UnlistedShardTensorsAreIncluded) {
  WriteConfig();
  WriteU8File("model-00001-of-00001.safetensors", {"a", "unlisted"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"model-00001-of-00001.safetensors"}})");
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"a", "unlisted"}));
}

TEST_F(CheckpointTest, BadIndexIsCorruption) {
  WriteConfig();
  WriteU8File("model.safetensors", {"a"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"), R"({"weight_map": [)");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"model.safetensors.index.json", "invalid JSON"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"), R"({"metadata": {}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"model.safetensors.index.json", "weight_map"});
}

TEST_F(CheckpointTest, CorruptShardErrorNamesShard) {
  WriteConfig();
  WriteAll(tmp_.Sub("model.safetensors"), "abc");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"model.safetensors"});
}

TEST_F(CheckpointTest, FindMissingTensorIsNotFound) {
  WriteConfig();
  WriteU8File("model.safetensors", {"a"});
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto view = (*ckpt)->Find("model.layers.9.mlp.gate.weight");
  ASSERT_FALSE(view.ok());
  ExpectError(view.status(), StatusCode::kNotFound, {"'model.layers.9.mlp.gate.weight'", tmp_.path()});
}

}  // namespace
}  // namespace zipmoe
