// ApiServer's batch loop (api_server.h "Batching"): admission of queued sequences, the decode steps,
// tokens to text (stop strings, streaming), finishing and draining. The HTTP handlers are
// api_server.cc; the shared request / job records api_server_jobs.h.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "services/api/api_server.h"
#include "services/api/api_server_jobs.h"
#include "services/service_base/service_metrics.h"

namespace zipmoe::api {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

bool ApiServer::Submit(const std::shared_ptr<Request>& request) {
  std::vector<Job*> now_done;
  bool stopping = false;
  {
    MutexLock lock(&queue_mu_);
    stopping = stopping_;
    if (!stopping && queue_.size() + request->jobs.size() > static_cast<size_t>(std::max(1, options_.max_waiting)))
      return false;
    for (const auto& job : request->jobs) {
      if (job->resumed_finished) continue;  // done before Submit (a resumed request)
      if (job->params.max_new_tokens == 0 || job->ended_in_replay || stopping) {
        now_done.push_back(job.get());
      } else {
        queue_.push_back(job.get());
      }
    }
    if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<double>(queue_.size()));
  }
  queue_cv_.NotifyAll();
  for (Job* job : now_done)
    Finish(*job, stopping ? Status::Unavailable("the server is shutting down") : Status::Ok(), job->eos_in_replay);
  return true;
}

bool ApiServer::Job::FeedText(int32_t t) {
  if (!decoder || params.IsStopToken(t) || matcher->stopped()) return matcher->stopped();
  return matcher->Append(decoder->Step(t), /*match=*/count >= params.min_new_tokens);
}

bool ApiServer::OnToken(Job& job, const executor::SampledToken& token) {
  const auto now = Clock::now();
  ++job.count;
  if (metrics_ != nullptr) {
    if (job.count == 1) {
      metrics_->ObserveTtft(Seconds(job.owner->arrival, now));
    } else {
      metrics_->ObserveTpot(Seconds(job.last_token, now));
    }
    metrics_->AddTokens(1);
  }
  job.last_token = now;
  const bool want_logprobs = job.params.logprobs >= 0;
  size_t offset = 0;  // in characters (code points) of the text before this token
  if (want_logprobs) {
    const std::string& text = job.matcher->text();  // valid UTF-8 (the stream decoder's output)
    if (job.offset_bytes > text.size()) job.offset_bytes = job.offset_chars = 0;
    for (; job.offset_bytes < text.size(); ++job.offset_bytes)
      job.offset_chars += (static_cast<uint8_t>(text[job.offset_bytes]) & 0xC0) != 0x80;
    offset = job.offset_chars;
  }
  const bool stop = job.FeedText(token.id);
  Request& req = *job.owner;
  {
    MutexLock lock(&req.mu);
    if (want_logprobs) {
      job.logprobs.push_back(token);
      job.offsets.push_back(offset);
    }
    if (req.request.stream) {
      job.pending += job.matcher->TakeSafe(/*all=*/false);
      job.pending_tokens.push_back(token.id);
      if (want_logprobs) {
        job.pending_logprobs.push_back(token);
        job.pending_offsets.push_back(offset);
      }
    }
  }
  if (req.request.stream) req.cv.NotifyAll();
  return !stop && !req.cancelled.load(std::memory_order_relaxed);
}

