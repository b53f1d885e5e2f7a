// CPU fast path for BF16 recovery (kernels/recovery_cpu.cc, ZipMoE §3.3): every instruction-set
// variant compiled in and supported here, and RecoverBf16Cpu itself, must equal
// RecoverBf16Reference bit for bit, at every size and alignment, without touching memory outside
// [out, out + n).
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "kernels/recovery.h"
#include "tests/kernels/recovery_cases.h"

namespace zipmoe::kernels {
namespace {

using recovery_cases::ExpectedBf16;
using recovery_cases::GuardedBuffer;
using recovery_cases::Offsets;

// Marker for "call RecoverBf16Cpu (the dispatched best variant)" instead of a fixed ISA.
constexpr int kDispatched = -1;

struct Variant {
  int isa;  // a CpuRecoveryIsa value, or kDispatched
  std::string Name() const {
    return isa == kDispatched ? "dispatched" : CpuRecoveryIsaName(static_cast<CpuRecoveryIsa>(isa));
  }
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.Name(); }

class RecoveryCpuTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const int isa = GetParam().isa;
    if (isa != kDispatched && !CpuRecoveryIsaAvailable(static_cast<CpuRecoveryIsa>(isa))) {
      GTEST_SKIP() << GetParam().Name() << " is not compiled into this binary or not supported by this CPU";
    }
  }

