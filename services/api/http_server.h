// HttpServer: the HTTP/1.1 front of `zipmoe serve` (and of the executor service under `zipmoe up`),
// a thin layer over civetweb 1.15 (Debian's libcivetweb): keep-alive and pipelined requests,
// chunked responses for server-sent events, a bounded request body, CORS, and a probe that tells a
// handler whether its client has gone away. What the routes mean lives in api_server.h.
//
// Connections and threads (civetweb's model): one accepting thread queues connections (listen
// backlog and queue = `queue`); each of `threads` workers serves one connection at a time, request
// after request. A new connection that sends nothing is never accepted (TCP_DEFER_ACCEPT: the kernel
// holds it until its first bytes, and drops it after about `read_timeout_ms`); a request that stalls
// holds a worker for at most `read_timeout_ms` per read, an idle keep-alive connection for
// `keep_alive_timeout_ms`; so `threads` must exceed the
// requests that can wait on generation at once (the API server sizes it as batch + spare) for
// GET /health and /metrics to keep answering under load or idle connections.
//
// Requests: the whole body is read before the handler runs. Framing is strict (RFC 9112 §6, issue
// 37: a request a proxy could read differently is refused and its connection closed, so nothing
// can be smuggled behind it): a Content-Length that is not decimal digits, a repeated one (even
// with the same value) or one together with Transfer-Encoding answers 400; a Transfer-Encoding
// other than "chunked" 400 (civetweb's own answer) or 501; 64 headers or more (civetweb keeps 64 and drops the rest) 431; a
// Content-Length above `max_body_bytes` (or a chunked body growing past it) 413; `Expect:
// 100-continue` gets "100 Continue" before the body is read, another expectation 417. Then
// `on_head` sees the request without its body and may answer it at once (authentication: 401
// before a byte of the body is read; per-path body limits), which closes the connection. All of
// these before the handler, with `error_body(status, message)` as the body of the layer's own. OPTIONS (a CORS preflight)
// answers 204 before the handler when `cors_origin` is set, and every response then carries
// Access-Control-Allow-Origin.
//
// Thread-safety: the handler runs concurrently on the worker threads; HttpExchange is used by the
// handler's thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

struct mg_connection;
struct mg_context;

namespace zipmoe::api {

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // IPv4 address or "0.0.0.0"
  int port = 8080;                 // 1..65535
  int threads = 64;                // worker threads (connections served at once), >= 1
  int queue = 1024;                // accepted connections waiting for a worker; also the listen backlog
  int read_timeout_ms = 10000;     // a read or write on a connection that stalls this long ends it
  int keep_alive_timeout_ms = 5000;  // an idle keep-alive connection is closed after this
  size_t max_body_bytes = size_t{32} << 20;  // larger request bodies answer 413
  std::string cors_origin = "*";   // Access-Control-Allow-Origin; "" = no CORS headers, OPTIONS unhandled
  // Body of the responses the layer itself sends (400, 413, civetweb's errors): (status, message) ->
  // (content type, body). Empty = text/plain message.
  std::function<std::pair<std::string, std::string>(int status, const std::string& message)> error_body;
  // Called with the request line and headers (body empty, not yet read); a response it sends ends
  // the request, with "Connection: close", and the body is never read into memory. Empty = none.
  std::function<void(const struct HttpRequest& head, class HttpExchange& exchange)> on_head;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // decoded, without the query
  std::string query;   // after '?', "" when none
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_addr;
  int remote_port = 0;

  // The first header named `name` (ASCII case-insensitive), "" when absent.
  std::string Header(std::string_view name) const;
};

// The response side of one request. Either Send once, or BeginStream + Write... + EndStream.
class HttpExchange {
 public:
  HttpExchange(mg_connection* conn, const HttpServerOptions& options, int local_port);
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  void AddHeader(std::string name, std::string value);  // for the next Send/BeginStream
  // A complete response with Content-Length. Returns false when the client is gone.
  bool Send(int status, std::string_view content_type, std::string_view body);
  // Starts a chunked response (Transfer-Encoding: chunked); then Write pieces and EndStream.
  bool BeginStream(int status, std::string_view content_type);
  bool Write(std::string_view data);  // one chunk; false once the client is gone
  void EndStream();
  bool sent() const { return sent_; }
  // Adds "Connection: close" to the response (set before Send/BeginStream).
  void set_close(bool close) { close_ = close; }
  int status() const { return status_; }

  // Whether the client closed or reset its connection (probed without blocking; pipelined bytes
  // waiting to be read count as alive). False when the connection cannot be identified.
  bool ClientGone();

 private:
  bool SendHeaders(int status, std::string_view content_type, long long content_length);
  mg_connection* conn_;
  const HttpServerOptions& options_;
  int local_port_;
  std::vector<std::pair<std::string, std::string>> headers_;
  bool sent_ = false;
  bool close_ = false;
  bool failed_ = false;
  int status_ = 0;
  int fd_ = -2;  // the connection's socket; -2 = not looked up yet, -1 = not found
};

using HttpHandler = std::function<void(const HttpRequest& request, HttpExchange& exchange)>;

class HttpServer {
 public:
  // Binds host:port and starts serving with `handler` (which must answer every request it gets; one
  // that returns without sending gets a 500). Errors: kInvalidArgument for bad options,
  // kUnavailable when the address cannot be bound (naming it).
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Closes the listener and waits for the handlers running now to return (make them return first:
  // a handler waiting on generation blocks this).
  void Stop();
  int port() const { return port_; }
  const HttpServerOptions& options() const { return options_; }

 private:
  HttpServer() = default;
  static int BeginRequest(mg_connection* conn);
  static int HttpError(mg_connection* conn, int status, const char* message);
  void Serve(mg_connection* conn);
  void SendLayerError(mg_connection* conn, int status, const std::string& message);

  HttpServerOptions options_;
  HttpHandler handler_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace zipmoe::api
