// Link security: CURVE keys, key files and which endpoints need CURVE (see common/ipc/link_security.h).
#include "common/ipc/link_security.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <zmq.h>

#include "common/file_util.h"

namespace zipmoe::messaging {
namespace {

constexpr size_t kZ85KeyChars = 40;  // 32 bytes in Z85 (ZeroMQ RFC 32)
constexpr mode_t kKeyFileMode = 0600;

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string ErrnoText(int err) { return std::strerror(err); }

// A Z85 key of 40 characters that decodes (every character in Z85's alphabet).
bool IsZ85Key(const std::string& key) {
  if (key.size() != kZ85KeyChars) return false;
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, key.c_str()) != nullptr;
}

std::string KeyFileText(const CurveKeyPair& keys) {
  return fmt::format(
      "#   zipmoe link key: the ZeroMQ CURVE key pair of one deployment (zipmoe keygen; docs/messaging.md\n"
      "#   \"Link security\"). SECRET: every service of the deployment reads it; keep it mode 0600.\n"
      "curve\n"
      "    public-key = \"{}\"\n"
      "    secret-key = \"{}\"\n",
      keys.public_key, keys.secret_key);
}

// Writes `text` to a new temp file beside `path` (mkstemp: mode 0600 from the start), fsyncs and
// closes it; returns its name. Errors: kIoError naming the path.
Result<std::string> WriteTempBeside(const std::string& path, const std::string& text) {
  std::vector<char> name(path.begin(), path.end());
  for (const char c : std::string(".tmp.XXXXXX")) name.push_back(c);
  name.push_back('\0');
  UniqueFd fd(::mkstemp(name.data()));
  if (!fd.valid()) return Status::IoError(fmt::format("{}: creating a temp file: {}", path, ErrnoText(errno)));
  const std::string tmp(name.data());
  const auto fail = [&](const char* what, int err) {
    ::unlink(tmp.c_str());
    return Status::IoError(fmt::format("{}: {} {}: {}", path, what, tmp, ErrnoText(err)));
  };
  if (::fchmod(fd.get(), kKeyFileMode) != 0) return fail("fchmod", errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("writing", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return fail("fsync", errno);
  const int closed = ::close(fd.release());
  if (closed != 0) return fail("closing", errno);
  return tmp;
}

// The quoted value of `name = "..."` on one line of a zcert file, or nullopt.
std::optional<std::string> QuotedValue(std::string_view line, std::string_view name) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  line.remove_prefix(first);
  if (!StartsWith(line, name)) return std::nullopt;
  line.remove_prefix(name.size());
  const size_t eq = line.find_first_not_of(" \t");
  if (eq == std::string_view::npos || line[eq] != '=') return std::nullopt;
  const size_t open = line.find('"', eq);
  const size_t close = open == std::string_view::npos ? open : line.find('"', open + 1);
  if (close == std::string_view::npos) return std::string();  // present but malformed
  return std::string(line.substr(open + 1, close - open - 1));
}

}  // namespace

Result<CurveKeyPair> GenerateCurveKeyPair() {
  if (zmq_has("curve") == 0) {
    return Status::Unavailable("this libzmq has no CURVE support (zmq_has(\"curve\") is false; build it with libsodium)");
  }
  char public_key[kZ85KeyChars + 1];
  char secret_key[kZ85KeyChars + 1];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return Status::Unavailable(fmt::format("zmq_curve_keypair: {}", zmq_strerror(zmq_errno())));
  }
  return CurveKeyPair{public_key, secret_key};
}

Status SaveCurveKeyFile(const std::string& path, const CurveKeyPair& keys) {
  ZM_ASSIGN_OR_RETURN(std::string tmp, WriteTempBeside(path, KeyFileText(keys)));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IoError(fmt::format("{}: rename from {}: {}", path, tmp, ErrnoText(err)));
  }
  return Status::Ok();
}