  void Run(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
    if (GetParam().isa == kDispatched) {
      RecoverBf16Cpu(e, sm, out, n);
      return;
    }
    Status st = RecoverBf16CpuWithIsa(static_cast<CpuRecoveryIsa>(GetParam().isa), e, sm, out, n);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // Recovers n elements of `planes` at offsets `o` and compares with the reference and the guards.
  void CheckCase(const recovery_cases::RandomPlanes& planes, int64_t n, const Offsets& o, uint64_t seed) {
    SCOPED_TRACE("n=" + std::to_string(n) + " " + o.ToString());
    GuardedBuffer<uint8_t> e(n, o.e, seed), sm(n, o.sm, seed + 1);
    GuardedBuffer<uint16_t> out(n, o.out, seed + 2);
    std::copy(planes.e.begin(), planes.e.begin() + n, e.data());
    std::copy(planes.sm.begin(), planes.sm.begin() + n, sm.data());
    std::vector<uint16_t> want(n);
    RecoverBf16Reference(e.data(), sm.data(), want.data(), n);
    Run(e.data(), sm.data(), out.data(), n);
    const int64_t bad = recovery_cases::FirstMismatch(out.data(), want.data(), n);
  ASSERT_EQ(bad, -1) << "first mismatch: got 0x" << std::hex << out.data()[bad] << " want 0x" << want[bad];
    ASSERT_EQ(out.FirstClobberedGuard(), -1) << "wrote outside [out, out + n)";
  }
};

TEST_P(RecoveryCpuTest, AllPairsMatchReferenceAtEveryOutputOffset) {
  const recovery_cases::RandomPlanes planes = recovery_cases::MakeAllPairPlanes();
  for (int o = 0; o < 16; ++o) CheckCase(planes, 65536, {o, (o * 5) % 16, (o * 3) % 16}, 100 + o);
  // And against the formula written out, not only against the reference.
  std::vector<uint16_t> out(65536);
  Run(planes.e.data(), planes.sm.data(), out.data(), 65536);
  for (int i = 0; i < 65536; ++i) ASSERT_EQ(out[i], ExpectedBf16(planes.e[i], planes.sm[i])) << "pair " << i;
}

TEST_P(RecoveryCpuTest, EverySizeAndOffsetMatchesReference) {
  const int64_t max_n = recovery_cases::RecoverySizes().back();
  const recovery_cases::RandomPlanes planes = recovery_cases::MakeRandomPlanes(max_n, 7);
  for (int64_t n : recovery_cases::RecoverySizes()) {
    for (const Offsets& o : recovery_cases::RecoveryOffsets()) {
      CheckCase(planes, n, o, static_cast<uint64_t>(n) * 131 + o.e * 17 + o.sm * 5 + o.out);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(RecoveryCpuTest, ZeroLengthTouchesNothing) {
  GuardedBuffer<uint16_t> out(0, 3, 9);
  const uint8_t byte = 0x5a;
  Run(&byte, &byte, out.data(), 0);
  EXPECT_EQ(out.FirstClobberedGuard(), -1);
  Run(nullptr, nullptr, nullptr, 0);
}

INSTANTIATE_TEST_SUITE_P(AllVariants, RecoveryCpuTest,
                         ::testing::Values(Variant{static_cast<int>(CpuRecoveryIsa::kPortable)},
                                           Variant{static_cast<int>(CpuRecoveryIsa::kSse2)},
                                           Variant{static_cast<int>(CpuRecoveryIsa::kAvx2)},
                                           Variant{static_cast<int>(CpuRecoveryIsa::kNeon)}, Variant{kDispatched}),
                         [](const ::testing::TestParamInfo<Variant>& info) { return info.param.Name(); });

TEST(RecoveryCpuIsaTest, PortableIsAlwaysAvailableAndBestIsAvailable) {
  EXPECT_TRUE(CpuRecoveryIsaAvailable(CpuRecoveryIsa::kPortable));
  EXPECT_TRUE(CpuRecoveryIsaAvailable(BestCpuRecoveryIsa())) << CpuRecoveryIsaName(BestCpuRecoveryIsa());
#if defined(__x86_64__)
  // SSE2 is part of the x86-64 baseline, so the fast path is never the portable loop there.
  EXPECT_TRUE(CpuRecoveryIsaAvailable(CpuRecoveryIsa::kSse2));
  EXPECT_FALSE(CpuRecoveryIsaAvailable(CpuRecoveryIsa::kNeon));
  EXPECT_NE(BestCpuRecoveryIsa(), CpuRecoveryIsa::kPortable);
#endif
#if defined(__aarch64__)
  EXPECT_EQ(BestCpuRecoveryIsa(), CpuRecoveryIsa::kNeon);
#endif
}

TEST(RecoveryCpuIsaTest, Names) {
  EXPECT_STREQ(CpuRecoveryIsaName(CpuRecoveryIsa::kPortable), "portable");
  EXPECT_STREQ(CpuRecoveryIsaName(CpuRecoveryIsa::kSse2), "sse2");
  EXPECT_STREQ(CpuRecoveryIsaName(CpuRecoveryIsa::kAvx2), "avx2");
  EXPECT_STREQ(CpuRecoveryIsaName(CpuRecoveryIsa::kNeon), "neon");
  EXPECT_STREQ(CpuRecoveryIsaName(static_cast<CpuRecoveryIsa>(42)), "unknown");
}

TEST(RecoveryCpuIsaTest, WithIsaValidatesArguments) {
  uint8_t e = 0x7f, sm = 0;
  uint16_t out = 0;
  const CpuRecoveryIsa p = CpuRecoveryIsa::kPortable;
  EXPECT_EQ(RecoverBf16CpuWithIsa(p, nullptr, &sm, &out, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecoverBf16CpuWithIsa(p, &e, nullptr, &out, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecoverBf16CpuWithIsa(p, &e, &sm, nullptr, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecoverBf16CpuWithIsa(p, &e, &sm, &out, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(RecoverBf16CpuWithIsa(p, nullptr, nullptr, nullptr, 0).ok());
  EXPECT_EQ(RecoverBf16CpuWithIsa(static_cast<CpuRecoveryIsa>(42), &e, &sm, &out, 1).code(),
            StatusCode::kUnavailable);
  for (CpuRecoveryIsa isa : {CpuRecoveryIsa::kSse2, CpuRecoveryIsa::kAvx2, CpuRecoveryIsa::kNeon}) {
    if (CpuRecoveryIsaAvailable(isa)) continue;
    Status st = RecoverBf16CpuWithIsa(isa, &e, &sm, &out, 1);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << CpuRecoveryIsaName(isa);
    EXPECT_NE(st.message().find(CpuRecoveryIsaName(isa)), std::string::npos) << st.message();
  }
  ASSERT_TRUE(RecoverBf16CpuWithIsa(p, &e, &sm, &out, 1).ok());
  EXPECT_EQ(out, 0x3F80);  // 1.0
}

}  // namespace
}  // namespace zipmoe::kernels
