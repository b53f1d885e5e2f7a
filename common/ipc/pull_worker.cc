#include "common/ipc/pull_worker.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/messaging_channel.h"

namespace zipmoe::messaging {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {
size_t ItemsIn(const Body& frame);
}  // namespace

Result<std::unique_ptr<PullWorker>> PullWorker::Create(zmq::context_t& context, PullWorkerConfig config) {
  if (config.endpoint.empty()) return Status::InvalidArgument("pull worker: no scheduler endpoint");
  if (config.credits < 1 || config.n_threads < 1) {
    return Status::InvalidArgument(fmt::format("pull worker: credits {} and threads {} must be >= 1",
                                               config.credits, config.n_threads));
  }
  if (config.heartbeat_interval.count() <= 0 || config.liveness < 1) {
    return Status::InvalidArgument("pull worker: heartbeat interval and liveness must be positive");
  }
  ZM_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create());
  return std::unique_ptr<PullWorker>(new PullWorker(context, std::move(config), std::move(wake)));
}

PullWorker::PullWorker(zmq::context_t& context, PullWorkerConfig config, EventFd wake)
    : context_(context), config_(std::move(config)), wake_(std::move(wake)) {}

void PullWorker::Log(const std::string& line) const {
  if (config_.log) config_.log(line);
}

void PullWorker::Post(Body completion) {
  std::vector<Body> one;
  one.push_back(std::move(completion));
  PostAll(std::move(one));
}

void PullWorker::PostAll(std::vector<Body> completions) {
  if (completions.empty()) return;
  std::shared_ptr<ShmPipe> pipe;
  {
    MutexLock lock(&mu_);
    pipe = pipe_;
    if (pipe == nullptr) {
      for (Body& body : completions) outbox_.push_back(std::move(body));
    }
  }
  if (pipe == nullptr) {
    wake_.Notify();
    return;
  }
  SendCompletions(std::deque<Body>(std::make_move_iterator(completions.begin()),
                                  std::make_move_iterator(completions.end())),
                  pipe.get(), nullptr);
}

void PullWorker::SendCompletions(std::deque<Body> completions, ShmPipe* pipe, Channel* channel) {
  for (Body& frame : BatchCompletions(std::move(completions))) {
    const size_t items = ItemsIn(frame);
    const Status st = pipe != nullptr ? pipe->Send(std::move(frame), milliseconds(1000))
                                      : channel->Send(std::move(frame), milliseconds(1000));
    if (!st.ok()) {
      Log(fmt::format("send to {}{}: {}", config_.endpoint, pipe != nullptr ? " through " + pipe->name() : "",
                      st.ToString()));
      continue;
    }
    MutexLock lock(&mu_);
    last_sent_ = Clock::now();
    stats_.completions += items;
    ++stats_.frames;
    if (pipe != nullptr) ++stats_.pipe_frames;
  }
}

namespace {

// Appends `run` (consecutive completions of one type) to `frames`: alone, or as Batch items.
template <typename Item, typename Batch>
void FlushRun(std::vector<Item>* run, std::vector<Body>* frames) {
  if (run->size() == 1) {
    frames->emplace_back(std::move(run->front()));
  } else if (!run->empty()) {
    Batch batch;
    batch.items.reserve(run->size());
    for (Item& item : *run) batch.items.push_back(std::make_unique<Item>(std::move(item)));
    frames->emplace_back(std::move(batch));
  }
  run->clear();
}

size_t ItemsIn(const Body& frame) {
  if (const auto* r = std::get_if<ReadCompletions>(&frame)) return r->items.size();
  if (const auto* d = std::get_if<DecodeCompletions>(&frame)) return d->items.size();
  return 1;
}

}  // namespace

std::vector<Body> BatchCompletions(std::deque<Body> bodies) {
  std::vector<Body> frames;
  std::vector<ReadCompletion> reads;
  std::vector<DecodeCompletion> decodes;
  for (Body& body : bodies) {
    if (auto* r = std::get_if<ReadCompletion>(&body)) {
      FlushRun<DecodeCompletion, DecodeCompletions>(&decodes, &frames);
      reads.push_back(std::move(*r));
      if (reads.size() == kMaxCompletionsPerFrame) FlushRun<ReadCompletion, ReadCompletions>(&reads, &frames);
    } else if (auto* d = std::get_if<DecodeCompletion>(&body)) {
      FlushRun<ReadCompletion, ReadCompletions>(&reads, &frames);
      decodes.push_back(std::move(*d));
      if (decodes.size() == kMaxCompletionsPerFrame) FlushRun<DecodeCompletion, DecodeCompletions>(&decodes, &frames);
    } else {
      FlushRun<ReadCompletion, ReadCompletions>(&reads, &frames);
      FlushRun<DecodeCompletion, DecodeCompletions>(&decodes, &frames);
      frames.push_back(std::move(body));
    }
  }
  FlushRun<ReadCompletion, ReadCompletions>(&reads, &frames);
  FlushRun<DecodeCompletion, DecodeCompletions>(&decodes, &frames);
  return frames;
}

