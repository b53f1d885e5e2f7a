#include "services/convert/compress.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <vector>

#include "common/bitfield.h"
#include "common/dtype.h"
#include "common/checkpoint/expert_names.h"
#include "common/checkpoint/fused_experts.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/checkpoint/manifest.h"
#include "common/parallel.h"
#include "common/checkpoint/safetensors.h"
#include "services/convert/compress_journal.h"

namespace zipmoe::convert {
namespace {

namespace fs = std::filesystem;

struct ExpertSource {
  ExpertTensorName id;
  TensorView view;  // fused: spec (name, kMXFP4, [rows, cols]) only, no data
  // gpt-oss's fused MXFP4 experts (common/checkpoint/fused_experts.h): the expert's tensor is made from
  // the fused ones when it is encoded, so that only a window of experts is ever copied at once.
  const Checkpoint* ckpt = nullptr;
  FusedExpertRef fused;
};

// One tensor after splitting and compression, before placement in experts.bin.
struct EncodedTensor {
  ExpertTensorInfo info;                    // chunk file offsets filled in at write time
  std::vector<std::vector<uint8_t>> bytes;  // per chunk, stored bytes
  uint64_t histogram[256] = {};        // of the exponent fields
  uint64_t scale_histogram[256] = {};  // of MXFP4's block scales (E8M0 bytes); zero for other dtypes
};

// BF16 bytes of `view`, rounding F16/F32 to nearest even (--convert-dtype only).
std::vector<uint16_t> RoundToBf16(const TensorView& view) {
  const int64_t n = view.spec.numel();
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float f;
    if (view.spec.dtype == DType::kF32) {
      std::memcpy(&f, view.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, view.data + 2 * i, 2);
      f = F16ToFloat(h);
    }
    out[static_cast<size_t>(i)] = FloatToBf16(f);
  }
  return out;
}

// The dtype an expert tensor is stored in: its own (BF16, F16, F32 and F8_E4M3 split losslessly), or
// BF16 for F16/F32 with --convert-dtype (FP8 is never converted: its block scales would no longer
// apply). Errors: kInvalidArgument naming a tensor of any other dtype.
Result<DType> StoredDType(const TensorView& view, bool convert_dtype) {
  const DType dtype = view.spec.dtype;
  if (dtype == DType::kBF16 || dtype == DType::kF8E4M3) return dtype;
  if (dtype == DType::kF16 || dtype == DType::kF32) return convert_dtype ? DType::kBF16 : dtype;
  return Status::InvalidArgument(fmt::format(
      "{}: expert tensor '{}' is {}, expected BF16, F16, F32 or F8_E4M3 (the dtypes with an exponent/sign-mantissa "
      "split)",
      view.file, view.spec.name, DTypeName(dtype)));
}

// Splits `n` values of `dtype` at `data` (the tensor's bytes; any alignment) into the E and SM planes.
void SplitPlanes(DType dtype, const uint8_t* data, int64_t n, std::vector<uint8_t>* e_plane,
                 std::vector<uint8_t>* sm_plane) {
  e_plane->resize(EPlaneBytes(dtype, n));
  sm_plane->resize(SmPlaneBytes(dtype, n));
  if (dtype == DType::kF32) {
    std::vector<uint32_t> v(static_cast<size_t>(n));
    std::memcpy(v.data(), data, v.size() * 4);
    SplitF32(v.data(), n, e_plane->data(), sm_plane->data());
    return;
  }
  if (dtype == DType::kF8E4M3) {
    SplitF8E4M3(data, n, e_plane->data(), sm_plane->data());
    return;
  }
  if (dtype == DType::kMXFP4) {
    SplitMxfp4(data, n, e_plane->data(), sm_plane->data());
    return;
  }
  std::vector<uint16_t> v(static_cast<size_t>(n));
  std::memcpy(v.data(), data, v.size() * 2);
  if (dtype == DType::kF16) {
    SplitF16(v.data(), n, e_plane->data(), sm_plane->data());
  } else {
    SplitBf16(v.data(), n, e_plane->data(), sm_plane->data());
  }
}

Result<EncodedTensor> EncodeTensor(const ExpertSource& src, const CompressOptions& opt) {
  EncodedTensor enc;
  ExpertTensorInfo& t = enc.info;
  t.name = src.view.spec.name;
  t.layer_id = src.id.layer_id;
  t.expert_id = src.id.expert_id;
  t.proj = src.id.proj;
  t.shape = src.view.spec.shape;
  t.codec = opt.codec.codec;
  t.level = opt.codec.level == 0 ? DefaultCodecLevel(opt.codec.codec) : opt.codec.level;

  const int64_t n = src.view.spec.numel();
  std::vector<uint8_t> e_plane, sm_plane;
  if (src.ckpt != nullptr) {  // an unfused expert (gpt-oss): its raw layout, then the planes
    t.dtype = src.fused.dtype;
    std::vector<uint8_t> raw(DTypeBytes(t.dtype, static_cast<uint64_t>(n)));
    ZM_RETURN_IF_ERROR(ReadFusedExpert(*src.ckpt, src.fused, raw.data()));
    if (Status st = t.dtype == DType::kMXFP4 ? CheckMxfp4Values(raw.data(), n) : Status::Ok(); !st.ok())
      return Status::InvalidArgument(fmt::format("{}: expert tensor '{}' (from the fused MXFP4 experts): {}",
                                                 src.ckpt->dir(), t.name, st.message()));
    t.bf16_xxh64 = Xxh64(raw.data(), raw.size());
    AccumulateMxfp4ScaleHistogram(raw.data(), n, enc.scale_histogram);  // nothing for a dense (BF16) release
    SplitPlanes(t.dtype, raw.data(), n, &e_plane, &sm_plane);
  } else {
    ZM_ASSIGN_OR_RETURN(t.dtype, StoredDType(src.view, opt.convert_dtype));
    if (t.dtype != src.view.spec.dtype) {  // --convert-dtype: rounded, lossy
      const std::vector<uint16_t> bf16 = RoundToBf16(src.view);
      t.bf16_xxh64 = Xxh64(bf16.data(), bf16.size() * 2);
      SplitPlanes(DType::kBF16, reinterpret_cast<const uint8_t*>(bf16.data()), n, &e_plane, &sm_plane);
    } else {
      t.bf16_xxh64 = Xxh64(src.view.data, src.view.size_bytes());  // of the original bytes, any dtype
      SplitPlanes(t.dtype, src.view.data, n, &e_plane, &sm_plane);
    }
  }
  AccumulateHistogram(e_plane.data(), n, enc.histogram);

  // MXFP4: K - 1 E-chunks of 2-bit fields, then one of the block scales (EChunkRanges); Compress refused K = 1.
  const auto ranges = EChunkRanges(t.dtype, n, opt.n_shards);
  t.n_shards = static_cast<int32_t>(ranges.size());
  const auto encode = [&](Codec c) -> Status {
    t.chunks.clear();
    enc.bytes.clear();
    const CodecOptions codec{c, t.level};
    for (const auto& [offset, count] : ranges) {
      std::vector<uint8_t> buf;
      ChunkInfo c{ChunkKind::kE, static_cast<uint64_t>(offset), static_cast<uint64_t>(count), 0, 0,
                  static_cast<uint64_t>(count), 0};
      ZM_RETURN_IF_ERROR(
          CompressEChunk(EChunkDType(t, c), codec, e_plane.data() + offset, static_cast<uint64_t>(count), &buf));
      c.stored_bytes = buf.size();
      c.xxh64 = Xxh64(buf.data(), buf.size());
      t.chunks.push_back(c);
      enc.bytes.push_back(std::move(buf));
    }
    return Status::Ok();
  };
  ZM_RETURN_IF_ERROR(encode(t.codec));
  // Where the codec does not shrink the exponent plane (small tensors whose frame overhead outweighs the
  // gain; MXFP4's 2-bit fields near their entropy with scales that do not compress either), its E-chunks
  // are stored raw (codec none): the reader decodes by the tensor's own codec, and the tensor is never
  // stored larger than its planes.
  uint64_t e_raw = 0;
  for (const ChunkInfo& c : t.chunks) e_raw += EChunkStreamBytes(EChunkDType(t, c), c.raw_bytes);
  if (t.codec != Codec::kNone && t.e_stored_bytes() >= e_raw) {
    t.codec = Codec::kNone;
    t.level = 0;
    ZM_RETURN_IF_ERROR(encode(t.codec));
  }
  t.chunks.push_back({ChunkKind::kSm, 0, static_cast<uint64_t>(n), 0, sm_plane.size(), sm_plane.size(),
                      Xxh64(sm_plane.data(), sm_plane.size())});
  enc.bytes.push_back(std::move(sm_plane));
  return enc;
}

// Files next to the weights that a runtime needs (tokenizer, generation config, ...), copied verbatim.
std::vector<std::string> ExtraFiles(const std::string& model_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if (ext == ".safetensors" || name == "model.safetensors.index.json") continue;
    if (ext == ".json" || ext == ".model" || ext == ".txt" || ext == ".py" || ext == ".jinja" || ext == ".tiktoken")
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Adds `histogram` to the entry of `dtype` in `per_dtype` (kept in DType order), creating it.
void AddHistogram(DType dtype, const uint64_t (&histogram)[256], std::vector<DTypeHistogram>* per_dtype) {
  auto it = std::find_if(per_dtype->begin(), per_dtype->end(),
                         [&](const DTypeHistogram& h) { return h.dtype >= dtype; });
  if (it == per_dtype->end() || it->dtype != dtype) it = per_dtype->insert(it, DTypeHistogram{dtype, {}});
  for (int s = 0; s < 256; ++s) it->counts[static_cast<size_t>(s)] += histogram[s];
}

Status CopyFileAtomic(const std::string& from, const std::string& to) {
  ZM_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(from));
  return WriteFileAtomic(to, bytes);
}

int ConfigInt(const nlohmann::json& config, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = config.find(k);
    if (it != config.end() && it->is_number_integer()) return it->get<int>();
  }
  return 0;
}

