// Tests for common/safetensors: write -> read round trips (bit-exact), zero-copy views, tensor order,
// the reference writer's layout, and write errors that leave no file. Corrupt files and checkpoint
// directories have files of their own.
#include "common/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "tests/common/safetensors_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;
using safetensors::test::RandomBytes;
using safetensors::test::Payload;
using safetensors::test::ViewBytes;
using safetensors::test::PackFile;
using safetensors::test::ListDir;
using safetensors::test::ExpectError;
using safetensors::test::MixedSpecs;
using safetensors::test::MakePayload;

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

}  // namespace
}  // namespace zipmoe
