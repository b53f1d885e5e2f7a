// Tests for common/messaging (typed messages, verified decoding) and common/messaging_channel
// (ZeroMQ transport): every message type round-trips bit-exactly in memory and over inproc://, ipc://
// and tcp://127.0.0.1; random bytes, truncations, flipped bytes, a wrong version, a missing or
// unknown body and out-of-range enums are rejected with a clear error and never crash; a channel
// drops and counts bad messages and keeps serving; recv timeouts give kDeadlineExceeded; a ROUTER
// routes replies to the right DEALER by routing id.
#include "common/messaging.h"
#include "common/messaging_channel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "schemas/messages_generated.h"
#include "tests/test_util.h"

namespace zipmoe::messaging {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{5000};  // generous: only reached when a test fails

// One value of every Body alternative, with fields chosen so that a swapped, truncated or
// sign-mangled field shows (all bits used, negatives, empty and non-ASCII strings, embedded NUL).
std::vector<Body> AllBodies() {
  constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
  ChunkRead e;
  e.op_id = 0xFEDCBA9876543210ull;
  e.attempt = 3;
  e.file_offset = 4096ull * 1234567;
  e.stored_bytes = 1000001;
  e.dst_offset = 1ull << 40;
  e.dst_capacity_bytes = 1003520;
  e.xxh64 = kMax64;
  e.tensor_name = "model.layers.3.mlp.experts.7.up_proj.weight";
  e.layer_id = 3;
  e.expert_id = 7;
  e.kind = ChunkKind::kE;
  e.chunk_index = 2;
  ChunkRead sm = e;
  sm.op_id = 1;
  sm.attempt = 0;
  sm.kind = ChunkKind::kSm;
  sm.tensor_name = std::string("t\0\xc3\xa9", 4);  // embedded NUL, UTF-8
  sm.layer_id = std::numeric_limits<int32_t>::min();
  sm.expert_id = -1;
  sm.chunk_index = std::numeric_limits<int32_t>::max();
  ChunkRead defaults;  // every field at its default: nothing written but the table

  ReadCompletion read_failed;
  read_failed.op_id = 42;
  read_failed.attempt = 1;
  read_failed.status = Status::Corruption("experts.bin@8192: E-chunk 0 of 'x' (layer 1, expert 2): xxh64 mismatch");
  read_failed.kind = ChunkKind::kSm;
  read_failed.stored_bytes = 123;
  read_failed.read_bytes = 4096;
  read_failed.read_us = kMax64 - 1;
  read_failed.verify_us = 17;

  DecodeRequest decode;
  decode.op_id = kMax64;
  decode.attempt = 0xFFFFFFFFu;
  decode.priority = -5;
  decode.kind = DecodeKind::kDecodeEChunk;
  decode.codec = Codec::kLz4;
  decode.src_offset = 8192;
  decode.stored_bytes = 777;
  decode.dst_offset = 1ull << 33;
  decode.raw_bytes = 65536;
  decode.tensor_name = "w1";
  decode.layer_id = 0;
  decode.expert_id = 0;
  decode.chunk_index = 0;
  DecodeRequest recover = decode;
  recover.kind = DecodeKind::kRecoverBf16;
  recover.codec = Codec::kNone;
  recover.sm_offset = 12288;
  recover.expected_xxh64 = 0;  // present-and-zero must differ from absent
  recover.chunk_index = -1;

  DecodeCompletion decoded;
  decoded.op_id = 9;
  decoded.attempt = 2;
  decoded.worker_index = 5;
  decoded.run_us = 1234;
  DecodeCompletion cancelled;
  cancelled.op_id = 10;
  cancelled.status = Status::Unavailable("stopped before the op ran");

  WorkerReady ready{8, 7, "/zipmoe-arena", 3ull << 30, 4242, 500, kRoleDecompressor};
  LayerRequest layer{23, {0, 5, 59}, {1, 7, 1}, {0.5f, 0.25f, -0.0f, 1e-30f}, 2};
  ExpertReady expert{23, 59, Status::Ok(), 1ull << 36, 4096, kMax64, 1408, 2048, {}, {}};
  ExpertReady expert_planes{23, 58, Status::Ok(), 0, 0, 0, 1408, 2048, {1, 1ull << 40, kMax64}, {7, 8, 9}};
  ExpertReady expert_failed;
  expert_failed.layer_id = -1;
  expert_failed.status = Status::Corruption("layer 3: E-chunk 1 of 'w': xxh64 mismatch");
  Heartbeat heartbeat{500, 3};

  // Cache manager (scheduler <-> cache-manager).
  CacheHelloReply hello_reply;
  hello_reply.request_id = kMax64;
  hello_reply.arena_name = "/zipmoe-arena";
  hello_reply.arena_bytes = 3ull << 30;
  hello_reply.budget_bytes = 3ull << 30;
  hello_reply.policy = 1;
  hello_reply.pools = "FCSE";
  hello_reply.staging_offsets = {0, 1ull << 20, kMax64};
  hello_reply.staging_e_sm_bytes = 4096;
  hello_reply.staging_e_plane_offset = 4096;
  hello_reply.staging_bf16_offset = 8192;
  hello_reply.staging_slot_bytes = 12288;
  hello_reply.sm_read_us = 1.5;
  hello_reply.e_read_us = 0.25;
  hello_reply.decompress_us = 3;
  hello_reply.recovery_us = 0;
  hello_reply.expert_compute_us = 1e-9;
  hello_reply.n_shards = 4;
  CacheHelloReply hello_refused;
  hello_refused.status = Status::InvalidArgument("arena mismatch");
  CacheLookupReply lookup_reply{9, Status::Ok(), 3, {{0, 0, 0, 0}, {59, 4, kMax64, 12}}, 17, {1, 2, 3, 4, 5, 6},
                                Status::InvalidArgument("admit layer 3 expert 1: outside the arena")};
  CacheAdmitItem admit_item{3, 59, 12, true, kCachePartE | kCachePartSm | kCachePartBf16, {0, 4096, kMax64},
                            {1, 2, 3}, {4, 5, 6}, {}, false};
  CacheAdmitItem admit_planes{3, 58, 13, true, kCachePartE | kCachePartSm | kCachePartBf16, {0, 4096, kMax64},
                              {1, 2, 3}, {4, 5, 6}, {7, 8, kMax64}, true};
  CacheStats stats{5, 10, 3, 1, 0, std::vector<uint64_t>(28, 7), {1, 2, 3, 4, 5}};

  return {ReadRequest{{e, sm, defaults}},
          ReadRequest{},
          read_failed,
          ReadCompletion{},
          decode,
          recover,
          decoded,
          cancelled,
          ready,
          heartbeat,
          Disconnect{"SIGTERM"},
          Disconnect{},
          layer,
          LayerRequest{},
          expert,
          expert_planes,
          expert_failed,
          LeaseRelease{7, -3},
          LayerEnd{23},
          Ack{},
          Ack{Status::InvalidArgument("EndLayer(3): the active layer is 4")},
          CacheHello{1, 4242, 500, "/zipmoe-arena"},
          CacheHello{},
          hello_reply,
          hello_refused,
          CacheLookup{9, 3, {0, 59}, {0.125f, 0.875f}},
          CacheLookup{9, 3, {0, 59}, {}},
          lookup_reply,
          CacheLookupReply{},
          CacheAdmit{10, {admit_item, CacheAdmitItem{}, admit_planes}, true},
          CacheAdmit{},
          CacheReply{11, Status::Unavailable("no CacheHello from this client")},
          CacheStatsRequest{12},
          stats};
}

TEST(MessagingTest, AllBodiesCoversEveryMessageType) {
  std::vector<bool> seen(std::variant_size_v<Body>, false);
  for (const Body& body : AllBodies()) seen[body.index()] = true;
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_TRUE(seen[i]) << "no sample of body index " << i;
}

TEST(MessagingTest, EveryMessageRoundTripsBitExactly) {
  for (const Body& body : AllBodies()) {
    Message in;
    in.sender = "scheduler";
    in.body = body;
    const std::string bytes = EncodeMessage(in);
    auto out = DecodeMessage(bytes.data(), bytes.size());
    ASSERT_TRUE(out.ok()) << BodyName(body) << ": " << out.status().ToString();
    EXPECT_EQ(out->version, kMessageVersion);
    EXPECT_EQ(out->sender, "scheduler");
    EXPECT_TRUE(*out == in) << BodyName(body);
    EXPECT_STREQ(BodyName(out->body), BodyName(body));
    // Re-encoding the decoded value gives the same bytes.
    EXPECT_EQ(EncodeMessage(*out), bytes) << BodyName(body);
  }
}

TEST(MessagingTest, FieldsSurviveExactly) {
  const std::vector<Body> bodies = AllBodies();
  const std::string bytes = EncodeMessage("s", bodies[0]);
  auto out = DecodeMessage(bytes.data(), bytes.size());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto& ops = std::get<ReadRequest>(out->body).ops;
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].op_id, 0xFEDCBA9876543210ull);
  EXPECT_EQ(ops[0].xxh64, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ops[0].dst_offset, 1ull << 40);
  EXPECT_EQ(ops[1].tensor_name, std::string("t\0\xc3\xa9", 4));
  EXPECT_EQ(ops[1].layer_id, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ops[1].kind, ChunkKind::kSm);
  EXPECT_EQ(ops[2].layer_id, -1);  // schema defaults match the C++ defaults

  const std::string failed = EncodeMessage("s", bodies[2]);
  auto completion = DecodeMessage(failed.data(), failed.size());
  ASSERT_TRUE(completion.ok());
  const Status& status = std::get<ReadCompletion>(completion->body).status;
  EXPECT_EQ(status.code(), StatusCode::kCorruption);
  EXPECT_THAT(status.message(), HasSubstr("experts.bin@8192"));

  const std::string recover = EncodeMessage("s", bodies[5]);
  auto decoded = DecodeMessage(recover.data(), recover.size());
  ASSERT_TRUE(decoded.ok());
  ASSERT_TRUE(std::get<DecodeRequest>(decoded->body).expected_xxh64.has_value());
  EXPECT_EQ(*std::get<DecodeRequest>(decoded->body).expected_xxh64, 0u);
  const std::string decode = EncodeMessage("s", bodies[4]);
  decoded = DecodeMessage(decode.data(), decode.size());
  ASSERT_TRUE(decoded.ok());
  EXPECT_FALSE(std::get<DecodeRequest>(decoded->body).expected_xxh64.has_value());
}

