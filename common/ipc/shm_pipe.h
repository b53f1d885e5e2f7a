// ShmPipe: a two-way message pipe between two processes of one host, in one POSIX shared-memory
// region (common/ipc/shm_region.h): a ring per direction and a futex doorbell per ring. It carries the
// same frames as a Channel (common/ipc/messaging.h: size-prefixed FlatBuffers, checked by
// DecodeMessage on receipt), without a ZeroMQ I/O thread on either side: a message costs the sender
// a copy into the ring and, only when the receiver sleeps, one FUTEX_WAKE; the receiver wakes
// straight into its Recv (issue 20: on a 2-core machine every ZeroMQ message woke two I/O threads
// besides the receiver, and the executor <-> scheduler link carries ~180 messages per token).
//
// Who uses it: the executor's RemoteExpertProvider creates one and offers it to the scheduler's
// ProviderServer over ZeroMQ (PipeOpen, docs/messaging.md); ZeroMQ stays the control plane.
//
// Layout (all little-endian, offsets in bytes):
//   [0, 4096)   header: magic "ZMPIPE01", ring_bytes (u32), creator pid, attacher pid (0 until an
//               Attach), then per ring, each on its
//               own cache lines: head (u64, bytes the consumer has taken), tail (u64, bytes the
//               producer has published), doorbell (u32 futex word), waiting (u32, 1 while the
//               consumer sleeps or is about to)
//   ring 0      [4096, 4096 + ring_bytes): creator -> attacher
//   ring 1      [4096 + ring_bytes, 4096 + 2 ring_bytes): attacher -> creator
// A record is [u32 frame length][u32 0][frame][zero padding to 8 bytes]; a length of 0xFFFFFFFF
// means "the rest of the ring is unused, go on at its start". head and tail only grow; a record
// never straddles the end of the ring.
//
// Wake-up protocol (no lost wake-up, no busy polling): the consumer reads the doorbell, sets
// `waiting`, re-checks the tail and only then FUTEX_WAITs on the doorbell value it read; the
// producer publishes the tail, then, if `waiting` is set, bumps the doorbell and FUTEX_WAKEs. All
// four steps are sequentially consistent (Dekker), so one of the two always sees the other.
//
// Thread-safety: Send may be called from any thread (an internal mutex serialises producers);
// Recv from one thread at a time. Interrupt from any thread. Stats are atomic.
// Errors never throw.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <thread>

#include "common/ipc/messaging.h"
#include "common/ipc/messaging_channel.h"
#include "common/mutex.h"
#include "common/ipc/shm_region.h"
#include "common/status.h"

namespace zipmoe::messaging {

class ShmPipe {
 public:
  // Bytes per ring when the caller gives none: ~20 000 ExpertReady frames; a message may take at
  // most half a ring (MaxMessageBytes).
  static constexpr uint32_t kDefaultRingBytes = 1u << 20;

  // Creates the region `name` (ShmRegion::Create: this pipe owns the name and unlinks it when
  // destroyed) with two rings of `ring_bytes` each. sender: Message::sender stamped on what this
  // side sends. ring_bytes: a multiple of 8 in [4096, 1 GiB].
  // Errors: kInvalidArgument (ring_bytes), ShmRegion::Create's.
  static Result<std::unique_ptr<ShmPipe>> Create(const std::string& name, uint32_t ring_bytes, std::string sender);
  // Create with the name "/zipmoe-pipe-<pid>-<n>" (n counts this process's pipes) and the default
  // ring size, after removing the pipes of processes that died (ShmRegion::ReclaimStaleAndLog, logged
  // as `who`). What the executor, the workers and the scheduler's cache session offer their peers.
  static Result<std::unique_ptr<ShmPipe>> CreateForThisProcess(std::string sender, const std::string& who);
  // Maps the region `name` made by a Create in another process (or this one) as the other end.
  // Errors: ShmRegion::Attach's (kNotFound: no such region); kInvalidArgument naming the region when
  // it is not a pipe (magic, ring size and region size disagree).
  static Result<std::unique_ptr<ShmPipe>> Attach(const std::string& name, std::string sender);
  ShmPipe(const ShmPipe&) = delete;
  ShmPipe& operator=(const ShmPipe&) = delete;
  ~ShmPipe();

