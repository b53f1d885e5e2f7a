#include "services/cache_manager/plan_profile.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "common/bitfield.h"
#include "common/codec.h"
#include "common/hash.h"
#include "kernels/recovery.h"
#include "common/file_util.h"
#include "common/checkpoint/manifest.h"

namespace zipmoe::cache_manager {
namespace {

constexpr uint64_t kDirectAlignBytes = kChunkAlignmentBytes;  // buffer, offset and length alignment

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, FreeDeleter>;

uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

// Reads experts.bin ranges with O_DIRECT, or buffered after evicting the range from the page cache.
class ChunkReader {
 public:
  static Result<ChunkReader> Open(const std::string& path, bool try_o_direct, uint64_t max_chunk_bytes) {
    ChunkReader r;
    r.path_ = path;
    r.capacity_ = RoundUp(std::max<uint64_t>(max_chunk_bytes, 1), kDirectAlignBytes);
    r.buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlignBytes, r.capacity_)));
    if (!r.buffer_) return Status::Internal(fmt::format("cannot allocate {} aligned bytes", r.capacity_));
    if (try_o_direct) {
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
      if (fd.valid()) {
        r.fd_ = std::move(fd);
        r.direct_ = true;
        return r;
      }
      if (errno == ENOENT) return Status::NotFound(fmt::format("{}: no such file", path));
      r.note_ = fmt::format("open(O_DIRECT): {}", std::strerror(errno));
    } else {
      r.note_ = "O_DIRECT not requested";
    }
    ZM_RETURN_IF_ERROR(r.OpenBuffered());
    return r;
  }

  // Reads [offset, offset + bytes) into buffer(); returns the elapsed µs of the read itself.
  Result<double> Read(uint64_t offset, uint64_t bytes) {
    const uint64_t length = direct_ ? RoundUp(bytes, kDirectAlignBytes) : bytes;
    if (length > capacity_) return Status::Internal(fmt::format("chunk of {} bytes > buffer {}", length, capacity_));
    if (!direct_) (void)::posix_fadvise(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(bytes),
                                        POSIX_FADV_DONTNEED);  // best effort: a cold read
    const auto start = std::chrono::steady_clock::now();
    uint64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pread(fd_.get(), buffer_.get() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct_ && done == 0) {
        // The file system accepted O_DIRECT at open but refuses the read: fall back to buffered.
        note_ = fmt::format("pread(O_DIRECT): {}", std::strerror(errno));
        ZM_RETURN_IF_ERROR(OpenBuffered());
        return Read(offset, bytes);
      }
      if (n < 0) return Status::IoError(fmt::format("{}@{}: read: {}", path_, offset + done, std::strerror(errno)));
      if (n == 0) return Status::IoError(fmt::format("{}@{}: unexpected end of file", path_, offset + done));
      done += static_cast<uint64_t>(n);
    }
    return MicrosSince(start);
  }

  const uint8_t* buffer() const { return buffer_.get(); }
  bool direct() const { return direct_; }
  const std::string& note() const { return note_; }

 private:
  Status OpenBuffered() {
    UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) return Status::NotFound(fmt::format("{}: no such file", path_));
      return Status::IoError(fmt::format("{}: open: {}", path_, std::strerror(errno)));
    }
    fd_ = std::move(fd);
    direct_ = false;
    return Status::Ok();
  }

  std::string path_;
  UniqueFd fd_;
  AlignedBuffer buffer_;
  uint64_t capacity_ = 0;
  bool direct_ = false;
  std::string note_;
};

}  // namespace

