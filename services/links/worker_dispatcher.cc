// WorkerDispatcher (worker_dispatcher.h): the scheduler's ROUTER towards the storage and decompressor
// worker processes: credits, heart-beats and liveness, re-issue of a silent worker's ops (after
// fencing it: worker_fence.h), cancellation and statistics. Its read / decode engines are
// remote_engines.cc.
#include "services/links/worker_dispatcher.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/messaging_channel.h"
#include "common/mutex.h"
#include "common/ipc/router_server.h"
#include "common/ipc/shm_pipe.h"
#include "common/thread_name.h"
#include "common/trace_events.h"
#include "services/decompressor/decompressor_worker.h"
#include "services/links/worker_fence.h"
#include "services/storage/storage_worker.h"

namespace zipmoe::runtime {

namespace msg = messaging;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct WorkerDispatcher::State : msg::RouterServer::Handler {
  struct ReadItem {
    storage::ReadOp op;
    uint32_t attempt = 0;
    std::string peer;  // holder; empty = waiting
  };
  struct DecodeItem {
    decompressor::DecompressOp op;
    bool ready = false;
    uint32_t attempt = 0;
    uint64_t seq = 0;
    std::string peer;
  };
  struct Peer {
    std::shared_ptr<msg::ShmPipe> pipe;  // the worker's pipe once attached; null: ZeroMQ
    std::shared_ptr<msg::PipeReader> reader;  // its thread (HandlePiped)
    std::string role;
    int32_t credits = 1;
    int32_t threads = 1;
    int32_t pid = 0;
    Clock::time_point expiry;
    Clock::time_point last_sent;
    std::unordered_set<uint64_t> held;
  };
  using ReadyKey = std::tuple<int32_t, uint64_t, uint64_t>;  // (priority, seq, op_id)
  struct Send {
    std::string peer;
    std::shared_ptr<msg::ShmPipe> pipe;  // null: through the ROUTER (dispatcher thread only)
    msg::Body body;
  };

  State(zmq::context_t& c, DispatcherConfig cfg, EngineSetup s, std::unique_ptr<msg::RouterServer> r)
      : context(c), config(std::move(cfg)), setup(std::move(s)), server(std::move(r)) {}

  zmq::context_t& context;
  const DispatcherConfig config;
  const EngineSetup setup;
  const std::unique_ptr<msg::RouterServer> server;  // its channel: the dispatcher thread's only (after Start)
  // Collected while a batch of messages is handled, acted on after it (dispatcher thread only).
  std::vector<storage::ReadCompletion> read_done;
  std::vector<decompressor::DecompressCompletion> decode_done;
  std::vector<std::pair<std::string, msg::Body>> replies;
  Mutex stop_mu;  // one Stop at a time; guards joined
  bool joined ZM_GUARDED_BY(stop_mu) = false;
  // Held from choosing a tick's sends to having sent them, so no two threads reorder the messages to
  // one worker. Taken before mu.
  Mutex dispatch_mu;

  mutable Mutex mu;  // guards everything below
  std::deque<uint64_t> read_queue ZM_GUARDED_BY(mu);                 // waiting reads, in submission order
  std::unordered_map<uint64_t, ReadItem> reads ZM_GUARDED_BY(mu);    // waiting or in flight
  std::unordered_map<uint64_t, DecodeItem> decodes ZM_GUARDED_BY(mu);
  std::set<ReadyKey> ready ZM_GUARDED_BY(mu);                        // READY decodes not yet sent
  std::map<std::string, Peer> peers ZM_GUARDED_BY(mu);
  uint64_t seq ZM_GUARDED_BY(mu) = 0;
  bool stopping ZM_GUARDED_BY(mu) = false;
  DispatcherStats counters ZM_GUARDED_BY(mu);
  int32_t zmq_workers ZM_GUARDED_BY(mu) = 0;  // live peers without a pipe
  // Readers of pipes whose worker is gone: stopped, joined by the dispatcher thread (or Stop).
  std::vector<std::shared_ptr<msg::PipeReader>> retired ZM_GUARDED_BY(mu);