void PullWorker::RequestStop() {
  stop_.store(true);
  wake_.Notify();
  std::shared_ptr<ShmPipe> pipe;
  {
    MutexLock lock(&mu_);
    pipe = pipe_;
  }
  if (pipe != nullptr) pipe->Interrupt();  // the loop may be waiting on it
}

PullWorkerStats PullWorker::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void PullWorker::SleepUnlessStopped(milliseconds d) const {
  // In slices, so RequestStop (SIGTERM) ends a back-off at once: a worker asleep in it used to outlive
  // `up`'s 10 s stop grace, be SIGKILLed, and leave its shared-memory pipe behind.
  const auto until = Clock::now() + d;
  while (!stop_.load() && Clock::now() < until)
    std::this_thread::sleep_for(std::min(milliseconds(50), std::chrono::duration_cast<milliseconds>(until - Clock::now()) + milliseconds(1)));
}

Status PullWorker::Run(const Handler& handler) {
  milliseconds backoff = kReconnectBackoffMin;
  const std::string sender = config_.identity;
  while (!stop_.load()) {
    ChannelOptions options;
    options.kind = SocketKind::kDealer;
    options.endpoint = config_.endpoint;
    options.identity = config_.identity;
    options.sender = sender;
    options.security = config_.security;
    Result<Channel> opened = Channel::Open(context_, options);
    if (!opened.ok()) {
      if (opened.status().code() == StatusCode::kInvalidArgument) return opened.status();
      Log(fmt::format("connect {}: {}; retrying in {} ms", config_.endpoint, opened.status().ToString(),
                      backoff.count()));
      SleepUnlessStopped(backoff);
      backoff = std::min(backoff * 2, kReconnectBackoffMax);
      continue;
    }
    Channel channel = std::move(opened).value();
    // A fresh pipe per connection: nothing of an earlier connection's is read by the new one.
    std::shared_ptr<ShmPipe> offered;
    if (config_.pipe) {
      Result<std::unique_ptr<ShmPipe>> created = ShmPipe::CreateForThisProcess(sender, config_.identity);
      if (created.ok()) {
        offered = std::move(created).value();
      } else {
        Log(fmt::format("W: no shared-memory pipe ({}); ZeroMQ carries everything", created.status().ToString()));
      }
    }
    WorkerReady ready;
    ready.n_threads = config_.n_threads;
    ready.credits = config_.credits;
    ready.arena_name = config_.arena_name;
    ready.arena_bytes = config_.arena_bytes;
    ready.pid = static_cast<int32_t>(::getpid());
    ready.heartbeat_interval_ms = static_cast<uint32_t>(config_.heartbeat_interval.count());
    ready.role = config_.role;
    if (offered != nullptr) ready.pipe_name = offered->name();
    if (Status st = channel.Send(ready, milliseconds(1000)); !st.ok()) {
      Log(fmt::format("WorkerReady to {}: {}", config_.endpoint, st.ToString()));
      continue;
    }
    {
      MutexLock lock(&mu_);
      ++stats_.connects;
      last_sent_ = Clock::now();
    }
    Log(fmt::format("connected to {} as {} ({} threads, {} credits)", config_.endpoint, config_.identity,
                    config_.n_threads, config_.credits));
    auto last_heard = Clock::now();
    bool peer_heard = false;  // the scheduler answered since this connect
    bool reconnect = false;
    std::shared_ptr<ShmPipe> live;  // `offered`, once the scheduler accepted it
    const auto on_message = [&](const Body& body) {
      last_heard = Clock::now();
      if (!peer_heard) backoff = kReconnectBackoffMin;
      peer_heard = true;
      const auto* batch = std::get_if<DecodeRequests>(&body);
      if (batch != nullptr || std::holds_alternative<ReadRequest>(body) ||
          std::holds_alternative<DecodeRequest>(body)) {
        {
          MutexLock lock(&mu_);
          stats_.requests += batch != nullptr ? batch->items.size() : 1;
        }
        handler(body);
        last_heard = Clock::now();  // the handler may have worked a while: silence counts from now
        if (live == nullptr) {
          // Completions the handler posted itself (a worker that does the work on this thread) leave
          // now, not after the rest of this wake-up's messages.
          std::deque<Body> out;
          {
            MutexLock lock(&mu_);
            out.swap(outbox_);
          }
          if (!out.empty()) SendCompletions(std::move(out), nullptr, &channel);
        }
      } else if (std::holds_alternative<Disconnect>(body)) {
        Log(fmt::format("scheduler disconnected us: {}", std::get<Disconnect>(body).reason));
        reconnect = true;
        return false;
      } else if (const auto* ack = std::get_if<Ack>(&body); ack != nullptr && offered != nullptr && live == nullptr) {
        // The answer to the pipe offered in WorkerReady.
        if (const Status st = StatusOf(*ack); st.ok()) {
          live = offered;
          MutexLock lock(&mu_);
          pipe_ = live;  // from now on Post() writes into it
          Log(fmt::format("requests and completions through the shared-memory pipe {}", live->name()));
        } else {
          Log(fmt::format("W: the scheduler refused the pipe {}, ZeroMQ carries everything: {}", offered->name(),
                          st.ToString()));
          offered.reset();
        }
      }  // Heartbeat: liveness only. Anything else is not for a worker: ignored.
      return true;
    };
    // Heartbeats and Disconnect: through the pipe once it is in use.
    const auto send_control = [&](Body body, milliseconds timeout) {
      (void)(live != nullptr ? live->Send(std::move(body), timeout) : channel.Send(std::move(body), timeout));
    };
    const auto on_bad = [&](const Status& bad) {
      MutexLock lock(&mu_);
      ++stats_.bad_messages;
      Log(fmt::format("E: dropped a bad message: {}", bad.ToString()));
    };
    while (!stop_.load() && !reconnect) {
      // Send what is queued (posted before the pipe was in use, or with none).
      std::deque<Body> out;
      {
        MutexLock lock(&mu_);
        out.swap(outbox_);
      }
      if (!out.empty()) SendCompletions(std::move(out), live.get(), &channel);
      Clock::time_point last_sent;
      {
        MutexLock lock(&mu_);
        last_sent = last_sent_;  // any thread's send
      }
      const auto now = Clock::now();
      if (now - last_sent >= config_.heartbeat_interval) {
        send_control(MakeHeartbeat(static_cast<uint32_t>(config_.heartbeat_interval.count()), 0), milliseconds(100));
        MutexLock lock(&mu_);
        last_sent = last_sent_ = now;
      }
      if (now - last_heard >= config_.heartbeat_interval * config_.liveness) {
        Log(fmt::format("scheduler at {} silent for {} ms: reconnecting in {} ms", config_.endpoint,
                        std::chrono::duration_cast<milliseconds>(now - last_heard).count(), backoff.count()));
        reconnect = true;
        break;
      }
      const auto wait = config_.heartbeat_interval - std::chrono::duration_cast<milliseconds>(now - last_sent);
      if (live != nullptr) {
        // Requests come through the pipe; the socket carries only what the scheduler sent before it
        // took the pipe, drained after every wake-up.
        Result<Message> got = live->Recv(std::max(wait, milliseconds(1)));
        while (got.ok() || got.status().code() != StatusCode::kDeadlineExceeded) {
          if (!got.ok()) {
            on_bad(got.status());
            if (live->broken()) {
              reconnect = true;  // a fresh connection gets a fresh pipe
              break;
            }
          } else if (!on_message(got->body)) {
            break;
          }
          got = live->Recv(milliseconds(0));
        }
        if (!reconnect) ReceiveAll(channel, [&](Received& r) { return on_message(r.message.body); }, on_bad);
        continue;
      }
      Result<bool> readable = WaitReadable(channel, wake_, wait);
      if (!readable.ok()) return readable.status();
      if (!*readable) continue;
      ReceiveAll(channel, [&](Received& got) { return on_message(got.message.body); }, on_bad);
    }
    {
      MutexLock lock(&mu_);
      pipe_.reset();  // Post() queues again; the pipe goes once the last sender is done with it
    }
    if (stop_.load()) {
      send_control(MakeDisconnect("worker stopping"), milliseconds(200));
      break;
    }
    SleepUnlessStopped(backoff);
    backoff = std::min(backoff * 2, kReconnectBackoffMax);
  }
  return Status::Ok();
}

}  // namespace zipmoe::messaging
