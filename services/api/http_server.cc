#include "services/api/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace zipmoe::api {

using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxHeaderFields = 64;         // this many or more: 431
constexpr size_t kConnectionBuffer = 64 << 10;  // per-connection read buffer (request line + headers)
constexpr size_t kMaxEchoedHeader = 1024;    // longest Access-Control-Request-Headers echoed back

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    const char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// Why the request's framing headers are refused (RFC 9112 §6), as (status, message); status 0 = fine.
std::pair<int, std::string> CheckFraming(const HttpRequest& request) {
  if (request.headers.size() >= static_cast<size_t>(kMaxHeaderFields))
    return {431, fmt::format("too many header fields (at most {})", kMaxHeaderFields - 1)};
  int lengths = 0;
  bool chunked = false, transfer_encoding = false;
  for (const auto& [name, raw] : request.headers) {
    const std::string_view value = Trim(raw);
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

// The declared body length: >= 0 from Content-Length, -1 for chunked, 0 when neither.
long long DeclaredLength(const HttpRequest& request) {
  const std::string te = request.Header("Transfer-Encoding");
  if (!te.empty()) return -1;
  const std::string cl(Trim(request.Header("Content-Length")));
  return cl.empty() ? 0 : std::stoll(cl);  // digits only, <= 18 of them (CheckFraming)
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Splits a request target into (path, query): origin-form "/p?q", absolute-form "http://host/p?q"
// (RFC 9112 §3.2.2: served as its path), asterisk-form "*".
std::pair<std::string, std::string> SplitTarget(std::string_view target) {
  const size_t scheme = target.find("://");
  if (!target.empty() && target.front() != '/' && scheme != std::string_view::npos) {
    const size_t path = target.find_first_of("/?", scheme + 3);
    target = path == std::string_view::npos ? std::string_view("/") : target.substr(path);
    if (target.front() == '?') return {"/", std::string(target.substr(1))};
  }
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return {PercentDecode(target), std::string()};
  return {PercentDecode(target.substr(0, q)), std::string(target.substr(q + 1))};
}

// The address of a socket's end as (text, port); false when it is not IPv4/IPv6.
bool Endpoint(const sockaddr* sa, std::string* addr, int* port) {
  if (sa == nullptr) return false;
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    *port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

// A fixed set of threads running posted jobs in order.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~WorkerPool() { Drain(); }
  void Post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  // Runs every job posted so far, then ends the threads.
  void Drain() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// One connection's deadline, kept where the deadline sweeper finds it.
struct ConnectionState {
  int fd = -1;
  Clock::time_point deadline = Clock::time_point::max();  // max() = none
  std::string target;  // the request target as sent (request line), for the request being read
};

}  // namespace

// One request: what the event thread read, and what its handler answers (under `mu`).
struct HttpCall {
  HttpServer::Impl* server = nullptr;
  MHD_Connection* conn = nullptr;
  int fd = -1;
  HttpRequest request;
  long long declared = 0;   // Content-Length, -1 chunked
  size_t reserved = 0;      // body bytes counted against max_buffered_body_bytes
  int refused = 0;          // a status to answer once the body has been read (413/503), 0 = none
  std::string refused_message;
  bool dispatched = false;
  bool queued = false;      // a response was handed to the library

  std::mutex mu;
  bool ready = false;       // the handler's response head is waiting to be queued
  int status = 0;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;
  bool stream = false;
  std::string body;
  std::deque<std::string> chunks;
  size_t chunk_offset = 0;
  bool ended = false;
  bool suspended = false;   // the connection is parked until the handler has more
  bool finished = false;    // the library is done with the request (sent, or the client left)
  bool failed = false;      // ... because the client left or the connection broke
};

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  MHD_Daemon* daemon = nullptr;
  int listen_fd = -1;
  int port = 0;
  std::unique_ptr<WorkerPool> workers, priority_workers;
  std::atomic<size_t> buffered{0};

  std::mutex connections_mu;
  std::map<MHD_Connection*, ConnectionState*> connections;
  std::mutex calls_mu;
  std::vector<std::weak_ptr<HttpCall>> calls;  // live ones, for Stop
  std::thread sweeper;
  std::mutex sweep_mu;
  std::condition_variable sweep_cv;
  bool stopping = false;

  std::pair<std::string, std::string> ErrorBody(int status, const std::string& message) const {
    return options.error_body ? options.error_body(status, message) : std::make_pair(std::string("text/plain"), message);
  }
  void SetDeadline(MHD_Connection* conn, Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(connections_mu);
    auto it = connections.find(conn);
    if (it != connections.end()) it->second->deadline = deadline;
  }
  // Shuts down the sockets of connections past their deadline; the event thread then closes them.
  void Sweep() {
    std::unique_lock<std::mutex> lock(sweep_mu);
    while (!stopping) {
      sweep_cv.wait_for(lock, std::chrono::milliseconds(200));
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> conns(connections_mu);
      for (auto& [conn, state] : connections) {
        if (state->deadline <= now) {
          ::shutdown(state->fd, SHUT_RDWR);
          state->deadline = Clock::time_point::max();
        }
      }
    }
  }
  std::string BodiesFullMessage() const {
    return fmt::format("too many request bodies in memory ({} bytes at most); retry", options.max_buffered_body_bytes);
  }
  void Release(HttpCall& call) {
    if (call.reserved > 0) buffered.fetch_sub(call.reserved);
    call.reserved = 0;
  }
  // Hands a response to the library: called on the event thread from the access handler only.
  MHD_Result Queue(MHD_Connection* conn, int status, std::string_view content_type, std::string_view body, bool close,
                   const std::vector<std::pair<std::string, std::string>>& headers) {
    return Submit(conn, status,
                  MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY),
                  content_type, close, headers);
  }
  // Adds the headers to `response` (null: the library could not make it) and queues it.
  MHD_Result Submit(MHD_Connection* conn, int status, MHD_Response* response, std::string_view content_type,
                    bool close, const std::vector<std::pair<std::string, std::string>>& headers) {
    if (response == nullptr) return MHD_NO;
    if (!content_type.empty()) MHD_add_response_header(response, "Content-Type", std::string(content_type).c_str());
    if (!options.cors_origin.empty())
      MHD_add_response_header(response, "Access-Control-Allow-Origin", options.cors_origin.c_str());
    if (close) MHD_add_response_header(response, "Connection", "close");
    for (const auto& [k, v] : headers) MHD_add_response_header(response, k.c_str(), v.c_str());
    const MHD_Result rc = MHD_queue_response(conn, static_cast<unsigned>(status), response);
    MHD_destroy_response(response);
    return rc;
  }
  MHD_Result LayerError(MHD_Connection* conn, int status, const std::string& message) {
    const auto [type, body] = ErrorBody(status, message);
    return Queue(conn, status, type, body, /*close=*/true, {});
  }

  MHD_Result FirstCall(MHD_Connection* conn, const char* url, const char* method, std::shared_ptr<HttpCall>& call);
  MHD_Result Answer(MHD_Connection* conn, const char* url, const char* method, const char* upload, size_t* upload_size,
                    void** con_cls);
  void Dispatch(std::shared_ptr<HttpCall> call);

  static MHD_Result OnAccess(void* cls, MHD_Connection* conn, const char* url, const char* method,
                             const char* /*version*/, const char* upload, size_t* upload_size, void** con_cls) {
    return static_cast<Impl*>(cls)->Answer(conn, url, method, upload, upload_size, con_cls);
  }
  static void OnCompleted(void* cls, MHD_Connection* conn, void** con_cls, MHD_RequestTerminationCode toe) {
    auto* self = static_cast<Impl*>(cls);
    auto* holder = static_cast<std::shared_ptr<HttpCall>*>(*con_cls);
    *con_cls = nullptr;
    if (holder != nullptr) {
      HttpCall& call = **holder;
      {
        std::lock_guard<std::mutex> lock(call.mu);
        call.finished = true;
        call.failed = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK;
      }
      if (!call.dispatched) self->Release(call);
      delete holder;
    }
    // A kept-alive connection waits for its next request line at most keep_alive_timeout_ms.
    self->SetDeadline(conn, Clock::now() + std::chrono::milliseconds(self->options.keep_alive_timeout_ms));
  }
  static void OnConnection(void* cls, MHD_Connection* conn, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard<std::mutex> lock(self->connections_mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* state = new ConnectionState();
      const MHD_ConnectionInfo* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
      state->fd = info != nullptr ? info->connect_fd : -1;
      state->deadline = Clock::now() + std::chrono::milliseconds(self->options.header_timeout_ms);
      self->connections[conn] = state;
      *socket_context = state;
    } else {
      self->connections.erase(conn);
      delete static_cast<ConnectionState*>(*socket_context);
      *socket_context = nullptr;
    }
  }
  // The request line has arrived: its headers are due within header_timeout_ms.
  static void* OnRequestLine(void* cls, const char* uri, MHD_Connection* conn) {
    auto* self = static_cast<Impl*>(cls);
    std::lock_guard<std::mutex> lock(self->connections_mu);
    auto it = self->connections.find(conn);
    if (it != self->connections.end()) {
      it->second->target = uri != nullptr ? uri : "";
      it->second->deadline = Clock::now() + std::chrono::milliseconds(self->options.header_timeout_ms);
    }
    return nullptr;
  }
  // The body of a streamed response, one queued Write per chunk; parks the connection when the
  // handler has nothing more yet.
  static ssize_t ReadStream(void* cls, uint64_t /*pos*/, char* buf, size_t max) {
    HttpCall& call = **static_cast<std::shared_ptr<HttpCall>*>(cls);
    std::lock_guard<std::mutex> lock(call.mu);
    if (!call.chunks.empty()) {
      const std::string& front = call.chunks.front();
      const size_t n = std::min(max, front.size() - call.chunk_offset);
      std::memcpy(buf, front.data() + call.chunk_offset, n);
      call.chunk_offset += n;
      if (call.chunk_offset == front.size()) {
        call.chunks.pop_front();
        call.chunk_offset = 0;
      }
      return static_cast<ssize_t>(n);
    }
    if (call.ended) return MHD_CONTENT_READER_END_OF_STREAM;
    call.suspended = true;
    MHD_suspend_connection(call.conn);
    return 0;
  }
  static void FreeStream(void* cls) { delete static_cast<std::shared_ptr<HttpCall>*>(cls); }
};

MHD_Result HttpServer::Impl::FirstCall(MHD_Connection* conn, const char* url, const char* method,
                                       std::shared_ptr<HttpCall>& call) {
  HttpRequest& request = call->request;
  request.method = method != nullptr ? method : "";
  std::string target;
  {
    std::lock_guard<std::mutex> lock(connections_mu);
    auto it = connections.find(conn);
    if (it != connections.end()) {
      target = it->second->target;
      call->fd = it->second->fd;
      it->second->deadline = Clock::time_point::max();
    }
  }
  if (target.empty() && url != nullptr) target = url;  // the request line was not seen (never expected)
  std::tie(request.path, request.query) = SplitTarget(target);
  MHD_get_connection_values(
      conn, MHD_HEADER_KIND,
      [](void* cls, MHD_ValueKind, const char* key, const char* value) -> MHD_Result {
        static_cast<HttpRequest*>(cls)->headers.emplace_back(key != nullptr ? key : "", value != nullptr ? value : "");
        return MHD_YES;
      },
      &request);
  if (const MHD_ConnectionInfo* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS))
    Endpoint(info->client_addr, &request.remote_addr, &request.remote_port);

  if (const auto [status, message] = CheckFraming(request); status != 0) return LayerError(conn, status, message);
  call->declared = DeclaredLength(request);
  if (target == "*") {
    if (request.method != "OPTIONS") return LayerError(conn, 400, "the target '*' is for OPTIONS only");
    return Queue(conn, 204, "", "", call->declared != 0, {{"Allow", "GET, HEAD, POST, OPTIONS"}});
  }
  if (!options.cors_origin.empty() && request.method == "OPTIONS") {
    // CORS preflight: answered for every path, before authentication; its body is never read.
    std::string allow_headers = request.Header("Access-Control-Request-Headers");
    if (allow_headers.empty() || allow_headers.size() > kMaxEchoedHeader) allow_headers = "Authorization, Content-Type";
    return Queue(conn, 204, "", "", call->declared != 0,
                 {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                  {"Access-Control-Allow-Headers", allow_headers},
                  {"Access-Control-Max-Age", "86400"}});
  }
  if (call->declared > 0 && static_cast<unsigned long long>(call->declared) > options.max_body_bytes)
    return LayerError(conn, 413, fmt::format("the request body ({} bytes) is larger than {} bytes", call->declared,
                                             options.max_body_bytes));
  if (options.on_head) {
    HttpExchange head(call);
    head.set_close(true);
    try {
      options.on_head(request, head);
    } catch (const std::exception& e) {
      if (!head.sent()) return LayerError(conn, 500, e.what());
    }
    if (head.sent()) {
      std::lock_guard<std::mutex> lock(call->mu);
      call->ready = false;
      return Queue(conn, call->status, call->content_type, call->body, /*close=*/true, call->headers);
    }
  }
  const std::string expect = request.Header("Expect");
  if (!expect.empty() && !IEquals(Trim(expect), "100-continue"))
    return LayerError(conn, 417, "only 'Expect: 100-continue' is supported");
  if (call->declared > 0) {
    const size_t want = static_cast<size_t>(call->declared);
    if (buffered.fetch_add(want) + want > options.max_buffered_body_bytes) {
      buffered.fetch_sub(want);
      return LayerError(conn, 503, BodiesFullMessage());
    }
    call->reserved = want;
    request.body.reserve(want);
  }
  if (call->declared != 0) SetDeadline(conn, Clock::now() + std::chrono::milliseconds(options.body_timeout_ms));
  return MHD_YES;  // the library sends "100 Continue" when the client asked for it
}

