#include "common/ipc/shm_pipe.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/thread_name.h"

namespace zipmoe::messaging {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kMagic[8] = {'Z', 'M', 'P', 'I', 'P', 'E', '0', '1'};
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint32_t kRecordHeader = 8;
constexpr uint32_t kWrapMarker = 0xFFFFFFFFu;
constexpr uint32_t kMinRingBytes = 4096;
constexpr uint32_t kMaxRingBytes = 1u << 30;

uint64_t RoundUp8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

}  // namespace

struct ShmPipe::Ring {
  alignas(64) std::atomic<uint64_t> head;  // bytes taken by the consumer
  alignas(64) std::atomic<uint64_t> tail;  // bytes published by the producer
  alignas(64) std::atomic<uint32_t> doorbell;  // futex word, bumped by a producer that saw `waiting`
  std::atomic<uint32_t> waiting;               // 1 while the consumer sleeps (or is about to)
};

namespace {

struct Header {
  char magic[8];
  uint32_t ring_bytes;
  int32_t creator_pid;
  std::atomic<int32_t> attacher_pid;  // 0 until an Attach
  alignas(64) ShmPipe::Ring rings[2];
};
static_assert(sizeof(Header) <= kHeaderBytes, "pipe header must fit its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the pipe's atomics are shared between processes: they must be lock-free (address-free)");

// FUTEX_WAIT (not _PRIVATE: the word is in memory shared between processes) until *word != expected,
// a FUTEX_WAKE, or `timeout`.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeOne(std::atomic<uint32_t>* word) {
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// Bumps the doorbell and wakes the consumer if it sleeps (or is about to).
void RingDoorbell(ShmPipe::Ring* ring) {
  if (ring->waiting.load(std::memory_order_seq_cst) != 0) {
    ring->doorbell.fetch_add(1, std::memory_order_seq_cst);
    FutexWakeOne(&ring->doorbell);
  }
}

}  // namespace

ShmPipe::ShmPipe(ShmRegion region, uint32_t ring_bytes, int out_ring, std::string sender)
    : region_(std::move(region)), ring_bytes_(ring_bytes), sender_(std::move(sender)) {
  auto* header = reinterpret_cast<Header*>(region_.data());
  uint8_t* data = region_.data() + kHeaderBytes;
  out_ = &header->rings[out_ring];
  in_ = &header->rings[1 - out_ring];
  out_data_ = data + static_cast<uint64_t>(out_ring) * ring_bytes;
  in_data_ = data + static_cast<uint64_t>(1 - out_ring) * ring_bytes;
}

ShmPipe::~ShmPipe() = default;

Result<std::unique_ptr<ShmPipe>> ShmPipe::Create(const std::string& name, uint32_t ring_bytes, std::string sender) {
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes || ring_bytes % 8 != 0) {
    return Status::InvalidArgument(fmt::format("pipe {}: ring_bytes {} must be a multiple of 8 in [{}, {}]", name,
                                               ring_bytes, kMinRingBytes, kMaxRingBytes));
  }
  ZM_ASSIGN_OR_RETURN(ShmRegion region, ShmRegion::Create(name, kHeaderBytes + 2 * uint64_t{ring_bytes}));
  // A fresh region is zero-filled: every counter starts at 0. The magic goes last, so an Attach
  // that races this Create sees either no pipe or a whole one.
  auto* header = reinterpret_cast<Header*>(region.data());
  header->ring_bytes = ring_bytes;
  header->creator_pid = static_cast<int32_t>(::getpid());
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(header->magic, kMagic, sizeof(kMagic));
  return std::unique_ptr<ShmPipe>(new ShmPipe(std::move(region), ring_bytes, 0, std::move(sender)));
}

Result<std::unique_ptr<ShmPipe>> ShmPipe::CreateForThisProcess(std::string sender, const std::string& who) {
  static constexpr char kPrefix[] = "/zipmoe-pipe-";
  static std::atomic<int> counter{0};
  ShmRegion::ReclaimStaleAndLog(kPrefix, who);
  const std::string name = fmt::format("{}{}-{}", kPrefix, static_cast<long>(::getpid()), counter++);
  return Create(name, kDefaultRingBytes, std::move(sender));
}

