// CPU fast path for BF16 recovery (ZipMoE §3.3; the no-GPU counterpart of the recovery kernel).
//
// All variants work on bytes, not 16-bit lanes: for a vector of 16 (or 32) elements they build
//   lo = (e << 7 & 0x80) | (sm & 0x7f)   the low byte of each BF16 value
//   hi = (sm & 0x80) | (e >> 1 & 0x7f)   the high byte
// and interleave lo/hi bytes into little-endian uint16 (unpack on x86, vst2 on NEON). Loads and
// stores are unaligned; the last n % width elements go through the scalar formula.
#include <cstddef>
#include <string>

#include "kernels/recovery.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ZIPMOE_RECOVERY_X86_DISPATCH 1  // AVX2 via __attribute__((target)), picked by CPUID
#endif
#if defined(__ARM_NEON) || defined(__ARM_NEON__)
#include <arm_neon.h>
#endif

namespace zipmoe::kernels {
namespace {

// Fixed inner trip count: vectorised even under GCC's -O2 "very-cheap" cost model, which refuses
// loops whose trip count is not a known multiple of the vector width.
constexpr int64_t kPortableBlock = 16;

inline uint16_t RecoverOne(uint8_t e, uint8_t sm) {
  return static_cast<uint16_t>(((sm & 0x80u) << 8) | (static_cast<unsigned>(e) << 7) | (sm & 0x7fu));
}

// Elements [begin, n) one at a time (heads and tails of the vector loops).
void RecoverScalarRange(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint16_t* __restrict out,
                       int64_t begin, int64_t n) {
  for (int64_t i = begin; i < n; ++i) out[i] = RecoverOne(e[i], sm[i]);
}

#if defined(__SSE2__)  // used by the x86 variants only
// Elements to do one by one before out + i is `bytes`-aligned (split stores across cache lines cost
// more than split loads, so the vector loops align their stores); 0 for an odd out, clamped to n.
int64_t ElementsToAlignOut(const uint16_t* out, uintptr_t bytes, int64_t n) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(out);
  if (addr % 2 != 0) return 0;
  const auto head = static_cast<int64_t>((bytes - addr % bytes) % bytes / 2);
  return head < n ? head : n;
}
#endif

void RecoverPortable(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint16_t* __restrict out,
                     int64_t n) {
  int64_t i = 0;
  for (; i + kPortableBlock <= n; i += kPortableBlock) {
    for (int64_t j = 0; j < kPortableBlock; ++j) out[i + j] = RecoverOne(e[i + j], sm[i + j]);
  }
  RecoverScalarRange(e, sm, out, i, n);
}

#if defined(__SSE2__)
void RecoverSse2(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint16_t* __restrict out, int64_t n) {
  const __m128i m80 = _mm_set1_epi8(static_cast<char>(0x80));
  const __m128i m7f = _mm_set1_epi8(0x7f);
  int64_t i = ElementsToAlignOut(out, 16, n);
  RecoverScalarRange(e, sm, out, 0, i);
  for (; i + 16 <= n; i += 16) {
    const __m128i ev = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + i));
    const __m128i sv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + i));
    // 16-bit shifts move bits across byte boundaries; the byte masks drop exactly those bits.
    const __m128i lo = _mm_or_si128(_mm_and_si128(_mm_slli_epi16(ev, 7), m80), _mm_and_si128(sv, m7f));
    const __m128i hi = _mm_or_si128(_mm_and_si128(sv, m80), _mm_and_si128(_mm_srli_epi16(ev, 1), m7f));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_unpacklo_epi8(lo, hi));      // elements 0..7
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8), _mm_unpackhi_epi8(lo, hi));  // 8..15
  }
  RecoverScalarRange(e, sm, out, i, n);
}
#endif

#if defined(ZIPMOE_RECOVERY_X86_DISPATCH)
__attribute__((target("avx2"))) void RecoverAvx2(const uint8_t* __restrict e, const uint8_t* __restrict sm,
                                                 uint16_t* __restrict out, int64_t n) {
  const __m256i m80 = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i m7f = _mm256_set1_epi8(0x7f);
  int64_t i = ElementsToAlignOut(out, 32, n);
  RecoverScalarRange(e, sm, out, 0, i);
  for (; i + 32 <= n; i += 32) {
    const __m256i ev = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + i));
    const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm + i));
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(ev, 7), m80), _mm256_and_si256(sv, m7f));
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(sv, m80), _mm256_and_si256(_mm256_srli_epi16(ev, 1), m7f));
    // AVX2 unpacks work per 128-bit lane: a = elements 0..7 | 16..23, b = 8..15 | 24..31.
    const __m256i a = _mm256_unpacklo_epi8(lo, hi);
    const __m256i b = _mm256_unpackhi_epi8(lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute2x128_si256(a, b, 0x20));       // 0..15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16), _mm256_permute2x128_si256(a, b, 0x31));  // 16..31
  }
  RecoverScalarRange(e, sm, out, i, n);
}