TEST(MessagingTest, DecodesFromAnUnalignedBuffer) {
  const std::string bytes = EncodeMessage("s", AllBodies()[4]);
  std::vector<char> buffer(bytes.size() + 1);
  std::memcpy(buffer.data() + 1, bytes.data(), bytes.size());
  auto out = DecodeMessage(buffer.data() + 1, bytes.size());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->body == AllBodies()[4]);
}

// ---- Malformed messages ------------------------------------------------------------------------

TEST(MessagingTest, RandomBytesAreRejected) {
  std::mt19937_64 rng(20240605);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(rng() % 300, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    // Some get past the identifier check, some also past the size prefix, to reach the Verifier.
    if (trial % 3 >= 1 && bytes.size() >= 12) std::memcpy(&bytes[8], "ZMSG", 4);
    if (trial % 3 == 2 && bytes.size() >= 12) {
      const uint32_t prefix = static_cast<uint32_t>(bytes.size() - 4);
      std::memcpy(&bytes[0], &prefix, 4);
    }
    auto out = DecodeMessage(bytes.data(), bytes.size(), "tcp://peer");
    ASSERT_FALSE(out.ok()) << "trial " << trial;
    EXPECT_THAT(out.status().code(), ::testing::AnyOf(StatusCode::kCorruption, StatusCode::kInvalidArgument));
    EXPECT_THAT(out.status().message(), HasSubstr("tcp://peer"));
  }
  auto empty = DecodeMessage(nullptr, 0);
  EXPECT_EQ(empty.status().code(), StatusCode::kCorruption);
  const std::string text = "GET / HTTP/1.1\r\n\r\n";
  auto http = DecodeMessage(text.data(), text.size());
  EXPECT_EQ(http.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(http.status().message(), HasSubstr("file identifier"));
}

TEST(MessagingTest, EveryTruncationIsRejected) {
  for (const Body& body : AllBodies()) {
    const std::string bytes = EncodeMessage("scheduler", body);
    for (size_t n = 0; n < bytes.size(); ++n) {
      auto out = DecodeMessage(bytes.data(), n);
      ASSERT_FALSE(out.ok()) << BodyName(body) << " cut to " << n << " of " << bytes.size();
      EXPECT_EQ(out.status().code(), StatusCode::kCorruption) << out.status().ToString();
    }
    const std::string extended = bytes + std::string(8, '\0');  // trailing bytes are as suspect
    auto out = DecodeMessage(extended.data(), extended.size());
    EXPECT_EQ(out.status().code(), StatusCode::kCorruption) << BodyName(body);
    EXPECT_THAT(out.status().message(), HasSubstr("size prefix"));
  }
}

TEST(MessagingTest, FlippedBytesNeverCrash) {
  // A flipped byte may still decode (e.g. inside a scalar), but must never read out of bounds or
  // produce an out-of-range enum; run under ASan for the full guarantee.
  for (const Body& body : AllBodies()) {
    const std::string bytes = EncodeMessage("scheduler", body);
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (const uint8_t mask : {0x01, 0x80, 0xFF}) {
        std::string bad = bytes;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        auto out = DecodeMessage(bad.data(), bad.size());
        if (!out.ok()) continue;
        if (const auto* r = std::get_if<ReadRequest>(&out->body)) {
          for (const ChunkRead& op : r->ops) EXPECT_LE(static_cast<int>(op.kind), 1);
        }
        if (const auto* d = std::get_if<DecodeRequest>(&out->body)) {
          EXPECT_LE(static_cast<int>(d->kind), 1);
          EXPECT_LE(static_cast<int>(d->codec), 2);
        }
      }
    }
  }
}

