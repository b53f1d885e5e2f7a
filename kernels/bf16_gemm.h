// BF16-weight x FP32-activation matrix products on the CPU: the executor's linear layers (dense
// and routed experts alike) read their weights as BF16, exactly as stored in the checkpoint, and
// never hold an fp32 copy (issue 13). Host API only; no torch, no CUDA headers.
//
// Every entry point computes, for the rows r in [row_begin, row_end) of W and every token t < n:
//   y[t * ldy + r] = dot(W[r, :], x[t * ldx + :]) (+ bias[r])
// where W: [rows, cols] is given as BF16 bit patterns, as the two planes of ZipMoE's
// bit-field split (common/bitfield.h; the recovery formula of kernels/recovery.h) or as float32
// (F32 checkpoints; GemmWeights), so an expert
// whose E plane is decoded and whose SM plane is in memory is multiplied without first writing a
// recovered BF16 copy ("recovery fused into the matmul"; ZipMoE §3.1 Fig. 5 ➐ moved into ➑).
// Weights are widened exactly (BF16 bits << 16 is the fp32 value); products and sums are fp32.
//
// Summation order (the same on every ISA variant, so every variant is bit-identical to
// Bf16GemmReference, results do not depend on the number of threads, on how rows are split, on
// the batch a token is computed in, or on which encoding served the weights):
//   kb = cols / 16; two chains c0, c1 of 16 lanes, all 0;
//   for b in [0, kb): c = chain (b / G) % 2 (G = kGemmChainGroupBlocks = 16: groups of 256 columns alternate):
//                     c[j] = fma(W[r, 16b+j], x[t, 16b+j], c[j])
//   a[j] = c0[j] + c1[j]
//   s = ((a[0..7] + a[8..15]) -> 8 lanes; then lanes [0..3] + [4..7]; then [0,1] + [2,3]; then [0] + [1])
//   for k in [16 kb, cols): s = fma(W[r, k], x[t, k], s)
//   y = s (+ bias[r], one fp32 addition)
// fma is fused multiply-add with one rounding (std::fma), + is an fp32 addition.
//
// Variants (picked at run time by BestGemmIsa; each ISA lives in its own translation unit compiled
// with that ISA's flags, reached only after CPUID says the CPU has it):
//   kScalar   the reference, plain C++ (std::fma); any CPU.
//   kAvx2     x86-64 with AVX2 + FMA: 2 x 8 lanes per block.
// MXFP4 weights are decoded in registers on every variant and at every batch size (a table of the E2M1
// values times the block's scale, indexed by the nibbles: AVX-512 vpshufb + vpermps over 16 signed
// values, AVX2 vpermps over 8 magnitudes + the sign bit, NEON TBL of IEEE half high bytes + FCVTL + one
// multiply); four rows per decode (GEMV) tile, as FP8 has more than BF16: the decode, not memory, bounds it.
//   kAvx512   x86-64 with AVX-512 F/BW/VL: 16 lanes per block, 4-row x 4-token register tiles.
// FP8 weights (kAvx2, kAvx512, kNeon): each byte sign-extended and shifted into a float32 whose value is
// the E4M3 value / 2^120 (exact; MXCSR.DAZ / FPCR.FZ is cleared around the call so that E4M3 subnormals,
// float32 subnormals there, read exactly), times scale * 2^120: the formula's one rounding. Row tiles holding a
// NaN code or a scale >= 2^8 (the rare cases this does not cover) take a checked path with the same bits.
//   kNeon     AArch64 (Jetson's Cortex-A78AE): 4 x 4 lanes per block.
//   kAvx512Bf16  x86-64 with AVX512_BF16 (vdpbf16ps): BF16 weights times the activation split into
//             two BF16 halves (hi + lo: 16 significant bits), 32 columns per instruction, no widening
//             of the weights (kernels/bf16_gemm_avx512bf16.cc). NOT in the fp32 summation order
//             above: its own order is Bf16GemmBf16DotReference's; results stay within ~2^-16 of the
//             fp32 products (tests bound them, and the logits within 1e-4 of the fp32 reference).
//             Opt-in (ZIPMOE_GEMM_ISA=avx512bf16): on a Zen 5 it measured no faster than kAvx512
//             (decode is bound by memory there; the two dot products per weight vector cost what
//             the widening saved) and it leaves the fp32 order (docs/architecture.md "CPU kernels").
//   kAmxBf16  x86-64 with AMX-TILE + AMX-BF16 (Sapphire Rapids and later; Linux grants the tile state per
//             process, arch_prctl ARCH_REQ_XCOMP_PERM, asked once when the variant is first looked up):
//             TDPBF16PS on 16-row x 32-column weight tiles read in place and the same hi + lo activation
//             split, 16 tokens per tile (kernels/bf16_gemm_amx.cc). Its own order, one fp32 chain per output
//             (Bf16GemmAmxReference); the same tolerances as kAvx512Bf16. Opt-in (ZIPMOE_GEMM_ISA=amxbf16):
//             on an Intel Xeon VM its 256-token prefill ran 1.65x kAvx512's, decode 3-8 % slower, but its bits
//             differ from the default variants' (which agree on every CPU). Split work on GemmRowQuantum.
//
// Thread-safety: every function is reentrant; callers split rows across threads (disjoint row
// ranges write disjoint outputs).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace zipmoe::kernels {

