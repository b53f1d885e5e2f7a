// Tests for common/shm_pipe (the shared-memory message pipe): every message type crosses bit-exactly
// both ways; thousands of messages of mixed sizes wrap the ring in order while the producer waits
// for space; a forked process on the other end echoes; an empty pipe times out and Interrupt ends a
// long wait; oversized messages, a full ring, a corrupt frame, a record length outside the ring and
// a region that is not a pipe are errors naming the pipe.
#include "common/ipc/shm_pipe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/common/messaging_samples.h"

namespace zipmoe::messaging {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{5000};  // generous: only reached when a test fails

std::string UniqueName(const char* tag) {
  static int counter = 0;
  return fmt::format("/zipmoe-test-pipe-{}-{}-{}", ::getpid(), counter++, tag);
}

struct Ends {
  std::unique_ptr<ShmPipe> creator;
  std::unique_ptr<ShmPipe> attacher;
};

Ends Open(const char* tag, uint32_t ring_bytes = ShmPipe::kDefaultRingBytes) {
  Ends ends;
  Result<std::unique_ptr<ShmPipe>> created = ShmPipe::Create(UniqueName(tag), ring_bytes, "executor");
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  if (!created.ok()) return ends;
  ends.creator = std::move(created).value();
  Result<std::unique_ptr<ShmPipe>> attached = ShmPipe::Attach(ends.creator->name(), "scheduler");
  EXPECT_TRUE(attached.ok()) << attached.status().ToString();
  if (attached.ok()) ends.attacher = std::move(attached).value();
  return ends;
}

LeaseRelease Release(int32_t layer, int n) {
  LeaseRelease r;
  r.layer_id = layer;
  for (int i = 0; i < n; ++i) r.expert_ids.push_back(layer * 1000 + i);
  return r;
}

TEST(ShmPipeTest, EveryMessageTypeCrossesBothWaysBitExact) {
  Ends p = Open("types");
  ASSERT_TRUE(p.attacher);
  for (const Body& body : samples::AllBodies()) {
    ASSERT_TRUE(p.creator->Send(body, kTimeout).ok());
    Result<Message> there = p.attacher->Recv(kTimeout);
    ASSERT_TRUE(there.ok()) << there.status().ToString();
    EXPECT_EQ(there->body, body) << BodyName(body);
    EXPECT_EQ(there->sender, "executor");
    EXPECT_EQ(there->version, kMessageVersion);
    ASSERT_TRUE(p.attacher->Send(body, kTimeout).ok());
    Result<Message> back = p.creator->Recv(kTimeout);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->body, body) << BodyName(body);
    EXPECT_EQ(back->sender, "scheduler");
  }
  const size_t n = samples::AllBodies().size();
  EXPECT_EQ(p.creator->stats().sent, n);
  EXPECT_EQ(p.creator->stats().received, n);
  EXPECT_EQ(p.attacher->stats().sent, n);
  EXPECT_EQ(p.attacher->stats().received, n);
  EXPECT_FALSE(p.creator->Readable());
}