  void Log(const std::string& line) const {
    if (config.log) config.log(line);
  }

  Result<uint64_t> Offset(const void* p, uint64_t bytes, const char* what, const std::string& tensor) const {
    const auto* b = static_cast<const uint8_t*>(p);
    if (b < setup.arena_base || static_cast<uint64_t>(b - setup.arena_base) + bytes > setup.arena_bytes) {
      return Status::InvalidArgument(
          fmt::format("{} of '{}' ({} bytes) is outside the shared arena {} ({} bytes): a remote worker cannot "
                      "reach it", what, tensor, bytes, setup.arena_name, setup.arena_bytes));
    }
    return static_cast<uint64_t>(b - setup.arena_base);
  }

  // msg::RouterServer::Handler, on the dispatcher thread.
  void OnTick(Clock::time_point now) override;
  void OnMessage(msg::Received& got) override;
  void OnBadMessage(const Status& bad) override;
  void OnMessagesDone() override;
  void OnLoopEnd() override;
  void OnLoopError(const Status& error) override { Log("E: " + error.ToString()); }
  // Chooses the sends of one tick under mu and sends them: reads and decodes to workers with credits
  // and, on the dispatcher thread, heartbeats and expiry. Off the dispatcher thread only pipe workers
  // are served (the ROUTER is the dispatcher thread's); it is woken when ZeroMQ workers could take
  // work. Takes dispatch_mu and mu.
  void Dispatch(Clock::time_point now, bool on_dispatcher_thread) ZM_EXCLUDES(mu);
  // Hands the completions to the engines' callbacks (no lock held) and clears them.
  void Complete(std::vector<storage::ReadCompletion>* reads_done,
                std::vector<decompressor::DecompressCompletion>* decodes_done) ZM_EXCLUDES(mu);
  // Work waiting was added from another thread: hand it out.
  void Kick() ZM_EXCLUDES(mu);
  void JoinRetired() ZM_EXCLUDES(mu);
  // On the reader thread of worker `id`'s pipe: `got` and what else has arrived, then the callbacks
  // and the work they made ready; false once `reader` was retired.
  bool HandlePiped(const std::string& id, msg::PipeReader* reader, msg::Message& got) ZM_EXCLUDES(mu);
  // Attaches the pipe a WorkerReady names and starts its reader; the Ack for the worker goes into
  // *replies (over ZeroMQ). On a refusal the peer stays on ZeroMQ.
  void AttachPipeLocked(const std::string& id, const std::string& name, Peer* p,
                        std::vector<std::pair<std::string, msg::Body>>* replies) ZM_REQUIRES(mu);
  // The *Locked methods require mu held.
  void ExpireLocked(Clock::time_point now) ZM_REQUIRES(mu);
  void ReissueLocked(const std::string& id, const std::string& why) ZM_REQUIRES(mu);
  void HandleLocked(const std::string& peer, msg::Message message, std::vector<storage::ReadCompletion>* read_done,
                    std::vector<decompressor::DecompressCompletion>* decode_done,
                    std::vector<std::pair<std::string, msg::Body>>* replies) ZM_REQUIRES(mu);
  // Removes op `op_id` of `items` (reads or decodes) and from its holder's held set; false (counted as
  // a duplicate) when it is unknown or not held by a worker: a stale or repeated completion.
  template <typename Items>
  bool TakeHeldLocked(Items& items, uint64_t op_id) ZM_REQUIRES(mu);
  // One completion, alone or an item of a batch: stale or duplicate ones are counted and dropped.
  void ReadDoneLocked(const msg::ReadCompletion& done, std::vector<storage::ReadCompletion>* read_done)
      ZM_REQUIRES(mu);
  void DecodeDoneLocked(const msg::DecodeCompletion& done, std::vector<decompressor::DecompressCompletion>* decode_done)
      ZM_REQUIRES(mu);
};

void WorkerDispatcher::State::ReissueLocked(const std::string& id, const std::string& why) {
  auto it = peers.find(id);
  if (it == peers.end()) return;
  std::vector<uint64_t> read_ids;
  for (uint64_t op : it->second.held) {
    if (auto r = reads.find(op); r != reads.end() && r->second.peer == id) {
      read_ids.push_back(op);
    } else if (auto d = decodes.find(op); d != decodes.end() && d->second.peer == id) {
      DecodeItem& item = d->second;
      item.peer.clear();
      ++item.attempt;
      item.ready = true;
      ready.emplace(item.op.priority, item.seq, op);
      ++counters.reissued;
    }
  }
  // Reads go back to the front of the queue in their original order (op ids grow with submission).
  std::sort(read_ids.begin(), read_ids.end(), std::greater<uint64_t>());
  for (uint64_t op : read_ids) {
    ReadItem& item = reads[op];
    item.peer.clear();
    ++item.attempt;
    read_queue.push_front(op);
    ++counters.reissued;
  }
  Log(fmt::format("worker {} (pid {}) {}: re-issuing {} ops", msg::PrintableId(id), it->second.pid, why,
                  it->second.held.size()));
  if (it->second.reader != nullptr) {
    it->second.reader->RequestStop();
    retired.push_back(std::move(it->second.reader));
  } else {
    --zmq_workers;
  }
  peers.erase(it);
}

void WorkerDispatcher::State::ExpireLocked(Clock::time_point now) {
  std::vector<std::string> dead;
  for (const auto& [id, peer] : peers) {
    if (now > peer.expiry) dead.push_back(id);
  }
  for (const std::string& id : dead) {
    const Peer& peer = peers.at(id);
    // Fenced first (FenceWorker): its ops' slots must never see a late write once re-issued. A
    // stopped process is fenced even without ops: it would never come back, and its supervisor
    // restarts it only once it is gone (else a stalled only decompressor leaves later work waiting).
    const bool fence_it = !peer.held.empty() || ProcessStopped(peer.pid);
    const std::string fence = fence_it ? ", " + FenceWorker(peer.pid, peer.role) : "";
    ReissueLocked(id, "stopped heart-beating" + fence);
  }
}

template <typename Items>
bool WorkerDispatcher::State::TakeHeldLocked(Items& items, uint64_t op_id) {
  auto it = items.find(op_id);
  if (it == items.end() || it->second.peer.empty()) {
    ++counters.duplicates;
    return false;
  }
  if (auto holder = peers.find(it->second.peer); holder != peers.end()) holder->second.held.erase(op_id);
  items.erase(it);
  return true;
}

void WorkerDispatcher::State::ReadDoneLocked(const msg::ReadCompletion& done,
                                             std::vector<storage::ReadCompletion>* read_done) {
  if (TakeHeldLocked(reads, done.op_id)) read_done->push_back(storage::ReadCompletionFromWire(done));
}

void WorkerDispatcher::State::DecodeDoneLocked(const msg::DecodeCompletion& done,
                                               std::vector<decompressor::DecompressCompletion>* decode_done) {
  if (TakeHeldLocked(decodes, done.op_id)) decode_done->push_back(decompressor::DecodeCompletionFromWire(done));
}

void WorkerDispatcher::State::HandleLocked(const std::string& peer, msg::Message message,
                                           std::vector<storage::ReadCompletion>* read_done,
                                           std::vector<decompressor::DecompressCompletion>* decode_done,
                                           std::vector<std::pair<std::string, msg::Body>>* replies) {
  const auto now = Clock::now();
  auto known = peers.find(peer);
  if (known != peers.end()) {
    known->second.expiry = now + config.heartbeat_interval * config.liveness;
  }
  msg::Body& body = message.body;
  if (auto* ready_msg = std::get_if<msg::WorkerReady>(&body)) {
    const bool role_ok = ready_msg->role == msg::kRoleDecompressor || ready_msg->role == msg::kRoleStorage;
    if (!role_ok || ready_msg->arena_name != setup.arena_name || ready_msg->arena_bytes != setup.arena_bytes ||
        ready_msg->credits < 1) {
      ++counters.refused_workers;
      Log(fmt::format("E: refused worker {} (pid {}): role '{}', arena {} ({} bytes), credits {}; this scheduler "
                      "serves arena {} ({} bytes)", msg::PrintableId(peer), ready_msg->pid, ready_msg->role,
                      ready_msg->arena_name, ready_msg->arena_bytes, ready_msg->credits, setup.arena_name,
                      setup.arena_bytes));
      replies->emplace_back(peer, msg::MakeDisconnect("refused: different arena or role"));
      return;
    }
    if (known != peers.end()) ReissueLocked(peer, "reconnected");  // what it held may be lost
    Peer p;
    p.role = ready_msg->role;
    p.credits = ready_msg->credits;
    p.threads = std::max(1, ready_msg->n_threads);
    p.pid = ready_msg->pid;
    p.expiry = now + config.heartbeat_interval * config.liveness;
    p.last_sent = now;
    if (!ready_msg->pipe_name.empty()) AttachPipeLocked(peer, ready_msg->pipe_name, &p, replies);
    if (p.pipe == nullptr) ++zmq_workers;
    Log(fmt::format("{} worker {} (pid {}) ready: {} threads, {} credits, over {}", ready_msg->role,
                    msg::PrintableId(peer), ready_msg->pid, ready_msg->n_threads, ready_msg->credits,
                    p.pipe != nullptr ? "the shared-memory pipe " + p.pipe->name() : std::string("ZeroMQ")));
    peers[peer] = std::move(p);
    return;
  }
  if (std::holds_alternative<msg::Heartbeat>(body)) {
    if (known == peers.end()) replies->emplace_back(peer, msg::MakeDisconnect("unknown worker: send WorkerReady"));
    return;
  }
  if (std::holds_alternative<msg::Disconnect>(body)) {
    ReissueLocked(peer, "disconnected");
    return;
  }
  if (auto* done = std::get_if<msg::ReadCompletion>(&body)) {
    ReadDoneLocked(*done, read_done);
    return;
  }
  if (auto* batch = std::get_if<msg::ReadCompletions>(&body)) {
    for (const std::unique_ptr<msg::ReadCompletion>& done : batch->items) ReadDoneLocked(*done, read_done);
    return;
  }
  if (auto* done = std::get_if<msg::DecodeCompletion>(&body)) {
    DecodeDoneLocked(*done, decode_done);
    return;
  }
  if (auto* batch = std::get_if<msg::DecodeCompletions>(&body)) {
    for (const std::unique_ptr<msg::DecodeCompletion>& done : batch->items) DecodeDoneLocked(*done, decode_done);
    return;
  }
  ++counters.bad_messages;
  Log(fmt::format("E: worker {} sent a {}, which a scheduler does not take: dropped", msg::PrintableId(peer),
                  msg::BodyName(body)));
}

void WorkerDispatcher::State::AttachPipeLocked(const std::string& id, const std::string& name, Peer* p,
                                               std::vector<std::pair<std::string, msg::Body>>* replies) {
  msg::PipeOpen offered;  // WorkerReady.pipe_name: no ring size to check
  offered.name = name;
  Result<std::unique_ptr<msg::ShmPipe>> attached = msg::ShmPipe::Attach(name, "scheduler");
  replies->emplace_back(id, msg::PipeOpenAck(offered, attached.status()));
  if (!attached.ok()) {
    Log(fmt::format("W: worker {}: cannot attach its pipe, ZeroMQ carries everything: {}", msg::PrintableId(id),
                    attached.status().ToString()));
    return;
  }
  p->pipe = std::move(attached).value();
  p->reader = std::make_shared<msg::PipeReader>(p->pipe);
  msg::PipeReader* reader = p->reader.get();
  // A broken pipe ends the reader: the worker goes silent and expires.
  reader->Start(
      "zm-wpipe", [this, id, reader](msg::Message& got) { return HandlePiped(id, reader, got); },
      [this](const Status& bad) { OnBadMessage(bad); });
}

bool WorkerDispatcher::State::HandlePiped(const std::string& id, msg::PipeReader* reader, msg::Message& got) {
  std::vector<storage::ReadCompletion> reads_done;
  std::vector<decompressor::DecompressCompletion> decodes_done;
  std::vector<std::pair<std::string, msg::Body>> answers;
  msg::ShmPipe& pipe = *reader->pipe();
  {
    const trace::TraceSpan span("message", [&] { return std::string("handle ") + msg::BodyName(got.body); },
                                 trace::Activity::kHandleMessage);
    MutexLock lock(&mu);
    if (reader->stop_requested()) return false;  // its worker was re-issued meanwhile
    HandleLocked(id, std::move(got), &reads_done, &decodes_done, &answers);
    // What else has arrived, under the same lock.
    while (pipe.Readable()) {
      Result<msg::Message> more = pipe.Recv(milliseconds(0));
      if (!more.ok()) break;
      HandleLocked(id, std::move(more).value(), &reads_done, &decodes_done, &answers);
    }
  }
  for (auto& [to, body] : answers) (void)pipe.Send(std::move(body), milliseconds(100));
  Complete(&reads_done, &decodes_done);
  Kick();  // credits came back and completions may have made decodes ready
  return true;
}

void WorkerDispatcher::State::JoinRetired() {
  std::vector<std::shared_ptr<msg::PipeReader>> done;
  {
    MutexLock lock(&mu);
    done.swap(retired);
  }
  for (const std::shared_ptr<msg::PipeReader>& r : done) r->Stop();
}

void WorkerDispatcher::State::Kick() {
  bool has_pipes = false;
  bool has_zmq = false;
  {
    MutexLock lock(&mu);
    has_zmq = zmq_workers > 0;
    has_pipes = static_cast<int32_t>(peers.size()) > zmq_workers;
  }
  if (has_pipes) Dispatch(Clock::now(), /*on_dispatcher_thread=*/false);
  if (has_zmq || !has_pipes) server->Wake();
}

void WorkerDispatcher::State::Dispatch(Clock::time_point now, bool on_dispatcher_thread) {
  MutexLock dispatch_lock(&dispatch_mu);
  std::vector<Send> sends;
  {
    MutexLock lock(&mu);
    if (on_dispatcher_thread) ExpireLocked(now);
    const auto eligible = [&](const Peer& peer) { return on_dispatcher_thread || peer.pipe != nullptr; };
    // Reads: in order, to storage workers with free credits.
    for (auto& [id, peer] : peers) {
      if (peer.role != msg::kRoleStorage || read_queue.empty() || !eligible(peer)) continue;
      msg::ReadRequest request;
      while (!read_queue.empty() && static_cast<int32_t>(peer.held.size()) < peer.credits) {
        const uint64_t op_id = read_queue.front();
        read_queue.pop_front();
        ReadItem& item = reads.at(op_id);
        item.peer = id;
        peer.held.insert(op_id);
        request.ops.push_back(
            std::make_unique<msg::ChunkRead>(storage::ChunkReadToWire(item.op, setup.arena_base, item.attempt)));
      }
      if (!request.ops.empty()) sends.push_back({id, peer.pipe, std::move(request)});
    }
    // Decodes: the most urgent READY op to the decompressor with the most free credits; a worker's
    // decodes of this tick leave in one DecodeRequests frame (in the order given).
    std::map<std::string, std::vector<std::unique_ptr<msg::DecodeRequest>>> decode_frames;
    while (!ready.empty()) {
      Peer* best = nullptr;
      const std::string* best_id = nullptr;
      for (auto& [id, peer] : peers) {
        if (peer.role != msg::kRoleDecompressor || !eligible(peer)) continue;
        const int32_t free = peer.credits - static_cast<int32_t>(peer.held.size());
        if (free > 0 && (best == nullptr || free > best->credits - static_cast<int32_t>(best->held.size()))) {
          best = &peer;
          best_id = &id;
        }
      }
      if (best == nullptr) break;
      const uint64_t op_id = std::get<2>(*ready.begin());
      ready.erase(ready.begin());
      DecodeItem& item = decodes.at(op_id);
      item.peer = *best_id;
      best->held.insert(op_id);
      decode_frames[*best_id].push_back(std::make_unique<msg::DecodeRequest>(
          decompressor::DecodeRequestToWire(item.op, setup.arena_base, item.attempt)));
    }
    for (auto& [id, items] : decode_frames) {
      const std::shared_ptr<msg::ShmPipe>& pipe = peers.at(id).pipe;
      if (items.size() == 1) {
        sends.push_back({id, pipe, std::move(*items.front())});
      } else {
        msg::DecodeRequests frame;
        frame.items = std::move(items);
        sends.push_back({id, pipe, std::move(frame)});
      }
    }
    std::unordered_set<std::string> sending;
    for (const Send& s : sends) sending.insert(s.peer);
    for (auto& [id, peer] : peers) {
      // Heartbeats to workers we have not sent anything for an interval (dispatcher thread only).
      if (on_dispatcher_thread && sending.count(id) == 0 && now - peer.last_sent >= config.heartbeat_interval) {
        sends.push_back({id, peer.pipe,
                         msg::MakeHeartbeat(static_cast<uint32_t>(config.heartbeat_interval.count()),
                                            static_cast<uint32_t>(peer.held.size()))});
        sending.insert(id);
      }
      if (sending.count(id) != 0) peer.last_sent = now;
    }
  }
  for (Send& send : sends) {
    const Status st = send.pipe != nullptr ? send.pipe->Send(std::move(send.body), milliseconds(200))
                                           : server->channel().SendTo(send.peer, std::move(send.body), milliseconds(200));
    if (!st.ok()) {
      MutexLock lock(&mu);
      ReissueLocked(send.peer, "unreachable (" + st.ToString() + ")");
    }
  }
}

void WorkerDispatcher::State::OnTick(Clock::time_point now) {
  JoinRetired();
  Dispatch(now, /*on_dispatcher_thread=*/true);
}

void WorkerDispatcher::State::OnMessage(msg::Received& got) {
  const trace::TraceSpan span("message", [&] { return std::string("handle ") + msg::BodyName(got.message.body); },
                               trace::Activity::kHandleMessage);
  MutexLock lock(&mu);
  HandleLocked(got.peer, std::move(got.message), &read_done, &decode_done, &replies);
}

void WorkerDispatcher::State::OnBadMessage(const Status& bad) {
  MutexLock lock(&mu);
  ++counters.bad_messages;
  Log(fmt::format("E: dropped a bad message: {}", bad.ToString()));
}

void WorkerDispatcher::State::OnMessagesDone() {
  for (auto& [peer, body] : replies) (void)server->channel().SendTo(peer, std::move(body), milliseconds(100));
  replies.clear();
  Complete(&read_done, &decode_done);
}

void WorkerDispatcher::State::Complete(std::vector<storage::ReadCompletion>* reads_done,
                                       std::vector<decompressor::DecompressCompletion>* decodes_done) {
  for (const storage::ReadCompletion& c : *reads_done) {
    if (setup.on_read) setup.on_read(c);
  }
  reads_done->clear();
  for (const decompressor::DecompressCompletion& c : *decodes_done) {
    if (setup.on_decode) setup.on_decode(c);
  }
  decodes_done->clear();
}

void WorkerDispatcher::State::OnLoopEnd() {
  // Leaving: tell every worker, so it reconnects to the next scheduler without waiting for liveness.
  std::vector<std::pair<std::string, std::shared_ptr<msg::ShmPipe>>> ids;
  {
    MutexLock lock(&mu);
    for (const auto& [id, peer] : peers) ids.emplace_back(id, peer.pipe);
  }
  for (const auto& [id, pipe] : ids) {
    if (pipe != nullptr) {
      (void)pipe->Send(msg::MakeDisconnect("scheduler stopping"), milliseconds(100));
    } else {
      (void)server->channel().SendTo(id, msg::MakeDisconnect("scheduler stopping"), milliseconds(100));
    }
  }
}

// ---- WorkerDispatcher -----------------------------------------------------------------------------

WorkerDispatcher::WorkerDispatcher(std::unique_ptr<State> state) : s_(std::move(state)) {}

Result<std::shared_ptr<WorkerDispatcher>> WorkerDispatcher::Start(zmq::context_t& context, DispatcherConfig config,
                                                                  const EngineSetup& setup) {
  if (setup.arena_name.empty() || setup.arena_base == nullptr) {
    return Status::InvalidArgument("remote workers need a shared-memory arena (a cache with a shm name)");
  }
  if (config.heartbeat_interval.count() <= 0 || config.liveness < 1) {
    return Status::InvalidArgument("dispatcher: heartbeat interval and liveness must be positive");
  }
  msg::ChannelOptions options;
  options.endpoint = config.endpoint;
  options.sender = "scheduler";
  options.security = config.security;
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<msg::RouterServer> server, msg::RouterServer::Bind(context, options));
  auto state = std::make_unique<State>(context, std::move(config), setup, std::move(server));
  std::shared_ptr<WorkerDispatcher> d(new WorkerDispatcher(std::move(state)));
  State* s = d->s_.get();
  s->server->Start(s, s->config.heartbeat_interval / 2, "zm-dispatch");
  return d;
}