Result<StorageProfile> ProfileStorage(const std::string& dir, const ProfileOptions& options) {
  ZM_ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(dir));
  if (manifest.expert_tensors.empty()) {
    return Status::InvalidArgument(fmt::format("{}: manifest has no routed-expert tensors to profile", dir));
  }
  std::vector<size_t> order(manifest.expert_tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(std::max(options.max_tensors, 1))));

  uint64_t max_chunk = 0;
  for (size_t i : order) {
    for (const ChunkInfo& c : manifest.expert_tensors[i].chunks) max_chunk = std::max(max_chunk, c.stored_bytes);
  }
  const std::string path = JoinPath(dir, manifest.experts_file);
  ZM_ASSIGN_OR_RETURN(ChunkReader reader, ChunkReader::Open(path, options.try_o_direct, max_chunk));

  StorageProfile profile;
  profile.codec = CodecName(manifest.codec);
  profile.n_shards = manifest.n_shards;
  double sm_us = 0, e_us = 0, dec_us = 0, sm_bytes = 0, e_bytes = 0, raw_bytes = 0;
  std::vector<uint8_t> stored, decoded, e_plane, sm_plane;
  std::vector<uint32_t> recovered;  // uint32 words: aligned for every expert dtype
  double rec_us = 0;
  int64_t recoveries = 0;
  volatile uint64_t hash_sink = 0;
  for (size_t i : order) {
    const ExpertTensorInfo& t = manifest.expert_tensors[i];
    e_plane.assign(EPlaneBytes(t.dtype, t.numel()), 0);
    for (size_t ci = 0; ci < t.chunks.size(); ++ci) {
      const ChunkInfo& c = t.chunks[ci];
      ZM_ASSIGN_OR_RETURN(double us, reader.Read(c.file_offset, c.stored_bytes));
      if (c.kind == ChunkKind::kSm) {
        sm_us += us;
        sm_bytes += static_cast<double>(c.stored_bytes);
        ++profile.sm_reads;
        // CPU recovery as the runtime's workers run it: SM + E planes -> the tensor in its dtype (BF16,
        // F16 or F32), then the hash check.
        const uint64_t sm_size = SmPlaneBytes(t.dtype, t.numel());
        sm_plane.assign(reader.buffer(), reader.buffer() + std::min<uint64_t>(c.stored_bytes, sm_size));
        sm_plane.resize(sm_size);
        recovered.resize(static_cast<size_t>((t.raw_bytes() + 3) / 4));
        const auto start = std::chrono::steady_clock::now();
        ZM_RETURN_IF_ERROR(
            kernels::RecoverCpu(t.dtype, e_plane.data(), sm_plane.data(), recovered.data(), t.numel()));
        hash_sink = Xxh64(recovered.data(), t.raw_bytes());  // volatile: the hash is not optimised away
        rec_us += MicrosSince(start);
        ++recoveries;
        continue;
      }
      e_us += us;
      e_bytes += static_cast<double>(c.stored_bytes);
      ++profile.e_reads;
      stored.assign(reader.buffer(), reader.buffer() + c.stored_bytes);
      decoded.resize(c.raw_bytes);
      for (int32_t rep = 0; rep < std::max(options.decode_repeats, 1); ++rep) {
        const auto start = std::chrono::steady_clock::now();
        Status st =
            DecompressEChunk(EChunkDType(t, c), t.codec, stored.data(), c.stored_bytes, decoded.data(), c.raw_bytes);
        dec_us += MicrosSince(start);
        if (!st.ok()) {
          return st.WithContext(fmt::format("{}@{}: E-chunk {} of '{}' (layer {}, expert {})", path, c.file_offset,
                                            ci, t.name, t.layer_id, t.expert_id));
        }
        raw_bytes += static_cast<double>(c.raw_bytes);
        ++profile.decodes;
      }
      if (c.elem_offset + c.raw_bytes <= e_plane.size()) {
        std::copy(decoded.begin(), decoded.end(), e_plane.begin() + static_cast<std::ptrdiff_t>(c.elem_offset));
      }
    }
  }
  (void)hash_sink;
  profile.io_mode = reader.direct() ? "o_direct" : "buffered";
  profile.io_note = reader.direct() ? "" : reader.note();
  auto mean = [](double total, int64_t n) { return n > 0 ? total / static_cast<double>(n) : 0.0; };
  profile.sm_read_us = mean(sm_us, profile.sm_reads);
  profile.e_read_us = mean(e_us, profile.e_reads);
  profile.decompress_us = mean(dec_us, profile.decodes);
  profile.recovery_us = mean(rec_us, recoveries);
  profile.sm_chunk_bytes = mean(sm_bytes, profile.sm_reads);
  profile.e_chunk_stored_bytes = mean(e_bytes, profile.e_reads);
  profile.e_chunk_raw_bytes = mean(raw_bytes, profile.decodes);
  return profile;
}