// The summation order's chain group (above): 16-column blocks per group, groups alternating between the
// two accumulator chains. Part of the order, so of the bits: every default variant and the reference use it.
inline constexpr int64_t kGemmChainGroupBlocks = 16;

// The weights W of one linear layer, [rows, cols] row-major (row stride = cols), in one of five
// encodings, checked in this order: `bf16` set (BF16 bit patterns); `f32` set (float32, e.g. an F32
// checkpoint: the same loops without the widening, so an F32 checkpoint whose values are BF16
// values gives the same bits as its BF16 original); `f8` set (block-scaled FP8, below); `mxfp4` set
// (MXFP4, below); else both planes (e: exponent plane, sm: sign<<7 | mantissa, one byte per element
// each, as common/bitfield.h splits BF16).
// FP8 (DeepSeek-V3 / GLM FP8 checkpoints: F8_E4M3 weights with 128x128 `weight_scale_inv` blocks):
//   W[r, k] = e4m3(f8[r, k]) * f8_scale[(r / block_rows) * ceil(cols / block_cols) + k / block_cols]
// with e4m3() exact (common/dtype.h F8E4M3ToFloat) and one fp32 multiplication (rounded to nearest):
// the dequantization of DeepSeek's weight_dequant and transformers' FP8 integration, done in the inner
// loop as BF16 is widened there (the weights stay 1 byte each); then the fp32 order below.
// block_cols must be a multiple of 16 (ValidateGemmArgs).
// MXFP4 (gpt-oss's experts, OCP Microscaling: FP4 E2M1 values, one E8M0 scale per 32 columns of a row):
//   W[r, k] = e2m1(nibble k of row r) * 2^(mxfp4_scales[r * cols/32 + k/32] - 127)
// with the nibble of column k in byte r * cols/2 + k/2 of `mxfp4` (even k: low nibble; odd k: high nibble),
// e2m1() exact (common/dtype.h Fp4E2M1ToFloat) and the scale an exact float32 (E8M0ToFloat: 2^-127, a
// subnormal, for code 0), multiplied once in fp32. Every finite product is exact (two significant bits,
// magnitude >= 2^-128), so W is the dequantized weight bit for bit; then the fp32 order below. Values that
// do not fit fp32 are not refused here (common/bitfield.h CheckMxfp4Values refuses them at conversion):
// scale 254 with |e2m1| >= 2 or scale 253 with |e2m1| >= 4 gives W = +-inf (the product overflows), and
// scale 0xFF (NaN in the spec) gives NaN for the block's 32 weights; outputs then follow IEEE arithmetic
// (inf, or NaN for inf - inf and 0 * inf), the same on every variant (a NaN's sign and payload may
// differ). cols must be a multiple of 32.
struct GemmWeights {
  const uint16_t* bf16 = nullptr;  // [rows, cols] BF16 bit patterns, or nullptr
  const float* f32 = nullptr;      // [rows, cols] float32 (when bf16 is nullptr), or nullptr
  const uint8_t* f8 = nullptr;     // [rows, cols] F8_E4M3 bit patterns (when bf16 and f32 are nullptr), or nullptr
  const float* f8_scale = nullptr; // f8: [ceil(rows / block_rows), ceil(cols / block_cols)] float32 scales
  int64_t block_rows = 0;          // f8: rows of one scale block (128 in released checkpoints)
  int64_t block_cols = 0;          // f8: columns of one scale block
  const uint8_t* mxfp4 = nullptr;  // [rows, cols/2] MXFP4 nibbles (when bf16, f32 and f8 are nullptr), or nullptr
  const uint8_t* mxfp4_scales = nullptr;  // mxfp4: [rows, cols/32] E8M0 scale bytes
  const uint8_t* e = nullptr;      // [rows, cols] exponent plane (when bf16, f32, f8 and mxfp4 are nullptr)
  const uint8_t* sm = nullptr;     // [rows, cols] sign|mantissa plane (as e)
  int64_t rows = 0;
  int64_t cols = 0;

