// GatedDeltaRecurrent's AVX-512 variant (kernels/gated_delta.h). Compiled with -mavx512f
// -ffp-contract=off (kernels/CMakeLists.txt); called only after CPUID reports AVX-512 F/BW/VL
// (GemmIsaAvailable). 16 lanes per vector, 4 vectors (64 columns, 32 KiB of state at dk = 128) per block.
#include <immintrin.h>

#include "kernels/gated_delta_isa.h"
#include "kernels/gated_delta_tile.h"

namespace zipmoe::kernels {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int64_t kLanes = 16;
  static constexpr int kBlock = 4;
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec Set1(float x) { return _mm512_set1_ps(x); }
  static Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
};

}  // namespace

void GatedDeltaRecurrentAvx512(const GatedDeltaArgs& a) { gated_delta_tile::Recurrent<Avx512>(a); }

}  // namespace zipmoe::kernels
