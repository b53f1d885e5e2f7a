// Fused expert tensors (gpt-oss's MXFP4 or dense ones, Qwen3.5-MoE's and Granite-MoE's dense ones), served
// as zipmoe's per-expert gate / up / down tensors.
//
// granitemoe / granitemoeshared (modular_granitemoe.py, GraniteMoeParallelExperts; the MoE's
// hidden_states.chunk(2, dim=-1) makes the first half the activated gate) ship the same layout under
// other names:
//   model.layers.{L}.block_sparse_moe.input_linear.weight   [E, 2I, H]  rows [0, I) gate, [I, 2I) up
//   model.layers.{L}.block_sparse_moe.output_linear.weight  [E, H, I]
//
// qwen3_5_moe (modeling_qwen3_5_moe.py, Qwen3_5MoeExperts) ships each MoE layer's experts as
//   model.language_model.layers.{L}.mlp.experts.gate_up_proj  [E, 2I, H]  rows [0, I) gate, [I, 2I) up
//   model.language_model.layers.{L}.mlp.experts.down_proj     [E, H, I]
// in BF16 / F16 / F32 ([out, in] already: expert e's gate is a contiguous [I, H] block).
//
// gpt-oss (model_type gpt_oss, quantization_config quant_method "mxfp4"; transformers'
// integrations/mxfp4.py) ships each MoE layer's routed experts in four fused U8 tensors:
//   model.layers.{L}.mlp.experts.gate_up_proj_blocks  [E, 2I, H/32, 16]  two E2M1 values per byte
//   model.layers.{L}.mlp.experts.gate_up_proj_scales  [E, 2I, H/32]      one E8M0 scale per 32 values
//   model.layers.{L}.mlp.experts.down_proj_blocks     [E, H, I/32, 16]
//   model.layers.{L}.mlp.experts.down_proj_scales     [E, H, I/32]
// (their biases gate_up_proj_bias [E, 2I] and down_proj_bias [E, H] are ordinary dense tensors).
// Without MXFP4 (a dequantized release, quantization_config absent) the experts are transformers'
// runtime tensors instead, `gate_up_proj` [E, H, 2I] and `down_proj` [E, I, H] (x @ W: the input
// dimension first) in BF16, F16 or F32; they are unfused the same way, transposed to [out, in].
// Row r of gate_up is output column r of transformers' runtime gate_up_proj [E, H, 2I]; the modeling
// code takes gate = gate_up[..., ::2] and up = gate_up[..., 1::2]: the gate is the EVEN rows, the up
// projection the ODD rows. zipmoe serves expert e of layer L as
//   gate_proj [I, H] = rows 0, 2, 4, ... of gate_up, up_proj [I, H] = rows 1, 3, 5, ..., down_proj [H, I]
// each an MXFP4 tensor (common/dtype.h DType::kMXFP4) in its raw layout: the rows' blocks
// [rows, cols / 2] then their scales [rows, cols / 32] (or, for the dense runtime tensors, a row-major
// [rows, cols] tensor of their dtype). Whole rows move with their own scales, so every value is the
// checkpoint's bit for bit (ReadFusedExpert and its inverse in the tests show it).
// Pure functions over a mapped Checkpoint; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/checkpoint/expert_names.h"
#include "common/checkpoint/manifest.h"
#include "common/checkpoint/safetensors.h"
#include "common/dtype.h"
#include "common/status.h"

namespace zipmoe {

// Whether `name` is one of the fused expert tensors above (any layer): the four MXFP4 ones, the two
// dense runtime ones, or Granite's two.
bool IsFusedExpertTensor(const std::string& name);

// Whether `config` (a config.json object) describes a checkpoint with fused experts: model_type
// gpt_oss (MXFP4 with quantization_config.quant_method "mxfp4", else the dense runtime tensors),
// qwen3_5_moe, granitemoe, granitemoeshared or granitemoehybrid.
bool HasFusedExperts(const nlohmann::json& config);
// Whether those fused experts are MXFP4 (quant_method "mxfp4").
bool HasFusedMxfp4Experts(const nlohmann::json& config);

// The name zipmoe gives one unfused expert tensor (manifest.bin, messages):
// "model.layers.{L}.mlp.experts.{E}.{gate_proj|up_proj|down_proj}".
std::string UnfusedExpertName(int32_t layer_id, int32_t expert_id, ExpertProj proj);

// One unfused expert tensor: [rows, cols] values of `dtype` (MXFP4: cols % 32 == 0).
struct FusedExpertRef {
  ExpertTensorName id;
  std::string name;            // UnfusedExpertName
  std::vector<int64_t> shape;  // [rows, cols]
  DType dtype = DType::kMXFP4;
};

// Every unfused expert tensor of `ckpt` (empty unless HasFusedExperts), sorted by (layer, expert,
// proj); multi-token-prediction layers are skipped (IsNotDecodedTensor). Errors (kInvalidArgument,
// naming the file and tensor): a fused MXFP4 tensor that is not U8, a blocks tensor whose shape is not
// [E, rows, cols/32, 16] or a scales tensor not [E, rows, cols/32] for the same E and rows; a dense one
// not BF16/F16/F32 or not [E, H, 2I] / [E, I, H] (qwen3_5_moe, granite: [E, 2I, H] / [E, H, I]); gate_up with an odd width, a layer with some of its
// tensors but not all, down not matching gate_up.
Result<std::vector<FusedExpertRef>> ListFusedExperts(const Checkpoint& ckpt);

// Writes `ref`'s raw layout (DTypeBytes(ref.dtype, rows * cols) bytes) to `out`.
// Errors: kNotFound when the fused tensors are missing, kInvalidArgument when `ref` does not fit them.
Status ReadFusedExpert(const Checkpoint& ckpt, const FusedExpertRef& ref, uint8_t* out);

}  // namespace zipmoe
