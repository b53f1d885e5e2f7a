#include "services/convert/compress_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/build_info.h"
#include "common/hash.h"

namespace zipmoe::convert {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'Z', 'M', 'C', 'J', 'R', 'N', 'L', '1'};
constexpr uint32_t kMaxRecordBytes = 1u << 24;  // a record holds a few dozen chunks: far below

std::string Errno() { return std::strerror(errno); }

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));  // little-endian hosts only (as the rest)
}
void PutString(std::string* out, const std::string& s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Bounds-checked reads of a record; `ok` turns false on the first read past the end.
struct Reader {
  const char* p;
  size_t left;
  bool ok = true;
  template <typename T>
  T Get() {
    T v{};
    if (left < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    left -= sizeof(T);
    return v;
  }
  std::string GetString() {
    const uint32_t n = Get<uint32_t>();
    if (!ok || left < n) {
      ok = false;
      return {};
    }
    std::string s(p, n);
    p += n;
    left -= n;
    return s;
  }
};

std::string EncodeBody(uint32_t index, const JournaledTensor& t) {
  std::string b;
  Put<uint32_t>(&b, index);
  Put<uint64_t>(&b, t.end);
  PutString(&b, t.info.name);
  Put<uint8_t>(&b, static_cast<uint8_t>(t.info.dtype));
  Put<uint8_t>(&b, static_cast<uint8_t>(t.info.codec));
  Put<int32_t>(&b, t.info.level);
  Put<int32_t>(&b, t.info.n_shards);
  Put<uint64_t>(&b, t.info.bf16_xxh64);
  Put<uint32_t>(&b, static_cast<uint32_t>(t.info.chunks.size()));
  for (const ChunkInfo& c : t.info.chunks) {
    Put<uint8_t>(&b, static_cast<uint8_t>(c.kind));
    for (uint64_t v : {c.elem_offset, c.elem_count, c.file_offset, c.stored_bytes, c.raw_bytes, c.xxh64})
      Put<uint64_t>(&b, v);
  }
  for (const std::array<uint64_t, 256>* h : {&t.histogram, &t.scale_histogram}) {
    const auto nonzero = static_cast<uint32_t>(std::count_if(h->begin(), h->end(), [](uint64_t v) { return v != 0; }));
    Put<uint32_t>(&b, nonzero);
    for (int s = 0; s < 256; ++s) {
      if ((*h)[static_cast<size_t>(s)] == 0) continue;
      Put<uint8_t>(&b, static_cast<uint8_t>(s));
      Put<uint64_t>(&b, (*h)[static_cast<size_t>(s)]);
    }
  }
  return b;
}

bool DecodeBody(const std::string& body, uint32_t* index, JournaledTensor* t) {
  Reader r{body.data(), body.size()};
  *index = r.Get<uint32_t>();
  t->end = r.Get<uint64_t>();
  t->info.name = r.GetString();
  t->info.dtype = static_cast<DType>(r.Get<uint8_t>());
  t->info.codec = static_cast<Codec>(r.Get<uint8_t>());
  t->info.level = r.Get<int32_t>();
  t->info.n_shards = r.Get<int32_t>();
  t->info.bf16_xxh64 = r.Get<uint64_t>();
  const uint32_t n_chunks = r.Get<uint32_t>();
  if (!r.ok || n_chunks > r.left / 49) return false;
  t->info.chunks.resize(n_chunks);
  for (ChunkInfo& c : t->info.chunks) {
    c.kind = static_cast<ChunkKind>(r.Get<uint8_t>());
    for (uint64_t* v : {&c.elem_offset, &c.elem_count, &c.file_offset, &c.stored_bytes, &c.raw_bytes, &c.xxh64})
      *v = r.Get<uint64_t>();
  }
  for (std::array<uint64_t, 256>* h : {&t->histogram, &t->scale_histogram}) {
    const uint32_t nonzero = r.Get<uint32_t>();
    for (uint32_t i = 0; i < nonzero && r.ok; ++i) {
      const uint8_t s = r.Get<uint8_t>();
      (*h)[s] = r.Get<uint64_t>();
    }
  }
  return r.ok && r.left == 0;
}

std::string EncodeHeader(const std::string& fingerprint) {
  std::string h(kMagic, sizeof(kMagic));
  Put<uint32_t>(&h, kCompressJournalVersion);
  PutString(&h, fingerprint);
  Put<uint64_t>(&h, Xxh64(fingerprint.data(), fingerprint.size()));
  return h;
}

Status WriteAll(int fd, uint64_t offset, const char* p, uint64_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(fmt::format("{}@{}: write: {}", path, offset, Errno()));
    }
    p += w;
    offset += static_cast<uint64_t>(w);
    n -= static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Result<UniqueFd> OpenRw(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::IoError(path + ": open: " + Errno());
  return fd;
}

Status Truncate(int fd, uint64_t size, const std::string& path) {
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0)
    return Status::IoError(fmt::format("{}: truncate to {}: {}", path, size, Errno()));
  return Status::Ok();
}

// Removes every entry of `dir` but those named in `keep`.
Status RemoveEntriesExcept(const std::string& dir, std::initializer_list<const char*> keep) {
  std::error_code ec;
  std::vector<std::string> doomed;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::none_of(keep.begin(), keep.end(), [&](const char* k) { return name == k; }))
      doomed.push_back(entry.path().string());
  }
  if (ec) return Status::IoError(dir + ": list: " + ec.message());
  for (const std::string& p : doomed) ZM_RETURN_IF_ERROR(RemoveTree(p));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CompressWorkDir>> CompressWorkDir::Open(const std::string& dir, const std::string& fingerprint,
                                                               const std::vector<std::string>& tensor_names) {
  std::unique_ptr<CompressWorkDir> w(new CompressWorkDir());
  w->dir_ = dir;
  w->experts_path_ = JoinPath(dir, kExpertsFileName);
  w->journal_path_ = JoinPath(dir, kCompressJournalFileName);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    return Status::InvalidArgument(dir + ": exists and is not a directory (compress keeps its partial work there)");
  ZM_RETURN_IF_ERROR(CreateDirectories(dir));
  w->lock_fd_ = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!w->lock_fd_.valid()) return Status::IoError(dir + ": open: " + Errno());
  if (::flock(w->lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Status::Unavailable(dir + ": another compress of the same output directory is writing it");
    return Status::IoError(dir + ": flock: " + Errno());
  }

  // The journal as a killed run left it, if any.
  std::string bytes;
  const bool has_journal = FileExists(w->journal_path_);
  if (has_journal) {
    auto read = ReadFileToString(w->journal_path_);
    if (!read.ok()) return read.status();
    bytes = std::move(read).value();
  }
  std::error_code ec;
  const bool has_content = !fs::is_empty(dir, ec);
  if (bytes.empty()) {
    ZM_RETURN_IF_ERROR(w->StartOver(has_journal ? "its journal is empty" : has_content ? "it has no journal" : ""));
  } else {
    Reader r{bytes.data(), bytes.size()};
    char magic[sizeof(kMagic)];
    for (char& c : magic) c = static_cast<char>(r.Get<uint8_t>());
    const uint32_t version = r.Get<uint32_t>();
    const std::string old_fingerprint = r.GetString();
    const uint64_t hash = r.Get<uint64_t>();
    if (!r.ok || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0 ||
        hash != Xxh64(old_fingerprint.data(), old_fingerprint.size())) {
      ZM_RETURN_IF_ERROR(w->StartOver("its journal's header is damaged"));
    } else if (version != kCompressJournalVersion) {
      ZM_RETURN_IF_ERROR(w->StartOver(fmt::format("its journal is version {}, this build writes {}", version,
                                                  kCompressJournalVersion)));
    } else if (old_fingerprint != fingerprint) {
      ZM_RETURN_IF_ERROR(w->StartOver("it was written for other inputs or options (" +
                                      FingerprintDifference(old_fingerprint, fingerprint) + ")"));
    } else {
      ZM_RETURN_IF_ERROR(w->Resume(bytes, bytes.size() - r.left, tensor_names));
    }
  }
  if (!w->journal_fd_.valid()) {  // fresh: an empty experts.bin and a journal holding its header
    ZM_ASSIGN_OR_RETURN(w->experts_fd_, OpenRw(w->experts_path_));
    ZM_ASSIGN_OR_RETURN(w->journal_fd_, OpenRw(w->journal_path_));
    const std::string header = EncodeHeader(fingerprint);
    ZM_RETURN_IF_ERROR(WriteAll(w->journal_fd_.get(), 0, header.data(), header.size(), w->journal_path_));
    if (::fdatasync(w->journal_fd_.get()) != 0) return Status::IoError(w->journal_path_ + ": fdatasync: " + Errno());
    w->journal_bytes_ = header.size();
  }
  return w;
}

