// The Precompiled normalizer's charsmap reader (common/tokenizer/tokenizer_precompiled.h) on a hand-built
// Darts-clone double array with known answers, and its failure paths. The nmt_nfkc charsmap of a real
// SentencePiece model is checked against SentencePiece itself in tests/tokenizer_reference (ctest
// tokenizer_precompiled_reference).
#include "common/tokenizer/tokenizer_precompiled.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zipmoe::tokenizer {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int k = 0; k < 4; ++k) out->push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

// Keys "a" -> "b" and "ab" -> "c", laid out by hand: the root's offset 1 puts 'a' (0x61) at unit 0x60;
// its offset 1 puts its children around unit 0x61: the leaf (label 0) at 0x61, 'b' at 0x61 ^ 0x62 = 3,
// whose leaf is at 3 ^ 1 = 2. Leaves have bit 31 set and hold the replacement's byte offset.
std::string TwoKeyCharsMap() {
  std::vector<uint32_t> units(0x62, 0);
  units[0] = 1u << 10;                           // root: offset 1
  units[0x60] = 0x61u | (1u << 8) | (1u << 10);  // 'a', has a leaf, offset 1
  units[0x61] = (1u << 31) | 0u;                 // "a" -> offset 0 ("b")
  units[3] = 0x62u | (1u << 8) | (1u << 10);     // 'b' after 'a', has a leaf, offset 1
  units[2] = (1u << 31) | 2u;                    // "ab" -> offset 2 ("c")
  std::string bytes;
  PutU32(&bytes, static_cast<uint32_t>(units.size() * 4));
  for (uint32_t u : units) PutU32(&bytes, u);
  bytes += std::string("b\0c\0", 4);
  return bytes;
}

TEST(PrecompiledCharsMapTest, ShortestMatchingKeyGivesTheReplacement) {
  Result<PrecompiledCharsMap> map = PrecompiledCharsMap::Parse(TwoKeyCharsMap(), "t");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->Transform("a").value_or("<none>"), "b");
  EXPECT_EQ(map->Transform("ab").value_or("<none>"), "b") << "the shortest key wins, as in HF tokenizers";
  EXPECT_EQ(map->Transform("az").value_or("<none>"), "b");
  EXPECT_FALSE(map->Transform("b").has_value());
  EXPECT_FALSE(map->Transform("").has_value());
  EXPECT_FALSE(map->Transform(std::string("\0a", 2)).has_value()) << "a NUL ends the search";
}

TEST(PrecompiledCharsMapTest, NormalizeReplacesPerGraphemeAndKeepsTheRest) {
  Result<PrecompiledCharsMap> map = PrecompiledCharsMap::Parse(TwoKeyCharsMap(), "t");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->Normalize("xaby a"), "xbby b");
  EXPECT_EQ(map->Normalize(""), "");
  // "a" + a combining acute accent is one grapheme of 3 bytes: matched as a whole by its prefix "a".
  EXPECT_EQ(map->Normalize("a\xcc\x81!"), "b!");
  // Multi-byte characters without a rule pass through unchanged.
  EXPECT_EQ(map->Normalize("\xe4\xb8\xad a \xf0\x9f\x91\x8b"), "\xe4\xb8\xad b \xf0\x9f\x91\x8b");
}

TEST(PrecompiledCharsMapTest, Base64RoundTripAndBadInput) {
  const std::string raw = TwoKeyCharsMap();
  EXPECT_EQ(DecodeBase64("TWFu").value_or("?"), "Man");
  EXPECT_EQ(DecodeBase64("TWE=").value_or("?"), "Ma");
  EXPECT_EQ(DecodeBase64("TQ==").value_or("?"), "M");
  EXPECT_EQ(DecodeBase64("").value_or("?"), "");
  EXPECT_FALSE(DecodeBase64("TWF").has_value());
  EXPECT_FALSE(DecodeBase64("T=Fu").has_value());
  EXPECT_FALSE(DecodeBase64("TW=u").has_value());
  EXPECT_FALSE(DecodeBase64("TW u").has_value());
  EXPECT_FALSE(DecodeBase64("TQ==TWFu").has_value()) << "padding only at the end";
}

TEST(PrecompiledCharsMapTest, CorruptCharsMapsAreErrorsNamingTheField) {
  auto expect_corrupt = [](const std::string& bytes, const std::string& needle) {
    Result<PrecompiledCharsMap> map = PrecompiledCharsMap::Parse(bytes, "dir/tokenizer.json: normalizer");
    ASSERT_FALSE(map.ok()) << needle;
    EXPECT_EQ(map.status().code(), StatusCode::kCorruption);
    EXPECT_NE(map.status().message().find("dir/tokenizer.json: normalizer"), std::string::npos);
    EXPECT_NE(map.status().message().find(needle), std::string::npos) << map.status().ToString();
  };
  expect_corrupt("abc", "4-byte header");
  std::string bytes;
  PutU32(&bytes, 0);
  expect_corrupt(bytes, "trie size 0");
  bytes.clear();
  PutU32(&bytes, 6);
  bytes += std::string(8, '\0');
  expect_corrupt(bytes, "trie size 6");
  bytes.clear();
  PutU32(&bytes, 64);
  bytes += std::string(16, '\0');
  expect_corrupt(bytes, "trie size 64");
  std::string unterminated = TwoKeyCharsMap();
  unterminated.back() = 'x';
  expect_corrupt(unterminated, "do not end in NUL");
  Result<PrecompiledCharsMap> bad64 = PrecompiledCharsMap::ParseBase64("not base64!", "f");
  ASSERT_FALSE(bad64.ok());
  EXPECT_NE(bad64.status().message().find("not valid base64"), std::string::npos);
}

// A trie whose offsets run outside the array (a damaged but well-sized file) must not read out of
// bounds: lookups simply find nothing.
TEST(PrecompiledCharsMapTest, OffsetsOutsideTheTrieFindNothing) {
  std::string bytes;
  PutU32(&bytes, 8);
  PutU32(&bytes, 0xfffffc00u);  // root offset far outside
  PutU32(&bytes, 0);
  bytes += std::string("z\0", 2);
  Result<PrecompiledCharsMap> map = PrecompiledCharsMap::Parse(bytes, "t");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_FALSE(map->Transform("abc").has_value());
  EXPECT_EQ(map->Normalize("abc"), "abc");
}

}  // namespace
}  // namespace zipmoe::tokenizer
