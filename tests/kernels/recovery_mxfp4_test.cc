// MXFP4 recovery (kernels/recovery.h, issue 41): the reference against MergeMxfp4 and the raw tensor it
// was split from (every nibble in both positions, every scale byte, garbage above the 2 exponent bits);
// the CPU fast path and the CUDA kernels (vector and byte paths) against the reference, bit for bit, at
// sizes around each step width and plane alignments; the argument checks. GPU cases skip without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "common/dtype.h"
#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

const int64_t kSizes[] = {0, 32, 64, 96, 128, 32 * 33, 4096, (int64_t{1} << 20) + 32};

struct Planes {
  std::vector<uint8_t> raw, e, sm;
};

// A random MXFP4 tensor of n values and its planes (E: n fields, then the n/32 scales); `noisy_e` sets bits
// 7..2 of the n field bytes (ignored).
Planes RandomPlanes(int64_t n, uint64_t seed, bool noisy_e = false) {
  std::mt19937_64 rng(seed);
  Planes p;
  p.raw.resize(DTypeBytes(DType::kMXFP4, static_cast<uint64_t>(n)));
  for (uint8_t& b : p.raw) b = static_cast<uint8_t>(rng());
  p.e.resize(EPlaneBytes(DType::kMXFP4, n));
  p.sm.resize(SmPlaneBytes(DType::kMXFP4, n));
  SplitMxfp4(p.raw.data(), n, p.e.data(), p.sm.data());
  if (noisy_e)
    for (int64_t i = 0; i < n; ++i) {
      uint8_t& b = p.e[static_cast<size_t>(i)];
      b = static_cast<uint8_t>(b | (rng() & 0xfc));
    }
  return p;
}

bool HaveDevice() { return BuiltWithCuda() && CudaDeviceCount() > 0; }

TEST(RecoveryMxfp4Test, ReferenceRecoversEveryNibbleAndScale) {
  // 256 blocks: the nibble bytes run through every value in every position, block g has scale g.
  const int64_t n = 256 * 32;
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, n));
  for (int64_t j = 0; j < n / 2; ++j) raw[static_cast<size_t>(j)] = static_cast<uint8_t>(j * 5 + j / 256);
  for (int64_t g = 0; g < n / 32; ++g) raw[static_cast<size_t>(n / 2 + g)] = static_cast<uint8_t>(g);
  std::vector<uint8_t> e(EPlaneBytes(DType::kMXFP4, n)), sm(SmPlaneBytes(DType::kMXFP4, n)), out(raw.size(), 0x55);
  SplitMxfp4(raw.data(), n, e.data(), sm.data());
  RecoverMxfp4Reference(e.data(), sm.data(), out.data(), n);
  EXPECT_EQ(out, raw);
  std::fill(out.begin(), out.end(), 0x55);
  RecoverMxfp4Cpu(e.data(), sm.data(), out.data(), n);
  EXPECT_EQ(out, raw);
  // Bits above the 2-bit exponent field are ignored, as MergeMxfp4 ignores them.
  const Planes p = RandomPlanes(32 * 64, 3, /*noisy_e=*/true);
  std::vector<uint8_t> merged(p.raw.size()), ref(p.raw.size()), fast(p.raw.size());
  MergeMxfp4(p.e.data(), p.sm.data(), 32 * 64, merged.data());
  RecoverMxfp4Reference(p.e.data(), p.sm.data(), ref.data(), 32 * 64);
  RecoverMxfp4Cpu(p.e.data(), p.sm.data(), fast.data(), 32 * 64);
  EXPECT_EQ(merged, p.raw);
  EXPECT_EQ(ref, p.raw);
  EXPECT_EQ(fast, p.raw);
}

