// services/cli/progress.h without a terminal: plain lines every 10 % and one at 100 %.
#include "services/cli/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace zipmoe::cli {
namespace {

// Everything written to `f` so far, split into lines.
std::vector<std::string> Lines(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::vector<std::string> out;
  std::string line;
  for (int ch = std::fgetc(f); ch != EOF; ch = std::fgetc(f)) {
    if (ch == '\n') {
      out.push_back(line);
      line.clear();
    } else {
      line.push_back(static_cast<char>(ch));
    }
  }
  if (!line.empty()) out.push_back(line);
  return out;
}

TEST(ProgressBarTest, PlainLinesEveryTenPercentAndAtTheEnd) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("compress", f, /*is_tty=*/false);
    for (int done = 0; done <= 250; ++done) bar.Update(done, 250, "tensors, 1.0 MB");
    bar.Update(250, 250, "tensors, 1.0 MB");  // a repeated 100 % prints nothing more
    bar.Finish();
  }
  const std::vector<std::string> lines = Lines(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 11u);  // 0 %, 10 %, ..., 100 %
  EXPECT_EQ(lines[0].rfind("compress: 0% 0/250 tensors, 1.0 MB, ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[4].rfind("compress: 40% 100/250 tensors, 1.0 MB, ", 0), 0u) << lines[4];
  EXPECT_EQ(lines[10].rfind("compress: 100% 250/250 tensors, 1.0 MB, ", 0), 0u) << lines[10];
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
    EXPECT_NE(line.find(" s elapsed"), std::string::npos) << line;
  }
}

TEST(ProgressBarTest, PlainFinalLineWhenStepsAreCoarse) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("verify", f, /*is_tty=*/false);
    bar.Update(0, 0);  // no total: nothing
    bar.Update(1, 3);
    bar.Update(3, 3);
  }
  const std::vector<std::string> lines = Lines(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("verify: 33% 1/3, ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("verify: 100% 3/3, ", 0), 0u) << lines[1];
}

TEST(ProgressBarTest, TerminalBarRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("compress", f, /*is_tty=*/true);
    bar.Update(1, 2);
    bar.Update(2, 2);
  }
  const std::vector<std::string> lines = Lines(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 1u);  // one line, ended by Finish() in the destructor
  EXPECT_NE(lines[0].find("\rcompress ["), std::string::npos);
  EXPECT_NE(lines[0].find("100% 2/2"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::cli
