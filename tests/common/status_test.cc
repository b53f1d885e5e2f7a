#include "common/status.h"

#include <gtest/gtest.h>

namespace zipmoe {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  ZM_ASSIGN_OR_RETURN(int h, Half(x));
  ZM_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, PropagatesFirstError) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status st = Quarter(6, &q);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.ToString(), "InvalidArgument: odd: 3");
  EXPECT_EQ(st.WithContext("f.bin").message(), "f.bin: odd: 3");
}

TEST(StatusTest, ResultFromOkStatusIsInternalError) {
  Result<int> r(Status::Ok());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

// Error messages quote a bounded prefix of an input (issue 37): short text as is, long text cut
// at a character boundary with "...".
TEST(StatusTest, ClipBoundsWhatAMessageQuotes) {
  EXPECT_EQ(Clip("short"), "short");
  EXPECT_EQ(Clip(std::string(80, 'a')), std::string(80, 'a'));
  EXPECT_EQ(Clip(std::string(5000000, 'a')), std::string(77, 'a') + "...");
  // "é" is two bytes: a cut inside it moves back to its start.
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "\xC3\xA9";
  const std::string clipped = Clip(accents, 10);
  EXPECT_EQ(clipped, "\xC3\xA9\xC3\xA9\xC3\xA9...");
}

TEST(StatusDeathTest, CheckAbortsWithFileAndLine) {
  EXPECT_DEATH({ ZM_CHECK(1 + 1 == 3) << "layer " << 7; }, "status_test.cc:[0-9]+: check failed: 1 \\+ 1 == 3 layer 7");
}

}  // namespace
}  // namespace zipmoe
