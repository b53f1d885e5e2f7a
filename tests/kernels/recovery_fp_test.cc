// F32 and F16 recovery (kernels/recovery.h): the references against the formulas written out here,
// the CPU fast paths and the GPU kernels (vector and element paths) against the references, bit for
// bit, over every F16 pattern, F32 special values and random bits, and sizes around every group width.
// GPU cases skip without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

const int64_t kSizes[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 4095, (int64_t{1} << 20) + 5};

// Random planes: any byte in e and sm, so F16 exponents above 31 (masked) and every packed field occur.
struct Planes {
  std::vector<uint8_t> e, sm;
};
Planes RandomPlanes(DType dtype, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Planes p;
  p.e.resize(static_cast<size_t>(n));
  p.sm.resize(SmPlaneBytes(dtype, n));
  for (auto& b : p.e) b = static_cast<uint8_t>(rng());
  for (auto& b : p.sm) b = static_cast<uint8_t>(rng());
  if (dtype == DType::kF16)
    for (auto& b : p.e) b &= 0x1f;  // the split never writes more than 5 bits
  return p;
}

bool HaveDevice() { return BuiltWithCuda() && CudaDeviceCount() > 0; }

TEST(RecoveryFpTest, F32ReferenceMatchesFormula) {
  const int64_t n = 4099;
  const Planes p = RandomPlanes(DType::kF32, n, 1);
  std::vector<uint32_t> out(n);
  RecoverF32Reference(p.e.data(), p.sm.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t hi = p.sm[2 * n + i], lo = p.sm[2 * i] | p.sm[2 * i + 1] << 8;
    const uint32_t want = (hi >> 7) << 31 | static_cast<uint32_t>(p.e[i]) << 23 | (hi & 0x7f) << 16 | lo;
    ASSERT_EQ(out[i], want) << i;
  }
}

TEST(RecoveryFpTest, F16ReferenceRecoversAll65536Patterns) {
  // Planes built by hand from each pattern, independently of SplitF16.
  const int64_t n = 65536;
  std::vector<uint8_t> e(n), sm(SmPlaneBytes(DType::kF16, n), 0);
  for (int64_t i = 0; i < n; ++i) {
    e[i] = static_cast<uint8_t>((i >> 10) & 0x1f);
    sm[i] = static_cast<uint8_t>(i & 0xff);
    const uint32_t t = static_cast<uint32_t>((i >> 15) << 2 | ((i >> 8) & 3));
    const int64_t bit = 3 * (i % 8);
    uint8_t* group = &sm[n + 3 * (i / 8)];
    for (int b = 0; b < 3; ++b) group[(bit + b) / 8] |= static_cast<uint8_t>(((t >> b) & 1) << ((bit + b) % 8));
  }
  std::vector<uint16_t> out(n);
  RecoverF16Reference(e.data(), sm.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i) << "pattern " << i;
}

TEST(RecoveryFpTest, CpuFastPathsMatchReferenceAtEverySizeAndAlignment) {
  for (int64_t n : kSizes) {
    for (int offset : {0, 1, 2, 3, 5}) {  // planes and out shifted off their natural alignment
      const Planes p = RandomPlanes(DType::kF32, n, 10 + static_cast<uint64_t>(n));
      std::vector<uint8_t> e(p.e.size() + 8), sm(p.sm.size() + 8);
      std::copy(p.e.begin(), p.e.end(), e.begin() + offset);
      std::copy(p.sm.begin(), p.sm.end(), sm.begin() + offset);
      std::vector<uint32_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n) + 2, 0x5a5a5a5au);
      RecoverF32Reference(p.e.data(), p.sm.data(), want.data(), n);
      RecoverF32Cpu(e.data() + offset, sm.data() + offset, got.data() + offset % 2, n);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + offset % 2)) << "F32 n=" << n << " off " << offset;
      EXPECT_EQ(got[offset % 2 + n], 0x5a5a5a5au) << "wrote past the end";

      const Planes q = RandomPlanes(DType::kF16, n, 20 + static_cast<uint64_t>(n));
      std::vector<uint8_t> e16(q.e.size() + 8), sm16(q.sm.size() + 8);
      std::copy(q.e.begin(), q.e.end(), e16.begin() + offset);
      std::copy(q.sm.begin(), q.sm.end(), sm16.begin() + offset);
      std::vector<uint16_t> want16(static_cast<size_t>(n)), got16(static_cast<size_t>(n) + 2, 0x5a5a);
      RecoverF16Reference(q.e.data(), q.sm.data(), want16.data(), n);
      RecoverF16Cpu(e16.data() + offset, sm16.data() + offset, got16.data() + offset % 2, n);
      ASSERT_TRUE(std::equal(want16.begin(), want16.end(), got16.begin() + offset % 2))
          << "F16 n=" << n << " off " << offset;
      EXPECT_EQ(got16[offset % 2 + n], 0x5a5a) << "wrote past the end";
    }
  }
}

