// Recipe -> BF16 rows (see tensor_init.h).
#include "services/synth/tensor_init.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/dtype.h"
#include "services/synth/gaussian.h"

namespace zipmoe::synth {
namespace {

// z <- z - (z·μ̂) μ̂ for one row of length = μ̂'s.
void ProjectOut(const std::vector<float>& dir, float* z) {
  const size_t n = dir.size();
  double dot = 0.0;
  for (size_t j = 0; j < n; ++j) dot += static_cast<double>(z[j]) * dir[j];
  const float d = static_cast<float>(dot);
  for (size_t j = 0; j < n; ++j) z[j] -= d * dir[j];
}

// kLogUniform / kInvSoftplusDt (model_layout.h) from a standard normal z: u = Φ(z) in (0, 1).
float GateValue(const TensorRecipe& r, float z) {
  const double u = std::min(std::max(0.5 * std::erfc(-static_cast<double>(z) / std::sqrt(2.0)), 1e-12), 1.0 - 1e-12);
  const double lo = r.uniform_lo, hi = r.uniform_hi;
  if (r.kind == InitKind::kLogUniform) return static_cast<float>(std::log(lo + (hi - lo) * u));
  const double dt = std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * u);
  return static_cast<float>(dt + std::log(-std::expm1(-dt)));
}

}  // namespace

int64_t RowLength(const TensorSpec& spec) { return spec.shape.empty() ? 1 : spec.shape.back(); }

int64_t RowCount(const TensorSpec& spec) {
  const int64_t len = RowLength(spec);
  return len == 0 ? 0 : spec.numel() / len;
}

void GenerateRowsF32(const TensorRecipe& recipe, const SkewModel& skew, uint64_t seed, int64_t row_begin,
                     int64_t row_end, float* out) {
  const int64_t row_len = RowLength(recipe.spec);
  const int64_t n = (row_end - row_begin) * row_len;
  if (n <= 0) return;
  const uint64_t stream = TensorSeed(seed, recipe.spec.name);
  std::vector<float> z(static_cast<size_t>(n));
  StandardNormals(stream, row_begin * row_len, row_end * row_len, z.data());

  const bool skewed = skew.enabled() && static_cast<int64_t>(skew.direction.size()) == row_len;
  const std::vector<float>& dir = skew.direction;
  std::vector<float> beta;  // router rows: β_e = X·z_e·σ/κ
  if (skewed && recipe.kind == InitKind::kRouter) {
    const std::vector<float> scores = ExpertSkewScores(stream, RowCount(recipe.spec));
    beta.resize(scores.size());
    for (size_t e = 0; e < scores.size(); ++e) {
      beta[e] = static_cast<float>(skew.skew * scores[e] * recipe.std / skew.channel_scale);
    }
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    float* zr = z.data() + (r - row_begin) * row_len;
    float* o = out + (r - row_begin) * row_len;
    if (skewed && recipe.kind == InitKind::kEmbedding) {
      for (int64_t j = 0; j < row_len; ++j) {
        o[j] = recipe.std * zr[j] + skew.channel_amplitude * dir[static_cast<size_t>(j)];
      }
      continue;
    }
    if (skewed && recipe.kind == InitKind::kRouter) {
      ProjectOut(dir, zr);
      const float b = beta[static_cast<size_t>(r)];
      for (int64_t j = 0; j < row_len; ++j) {
        o[j] = recipe.std * zr[j] + b * dir[static_cast<size_t>(j)];
      }
      continue;
    }
    if (recipe.kind == InitKind::kLogUniform || recipe.kind == InitKind::kInvSoftplusDt) {
      for (int64_t j = 0; j < row_len; ++j) o[j] = GateValue(recipe, zr[j]);
      continue;
    }
    if (skewed && recipe.reads_residual) ProjectOut(dir, zr);
    for (int64_t j = 0; j < row_len; ++j) o[j] = recipe.mean + recipe.std * zr[j];
  }
}

void GenerateRowsBf16(const TensorRecipe& recipe, const SkewModel& skew, uint64_t seed, int64_t row_begin,
                      int64_t row_end, uint16_t* out) {
  const int64_t n = (row_end - row_begin) * RowLength(recipe.spec);
  if (n <= 0) return;
  std::vector<float> f(static_cast<size_t>(n));
  GenerateRowsF32(recipe, skew, seed, row_begin, row_end, f.data());
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(f[static_cast<size_t>(i)]);
}

Status FillTensorBf16(const TensorRecipe& recipe, const SkewModel& skew, uint64_t seed,
                      ParallelRunner& runner, uint8_t* out) {
  if (recipe.spec.dtype != DType::kBF16 && recipe.spec.dtype != DType::kF32) {
    return Status::InvalidArgument(fmt::format("tensor '{}': synth writes BF16 or F32, recipe has {}",
                                               recipe.spec.name, DTypeName(recipe.spec.dtype)));
  }
  const int64_t row_len = RowLength(recipe.spec);
  const int64_t rows = RowCount(recipe.spec);
  if (rows == 0) return Status::Ok();
  const int64_t rows_per_task = std::max<int64_t>(1, kFillChunkElems / std::max<int64_t>(1, row_len));
  const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
  const bool aligned = reinterpret_cast<uintptr_t>(out) % alignof(uint16_t) == 0;
  runner.ParallelFor(n_tasks, [&](int64_t task) {
    const int64_t begin = task * rows_per_task;
    const int64_t end = std::min(rows, begin + rows_per_task);
    if (recipe.spec.dtype == DType::kF32) {  // any alignment: generated, then copied
      std::vector<float> tmp(static_cast<size_t>((end - begin) * row_len));
      GenerateRowsF32(recipe, skew, seed, begin, end, tmp.data());
      std::memcpy(out + static_cast<uint64_t>(begin * row_len) * sizeof(float), tmp.data(), tmp.size() * sizeof(float));
      return;
    }
    uint8_t* dst = out + static_cast<uint64_t>(begin * row_len) * sizeof(uint16_t);
    if (aligned) {
      GenerateRowsBf16(recipe, skew, seed, begin, end, reinterpret_cast<uint16_t*>(dst));
    } else {
      std::vector<uint16_t> tmp(static_cast<size_t>((end - begin) * row_len));
      GenerateRowsBf16(recipe, skew, seed, begin, end, tmp.data());
      std::memcpy(dst, tmp.data(), tmp.size() * sizeof(uint16_t));
    }
  });
  return Status::Ok();
}