MHD_Result HttpServer::Impl::Answer(MHD_Connection* conn, const char* url, const char* method, const char* upload,
                                    size_t* upload_size, void** con_cls) {
  if (*con_cls == nullptr) {
    auto call = std::make_shared<HttpCall>();
    call->server = this;
    call->conn = conn;
    *con_cls = new std::shared_ptr<HttpCall>(call);
    {
      std::lock_guard<std::mutex> lock(calls_mu);
      calls.erase(std::remove_if(calls.begin(), calls.end(), [](const auto& w) { return w.expired(); }), calls.end());
      calls.push_back(call);
    }
    return FirstCall(conn, url, method, call);
  }
  const std::shared_ptr<HttpCall>& call = *static_cast<std::shared_ptr<HttpCall>*>(*con_cls);
  if (*upload_size > 0) {  // a piece of the body
    const size_t n = *upload_size;
    *upload_size = 0;
    if (call->refused != 0) return MHD_YES;  // discarded; answered at its end
    std::string& body = call->request.body;
    const auto refuse = [&](int status, std::string message) {  // the rest is read and dropped
      call->refused = status;
      call->refused_message = std::move(message);
      std::string().swap(body);
      return MHD_YES;
    };
    if (body.size() + n > options.max_body_bytes)
      return refuse(413, fmt::format("the request body is larger than {} bytes", options.max_body_bytes));
    if (body.size() + n > call->reserved) {  // a chunked body: counted as it grows
      const size_t more = std::max<size_t>(body.size() + n - call->reserved, 64 << 10);
      if (buffered.fetch_add(more) + more > options.max_buffered_body_bytes) {
        buffered.fetch_sub(more);
        return refuse(503, BodiesFullMessage());
      }
      call->reserved += more;
    }
    body.append(upload, n);
    return MHD_YES;
  }
  if (call->queued) return MHD_YES;
  if (!call->dispatched) {
    if (call->refused != 0) {
      call->queued = true;
      return LayerError(conn, call->refused, call->refused_message);
    }
    call->dispatched = true;
    // The body is complete: its deadline is met. The handler may compute as long as it needs (a long
    // non-streaming completion); the connection is not closed under it.
    SetDeadline(conn, Clock::time_point::max());
    Dispatch(call);
  }
  std::unique_lock<std::mutex> lock(call->mu);
  if (!call->ready) {
    call->suspended = true;
    MHD_suspend_connection(conn);
    return MHD_YES;
  }
  call->ready = false;
  call->queued = true;
  if (!call->stream) return Queue(conn, call->status, call->content_type, call->body, call->close, call->headers);
  MHD_Response* response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 << 10, &Impl::ReadStream,
                                                             new std::shared_ptr<HttpCall>(call), &Impl::FreeStream);
  // The head was written once, before `ready` (HttpExchange::Respond), so it is read without the lock,
  // which the library's ReadStream takes while queueing.
  lock.unlock();
  return Submit(conn, call->status, response, call->content_type, call->close, call->headers);
}

