// GatedDeltaRecurrent's AVX2 variant (kernels/gated_delta.h). Compiled with -mavx2 -ffp-contract=off
// (kernels/CMakeLists.txt); called only after CPUID reports AVX2 (GemmIsaAvailable). 8 lanes per vector,
// 4 vectors (32 columns) per block: 4 accumulators, the decay, k[i] and q[i] broadcasts and the loads
// fit the 16 ymm registers.
#include <immintrin.h>

#include "kernels/gated_delta_isa.h"
#include "kernels/gated_delta_tile.h"

namespace zipmoe::kernels {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int64_t kLanes = 8;
  static constexpr int kBlock = 4;
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec Set1(float x) { return _mm256_set1_ps(x); }
  static Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
};

}  // namespace

void GatedDeltaRecurrentAvx2(const GatedDeltaArgs& a) { gated_delta_tile::Recurrent<Avx2>(a); }

}  // namespace zipmoe::kernels