void ApiServer::Finish(Job& job, const Status& status, bool eos) {
  Request& req = *job.owner;
  const bool cancelled = req.cancelled.load();
  std::string reason;
  {
    MutexLock lock(&req.mu);
    if (!status.ok()) {
      const bool client = status.code() == StatusCode::kInvalidArgument;
      const bool unavailable = status.code() == StatusCode::kUnavailable;
      job.failed = true;
      job.error = ApiError{client ? 400 : unavailable ? 503 : 500,
                           client ? "invalid_request_error" : "server_error", status.ToString(), "", ""};
      reason = unavailable ? "abort" : "error";
    } else {
      if (job.decoder && !job.matcher->stopped()) job.matcher->Append(job.decoder->Flush());
      if (req.request.stream) job.pending += job.matcher->TakeSafe(/*all=*/true);
      job.text = job.matcher->text();
      job.completion_tokens = job.count;
      job.finish_reason = (eos || job.matcher->stopped()) ? "stop" : "length";
      reason = cancelled ? "abort" : job.finish_reason;
    }
    job.done = true;
    ++req.done_jobs;
    if (req.done_jobs == req.jobs.size() && metrics_ != nullptr) metrics_->ObserveE2e(Seconds(req.arrival, Clock::now()));
  }
  if (metrics_ != nullptr) metrics_->CountFinished(reason);
  if (status.ok() || status.code() != StatusCode::kInvalidArgument) {  // a client's mistake says nothing
    MutexLock lock(&health_mu_);
    if (status.ok()) {
      last_error_.clear();
    } else if (status.code() != StatusCode::kUnavailable) {  // shutting down is not a fault
      last_error_ = status.ToString();
    }
  }
  std::fprintf(stderr, "%s",
               fmt::format("I: serve: {} choice {} {}: {} prompt + {} completion tokens in {:.3f} s, batch of up to {}\n",
                           req.id, job.index,
                           !status.ok() ? "error " + status.ToString()
                           : cancelled  ? std::string("cancelled (client gone or shutdown)")
                                        : job.finish_reason,
                           req.request.prompts[job.prompt].ids.size(), job.count,
                           Seconds(req.arrival, Clock::now()), job.peak_batch)
                   .c_str());
  req.cv.NotifyAll();
}

std::vector<ApiServer::Job*> ApiServer::TakeAdmissionsLocked(size_t slots) {
  std::vector<Job*> admit;
  if (options_.grouping == RequestGrouping::kNone || queue_.size() <= slots) {
    while (!queue_.empty() && admit.size() < slots) {
      admit.push_back(queue_.front());
      queue_.pop_front();
      if (metrics_ != nullptr) metrics_->CountAdmitted("fifo");
    }
    return admit;
  }
  // More sequences wait than there are slots: group by dependency over the window. Only this thread
  // takes sequences off the queue, so its front stays while the lock is released for the predictions.
  const size_t window = std::min(queue_.size(), static_cast<size_t>(std::max(1, options_.group_window)));
  const std::vector<Job*> candidates(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(window));
  queue_mu_.Unlock();
  std::vector<GroupingCandidate> grouping;
  for (Job* job : candidates) {
    if (!job->predicted) {
      // A prompt the model rejects predicts nothing here; AddSequence reports its error.
      Result<ExpertSets> predicted = generator_->PredictExperts(job->owner->request.prompts[job->prompt].ids);
      job->predicted = predicted.ok() ? std::move(predicted).value() : ExpertSets{};
    }
    grouping.push_back(GroupingCandidate{&*job->predicted, job->passed_over});
  }
  const std::vector<size_t> picked =
      ChooseAdmissions(grouping, generator_->ExpertsAtHand(), slots, std::max(1, options_.group_window));
  queue_mu_.Lock();
  std::vector<bool> taken(candidates.size(), false);
  for (size_t i : picked) taken[i] = true;
  // The oldest candidate left waiting: a pick queued after it was admitted out of order, and every
  // candidate left between it and the last pick was passed over once more.
  const size_t oldest_left = static_cast<size_t>(std::find(taken.begin(), taken.end(), false) - taken.begin());
  for (size_t i : picked) {
    admit.push_back(candidates[i]);
    queue_.erase(std::find(queue_.begin(), queue_.end(), candidates[i]));
    if (metrics_ != nullptr) metrics_->CountAdmitted(i > oldest_left ? "grouped" : "fifo");
  }
  const size_t last = picked.empty() ? 0 : *std::max_element(picked.begin(), picked.end());
  for (size_t i = oldest_left; i < last; ++i) {
    if (!taken[i]) ++candidates[i]->passed_over;
  }
  return admit;
}