bool DetectAvx2() {
#if defined(__AVX2__)
  return true;
#else
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");  // also checks that the OS saves YMM state
#endif
}

bool CpuHasAvx2() {
  static const bool has = DetectAvx2();  // thread-safe one-time initialisation
  return has;
}
#endif

#if defined(__ARM_NEON) || defined(__ARM_NEON__)
void RecoverNeon(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint16_t* __restrict out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint8x16_t ev = vld1q_u8(e + i);
    const uint8x16_t sv = vld1q_u8(sm + i);
    uint8x16x2_t lohi;
    lohi.val[0] = vsliq_n_u8(sv, ev, 7);  // (e << 7) | (sm & 0x7f): low bytes
    lohi.val[1] = vsriq_n_u8(sv, ev, 1);  // (sm & 0x80) | (e >> 1): high bytes
    vst2q_u8(reinterpret_cast<uint8_t*>(out + i), lohi);  // interleaved: lo0 hi0 lo1 hi1 ...
  }
  RecoverScalarRange(e, sm, out, i, n);
}
#endif

using RecoverFn = void (*)(const uint8_t*, const uint8_t*, uint16_t*, int64_t);

// The implementation of `isa`, or nullptr when it is not compiled in or the CPU lacks it.
RecoverFn FunctionFor(CpuRecoveryIsa isa) {
  switch (isa) {
    case CpuRecoveryIsa::kPortable:
      return &RecoverPortable;
    case CpuRecoveryIsa::kSse2:
#if defined(__SSE2__)
      return &RecoverSse2;
#else
      return nullptr;
#endif
    case CpuRecoveryIsa::kAvx2:
#if defined(ZIPMOE_RECOVERY_X86_DISPATCH)
      return CpuHasAvx2() ? &RecoverAvx2 : nullptr;
#else
      return nullptr;
#endif
    case CpuRecoveryIsa::kNeon:
#if defined(__ARM_NEON) || defined(__ARM_NEON__)
      return &RecoverNeon;
#else
      return nullptr;
#endif
  }
  return nullptr;
}

CpuRecoveryIsa DetectBestIsa() {
  for (CpuRecoveryIsa isa : {CpuRecoveryIsa::kAvx2, CpuRecoveryIsa::kNeon, CpuRecoveryIsa::kSse2}) {
    if (FunctionFor(isa) != nullptr) return isa;
  }
  return CpuRecoveryIsa::kPortable;
}

}  // namespace

const char* CpuRecoveryIsaName(CpuRecoveryIsa isa) {
  switch (isa) {
    case CpuRecoveryIsa::kPortable:
      return "portable";
    case CpuRecoveryIsa::kSse2:
      return "sse2";
    case CpuRecoveryIsa::kAvx2:
      return "avx2";
    case CpuRecoveryIsa::kNeon:
      return "neon";
  }
  return "unknown";
}

bool CpuRecoveryIsaAvailable(CpuRecoveryIsa isa) { return FunctionFor(isa) != nullptr; }

CpuRecoveryIsa BestCpuRecoveryIsa() {
  static const CpuRecoveryIsa best = DetectBestIsa();  // thread-safe one-time initialisation
  return best;
}

void RecoverBf16Cpu(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  if (n <= 0) return;
  static const RecoverFn fn = FunctionFor(BestCpuRecoveryIsa());
  fn(e, sm, out, n);
}

Status RecoverBf16CpuWithIsa(CpuRecoveryIsa isa, const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  if (n < 0) return Status::InvalidArgument("RecoverBf16CpuWithIsa: negative n=" + std::to_string(n));
  if (n > 0 && (e == nullptr || sm == nullptr || out == nullptr))
    return Status::InvalidArgument("RecoverBf16CpuWithIsa: null pointer with n=" + std::to_string(n));
  const RecoverFn fn = FunctionFor(isa);
  if (fn == nullptr) {
    return Status::Unavailable(std::string("RecoverBf16CpuWithIsa: ") + CpuRecoveryIsaName(isa) +
                               " is not compiled in or not supported by this CPU");
  }
  if (n > 0) fn(e, sm, out, n);
  return Status::Ok();
}

}  // namespace zipmoe::kernels
