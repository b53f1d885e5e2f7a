// Bf16Gemm: the scalar reference, argument checks and the run-time choice of ISA variant
// (kernels/bf16_gemm.h). The variants live in bf16_gemm_{avx2,avx512,neon}.cc.
#include "kernels/bf16_gemm.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "common/dtype.h"
#include "kernels/bf16_gemm_isa.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ZIPMOE_GEMM_X86 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#define ZIPMOE_GEMM_NEON 1
#include <sys/auxv.h>
#endif

namespace zipmoe::kernels {
namespace {

using GemmFn = void (*)(const GemmArgs&);

#if defined(ZIPMOE_GEMM_NEON)
constexpr unsigned long kHwcap2Bf16 = 1UL << 14;  // HWCAP2_BF16 (Linux arch/arm64/include/uapi/asm/hwcap.h)
#endif

float WeightAt(const GemmWeights& w, int64_t index) {
  if (w.f32 != nullptr && w.bf16 == nullptr) return w.f32[index];
  if (w.f8 != nullptr && w.bf16 == nullptr && w.f32 == nullptr)
    return F8E4M3ToFloat(w.f8[index]) * w.F8Scale(index / w.cols, index % w.cols);
  if (w.is_mxfp4()) {
    const int64_t r = index / w.cols, k = index % w.cols;
    const uint8_t nibble = static_cast<uint8_t>(w.mxfp4[index / 2] >> (4 * (index % 2)));
    return Fp4E2M1ToFloat(nibble) * E8M0ToFloat(w.mxfp4_scales[r * (w.cols / 32) + k / 32]);
  }
  uint32_t bits;
  if (w.planes()) {
    const uint32_t e = w.e[index], sm = w.sm[index];
    bits = (sm & 0x80u) << 24 | e << 23 | (sm & 0x7fu) << 16;
  } else {
    bits = static_cast<uint32_t>(w.bf16[index]) << 16;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

#if defined(ZIPMOE_GEMM_X86)
// F16C (CPUID.1:ECX bit 29; clang's __builtin_cpu_supports has no "f16c"): the AVX2 variant's FP8 decode of
// row tiles with many subnormal codes (vcvtph2ps). Every AVX2 CPU has it.
bool HasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

// AMX-TILE + AMX-BF16 (CPUID.(7,0):EDX bits 24 and 22), the tile state enabled by the OS (XCR0 bits 17 and
// 18), and Linux's per-process permission for the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA), Linux >= 5.16: Documentation/arch/x86/xstate.rst). Asked once per process.
bool AmxUsable() {
  static const bool usable = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) return false;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}
#endif

// True when the CPU (and OS) can run `isa`'s variant.
bool CpuSupports(GemmIsa isa) {
#if defined(ZIPMOE_GEMM_X86)
  __builtin_cpu_init();
  // AVX512VL serves the FP8 weights (256-bit byte compares); every CPU with AVX512BW that has shipped has it.
  if (isa == GemmIsa::kAvx2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
  if (isa == GemmIsa::kAvx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
  if (isa == GemmIsa::kAvx512Bf16)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("fma");
  if (isa == GemmIsa::kAmxBf16)  // the AVX-512 variant serves its F32/FP8/MXFP4 weights, AVX512_BF16 its split
    return CpuSupports(GemmIsa::kAvx512Bf16) && AmxUsable();
#endif
#if defined(ZIPMOE_GEMM_NEON)
  if (isa == GemmIsa::kNeon) return true;  // part of the AArch64 baseline
  if (isa == GemmIsa::kNeonBf16) return (getauxval(AT_HWCAP2) & kHwcap2Bf16) != 0;  // FEAT_BF16
#endif
  return isa == GemmIsa::kScalar;
}

GemmFn FunctionFor(GemmIsa isa) {
  if (!CpuSupports(isa)) return nullptr;
  switch (isa) {
    case GemmIsa::kScalar: return &Bf16GemmReference;
#if defined(ZIPMOE_GEMM_X86)
    case GemmIsa::kAvx2: return &Bf16GemmAvx2;
    case GemmIsa::kAvx512: return &Bf16GemmAvx512;
    case GemmIsa::kAvx512Bf16: return &Bf16GemmAvx512Bf16;
    case GemmIsa::kAmxBf16: return &Bf16GemmAmxBf16;
#endif
#if defined(ZIPMOE_GEMM_NEON)
    case GemmIsa::kNeon: return &Bf16GemmNeon;
    case GemmIsa::kNeonBf16: return &Bf16GemmNeonBf16;
#endif
    default: return nullptr;
  }
}

GemmIsa DetectBestIsa() {
  if (const char* env = std::getenv("ZIPMOE_GEMM_ISA"); env != nullptr && *env != '\0') {
    for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512, GemmIsa::kNeon, GemmIsa::kAvx512Bf16,
                        GemmIsa::kNeonBf16, GemmIsa::kAmxBf16}) {
      if (std::string(env) == GemmIsaName(isa) && FunctionFor(isa) != nullptr) return isa;
    }
  }
  // kAvx512Bf16 / kNeonBf16 only on request: measured no faster than kAvx512 on a Zen 5
  // (docs/architecture.md "CPU kernels"; the Arm one not yet measured on hardware), and they leave
  // the fp32 summation order.
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2, GemmIsa::kNeon}) {
    if (FunctionFor(isa) != nullptr) return isa;
  }
  return GemmIsa::kScalar;
}

}  // namespace

