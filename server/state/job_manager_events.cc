// JobManager: the event path. A worker's batch is committed first (each job's events
// in one transaction), acknowledged only after the commit, then applied to the state;
// a controller event (an artifact's, a log line) is committed as a writer's.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "common/proto_time.h"
#include "server/policy/request_validation.h"
#include "server/state/job_manager.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::Status JobManager::IngestEvents(int64_t conn, const v1::EventBatch& batch) {
  std::vector<Answer> answers;
  absl::Status status;
  {
    absl::MutexLock commit(&commit_mu_);
    status = IngestEventsLocked(conn, batch, &answers);
  }
  Deliver(std::move(answers));  // outside every lock; the checkpoints they name are committed
  return status;
}

absl::Status JobManager::IngestEventsLocked(int64_t conn, const v1::EventBatch& batch, std::vector<Answer>* answers) {
  // Group by job, keeping each job's order. An event no worker may send is dropped and
  // counted; the batch is still acknowledged (see request_validation::InvalidEvent).
  std::map<std::string, std::vector<v1::Event>> by_job;
  int invalid = 0;
  for (const auto& e : batch.events()) {
    if (std::string why = request_validation::InvalidEvent(e); !why.empty()) {
      if (invalid++ == 0) {
        spdlog::warn("worker stream {}: dropped an event of job {}: {}", conn, Quote(e.job_id()), why);
      }
      continue;
    }
    by_job[e.job_id()].push_back(e);
  }
  if (invalid > 0) metrics_->EventsDropped("invalid", invalid);

  {
    absl::MutexLock lock(&mu_);
    std::optional<std::string> worker = registry_.NameOf(conn);
    if (!worker) return absl::FailedPreconditionError("events before Register on this stream");
    registry_.Touch(conn);
    // A rank's end frees a slot its worker kept busy for a rank no job counts any more.
    // Read before the screen below, which drops those events (their attempt is over).
    for (const auto& [job_id, events] : by_job) {
      for (const auto& e : events) {
        const v1::RankState::State s = e.has_rank_state() ? e.rank_state().state() : v1::RankState::STATE_UNSPECIFIED;
        if (s == v1::RankState::EXITED || s == v1::RankState::FAILED || s == v1::RankState::KILLED) {
          registry_.RankGone(*worker, job_id, e.attempt(), e.rank());
        }
      }
    }
    for (auto it = by_job.begin(); it != by_job.end();) {
      if (jobs_.Closed(it->first)) {
        // The job ended and its ranks are gone: its stream is closed. A late event (a
        // resend, a rank that outlived its cancel) is dropped and counted, not appended.
        spdlog::info("worker={} sent {} events for job={}, whose stream is closed; dropped", *worker, it->second.size(),
                     it->first);
        metrics_->EventsDropped("job_ended", static_cast<int>(it->second.size()));
        it = by_job.erase(it);
        continue;
      }
      if (jobs_.Contains(it->first)) {
        // Another attempt's events, a rank not placed on this worker, a checkpoint that
        // cannot be the job's newest: dropped and counted, the batch still acknowledged.
        std::map<std::string, int> dropped;  // by label; the first of each is logged
        for (const EventRefusal& r : jobs_.Screen(*worker, it->first, &it->second)) {
          if (dropped[r.label]++ == 0) {
            spdlog::warn("worker={} job={}: dropped an event ({}): {}", *worker, it->first, r.label, r.why);
          }
        }
        for (const auto& [label, n] : dropped) metrics_->EventsDropped(label, n);
        ++it;
        continue;
      }
      spdlog::warn("worker={} sent {} events for unknown job={}", *worker, it->second.size(), it->first);
      it = by_job.erase(it);
    }
  }
  // Commit outside the state lock (jobs are never removed, and no other writer runs).
  absl::Status status;
  Effects fx;
  std::map<std::string, std::vector<v1::Event>> committed;
  const absl::Time started = absl::Now();  // wall time, whatever clock_ is
  for (auto& [job_id, events] : by_job) {
    const absl::Time now = clock_->Now();
    for (auto& e : events) {
      if (!e.has_time()) *e.mutable_time() = ToProtoTime(now);
    }
    auto stored = store_->AppendEvents(job_id, std::move(events));
    if (!stored.ok()) {
      status = stored.status();  // this batch is not acknowledged; the worker resends it
      break;
    }
    metrics_->EventsIngested(static_cast<int>(stored->size()));
    for (const auto& e : *stored) {
      if (e.has_step_metrics()) metrics_->StepReported(job_id, e.step_metrics(), clock_->Now());
      if (e.has_compile()) metrics_->CompileReported(job_id, e.compile());
      if (e.has_stall()) metrics_->StallReported(job_id);
      if (e.has_validation()) metrics_->ValidationReported(job_id, e.validation());
      if (e.has_checkpoints_pruned()) metrics_->CheckpointsPruned(job_id, e.checkpoints_pruned());
    }
    fx.Notify(job_id);
    committed[job_id] = std::move(*stored);
  }
  if (!by_job.empty()) metrics_->IngestBatch(absl::Now() - started);
  Write(
      [&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        for (const auto& [job_id, events] : committed) {
          if (!events.empty()) {
            JobView& view = views_.at(job_id);
            view.last_seq = std::max(view.last_seq, events.back().seq());
          }
          jobs_.ApplyEvents(job_id, events, fx);
          if (!checkpoint_waiters_.empty()) {
            for (auto& a : TakeAnsweredLocked(job_id, events)) answers->push_back(std::move(a));
          }
        }
        return absl::OkStatus();
      },
      std::move(fx))
      .IgnoreError();  // follow-up transitions; logged by Run
  return status;
}

absl::StatusOr<bool> JobManager::AppendControllerEvent(const std::string& job_id, v1::Event event) {
  // Under commit_mu_ no other writer runs, so views_ holds the committed state: a job
  // seen not terminal here cannot end before this event is committed.
  absl::MutexLock commit(&commit_mu_);
  {
    absl::MutexLock lock(&mu_);
    auto it = views_.find(job_id);
    if (it == views_.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    const v1::Job::State s = it->second.job.state();
    if (s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED) return false;
  }
  event.set_job_id(job_id);
  event.set_source_seq(0);
  if (!event.has_time()) *event.mutable_time() = ToProtoTime(clock_->Now());
  auto stored = store_->AppendEvents(job_id, {std::move(event)});
  if (!stored.ok()) return stored.status();
  if (!stored->empty()) {
    absl::MutexLock lock(&mu_);
    JobView& view = views_.at(job_id);
    view.last_seq = std::max(view.last_seq, stored->back().seq());
  }
  hub_->Notify(job_id);
  return true;
}

}  // namespace trainyard