WorkerDispatcher::~WorkerDispatcher() { Stop(); }

const std::string& WorkerDispatcher::endpoint() const { return s_->server->endpoint(); }
const DispatcherConfig& WorkerDispatcher::config() const { return s_->config; }

Status WorkerDispatcher::SubmitReads(std::vector<storage::ReadOp> ops) {
  for (const storage::ReadOp& op : ops) {
    ZM_RETURN_IF_ERROR(s_->Offset(op.dst, op.dst_capacity_bytes, "read destination", op.tensor_name).status());
  }
  {
    MutexLock lock(&s_->mu);
    if (s_->stopping) return Status::Unavailable("scheduler dispatcher stopped");
    for (const storage::ReadOp& op : ops) {
      if (s_->reads.count(op.op_id) != 0) {
        return Status::InvalidArgument(fmt::format("read op id {} is in use", op.op_id));
      }
    }
    for (storage::ReadOp& op : ops) {
      const uint64_t id = op.op_id;
      s_->reads[id] = State::ReadItem{std::move(op), 0, {}};
      s_->read_queue.push_back(id);
    }
  }
  s_->Kick();
  return Status::Ok();
}

Status WorkerDispatcher::AddDecode(decompressor::DecompressOp op, bool ready) {
  const bool recover = op.kind == decompressor::DecompressOpKind::kRecover;
  ZM_RETURN_IF_ERROR(s_->Offset(op.src, decompressor::OpSrcBytes(op), "decode source", op.tensor_name).status());
  ZM_RETURN_IF_ERROR(
      s_->Offset(op.dst, decompressor::OpDstBytes(op), "decode destination", op.tensor_name).status());
  if (recover) ZM_RETURN_IF_ERROR(s_->Offset(op.sm, decompressor::OpSmBytes(op), "SM plane", op.tensor_name).status());
  {
    MutexLock lock(&s_->mu);
    if (s_->stopping) return Status::Unavailable("scheduler dispatcher stopped");
    if (s_->decodes.count(op.op_id) != 0) {
      return Status::InvalidArgument(fmt::format("decode op id {} is in use", op.op_id));
    }
    const uint64_t id = op.op_id;
    State::DecodeItem item;
    item.seq = s_->seq++;
    item.ready = ready;
    if (ready) s_->ready.emplace(op.priority, item.seq, id);
    item.op = std::move(op);
    s_->decodes[id] = std::move(item);
  }
  if (ready) s_->Kick();
  return Status::Ok();
}