  bool planes() const { return bf16 == nullptr && f32 == nullptr && f8 == nullptr && mxfp4 == nullptr; }
  // True when the MXFP4 pointers are the ones used.
  bool is_mxfp4() const { return bf16 == nullptr && f32 == nullptr && f8 == nullptr && mxfp4 != nullptr; }
  // f8: the scale of weight (r, k).
  float F8Scale(int64_t r, int64_t k) const {
    return f8_scale[(r / block_rows) * ((cols + block_cols - 1) / block_cols) + k / block_cols];
  }
};

// How the x86 variants (kAvx2, kAvx512) bring in the weights of tiles that stream one row (the decode GEMV
// and batches of one token tile: gemm_tile::kStreamedTokens). Speed only: every scheme gives the same bits.
//   kAhead     software prefetch of each 64-byte line 3 KiB ahead of the read, into L2 (prefetcht1): the
//              hardware prefetchers of Intel cores stop at 4 KiB pages; on an Intel Xeon VM the GEMV then
//              read 24-26 GB/s instead of 20-22 and warm decode took 11-15 % less (2026-11-30).
//   kHardware  no software prefetch in those tiles: the core's own prefetchers. On a 2-core Zen 4 (EPYC
//              Genoa VM, 2026-12-01) warm decode took 7-9 % less than with kAhead (AVX-512 and AVX2,
//              interleaved rounds) and a 16-token prefill ran 4-6 % faster; on one core from L3 the
//              GEMV read 49 GB/s against kAhead's 38 (docs/architecture.md "CPU kernels"). Not on Zen 2:
//              on a 2-core EPYC Rome VM (family 0x17, AVX2, 2026-12-03) warm decode took 6 % more time
//              with it than with kAhead and a 16-token prefill 8 % more (medians of six reps, three
//              alternated pairs, kAhead ahead in each; docs/benchmarks.md). Nor on Zen 3: on a 2-core EPYC
//              Milan VM (family 0x19 model 0x01, AVX2, 2026-12-07) warm decode took 14 % more time with it
//              (qwen2_moe mini, 16-token prompt, medians of three reps 0.081-0.082 s against 0.069-0.072, three
//              alternated pairs, kAhead ahead in each; the GEMV alone, 40 matrices of 1408 x 2048, best of 5
//              16.0-17.4 GB/s against 17.1-20.5).
//   kAuto      ActiveGemvPrefetch() (the default of GemmArgs).
// Tiles of several rows (batches, FP8 and MXFP4 decode, NEON) keep their next-tile prefetch under every scheme.
enum class GemvPrefetch : int { kAuto = 0, kAhead = 1, kHardware = 2 };

// "auto", "ahead", "hardware" ("unknown" for other values).
const char* GemvPrefetchName(GemvPrefetch p);

// The process's scheme, decided once: ZIPMOE_GEMV_PREFETCH=ahead|hardware in the environment, else
// DefaultGemvPrefetchFor(the CPUID vendor string, display family and model) on x86, else kAhead. An
// unknown value is reported once on stderr and the default is used. Never kAuto.
GemvPrefetch ActiveGemvPrefetch();

// The default scheme for an x86 CPU: kHardware on AMD Zen 4 (display family 0x19, models 0x10-0x1F and
// 0x60 on; measured) and later families (Zen 5: 0x1A, assumed alike), kAhead on Zen 3 (family 0x19, models
// 0x00-0x0F and 0x20-0x5F; measured on Milan), on earlier AMD cores (Zen 1/2: 0x17, measured on Zen 2;
// Hygon's Zen-1-based "HygonGenuine" 0x18 assumed alike), on Intel (measured) and on every other vendor
// (unmeasured). `vendor`: CPUID leaf 0's 12 characters ("AuthenticAMD", "GenuineIntel", ...); `family`:
// the display family (leaf 1: base family, plus the extended family when the base is 0xF); `model`: the
// display model (leaf 1: base model, plus the extended model << 4 when the base family is 0x6 or 0xF).
// Pure; ActiveGemvPrefetch calls it with this CPU's values.
GemvPrefetch DefaultGemvPrefetchFor(const std::string& vendor, unsigned family, unsigned model);

