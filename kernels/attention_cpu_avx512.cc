// SoftmaxValues's AVX-512 variant (kernels/attention_cpu.h). Compiled with -mavx512f -ffp-contract=off
// (kernels/CMakeLists.txt); called only after CPUID reports AVX-512 F/BW/VL (GemmIsaAvailable).
// 16 lanes; the values 8 vectors (128 columns) per pass.
#include <immintrin.h>

#include "kernels/attention_cpu_isa.h"
#include "kernels/attention_cpu_tile.h"

namespace zipmoe::kernels {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int64_t kLanes = 16;
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec LoadBf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec Set1(float x) { return _mm512_set1_ps(x); }
  static Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec Div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static Vec ZeroBelow(Vec x, float t, Vec y) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(t), _CMP_NLT_UQ), y);
  }
  static Vec Pow2(Vec n) {
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(e);
  }
};

}  // namespace

void SoftmaxValuesAvx512(const SoftmaxValuesArgs& a) { attention_tile::SoftmaxValues<Avx512, 8>(a); }
void SoftmaxValuesRowsAvx512(const SoftmaxValuesArgs* rows, int count) {
  attention_tile::SoftmaxValuesRows<Avx512, 8, 8, 2>(rows, count);
}

}  // namespace zipmoe::kernels
