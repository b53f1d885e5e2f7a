// switch_transformers forward pass (switch_model.h); the HF modules each part follows are named at it.
#include "services/executor/switch_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/trace_events.h"
#include "services/executor/moe_block.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {

int64_t RelativePositionBucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                               int64_t max_distance) {
  int64_t bucket = 0;
  int64_t n = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative_position > 0) bucket += num_buckets;
    n = relative_position < 0 ? -relative_position : relative_position;
  } else {
    n = -std::min<int64_t>(relative_position, 0);
  }
  const int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return bucket + n;
  // torch: log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact),
  // each operation in float32 (the Python scalars are converted to float), then truncated to long.
  const float ratio = static_cast<float>(n) / static_cast<float>(max_exact);
  const float log_range = static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / log_range * static_cast<float>(num_buckets - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(scaled), num_buckets - 1);
  return bucket + large;
}

SwitchRoute RouteTop1WithCapacity(const float* probs, int64_t n_experts, const std::vector<int64_t>& starts,
                                  const std::vector<int64_t>& lengths, int64_t capacity) {
  int64_t n_tokens = 0;
  for (size_t i = 0; i < starts.size(); ++i) n_tokens = std::max(n_tokens, starts[i] + lengths[i]);
  SwitchRoute r;
  r.expert.assign(static_cast<size_t>(n_tokens), -1);
  r.prob.assign(static_cast<size_t>(n_tokens), 0.0f);
  std::vector<int64_t> count(static_cast<size_t>(n_experts));
  for (size_t i = 0; i < starts.size(); ++i) {
    std::fill(count.begin(), count.end(), 0);  // token_priority: cumsum over this sequence only
    for (int64_t t = starts[i]; t < starts[i] + lengths[i]; ++t) {
      const float* row = probs + t * n_experts;
      const int64_t e = std::max_element(row, row + n_experts) - row;  // torch.argmax: first maximum
      r.prob[static_cast<size_t>(t)] = row[e];
      if (++count[static_cast<size_t>(e)] <= capacity) r.expert[static_cast<size_t>(t)] = static_cast<int32_t>(e);
    }
  }
  return r;
}

namespace {

// One sequence's rows of x [N, heads*d_kv] as [heads, t, d_kv].
at::Tensor Heads(const at::Tensor& x, int64_t start, int64_t len, int64_t heads, int64_t d_kv) {
  return x.narrow(0, start, len).view({len, heads, d_kv}).transpose(0, 1).contiguous();
}

// softmax(q kᵀ + bias) v (SwitchTransformersAttention.forward, no scaling): q [h, t, d], k/v [h, T, d],
// bias [h, t, T] float32 or undefined -> [t, h*d].
at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias) {
  at::Tensor scores = at::matmul(q, k.transpose(1, 2));
  if (bias.defined()) scores = scores + bias.to(scores.scalar_type());
  const at::Tensor probs = at::softmax(scores.to(at::kFloat), -1).to(q.scalar_type());
  const at::Tensor out = at::matmul(probs, v);  // [h, t, d]
  return out.transpose(0, 1).reshape({q.size(1), q.size(0) * q.size(2)});
}

// compute_bias for queries at positions [q0, q0 + t) and keys [0, total): [heads, t, total] float32 on
// `table`'s device; in the decoder keys after their query are masked with -inf (the causal mask).
at::Tensor PositionBias(const ModelConfig& c, const at::Tensor& table, int64_t q0, int64_t t, int64_t total,
                        bool decoder) {
  std::vector<int64_t> buckets(static_cast<size_t>(t * total));
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < total; ++j)
      buckets[static_cast<size_t>(i * total + j)] = RelativePositionBucket(
          j - (q0 + i), !decoder, c.relative_attention_num_buckets, c.relative_attention_max_distance);
  const at::Tensor idx = at::tensor(buckets, at::TensorOptions().dtype(at::kLong)).to(table.device());
  at::Tensor bias = table.index_select(0, idx).view({t, total, table.size(1)}).permute({2, 0, 1}).contiguous();
  if (decoder && t > 1) {  // a single query is the last position: nothing to mask
    const at::TensorOptions long_opts = at::TensorOptions().dtype(at::kLong).device(table.device());
    const at::Tensor qpos = at::arange(q0, q0 + t, long_opts).unsqueeze(1);
    const at::Tensor kpos = at::arange(0, total, long_opts).unsqueeze(0);
    bias = bias.masked_fill((kpos > qpos).unsqueeze(0), -std::numeric_limits<float>::infinity());
  }
  return bias;
}

}  // namespace