Status FillFp8(const TensorRecipe& weight, const SkewModel& skew, uint64_t seed, ParallelRunner& runner,
               uint8_t* q_out, uint8_t* scale_out) {
  const TensorSpec& spec = weight.spec;
  const int64_t br = weight.fp8_block_rows, bc = weight.fp8_block_cols;
  if (spec.dtype != DType::kF8E4M3 || spec.shape.size() != 2 || br <= 0 || bc <= 0)
    return Status::InvalidArgument(fmt::format("tensor '{}': FillFp8 needs a 2-D F8_E4M3 recipe with block sizes",
                                               spec.name));
  const int64_t rows = spec.shape[0], cols = spec.shape[1];
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const int64_t rows_per_task = std::max<int64_t>(1, kFillChunkElems / std::max<int64_t>(1, cols));
  runner.ParallelFor((rows + rows_per_task - 1) / rows_per_task, [&](int64_t task) {
    const int64_t begin = task * rows_per_task, end = std::min(rows, begin + rows_per_task);
    GenerateRowsF32(weight, skew, seed, begin, end, w.data() + begin * cols);
  });
  const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
  std::vector<float> scale(static_cast<size_t>(srows * scols));
  for (int64_t i = 0; i < srows; ++i) {
    for (int64_t j = 0; j < scols; ++j) {
      float amax = 0.0f;
      for (int64_t r = i * br; r < std::min(rows, (i + 1) * br); ++r)
        for (int64_t c = j * bc; c < std::min(cols, (j + 1) * bc); ++c)
          amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c)]));
      scale[static_cast<size_t>(i * scols + j)] = amax > 0.0f ? amax / 448.0f : 1.0f;
    }
  }
  if (scale_out != nullptr) std::memcpy(scale_out, scale.data(), scale.size() * sizeof(float));
  if (q_out != nullptr) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        q_out[r * cols + c] = FloatToF8E4M3(w[static_cast<size_t>(r * cols + c)] /
                                            scale[static_cast<size_t>((r / br) * scols + c / bc)]);
  }
  return Status::Ok();
}

namespace {

// The E2M1 code (s e e m) nearest to x (|x| <= 6 after scaling), ties to the even mantissa, as a
// round-to-nearest-even cast: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes 0..7.
uint8_t ToE2m1(float x) {
  static const float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::min(std::fabs(x), 6.0f);
  uint8_t best = 0;
  for (uint8_t c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kMagnitude[c]), db = std::fabs(a - kMagnitude[best]);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(sign | best);
}

}  // namespace

Status FillMxfp4(const TensorRecipe& weight, const SkewModel& skew, uint64_t seed, ParallelRunner& runner,
                 uint8_t* blocks_out, uint8_t* scales_out) {
  const int64_t cols = RowLength(weight.spec), rows = RowCount(weight.spec);
  if (cols % 32 != 0 || rows <= 0)
    return Status::InvalidArgument(
        fmt::format("tensor '{}': MXFP4 needs rows of a multiple of 32 values, got {}", weight.spec.name, cols));
  const int64_t rows_per_task = std::max<int64_t>(1, kFillChunkElems / cols);
  runner.ParallelFor((rows + rows_per_task - 1) / rows_per_task, [&](int64_t task) {
    const int64_t begin = task * rows_per_task, end = std::min(rows, begin + rows_per_task);
    std::vector<float> w(static_cast<size_t>((end - begin) * cols));
    GenerateRowsF32(weight, skew, seed, begin, end, w.data());
    for (int64_t r = begin; r < end; ++r) {
      const float* row = w.data() + (r - begin) * cols;
      for (int64_t b = 0; b < cols / 32; ++b) {
        const float* x = row + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        // The smallest power of two 2^e with amax / 2^e <= 6 (e within E8M0's normal range).
        int e = amax > 0.0f ? static_cast<int>(std::ceil(std::log2(amax / 6.0f))) : 0;
        e = std::min(127, std::max(-126, e));
        if (scales_out != nullptr) scales_out[r * (cols / 32) + b] = static_cast<uint8_t>(e + 127);
        if (blocks_out != nullptr) {
          uint8_t* out = blocks_out + r * (cols / 2) + 16 * b;
          for (int i = 0; i < 16; ++i) {
            const uint8_t lo = ToE2m1(std::ldexp(x[2 * i], -e)), hi = ToE2m1(std::ldexp(x[2 * i + 1], -e));
            out[i] = static_cast<uint8_t>(lo | hi << 4);  // the even column in the low nibble
          }
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace zipmoe::synth