Result<std::unique_ptr<ShmPipe>> ShmPipe::Attach(const std::string& name, std::string sender) {
  ZM_ASSIGN_OR_RETURN(ShmRegion region, ShmRegion::Attach(name));
  if (region.size_bytes() < kHeaderBytes) {
    return Status::InvalidArgument(fmt::format("{} is not a zipmoe pipe: {} bytes", name, region.size_bytes()));
  }
  const auto* header = reinterpret_cast<const Header*>(region.data());
  if (std::memcmp(header->magic, kMagic, sizeof(kMagic)) != 0) {
    return Status::InvalidArgument(fmt::format("{} is not a zipmoe pipe (no ZMPIPE01 magic)", name));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint32_t ring_bytes = header->ring_bytes;
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes || ring_bytes % 8 != 0 ||
      region.size_bytes() != kHeaderBytes + 2 * uint64_t{ring_bytes}) {
    return Status::InvalidArgument(fmt::format("pipe {}: ring_bytes {} does not match the region's {} bytes", name,
                                               ring_bytes, region.size_bytes()));
  }
  auto* mutable_header = reinterpret_cast<Header*>(region.data());
  mutable_header->attacher_pid.store(static_cast<int32_t>(::getpid()), std::memory_order_release);
  return std::unique_ptr<ShmPipe>(new ShmPipe(std::move(region), ring_bytes, 1, std::move(sender)));
}

