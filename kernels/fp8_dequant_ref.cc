// CPU reference of kernels/fp8_dequant.h (the launchers' stand-ins without CUDA: no_cuda.cc).
#include "kernels/fp8_dequant.h"

#include <cstring>
#include <vector>

#include "common/dtype.h"

namespace zipmoe::kernels {
namespace {

// Calls out(index, value) for every element, value the float32 product of the formula.
template <typename Out>
void ForEachDequantized(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols, int64_t block_rows,
                        int64_t block_cols, Out out) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scale_inv + (r / block_rows) * scale_cols;
    for (int64_t k = 0; k < cols; ++k) {
      out(r * cols + k, F8E4M3ToFloat(q[r * cols + k]) * srow[k / block_cols]);  // one rounding
    }
  }
}

}  // namespace

void DequantizeF8E4M3ToBf16Reference(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                     int64_t block_rows, int64_t block_cols, uint16_t* out) {
  ForEachDequantized(q, scale_inv, rows, cols, block_rows, block_cols,
                     [out](int64_t i, float v) { out[i] = v != v ? uint16_t{0x7fc0} : FloatToBf16(v); });
}

void DequantizeF8E4M3ToFloatReference(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                      int64_t block_rows, int64_t block_cols, float* out) {
  ForEachDequantized(q, scale_inv, rows, cols, block_rows, block_cols, [out](int64_t i, float v) { out[i] = v; });
}

void DequantizeMxfp4ToFloatReference(const uint8_t* raw, int64_t rows, int64_t cols, float* out) {
  if (rows <= 0 || cols <= 0) return;
  const uint8_t* scales = raw + rows * cols / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t byte = raw[(r * cols + k) / 2];
      const uint8_t nibble = static_cast<uint8_t>((k % 2 == 0 ? byte : byte >> 4) & 0x0fu);
      out[r * cols + k] = Fp4E2M1ToFloat(nibble) * E8M0ToFloat(scales[r * (cols / 32) + k / 32]);
    }
  }
}

void DequantizeMxfp4ToBf16Reference(const uint8_t* raw, int64_t rows, int64_t cols, uint16_t* out) {
  if (rows <= 0 || cols <= 0) return;
  std::vector<float> row(static_cast<size_t>(cols));
  const int64_t scale_cols = cols / 32;
  std::vector<uint8_t> one(static_cast<size_t>(cols / 2 + scale_cols));
  for (int64_t r = 0; r < rows; ++r) {  // one row at a time in the float32 reference's layout
    std::memcpy(one.data(), raw + r * cols / 2, static_cast<size_t>(cols / 2));
    std::memcpy(one.data() + cols / 2, raw + rows * cols / 2 + r * scale_cols, static_cast<size_t>(scale_cols));
    DequantizeMxfp4ToFloatReference(one.data(), 1, cols, row.data());
    for (int64_t k = 0; k < cols; ++k) {
      const float v = row[static_cast<size_t>(k)];
      out[r * cols + k] = v != v ? uint16_t{0x7fc0} : FloatToBf16(v);
    }
  }
}

}  // namespace zipmoe::kernels