TEST(RecoveryMxfp4Test, CpuFastPathMatchesReferenceAtEverySizeAndAlignment) {
  for (const int64_t n : kSizes) {
    const Planes p = RandomPlanes(n, 10 + static_cast<uint64_t>(n));
    for (const int offset : {0, 1, 3, 5}) {  // planes and out off their natural alignment
      std::vector<uint8_t> e(p.e.size() + 8), sm(p.sm.size() + 8);
      std::copy(p.e.begin(), p.e.end(), e.begin() + offset);
      std::copy(p.sm.begin(), p.sm.end(), sm.begin() + offset);
      std::vector<uint8_t> want(p.raw.size()), got(p.raw.size() + 8, 0x5a);
      RecoverMxfp4Reference(p.e.data(), p.sm.data(), want.data(), n);
      ASSERT_EQ(want, p.raw) << n;
      ASSERT_TRUE(RecoverCpu(DType::kMXFP4, e.data() + offset, sm.data() + offset, got.data() + offset, n).ok());
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + offset)) << "n=" << n << " off " << offset;
      EXPECT_EQ(got[static_cast<size_t>(offset) + want.size()], 0x5a) << "wrote past the end";
      if (offset > 0) {
        EXPECT_EQ(got[static_cast<size_t>(offset) - 1], 0x5a) << "wrote before the start";
      }
    }
  }
}

TEST(RecoveryMxfp4Test, PartialBlocksAreRefused) {
  std::vector<uint8_t> e(64), sm(64), out(64, 0x77);
  const Status st = RecoverCpu(DType::kMXFP4, e.data(), sm.data(), out.data(), 48);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("n=48"), std::string::npos) << st.message();
  EXPECT_EQ(out, std::vector<uint8_t>(64, 0x77)) << "nothing written";
  EXPECT_TRUE(RecoverCpu(DType::kMXFP4, nullptr, nullptr, nullptr, 0).ok());
}

TEST(RecoveryMxfp4DeathTest, PartialBlocksAreABugInTheVoidEntryPoints) {
  std::vector<uint8_t> e(64), sm(64), out(64);
  EXPECT_DEATH(RecoverMxfp4Cpu(e.data(), sm.data(), out.data(), 40), "whole blocks of 32");
  EXPECT_DEATH(RecoverMxfp4Reference(e.data(), sm.data(), out.data(), 33), "whole blocks of 32");
}

TEST(RecoveryMxfp4Test, VectorPathSelection) {
  alignas(64) static uint8_t buf[256];
  EXPECT_TRUE(RecoverMxfp4VectorPathFits(buf, buf + 64, buf + 128));
  EXPECT_TRUE(RecoverMxfp4VectorPathFits(buf + 16, buf + 68, buf + 136));
  EXPECT_FALSE(RecoverMxfp4VectorPathFits(buf + 8, buf + 64, buf + 128));  // e not 16-aligned
  EXPECT_FALSE(RecoverMxfp4VectorPathFits(buf, buf + 66, buf + 128));      // sm not 4-aligned
  EXPECT_FALSE(RecoverMxfp4VectorPathFits(buf, buf + 64, buf + 132));      // out not 8-aligned
}

TEST(RecoveryMxfp4Test, LauncherValidatesArgumentsOrReportsNoCuda) {
  uint8_t b[64] = {};
  if (!BuiltWithCuda()) {
    EXPECT_EQ(LaunchRecoverMxfp4(b, b, b, 32, nullptr).code(), StatusCode::kUnavailable);
    EXPECT_EQ(RecoverMxfp4OnDevice(b, b, b, 32).code(), StatusCode::kUnavailable);
    return;
  }
  EXPECT_EQ(LaunchRecoverMxfp4(b, b, b, -32, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverMxfp4(nullptr, b, b, 32, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverMxfp4(b, b, b, 48, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchRecoverMxfp4(b, b, b, 0, nullptr).ok());
  EXPECT_EQ(RecoverMxfp4OnDevice(b, b, b, 16).code(), StatusCode::kInvalidArgument);
}

class RecoveryMxfp4GpuTest : public ::testing::TestWithParam<int> {};  // param: plane offset (0: vector path)

TEST_P(RecoveryMxfp4GpuTest, KernelMatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t n : kSizes) {
    const Planes p = RandomPlanes(n, 50 + static_cast<uint64_t>(n), /*noisy_e=*/n % 64 == 0);
    std::vector<uint8_t> want(p.raw.size()), got(p.raw.size(), 0x5a);
    RecoverMxfp4Reference(p.e.data(), p.sm.data(), want.data(), n);
    const Status st = RecoverMxfp4OnDevice(p.e.data(), p.sm.data(), got.data(), n, GetParam());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(got, want) << "n=" << n << " offset " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, RecoveryMxfp4GpuTest, ::testing::Values(0, 1, 4),
                         [](const auto& info) { return "offset" + std::to_string(info.param); });

}  // namespace
}  // namespace zipmoe::kernels
