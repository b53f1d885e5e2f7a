// Synthetic tensor values: turns a TensorRecipe (model_layout.h) into BF16 bytes, deterministically.
//
// A tensor is a stack of rows (its last dimension; a 1-D tensor is one row). Row r's values come from
// elements [r*row_len, (r+1)*row_len) of the standard-normal stream TensorSeed(seed, name)
// (gaussian.h), then: kNormal -> mean + std*z; kEmbedding -> std*z + a*μ̂ (skew channel);
// kRouter -> std*(z ⊥ μ̂) + β_e*μ̂ (router_skew.h). Under skew, rows of residual readers are made ⊥ μ̂.
// Float -> BF16 is round-to-nearest-even (FloatToBf16). Any row range can be generated alone, so
// FillTensorBf16 parallelises over row chunks and the bytes never depend on the thread count.
//
// Thread-safe: the functions only read their arguments.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "services/synth/model_layout.h"
#include "services/synth/router_skew.h"
#include "services/synth/thread_pool.h"

namespace zipmoe::synth {

// Rows per parallel task are chosen so a task covers about this many elements.
constexpr int64_t kFillChunkElems = 1 << 16;

int64_t RowLength(const TensorSpec& spec);  // last dimension (1 for a scalar)
int64_t RowCount(const TensorSpec& spec);   // numel / RowLength

// Writes rows [row_begin, row_end) of `recipe` as BF16 bit patterns into out[0 .. (row_end-row_begin)*row_len).
void GenerateRowsBf16(const TensorRecipe& recipe, const SkewModel& skew, uint64_t seed, int64_t row_begin,
                      int64_t row_end, uint16_t* out);

// The same rows as float32 values before rounding (an F32 recipe stores them as they are).
void GenerateRowsF32(const TensorRecipe& recipe, const SkewModel& skew, uint64_t seed, int64_t row_begin,
                     int64_t row_end, float* out);

// Fills the whole tensor (spec.size_bytes() bytes at `out`, any alignment) using `runner`: BF16
// recipes as GenerateRowsBf16, F32 ones (switch_transformers) as GenerateRowsF32.
// Errors: kInvalidArgument if the recipe is neither BF16 nor F32.
Status FillTensorBf16(const TensorRecipe& recipe, const SkewModel& skew, uint64_t seed,
                      ParallelRunner& runner, uint8_t* out);

// FP8 block quantization of an F8_E4M3 weight recipe (its float32 values as GenerateRowsF32), as the
// released FP8 checkpoints are made (DeepSeek-V3's weight_quant): per block of fp8_block_rows x
// fp8_block_cols, scale_inv = amax / 448 (1 for an all-zero block), q = e4m3_rne(w / scale_inv)
// (common/dtype.h FloatToF8E4M3). Writes q [rows, cols] to q_out and/or the scales
// [ceil(rows/br), ceil(cols/bc)] float32 to scale_out (either may be null; any alignment).
// Errors: kInvalidArgument if the recipe is not a 2-D F8_E4M3 one with block sizes > 0.
Status FillFp8(const TensorRecipe& weight, const SkewModel& skew, uint64_t seed, ParallelRunner& runner,
               uint8_t* q_out, uint8_t* scale_out);

// MXFP4 quantization of a float weight recipe (gpt_oss's experts; its values as GenerateRowsF32, rows
// of RowLength values, a multiple of 32): per block of 32 values of a row, e = ceil(log2(amax / 6))
// (0 for an all-zero block, clamped to [-126, 127]), scale byte e + 127 (E8M0), and each value the
// E2M1 code nearest to w / 2^e (ties to the even mantissa), two per byte, the even column in the low
// nibble (transformers' integrations/mxfp4.py order). Writes the blocks [rows, RowLength / 2] to
// blocks_out and/or the scales [rows, RowLength / 32] to scales_out (either may be null).
// Errors: kInvalidArgument if the row length is not a multiple of 32.
Status FillMxfp4(const TensorRecipe& weight, const SkewModel& skew, uint64_t seed, ParallelRunner& runner,
                 uint8_t* blocks_out, uint8_t* scales_out);

}  // namespace zipmoe::synth
