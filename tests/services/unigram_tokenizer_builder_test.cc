// services/synth/unigram_tokenizer_builder.h: a vocabulary the corpus cannot fill (t5-base's 32128 ids,
// the switch_transformers mini preset) is completed exactly, every piece distinct, and the result loads
// and tokenizes as the corpus-only vocabulary does.
#include "services/synth/unigram_tokenizer_builder.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "services/synth/bpe_tokenizer_builder.h"

namespace zipmoe::synth {
namespace {

TEST(UnigramBuilder, FillsAT5BaseVocabularyExactlyWithDistinctPieces) {
  for (const int64_t vocab : {512, 32128}) {
    SCOPED_TRACE(vocab);
    Result<UnigramTokenizer> built = BuildUnigramTokenizer(vocab, EnglishCorpus());
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    const nlohmann::json j = nlohmann::json::parse(built->json_text);
    const nlohmann::json& pieces = j["model"]["vocab"];
    ASSERT_EQ(static_cast<int64_t>(pieces.size()), vocab);
    std::set<std::string> distinct;
    for (const nlohmann::json& p : pieces) distinct.insert(p[0].get<std::string>());
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), vocab);
    EXPECT_EQ(pieces[vocab - 1][0], "<extra_id_0>");

    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(j, nlohmann::json(), "synth unigram");
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    // Corpus words keep the pieces they get without the filler (its pieces score below them).
    Result<std::vector<int32_t>> ids = (*tok)->Encode("the quick brown fox");
    ASSERT_TRUE(ids.ok());
    for (int32_t id : *ids) EXPECT_NE(id, 2) << "<unk>";
    EXPECT_EQ((*tok)->Decode(*ids), "the quick brown fox");
  }
  // Beyond corpus + filler: refused, naming the numbers.
  Result<UnigramTokenizer> too_big = BuildUnigramTokenizer(2'000'000, EnglishCorpus());
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("vocab_size 2000000"), std::string::npos) << too_big.status().ToString();
}

}  // namespace
}  // namespace zipmoe::synth
