// Internal to kernels/: the per-ISA entry points of GatedDeltaRecurrent (kernels/gated_delta.h), each
// defined in its own translation unit compiled with that ISA's flags. Call one only when
// GatedDeltaIsaAvailable says so; no validation (gated_delta.cc validates and dispatches).
#pragma once

#include "kernels/gated_delta.h"

namespace zipmoe::kernels {

void GatedDeltaRecurrentAvx2(const GatedDeltaArgs& a);    // gated_delta_avx2.cc   (x86-64 builds)
void GatedDeltaRecurrentAvx512(const GatedDeltaArgs& a);  // gated_delta_avx512.cc (x86-64 builds)
void GatedDeltaRecurrentNeon(const GatedDeltaArgs& a);    // gated_delta_neon.cc   (AArch64 builds)

}  // namespace zipmoe::kernels