// Builds an Envelope by hand, so tests can write what EncodeMessage never would.
std::string RawEnvelope(uint16_t version, fb::Body type, bool with_body, const char* identifier = "ZMSG") {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<void> body = 0;
  if (with_body) body = fb::CreateHeartbeat(fbb, 500, 1).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, version, fbb.CreateString("rogue"), type, body), identifier);
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

TEST(MessagingTest, WrongVersionIsRejectedNamingBoth) {
  for (const uint16_t version : {uint16_t{0}, uint16_t{kMessageVersion + 1}, uint16_t{0xFFFF}}) {
    const std::string bytes = RawEnvelope(version, fb::Body::Heartbeat, true);
    auto out = DecodeMessage(bytes.data(), bytes.size(), "ipc:///run/zipmoe/scheduler");
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(out.status().message(), HasSubstr(fmt::format("message version {} from 'rogue'", version)));
    EXPECT_THAT(out.status().message(), HasSubstr(fmt::format("speaks version {}", kMessageVersion)));
    EXPECT_THAT(out.status().message(), HasSubstr("ipc:///run/zipmoe/scheduler"));
  }
  const std::string good = RawEnvelope(kMessageVersion, fb::Body::Heartbeat, true);
  EXPECT_TRUE(DecodeMessage(good.data(), good.size()).ok());
}