const char* GemmIsaName(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kScalar: return "scalar";
    case GemmIsa::kAvx2: return "avx2";
    case GemmIsa::kAvx512: return "avx512";
    case GemmIsa::kNeon: return "neon";
    case GemmIsa::kAvx512Bf16: return "avx512bf16";
    case GemmIsa::kNeonBf16: return "neonbf16";
    case GemmIsa::kAmxBf16: return "amxbf16";
  }
  return "unknown";
}

bool GemmIsaAvailable(GemmIsa isa) { return FunctionFor(isa) != nullptr; }

GemmIsa BestGemmIsa() {
  static const GemmIsa best = DetectBestIsa();  // thread-safe one-time initialisation
  return best;
}

GemmIsa BestFloatLaneIsa() {
  const GemmIsa best = BestGemmIsa();
  if (best == GemmIsa::kAvx512Bf16 || best == GemmIsa::kAmxBf16) return GemmIsa::kAvx512;
  if (best == GemmIsa::kNeonBf16) return GemmIsa::kNeon;
  return best;
}

const char* GemvPrefetchName(GemvPrefetch p) {
  switch (p) {
    case GemvPrefetch::kAuto: return "auto";
    case GemvPrefetch::kAhead: return "ahead";
    case GemvPrefetch::kHardware: return "hardware";
  }
  return "unknown";
}

namespace {

// This CPU's CPUID vendor string, display family and display model ("" and 0 where there is no CPUID).
struct CpuVendor {
  std::string vendor;
  unsigned family = 0;
  unsigned model = 0;
};
CpuVendor ThisCpuVendor() {
  CpuVendor v;
#if defined(ZIPMOE_GEMM_X86)
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[13];
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    vendor[12] = '\0';
    v.vendor = vendor;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
      const unsigned base_family = (eax >> 8) & 0xFu;
      v.family = base_family;
      if (base_family == 0xFu) v.family += (eax >> 20) & 0xFFu;
      v.model = (eax >> 4) & 0xFu;
      if (base_family == 0xFu || base_family == 0x6u) v.model |= ((eax >> 16) & 0xFu) << 4;
    }
  }
#endif
  return v;
}

