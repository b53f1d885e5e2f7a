// StopMatcher (services/api/stop_matcher.h): known answers for cutting at a stop string, holding back
// what could still become one, and never splitting a UTF-8 sequence.
#include "services/api/stop_matcher.h"

#include <gtest/gtest.h>

namespace zipmoe::api {
namespace {

TEST(StopMatcherTest, CutsBeforeTheFirstStopStringAcrossPieces) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_FALSE(m.Append("Hello E"));
  EXPECT_EQ(m.TakeSafe(false), "Hello") << "the last 2 bytes (longest stop string - 1) are held back";
  EXPECT_FALSE(m.Append("N"));
  EXPECT_EQ(m.TakeSafe(false), " ") << "\"EN\" is held: it may still become \"END\"";
  EXPECT_TRUE(m.Append("D and more"));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.text(), "Hello ");
  EXPECT_EQ(m.TakeSafe(false), "");
  EXPECT_TRUE(m.Append("ignored")) << "stays stopped";
  EXPECT_EQ(m.text(), "Hello ");
}

TEST(StopMatcherTest, TheEarliestOfSeveralStopStringsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_TRUE(m.Append("abcd"));
  EXPECT_EQ(m.text(), "a");
  EXPECT_EQ(m.TakeSafe(true), "a");
}

TEST(StopMatcherTest, HeldBackTextComesOutWhenItCannotMatchOrTheStreamEnds) {
  StopMatcher m({"xyz"});
  EXPECT_FALSE(m.Append("abxy"));
  EXPECT_EQ(m.TakeSafe(false), "ab");
  EXPECT_FALSE(m.Append("q"));
  EXPECT_EQ(m.TakeSafe(false), "x") << "\"yq\" is held (2 bytes), \"x\" can no longer start \"xyz\"";
  EXPECT_EQ(m.TakeSafe(true), "yq");
  EXPECT_EQ(m.TakeSafe(true), "");
}

TEST(StopMatcherTest, NoStopStringsEmitsEverythingAndEmptyOnesAreIgnored) {
  StopMatcher m({""});
  EXPECT_FALSE(m.Append("abc"));
  EXPECT_EQ(m.TakeSafe(false), "abc");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, TheSafeBoundaryNeverSplitsAUtf8Sequence) {
  StopMatcher m({"zz"});  // holds back 1 byte
  // "é" is C3 A9: holding back one byte would cut it, so the whole character is held.
  EXPECT_FALSE(m.Append("a\xc3\xa9"));
  EXPECT_EQ(m.TakeSafe(false), "a");
  EXPECT_EQ(m.TakeSafe(true), "\xc3\xa9");
}

// min_tokens: text appended without matching is not searched; the first matched piece finds a stop
// string that ends in it and starts in the held-back tail before it, not one wholly before.
TEST(StopMatcherTest, PiecesAppendedWithoutMatchingAreNotSearched) {
  StopMatcher m({"END", "xy"});  // holds back 2 bytes
  EXPECT_FALSE(m.Append("a END b", /*match=*/false));
  EXPECT_FALSE(m.Append("x", /*match=*/false));
  EXPECT_FALSE(m.Append("c")) << "\"END\" lies wholly before the matched piece";
  EXPECT_EQ(m.text(), "a END bxc");
  StopMatcher n({"END", "xy"});
  EXPECT_FALSE(n.Append("a b x", /*match=*/false));
  EXPECT_TRUE(n.Append("yz")) << "\"xy\" starts in the held-back tail";
  EXPECT_EQ(n.text(), "a b ");
}

}  // namespace
}  // namespace zipmoe::api