TEST(MessagingTest, MissingOrUnknownBodyAndForeignIdentifierAreRejected) {
  std::string bytes = RawEnvelope(kMessageVersion, fb::Body::NONE, false);
  auto out = DecodeMessage(bytes.data(), bytes.size());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("no body"));

  bytes = RawEnvelope(kMessageVersion, fb::Body::Heartbeat, false);  // type without table
  out = DecodeMessage(bytes.data(), bytes.size());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("no body"));

  bytes = RawEnvelope(kMessageVersion, static_cast<fb::Body>(200), true);  // a newer peer's message
  out = DecodeMessage(bytes.data(), bytes.size());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("unknown body type 200"));

  bytes = RawEnvelope(kMessageVersion, fb::Body::Heartbeat, true, "ZMOE");  // a manifest, not a message
  out = DecodeMessage(bytes.data(), bytes.size());
  EXPECT_EQ(out.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(out.status().message(), HasSubstr("file identifier"));
}

TEST(MessagingTest, OutOfRangeEnumsAreRejectedNamingTheField) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::ChunkRead>> ops = {
      fb::CreateChunkRead(fbb, 1), fb::CreateChunkRead(fbb, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, static_cast<fb::ChunkKind>(7))};
  const auto request = fb::CreateReadRequest(fbb, fbb.CreateVector(ops)).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, kMessageVersion, 0, fb::Body::ReadRequest, request),
                         fb::EnvelopeIdentifier());
  auto out = DecodeMessage(fbb.GetBufferPointer(), fbb.GetSize());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("ReadRequest.ops[1]: ChunkRead.kind = 7"));

  fbb.Clear();
  const auto completion = fb::CreateDecodeCompletion(fbb, 1, 0, static_cast<fb::StatusCode>(99)).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, kMessageVersion, 0, fb::Body::DecodeCompletion, completion),
                         fb::EnvelopeIdentifier());
  out = DecodeMessage(fbb.GetBufferPointer(), fbb.GetSize());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("DecodeCompletion.status_code = 99"));

  fbb.Clear();
  const auto decode = fb::CreateDecodeRequest(fbb, 1, 0, 0, fb::DecodeKind::DecodeEChunk,
                                              static_cast<fb::Codec>(3)).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, kMessageVersion, 0, fb::Body::DecodeRequest, decode),
                         fb::EnvelopeIdentifier());
  out = DecodeMessage(fbb.GetBufferPointer(), fbb.GetSize());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("DecodeRequest.codec = 3"));
}

