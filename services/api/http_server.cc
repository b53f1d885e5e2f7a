#include "services/api/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <civetweb.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

// civetweb starts its threads with a fixed 100 KiB stack (Debian builds it with USE_STACK_SIZE), but
// glibc carves each thread's static TLS out of its stack, and libtorch's static TLS alone exceeds
// that: pthread_create then fails with EINVAL ("Cannot create first worker thread") in any process
// that links the executor. The executable's definition interposes libc's for every caller and only
// raises requests below 1 MiB (stacks are reserved virtual memory; untouched pages cost nothing).
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t stacksize) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  if (real == nullptr) return ENOSYS;
  return real(attr, std::max<size_t>(stacksize, size_t{1} << 20));
}

namespace zipmoe::api {
namespace {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    const char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

const char* ReasonPhrase(int status) {
  const char* text = mg_get_response_code_text(nullptr, status);
  return text != nullptr ? text : "";
}

// The address of a socket's end as (text, port); false when it is not IPv4/IPv6.
bool Endpoint(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    *port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

// The first of this process's open socket descriptors that `match` accepts, -1 when none: civetweb
// does not expose its sockets, so they are found among /proc/self/fd by their addresses.
template <typename Match>
int FindSocketFd(const Match& match) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st;
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (match(static_cast<int>(fd))) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

// The address of one end of socket `fd` (getsockname / getpeername); false when unavailable.
bool SocketEnd(int fd, bool peer, std::string* addr, int* port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return rc == 0 && Endpoint(ss, addr, port);
}

// The descriptor of this process's TCP connection (local port, peer address, peer port).
int FindConnectionFd(int local_port, const std::string& peer_addr, int peer_port) {
  return FindSocketFd([&](int fd) {
    std::string addr, ignored;
    int port = 0, lport = 0;
    if (!SocketEnd(fd, /*peer=*/true, &addr, &port) || !SocketEnd(fd, /*peer=*/false, &ignored, &lport)) return false;
    return port == peer_port && lport == local_port &&
           (addr == peer_addr || addr == "::ffff:" + peer_addr || "::ffff:" + addr == peer_addr);
  });
}

// The descriptor of this process's listening TCP socket on `port`, -1 when none.
int FindListeningFd(int port) {
  return FindSocketFd([&](int fd) {
    int listening = 0;
    socklen_t optlen = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || !listening) return false;
    std::string addr;
    int lport = 0;
    return SocketEnd(fd, /*peer=*/false, &addr, &lport) && lport == port;
  });
}

// Why the request's framing headers are refused (RFC 9112 §6), as (status, message); status 0 = fine.
std::pair<int, std::string> CheckFraming(const mg_request_info* ri) {
  // civetweb keeps at most 64 headers and silently drops the rest, Content-Length included.
  if (ri->num_headers >= 64) return {431, "too many header fields (at most 63)"};
  int lengths = 0;
  bool chunked = false, transfer_encoding = false;
  for (int i = 0; i < ri->num_headers; ++i) {
    const std::string_view name = ri->http_headers[i].name != nullptr ? ri->http_headers[i].name : "";
    std::string_view value = ri->http_headers[i].value != nullptr ? ri->http_headers[i].value : "";
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (IEquals(name, "Content-Length")) {
      ++lengths;
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return {400, "invalid Content-Length header (a decimal number >= 0)"};
    } else if (IEquals(name, "Transfer-Encoding")) {
      if (transfer_encoding) return {400, "more than one Transfer-Encoding header"};
      transfer_encoding = true;
      if (!IEquals(value, "chunked"))
        return {501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)", value.substr(0, 64))};
      chunked = true;
    }
  }
  if (lengths > 1) return {400, "more than one Content-Length header"};
  if (lengths == 1 && chunked) return {400, "Content-Length together with Transfer-Encoding"};
  return {0, std::string()};
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (IEquals(k, name)) return v;
  return std::string();
}

HttpExchange::HttpExchange(mg_connection* conn, const HttpServerOptions& options, int local_port)
    : conn_(conn), options_(options), local_port_(local_port) {}

void HttpExchange::AddHeader(std::string name, std::string value) {
  headers_.emplace_back(std::move(name), std::move(value));
}

bool HttpExchange::SendHeaders(int status, std::string_view content_type, long long content_length) {
  if (sent_) return false;
  sent_ = true;
  status_ = status;
  // One write: the status line and every header (civetweb's mg_response_header_* API would add its
  // own cache/keep-alive headers; this keeps the response exactly as written here).
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\n", status, ReasonPhrase(status), content_type);
  if (content_length >= 0) {
    head += fmt::format("Content-Length: {}\r\n", content_length);
  } else {
    head += "Transfer-Encoding: chunked\r\n";
  }
  if (!options_.cors_origin.empty()) head += fmt::format("Access-Control-Allow-Origin: {}\r\n", options_.cors_origin);
  if (close_) head += "Connection: close\r\n";
  for (const auto& [k, v] : headers_) head += fmt::format("{}: {}\r\n", k, v);
  head += "\r\n";
  if (mg_write(conn_, head.data(), head.size()) != static_cast<int>(head.size())) failed_ = true;
  return !failed_;
}

bool HttpExchange::Send(int status, std::string_view content_type, std::string_view body) {
  if (!SendHeaders(status, content_type, static_cast<long long>(body.size()))) return false;
  if (!body.empty() && mg_write(conn_, body.data(), body.size()) != static_cast<int>(body.size())) failed_ = true;
  return !failed_;
}

bool HttpExchange::BeginStream(int status, std::string_view content_type) {
  AddHeader("Cache-Control", "no-cache");
  return SendHeaders(status, content_type, -1);
}

bool HttpExchange::Write(std::string_view data) {
  if (failed_) return false;
  if (data.empty()) return true;
  if (mg_send_chunk(conn_, data.data(), static_cast<unsigned>(data.size())) <= 0) failed_ = true;
  return !failed_;
}

void HttpExchange::EndStream() {
  if (failed_) return;
  static constexpr char kLast[] = "0\r\n\r\n";
  if (mg_write(conn_, kLast, sizeof kLast - 1) != static_cast<int>(sizeof kLast - 1)) failed_ = true;
}

bool HttpExchange::ClientGone() {
  if (failed_) return true;
  if (fd_ == -2) {
    const mg_request_info* ri = mg_get_request_info(conn_);
    fd_ = FindConnectionFd(local_port_, ri->remote_addr, ri->remote_port);
  }
  if (fd_ < 0) return false;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;   // the next pipelined request is waiting
  if (n == 0) return true;   // the client closed its end
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options, HttpHandler handler) {
  if (options.port < 1 || options.port > 65535)
    return Status::InvalidArgument(fmt::format("HTTP port {} is outside 1..65535", options.port));
  if (options.threads < 1) return Status::InvalidArgument("HTTP threads must be >= 1");
  if (options.queue < 1) return Status::InvalidArgument("HTTP queue must be >= 1");
  if (options.read_timeout_ms < 1 || options.keep_alive_timeout_ms < 0)
    return Status::InvalidArgument("HTTP timeouts must be positive");
  if (options.host.find(':') != std::string::npos)
    return Status::InvalidArgument(fmt::format("HTTP host '{}': give an IPv4 address", options.host));
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->options_ = options;
  server->handler_ = std::move(handler);
  const std::string listening = fmt::format("{}:{}", options.host, options.port);
  const std::string threads = std::to_string(options.threads);
  const std::string queue = std::to_string(options.queue);
  const std::string read_timeout = std::to_string(options.read_timeout_ms);
  const std::string keep_alive = std::to_string(options.keep_alive_timeout_ms);
  const char* civet_options[] = {"listening_ports", listening.c_str(),
                                 "num_threads", threads.c_str(),
                                 "connection_queue", queue.c_str(),
                                 "listen_backlog", queue.c_str(),
                                 "request_timeout_ms", read_timeout.c_str(),
                                 "keep_alive_timeout_ms", keep_alive.c_str(),
                                 "enable_keep_alive", "yes",
                                 "tcp_nodelay", "1",
                                 "enable_directory_listing", "no",
                                 "access_control_allow_origin", "",
                                 nullptr};
  mg_callbacks callbacks{};
  callbacks.begin_request = &HttpServer::BeginRequest;
  callbacks.http_error = &HttpServer::HttpError;
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };  // errors answer the client
  mg_init_data init_data{};
  init_data.callbacks = &callbacks;
  init_data.user_data = server.get();
  init_data.configuration_options = civet_options;
  mg_error_data error{};
  char error_text[256] = {0};
  error.text = error_text;
  error.text_buffer_size = sizeof error_text;
  server->ctx_ = mg_start2(&init_data, &error);
  if (server->ctx_ == nullptr)
    return Status::Unavailable(fmt::format("cannot listen on {}: {}", listening, error_text));
  mg_server_port ports[1];
  if (mg_get_server_ports(server->ctx_, 1, ports) >= 1) server->port_ = ports[0].port;
  // Connections that send nothing stay in the kernel (TCP_DEFER_ACCEPT, as nginx's "deferred") and
  // never occupy a worker; the kernel drops them after about read_timeout_ms.
  const int listen_fd = FindListeningFd(server->port_);
  if (listen_fd >= 0) {
    const int defer_seconds = std::max(1, options.read_timeout_ms / 1000);
    ::setsockopt(listen_fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_seconds, sizeof defer_seconds);
  }
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (ctx_ != nullptr) mg_stop(ctx_);
  ctx_ = nullptr;
}

int HttpServer::BeginRequest(mg_connection* conn) {
  auto* self = static_cast<HttpServer*>(mg_get_user_data(mg_get_context(conn)));
  self->Serve(conn);
  return 1;  // handled
}

void HttpServer::SendLayerError(mg_connection* conn, int status, const std::string& message) {
  std::pair<std::string, std::string> body =
      options_.error_body ? options_.error_body(status, message) : std::make_pair(std::string("text/plain"), message);
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
                                 status, ReasonPhrase(status), body.first, body.second.size());
  if (!options_.cors_origin.empty()) head += fmt::format("Access-Control-Allow-Origin: {}\r\n", options_.cors_origin);
  head += "\r\n";
  head += body.second;
  mg_disable_connection_keep_alive(conn);
  mg_write(conn, head.data(), head.size());
}