Status CompressWorkDir::StartOver(const std::string& reason) {
  restart_reason_ = reason;
  return RemoveEntriesExcept(dir_, {});
}

Status CompressWorkDir::Resume(const std::string& bytes, size_t header_bytes,
                               const std::vector<std::string>& tensor_names) {
  if (!FileExists(experts_path_)) return StartOver("its experts.bin is missing");
  ZM_ASSIGN_OR_RETURN(MappedFile experts, MappedFile::Open(experts_path_));
  const uint8_t* data = experts.data();
  size_t pos = header_bytes;
  uint64_t end = 0;  // of the last kept tensor
  while (kept_.size() < tensor_names.size()) {
    Reader r{bytes.data() + pos, bytes.size() - pos};
    const uint32_t length = r.Get<uint32_t>();
    const uint64_t hash = r.Get<uint64_t>();
    if (!r.ok || length > kMaxRecordBytes || length > r.left) break;  // torn
    const std::string body(r.p, length);
    if (Xxh64(body.data(), body.size()) != hash) break;
    uint32_t index = 0;
    JournaledTensor t;
    if (!DecodeBody(body, &index, &t) || index != kept_.size() || t.info.name != tensor_names[index]) break;
    // Its chunks lie in order after the previous tensor, inside the file, with their bytes intact
    // and zeros between them.
    uint64_t at = end;
    bool intact = t.end <= experts.size();
    for (const ChunkInfo& c : t.info.chunks) {
      if (!intact || c.file_offset < at || c.file_offset > t.end || c.stored_bytes > t.end - c.file_offset) {
        intact = false;
        break;
      }
      intact = std::all_of(data + at, data + c.file_offset, [](uint8_t b) { return b == 0; }) &&
               Xxh64(data + c.file_offset, c.stored_bytes) == c.xxh64;
      at = c.file_offset + c.stored_bytes;
    }
    if (!intact || at != t.end) break;
    end = t.end;
    kept_.push_back(std::move(t));
    pos += sizeof(uint32_t) + sizeof(uint64_t) + length;
  }
  experts = MappedFile();
  ZM_RETURN_IF_ERROR(RemoveEntriesExcept(dir_, {kExpertsFileName, kCompressJournalFileName}));
  ZM_ASSIGN_OR_RETURN(experts_fd_, OpenRw(experts_path_));
  ZM_RETURN_IF_ERROR(Truncate(experts_fd_.get(), end, experts_path_));
  ZM_ASSIGN_OR_RETURN(journal_fd_, OpenRw(journal_path_));
  ZM_RETURN_IF_ERROR(Truncate(journal_fd_.get(), pos, journal_path_));
  position_ = end;
  journal_bytes_ = pos;
  next_index_ = static_cast<uint32_t>(kept_.size());
  return Status::Ok();
}

