// SoftmaxValues's AVX2 variant (kernels/attention_cpu.h). Compiled with -mavx2 -ffp-contract=off
// (kernels/CMakeLists.txt); called only after CPUID reports AVX2 (GemmIsaAvailable). 8 lanes; the
// values 8 vectors (64 columns) per pass.
#include <immintrin.h>

#include "kernels/attention_cpu_isa.h"
#include "kernels/attention_cpu_tile.h"

namespace zipmoe::kernels {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int64_t kLanes = 8;
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec LoadBf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec Set1(float x) { return _mm256_set1_ps(x); }
  static Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec Div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static Vec ZeroBelow(Vec x, float t, Vec y) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(t), _CMP_LT_OQ), y);
  }
  static Vec Pow2(Vec n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(e);
  }
};

}  // namespace

void SoftmaxValuesAvx2(const SoftmaxValuesArgs& a) { attention_tile::SoftmaxValues<Avx2, 8>(a); }
void SoftmaxValuesRowsAvx2(const SoftmaxValuesArgs* rows, int count) {
  attention_tile::SoftmaxValuesRows<Avx2, 8, 4, 2>(rows, count);
}

}  // namespace zipmoe::kernels
