// MXFP4 E-chunks (common/codec.h): the 2-bit exponent fields packed four per byte before the codec and
// unpacked after it, bit-exact for every codec and every count (multiples of 4 or not), the packed
// stream's layout, and the refusals: an exponent byte above 3 on the way in, non-zero unused fields or a
// wrong size on the way out.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "common/codec.h"

namespace zipmoe {
namespace {

std::vector<uint8_t> RandomFields(uint64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> e(count);
  for (uint8_t& v : e) v = static_cast<uint8_t>(rng() & 3u);
  return e;
}

TEST(CodecMxfp4Test, EChunksRoundTripForEveryCodecAndCount) {
  for (const Codec codec : {Codec::kNone, Codec::kZstd, Codec::kLz4}) {
    for (const uint64_t count : {0ull, 1ull, 2ull, 3ull, 4ull, 5ull, 31ull, 32ull, 33ull, 4099ull, 1ull << 20}) {
      const std::vector<uint8_t> e = RandomFields(count, count + 7);
      std::vector<uint8_t> stored;
      ASSERT_TRUE(CompressEChunk(DType::kMXFP4, {codec, 0}, e.data(), count, &stored).ok());
      EXPECT_EQ(EChunkStreamBytes(DType::kMXFP4, count), (count + 3) / 4);
      if (codec == Codec::kNone) {
        EXPECT_EQ(stored.size(), (count + 3) / 4);
      }
      std::vector<uint8_t> back(count + 1, 0xaa);  // one guard byte
      const Status st = DecompressEChunk(DType::kMXFP4, codec, stored.data(), stored.size(), back.data(), count);
      ASSERT_TRUE(st.ok()) << CodecName(codec) << " " << count << ": " << st.ToString();
      EXPECT_EQ(std::vector<uint8_t>(back.begin(), back.begin() + static_cast<int64_t>(count)), e)
          << CodecName(codec) << " " << count;
      EXPECT_EQ(back[count], 0xaa) << "wrote past count";
    }
  }
}

TEST(CodecMxfp4Test, PackedStreamLayoutIsFourFieldsPerByteLowFirst) {
  const std::vector<uint8_t> e = {1, 2, 3, 0, 3, 3};  // a full byte, then a partial one
  std::vector<uint8_t> stored;
  ASSERT_TRUE(CompressEChunk(DType::kMXFP4, {Codec::kNone, 0}, e.data(), e.size(), &stored).ok());
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0], 1 | 2 << 2 | 3 << 4 | 0 << 6);
  EXPECT_EQ(stored[1], 3 | 3 << 2);  // unused fields 0
}

TEST(CodecMxfp4Test, ExponentAboveThreeIsRefused) {
  std::vector<uint8_t> e = RandomFields(100, 1);
  e[57] = 4;
  std::vector<uint8_t> stored;
  const Status st = CompressEChunk(DType::kMXFP4, {Codec::kZstd, 0}, e.data(), e.size(), &stored);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("at value 57 of 100"), std::string::npos) << st.message();
}

TEST(CodecMxfp4Test, CorruptStreamsAreCorruption) {
  std::vector<uint8_t> out(8);
  // Seven values fill one byte and three fields of the next; the fourth field must be 0.
  const std::vector<uint8_t> bad_tail = {0xff, 0xff};
  Status st = DecompressEChunk(DType::kMXFP4, Codec::kNone, bad_tail.data(), bad_tail.size(), out.data(), 7);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("MXFP4"), std::string::npos) << st.message();
  const std::vector<uint8_t> good_tail = {0xff, 0x3f};
  EXPECT_TRUE(DecompressEChunk(DType::kMXFP4, Codec::kNone, good_tail.data(), 2, out.data(), 7).ok());
  for (int i = 0; i < 7; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 3) << i;
  // A stream of the wrong length (8 values need 2 bytes).
  st = DecompressEChunk(DType::kMXFP4, Codec::kNone, bad_tail.data(), 1, out.data(), 8);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  // A zstd stream for 16 values read as 32.
  const std::vector<uint8_t> e = RandomFields(16, 2);
  std::vector<uint8_t> stored;
  ASSERT_TRUE(CompressEChunk(DType::kMXFP4, {Codec::kZstd, 0}, e.data(), 16, &stored).ok());
  std::vector<uint8_t> big(32);
  EXPECT_EQ(DecompressEChunk(DType::kMXFP4, Codec::kZstd, stored.data(), stored.size(), big.data(), 32).code(),
            StatusCode::kCorruption);
}