Status WorkerDispatcher::MarkReady(uint64_t op_id) {
  {
    MutexLock lock(&s_->mu);
    if (s_->stopping) return Status::Unavailable("scheduler dispatcher stopped");
    auto it = s_->decodes.find(op_id);
    if (it == s_->decodes.end() || !it->second.peer.empty()) {
      return Status::NotFound(fmt::format("decode op {} is not waiting", op_id));
    }
    if (it->second.ready) return Status::Ok();
    it->second.ready = true;
    s_->ready.emplace(it->second.op.priority, it->second.seq, op_id);
  }
  s_->Kick();
  return Status::Ok();
}

Status WorkerDispatcher::Cancel(uint64_t op_id, Status reason) {
  if (reason.ok()) return Status::InvalidArgument("Cancel needs a non-OK reason");
  {
    MutexLock lock(&s_->mu);
    auto it = s_->decodes.find(op_id);
    if (it == s_->decodes.end() || !it->second.peer.empty()) {
      return Status::NotFound(fmt::format("decode op {} is not pending", op_id));
    }
    if (it->second.ready) s_->ready.erase({it->second.op.priority, it->second.seq, op_id});
    s_->decodes.erase(it);
  }
  if (s_->setup.on_decode) s_->setup.on_decode(decompressor::DecompressCompletion{op_id, std::move(reason), -1, 0});
  return Status::Ok();
}