TEST(RecoveryFpTest, CpuF16FastPathRecoversAll65536Patterns) {
  std::vector<uint16_t> in(65536);
  for (int i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> e(in.size()), sm(SmPlaneBytes(DType::kF16, 65536));
  SplitF16(in.data(), 65536, e.data(), sm.data());
  std::vector<uint16_t> out(65536);
  RecoverF16Cpu(e.data(), sm.data(), out.data(), 65536);
  EXPECT_EQ(out, in);
}

TEST(RecoveryFpTest, VectorPathSelection) {
  alignas(64) static uint8_t buf[256];
  alignas(64) static uint32_t out32[16];
  alignas(64) static uint16_t out16[16];
  EXPECT_TRUE(RecoverF32VectorPathFits(buf, buf + 64, out32, 8));
  EXPECT_FALSE(RecoverF32VectorPathFits(buf + 1, buf + 64, out32, 8));
  EXPECT_FALSE(RecoverF32VectorPathFits(buf, buf + 64, out32, 7));  // hi plane at sm + 14: not 4-aligned
  EXPECT_FALSE(RecoverF32VectorPathFits(buf, buf + 64, out32 + 1, 8));
  EXPECT_TRUE(RecoverF16VectorPathFits(buf, buf + 64, out16));
  EXPECT_FALSE(RecoverF16VectorPathFits(buf + 4, buf + 64, out16));
  EXPECT_FALSE(RecoverF16VectorPathFits(buf, buf + 64, out16 + 4));
}

TEST(RecoveryFpTest, LaunchersValidateArgumentsOrReportNoCuda) {
  uint32_t out32[2];
  uint16_t out16[2];
  const uint8_t b[8] = {};
  if (!BuiltWithCuda()) {
    EXPECT_EQ(LaunchRecoverF32(b, b, out32, 2, nullptr).code(), StatusCode::kUnavailable);
    EXPECT_EQ(LaunchRecoverF16(b, b, out16, 2, nullptr).code(), StatusCode::kUnavailable);
    return;
  }
  EXPECT_EQ(LaunchRecoverF32(b, b, out32, -1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverF32(nullptr, b, out32, 2, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverF32(b, b, reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(out32) + 2), 1, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverF16(b, nullptr, out16, 2, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchRecoverF16(b, b, out16, 0, nullptr).ok());
}

class RecoveryFpGpuTest : public ::testing::TestWithParam<int> {};  // param: plane offset (0 vector, odd element)

TEST_P(RecoveryFpGpuTest, F32KernelMatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (int64_t n : kSizes) {
    const Planes p = RandomPlanes(DType::kF32, n, 30 + static_cast<uint64_t>(n));
    std::vector<uint32_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), 0xdeadbeefu);
    RecoverF32Reference(p.e.data(), p.sm.data(), want.data(), n);
    const Status st = RecoverF32OnDevice(p.e.data(), p.sm.data(), got.data(), n, GetParam());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(got, want) << "n=" << n << " offset " << GetParam();
  }
}

TEST_P(RecoveryFpGpuTest, F16KernelMatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (int64_t n : kSizes) {
    const Planes p = RandomPlanes(DType::kF16, n, 40 + static_cast<uint64_t>(n));
    std::vector<uint16_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), 0xbeef);
    RecoverF16Reference(p.e.data(), p.sm.data(), want.data(), n);
    const Status st = RecoverF16OnDevice(p.e.data(), p.sm.data(), got.data(), n, GetParam());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(got, want) << "n=" << n << " offset " << GetParam();
  }
}

TEST_P(RecoveryFpGpuTest, F16KernelRecoversAll65536Patterns) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::vector<uint16_t> in(65536);
  for (int i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> e(in.size()), sm(SmPlaneBytes(DType::kF16, 65536));
  SplitF16(in.data(), 65536, e.data(), sm.data());
  std::vector<uint16_t> out(65536);
  ASSERT_TRUE(RecoverF16OnDevice(e.data(), sm.data(), out.data(), 65536, GetParam()).ok());
  EXPECT_EQ(out, in);
}

// F8_E4M3: the fast CPU path and the device kernel against the one-value-at-a-time reference, at
// odd and even sizes and every start parity; every pattern round-trips.
TEST(RecoveryFpTest, F8E4M3CpuPathMatchesReferenceAndRoundTrips) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{8}, int64_t{257}, int64_t{4096 + 3}}) {
    std::vector<uint8_t> in(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 101 + 7) & 0xff);
    std::vector<uint8_t> e(in.size()), sm(SmPlaneBytes(DType::kF8E4M3, n)), want(in.size()), got(in.size(), 0x55);
    SplitF8E4M3(in.data(), n, e.data(), sm.data());
    RecoverF8E4M3Reference(e.data(), sm.data(), want.data(), n);
    EXPECT_EQ(want, in) << n;
    ASSERT_TRUE(RecoverCpu(DType::kF8E4M3, e.data(), sm.data(), got.data(), n).ok());
    EXPECT_EQ(got, in) << n;
  }
}

TEST_P(RecoveryFpGpuTest, F8E4M3KernelMatchesReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t n : {int64_t{1}, int64_t{8}, int64_t{255}, int64_t{256}, int64_t{1} << 20}) {
    std::vector<uint8_t> in(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + 3) & 0xff);
    std::vector<uint8_t> e(in.size()), sm(SmPlaneBytes(DType::kF8E4M3, n)), got(in.size(), 0x55);
    SplitF8E4M3(in.data(), n, e.data(), sm.data());
    const Status st = RecoverF8E4M3OnDevice(e.data(), sm.data(), got.data(), n, GetParam());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(got, in) << "n=" << n << " offset " << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, RecoveryFpGpuTest, ::testing::Values(0, 1, 4),
                         [](const auto& info) { return "offset" + std::to_string(info.param); });

}  // namespace
}  // namespace zipmoe::kernels