// This CPU's default (bf16_gemm.h DefaultGemvPrefetchFor).
GemvPrefetch DefaultGemvPrefetch() {
#if defined(ZIPMOE_GEMM_X86)
  const CpuVendor cpu = ThisCpuVendor();
  if (!cpu.vendor.empty()) return DefaultGemvPrefetchFor(cpu.vendor, cpu.family, cpu.model);
#endif
  return GemvPrefetch::kAhead;
}

// This CPU's default (bf16_gemm.h DefaultF8TileCheckFor).
F8TileCheck DefaultF8TileCheck() {
#if defined(ZIPMOE_GEMM_X86)
  const CpuVendor cpu = ThisCpuVendor();
  if (!cpu.vendor.empty()) return DefaultF8TileCheckFor(cpu.vendor);
#endif
  return F8TileCheck::kScan;
}

// A scheme named by environment variable `var` (one of the two `choices`, by `name`), else `fallback()`; an
// unknown value is reported once on stderr and the fallback used.
template <class Scheme, class Fallback>
Scheme SchemeFromEnvironment(const char* var, const Scheme (&choices)[2], const char* (*name)(Scheme),
                             const Fallback& fallback) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == '\0') return fallback();
  for (const Scheme c : choices) {
    if (std::string(env) == name(c)) return c;
  }
  const Scheme chosen = fallback();
  std::fprintf(stderr, "zipmoe: %s=%s is neither \"%s\" nor \"%s\"; using \"%s\"\n", var, env, name(choices[0]),
               name(choices[1]), name(chosen));
  return chosen;
}

F8TileCheck DetectF8TileCheck() {
  return SchemeFromEnvironment("ZIPMOE_F8_TILE_CHECK", {F8TileCheck::kScan, F8TileCheck::kFused}, &F8TileCheckName,
                               DefaultF8TileCheck);
}

GemvPrefetch DetectGemvPrefetch() {
  return SchemeFromEnvironment("ZIPMOE_GEMV_PREFETCH", {GemvPrefetch::kAhead, GemvPrefetch::kHardware},
                               &GemvPrefetchName, DefaultGemvPrefetch);
}

}  // namespace

GemvPrefetch DefaultGemvPrefetchFor(const std::string& vendor, unsigned family, unsigned model) {
  if (vendor != "AuthenticAMD" || family < 0x19) return GemvPrefetch::kAhead;
  // Family 0x19 is Zen 3 (models 0x00-0x0F: Milan; 0x20-0x5F: Vermeer, Rembrandt, Cezanne) and Zen 4 (0x10-0x1F:
  // Genoa; 0x60-0x7F: Raphael, Phoenix; 0xA0-0xAF: Bergamo, Siena).
  const bool zen3 = family == 0x19 && (model < 0x10 || (model >= 0x20 && model < 0x60));
  return zen3 ? GemvPrefetch::kAhead : GemvPrefetch::kHardware;
}

GemvPrefetch ActiveGemvPrefetch() {
  static const GemvPrefetch active = DetectGemvPrefetch();  // thread-safe one-time initialisation
  return active;
}

const char* F8TileCheckName(F8TileCheck c) {
  switch (c) {
    case F8TileCheck::kAuto: return "auto";
    case F8TileCheck::kScan: return "scan";
    case F8TileCheck::kFused: return "fused";
  }
  return "unknown";
}

F8TileCheck DefaultF8TileCheckFor(const std::string& vendor) {
  if (vendor == "AuthenticAMD" || vendor == "HygonGenuine") return F8TileCheck::kFused;
  return F8TileCheck::kScan;
}

F8TileCheck ActiveF8TileCheck() {
  static const F8TileCheck active = DetectF8TileCheck();  // thread-safe one-time initialisation
  return active;
}

int64_t GemmRowQuantum() { return BestGemmIsa() == GemmIsa::kAmxBf16 ? 64 : 4; }