struct SwitchModel::Batch {
  std::vector<int64_t> starts, lengths;  // rows of each sequence in this stack's input
  std::vector<int64_t> pos0;             // decoder: first new position of each sequence
  std::vector<KvCache*> caches;          // decoder: the sequences' caches
  std::vector<at::Tensor> encoder_bias;  // encoder: [heads, t, t] per sequence (shared by every block)
};

SwitchModel::SwitchModel(const LoadedModel& model, ExpertProvider* provider, at::Device device, at::ScalarType dtype)
    : model_(model), provider_(provider), device_(device), dtype_(dtype) {}

Result<at::Tensor> SwitchModel::SparseFf(int32_t layer_id, const SwitchBlockWeights& w, const at::Tensor& x,
                                         const Batch& batch) {
  const ModelConfig& c = model_.config;
  if (provider_ == nullptr)
    return Status::InvalidArgument(fmt::format("layer {} is a MoE layer but no expert provider is set", layer_id));
  // Top1Router._compute_router_probabilities: classifier(x.float()), softmax in float32.
  const at::Tensor probs = at::softmax(Linear(x.to(at::kFloat), w.router), -1).to(at::kCPU).contiguous();
  const SwitchRoute route = RouteTop1WithCapacity(probs.data_ptr<float>(), c.num_experts, batch.starts,
                                                  batch.lengths, c.expert_capacity);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(c.num_experts));
  for (size_t t = 0; t < route.expert.size(); ++t)
    if (route.expert[t] >= 0) rows[static_cast<size_t>(route.expert[t])].push_back(static_cast<int64_t>(t));
  LayerRouting routing;
  routing.layer_id = layer_id;
  for (int32_t e = 0; e < c.num_experts; ++e) {
    if (rows[static_cast<size_t>(e)].empty()) continue;
    routing.expert_ids.push_back(e);
    routing.tokens_per_expert.push_back(static_cast<int32_t>(rows[static_cast<size_t>(e)].size()));
  }
  at::Tensor next_states = at::zeros_like(x);  // dropped tokens stay 0 (SwitchTransformersSparseMLP)
  if (!routing.expert_ids.empty()) {
    ZM_RETURN_IF_ERROR(provider_->BeginLayer(routing));
    std::vector<bool> delivered(routing.expert_ids.size(), false);
    for (size_t n = 0; n < routing.expert_ids.size(); ++n) {
      ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, provider_->NextReady());
      const ExpertWeightsView& ew = lease->weights();
      const auto it = std::lower_bound(routing.expert_ids.begin(), routing.expert_ids.end(), ew.expert_id);
      if (ew.layer_id != layer_id || it == routing.expert_ids.end() || *it != ew.expert_id ||
          delivered[static_cast<size_t>(it - routing.expert_ids.begin())])
        return Status::InvalidArgument(fmt::format("layer {}: provider delivered layer {} expert {}, not requested",
                                                   layer_id, ew.layer_id, ew.expert_id));
      delivered[static_cast<size_t>(it - routing.expert_ids.begin())] = true;
      if (ew.gated || ew.hidden != c.hidden_size || ew.intermediate != c.intermediate_size)
        return Status::InvalidArgument(fmt::format(
            "layer {} expert {}: a {} expert [I={}, H={}], switch_transformers expects wi/wo [I={}, H={}]", layer_id,
            ew.expert_id, ew.gated ? "gate/up/down" : "wi/wo", ew.intermediate, ew.hidden, c.intermediate_size,
            c.hidden_size));
      const at::Tensor idx =
          at::tensor(rows[static_cast<size_t>(ew.expert_id)], at::TensorOptions().dtype(at::kLong)).to(x.device());
      next_states.index_copy_(0, idx, ExpertForward(ew, x.index_select(0, idx)));
    }
    ZM_RETURN_IF_ERROR(provider_->EndLayer(layer_id));
  }
  const at::Tensor prob = at::tensor(route.prob, at::TensorOptions().dtype(at::kFloat)).to(x.device(), x.scalar_type());
  return prob.unsqueeze(1) * next_states;  // router_probs * next_states
}