Result<CurveKeyPair> LoadCurveKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("key file {} does not exist", path));
    return Status::IoError(fmt::format("key file {}: stat: {}", path, ErrnoText(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return Status::InvalidArgument(fmt::format(
        "key file {}: mode {:04o} lets group or others read or write the secret key (chmod 600 {})", path,
        static_cast<unsigned>(st.st_mode & 07777), path));
  }
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  std::optional<std::string> public_key, secret_key;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    if (auto v = QuotedValue(line, "public-key")) public_key = v;
    if (auto v = QuotedValue(line, "secret-key")) secret_key = v;
    begin = end + 1;
  }
  for (const auto& [value, name] : {std::pair{&public_key, "public-key"}, {&secret_key, "secret-key"}}) {
    if (!value->has_value()) {
      return Status::Corruption(fmt::format("key file {}: no {} = \"...\" line (make one with zipmoe keygen)", path, name));
    }
    if (!IsZ85Key(**value)) {
      return Status::Corruption(fmt::format("key file {}: {} is not {} Z85 characters ({} characters)", path, name,
                                            kZ85KeyChars, (*value)->size()));
    }
  }
  char derived[kZ85KeyChars + 1];
  if (zmq_curve_public(derived, secret_key->c_str()) != 0 || *public_key != derived) {
    return Status::Corruption(fmt::format("key file {}: the public-key is not the secret-key's public key", path));
  }
  return CurveKeyPair{*public_key, *secret_key};
}

Result<CurveKeyPair> LoadOrCreateCurveKeyFile(const std::string& path, bool* created) {
  if (created != nullptr) *created = false;
  if (FileExists(path)) return LoadCurveKeyFile(path);
  ZM_ASSIGN_OR_RETURN(CurveKeyPair keys, GenerateCurveKeyPair());
  ZM_ASSIGN_OR_RETURN(std::string tmp, WriteTempBeside(path, KeyFileText(keys)));
  const int linked = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (linked == 0) {
    if (created != nullptr) *created = true;
    return keys;
  }
  if (err == EEXIST) return LoadCurveKeyFile(path);  // another process won the race: its pair it is
  return Status::IoError(fmt::format("{}: link from {}: {}", path, tmp, ErrnoText(err)));
}

const char* LinkSecurityModeName(LinkSecurityMode mode) {
  switch (mode) {
    case LinkSecurityMode::kAuto: return "auto";
    case LinkSecurityMode::kOn: return "on";
    case LinkSecurityMode::kOff: return "off";
  }
  return "?";
}

Result<LinkSecurityMode> ParseLinkSecurityMode(const std::string& text, const std::string& key) {
  for (const LinkSecurityMode mode : {LinkSecurityMode::kAuto, LinkSecurityMode::kOn, LinkSecurityMode::kOff}) {
    if (text == LinkSecurityModeName(mode)) return mode;
  }
  return Status::InvalidArgument(fmt::format("{} = '{}': expected auto, on or off", key, text));
}

bool IsLoopbackTcp(const std::string& endpoint) {
  if (!StartsWith(endpoint, "tcp://")) return false;
  std::string address = endpoint.substr(6);
  if (const size_t semi = address.find(';'); semi != std::string::npos) address = address.substr(semi + 1);
  std::string host;
  if (StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == std::string::npos) return false;
    host = address.substr(1, close - 1);
  } else {
    const size_t colon = address.rfind(':');
    host = colon == std::string::npos ? address : address.substr(0, colon);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool EndpointNeedsCurve(const std::string& endpoint, LinkSecurityMode mode) {
  if (!StartsWith(endpoint, "tcp://")) return false;
  switch (mode) {
    case LinkSecurityMode::kOn: return true;
    case LinkSecurityMode::kAuto: return !IsLoopbackTcp(endpoint);
    case LinkSecurityMode::kOff: return false;
  }
  return false;
}

}  // namespace zipmoe::messaging