Status CompressWorkDir::Write(const void* data, uint64_t size_bytes) {
  ZM_RETURN_IF_ERROR(WriteAll(experts_fd_.get(), position_, static_cast<const char*>(data), size_bytes, experts_path_));
  position_ += size_bytes;
  return Status::Ok();
}

Status CompressWorkDir::PadTo(uint64_t alignment) {
  const uint64_t rem = position_ % alignment;
  if (rem == 0) return Status::Ok();
  const std::vector<char> zeros(alignment - rem, 0);
  return Write(zeros.data(), zeros.size());
}

Status CompressWorkDir::Journal(const std::vector<JournaledTensor>& tensors) {
  if (tensors.empty()) return Status::Ok();
  if (::fdatasync(experts_fd_.get()) != 0) return Status::IoError(experts_path_ + ": fdatasync: " + Errno());
  std::string records;
  for (const JournaledTensor& t : tensors) {
    const std::string body = EncodeBody(next_index_++, t);
    Put<uint32_t>(&records, static_cast<uint32_t>(body.size()));
    Put<uint64_t>(&records, Xxh64(body.data(), body.size()));
    records += body;
  }
  ZM_RETURN_IF_ERROR(WriteAll(journal_fd_.get(), journal_bytes_, records.data(), records.size(), journal_path_));
  journal_bytes_ += records.size();
  if (::fdatasync(journal_fd_.get()) != 0) return Status::IoError(journal_path_ + ": fdatasync: " + Errno());
  return Status::Ok();
}

Status CompressWorkDir::CloseExperts() {
  if (::fsync(experts_fd_.get()) != 0) return Status::IoError(experts_path_ + ": fsync: " + Errno());
  if (::close(experts_fd_.release()) != 0) return Status::IoError(experts_path_ + ": close: " + Errno());
  return Status::Ok();
}

Status CompressWorkDir::RemoveJournal() {
  journal_fd_ = UniqueFd();
  if (::unlink(journal_path_.c_str()) != 0 && errno != ENOENT)
    return Status::IoError(journal_path_ + ": remove: " + Errno());
  return Status::Ok();
}

Result<std::string> CompressFingerprint(const std::string& model_dir, const std::string& options_line,
                                        const std::vector<std::string>& tensor_names) {
  const BuildInfo& build = GetBuildInfo();
  std::string text = fmt::format("journal {}\nbuild {} {}\noptions {}\n", kCompressJournalVersion, build.version,
                                 build.commit, options_line);
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec))
    if (entry.is_regular_file()) files.push_back(entry.path().filename().string());
  if (ec) return Status::IoError(model_dir + ": list: " + ec.message());
  std::sort(files.begin(), files.end());
  for (const std::string& name : files) {
    const std::string path = JoinPath(model_dir, name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::IoError(path + ": stat: " + Errno());
    text += fmt::format("file {} {} bytes, modified {}.{:09d}\n", name, static_cast<int64_t>(st.st_size),
                        static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec));
  }
  std::string names;
  for (const std::string& n : tensor_names) names += n + '\n';
  text += fmt::format("expert tensors {} xxh64 {:016x}\n", tensor_names.size(), Xxh64(names.data(), names.size()));
  return text;
}

std::string FingerprintDifference(const std::string& old_text, const std::string& new_text) {
  const auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) out.push_back(s.substr(start, nl - start));
    if (start < s.size()) out.push_back(s.substr(start));
    return out;
  };
  const std::vector<std::string> a = lines(old_text), b = lines(new_text);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
    if (x != y) return fmt::format("'{}' -> '{}'", x, y);
  }
  return "no difference";
}

}  // namespace zipmoe::convert
