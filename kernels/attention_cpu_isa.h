// Internal to kernels/: the per-ISA entry points of SoftmaxValues (kernels/attention_cpu.h), each
// defined in its own translation unit compiled with that ISA's flags. Call one only when
// AttentionIsaAvailable says so; no validation (attention_cpu.cc validates and dispatches).
#pragma once

#include "kernels/attention_cpu.h"

namespace zipmoe::kernels {

void SoftmaxValuesAvx2(const SoftmaxValuesArgs& a);    // attention_cpu_avx2.cc   (x86-64 builds)
void SoftmaxValuesAvx512(const SoftmaxValuesArgs& a);  // attention_cpu_avx512.cc (x86-64 builds)
void SoftmaxValuesNeon(const SoftmaxValuesArgs& a);    // attention_cpu_neon.cc   (AArch64 builds)
// SoftmaxValuesRows's variants, in the same translation units.
void SoftmaxValuesRowsAvx2(const SoftmaxValuesArgs* rows, int count);
void SoftmaxValuesRowsAvx512(const SoftmaxValuesArgs* rows, int count);
void SoftmaxValuesRowsNeon(const SoftmaxValuesArgs* rows, int count);

}  // namespace zipmoe::kernels