  // Sends {kMessageVersion, sender, body}. Waits up to `timeout` for ring space while the ring is
  // full (the receiver is behind or gone). Errors: kInvalidArgument (the encoded message is over
  // MaxMessageBytes(), naming its size and the pipe), kDeadlineExceeded (still full at the deadline).
  Status Send(Body body, std::chrono::milliseconds timeout);
  // Waits up to `timeout` (0: only what has arrived) for the next message. Errors:
  // kDeadlineExceeded (nothing arrived, or Interrupt was called), kCorruption / kInvalidArgument
  // (DecodeMessage refused the frame: it is consumed, counted in stats().bad_messages, and the
  // message names the pipe), kCorruption (a record length outside the ring: the pipe is broken and
  // every later Recv returns this error).
  Result<Message> Recv(std::chrono::milliseconds timeout);
  // True when a message is waiting (Recv(0) would return one or a bad-frame error).
  bool Readable() const;
  // Makes the Recv in progress (or the next one) return kDeadlineExceeded at once.
  void Interrupt();

  // True once Recv found a record length outside the ring (every later Recv fails).
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // True when the process at the other end has exited (its pid, in the header: the creator's, or the
  // attacher's once one attached, no longer exists). False while it lives or before anyone attached.
  // What a creator waiting on a pipe nobody will answer checks (a restarted scheduler never reads the
  // old one) instead of waiting out its timeout.
  bool PeerGone() const;
  const std::string& name() const { return region_.name(); }
  uint32_t ring_bytes() const { return ring_bytes_; }
  // The largest frame Send accepts: half a ring, less the record header.
  uint64_t MaxMessageBytes() const { return ring_bytes_ / 2 - 8; }
  ChannelStats stats() const;

  struct Ring;  // shared-memory ring header (shm_pipe.cc)

 private:
  ShmPipe(ShmRegion region, uint32_t ring_bytes, int out_ring, std::string sender);

  ShmRegion region_;
  uint32_t ring_bytes_;
  Ring* out_;
  Ring* in_;
  uint8_t* out_data_;
  const uint8_t* in_data_;
  std::string sender_;
  Mutex send_mu_;  // one producer at a time
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> bad_{0};
};

// The thread that reads one pipe on the attaching side (ProviderServer, WorkerDispatcher, CacheServer).
// Construct it, then Start: each message goes to on_message (false ends the thread), each refused
// frame to on_bad; a broken pipe ends the thread after its on_bad. The owner may read
// stop_requested() from inside on_message (e.g. under its own lock) to drop what arrives after it
// retired the reader. Thread-safety: RequestStop and stop_requested from any thread, Stop from any
// thread but the reader's own.
class PipeReader {
 public:
  explicit PipeReader(std::shared_ptr<ShmPipe> pipe) : pipe_(std::move(pipe)) {}
  PipeReader(const PipeReader&) = delete;
  PipeReader& operator=(const PipeReader&) = delete;
  ~PipeReader() { Stop(); }
  // Starts the thread, named `thread_name` (common/thread_name.h). Call once.
  void Start(const std::string& thread_name, std::function<bool(Message&)> on_message,
             std::function<void(const Status&)> on_bad);
  // Never blocks (callable under the owner's locks, or from on_message): the thread ends at its next
  // wake-up, which Interrupt makes immediate.
  void RequestStop();
  bool stop_requested() const { return stop_.load(); }
  void Stop();  // RequestStop, then joins
  const std::shared_ptr<ShmPipe>& pipe() const { return pipe_; }

 private:
  const std::shared_ptr<ShmPipe> pipe_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The handshake that moves a DEALER's link onto `pipe` (docs/messaging.md "Shared-memory pipes").
// Client side: sends PipeOpen{name, ring_bytes} on `channel` and waits up to `wait` for the Ack that
// names this pipe (a late answer to an earlier offer is skipped). Errors: Channel::Send's, the peer's
// refusal, kUnavailable (no answer within `wait`: an older peer ignores PipeOpen).
Status OfferPipe(Channel& channel, const ShmPipe& pipe, std::chrono::milliseconds wait);
// Server side: attaches the pipe `open` names, as `sender`. Errors: ShmPipe::Attach's;
// kInvalidArgument when its rings are not `open.ring_bytes` (both naming the pipe).
Result<std::unique_ptr<ShmPipe>> AttachOfferedPipe(const PipeOpen& open, std::string sender);
// The answer to `open`: `attached` (OK, or the refusal), with the pipe's name on success.
Ack PipeOpenAck(const PipeOpen& open, const Status& attached);

}  // namespace zipmoe::messaging