Status ValidateGemmArgs(const GemmArgs& a) {
  const GemmWeights& w = a.w;
  if (w.rows < 0 || w.cols < 0 || a.n < 0)
    return Status::InvalidArgument(
        fmt::format("Bf16Gemm: negative size (rows {}, cols {}, n {})", w.rows, w.cols, a.n));
  if (a.row_begin < 0 || a.row_end > w.rows || a.row_begin > a.row_end)
    return Status::InvalidArgument(
        fmt::format("Bf16Gemm: row range [{}, {}) is outside [0, {})", a.row_begin, a.row_end, w.rows));
  if (a.ldx < w.cols) return Status::InvalidArgument(fmt::format("Bf16Gemm: ldx {} < cols {}", a.ldx, w.cols));
  if (a.ldy < w.rows) return Status::InvalidArgument(fmt::format("Bf16Gemm: ldy {} < rows {}", a.ldy, w.rows));
  if (a.prefetch != GemvPrefetch::kAuto && a.prefetch != GemvPrefetch::kAhead && a.prefetch != GemvPrefetch::kHardware)
    return Status::InvalidArgument(
        fmt::format("Bf16Gemm: prefetch {} is not a GemvPrefetch value", static_cast<int>(a.prefetch)));
  if (a.f8_check != F8TileCheck::kAuto && a.f8_check != F8TileCheck::kScan && a.f8_check != F8TileCheck::kFused)
    return Status::InvalidArgument(
        fmt::format("Bf16Gemm: f8_check {} is not an F8TileCheck value", static_cast<int>(a.f8_check)));
  if (a.n == 0 || a.row_begin == a.row_end) return Status::Ok();
  if (a.y == nullptr) return Status::InvalidArgument("Bf16Gemm: y is null");
  if (w.cols == 0) return Status::Ok();
  if (a.x == nullptr) return Status::InvalidArgument("Bf16Gemm: x is null");
  if (w.planes() && (w.e == nullptr || w.sm == nullptr))
    return Status::InvalidArgument(
        "Bf16Gemm: weights have neither BF16, F32, FP8 nor MXFP4 data nor both E and SM planes");
  if (w.is_mxfp4() && (w.mxfp4_scales == nullptr || w.cols % 32 != 0))
    return Status::InvalidArgument(
        fmt::format("Bf16Gemm: MXFP4 weights need mxfp4_scales and cols a multiple of 32 (got cols {}{})", w.cols,
                    w.mxfp4_scales == nullptr ? ", no scales" : ""));
  if (w.f8 != nullptr && w.bf16 == nullptr && w.f32 == nullptr &&
      (w.f8_scale == nullptr || w.block_rows <= 0 || w.block_cols <= 0 || w.block_cols % 16 != 0))
    return Status::InvalidArgument(fmt::format(
        "Bf16Gemm: FP8 weights need f8_scale and block sizes > 0 with block_cols a multiple of 16 (got {} x {}{})",
        w.block_rows, w.block_cols, w.f8_scale == nullptr ? ", no scales" : ""));
  return Status::Ok();
}

namespace {

// The end of one output of both references: the 16 lanes reduced by the tree of bf16_gemm.h, the
// columns [from, cols) with fp32 FMAs on x, the bias; written to y.
void FinishOutput(const GemmArgs& a, float* lane, int64_t t, int64_t r, int64_t from) {
  const int64_t row = r * a.w.cols;
  const float* x = a.x + t * a.ldx;
  for (int width = 8; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] = lane[j] + lane[j + width];
  }
  float s = lane[0];
  for (int64_t k = from; k < a.w.cols; ++k) s = std::fma(WeightAt(a.w, row + k), x[k], s);
  if (a.bias != nullptr) s += a.bias[r];
  a.y[t * a.ldy + r] = s;
}

}  // namespace