// How the x86 variants' FP8 row tiles meet the codes their fast decode does not take (issue 35). That decode
// (kernels/bf16_gemm_avx2.cc F8x8) moves an E4M3 code's bits into a float32 and multiplies by the scale
// times 2^120: exact for every finite code and scales in [2^-100, 2^8), a NaN code (0x7f, 0xff) it reads as
// a finite number, and a subnormal code (exponent 0) becomes a float32 subnormal input. Speed only: every
// scheme gives the same bits.
//   kScan   before multiplying, each row tile's codes are read once (gemm_tile::F8TileVerdict): a NaN code
//           or such a scale sends the tile to the checked decode (gemm_tile::F8Checked), more than 1 in 1024
//           subnormal codes to the subnormal loads (through IEEE half: no subnormal float32 input, which
//           Intel cores meet with a ~130-cycle microcode assist per vector; docs/benchmarks.md "Background:
//           FP8 checkpoints against BF16"). That pass is a second walk over the tile, the first touch of
//           its lines from memory.
//   kFused  the scales are checked before the tile, NaN codes in the multiplication's own pass (a load, an
//           or and an unsigned byte max per 32 codes; AVX2 and AVX-512); a tile that met one is computed again,
//           checked. Subnormal codes stay float32 subnormal inputs, so a call whose first 4 rows the scan finds
//           rich in them (more than 1 in 1024; gemm_tile::kF8SampleRows) scans every tile instead: 1 in 8 subnormal codes took
//           the fused tiles 10.1-10.3 ms against the scan's 8.1-8.3 below. Measured on a 2-core Zen 2 VM
//           (EPYC, family 0x17, 2026-12-03; fp8_gemm_bench, 8 matrices of 1408 x 4096, codes as a
//           checkpoint's, best of 5, alternated): the GEMV 6.8-7.4 -> 5.4-5.6 ms on 1 thread, 3.5-3.7 ->
//           2.9-3.0 ms on 2; a qwen3_moe mini with FP8 experts decoded 21.0 -> 25.1 tokens/s
//           (executor_bench, 2 threads, 64-token prompt).
//   kAuto   ActiveF8TileCheck() (the default of GemmArgs).
// Batches that dequantize row blocks once (from kF8DequantMinTokens tokens) through float32 check the same
// way while dequantizing; through BF16 (x86: gemm_tile::RowsF8ThroughBf16) NaN codes become BF16 NaNs and
// nothing needs a check. NEON, without the fused check, scans under every scheme (kAvx512Bf16 and kAmxBf16
// take FP8 weights to kAvx512). AVX-512's 4-token tiles scan under kFused too (gemm_tile::F8FusedMaxTokens:
// slower fused on a Zen 5, 2026-12-04), its decode and 2-3-token tiles gain from it.
enum class F8TileCheck : int { kAuto = 0, kScan = 1, kFused = 2 };

// "auto", "scan", "fused" ("unknown" for other values).
const char* F8TileCheckName(F8TileCheck c);

// The process's scheme, decided once: ZIPMOE_F8_TILE_CHECK=scan|fused in the environment, else
// DefaultF8TileCheckFor(the CPUID vendor string) on x86, else kScan. An unknown value is reported once on
// stderr and the default is used. Never kAuto.
F8TileCheck ActiveF8TileCheck();

// The default for an x86 CPU: kFused on AMD ("AuthenticAMD"; measured on Zen 2, 2026-12-03) and Hygon
// ("HygonGenuine", Zen-based, assumed alike), whose cores take subnormal inputs without a microcode assist;
// kScan on Intel and every other vendor. Pure.
F8TileCheck DefaultF8TileCheckFor(const std::string& vendor);

// One matrix product: out = x · Wᵀ (+ bias) for the rows [row_begin, row_end) of W.
struct GemmArgs {
  GemmWeights w;
  const float* x = nullptr;     // [n, ldx] float32 activations; columns [0, w.cols) are read
  int64_t n = 0;                // tokens (rows of x and y); 1 = decode GEMV
  int64_t ldx = 0;              // row stride of x in floats (>= w.cols)
  const float* bias = nullptr;  // [w.rows] float32, or nullptr
  float* y = nullptr;           // [n, ldy] float32; columns [row_begin, row_end) are written
  int64_t ldy = 0;              // row stride of y in floats (>= w.rows)
  int64_t row_begin = 0;
  int64_t row_end = 0;
  GemvPrefetch prefetch = GemvPrefetch::kAuto;  // the weights' prefetch in one-row tiles (speed only)
  F8TileCheck f8_check = F8TileCheck::kAuto;     // how FP8 row tiles meet NaN / subnormal codes (speed only)
};

