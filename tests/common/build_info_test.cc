#include "common/build_info.h"

#include <gtest/gtest.h>

#include <regex>

// Set by tests/CMakeLists.txt on this file: project(zipmoe VERSION ...) and whether the kernels
// were configured with CUDA (ZIPMOE_HAVE_CUDA).
#ifndef ZIPMOE_TEST_PROJECT_VERSION
#error "ZIPMOE_TEST_PROJECT_VERSION must be defined by tests/CMakeLists.txt"
#endif
#ifndef ZIPMOE_TEST_HAVE_CUDA
#error "ZIPMOE_TEST_HAVE_CUDA must be defined by tests/CMakeLists.txt"
#endif

namespace zipmoe {
namespace {

TEST(BuildInfoTest, VersionIsTheProjectVersion) {
  EXPECT_EQ(GetBuildInfo().version, ZIPMOE_TEST_PROJECT_VERSION);
  EXPECT_TRUE(std::regex_match(GetBuildInfo().version, std::regex(R"(\d+\.\d+\.\d+)"))) << GetBuildInfo().version;
}

TEST(BuildInfoTest, CommitIsAHashOrUnknown) {
  const std::string& commit = GetBuildInfo().commit;
  ASSERT_FALSE(commit.empty());
  // A short hash from git, "unknown" outside a checkout, or a -DZIPMOE_GIT_COMMIT override
  // (sanitised to [0-9A-Za-z._+-]).
  EXPECT_TRUE(std::regex_match(commit, std::regex(R"([0-9A-Za-z._+-]+)"))) << commit;
}

TEST(BuildInfoTest, CudaVersionIffBuiltWithCuda) {
  const std::string& cuda = GetBuildInfo().cuda;
  if (ZIPMOE_TEST_HAVE_CUDA) {
    EXPECT_TRUE(std::regex_match(cuda, std::regex(R"(\d+\.\d+(\.\d+)*)"))) << "'" << cuda << "'";
  } else {
    EXPECT_EQ(cuda, "");
  }
}

TEST(BuildInfoTest, StringNamesVersionCommitAndCuda) {
  const BuildInfo& info = GetBuildInfo();
  const std::string line = BuildInfoString();
  EXPECT_EQ(line.rfind("zipmoe " + info.version + " (commit " + info.commit, 0), 0u) << line;
  EXPECT_NE(line.find(info.cuda.empty() ? std::string("no CUDA") : "CUDA " + info.cuda), std::string::npos) << line;
}

}  // namespace
}  // namespace zipmoe