// ---- Channels ----------------------------------------------------------------------------------

// A name unique to this process and call, so parallel test runs never collide.
std::string UniqueName(const char* tag) {
  static int counter = 0;
  return fmt::format("zipmoe-test-{}-{}-{}", ::getpid(), counter++, tag);
}

ChannelOptions Opts(SocketKind kind, std::string endpoint, bool bind, std::string identity = "",
                    std::string sender = "") {
  ChannelOptions options;
  options.kind = kind;
  options.endpoint = std::move(endpoint);
  options.bind = bind;
  options.identity = std::move(identity);
  options.sender = std::move(sender);
  return options;
}

Channel OpenOrDie(zmq::context_t& context, ChannelOptions options) {
  auto channel = Channel::Open(context, options);
  EXPECT_TRUE(channel.ok()) << channel.status().ToString();
  if (!channel.ok()) std::abort();
  return std::move(channel).value();
}

// A ROUTER bound at `endpoint` and a DEALER "worker-1" connected to it: every message type goes
// DEALER -> ROUTER and back ROUTER -> DEALER, compared field by field.
void RoundTripOver(const std::string& endpoint) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, endpoint, true, "", "scheduler"));
  Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "worker-1", "decompressor-1"));
  for (const Body& body : AllBodies()) {
    ASSERT_TRUE(dealer.Send(body, kTimeout).ok()) << BodyName(body);
    auto up = router.Recv(kTimeout);
    ASSERT_TRUE(up.ok()) << endpoint << " " << BodyName(body) << ": " << up.status().ToString();
    EXPECT_EQ(up->peer, "worker-1");
    EXPECT_EQ(up->message.sender, "decompressor-1");
    EXPECT_EQ(up->message.version, kMessageVersion);
    EXPECT_TRUE(up->message.body == body) << endpoint << " " << BodyName(body);

    ASSERT_TRUE(router.SendTo(up->peer, body, kTimeout).ok()) << BodyName(body);
    auto down = dealer.Recv(kTimeout);
    ASSERT_TRUE(down.ok()) << endpoint << " " << BodyName(body) << ": " << down.status().ToString();
    EXPECT_EQ(down->peer, "");
    EXPECT_EQ(down->message.sender, "scheduler");
    EXPECT_TRUE(down->message.body == body) << endpoint << " " << BodyName(body);
  }
  EXPECT_EQ(router.stats().received, AllBodies().size());
  EXPECT_EQ(router.stats().sent, AllBodies().size());
  EXPECT_EQ(dealer.stats().bad_messages, 0u);
}

TEST(ChannelTest, RoundTripOverInproc) { RoundTripOver("inproc://" + UniqueName("rt")); }

TEST(ChannelTest, RoundTripOverIpc) {
  testing::TempDir dir;
  RoundTripOver("ipc://" + dir.Sub("scheduler.ipc"));
}

TEST(ChannelTest, RoundTripOverTcpEphemeralLoopbackPort) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "tcp://127.0.0.1:*", true, "", "storage"));
  EXPECT_THAT(router.endpoint(), ::testing::StartsWith("tcp://127.0.0.1:"));
  EXPECT_NE(router.endpoint(), "tcp://127.0.0.1:*");
  RoundTripOver("tcp://127.0.0.1:*");
}

