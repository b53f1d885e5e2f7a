// ParseDeviceMemoryBudget (services/pipeline/runtime_options.h): --device-memory-budget and the
// executor's device_memory_budget key.
#include <gtest/gtest.h>

#include "services/pipeline/runtime_options.h"

namespace zipmoe::runtime {
namespace {

TEST(DeviceMemoryBudgetTest, ParsesAutoSharesAndSizesAndNamesTheFlagOnErrors) {
  int64_t bytes = 0;
  double percent = 0;
  ASSERT_TRUE(ParseDeviceMemoryBudget("auto", "--device-memory-budget", &bytes, &percent).ok());
  EXPECT_EQ(bytes, -1);
  EXPECT_EQ(percent, 0);
  ASSERT_TRUE(ParseDeviceMemoryBudget("25%", "--device-memory-budget", &bytes, &percent).ok());
  EXPECT_EQ(bytes, -1);
  EXPECT_EQ(percent, 25);
  ASSERT_TRUE(ParseDeviceMemoryBudget("4GiB", "--device-memory-budget", &bytes, &percent).ok());
  EXPECT_EQ(bytes, int64_t{4} << 30);
  ASSERT_TRUE(ParseDeviceMemoryBudget("0", "--device-memory-budget", &bytes, &percent).ok());
  EXPECT_EQ(bytes, 0);
  for (const char* bad : {"150%", "0%", "x%", "lots"}) {
    const Status st = ParseDeviceMemoryBudget(bad, "--device-memory-budget", &bytes, &percent);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("--device-memory-budget"), std::string::npos) << st.ToString();
  }
}

}  // namespace
}  // namespace zipmoe::runtime
