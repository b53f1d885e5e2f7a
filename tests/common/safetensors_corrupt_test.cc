// Tests for common/safetensors on handcrafted corrupt files: every header corruption path names the
// file and, where there is one, the tensor.
#include "common/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/common/safetensors_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;
using safetensors::test::Payload;
using safetensors::test::PackFile;
using safetensors::test::ExpectError;
using safetensors::test::MakePayload;

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

// MXFP4 is zipmoe's internal dtype (common/dtype.h): a file naming it is refused like any unknown dtype
// (its byte size is not a whole number per element), and the writer refuses it too.
TEST_F(SafetensorsCorruptTest, InternalMxfp4DtypeIsUnknownToSafetensors) {
  ExpectError(OpenHeader(R"({"t":{"dtype":"MXFP4","shape":[32],"data_offsets":[0,17]}})", std::string(17, 'x')),
              StatusCode::kInvalidArgument, {"bad.safetensors", "'t'", "MXFP4"});
  const Status st = WriteSafetensors(path_, {{"w", DType::kMXFP4, {1, 32}}}, [](const TensorSpec&, uint8_t*) {
    return Status::Ok();
  });
  ExpectError(st, StatusCode::kInvalidArgument, {"bad.safetensors", "'w'", "MXFP4 is not a safetensors dtype"});
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

}  // namespace
}  // namespace zipmoe