void WorkerDispatcher::Stop() {
  MutexLock stop_lock(&s_->stop_mu);
  if (s_->joined) return;
  {
    MutexLock lock(&s_->mu);
    s_->stopping = true;
  }
  s_->server->Stop();
  {
    MutexLock lock(&s_->mu);  // every pipe reader stops: nothing arrives any more
    for (auto& [id, peer] : s_->peers) {
      if (peer.reader == nullptr) continue;
      peer.reader->RequestStop();
      s_->retired.push_back(peer.reader);
    }
  }
  s_->JoinRetired();
  s_->joined = true;
  std::vector<uint64_t> read_ids, decode_ids;
  {
    MutexLock lock(&s_->mu);
    for (const auto& [id, item] : s_->reads) read_ids.push_back(id);
    for (const auto& [id, item] : s_->decodes) decode_ids.push_back(id);
    s_->reads.clear();
    s_->decodes.clear();
    s_->read_queue.clear();
    s_->ready.clear();
  }
  for (uint64_t id : read_ids) {
    storage::ReadCompletion c;
    c.op_id = id;
    c.status = Status::Unavailable("scheduler stopped before the read completed");
    if (s_->setup.on_read) s_->setup.on_read(c);
  }
  for (uint64_t id : decode_ids) {
    if (s_->setup.on_decode) {
      s_->setup.on_decode({id, Status::Unavailable("scheduler stopped before the decode completed"), -1, 0});
    }
  }
}

DispatcherStats WorkerDispatcher::stats() const {
  MutexLock lock(&s_->mu);
  DispatcherStats out = s_->counters;
  for (const auto& [id, peer] : s_->peers) {
    if (peer.role == msg::kRoleDecompressor) {
      ++out.decompressors;
      out.decompressor_threads += peer.threads;
    } else {
      ++out.storage_workers;
    }
    if (peer.pipe != nullptr) ++out.pipe_workers;
  }
  out.reads_waiting = s_->read_queue.size();
  out.reads_in_flight = s_->reads.size() - s_->read_queue.size();
  for (const auto& [id, item] : s_->decodes) {
    if (item.peer.empty()) {
      ++out.decodes_waiting;
    } else {
      ++out.decodes_in_flight;
    }
  }
  return out;
}

}  // namespace zipmoe::runtime