Status Commit(const std::string& tmp_dir, const std::string& out_dir, bool overwrite) {
  std::error_code ec;
  std::string old_dir;
  if (fs::exists(out_dir, ec)) {
    if (!overwrite) return Status::InvalidArgument(out_dir + ": exists (pass --force to replace it)");
    old_dir = out_dir + ".old." + std::to_string(::getpid());
    fs::rename(out_dir, old_dir, ec);
    if (ec) return Status::IoError(out_dir + ": rename to " + old_dir + ": " + ec.message());
  }
  fs::rename(tmp_dir, out_dir, ec);
  if (ec) return Status::IoError(tmp_dir + " -> " + out_dir + ": rename: " + ec.message());
  if (!old_dir.empty()) (void)RemoveTree(old_dir);  // the new directory is in place; a leftover is harmless
  return Status::Ok();
}

// The temporary directories an interrupted compress of `out_dir` left whose process is gone (SIGKILL,
// power loss): OUT.old.PID (the replaced directory of a --force run killed in Commit) and OUT.tmp.PID
// (the work directory of builds before OUT.partial): removed, so a rerun of the same command frees their
// space. A directory whose process still runs (another compress) is left alone. Returns how many went.
int64_t RemoveStaleTempDirs(const std::string& out_dir) {
  const fs::path out(out_dir);
  const std::string base = out.filename().string();
  std::error_code ec;
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  int64_t removed = 0;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* tag : {".tmp.", ".old."}) {
      const std::string prefix = base + tag;
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string digits = name.substr(prefix.size());
      if (digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const long long value = std::stoll(digits);
      if (value > INT32_MAX) continue;
      const pid_t pid = static_cast<pid_t>(value);
      if (pid <= 0 || pid == ::getpid() || (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
      if (RemoveTree(entry.path().string()).ok()) ++removed;
    }
  }
  return removed;
}

}  // namespace