int HttpServer::HttpError(mg_connection* conn, int status, const char* message) {
  auto* self = static_cast<HttpServer*>(mg_get_user_data(mg_get_context(conn)));
  // civetweb answers 411 for a Content-Length that is not a number >= 0: a malformed request (400).
  if (status == 411) {
    self->SendLayerError(conn, 400, "invalid Content-Length header (a decimal number >= 0)");
  } else {
    self->SendLayerError(conn, status, message != nullptr && *message != '\0' ? message : ReasonPhrase(status));
  }
  return 0;  // sent here
}

void HttpServer::Serve(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  HttpRequest request;
  request.method = ri->request_method != nullptr ? ri->request_method : "";
  request.path = ri->local_uri != nullptr ? ri->local_uri : (ri->request_uri != nullptr ? ri->request_uri : "");
  request.query = ri->query_string != nullptr ? ri->query_string : "";
  request.remote_addr = ri->remote_addr;
  request.remote_port = ri->remote_port;
  for (int i = 0; i < ri->num_headers; ++i)
    request.headers.emplace_back(ri->http_headers[i].name, ri->http_headers[i].value);
  if (const auto [status, message] = CheckFraming(ri); status != 0) {
    SendLayerError(conn, status, message);
    return;
  }
  if (!options_.cors_origin.empty() && request.method == "OPTIONS") {
    if (ri->content_length != 0) mg_disable_connection_keep_alive(conn);  // its body is never read
    // CORS preflight: answered for every path, before authentication.
    std::string allow_headers = request.Header("Access-Control-Request-Headers");
    if (allow_headers.empty()) allow_headers = "Authorization, Content-Type";
    const std::string head = fmt::format(
        "HTTP/1.1 204 No Content\r\nAccess-Control-Allow-Origin: {}\r\nAccess-Control-Allow-Methods: GET, POST, "
        "OPTIONS\r\nAccess-Control-Allow-Headers: {}\r\nAccess-Control-Max-Age: 86400\r\nContent-Length: 0\r\n\r\n",
        options_.cors_origin, allow_headers);
    mg_write(conn, head.data(), head.size());
    return;
  }
  if (ri->content_length > 0 && static_cast<unsigned long long>(ri->content_length) > options_.max_body_bytes) {
    SendLayerError(conn, 413, fmt::format("the request body ({} bytes) is larger than {} bytes",
                                          ri->content_length, options_.max_body_bytes));
    return;
  }
  if (options_.on_head) {
    HttpExchange head(conn, options_, ri->server_port);
    head.set_close(true);
    try {
      options_.on_head(request, head);
    } catch (const std::exception& e) {
      if (!head.sent()) SendLayerError(conn, 500, e.what());
      return;
    }
    if (head.sent()) {
      mg_disable_connection_keep_alive(conn);
      return;
    }
  }
  const std::string expect = request.Header("Expect");
  if (!expect.empty()) {
    if (!IEquals(expect, "100-continue")) {
      SendLayerError(conn, 417, "only 'Expect: 100-continue' is supported");
      return;
    }
    if (ri->content_length != 0) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      mg_write(conn, kContinue, sizeof kContinue - 1);
    }
  }
  if (ri->content_length != 0) {  // > 0, or -1: chunked / until the end
    char buf[16384];
    while (true) {
      const int n = mg_read(conn, buf, sizeof buf);
      if (n <= 0) break;
      request.body.append(buf, static_cast<size_t>(n));
      if (request.body.size() > options_.max_body_bytes) {
        SendLayerError(conn, 413, fmt::format("the request body is larger than {} bytes", options_.max_body_bytes));
        return;
      }
    }
    if (ri->content_length > 0 && request.body.size() != static_cast<size_t>(ri->content_length)) {
      SendLayerError(conn, 400, fmt::format("the request body ended after {} of {} bytes", request.body.size(),
                                            ri->content_length));
      return;
    }
  }
  HttpExchange exchange(conn, options_, ri->server_port);
  try {
    handler_(request, exchange);
  } catch (const std::exception& e) {
    if (!exchange.sent()) SendLayerError(conn, 500, e.what());
    return;
  }
  if (!exchange.sent()) SendLayerError(conn, 500, "the handler sent no response");
}

}  // namespace zipmoe::api
