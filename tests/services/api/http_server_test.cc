// HttpServer (services/api/http_server.h) over real sockets: pipelining, body limits, malformed
// Content-Length, strict framing (no request smuggling), answers from the head before the body,
// Expect: 100-continue, CORS preflight, chunked streaming, and the closed-client probe.
#include "services/api/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace zipmoe::api {
namespace {

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    off += static_cast<size_t>(n);
  }
}

// Reads until `stop` occurs `times` times, the peer closes, or the timeout.
std::string ReadUntil(int fd, const std::string& stop, int times = 1) {
  std::string out;
  char buf[65536];
  while (true) {
    size_t count = 0;
    for (size_t pos = out.find(stop); pos != std::string::npos; pos = out.find(stop, pos + 1)) ++count;
    if (count >= static_cast<size_t>(times)) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// One request on a new connection: sends `request`, reads until `stop` (or the close, or the
// timeout), closes.
std::string Ask(int port, const std::string& request, const std::string& stop) {
  const int fd = Connect(port);
  SendAll(fd, request);
  std::string got = ReadUntil(fd, stop);
  ::close(fd);
  return got;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpHandler handler, HttpServerOptions options = {}) {
    options.port = 0;  // replaced below
    Status last = Status::Ok();
    // A port another process holds is tried again elsewhere (ctest -j runs suites side by side);
    // only a failure on every attempt fails the test.
    for (int attempt = 0; attempt < 20 && !server_; ++attempt) {
      options.port = 20000 + static_cast<int>((::getpid() * 7 + attempt * 131) % 20000);
      auto started = HttpServer::Start(options, handler);
      if (started.ok()) server_ = std::move(started).value();
      else last = started.status();
    }
    ASSERT_TRUE(server_) << "no free port: " << last.ToString();
  }
  std::unique_ptr<HttpServer> server_;
};

HttpHandler Echo() {
  return [](const HttpRequest& r, HttpExchange& x) {
    x.Send(200, "text/plain", r.method + " " + r.path + " " + std::to_string(r.body.size()));
  };
}

TEST_F(HttpServerTest, AnswersEveryPipelinedRequestOnOneConnection) {
  Start(Echo());
  const int fd = Connect(server_->port());
  ASSERT_GE(fd, 0);
  std::string all;
  for (int i = 0; i < 201; ++i) all += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  SendAll(fd, all);
  const std::string got = ReadUntil(fd, "GET /health 0", 201);
  EXPECT_EQ(Count(got, "HTTP/1.1 200"), 201u);
  ::close(fd);
}

TEST_F(HttpServerTest, MalformedContentLengthIs400AndTooLargeIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  Start(Echo(), options);
  for (const char* bad : {"-5", "abc"}) {
    const std::string got =
        Ask(server_->port(), std::string("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: ") + bad + "\r\n\r\n", "\r\n\r\n");
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << bad << ": " << got;
  }
  EXPECT_EQ(Ask(server_->port(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", "\r\n\r\n")
                .rfind("HTTP/1.1 413", 0),
            0u);
  EXPECT_NE(Ask(server_->port(), "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", "POST /x 3").find("POST /x 3"),
            std::string::npos);
}

// Each request would hide a second one ("GET /smuggled") in what one reader takes for its body and
// another for the next request (RFC 9112 §6, issue 37): every one is refused with its status, the
// connection closed, and no second response ever comes.
TEST_F(HttpServerTest, AmbiguousFramingIsRefusedAndNothingIsSmuggled) {
  std::atomic<int> calls{0};
  Start([&calls](const HttpRequest& r, HttpExchange& x) {
    ++calls;
    x.Send(200, "text/plain", r.method + " " + r.path);
  });
  const std::string hidden = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string len = std::to_string(hidden.size());
  std::string many_headers;
  for (int i = 0; i < 70; ++i) many_headers += "X-H" + std::to_string(i) + ": v\r\n";
  const std::pair<std::string, std::string> cases[] = {
      {"HTTP/1.1 400", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3c\r\n\r\n" + hidden},
      {"HTTP/1.1 400", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +" + len + "\r\n\r\n" + hidden},
      {"HTTP/1.1 400", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: " + len + "\r\n\r\n" + hidden},
      {"HTTP/1.1 400", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + len + "\r\nContent-Length: " + len +
                           "\r\n\r\n" + hidden},
      {"HTTP/1.1 400", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
                           hidden},
      {"HTTP/1.1 501", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + hidden},
      {"HTTP/1.1 431", "POST /a HTTP/1.1\r\nHost: x\r\n" + many_headers + "Content-Length: " + len + "\r\n\r\n" + hidden},
      {"HTTP/1.1 400", "OPTIONS /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: " + len + "\r\n\r\n" + hidden},
  };
  for (const auto& [want, request] : cases) {
    const int fd = Connect(server_->port());
    ASSERT_GE(fd, 0);
    SendAll(fd, request);
    const std::string got = ReadUntil(fd, "never");  // everything until the server closes
    EXPECT_EQ(got.rfind(want, 0), 0u) << request.substr(0, 120) << "\n-> " << got.substr(0, 200);
    // One answer; libmicrohttpd 0.9.75 (Debian 12) writes the head of its own answer to a malformed
    // Content-Length twice (fixed upstream in 0.9.76), so every status line must be the refusal.
    EXPECT_GE(Count(got, want), 1u) << got;
    EXPECT_EQ(Count(got, "HTTP/1.1 "), Count(got, want)) << got;
    EXPECT_EQ(got.find("smuggled"), std::string::npos) << got;
    ::close(fd);
  }
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(HttpServerTest, OnHeadAnswersBeforeTheBodyIsReadAndClosesTheConnection) {
  HttpServerOptions options;
  std::atomic<int> bodies{0};
  options.on_head = [](const HttpRequest& head, HttpExchange& x) {
    EXPECT_TRUE(head.body.empty());
    if (head.Header("Authorization") != "Bearer k") x.Send(401, "text/plain", "no key");
  };
  Start([&bodies](const HttpRequest& r, HttpExchange& x) {
    ++bodies;
    x.Send(200, "text/plain", std::to_string(r.body.size()));
  }, options);
  // A 30 MiB body is announced but only its headers are sent: the 401 comes from them alone.
  const int fd = Connect(server_->port());
  SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 31457280\r\n\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string got = ReadUntil(fd, "no key");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  ::close(fd);
  EXPECT_NE(Ask(server_->port(),
                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 3\r\n\r\nabc",
                "\r\n\r\n3")
                .find("HTTP/1.1 200"),
            std::string::npos);
  EXPECT_EQ(bodies.load(), 1);
}

TEST_F(HttpServerTest, ExpectContinueIsHonouredAndOtherExpectationsAre417) {
  Start(Echo());
  const int fd = Connect(server_->port());
  SendAll(fd, "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  EXPECT_EQ(ReadUntil(fd, "\r\n\r\n").rfind("HTTP/1.1 100 Continue", 0), 0u);
  SendAll(fd, "abcd");
  EXPECT_NE(ReadUntil(fd, "POST /e 4").find("POST /e 4"), std::string::npos);
  ::close(fd);
  EXPECT_EQ(Ask(server_->port(), "POST /e HTTP/1.1\r\nHost: x\r\nExpect: something\r\nContent-Length: 4\r\n\r\nabcd",
                "\r\n\r\n")
                .rfind("HTTP/1.1 417", 0),
            0u);
}

TEST_F(HttpServerTest, CorsPreflightIsAnsweredBeforeTheHandler) {
  std::atomic<int> calls{0};
  Start([&calls](const HttpRequest&, HttpExchange& x) {
    ++calls;
    x.Send(401, "text/plain", "no");
  });
  const int fd = Connect(server_->port());
  SendAll(fd, "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://a\r\n"
              "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\r\n");
  const std::string got = ReadUntil(fd, "\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 204", 0), 0u) << got;
  EXPECT_NE(got.find("Access-Control-Allow-Origin: *"), std::string::npos);
  EXPECT_NE(got.find("Access-Control-Allow-Headers: authorization, content-type"), std::string::npos);
  EXPECT_EQ(calls.load(), 0);
  ::close(fd);
}

TEST_F(HttpServerTest, StreamsChunksAndSeesAClientThatLeft) {
  std::atomic<bool> saw_gone{false};
  Start([&saw_gone](const HttpRequest& r, HttpExchange& x) {
    if (r.path == "/stream") {
      x.BeginStream(200, "text/event-stream");
      x.Write("data: 1\n\n");
      x.Write("data: 2\n\n");
      x.EndStream();
      return;
    }
    // Waits (as a non-streaming generation does) until the client goes away.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (x.ClientGone()) {
        saw_gone = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    x.Send(200, "text/plain", "late");
  });
  int fd = Connect(server_->port());
  SendAll(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = ReadUntil(fd, "0\r\n\r\n");
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(got.find("9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos) << got;
  ::close(fd);
  fd = Connect(server_->port());
  SendAll(fd, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::close(fd);
  for (int i = 0; i < 100 && !saw_gone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(saw_gone.load());
}

TEST_F(HttpServerTest, IdleConnectionsDoNotStarveOtherClients) {
  HttpServerOptions options;
  options.threads = 8;  // far fewer workers than idle connections
  Start(Echo(), options);
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(Connect(server_->port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = Connect(server_->port());
  SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(ReadUntil(fd, "GET /health 0").find("HTTP/1.1 200"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ::close(fd);
  for (int i : idle) ::close(i);
}

// Issue 37: 60 clients that trickle one byte at a time and two requests that hold every handler
// worker do not keep /health (a priority request) from answering within 1 s, every time.
TEST_F(HttpServerTest, TricklingClientsAndBusyWorkersDoNotDelayPriorityRequests) {
  HttpServerOptions options;
  options.threads = 2;
  options.priority = [](const HttpRequest& head) { return head.path == "/health"; };
  std::atomic<bool> release{false};
  Start([&release](const HttpRequest& r, HttpExchange& x) {
    while (r.path == "/busy" && !release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    x.Send(200, "text/plain", r.method + " " + r.path + " " + std::to_string(r.body.size()));
  }, options);
  std::vector<int> busy;
  for (int i = 0; i < 2; ++i) {
    busy.push_back(Connect(server_->port()));
    SendAll(busy.back(), "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  std::vector<int> slow;
  for (int i = 0; i < 60; ++i) slow.push_back(Connect(server_->port()));
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  size_t sent = 0;
  int probes = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int fd : slow) ::send(fd, head.data() + sent % head.size(), 1, MSG_NOSIGNAL);
    ++sent;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_NE(Ask(server_->port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "GET /health 0").find("HTTP/1.1 200"),
              std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << "probe " << probes;
    ++probes;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_GE(probes, 10);
  release = true;
  for (int fd : busy) {
    EXPECT_NE(ReadUntil(fd, "GET /busy 0").find("HTTP/1.1 200"), std::string::npos);
    ::close(fd);
  }
  for (int fd : slow) ::close(fd);
}

// A request whose headers (or body) trickle in past their deadline loses its connection, with no
// handler run.
TEST_F(HttpServerTest, HeadersAndBodiesPastTheirDeadlineCloseTheConnection) {
  HttpServerOptions options;
  options.header_timeout_ms = 800;
  options.body_timeout_ms = 800;
  std::atomic<int> calls{0};
  Start([&calls](const HttpRequest& r, HttpExchange& x) {
    ++calls;
    x.Send(200, "text/plain", r.path);
  }, options);
  const std::string requests[] = {
      "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 'a') + "\r\n\r\n",
      "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n" + std::string(200, 'b'),
  };
  for (const std::string& request : requests) {
    const int fd = Connect(server_->port());
    const bool body = request.rfind("POST", 0) == 0;
    const size_t first = body ? request.find("\r\n\r\n") + 4 : 1;
    SendAll(fd, request.substr(0, first));
    const auto t0 = std::chrono::steady_clock::now();
    bool closed = false;
    for (size_t i = first; i < request.size() && !closed; ++i) {
      if (::send(fd, request.data() + i, 1, MSG_NOSIGNAL) != 1) closed = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      char c;
      const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_TRUE(closed) << request.substr(0, 20);
    EXPECT_LT(took, std::chrono::milliseconds(2500)) << request.substr(0, 20);
    ::close(fd);
  }
  EXPECT_EQ(calls.load(), 0);
  // A prompt request on the same server is served.
  EXPECT_NE(Ask(server_->port(), "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", "/ok").find("HTTP/1.1 200"), std::string::npos);
}

// The body deadline covers the body's arrival only: a handler that computes longer than body_timeout_ms
// after a complete POST (a long non-streaming completion) still answers on its connection.
TEST_F(HttpServerTest, AHandlerSlowerThanTheBodyDeadlineStillAnswers) {
  HttpServerOptions options;
  options.body_timeout_ms = 300;
  options.header_timeout_ms = 300;
  Start([](const HttpRequest& r, HttpExchange& x) {
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
    x.Send(200, "text/plain", "done " + r.body);
  }, options);
  const std::string got =
      Ask(server_->port(), "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody", "done body");
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(got.find("done body"), std::string::npos) << got;
}

// Request bodies held at once are capped: a request that would pass the cap answers 503 from its
// headers; `OPTIONS *` and an absolute-form target are answered (RFC 9112 §3.2).
TEST_F(HttpServerTest, BufferedBodiesAreCappedAndEveryTargetFormIsAnswered) {
  HttpServerOptions options;
  options.max_body_bytes = 1 << 20;
  options.max_buffered_body_bytes = 1000;
  Start(Echo(), options);
  const int held = Connect(server_->port());  // 800 bytes announced, 10 sent: 800 held
  SendAll(held, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 800\r\n\r\n0123456789");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Ask(server_->port(), "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n", "\r\n\r\n")
                .rfind("HTTP/1.1 503", 0),
            0u);
  SendAll(held, std::string(790, 'x'));
  EXPECT_NE(ReadUntil(held, "POST /a 800").find("POST /a 800"), std::string::npos);
  ::close(held);
  // Released once its handler has returned (just after its response went out): fits again.
  std::string got_again;
  for (int attempt = 0; attempt < 40; ++attempt) {
    got_again = Ask(server_->port(), "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n" + std::string(300, 'y'),
                    "POST /b 300");
    if (got_again.rfind("HTTP/1.1 503", 0) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_NE(got_again.find("POST /b 300"), std::string::npos) << got_again;

  const std::string got = Ask(server_->port(), "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 204", 0), 0u) << got;
  EXPECT_NE(got.find("Allow: GET, HEAD, POST, OPTIONS"), std::string::npos) << got;
  EXPECT_NE(Ask(server_->port(), "GET http://localhost:1/health?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n", "GET /health 0")
                .find("GET /health 0"),
            std::string::npos);
}

TEST(HttpServerStartTest, BadOptionsAndBusyPortsAreErrors) {
  HttpServerOptions options;
  options.port = 65536;
  EXPECT_EQ(HttpServer::Start(options, Echo()).status().code(), StatusCode::kInvalidArgument);
  options.port = -1;
  EXPECT_EQ(HttpServer::Start(options, Echo()).status().code(), StatusCode::kInvalidArgument);
  options.port = 8080;
  options.threads = 0;
  EXPECT_EQ(HttpServer::Start(options, Echo()).status().code(), StatusCode::kInvalidArgument);
}

// Port 0: the kernel picks a free port, which port() reports and which answers (the executor behind
// the HTTP front listens so).
TEST(HttpServerStartTest, PortZeroListensOnAFreePortItReports) {
  HttpServerOptions options;
  options.port = 0;
  Result<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, Echo());
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_GT((*server)->port(), 0);
  EXPECT_NE(Ask((*server)->port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "GET /health 0").find("GET /health 0"),
            std::string::npos);
  (*server)->Stop();
}

}  // namespace
}  // namespace zipmoe::api
