#include "services/executor/moe_block.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "services/executor/routing.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {

at::Tensor MlpForward(const MlpWeights& w, const at::Tensor& x) {
  const std::vector<at::Tensor> gate_up = Linears(x, {{w.gate, at::Tensor()}, {w.up, at::Tensor()}});
  return Linear(at::silu(gate_up[0]) * gate_up[1], w.down);
}

at::Tensor ExpertForward(const ExpertWeightsView& ew, const at::Tensor& x) {
  const int64_t inter = ew.intermediate, hidden = ew.hidden;
  if (x.is_cpu() && x.scalar_type() == at::kFloat && ew.dtype == DType::kBF16) {
    const auto matrix = [&](const void* bf16, const ExpertPlanes& planes, int64_t rows, int64_t cols) {
      kernels::GemmWeights w;
      w.bf16 = static_cast<const uint16_t*>(bf16);
      if (bf16 == nullptr) {
        w.e = planes.e;
        w.sm = planes.sm;
      }
      w.rows = rows;
      w.cols = cols;
      return w;
    };
    const kernels::GemmWeights gate = matrix(ew.gate, ew.gate_planes, inter, hidden);
    const kernels::GemmWeights up = matrix(ew.up, ew.up_planes, inter, hidden);
    const kernels::GemmWeights down = matrix(ew.down, ew.down_planes, hidden, inter);
    const std::vector<at::Tensor> gate_up = LinearCpuGroup(x, {gate, up});
    return LinearCpu(at::silu(gate_up[0]) * gate_up[1], down);
  }
  TORCH_CHECK(!ew.planes(), "layer ", ew.layer_id, " expert ", ew.expert_id,
              ": E/SM planes (fused recovery) are only computed on the CPU in float32");
  MlpWeights expert;  // CPU: F32 used in place, F16 widened (exact); GPU: converted for the device
  expert.gate = WrapExpertTensor(ew.gate, ew.dtype, inter, hidden).to(x.device(), x.scalar_type());
  expert.up = WrapExpertTensor(ew.up, ew.dtype, inter, hidden).to(x.device(), x.scalar_type());
  expert.down = WrapExpertTensor(ew.down, ew.dtype, hidden, inter).to(x.device(), x.scalar_type());
  return MlpForward(expert, x);
}

Result<at::Tensor> MoeForward(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                              const at::Tensor& x, ExpertProvider& provider) {
  const int64_t n = x.size(0), hidden = x.size(1), top_k = config.num_experts_per_tok;
  const at::Device device = x.device();
  const at::ScalarType dtype = x.scalar_type();

  // 1. Router in float32 (DeepSeek's MoEGate casts both operands; the CPU path is float32 anyway).
  const at::Tensor logits = Linear(x.to(at::kFloat), w.router);
  const at::Tensor scores = at::softmax(logits, -1).to(at::kCPU).contiguous();
  std::vector<int32_t> topk_ids(static_cast<size_t>(n * top_k));
  std::vector<float> topk_weights(static_cast<size_t>(n * top_k));
  SelectExperts(scores.data_ptr<float>(), n, RouterParamsFor(config), topk_ids.data(), topk_weights.data());
  const ExpertAssignment assign = GroupByExpert(topk_ids.data(), topk_weights.data(), n, top_k);

  // 2. Announce the layer.
  LayerRouting routing;
  routing.layer_id = layer_id;
  routing.expert_ids = assign.expert_ids;
  for (const auto& rows : assign.token_rows) routing.tokens_per_expert.push_back(static_cast<int32_t>(rows.size()));
  ZM_RETURN_IF_ERROR(provider.BeginLayer(routing));

  // 3. Compute each expert as it arrives; keep its weighted output for the ordered sum.
  const size_t n_selected = assign.expert_ids.size();
  std::vector<at::Tensor> outputs(n_selected);
  std::vector<at::Tensor> rows(n_selected);
  for (size_t i = 0; i < n_selected; ++i) {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, provider.NextReady());
    const ExpertWeightsView& ew = lease->weights();
    auto it = std::lower_bound(assign.expert_ids.begin(), assign.expert_ids.end(), ew.expert_id);
    if (ew.layer_id != layer_id || it == assign.expert_ids.end() || *it != ew.expert_id)
      return Status::InvalidArgument(fmt::format("layer {}: provider delivered layer {} expert {}, not requested",
                                                 layer_id, ew.layer_id, ew.expert_id));
    const size_t slot = static_cast<size_t>(it - assign.expert_ids.begin());
    if (outputs[slot].defined())
      return Status::InvalidArgument(
          fmt::format("layer {}: provider delivered expert {} twice", layer_id, ew.expert_id));
    if (ew.hidden != hidden || ew.intermediate != config.moe_intermediate_size)
      return Status::InvalidArgument(fmt::format(
          "layer {} expert {}: weights are [I={}, H={}], config expects [I={}, H={}]", layer_id, ew.expert_id,
          ew.intermediate, ew.hidden, config.moe_intermediate_size, hidden));
    const std::vector<int64_t>& token_rows = assign.token_rows[slot];
    rows[slot] = at::tensor(token_rows, at::TensorOptions().dtype(at::kLong)).to(device);
    const at::Tensor xe = x.index_select(0, rows[slot]);
    const at::Tensor weight = at::tensor(assign.weights[slot], at::TensorOptions().dtype(at::kFloat))
                                  .to(device, dtype)
                                  .unsqueeze(1);
    outputs[slot] = ExpertForward(ew, xe) * weight;  // expert(x) * routing_weights[top_x, idx, None]
  }
  ZM_RETURN_IF_ERROR(provider.EndLayer(layer_id));

  // 4. Ordered accumulation.
  at::Tensor y = at::zeros({n, hidden}, x.options());
  for (size_t i = 0; i < n_selected; ++i) y.index_add_(0, rows[i], outputs[i]);

  // 5. Shared experts.
  if (w.has_shared_expert) {
    at::Tensor shared = MlpForward(w.shared_expert, x);
    if (config.arch == ModelArch::kQwen2Moe) shared = at::sigmoid(Linear(x, w.shared_expert_gate)) * shared;
    y = y + shared;
  }
  return y;
}

}  // namespace zipmoe::executor