// A 4 KiB ring and 3000 messages of 8..1 600 bytes: the ring wraps hundreds of times, the producer
// waits for space, and everything arrives once, in order, intact.
TEST(ShmPipeTest, ManyMessagesWrapTheSmallRingInOrder) {
  Ends p = Open("wrap", 4096);
  ASSERT_TRUE(p.attacher);
  constexpr int kCount = 3000;
  std::thread producer([&] {
    for (int i = 0; i < kCount; ++i) {
      const Status st = p.creator->Send(Release(i, (i * 37) % 400), kTimeout);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  });
  for (int i = 0; i < kCount; ++i) {
    Result<Message> got = p.attacher->Recv(kTimeout);
    ASSERT_TRUE(got.ok()) << "message " << i << ": " << got.status().ToString();
    const auto* r = std::get_if<LeaseRelease>(&got->body);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(*r, Release(i, (i * 37) % 400)) << "message " << i;
  }
  producer.join();
  EXPECT_FALSE(p.attacher->Readable());
  EXPECT_EQ(p.attacher->stats().received, static_cast<uint64_t>(kCount));
  EXPECT_EQ(p.attacher->stats().bad_messages, 0u);
}

// The other end in another process: the child attaches and answers each LeaseRelease with an Ack
// that names it; the parent checks every answer.
TEST(ShmPipeTest, AForkedProcessAnswersThroughThePipe) {
  Result<std::unique_ptr<ShmPipe>> created = ShmPipe::Create(UniqueName("fork"), 8192, "parent");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<ShmPipe> pipe = std::move(created).value();
  constexpr int kCount = 500;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<std::unique_ptr<ShmPipe>> other = ShmPipe::Attach(pipe->name(), "child");
    if (!other.ok()) ::_exit(2);
    for (int i = 0; i < kCount; ++i) {
      Result<Message> got = (*other)->Recv(kTimeout);
      if (!got.ok()) ::_exit(3);
      const auto* r = std::get_if<LeaseRelease>(&got->body);
      if (r == nullptr || r->layer_id != i) ::_exit(4);
      Ack ack;
      ack.message = fmt::format("took {} experts of layer {}", r->expert_ids.size(), r->layer_id);
      if (!(*other)->Send(ack, kTimeout).ok()) ::_exit(5);
    }
    ::_exit(0);
  }
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(pipe->Send(Release(i, i % 20), kTimeout).ok());
    Result<Message> got = pipe->Recv(kTimeout);
    ASSERT_TRUE(got.ok()) << "answer " << i << ": " << got.status().ToString();
    const auto* ack = std::get_if<Ack>(&got->body);
    ASSERT_NE(ack, nullptr);
    EXPECT_EQ(ack->message, fmt::format("took {} experts of layer {}", i % 20, i));
    EXPECT_EQ(got->sender, "child");
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Each end learns when the process at the other end has exited (the executor stops waiting on a pipe
// whose scheduler died instead of waiting out its timeout); not before anyone attached, nor while the
// peer lives.
TEST(ShmPipeTest, EachEndSeesThePeerProcessExit) {
  Result<std::unique_ptr<ShmPipe>> created = ShmPipe::Create(UniqueName("peer"), 8192, "parent");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  std::unique_ptr<ShmPipe> pipe = std::move(created).value();
  EXPECT_FALSE(pipe->PeerGone()) << "nobody attached yet";
  int ready[2], proceed[2];  // child -> parent, parent -> child
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(proceed), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<std::unique_ptr<ShmPipe>> other = ShmPipe::Attach(pipe->name(), "child");
    if (!other.ok()) ::_exit(2);
    const char peer_alive = (*other)->PeerGone() ? 'n' : 'y';  // the creator (this test) lives
    if (::write(ready[1], &peer_alive, 1) != 1) ::_exit(3);
    char go = 0;
    if (::read(proceed[0], &go, 1) != 1) ::_exit(4);  // wait until the parent looked
    ::_exit(0);
  }
  char seen = 0;
  ASSERT_EQ(::read(ready[0], &seen, 1), 1);
  EXPECT_EQ(seen, 'y');
  EXPECT_FALSE(pipe->PeerGone()) << "the attacher still runs";
  const char go = 'g';
  ASSERT_EQ(::write(proceed[1], &go, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: its pid no longer exists
  EXPECT_TRUE(pipe->PeerGone());
  for (int fd : {ready[0], ready[1], proceed[0], proceed[1]}) ::close(fd);
}

TEST(ShmPipeTest, AnEmptyPipeTimesOutAndInterruptEndsAWait) {
  Ends p = Open("wait");
  ASSERT_TRUE(p.attacher);
  Result<Message> none = p.attacher->Recv(milliseconds(0));
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
  none = p.attacher->Recv(milliseconds(20));
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(none.status().message(), HasSubstr(p.attacher->name()));

  std::thread interrupter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    p.attacher->Interrupt();
  });
  const auto start = std::chrono::steady_clock::now();
  Result<Message> cut = p.attacher->Recv(milliseconds(60000));
  interrupter.join();
  EXPECT_EQ(cut.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(cut.status().message(), HasSubstr("interrupted"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "Interrupt did not wake Recv";

  // A message sent while the receiver sleeps wakes it (and the interrupt was used up).
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(p.creator->Send(MakeHeartbeat(7, 1), kTimeout).ok());
  });
  Result<Message> woke = p.attacher->Recv(milliseconds(60000));
  sender.join();
  ASSERT_TRUE(woke.ok()) << woke.status().ToString();
  EXPECT_TRUE(std::holds_alternative<Heartbeat>(woke->body));
}

TEST(ShmPipeTest, OversizedMessagesAndAFullRingAreRefused) {
  Ends p = Open("full", 4096);
  ASSERT_TRUE(p.attacher);
  const Status big = p.creator->Send(Release(1, 1000), kTimeout);  // 4 000 bytes of ids in a 4 KiB ring
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("over its limit of 2040"));
  EXPECT_THAT(big.message(), HasSubstr(p.creator->name()));
  Status st;
  int sent = 0;
  while ((st = p.creator->Send(Release(2, 100), milliseconds(10))).ok()) ++sent;  // nobody reads
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), HasSubstr("ring full"));
  EXPECT_GE(sent, 1);
  for (int i = 0; i < sent; ++i) ASSERT_TRUE(p.attacher->Recv(kTimeout).ok()) << i;  // all intact
  EXPECT_TRUE(p.creator->Send(Release(3, 100), kTimeout).ok()) << "space again once read";
}