void ApiServer::BatchLoop() {
  std::unique_ptr<executor::BatchSession> session = generator_->NewSession();
  std::map<executor::BatchSession::SequenceId, Job*> running;
  const size_t max_batch = static_cast<size_t>(std::max(1, options_.max_batch));
  while (true) {
    std::vector<Job*> admit, dropped;
    {
      MutexLock lock(&queue_mu_);
      queue_cv_.Wait(&lock, [&]() ZM_REQUIRES(queue_mu_) {
        if (stopping_ || !running.empty()) return true;
        return !queue_.empty();
      });
      if (stopping_) break;
      // Requests cancelled while queued never start.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->owner->cancelled.load()) {
          dropped.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      admit = TakeAdmissionsLocked(max_batch - std::min(max_batch, running.size()));
      running_count_ = running.size() + admit.size();
      if (metrics_ != nullptr) {
        metrics_->SetQueueDepth(static_cast<double>(queue_.size()));
        metrics_->SetRunning(static_cast<double>(running_count_));
      }
    }
    for (Job* job : dropped) Finish(*job, Status::Ok(), false);
    for (Job* job : admit) {
      const std::vector<int32_t>& prompt = job->owner->request.prompts[job->prompt].ids;
      Result<executor::BatchSession::SequenceId> id =
          session->AddSequence(
              prompt, job->params, job->sampler_stream,
              [this, job](const executor::SampledToken& token) { return OnToken(*job, token); }, job->resume_tokens);
      if (!id.ok()) {
        Finish(*job, id.status(), false);
      } else {
        if (metrics_ != nullptr) metrics_->AddPromptTokens(prompt.size());
        running.emplace(*id, job);
      }
    }
    if (session->empty()) continue;
    for (auto& [id, job] : running) job->peak_batch = std::max(job->peak_batch, running.size());
    for (executor::BatchSession::Finished& f : session->Step()) {
      auto it = running.find(f.id);
      if (it == running.end()) continue;
      it->second->cached_tokens = f.result.cached_prompt_tokens;
      if (f.result.transient_retries > 0) {
        std::fprintf(stderr, "%s",
                     fmt::format("I: serve: {} choice {}: re-prefilled and went on after {} failed forward pass(es) "
                                 "(the expert pipeline was restarting)\n",
                                 it->second->owner->id, it->second->index, f.result.transient_retries)
                         .c_str());
      }
      if (metrics_ != nullptr && f.result.cached_prompt_tokens > 0)
        metrics_->AddCachedPromptTokens(static_cast<uint64_t>(f.result.cached_prompt_tokens));
      Finish(*it->second, f.status, f.result.stopped_on_eos);
      running.erase(it);
    }
    if (metrics_ != nullptr) {
      const executor::KvBudgetCounters kv = generator_->kv_budget_stats();
      metrics_->SetKvCache(kv.used_bytes, kv.budget_bytes, kv.preemptions);
    }
    {
      MutexLock lock(&queue_mu_);
      running_count_ = running.size();
      if (metrics_ != nullptr) metrics_->SetRunning(static_cast<double>(running_count_));
    }
  }
  const Status gone = Status::Unavailable("the server is shutting down");
  for (auto& [id, job] : running) Finish(*job, gone, false);
  std::deque<Job*> left;
  {
    MutexLock lock(&queue_mu_);
    left.swap(queue_);
    running_count_ = 0;
  }
  for (Job* job : left) Finish(*job, gone, false);
}

void ApiServer::Drain(std::chrono::milliseconds grace) {
  draining_.store(true);
  const auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline) {
    {
      MutexLock lock(&queue_mu_);
      if (queue_.empty() && running_count_ == 0) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ApiServer::StopBatching() {
  {
    MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  queue_cv_.NotifyAll();
  if (batch_thread_.joinable()) batch_thread_.join();
}

}  // namespace zipmoe::api
