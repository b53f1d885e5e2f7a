// The read and decode engines of the scheduler process: OffloadExpertProvider's ReadEngine /
// DecodeEngine (engines.h) over a WorkerDispatcher (worker_dispatcher.h), i.e. over the storage and
// decompressor worker processes. RemoteEngineFactory is declared in worker_dispatcher.h.
#include <memory>
#include <utility>

#include "services/links/worker_dispatcher.h"

namespace zipmoe::runtime {

namespace {

class RemoteReadEngine : public ReadEngine {
 public:
  explicit RemoteReadEngine(std::shared_ptr<WorkerDispatcher> d) : d_(std::move(d)) {}
  Status Submit(std::vector<storage::ReadOp> ops) override { return d_->SubmitReads(std::move(ops)); }
  void Stop() override { d_->Stop(); }
  bool direct_io() const override { return d_->config().direct_io; }

 private:
  std::shared_ptr<WorkerDispatcher> d_;
};

class RemoteDecodeEngine : public DecodeEngine {
 public:
  explicit RemoteDecodeEngine(std::shared_ptr<WorkerDispatcher> d) : d_(std::move(d)) {}
  Status Add(decompressor::DecompressOp op, bool ready) override { return d_->AddDecode(std::move(op), ready); }
  Status MarkReady(uint64_t op_id) override { return d_->MarkReady(op_id); }
  Status Cancel(uint64_t op_id, Status reason) override { return d_->Cancel(op_id, std::move(reason)); }
  void Stop() override { d_->Stop(); }

 private:
  std::shared_ptr<WorkerDispatcher> d_;
};

}  // namespace

EngineFactory RemoteEngineFactory(zmq::context_t& context, DispatcherConfig config,
                                  std::shared_ptr<WorkerDispatcher>* out) {
  return [&context, config = std::move(config), out](const EngineSetup& setup) -> Result<Engines> {
    ZM_ASSIGN_OR_RETURN(std::shared_ptr<WorkerDispatcher> d, WorkerDispatcher::Start(context, config, setup));
    if (out != nullptr) *out = d;
    Engines engines;
    engines.reads = std::make_unique<RemoteReadEngine>(d);
    engines.decodes = std::make_unique<RemoteDecodeEngine>(d);
    return engines;
  };
}

}  // namespace zipmoe::runtime
