#include "services/pipeline/engines.h"

#include <utility>

namespace zipmoe::runtime {
namespace {

class LocalReadEngine : public ReadEngine {
 public:
  explicit LocalReadEngine(std::unique_ptr<storage::StorageService> service) : service_(std::move(service)) {}
  Status Submit(std::vector<storage::ReadOp> ops) override { return service_->Submit(std::move(ops)); }
  void Stop() override { service_->Stop(); }
  bool direct_io() const override { return service_->direct_io(); }

 private:
  std::unique_ptr<storage::StorageService> service_;
};

class LocalDecodeEngine : public DecodeEngine {
 public:
  explicit LocalDecodeEngine(std::unique_ptr<decompressor::DecompressorPool> pool) : pool_(std::move(pool)) {}
  Status Add(decompressor::DecompressOp op, bool ready) override { return pool_->Add(std::move(op), ready); }
  Status MarkReady(uint64_t op_id) override { return pool_->MarkReady(op_id); }
  Status Cancel(uint64_t op_id, Status reason) override { return pool_->Cancel(op_id, std::move(reason)); }
  void Stop() override { pool_->Stop(); }

 private:
  std::unique_ptr<decompressor::DecompressorPool> pool_;
};

}  // namespace

Result<Engines> CreateLocalEngines(const EngineSetup& setup) {
  storage::StorageConfig storage_config;
  storage_config.path = setup.experts_path;
  storage_config.page_cache = setup.page_cache;
  storage_config.on_complete = setup.on_read;
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<storage::StorageService> storage, storage::StorageService::Create(storage_config));
  decompressor::DecompressorConfig pool_config;
  pool_config.n_workers = setup.n_workers;
  pool_config.on_complete = setup.on_decode;
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<decompressor::DecompressorPool> pool,
                      decompressor::DecompressorPool::Create(pool_config));
  Engines engines;
  engines.reads = std::make_unique<LocalReadEngine>(std::move(storage));
  engines.decodes = std::make_unique<LocalDecodeEngine>(std::move(pool));
  return engines;
}

}  // namespace zipmoe::runtime