// Offsets of the documented layout (shm_pipe.h): ring 0's tail is the second cache line of the
// ring headers, which start at byte 64; ring 0's data starts at byte 4096.
constexpr uint64_t kRing0Tail = 64 + 64;
constexpr uint64_t kRing0Data = 4096;

void PutRecord(uint8_t* base, uint64_t at, const std::string& frame, uint64_t tail) {
  const uint32_t header[2] = {static_cast<uint32_t>(frame.size()), 0};
  std::memcpy(base + kRing0Data + at, header, sizeof(header));
  std::memcpy(base + kRing0Data + at + 8, frame.data(), frame.size());
  reinterpret_cast<std::atomic<uint64_t>*>(base + kRing0Tail)->store(tail);
}

TEST(ShmPipeTest, ACorruptFrameIsDroppedAndTheNextOneStillArrives) {
  Ends p = Open("badframe", 4096);
  ASSERT_TRUE(p.attacher);
  Result<ShmRegion> raw = ShmRegion::Attach(p.creator->name());
  ASSERT_TRUE(raw.ok());
  const std::string garbage(40, '\x17');  // no size prefix, no ZMSG identifier: DecodeMessage refuses it
  PutRecord(raw->data(), 0, garbage, 8 + 40);
  Result<Message> bad = p.attacher->Recv(kTimeout);
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(bad.status().message(), HasSubstr(p.creator->name()));
  EXPECT_EQ(p.attacher->stats().bad_messages, 1u);
  // The creator's own send goes on after the garbage record (its tail counter is the shared one).
  ASSERT_TRUE(p.creator->Send(MakeHeartbeat(3, 4), kTimeout).ok());
  Result<Message> good = p.attacher->Recv(kTimeout);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->body, Body(MakeHeartbeat(3, 4)));
}

TEST(ShmPipeTest, ARecordLengthOutsideTheRingBreaksThePipe) {
  Ends p = Open("badlength", 4096);
  ASSERT_TRUE(p.attacher);
  Result<ShmRegion> raw = ShmRegion::Attach(p.creator->name());
  ASSERT_TRUE(raw.ok());
  const uint32_t header[2] = {1u << 20, 0};
  std::memcpy(raw->data() + kRing0Data, header, sizeof(header));
  reinterpret_cast<std::atomic<uint64_t>*>(raw->data() + kRing0Tail)->store(64);
  for (int i = 0; i < 2; ++i) {  // and stays broken
    Result<Message> bad = p.attacher->Recv(kTimeout);
    EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
    EXPECT_THAT(bad.status().message(), HasSubstr(p.creator->name()));
  }
}

TEST(ShmPipeTest, AttachRefusesWhatIsNotAPipe) {
  const std::string missing = UniqueName("missing");
  Result<std::unique_ptr<ShmPipe>> none = ShmPipe::Attach(missing, "x");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  Result<ShmRegion> other = ShmRegion::Create(UniqueName("notapipe"), 3 * 4096);
  ASSERT_TRUE(other.ok());
  Result<std::unique_ptr<ShmPipe>> wrong = ShmPipe::Attach(other->name(), "x");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr(other->name()));
  EXPECT_THAT(wrong.status().message(), HasSubstr("not a zipmoe pipe"));
  Result<std::unique_ptr<ShmPipe>> odd = ShmPipe::Create(UniqueName("odd"), 5004, "x");
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zipmoe::messaging