Result<CompressSummary> CompressModel(const CompressOptions& options,
                                      const std::function<void(const CompressProgress&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  CompressOptions opt = options;
  // "out/" (a shell's completion) names the same directory as "out": without the slash, so the work
  // directory OUT.partial and a replaced OUT.old.PID sit beside OUT, not inside it.
  while (opt.out_dir.size() > 1 && opt.out_dir.back() == '/') opt.out_dir.pop_back();
  if (opt.n_shards < 1) return Status::InvalidArgument(fmt::format("--shards must be >= 1, got {}", opt.n_shards));
  std::error_code ec;
  {  // OUT_DIR must not be MODEL_DIR or a directory that holds it: replacing OUT would delete the checkpoint.
    std::error_code e1, e2;
    const fs::path model = fs::weakly_canonical(opt.model_dir, e1), out = fs::weakly_canonical(opt.out_dir, e2);
    if (!e1 && !e2) {
      const fs::path rel = model.lexically_relative(out);
      if (!rel.empty() && *rel.begin() != "..")
        return Status::InvalidArgument(fmt::format(
            "OUT_DIR {} is MODEL_DIR {} or holds it: writing the compressed model there would delete the checkpoint; "
            "choose another OUT_DIR",
            opt.out_dir, opt.model_dir));
    }
  }
  if (fs::exists(opt.out_dir, ec) && !opt.overwrite)
    return Status::InvalidArgument(opt.out_dir + ": exists (pass --force to replace it)");
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(opt.model_dir));

  // Classify tensors.
  std::vector<ExpertSource> experts;
  std::vector<TensorView> dense;
  const int64_t n_encoder_layers = EncoderLayerCount(ckpt->config());
  int64_t mtp_tensors = 0;
  uint64_t mtp_bytes = 0;
  const bool fused = HasFusedExperts(ckpt->config());
  for (const std::string& name : ckpt->names()) {
    ZM_ASSIGN_OR_RETURN(TensorView view, ckpt->Find(name));
    if (IsNotDecodedTensor(name, ckpt->config())) {
      ++mtp_tensors;
      mtp_bytes += view.spec.size_bytes();
      continue;
    }
    if (fused && IsFusedExpertTensor(name)) continue;  // stored per expert below
    if (auto id = ParseExpertTensorName(name, n_encoder_layers)) {
      if (view.spec.shape.size() != 2)
        return Status::InvalidArgument(fmt::format("{}: expert tensor '{}' has {} dims, expected 2", view.file, name,
                                                   view.spec.shape.size()));
      ZM_RETURN_IF_ERROR(StoredDType(view, opt.convert_dtype).status());  // names a tensor of another dtype
      ExpertSource src;
      src.id = *id;
      src.view = view;
      experts.push_back(std::move(src));
    } else {
      dense.push_back(view);
    }
  }
  if (fused) {
    ZM_ASSIGN_OR_RETURN(std::vector<FusedExpertRef> refs, ListFusedExperts(*ckpt));
    for (FusedExpertRef& r : refs) {
      ExpertSource src;
      src.id = r.id;
      src.view.spec.name = r.name;
      src.view.spec.dtype = r.dtype;
      src.view.spec.shape = r.shape;
      src.view.file = ckpt->dir();
      src.ckpt = ckpt.get();
      src.fused = std::move(r);
      experts.push_back(std::move(src));
    }
  }
  if (experts.empty())
    return Status::InvalidArgument(opt.model_dir + ": no routed-expert tensors (*.experts.N.*.weight) found");
  for (const ExpertSource& e : experts) {
    if (e.ckpt != nullptr && e.fused.dtype == DType::kMXFP4 && opt.n_shards < 2)
      return Status::InvalidArgument(fmt::format(
          "{}: --shards {}: MXFP4 expert tensors (e.g. '{}') need K >= 2 E-chunks, one of which holds the block "
          "scales (docs/format.md \"MXFP4\")",
          opt.model_dir, opt.n_shards, e.view.spec.name));
  }
  std::sort(experts.begin(), experts.end(), [](const ExpertSource& a, const ExpertSource& b) {
    return std::make_tuple(a.id.layer_id, a.id.expert_id, static_cast<int>(a.id.proj)) <
           std::make_tuple(b.id.layer_id, b.id.expert_id, static_cast<int>(b.id.proj));
  });

  const int64_t stale = RemoveStaleTempDirs(opt.out_dir);
  const int32_t level = opt.codec.level == 0 ? DefaultCodecLevel(opt.codec.codec) : opt.codec.level;
  std::vector<std::string> names;
  for (const ExpertSource& e : experts) names.push_back(e.view.spec.name);
  ZM_ASSIGN_OR_RETURN(std::string fingerprint,
                      CompressFingerprint(opt.model_dir,
                                          fmt::format("codec {} level {} shards {} convert_dtype {}",
                                                      CodecName(opt.codec.codec), level, opt.n_shards,
                                                      opt.convert_dtype ? 1 : 0),
                                          names));
  const std::string work_dir = opt.out_dir + ".partial";
  const auto failed = [&](const Status& st) {
    return Status(st.code(), fmt::format("{} (removed the partial output {})", st.message(), work_dir));
  };
  auto opened = CompressWorkDir::Open(work_dir, fingerprint, names);
  if (!opened.ok()) {  // a write that failed there (ENOSPC) frees what it made; a lock held by another run does not
    if (opened.status().code() != StatusCode::kIoError) return opened.status();
    (void)RemoveTree(work_dir);
    return failed(opened.status());
  }
  std::unique_ptr<CompressWorkDir> work = std::move(opened).value();
  // Any failure from here on removes the work directory (a kill keeps it for the next run).
  struct WorkGuard {
    std::string dir;
    bool keep = false;
    ~WorkGuard() {
      if (!keep) (void)RemoveTree(dir);
    }
  } guard{work_dir};
  if (!work->restart_reason().empty())
    std::fprintf(stderr, "%s", fmt::format("I: compress: {}: {}; starting over\n", work_dir, work->restart_reason()).c_str());
  if (!work->kept().empty())
    std::fprintf(stderr, "%s", fmt::format("I: compress: resuming {}: {} of {} expert tensors already written\n",
                                           opt.out_dir, work->kept().size(), experts.size()).c_str());

  Manifest m;
  m.arch = ConfigModelType(ckpt->config());
  m.config_json = ckpt->config().dump(2);
  m.codec = opt.codec.codec;
  m.level = level;
  m.n_shards = opt.n_shards;
  m.n_layers = ConfigInt(ckpt->config(), {"num_hidden_layers"});
  m.n_experts = ConfigInt(ckpt->config(), {"num_experts", "num_local_experts", "n_routed_experts"});

  CompressProgress prog;
  prog.tensors_total = static_cast<int64_t>(experts.size());
  // Adds a placed tensor (encoded now or resumed from the journal) to the manifest and the counts.
  const auto add_tensor = [&](size_t i, ExpertTensorInfo info, const uint64_t (&histogram)[256],
                              const uint64_t (&scale_histogram)[256]) {
    info.layer_id = experts[i].id.layer_id;
    info.expert_id = experts[i].id.expert_id;
    info.proj = experts[i].id.proj;
    info.shape = experts[i].view.spec.shape;
    for (int s = 0; s < 256; ++s) m.exponent_histogram[s] += histogram[s];
    for (int s = 0; s < 256; ++s) m.mxfp4_scale_histogram[s] += scale_histogram[s];
    AddHistogram(info.dtype, histogram, &m.exponent_histograms);
    info.record_xxh64 = RecordHash(info);
    prog.tensors_done++;
    prog.raw_bytes_done += info.raw_bytes();
    prog.stored_bytes_done += info.stored_bytes();
    m.expert_tensors.push_back(std::move(info));
  };
  for (const JournaledTensor& t : work->kept()) {
    uint64_t histogram[256], scale_histogram[256];
    std::copy(t.histogram.begin(), t.histogram.end(), histogram);
    std::copy(t.scale_histogram.begin(), t.scale_histogram.end(), scale_histogram);
    add_tensor(m.expert_tensors.size(), t.info, histogram, scale_histogram);
  }
  const int64_t resumed = prog.tensors_done;
  if (resumed > 0 && progress) progress(prog);

  // experts.bin: encode windows of tensors in parallel, write each window in order, then journal it.
  const int n_threads = ResolveThreadCount(opt.n_threads);
  const size_t window = static_cast<size_t>(n_threads) * 4;
  for (size_t begin = work->kept().size(); begin < experts.size(); begin += window) {
    const size_t end = std::min(experts.size(), begin + window);
    std::vector<Result<EncodedTensor>> encoded(end - begin, Status::Internal("not encoded"));
    ParallelFor(begin, end, n_threads, [&](size_t i) { encoded[i - begin] = EncodeTensor(experts[i], opt); });
    std::vector<JournaledTensor> journal;
    for (size_t i = begin; i < end; ++i) {
      Result<EncodedTensor>& r = encoded[i - begin];
      if (!r.ok()) return failed(r.status());
      EncodedTensor& enc = r.value();
      for (size_t c = 0; c < enc.bytes.size(); ++c) {
        if (Status st = work->PadTo(kChunkAlignmentBytes); !st.ok()) return failed(st);
        enc.info.chunks[c].file_offset = work->position();
        if (Status st = work->Write(enc.bytes[c].data(), enc.bytes[c].size()); !st.ok()) return failed(st);
      }
      JournaledTensor j;
      j.info = enc.info;
      std::copy(std::begin(enc.histogram), std::end(enc.histogram), j.histogram.begin());
      std::copy(std::begin(enc.scale_histogram), std::end(enc.scale_histogram), j.scale_histogram.begin());
      j.end = work->position();
      journal.push_back(std::move(j));
      add_tensor(i, std::move(enc.info), enc.histogram, enc.scale_histogram);
    }
    if (Status st = work->Journal(journal); !st.ok()) return failed(st);
    if (progress) progress(prog);
  }
  if (Status st = work->PadTo(kChunkAlignmentBytes); !st.ok()) return failed(st);
  m.experts_file_bytes = work->position();
  if (Status st = work->CloseExperts(); !st.ok()) return failed(st);
  // dense.safetensors: every non-expert tensor, bytes unchanged.
  std::vector<TensorSpec> dense_specs;
  std::unordered_map<std::string, const TensorView*> dense_by_name;
  for (const auto& v : dense) {
    dense_specs.push_back(v.spec);
    dense_by_name[v.spec.name] = &v;
    m.dense_tensors.push_back({v.spec.name, v.spec.shape, v.spec.dtype, Xxh64(v.data, v.size_bytes())});
  }
  if (Status st = WriteSafetensors(JoinPath(work_dir, kDenseFileName), dense_specs,
                                   [&](const TensorSpec& spec, uint8_t* out) {
                                     const TensorView* v = dense_by_name.at(spec.name);
                                     std::memcpy(out, v->data, v->size_bytes());
                                     return Status::Ok();
                                   });
      !st.ok())
    return failed(st);

  for (const std::string& name : ExtraFiles(opt.model_dir)) {
    if (Status st = CopyFileAtomic(JoinPath(opt.model_dir, name), JoinPath(work_dir, name)); !st.ok())
      return failed(st);
    m.source_files.push_back(name);
  }
  if (Status st = WriteFileAtomic(JoinPath(work_dir, kManifestFileName), SerializeManifest(m)); !st.ok())
    return failed(st);
  // The journal goes last: a kill before this point resumes with every tensor written.
  if (Status st = work->RemoveJournal(); !st.ok()) return failed(st);
  if (Status st = Commit(work_dir, opt.out_dir, opt.overwrite); !st.ok()) return failed(st);
  guard.keep = true;

  CompressSummary s;
  s.expert_tensors = static_cast<int64_t>(m.expert_tensors.size());
  s.dense_tensors = static_cast<int64_t>(m.dense_tensors.size());
  s.expert_bytes_raw = prog.raw_bytes_done;
  s.expert_bytes_stored = prog.stored_bytes_done;
  s.experts_file_bytes = m.experts_file_bytes;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.stale_temp_dirs_removed = stale;
  s.resumed_tensors = resumed;
  s.mtp_tensors_skipped = mtp_tensors;
  s.mtp_bytes_skipped = mtp_bytes;
  return s;
}

}  // namespace zipmoe::convert
