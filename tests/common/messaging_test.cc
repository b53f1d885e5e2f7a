// Tests for common/messaging (generated message types, verified decoding): every message type
// round-trips bit-exactly in memory; random bytes, truncations, flipped bytes, a wrong version, a
// missing or unknown body, and out-of-range enums are rejected with a
// clear error and never crash. The transport: messaging_channel_test.cc.
#include "common/ipc/messaging.h"

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
#include "tests/common/messaging_samples.h"

namespace zipmoe::messaging {
namespace {

using ::testing::HasSubstr;

using samples::AllBodies;
using samples::RawEnvelope;

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
  EXPECT_EQ(ops[0]->op_id, 0xFEDCBA9876543210ull);
  EXPECT_EQ(ops[0]->xxh64, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ops[0]->dst_offset, 1ull << 40);
  EXPECT_EQ(ops[1]->tensor_name, std::string("t\0\xc3\xa9", 4));
  EXPECT_EQ(ops[1]->layer_id, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(FromWire(ops[1]->kind), ChunkKind::kSm);
  EXPECT_EQ(ops[2]->layer_id, -1);  // schema defaults

  const std::string failed = EncodeMessage("s", bodies[2]);
  auto completion = DecodeMessage(failed.data(), failed.size());
  ASSERT_TRUE(completion.ok());
  const Status status = StatusOf(std::get<ReadCompletion>(completion->body));
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
          for (const auto& op : r->ops) EXPECT_LE(static_cast<int>(op->kind), 1);
        }
        if (const auto* d = std::get_if<DecodeRequest>(&out->body)) {
          EXPECT_LE(static_cast<int>(d->kind), 1);
          EXPECT_LE(static_cast<int>(d->codec), 2);
        }
        if (const auto* batch = std::get_if<DecodeRequests>(&out->body)) {
          for (const auto& d : batch->items) {
            EXPECT_LE(static_cast<int>(d->kind), 1);
            EXPECT_LE(static_cast<int>(d->codec), 2);
          }
        }
      }
    }
  }
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

  // Inside a batch, the bad item is named by its index.
  fbb.Clear();
  std::vector<flatbuffers::Offset<fb::DecodeRequest>> items = {
      fb::CreateDecodeRequest(fbb, 1), fb::CreateDecodeRequest(fbb, 2, 0, 0, fb::DecodeKind::DecodeEChunk,
                                                               static_cast<fb::Codec>(3))};
  const auto batch = fb::CreateDecodeRequests(fbb, fbb.CreateVector(items)).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, kMessageVersion, 0, fb::Body::DecodeRequests, batch),
                         fb::EnvelopeIdentifier());
  out = DecodeMessage(fbb.GetBufferPointer(), fbb.GetSize());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("DecodeRequests.items[1]: DecodeRequest.codec = 3"));
  // The same for a batch of experts (message version 4).
  fbb.Clear();
  std::vector<flatbuffers::Offset<fb::ExpertReady>> experts = {
      fb::CreateExpertReady(fbb, 1, 2, static_cast<fb::StatusCode>(250))};
  const auto experts_batch = fb::CreateExpertsReady(fbb, fbb.CreateVector(experts)).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, kMessageVersion, 0, fb::Body::ExpertsReady, experts_batch),
                         fb::EnvelopeIdentifier());
  out = DecodeMessage(fbb.GetBufferPointer(), fbb.GetSize());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("ExpertsReady.items[0]: ExpertReady.status_code = 250"));
}

// A peer's [ulong] whose elements start 4 bytes off their alignment (the Verifier checks only the
// length word's): rejected before anything reads it, naming the table and field.
TEST(MessagingTest, AMisalignedVectorIsRejectedNamingTheField) {
  int misaligned = 0;
  for (int pad = 0; pad < 2; ++pad) {
    flatbuffers::FlatBufferBuilder fbb;
    for (int i = 0; i < pad; ++i) fbb.PushElement<uint32_t>(0);
    fbb.StartVector(4, sizeof(uint32_t));  // 16 bytes, 4-byte aligned, read as two ulongs
    for (uint32_t v : {1u, 2u, 3u, 4u}) fbb.PushElement(v);
    const flatbuffers::Offset<flatbuffers::Vector<uint64_t>> counters(fbb.EndVector(2));
    fb::CacheStatsBuilder stats(fbb);
    stats.add_request_id(1);
    stats.add_pool_counters(counters);
    const auto body = stats.Finish().Union();
    fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, kMessageVersion, 0, fb::Body::CacheStats, body),
                           fb::EnvelopeIdentifier());
    const auto* envelope = fb::GetSizePrefixedEnvelope(fbb.GetBufferPointer());
    const auto* vec = envelope->body_as_CacheStats()->pool_counters();
    auto out = DecodeMessage(fbb.GetBufferPointer(), fbb.GetSize());
    if (reinterpret_cast<uintptr_t>(vec->Data()) % 8 == 0) {
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      continue;
    }
    ++misaligned;
    EXPECT_EQ(out.status().code(), StatusCode::kCorruption);
    EXPECT_THAT(out.status().message(), HasSubstr("CacheStats.pool_counters is not aligned"));
  }
  EXPECT_EQ(misaligned, 1);  // one of the two paddings puts the elements 4 bytes off
}

}  // namespace
}  // namespace zipmoe::messaging