Result<at::Tensor> SwitchModel::Stack(bool decoder, const at::Tensor& h_in, Batch& batch) {
  const ModelConfig& c = model_.config;
  const SwitchWeights& sw = model_.switch_weights;
  const int64_t heads = c.num_attention_heads, d_kv = c.head_dim;
  const int64_t first = decoder ? c.num_encoder_layers : 0;
  const int64_t n_blocks = decoder ? c.num_decoder_layers : c.num_encoder_layers;
  at::Tensor h = h_in;
  std::vector<at::Tensor> decoder_bias(batch.starts.size());
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int32_t l = static_cast<int32_t>(first + b);
    const SwitchBlockWeights& w = sw.blocks[static_cast<size_t>(l)];
    trace::TraceSpan attention_span("layer", [&] { return fmt::format("attention {}", l); });
    // SwitchTransformersLayerSelfAttention
    const at::Tensor x = RmsNorm(h, w.self_attn_norm, c.rms_norm_eps);
    const std::vector<at::Tensor> qkv =
        Linears(x, {{w.q.weight, at::Tensor()}, {w.k.weight, at::Tensor()}, {w.v.weight, at::Tensor()}});
    std::vector<at::Tensor> outs;
    for (size_t i = 0; i < batch.starts.size(); ++i) {
      const int64_t s = batch.starts[i], t = batch.lengths[i];
      const at::Tensor q = Heads(qkv[0], s, t, heads, d_kv);
      at::Tensor k = Heads(qkv[1], s, t, heads, d_kv);
      at::Tensor v = Heads(qkv[2], s, t, heads, d_kv);
      if (decoder) {
        std::tie(k, v) = batch.caches[i]->Append(b, k, v);
        if (b == 0) decoder_bias[i] = PositionBias(c, sw.decoder_position_bias, batch.pos0[i], t, k.size(1), true);
        outs.push_back(Attend(q, k, v, decoder_bias[i]));
      } else {
        if (b == 0) batch.encoder_bias[i] = PositionBias(c, sw.encoder_position_bias, 0, t, t, false);
        outs.push_back(Attend(q, k, v, batch.encoder_bias[i]));
      }
    }
    h = h + Linear(at::cat(outs, 0), w.o.weight);
    if (decoder) {  // SwitchTransformersLayerCrossAttention: no position bias, K/V from the encoder
      const at::Tensor y = RmsNorm(h, w.cross_attn_norm, c.rms_norm_eps);
      const at::Tensor cq = Linear(y, w.cross_q.weight);
      std::vector<at::Tensor> cross_outs;
      for (size_t i = 0; i < batch.starts.size(); ++i) {
        const auto& kv = batch.caches[i]->cross()[static_cast<size_t>(b)];
        cross_outs.push_back(Attend(Heads(cq, batch.starts[i], batch.lengths[i], heads, d_kv), kv.first, kv.second,
                                    at::Tensor()));
      }
      h = h + Linear(at::cat(cross_outs, 0), w.cross_o.weight);
    }
    attention_span.End();
    // SwitchTransformersLayerFF
    const trace::TraceSpan ff_span("layer", [&] { return fmt::format("{} {}", w.is_moe ? "moe" : "mlp", l); });
    const at::Tensor f = RmsNorm(h, w.ff_norm, c.rms_norm_eps);
    if (w.is_moe) {
      ZM_ASSIGN_OR_RETURN(at::Tensor moe, SparseFf(l, w, f, batch));
      h = h + moe;
    } else {
      h = h + Linear(at::relu(Linear(f, w.wi)), w.wo);
    }
  }
  return h;
}