TEST(ChannelTest, PairPipeBetweenThreadsOfOneContext) {
  zmq::context_t context;
  const std::string endpoint = "inproc://" + UniqueName("pair");
  Channel a = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, true, "", "a"));
  Channel b = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, false, "", "b"));
  ASSERT_TRUE(a.Send(Heartbeat{100, 0}, kTimeout).ok());
  auto got = b.Recv(kTimeout);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->message.body == Body(Heartbeat{100, 0}));
  EXPECT_EQ(got->message.sender, "a");
}

TEST(ChannelTest, RecvTimeoutIsDeadlineExceeded) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("idle"), true));
  const auto start = std::chrono::steady_clock::now();
  auto got = router.Recv(milliseconds(50));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_THAT(got.status().message(), HasSubstr("no message within 50 ms"));
  EXPECT_GE(waited, milliseconds(50));
  EXPECT_LT(waited, milliseconds(2000));
  EXPECT_EQ(router.Recv(milliseconds(0)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(router.Recv(milliseconds(-1)).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChannelTest, RouterRoutesRepliesByIdentity) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("q"), true, "", "scheduler"));
  Channel a = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "worker-a", "a"));
  Channel b = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "worker-b", "b"));
  Channel anonymous = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "", "c"));
  ASSERT_TRUE(a.Send(WorkerReady{2, 2, "/arena", 4096, 1, 500, ""}, kTimeout).ok());
  ASSERT_TRUE(b.Send(WorkerReady{4, 4, "/arena", 4096, 2, 500, ""}, kTimeout).ok());
  ASSERT_TRUE(anonymous.Send(WorkerReady{1, 1, "/arena", 4096, 3, 500, ""}, kTimeout).ok());

  // Answer each READY with a request carrying the worker's own pid as op_id.
  std::vector<std::string> peers;
  for (int i = 0; i < 3; ++i) {
    auto ready = router.Recv(kTimeout);
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    peers.push_back(ready->peer);
    DecodeRequest request;
    request.op_id = static_cast<uint64_t>(std::get<WorkerReady>(ready->message.body).pid);
    ASSERT_TRUE(router.SendTo(ready->peer, request, kTimeout).ok());
  }
  EXPECT_THAT(peers, ::testing::UnorderedElementsAre("worker-a", "worker-b", ::testing::_));
  for (const std::string& peer : peers) {
    if (peer != "worker-a" && peer != "worker-b") {
      EXPECT_EQ(peer.size(), 5u);  // ZeroMQ's generated id: 0 then 4 bytes
      EXPECT_THAT(PrintableId(peer), ::testing::StartsWith("0x00"));
    }
  }
  const std::pair<Channel*, uint64_t> expected[] = {{&a, 1}, {&b, 2}, {&anonymous, 3}};
  for (const auto& [channel, op_id] : expected) {
    auto got = channel->Recv(kTimeout);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(std::get<DecodeRequest>(got->message.body).op_id, op_id);
    EXPECT_EQ(channel->Recv(milliseconds(0)).status().code(), StatusCode::kDeadlineExceeded);
  }

  // An unknown peer is an error, not a silent drop (ZMQ_ROUTER_MANDATORY).
  const Status gone = router.SendTo("worker-z", Heartbeat{500, 0}, milliseconds(100));
  EXPECT_EQ(gone.code(), StatusCode::kUnavailable) << gone.ToString();
  EXPECT_THAT(gone.message(), HasSubstr("worker-z"));
}