TEST(CodecMxfp4Test, SplitPlanesSurviveTheCodecAndMerge) {
  // A tensor through the whole storage path: split, K = 4 E-chunks (three of fields, of uneven counts, and
  // the scales, U8: common/checkpoint/manifest.h EChunkDType), merge.
  const int64_t n = 32 * 37;
  std::mt19937_64 rng(5);
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, n));
  for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> e(EPlaneBytes(DType::kMXFP4, n)), sm(SmPlaneBytes(DType::kMXFP4, n));
  SplitMxfp4(raw.data(), n, e.data(), sm.data());
  std::vector<uint8_t> decoded(e.size(), 0xee);
  for (const auto& [offset, count] : EChunkRanges(DType::kMXFP4, n, 4)) {
    const DType chunk_dtype = offset >= n ? DType::kU8 : DType::kMXFP4;
    std::vector<uint8_t> stored;
    ASSERT_TRUE(
        CompressEChunk(chunk_dtype, {Codec::kZstd, 0}, e.data() + offset, static_cast<uint64_t>(count), &stored).ok());
    ASSERT_TRUE(DecompressEChunk(chunk_dtype, Codec::kZstd, stored.data(), stored.size(), decoded.data() + offset,
                                 static_cast<uint64_t>(count))
                    .ok());
  }
  EXPECT_EQ(decoded, e);
  std::vector<uint8_t> back(raw.size());
  MergeMxfp4(decoded.data(), sm.data(), n, back.data());
  EXPECT_EQ(back, raw);
}

TEST(CodecMxfp4Test, LowEntropyScalesCompressNearTheirEntropy) {
  // Block scales of real weights span a few powers of two: here 4 codes around 2^-5 (122) with
  // probabilities 1/2, 1/4, 1/8, 1/8 (1.75 bits). Their E-chunk (bytes, unpacked) must store them in
  // well under a byte each; the same bytes read as a packed MXFP4 field chunk would be refused (> 3).
  const uint64_t count = 1 << 16;
  std::mt19937_64 rng(11);
  std::vector<uint8_t> scales(count);
  for (uint8_t& s : scales) {
    const uint64_t r = rng() % 8;
    s = static_cast<uint8_t>(r < 4 ? 122 : r < 6 ? 121 : r < 7 ? 123 : 120);
  }
  uint64_t histogram[256] = {};
  AccumulateHistogram(scales.data(), static_cast<int64_t>(count), histogram);
  const double h = ShannonEntropyBits(histogram);
  EXPECT_NEAR(h, 1.75, 0.02);
  std::vector<uint8_t> stored;
  ASSERT_TRUE(CompressEChunk(DType::kU8, {Codec::kZstd, 0}, scales.data(), count, &stored).ok());
  const double bits = 8.0 * static_cast<double>(stored.size()) / static_cast<double>(count);
  EXPECT_LT(bits, h + 0.35) << "zstd stored " << bits << " bits a scale, entropy " << h;
  std::vector<uint8_t> back(count);
  ASSERT_TRUE(DecompressEChunk(DType::kU8, Codec::kZstd, stored.data(), stored.size(), back.data(), count).ok());
  EXPECT_EQ(back, scales);
  EXPECT_EQ(CompressEChunk(DType::kMXFP4, {Codec::kZstd, 0}, scales.data(), count, &stored).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zipmoe
