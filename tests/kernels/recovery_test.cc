#include "kernels/recovery.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "tests/kernels/recovery_cases.h"

#ifdef ZIPMOE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace zipmoe::kernels {
namespace {

using recovery_cases::GuardedBuffer;
using recovery_cases::Offsets;

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
  uint16_t out2[2] = {};
  const auto odd = reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(out2) + 1);
  EXPECT_EQ(LaunchRecoverBf16(&e, &sm, odd, 1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecoverBf16OnDevice(&e, &sm, &out, -1).code(), StatusCode::kInvalidArgument);
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(RecoverBf16OnDevice(&e, &sm, &out, 1).code(), StatusCode::kUnavailable);
  }
}

TEST(RecoveryTest, BatchValidatesSegments) {
  uint8_t e[4] = {}, sm[4] = {};
  uint16_t out[4] = {};
  RecoverySegment ok{e, sm, out, 4};
  EXPECT_TRUE(ValidateRecoverySegments("f", &ok, 1).ok());
  EXPECT_TRUE(ValidateRecoverySegments("f", nullptr, 0).ok());
  const auto expect_invalid = [](const Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.ToString();
  };
  expect_invalid(ValidateRecoverySegments("f", nullptr, 1), "segments is null");
  expect_invalid(ValidateRecoverySegments("f", &ok, -1), "count=-1");
  std::vector<RecoverySegment> many(kMaxRecoverySegments + 1, ok);
  expect_invalid(ValidateRecoverySegments("f", many.data(), kMaxRecoverySegments + 1), "count=9");
  RecoverySegment two[2] = {ok, ok};
  two[1].n = -2;
  expect_invalid(ValidateRecoverySegments("f", two, 2), "segment 1: negative n=-2");
  two[1] = RecoverySegment{e, nullptr, out, 1};
  expect_invalid(ValidateRecoverySegments("f", two, 2), "segment 1: null");
  two[1] = RecoverySegment{nullptr, nullptr, nullptr, 0};  // nothing to do: no pointers needed
  EXPECT_TRUE(ValidateRecoverySegments("f", two, 2).ok());
  two[1] = RecoverySegment{e, sm, reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(out) + 1), 1};
  expect_invalid(ValidateRecoverySegments("f", two, 2), "segment 1: out is not 2-byte aligned");
  // The launcher validates first, with or without CUDA; a batch with nothing to do enqueues nothing.
  expect_invalid(LaunchRecoverBf16Batch(two, 2, nullptr), "LaunchRecoverBf16Batch: segment 1");
  const RecoverySegment empty[2] = {{nullptr, nullptr, nullptr, 0}, {e, sm, out, 0}};
  if (BuiltWithCuda()) {
    EXPECT_TRUE(LaunchRecoverBf16Batch(empty, 2, nullptr).ok());
  } else {
    EXPECT_EQ(LaunchRecoverBf16Batch(&ok, 1, nullptr).code(), StatusCode::kUnavailable);
  }
}

TEST(RecoveryTest, OnDeviceMatchesReferenceBitExact) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible (CudaDeviceCount() == 0); GPU kernel not run";
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

TEST(RecoveryTest, KernelPathSelectionFollowsAlignment) {
  // Fake addresses: SelectRecoveryKernelPath only does arithmetic on them.
  const auto at = [](uintptr_t a) { return reinterpret_cast<uint8_t*>(a); };
  const auto at16 = [](uintptr_t a) { return reinterpret_cast<uint16_t*>(a); };
  EXPECT_EQ(SelectRecoveryKernelPath(at(0x1000), at(0x2000), at16(0x3000)), RecoveryKernelPath::kVec16);
  // e = sm = 3 (mod 16): head of 13 elements; out + 26 must be 16-aligned, so out ≡ 6 (mod 16).
  EXPECT_EQ(SelectRecoveryKernelPath(at(0x1003), at(0x2003), at16(0x3006)), RecoveryKernelPath::kVec16);
  EXPECT_EQ(SelectRecoveryKernelPath(at(0x1003), at(0x2003), at16(0x300e)), RecoveryKernelPath::kVec4);
  EXPECT_EQ(SelectRecoveryKernelPath(at(0x1003), at(0x2007), at16(0x3006)), RecoveryKernelPath::kVec4);
  EXPECT_EQ(SelectRecoveryKernelPath(at(0x1003), at(0x2004), at16(0x3006)), RecoveryKernelPath::kScalar);
  EXPECT_EQ(SelectRecoveryKernelPath(at(0x1000), at(0x2000), at16(0x3002)), RecoveryKernelPath::kScalar);
  EXPECT_STREQ(RecoveryKernelPathName(RecoveryKernelPath::kVec16), "vec16");
  EXPECT_STREQ(RecoveryKernelPathName(RecoveryKernelPath::kVec4), "vec4");
  EXPECT_STREQ(RecoveryKernelPathName(RecoveryKernelPath::kScalar), "scalar");

  // The shared offset cases (from 64-byte-aligned bases, as the GPU tests lay them out) reach every
  // path, and every vec16 head length 0..15.
  int per_path[3] = {0, 0, 0};
  bool vec16_head[16] = {};
  for (const Offsets& o : recovery_cases::RecoveryOffsets()) {
    const RecoveryKernelPath path =
        SelectRecoveryKernelPath(at(0x10000 + o.e), at(0x20000 + o.sm), at16(0x30000 + 2 * o.out));
    ++per_path[static_cast<int>(path)];
    if (path == RecoveryKernelPath::kVec16) vec16_head[(16 - o.e) % 16] = true;
  }
  for (int p = 0; p < 3; ++p) EXPECT_GT(per_path[p], 0) << RecoveryKernelPathName(static_cast<RecoveryKernelPath>(p));
  for (int h = 0; h < 16; ++h) EXPECT_TRUE(vec16_head[h]) << "vec16 head " << h;
}

