// HttpServer: the HTTP/1.1 front of `zipmoe serve` (and of the executor service under `zipmoe up`),
// a layer over GNU libmicrohttpd 0.9.75 (Debian's libmicrohttpd12): keep-alive and pipelined
// requests, chunked responses for server-sent events, bounded request bodies, CORS, deadlines, and
// a probe that tells a handler whether its client has gone away. What the routes mean lives in
// api_server.h.
//
// Connections and threads (issue 37): one event thread (epoll) reads and writes every connection;
// a connection that is sending its request costs its buffer (at most 64 KiB: the request line and
// headers), not a thread, so slow or idle clients cannot starve anyone. A request whose head and
// body have arrived runs its handler on one of `threads` workers (more wait in order); requests
// that `priority` accepts (GET /health, /metrics) run on `priority_threads` workers of their own, so
// they are answered while every generation worker is busy. Deadlines: a connection that moves no
// byte for `read_timeout_ms` is closed; a request's line and headers must arrive within
// `header_timeout_ms` (counted from the connection's accept, or from the end of the previous
// response plus `keep_alive_timeout_ms` on a kept-alive connection), its body within
// `body_timeout_ms` of its headers, or the connection is closed. New connections wait in the
// kernel until their first byte (TCP_DEFER_ACCEPT); at most `max_connections` are open at once, at
// most `max_connections_per_client` from one address (more are closed at accept), and request
// bodies held in memory at once are capped at `max_buffered_body_bytes` (a request that would pass
// it answers 503 from its headers).
//
// Requests: the whole body is read before the handler runs. Framing is strict (RFC 9112 §6: a
// request a proxy could read differently is refused and its connection closed, so nothing can be
// smuggled behind it): a Content-Length that is not decimal digits, a repeated one (even with the
// same value) or one together with Transfer-Encoding answers 400; a Transfer-Encoding other than
// "chunked" 501; 64 header fields or more 431, headers over the 64 KiB buffer 431 (the library's own
// answer); a Content-Length above `max_body_bytes` (or a chunked body growing past it) 413;
// `Expect: 100-continue` gets "100 Continue" before the body is read, another expectation 417. An
// absolute-form target (`GET http://host/health`) is served as its path; `OPTIONS *` answers 204 with
// the methods allowed. Then `on_head` sees the request without its body and may answer it at once
// (authentication: 401 before a byte of the body is read; per-path body limits), which closes the
// connection. All of these before the handler, with `error_body(status, message)` as the body of
// the layer's own answers. OPTIONS (a CORS preflight) answers 204 before the handler when
// `cors_origin` is set, and every response then carries Access-Control-Allow-Origin.
//
// Thread-safety: the handler runs concurrently on the worker threads; an HttpExchange is used by
// its handler's thread only (the server's event thread reads what it queues).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace zipmoe::api {

struct HttpRequest;
class HttpExchange;

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // IPv4 address or "0.0.0.0"
  int port = 8080;                 // 1..65535; 0 = a free port the kernel picks (HttpServer::port())
  int threads = 64;                // handler workers (requests handled at once), >= 1
  int priority_threads = 2;        // workers for requests `priority` accepts, >= 1
  int queue = 1024;                // listen backlog
  int read_timeout_ms = 10000;     // a connection that moves no byte this long is closed (>= 1)
  int keep_alive_timeout_ms = 5000;  // an idle keep-alive connection is closed after this (>= 0)
  int header_timeout_ms = 10000;   // a request's line and headers arrive within this (>= 1)
  int body_timeout_ms = 60000;     // its body within this of its headers (>= 1)
  int max_connections = 1000;      // open at once (>= 1); the soft RLIMIT_NOFILE is raised to fit
  int max_connections_per_client = 0;  // from one IP address; 0 = max_connections
  size_t max_body_bytes = size_t{32} << 20;  // larger request bodies answer 413
  size_t max_buffered_body_bytes = size_t{256} << 20;  // request bodies in memory at once; more = 503
  std::string cors_origin = "*";   // Access-Control-Allow-Origin; "" = no CORS headers, OPTIONS unhandled
  // Body of the responses the layer itself sends (400, 413, ...): (status, message) -> (content
  // type, body). Empty = text/plain message.
  std::function<std::pair<std::string, std::string>(int status, const std::string& message)> error_body;
  // Called on the event thread with the request line and headers (body empty, not yet read); must
  // not block. A response it sends ends the request, with "Connection: close", and the body is
  // never read into memory. Empty = none.
  std::function<void(const HttpRequest& head, HttpExchange& exchange)> on_head;
  // Called on the event thread with the request's head: true = its handler runs on the priority
  // workers. Empty = none does.
  std::function<bool(const HttpRequest& head)> priority;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // percent-decoded, without the query; the path of an absolute-form target
  std::string query;   // after '?', as sent; "" when none
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_addr;
  int remote_port = 0;

  // The first header named `name` (ASCII case-insensitive), "" when absent.
  std::string Header(std::string_view name) const;
};

struct HttpCall;  // one request's shared state (http_server.cc)

// The response side of one request. Either Send once, or BeginStream + Write... + EndStream.
class HttpExchange {
 public:
  explicit HttpExchange(std::shared_ptr<HttpCall> call);
  ~HttpExchange();  // ends a stream left open
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
  // waiting to be read count as alive).
  bool ClientGone();

 private:
  // The response head (and a Send's body) for the event thread to queue; false once sent or gone.
  bool Respond(int status, std::string_view content_type, bool stream, std::string_view body);
  std::shared_ptr<HttpCall> call_;
  std::vector<std::pair<std::string, std::string>> headers_;
  bool sent_ = false;
  bool close_ = false;
  int status_ = 0;
};

using HttpHandler = std::function<void(const HttpRequest& request, HttpExchange& exchange)>;

class HttpServer {
 public:
  // Binds host:port and starts serving with `handler` (which must answer every request it gets; one
  // that returns without sending gets a 500). Errors: kInvalidArgument for bad options,
  // kUnavailable when the address cannot be bound (naming it) or the library cannot start.
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting, waits for the handlers running now (and queued) to return (make them return
  // first: a handler waiting on generation blocks this), then closes every connection.
  void Stop();
  int port() const;  // the bound port (the kernel's pick when options.port was 0)
  const HttpServerOptions& options() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zipmoe::api