void HttpServer::Impl::Dispatch(std::shared_ptr<HttpCall> call) {
  const bool priority = options.priority && options.priority(call->request);
  auto job = [this, call] {
    {
      HttpExchange exchange(call);
      try {
        handler(call->request, exchange);
        if (!exchange.sent()) throw std::runtime_error("the handler sent no response");
      } catch (const std::exception& e) {
        if (!exchange.sent()) {
          const auto [type, body] = ErrorBody(500, e.what());
          exchange.set_close(true);
          exchange.Send(500, type, body);
        }
      }
    }
    std::string().swap(call->request.body);
    Release(*call);
  };
  (priority ? priority_workers : workers)->Post(std::move(job));
}

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (IEquals(k, name)) return v;
  return std::string();
}

HttpExchange::HttpExchange(std::shared_ptr<HttpCall> call) : call_(std::move(call)) {}

HttpExchange::~HttpExchange() {
  // A stream its handler left open is ended, so its connection is not parked forever.
  if (sent_) EndStream();
}

void HttpExchange::AddHeader(std::string name, std::string value) {
  headers_.emplace_back(std::move(name), std::move(value));
}

namespace {

// Changes the call's response under its lock and wakes its parked connection; false once the
// client is gone.
template <typename Change>
bool Deliver(HttpCall& call, const Change& change) {
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(call.mu);
    if (call.finished) return false;
    change(call);
    if (call.suspended) {
      call.suspended = false;
      resume = true;
    }
  }
  // Outside the lock: a parked connection is touched by nothing else until it is resumed.
  if (resume) MHD_resume_connection(call.conn);
  return true;
}

}  // namespace