void Bf16GemmReference(const GemmArgs& a) {
  const int64_t cols = a.w.cols, kb = cols / 16;
  for (int64_t t = 0; t < a.n; ++t) {
    const float* x = a.x + t * a.ldx;
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const int64_t row = r * cols;
      float chain[2][16] = {};  // block b into chain (b / kGemmChainGroupBlocks) % 2
      for (int64_t b = 0; b < kb; ++b) {
        float* lane = chain[(b / kGemmChainGroupBlocks) % 2];
        for (int j = 0; j < 16; ++j) lane[j] = std::fma(WeightAt(a.w, row + 16 * b + j), x[16 * b + j], lane[j]);
      }
      float lane[16];
      for (int j = 0; j < 16; ++j) lane[j] = chain[0][j] + chain[1][j];
      FinishOutput(a, lane, t, r, 16 * kb);
    }
  }
}

void SplitBf16Activations(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  for (int64_t k = 0; k < n; ++k) {
    hi[k] = FloatToBf16(x[k]);
    lo[k] = FloatToBf16(x[k] - Bf16ToFloat(hi[k]));
  }
}

void Bf16GemmBf16DotReference(const GemmArgs& a) {
  if (a.w.bf16 == nullptr && !a.w.planes()) {  // F32, FP8 or MXFP4 weights
    Bf16GemmReference(a);
    return;
  }
  const int64_t cols = a.w.cols, kb = cols / 32;
  for (int64_t t = 0; t < a.n; ++t) {
    const float* x = a.x + t * a.ldx;
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const int64_t row = r * cols;
      float lane[16] = {};
      for (int64_t b = 0; b < kb; ++b) {
        uint16_t hi[32], lo[32];
        SplitBf16Activations(x + 32 * b, 32, hi, lo);
        for (const uint16_t* h : {hi, lo}) {
          for (int i = 0; i < 16; ++i) {
            lane[i] += WeightAt(a.w, row + 32 * b + 2 * i + 1) * Bf16ToFloat(h[2 * i + 1]);
            lane[i] += WeightAt(a.w, row + 32 * b + 2 * i) * Bf16ToFloat(h[2 * i]);
          }
        }
      }
      FinishOutput(a, lane, t, r, 32 * kb);
    }
  }
}

void Bf16GemmAmxReference(const GemmArgs& a) {
  if (a.w.bf16 == nullptr && !a.w.planes()) {  // F32, FP8 or MXFP4 weights
    Bf16GemmReference(a);
    return;
  }
  const int64_t cols = a.w.cols, kb = cols / 32;
  for (int64_t t = 0; t < a.n; ++t) {
    const float* x = a.x + t * a.ldx;
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const int64_t row = r * cols;
      float s = 0.0f;
      for (int64_t b = 0; b < kb; ++b) {
        uint16_t hi[32], lo[32];
        SplitBf16Activations(x + 32 * b, 32, hi, lo);
        for (const uint16_t* h : {hi, lo}) {
          for (int p = 0; p < 16; ++p) {
            s += WeightAt(a.w, row + 32 * b + 2 * p) * Bf16ToFloat(h[2 * p]);
            s += WeightAt(a.w, row + 32 * b + 2 * p + 1) * Bf16ToFloat(h[2 * p + 1]);
          }
        }
      }
      for (int64_t k = 32 * kb; k < cols; ++k) s = std::fma(WeightAt(a.w, row + k), x[k], s);
      if (a.bias != nullptr) s += a.bias[r];
      a.y[t * a.ldy + r] = s;
    }
  }
}

void Bf16Gemm(const GemmArgs& a) {
  static const GemmFn fn = FunctionFor(BestGemmIsa());
  fn(a);
}

Status Bf16GemmWithIsa(GemmIsa isa, const GemmArgs& a) {
  ZM_RETURN_IF_ERROR(ValidateGemmArgs(a));
  const GemmFn fn = FunctionFor(isa);
  if (fn == nullptr)
    return Status::Unavailable(
        fmt::format("Bf16Gemm: the {} variant is not available on this CPU/build", GemmIsaName(isa)));
  fn(a);
  return Status::Ok();
}

}  // namespace zipmoe::kernels