Result<at::Tensor> SwitchModel::Forward(const std::vector<const std::vector<int32_t>*>& tokens,
                                        const std::vector<KvCache*>& caches, bool all_logits) {
  const ModelConfig& c = model_.config;
  const SwitchWeights& sw = model_.switch_weights;
  if (tokens.empty() || tokens.size() != caches.size())
    return Status::InvalidArgument(fmt::format("Forward: {} token lists for {} caches", tokens.size(), caches.size()));
  // Encoder inputs (sequences without encoder state) and decoder inputs of every sequence.
  Batch enc, dec;
  std::vector<int64_t> enc_ids, dec_ids;
  std::vector<size_t> enc_seq;  // sequence index of each encoder batch entry
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<int32_t>& seq = *tokens[i];
    if (seq.empty()) return Status::InvalidArgument(fmt::format("Forward: sequence {} has no new tokens", i));
    for (int32_t id : seq)
      if (id < 0 || id >= c.vocab_size)
        return Status::InvalidArgument(
            fmt::format("sequence {}: token id {} is outside the vocabulary [0, {})", i, id, c.vocab_size));
    const bool encode = !caches[i]->has_cross();
    const int64_t len = static_cast<int64_t>(seq.size());
    const int64_t dec_len = encode ? 1 : len;
    if ((encode ? len : caches[i]->length() + len) > c.max_position_embeddings)
      return Status::InvalidArgument(fmt::format("sequence {}: {} {} tokens exceed the limit {} of {}", i,
                                                 encode ? len : caches[i]->length() + len,
                                                 encode ? "encoder" : "decoder", c.max_position_embeddings, c.source));
    if (encode) {
      enc.starts.push_back(static_cast<int64_t>(enc_ids.size()));
      enc.lengths.push_back(len);
      enc_ids.insert(enc_ids.end(), seq.begin(), seq.end());
      enc_seq.push_back(i);
      dec_ids.push_back(c.decoder_start_token_id);
    } else {
      dec_ids.insert(dec_ids.end(), seq.begin(), seq.end());
    }
    dec.starts.push_back(static_cast<int64_t>(dec_ids.size()) - dec_len);
    dec.lengths.push_back(dec_len);
    dec.pos0.push_back(caches[i]->length());
    dec.caches.push_back(caches[i]);
  }
  enc.encoder_bias.resize(enc.starts.size());

  at::Tensor logits;
  const trace::TraceSpan step_span("step", [&] {
    return trace::SpanText(fmt::format("forward {} encoder + {} decoder tokens", enc_ids.size(), dec_ids.size()),
                           fmt::format(R"({{"tokens": {}, "sequences": {}}})", enc_ids.size() + dec_ids.size(),
                                       tokens.size()));
  }, trace::Activity::kForward);
  ZM_RETURN_IF_ERROR(TorchBoundary("forward", [&]() -> Status {
    const at::TensorOptions long_opts = at::TensorOptions().dtype(at::kLong);
    const auto embed = [&](const std::vector<int64_t>& ids) {
      return sw.shared.index_select(0, at::tensor(ids, long_opts).to(sw.shared.device())).to(device_, dtype_);
    };
    if (!enc_ids.empty()) {
      ZM_ASSIGN_OR_RETURN(at::Tensor h, Stack(false, embed(enc_ids), enc));
      const at::Tensor out = RmsNorm(h, sw.encoder_final_norm, c.rms_norm_eps);
      for (size_t e = 0; e < enc_seq.size(); ++e) {
        std::vector<std::pair<at::Tensor, at::Tensor>> cross;
        const at::Tensor rows = out.narrow(0, enc.starts[e], enc.lengths[e]);
        for (int64_t b = 0; b < c.num_decoder_layers; ++b) {
          const SwitchBlockWeights& w = model_.switch_weights.blocks[static_cast<size_t>(c.num_encoder_layers + b)];
          const std::vector<at::Tensor> kv = Linears(rows, {{w.cross_k.weight, at::Tensor()}, {w.cross_v.weight, at::Tensor()}});
          cross.emplace_back(Heads(kv[0], 0, enc.lengths[e], c.num_attention_heads, c.head_dim),
                             Heads(kv[1], 0, enc.lengths[e], c.num_attention_heads, c.head_dim));
        }
        caches[enc_seq[e]]->set_cross(std::move(cross));
      }
    }
    ZM_ASSIGN_OR_RETURN(at::Tensor h, Stack(true, embed(dec_ids), dec));
    if (!all_logits) {
      std::vector<int64_t> last;
      for (size_t i = 0; i < dec.starts.size(); ++i) last.push_back(dec.starts[i] + dec.lengths[i] - 1);
      h = h.index_select(0, at::tensor(last, long_opts).to(device_));
    }
    h = RmsNorm(h, sw.decoder_final_norm, c.rms_norm_eps);
    // SwitchTransformersForConditionalGeneration: rescale before projecting on the vocabulary when tied.
    if (c.tie_word_embeddings) h = h * std::pow(static_cast<double>(c.hidden_size), -0.5);
    logits = Linear(h, sw.lm_head).to(at::kCPU, at::kFloat).contiguous();
    return Status::Ok();
  }));
  for (size_t i = 0; i < caches.size(); ++i) caches[i]->Advance(dec.lengths[i]);
  return logits;
}

}  // namespace zipmoe::executor