enum class GemmIsa : int {
  kScalar = 0,
  kAvx2 = 1,
  kAvx512 = 2,
  kNeon = 3,
  kAvx512Bf16 = 4,
  kNeonBf16 = 5,
  kAmxBf16 = 6
};

// "scalar", "avx2", "avx512", "neon", "avx512bf16", "neonbf16", "amxbf16" ("unknown" for other values).
const char* GemmIsaName(GemmIsa isa);
// True when `isa` is compiled into this binary and the CPU (and OS) support it. kScalar always is.
bool GemmIsaAvailable(GemmIsa isa);
// AVX-512 > AVX2 on x86-64, NEON on AArch64, else scalar; detected once per process.
// ZIPMOE_GEMM_ISA=scalar|avx2|avx512|neon|avx512bf16|neonbf16|amxbf16 in the environment overrides it when that
// ISA is available.
GemmIsa BestGemmIsa();
// BestGemmIsa() for kernels with float32 lanes only (gated_delta.h, attention_cpu.h): the BF16
// dot-product variants mapped to the ISA they extend (kAvx512Bf16, kAmxBf16 -> kAvx512; kNeonBf16 ->
// kNeon).
GemmIsa BestFloatLaneIsa();

// The row quantum of BestGemmIsa()'s variant: callers that split a product's rows across threads give each
// call a multiple of this many rows (the last one the rest), so the variant's row tiles stay whole and its
// per-call work is amortised. 4 (the register tiles of the AVX/NEON variants); 64 for kAmxBf16 (16-row
// tiles, and each call splits and packs its activations: ~1-3 µs, measured as much as a 16-row tile's
// product). Results never depend on the split; only speed does.
int64_t GemmRowQuantum();

// Checks the shapes and pointers of `a`. Errors: kInvalidArgument naming the bad field (null
// pointer with work to do, cols > ldx, row range outside [0, rows], ldy < rows, negative n; FP8
// weights without scales or with block sizes <= 0 or block_cols not a multiple of 16; MXFP4 weights
// without scales or with cols not a multiple of 32). The weight values are not read (no scan for 0xFF
// scales: see MXFP4 above).
Status ValidateGemmArgs(const GemmArgs& a);

// The scalar reference (the summation order above, element by element). No validation.
void Bf16GemmReference(const GemmArgs& a);

// The scalar model of kAvx512Bf16 (its header comment): hi = bf16_rne(x), lo = bf16_rne(x - hi);
// per 32-column block and lane i, acc += W[2i+1]·hi[2i+1], acc += W[2i]·hi[2i] (each rounded,
// as the SDM's VDPBF16PS pseudo-code), then the same with lo; the lanes reduced by the tree above;
// the remaining columns with fp32 FMAs on x; the bias. A CPU may round a pair's sum once (the
// instruction's internal order is not architecturally fixed), so tests compare the variant with
// this model within a tolerance, not bit for bit. F32, FP8 and MXFP4 weights: Bf16GemmReference. No
// validation.
void Bf16GemmBf16DotReference(const GemmArgs& a);

// The scalar model of kAmxBf16 (its header comment): the same hi / lo split; per output one fp32 chain:
// for each 32-column block, hi then lo, for p in [0, 16): s += W[2p]·h[2p]; s += W[2p+1]·h[2p+1] (each
// product and sum rounded, the SDM's TDPBF16PS pseudo-code; inputs and outputs are not flushed here, the
// hardware flushes BF16 subnormals: ~1e-38, below every tolerance); the remaining columns with fp32 FMAs on
// x; the bias. Compared with a tolerance, as Bf16GemmBf16DotReference. F32, FP8 and MXFP4 weights:
// Bf16GemmReference. No validation.
void Bf16GemmAmxReference(const GemmArgs& a);

// BestGemmIsa()'s variant on the calling thread. No validation (the executor validates shapes
// once per tensor; see ValidateGemmArgs); n == 0 or an empty row range does nothing.
void Bf16Gemm(const GemmArgs& a);

// `isa`'s variant (tests, benches). Errors: ValidateGemmArgs's, kUnavailable if `isa` is not
// available here (GemmIsaAvailable).
Status Bf16GemmWithIsa(GemmIsa isa, const GemmArgs& a);

}  // namespace zipmoe::kernels
