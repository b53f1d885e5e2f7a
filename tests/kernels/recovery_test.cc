#include "kernels/recovery.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"

#ifdef ZIPMOE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace zipmoe::kernels {
namespace {

// Planes of n BF16 values: every one of the 65,536 patterns in shuffled order, repeated as needed.
struct Planes {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> e, sm;
};

Planes MakePlanes(int64_t n, uint64_t seed) {
  Planes p;
  p.bf16.resize(n);
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t i = 0; i < n; ++i) p.bf16[i] = all[i % 65536];
  p.e.resize(n);
  p.sm.resize(n);
  SplitBf16(p.bf16.data(), n, p.e.data(), p.sm.data());
  return p;
}

TEST(RecoveryTest, ReferenceRecoversAll65536Patterns) {
  std::vector<uint8_t> e(65536), sm(65536);
  std::vector<uint16_t> out(65536, 0);
  for (int i = 0; i < 65536; ++i) {
    // The inverse of the recovery formula, written out independently of SplitBf16.
    e[i] = static_cast<uint8_t>((i >> 7) & 0xff);
    sm[i] = static_cast<uint8_t>(((i >> 8) & 0x80) | (i & 0x7f));
  }
  RecoverBf16Reference(e.data(), sm.data(), out.data(), 65536);
  for (int i = 0; i < 65536; ++i) ASSERT_EQ(out[i], i) << "pattern " << i;
}

TEST(RecoveryTest, ReferenceKnownAnswers) {
  const uint8_t e[] = {0x7F, 0x80, 0xFF, 0xFF, 0x00, 0x00};
  const uint8_t sm[] = {0x00, 0x80, 0x00, 0x40, 0x01, 0x80};
  const uint16_t want[] = {0x3F80 /* 1.0 */, 0xC000 /* -2.0 */,      0x7F80 /* +Inf */,
                           0x7FC0 /* NaN */, 0x0001 /* subnormal */, 0x8000 /* -0 */};
  uint16_t out[6] = {};
  RecoverBf16Reference(e, sm, out, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], want[i]) << i;
  RecoverBf16Reference(nullptr, nullptr, nullptr, 0);  // n = 0 touches nothing
}

TEST(RecoveryTest, LaunchValidatesArguments) {
  uint8_t e = 0, sm = 0;
  uint16_t out = 0;
  if (!BuiltWithCuda()) {
    EXPECT_EQ(LaunchRecoverBf16(&e, &sm, &out, 1, nullptr).code(), StatusCode::kUnavailable);
    EXPECT_EQ(RecoverBf16OnDevice(&e, &sm, &out, 1).code(), StatusCode::kUnavailable);
    return;
  }
  // Validation precedes any CUDA call, so these hold with or without a device.
  EXPECT_EQ(LaunchRecoverBf16(nullptr, &sm, &out, 1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverBf16(&e, &sm, nullptr, 1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchRecoverBf16(&e, &sm, &out, -1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchRecoverBf16(nullptr, nullptr, nullptr, 0, nullptr).ok());
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(RecoverBf16OnDevice(&e, &sm, &out, 1).code(), StatusCode::kUnavailable);
  }
}

TEST(RecoveryTest, OnDeviceMatchesReferenceBitExact) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  for (int64_t n : {0, 1, 3, 4, 1000003}) {
    // Host-side offsets: the helper must not depend on host alignment.
    for (int64_t offset : {0, 1, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset));
      const Planes p = MakePlanes(n + offset, 20 + n);
      std::vector<uint16_t> want(n + offset, 0), got(n + offset, 0xdead);
      RecoverBf16Reference(p.e.data() + offset, p.sm.data() + offset, want.data() + offset, n);
      Status st = RecoverBf16OnDevice(p.e.data() + offset, p.sm.data() + offset, got.data() + offset, n);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[offset + i], want[offset + i]) << "i=" << i;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[offset + i], p.bf16[offset + i]) << "i=" << i;
    }
  }
}

#ifdef ZIPMOE_HAVE_CUDA
// Device pointers at every misalignment the kernel's fast path cares about (4-byte e/sm loads,
// 8-byte out stores), including mixed ones; the tail after the last full group is exercised by
// the odd sizes.
TEST(RecoveryTest, LaunchOnMisalignedDevicePointersMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  struct Offsets {
    int e, sm, out;  // out in uint16 elements
  };
  const Offsets cases[] = {{0, 0, 0}, {1, 0, 0}, {0, 3, 0}, {0, 0, 1}, {2, 1, 3}, {3, 3, 2}};
  for (int64_t n : {1, 3, 4, 5, 1000003}) {
    const Planes p = MakePlanes(n, 40 + n);
    std::vector<uint16_t> want(n);
    RecoverBf16Reference(p.e.data(), p.sm.data(), want.data(), n);
    for (const Offsets& o : cases) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offsets e/sm/out=" + std::to_string(o.e) + "/" + std::to_string(o.sm) +
                   "/" + std::to_string(o.out));
      uint8_t* d_e = nullptr;
      uint8_t* d_sm = nullptr;
      uint16_t* d_out = nullptr;
      ASSERT_EQ(cudaMalloc(&d_e, n + 8), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_sm, n + 8), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&d_out, 2 * (n + 8)), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_e + o.e, p.e.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d_sm + o.sm, p.sm.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
      Status st = LaunchRecoverBf16(d_e + o.e, d_sm + o.sm, d_out + o.out, n, nullptr);
      std::vector<uint16_t> got(n, 0xdead);
      const cudaError_t copy = cudaMemcpy(got.data(), d_out + o.out, 2 * n, cudaMemcpyDeviceToHost);
      cudaFree(d_e);
      cudaFree(d_sm);
      cudaFree(d_out);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(copy, cudaSuccess) << cudaGetErrorString(copy);
      ASSERT_EQ(got, want);
    }
  }
}
#endif

}  // namespace
}  // namespace zipmoe::kernels
