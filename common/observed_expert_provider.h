// An ExpertProvider decorator that reports every layer's routing to a callback before forwarding
// the call (routing traces, popularity statistics), and otherwise behaves exactly like the wrapped
// provider. Borrowing: the inner provider must outlive this object. Thread-safety: as the inner one.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "common/expert_provider.h"

namespace zipmoe {

class ObservedExpertProvider : public ExpertProvider {
 public:
  using RoutingObserver = std::function<void(const LayerRouting&)>;
  ObservedExpertProvider(ExpertProvider* inner, RoutingObserver observer)
      : inner_(inner), observer_(std::move(observer)) {}

  Status BeginLayer(const LayerRouting& routing) override {
    if (observer_) observer_(routing.device_resident.empty() ? routing : routing.AllSelected());
    return inner_->BeginLayer(routing);
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override { return inner_->NextReady(); }
  bool NextIsReady() const override { return inner_->NextIsReady(); }
  Status EndLayer(int32_t layer_id) override { return inner_->EndLayer(layer_id); }
  // The inner provider's batch (a remote cache sends a batch's admissions in one message).
  void ReleaseAll(std::vector<std::unique_ptr<ExpertLease>>* leases) override { inner_->ReleaseAll(leases); }
  PrefetchMode prefetch_mode() const override { return inner_->prefetch_mode(); }
  int64_t device_f_slots() const override { return inner_->device_f_slots(); }
  void Prefetch(const LayerRouting& predicted) override { inner_->Prefetch(predicted); }
  bool SetReadyListener(std::function<void()> listener) override {
    return inner_->SetReadyListener(std::move(listener));
  }
  void CachedExperts(int32_t layer_id, int32_t n_experts, std::vector<uint8_t>* cached) const override {
    inner_->CachedExperts(layer_id, n_experts, cached);
  }

 private:
  ExpertProvider* inner_;  // borrowed
  RoutingObserver observer_;
};

}  // namespace zipmoe