bool HttpExchange::Respond(int status, std::string_view content_type, bool stream, std::string_view body) {
  if (sent_) return false;
  sent_ = true;
  status_ = status;
  return Deliver(*call_, [&](HttpCall& c) {
    c.ready = true;
    c.status = status;
    c.content_type = std::string(content_type);
    c.headers = std::move(headers_);
    c.close = close_;
    c.stream = stream;
    c.body.assign(body.data(), body.size());
  });
}

bool HttpExchange::Send(int status, std::string_view content_type, std::string_view body) {
  return Respond(status, content_type, /*stream=*/false, body);
}

bool HttpExchange::BeginStream(int status, std::string_view content_type) {
  if (sent_) return false;
  AddHeader("Cache-Control", "no-cache");
  return Respond(status, content_type, /*stream=*/true, {});
}

bool HttpExchange::Write(std::string_view data) {
  if (data.empty()) return !ClientGone();
  return Deliver(*call_, [&](HttpCall& c) { c.chunks.emplace_back(data); });
}

void HttpExchange::EndStream() {
  Deliver(*call_, [](HttpCall& c) {
    if (c.stream) c.ended = true;
  });
}

bool HttpExchange::ClientGone() {
  std::lock_guard<std::mutex> lock(call_->mu);
  if (call_->finished) return call_->failed;
  if (call_->fd < 0) return false;
  // Under the lock: the library reports the request finished (OnCompleted) before it closes the
  // socket, so the descriptor is still this connection's.
  char c;
  const ssize_t n = ::recv(call_->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // the next pipelined request is waiting
  if (n == 0) return true;  // the client closed its end
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

int HttpServer::port() const { return impl_->port; }
const HttpServerOptions& HttpServer::options() const { return impl_->options; }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options, HttpHandler handler) {
  if (options.port < 0 || options.port > 65535)
    return Status::InvalidArgument(fmt::format("HTTP port {} is outside 0..65535", options.port));
  if (options.threads < 1 || options.priority_threads < 1)
    return Status::InvalidArgument("HTTP threads and priority_threads must be >= 1");
  if (options.queue < 1) return Status::InvalidArgument("HTTP queue must be >= 1");
  if (options.read_timeout_ms < 1 || options.keep_alive_timeout_ms < 0 || options.header_timeout_ms < 1 ||
      options.body_timeout_ms < 1)
    return Status::InvalidArgument("HTTP timeouts must be positive");
  if (options.max_connections < 1 || options.max_connections_per_client < 0)
    return Status::InvalidArgument("HTTP max_connections must be >= 1 (per client >= 0)");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  if (options.host.find(':') != std::string::npos || ::inet_pton(AF_INET, options.host.c_str(), &addr.sin_addr) != 1)
    return Status::InvalidArgument(fmt::format("HTTP host '{}': give an IPv4 address", options.host));
  const std::string listening = fmt::format("{}:{}", options.host, options.port);

  // Every open connection is a descriptor: make room for max_connections beside the model's files.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    const rlim_t want = static_cast<rlim_t>(options.max_connections) + 256;
    if (nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < want) {
      nofile.rlim_cur = nofile.rlim_max == RLIM_INFINITY ? want : std::min(want, nofile.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &nofile);
    }
  }

  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Unavailable(fmt::format("cannot listen on {}: socket: {}", listening, std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, options.queue) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::Unavailable(fmt::format("cannot listen on {}: {}", listening, std::strerror(err)));
  }
  // Connections that send nothing stay in the kernel (TCP_DEFER_ACCEPT, as nginx's "deferred"); the
  // kernel drops them after about header_timeout_ms.
  int bound_port = options.port;  // port 0: the one the kernel chose
  {
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) bound_port = ntohs(bound.sin_port);
  }
  const int defer_seconds = std::max(1, options.header_timeout_ms / 1000);
  ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_seconds, sizeof defer_seconds);

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  impl->listen_fd = fd;
  impl->port = bound_port;
  impl->workers = std::make_unique<WorkerPool>(options.threads);
  impl->priority_workers = std::make_unique<WorkerPool>(options.priority_threads);
  Impl* self = impl.get();
  const unsigned per_client =
      static_cast<unsigned>(options.max_connections_per_client > 0 ? options.max_connections_per_client : 0);
  impl->daemon = MHD_start_daemon(
      MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, nullptr, nullptr, &Impl::OnAccess, self,
      MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(options.max_connections),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_client,
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>((options.read_timeout_ms + 999) / 1000),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionBuffer,
      MHD_OPTION_NOTIFY_COMPLETED, &Impl::OnCompleted, self,
      MHD_OPTION_NOTIFY_CONNECTION, &Impl::OnConnection, self,
      MHD_OPTION_URI_LOG_CALLBACK, &Impl::OnRequestLine, self,
      MHD_OPTION_END);
  if (impl->daemon == nullptr) {
    ::close(fd);
    return Status::Unavailable(fmt::format("cannot serve HTTP on {}: libmicrohttpd did not start", listening));
  }
  impl->sweeper = std::thread([self] { self->Sweep(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.daemon == nullptr) return;
  const MHD_socket listener = MHD_quiesce_daemon(s.daemon);  // no new connections
  if (listener != MHD_INVALID_SOCKET) ::close(listener);
  s.workers->Drain();
  s.priority_workers->Drain();
  // Every handler has returned, so every parked connection has been woken with its answer; one still
  // parked (a stream whose handler left it open is ended by ~HttpExchange) is ended here, since the
  // library refuses to stop with parked connections.
  {
    std::lock_guard<std::mutex> lock(s.calls_mu);
    for (const std::weak_ptr<HttpCall>& weak : s.calls) {
      std::shared_ptr<HttpCall> call = weak.lock();
      if (!call) continue;
      bool resume = false;
      {
        std::lock_guard<std::mutex> call_lock(call->mu);
        if (call->suspended && !call->finished) {
          call->suspended = false;
          call->ended = true;
          if (!call->ready && !call->queued) {
            call->ready = true;
            call->status = 503;
            call->content_type = "text/plain";
            call->body = "the server is stopping";
            call->close = true;
          }
          resume = true;
        }
      }
      if (resume) MHD_resume_connection(call->conn);
    }
  }
  {
    std::lock_guard<std::mutex> lock(s.sweep_mu);
    s.stopping = true;
  }
  s.sweep_cv.notify_all();
  if (s.sweeper.joinable()) s.sweeper.join();
  MHD_stop_daemon(s.daemon);
  s.daemon = nullptr;
}

}  // namespace zipmoe::api
