// Internal to kernels/: the per-ISA entry points of Bf16Gemm (kernels/bf16_gemm.h), each defined in
// its own translation unit compiled with that ISA's flags. Call one only when GemmIsaAvailable says
// so; no validation (bf16_gemm.cc validates and dispatches).
#pragma once

#include "kernels/bf16_gemm.h"

namespace zipmoe::kernels {

void Bf16GemmAvx2(const GemmArgs& a);    // bf16_gemm_avx2.cc   (x86-64 builds)
void Bf16GemmAvx512(const GemmArgs& a);  // bf16_gemm_avx512.cc (x86-64 builds)
void Bf16GemmAvx512Bf16(const GemmArgs& a);  // bf16_gemm_avx512bf16.cc (x86-64 builds)
void Bf16GemmAmxBf16(const GemmArgs& a);  // bf16_gemm_amx.cc (x86-64 builds)
void Bf16GemmNeon(const GemmArgs& a);    // bf16_gemm_neon.cc   (AArch64 builds)
void Bf16GemmNeonBf16(const GemmArgs& a);  // bf16_gemm_neon_bf16.cc (AArch64 builds)

// The BF16 dot-product variants' activation split, x = hi + lo: hi[k] = bf16(x[k]) rounded to
// nearest even, lo[k] = bf16(x[k] - hi[k]), for k in [0, n). Defined in bf16_gemm.cc (compiled
// without ISA flags), shared by Bf16GemmBf16DotReference and the Arm BF16 variant so both split alike.
void SplitBf16Activations(const float* x, int64_t n, uint16_t* hi, uint16_t* lo);

}  // namespace zipmoe::kernels