bool ShmPipe::PeerGone() const {
  const auto* header = reinterpret_cast<const Header*>(region_.data());
  const int32_t pid = out_ == &header->rings[0] ? header->attacher_pid.load(std::memory_order_acquire)
                                                : header->creator_pid;
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

Status ShmPipe::Send(Body body, milliseconds timeout) {
  const std::string frame = EncodeMessage(sender_, std::move(body));
  if (frame.size() > MaxMessageBytes()) {
    return Status::InvalidArgument(fmt::format("pipe {}: a message of {} bytes is over its limit of {}", name(),
                                               frame.size(), MaxMessageBytes()));
  }
  const uint64_t record = RoundUp8(kRecordHeader + frame.size());
  const auto deadline = Clock::now() + timeout;
  MutexLock lock(&send_mu_);
  const uint64_t tail = out_->tail.load(std::memory_order_relaxed);  // only producers write it
  const uint64_t at = tail % ring_bytes_;
  const uint64_t skip = (ring_bytes_ - at < record) ? ring_bytes_ - at : 0;  // the end is too short: wrap
  // Space: the consumer frees it by advancing head. A full ring is not the hot path (the receiver
  // is behind or gone), so it is polled with short sleeps until the deadline.
  while (tail + skip + record - out_->head.load(std::memory_order_acquire) > ring_bytes_) {
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded(fmt::format("pipe {}: the receiver took nothing for {} ms (ring full)", name(),
                                                  timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  uint64_t pos = tail;
  if (skip > 0) {
    const uint32_t marker = kWrapMarker;
    std::memcpy(out_data_ + at, &marker, sizeof(marker));
    pos += skip;
  }
  uint8_t* dst = out_data_ + pos % ring_bytes_;
  const uint32_t header[2] = {static_cast<uint32_t>(frame.size()), 0};
  std::memcpy(dst, header, sizeof(header));
  std::memcpy(dst + kRecordHeader, frame.data(), frame.size());
  out_->tail.store(pos + record, std::memory_order_seq_cst);  // publishes the bytes above
  RingDoorbell(out_);
  sent_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

bool ShmPipe::Readable() const {
  return in_->tail.load(std::memory_order_acquire) != in_->head.load(std::memory_order_relaxed);
}

void ShmPipe::Interrupt() {
  interrupted_.store(true, std::memory_order_seq_cst);
  in_->doorbell.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeOne(&in_->doorbell);
}

Result<Message> ShmPipe::Recv(milliseconds timeout) {
  if (broken_.load(std::memory_order_acquire)) {
    return Status::Corruption(fmt::format("pipe {} is broken (an earlier record length was outside the ring)", name()));
  }
  const auto deadline = Clock::now() + timeout;
  uint64_t head = in_->head.load(std::memory_order_relaxed);  // only this consumer writes it
  while (true) {
    if (interrupted_.exchange(false, std::memory_order_seq_cst)) {
      return Status::DeadlineExceeded(fmt::format("pipe {}: receive interrupted", name()));
    }
    if (in_->tail.load(std::memory_order_acquire) != head) break;
    const uint32_t bell = in_->doorbell.load(std::memory_order_seq_cst);
    in_->waiting.store(1, std::memory_order_seq_cst);
    if (in_->tail.load(std::memory_order_seq_cst) != head || interrupted_.load(std::memory_order_seq_cst)) {
      in_->waiting.store(0, std::memory_order_relaxed);
      continue;
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      in_->waiting.store(0, std::memory_order_relaxed);
      return Status::DeadlineExceeded(fmt::format("pipe {}: nothing arrived within {} ms", name(), timeout.count()));
    }
    FutexWait(&in_->doorbell, bell, left);
    in_->waiting.store(0, std::memory_order_relaxed);
  }
  const uint64_t tail = in_->tail.load(std::memory_order_acquire);
  auto broken = [&](uint64_t length) {
    broken_.store(true, std::memory_order_release);
    bad_.fetch_add(1, std::memory_order_relaxed);
    return Status::Corruption(fmt::format("pipe {}: a record of {} bytes at position {} does not fit the ring of {} "
                                          "bytes (published up to {}); the pipe is broken",
                                          name(), length, head, ring_bytes_, tail));
  };
  uint32_t length = 0;
  std::memcpy(&length, in_data_ + head % ring_bytes_, sizeof(length));
  if (length == kWrapMarker) {
    head += ring_bytes_ - head % ring_bytes_;
    if (head >= tail) return broken(length);
    std::memcpy(&length, in_data_, sizeof(length));
  }
  const uint64_t record = RoundUp8(kRecordHeader + uint64_t{length});
  if (length > MaxMessageBytes() || head % ring_bytes_ + record > ring_bytes_ || head + record > tail) {
    return broken(length);
  }
  // Decoded in place (DecodeMessage copies what it keeps); the bytes are the producer's again only
  // once head moves past them.
  Result<Message> got = DecodeMessage(in_data_ + head % ring_bytes_ + kRecordHeader, length, "pipe " + name());
  in_->head.store(head + record, std::memory_order_release);
  if (!got.ok()) {
    bad_.fetch_add(1, std::memory_order_relaxed);
    return got.status();
  }
  received_.fetch_add(1, std::memory_order_relaxed);
  return got;
}

Status OfferPipe(Channel& channel, const ShmPipe& pipe, milliseconds wait) {
  PipeOpen open;
  open.name = pipe.name();
  open.ring_bytes = pipe.ring_bytes();
  const auto deadline = Clock::now() + wait;
  ZM_RETURN_IF_ERROR(channel.Send(std::move(open), wait));
  while (Clock::now() < deadline) {
    Result<Received> got = channel.Recv(milliseconds(5));
    if (!got.ok()) continue;
    const auto* ack = std::get_if<Ack>(&got->message.body);
    if (ack == nullptr) continue;  // not the answer (a late heartbeat answer)
    if (const Status st = StatusOf(*ack); !st.ok()) {
      if (st.message().find(pipe.name()) == std::string::npos) continue;  // about an earlier offer
      return st.WithContext(fmt::format("{} refused the pipe {}", channel.endpoint(), pipe.name()));
    }
    if (ack->message == pipe.name()) return Status::Ok();
  }
  return Status::Unavailable(fmt::format("{} did not answer PipeOpen within {} ms", channel.endpoint(), wait.count()));
}

Result<std::unique_ptr<ShmPipe>> AttachOfferedPipe(const PipeOpen& open, std::string sender) {
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<ShmPipe> pipe, ShmPipe::Attach(open.name, std::move(sender)));
  if (pipe->ring_bytes() != open.ring_bytes) {
    return Status::InvalidArgument(fmt::format("PipeOpen: {} has rings of {} bytes, the message says {}", open.name,
                                               pipe->ring_bytes(), open.ring_bytes));
  }
  return pipe;
}

Ack PipeOpenAck(const PipeOpen& open, const Status& attached) {
  Ack ack;
  SetStatus(&ack, attached);
  if (attached.ok()) ack.message = open.name;  // tells this answer from a late one to an earlier offer
  return ack;
}

void PipeReader::Start(const std::string& thread_name, std::function<bool(Message&)> on_message,
                       std::function<void(const Status&)> on_bad) {
  thread_ = std::thread([this, thread_name, on_message = std::move(on_message), on_bad = std::move(on_bad)] {
    SetCurrentThreadName(thread_name);
    while (!stop_.load()) {
      Result<Message> got = pipe_->Recv(milliseconds(500));  // Interrupt ends the wait at a stop
      if (got.ok()) {
        if (!on_message(*got)) return;
        continue;
      }
      if (got.status().code() == StatusCode::kDeadlineExceeded) continue;
      on_bad(got.status());
      if (pipe_->broken()) return;  // every later Recv fails the same way; the peer goes silent here
    }
  });
}

void PipeReader::RequestStop() {
  stop_.store(true);
  pipe_->Interrupt();
}

void PipeReader::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

ChannelStats ShmPipe::stats() const {
  ChannelStats s;
  s.sent = sent_.load(std::memory_order_relaxed);
  s.received = received_.load(std::memory_order_relaxed);
  s.bad_messages = bad_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace zipmoe::messaging