#ifdef ZIPMOE_HAVE_CUDA
// Runs LaunchRecoverBf16 on device copies of the guarded host buffers: cudaMalloc bases are
// 256-byte aligned, the host bases 64-byte aligned, so the device pointers take the same kernel path.
// The whole guarded out region travels both ways, so a device over-run shows in its guards.
void RecoverGuardedOnDevice(GuardedBuffer<uint8_t>& e, GuardedBuffer<uint8_t>& sm, GuardedBuffer<uint16_t>& out,
                            int64_t n) {
  uint8_t* d_e = nullptr;
  uint8_t* d_sm = nullptr;
  uint16_t* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_e, e.Total()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_sm, sm.Total()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, 2 * out.Total()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_e, e.base(), e.Total(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_sm, sm.base(), sm.Total(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d_out, out.base(), 2 * out.Total(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(SelectRecoveryKernelPath(d_e + e.Begin(), d_sm + sm.Begin(), d_out + out.Begin()),
            SelectRecoveryKernelPath(e.data(), sm.data(), out.data()));
  Status st = LaunchRecoverBf16(d_e + e.Begin(), d_sm + sm.Begin(), d_out + out.Begin(), n, nullptr);
  const cudaError_t sync = cudaDeviceSynchronize();
  const cudaError_t copy = cudaMemcpy(out.base(), d_out, 2 * out.Total(), cudaMemcpyDeviceToHost);
  cudaFree(d_e);
  cudaFree(d_sm);
  cudaFree(d_out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  ASSERT_EQ(copy, cudaSuccess) << cudaGetErrorString(copy);
}

void CheckDeviceCase(const recovery_cases::RandomPlanes& planes, int64_t n, const Offsets& o, uint64_t seed) {
  GuardedBuffer<uint8_t> e(n, o.e, seed), sm(n, o.sm, seed + 1);
  GuardedBuffer<uint16_t> out(n, o.out, seed + 2);
  std::copy(planes.e.begin(), planes.e.begin() + n, e.data());
  std::copy(planes.sm.begin(), planes.sm.begin() + n, sm.data());
  const std::string path = RecoveryKernelPathName(SelectRecoveryKernelPath(e.data(), sm.data(), out.data()));
  SCOPED_TRACE("n=" + std::to_string(n) + " " + o.ToString() + " path=" + path);
  std::vector<uint16_t> want(n);
  RecoverBf16Reference(e.data(), sm.data(), want.data(), n);
  RecoverGuardedOnDevice(e, sm, out, n);
  if (::testing::Test::HasFatalFailure()) return;
  const int64_t bad = recovery_cases::FirstMismatch(out.data(), want.data(), n);
  ASSERT_EQ(bad, -1) << "first mismatch: got 0x" << std::hex << out.data()[bad] << " want 0x" << want[bad];
  ASSERT_EQ(out.FirstClobberedGuard(), -1) << "kernel wrote outside [out, out + n)";
}

// LaunchRecoverBf16Batch on device copies of several guarded segments at once: vec16 segments of
// different sizes and heads share one launch, a vec4 and a scalar one get their own; each must equal
// the reference and leave its guards alone.
TEST(RecoveryTest, BatchMatchesReferenceOnEverySegment) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible (CudaDeviceCount() == 0); GPU kernel not run";
  const recovery_cases::RandomPlanes planes = recovery_cases::MakeRandomPlanes((1 << 21) + 1, 77);
  struct Case {
    int64_t n;
    Offsets o;
  };
  // (e, sm, out) element offsets: 0,0,0 and 5,5,5 are vec16 (heads 0 and 11), 0,4,0 vec4, 1,2,3 scalar.
  const std::vector<std::vector<Case>> batches = {
      {{1 << 21, {0, 0, 0}}, {1 << 21, {0, 0, 0}}, {(1 << 21) - 3, {0, 0, 0}}},     // an expert's three matrices
      {{100003, {5, 5, 5}}, {17, {0, 0, 0}}, {0, {0, 0, 0}}, {1 << 20, {5, 5, 5}}},  // sizes and heads differ
      {{4099, {0, 4, 0}}, {65536, {0, 0, 0}}, {777, {1, 2, 3}}, {15, {5, 5, 5}}},    // mixed paths
      {{1, {0, 0, 0}}, {2, {0, 0, 0}}, {3, {0, 0, 0}}, {4, {0, 0, 0}}, {5, {0, 0, 0}}, {6, {0, 0, 0}},
       {7, {0, 0, 0}}, {4097, {0, 0, 0}}},  // kMaxRecoverySegments small ones: heads and tails only
  };
  uint64_t seed = 900;
  for (size_t b = 0; b < batches.size(); ++b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    const std::vector<Case>& cases = batches[b];
    std::vector<std::unique_ptr<GuardedBuffer<uint8_t>>> es, sms;
    std::vector<std::unique_ptr<GuardedBuffer<uint16_t>>> outs;
    std::vector<void*> device;
    std::vector<RecoverySegment> segments;
    for (const Case& c : cases) {
      es.push_back(std::make_unique<GuardedBuffer<uint8_t>>(c.n, c.o.e, ++seed));
      sms.push_back(std::make_unique<GuardedBuffer<uint8_t>>(c.n, c.o.sm, ++seed));
      outs.push_back(std::make_unique<GuardedBuffer<uint16_t>>(c.n, c.o.out, ++seed));
      std::copy(planes.e.begin(), planes.e.begin() + c.n, es.back()->data());
      std::copy(planes.sm.begin() + 1, planes.sm.begin() + 1 + c.n, sms.back()->data());
      uint8_t* d_e = nullptr;
      uint8_t* d_sm = nullptr;
      uint16_t* d_out = nullptr;
      ASSERT_EQ(cudaMalloc(&d_e, es.back()->Total()), cudaSuccess);
      device.push_back(d_e);
      ASSERT_EQ(cudaMalloc(&d_sm, sms.back()->Total()), cudaSuccess);
      device.push_back(d_sm);
      ASSERT_EQ(cudaMalloc(&d_out, 2 * outs.back()->Total()), cudaSuccess);
      device.push_back(d_out);
      EXPECT_EQ(cudaMemcpy(d_e, es.back()->base(), es.back()->Total(), cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(d_sm, sms.back()->base(), sms.back()->Total(), cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(d_out, outs.back()->base(), 2 * outs.back()->Total(), cudaMemcpyHostToDevice), cudaSuccess);
      segments.push_back({d_e + es.back()->Begin(), d_sm + sms.back()->Begin(), d_out + outs.back()->Begin(), c.n});
    }
    int paths[3] = {0, 0, 0};
    for (const RecoverySegment& g : segments) ++paths[static_cast<int>(SelectRecoveryKernelPath(g.e, g.sm, g.out))];
    EXPECT_GE(paths[0], 2);                                   // every batch shares a launch
    if (b == 2) {  // and the mixed one has one of each other path
      EXPECT_TRUE(paths[1] == 1 && paths[2] == 1);
    }
    const Status st = LaunchRecoverBf16Batch(segments.data(), static_cast<int>(segments.size()), nullptr);
    const cudaError_t sync = cudaDeviceSynchronize();
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(cudaMemcpy(outs[i]->base(), device[3 * i + 2], 2 * outs[i]->Total(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    for (void* p : device) cudaFree(p);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
    for (size_t i = 0; i < cases.size(); ++i) {
      const int64_t n = cases[i].n;
      SCOPED_TRACE("segment " + std::to_string(i) + " n=" + std::to_string(n) + " " + cases[i].o.ToString());
      std::vector<uint16_t> want(static_cast<size_t>(n));
      RecoverBf16Reference(es[i]->data(), sms[i]->data(), want.data(), n);
      const int64_t bad = recovery_cases::FirstMismatch(outs[i]->data(), want.data(), n);
      ASSERT_EQ(bad, -1) << "first mismatch: got 0x" << std::hex << outs[i]->data()[bad] << " want 0x" << want[bad];
      ASSERT_EQ(outs[i]->FirstClobberedGuard(), -1) << "kernel wrote outside [out, out + n)";
    }
  }
}

TEST(RecoveryTest, LaunchAllPairsMatchReferenceOnEveryPath) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible (CudaDeviceCount() == 0); GPU kernel not run";
  const recovery_cases::RandomPlanes planes = recovery_cases::MakeAllPairPlanes();
  for (const Offsets& o : recovery_cases::RecoveryOffsetsForLargeN()) {
    CheckDeviceCase(planes, 65536, o, 300 + o.e);
    if (HasFatalFailure()) return;
  }
}

TEST(RecoveryTest, LaunchEverySizeAndOffsetMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible (CudaDeviceCount() == 0); GPU kernel not run";
  const int64_t max_n = recovery_cases::RecoverySizes().back();
  const recovery_cases::RandomPlanes planes = recovery_cases::MakeRandomPlanes(max_n, 41);
  for (int64_t n : recovery_cases::RecoverySizes()) {
    const bool large = n > 65536;
    for (const Offsets& o : large ? recovery_cases::RecoveryOffsetsForLargeN() : recovery_cases::RecoveryOffsets()) {
      CheckDeviceCase(planes, n, o, static_cast<uint64_t>(n) * 131 + o.e * 17 + o.sm * 5 + o.out);
      if (HasFatalFailure()) return;
    }
  }
}
#endif

}  // namespace
}  // namespace zipmoe::kernels