TEST(ChannelTest, BadMessagesAreDroppedCountedAndTheChannelKeepsServing) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("bad"), true));
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "rogue");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(router.endpoint());

  const std::string valid = EncodeMessage("rogue", Heartbeat{1, 2});
  const std::string wrong_version = RawEnvelope(kMessageVersion + 1, fb::Body::Heartbeat, true);
  std::mt19937_64 rng(7);
  std::string garbage(64, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());

  raw.send(zmq::buffer(garbage));                                       // random bytes
  raw.send(zmq::buffer(valid.data(), valid.size() / 2));                 // truncated
  raw.send(zmq::buffer(wrong_version));                                  // wrong version
  raw.send(zmq::buffer(valid), zmq::send_flags::sndmore);                // two frames
  raw.send(zmq::buffer(valid));
  raw.send(zmq::message_t(), zmq::send_flags::none);                     // empty frame
  raw.send(zmq::buffer(valid));                                          // fine

  const StatusCode want[] = {StatusCode::kCorruption, StatusCode::kCorruption, StatusCode::kInvalidArgument,
                             StatusCode::kInvalidArgument, StatusCode::kCorruption};
  for (size_t i = 0; i < std::size(want); ++i) {
    auto got = router.Recv(kTimeout);
    ASSERT_FALSE(got.ok()) << "message " << i;
    EXPECT_EQ(got.status().code(), want[i]) << got.status().ToString();
    EXPECT_THAT(got.status().message(), HasSubstr(router.endpoint() + " peer rogue"));
  }
  auto good = router.Recv(kTimeout);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->message.body == Body(Heartbeat{1, 2}));
  EXPECT_EQ(router.stats().bad_messages, std::size(want));
  EXPECT_EQ(router.stats().received, 1u);
}

TEST(ChannelTest, MisuseAndBadEndpointsAreErrors) {
  zmq::context_t context;
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kRouter, "http://x", true)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kRouter, "tcp://", true)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kRouter, "ipc:///" + std::string(200, 'x'), true)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kDealer, "inproc://x", false, std::string(1, '\0') + "id"))
                .status().code(),
            StatusCode::kInvalidArgument);

  const std::string endpoint = "inproc://" + UniqueName("twice");
  Channel first = OpenOrDie(context, Opts(SocketKind::kRouter, endpoint, true));
  auto second = Channel::Open(context, Opts(SocketKind::kRouter, endpoint, true));
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_THAT(second.status().message(), HasSubstr(endpoint));

  EXPECT_EQ(first.Send(Heartbeat{}, kTimeout).code(), StatusCode::kInvalidArgument);
  Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, endpoint, false));
  EXPECT_EQ(dealer.SendTo("x", Heartbeat{}, kTimeout).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dealer.Send(Heartbeat{}, milliseconds(-1)).code(), StatusCode::kInvalidArgument);
}

TEST(ChannelTest, SendBeyondHighWaterMarkTimesOut) {
  zmq::context_t context;
  const std::string endpoint = "inproc://" + UniqueName("hwm");
  Channel pair_a = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, true));
  Channel pair_b = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, false));
  // Nobody reads pair_b; the default high-water marks (1000 each way) fill up.
  Status status;
  int sent = 0;
  while (status.ok() && sent < 100000) {
    status = pair_a.Send(Heartbeat{1, static_cast<uint32_t>(sent)}, milliseconds(0));
    if (status.ok()) ++sent;
  }
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
  EXPECT_GT(sent, 0);
  EXPECT_EQ(pair_a.Send(Heartbeat{}, milliseconds(20)).code(), StatusCode::kDeadlineExceeded);
  // Draining the reader makes room again (ZeroMQ re-opens the pipe at its low-water mark), and
  // nothing sent before the deadline was lost.
  int drained = 0;
  while (pair_b.Recv(milliseconds(0)).ok()) ++drained;
  EXPECT_EQ(drained, sent);
  EXPECT_TRUE(pair_a.Send(Heartbeat{}, kTimeout).ok());

  // A ROUTER whose peer stopped reading: SendTo times out instead of dropping (ROUTER_MANDATORY).
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("hwm-r"), true));
  Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "slow"));
  ASSERT_TRUE(dealer.Send(Heartbeat{}, kTimeout).ok());
  ASSERT_TRUE(router.Recv(kTimeout).ok());
  sent = 0;
  status = Status::Ok();
  while (status.ok() && sent < 100000) {
    status = router.SendTo("slow", Heartbeat{1, static_cast<uint32_t>(sent)}, milliseconds(0));
    if (status.ok()) ++sent;
  }
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
  EXPECT_GT(sent, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(router.SendTo("slow", Heartbeat{}, milliseconds(20)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(20));
}

TEST(ChannelTest, PrintableId) {
  EXPECT_EQ(PrintableId("worker-a"), "worker-a");
  EXPECT_EQ(PrintableId(std::string("\0\x01\xff", 3)), "0x0001ff");
  EXPECT_EQ(PrintableId(""), "0x");
}

}  // namespace
}  // namespace zipmoe::messaging