nlohmann::json StorageProfileToJson(const StorageProfile& p) {
  return nlohmann::json{{"version", p.version},
                        {"sm_read_us", p.sm_read_us},
                        {"e_read_us", p.e_read_us},
                        {"decompress_us", p.decompress_us},
                        {"recovery_us", p.recovery_us},
                        {"expert_compute_us", p.expert_compute_us},
                        {"sm_chunk_bytes", p.sm_chunk_bytes},
                        {"e_chunk_stored_bytes", p.e_chunk_stored_bytes},
                        {"e_chunk_raw_bytes", p.e_chunk_raw_bytes},
                        {"io_mode", p.io_mode},
                        {"io_note", p.io_note},
                        {"sm_reads", p.sm_reads},
                        {"e_reads", p.e_reads},
                        {"decodes", p.decodes},
                        {"codec", p.codec},
                        {"n_shards", p.n_shards}};
}

Result<StorageProfile> StorageProfileFromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: not a JSON object", where));
  StorageProfile p;
  auto number = [&](const char* key, bool required, double* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) {
      return required ? Status::InvalidArgument(fmt::format("{}: missing \"{}\"", where, key)) : Status::Ok();
    }
    if (!it->is_number() || it->get<double>() < 0) {
      return Status::InvalidArgument(fmt::format("{}: \"{}\" = {}: expected a number >= 0", where, key, it->dump()));
    }
    *out = it->get<double>();
    return Status::Ok();
  };
  double version = 0;
  ZM_RETURN_IF_ERROR(number("version", true, &version));
  if (version != kProfileVersion) {
    return Status::InvalidArgument(fmt::format("{}: profile version {}, expected {}", where, version, kProfileVersion));
  }
  ZM_RETURN_IF_ERROR(number("sm_read_us", true, &p.sm_read_us));
  ZM_RETURN_IF_ERROR(number("e_read_us", true, &p.e_read_us));
  ZM_RETURN_IF_ERROR(number("decompress_us", true, &p.decompress_us));
  ZM_RETURN_IF_ERROR(number("recovery_us", false, &p.recovery_us));
  ZM_RETURN_IF_ERROR(number("expert_compute_us", false, &p.expert_compute_us));
  ZM_RETURN_IF_ERROR(number("sm_chunk_bytes", false, &p.sm_chunk_bytes));
  ZM_RETURN_IF_ERROR(number("e_chunk_stored_bytes", false, &p.e_chunk_stored_bytes));
  ZM_RETURN_IF_ERROR(number("e_chunk_raw_bytes", false, &p.e_chunk_raw_bytes));
  double count = 0;
  ZM_RETURN_IF_ERROR(number("sm_reads", false, &count));
  p.sm_reads = static_cast<int64_t>(count);
  count = 0;
  ZM_RETURN_IF_ERROR(number("e_reads", false, &count));
  p.e_reads = static_cast<int64_t>(count);
  count = 0;
  ZM_RETURN_IF_ERROR(number("decodes", false, &count));
  p.decodes = static_cast<int64_t>(count);
  count = 0;
  ZM_RETURN_IF_ERROR(number("n_shards", false, &count));
  p.n_shards = static_cast<int32_t>(count);
  for (auto [key, out] : {std::pair{"io_mode", &p.io_mode}, std::pair{"io_note", &p.io_note},
                          std::pair{"codec", &p.codec}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string()) return Status::InvalidArgument(fmt::format("{}: \"{}\" is not a string", where, key));
    *out = it->get<std::string>();
  }
  return p;
}

Status WriteStorageProfile(const std::string& path, const StorageProfile& profile) {
  return WriteFileAtomic(path, StorageProfileToJson(profile).dump(2) + "\n");
}

Result<StorageProfile> ReadStorageProfile(const std::string& path) {
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(fmt::format("{}: not valid JSON", path));
  return StorageProfileFromJson(j, path);
}

CostModel CostModelFromProfile(const StorageProfile& profile, const ModelPlanInputs& model, int32_t n_workers) {
  CostModel cost;
  cost.sm_read_us = profile.sm_read_us;
  cost.e_read_us = profile.e_read_us;
  cost.decompress_us = profile.decompress_us;
  cost.recovery_us = profile.recovery_us;
  cost.expert_compute_us = profile.expert_compute_us;
  cost.n_shards = std::max(1, model.n_shards);
  cost.n_workers = std::max(1, n_workers);
  cost.tensors_per_expert = std::max(1, model.tensors_per_expert);
  return cost;
}

}  // namespace zipmoe::cache_manager
