// JobManager: sharing the fleet. Checkpoints on request (and their waiting callers),
// cordons and drains.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "server/state/job_manager.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// CheckpointJob callers one job may have waiting at once.
constexpr size_t kMaxWaitersPerJob = 64;

}  // namespace

void JobManager::RequestCheckpoint(const std::string& job_id, absl::Duration timeout, CheckpointDone done,
                                   std::shared_ptr<std::atomic<bool>> gone) {
  absl::StatusOr<CheckpointWant> want;
  {
    absl::MutexLock commit(&commit_mu_);
    const absl::Status sent = Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const size_t waiting = std::count_if(checkpoint_waiters_.begin(), checkpoint_waiters_.end(),
                                           [&](const CheckpointWaiter& w) { return w.job_id == job_id; });
      if (stopping_) {
        want = absl::UnavailableError("the controller is stopping");
      } else if (waiting >= kMaxWaitersPerJob) {
        want = absl::ResourceExhaustedError(
            absl::StrCat("job ", job_id, " already has ", waiting, " checkpoint requests waiting"));
      } else {
        want = evictions_.RequestCheckpoint(job_id, fx);
      }
      if (!want.ok()) return want.status();
      checkpoint_waiters_.push_back({job_id, *want, clock_->Now() + timeout, std::move(done), std::move(gone)});
      return absl::OkStatus();
    });
    if (want.ok() && !sent.ok()) {
      spdlog::error("job={} checkpoint request not sent: {}", job_id, std::string(sent.message()));
    }
  }
  if (!want.ok()) done(want.status());
}

std::optional<absl::StatusOr<v1::CheckpointRef>> JobManager::AnswerOfLocked(const CheckpointWaiter& w,
                                                                            const std::string& job_id,
                                                                            const std::vector<v1::Event>& committed,
                                                                            absl::Time now) {
  if (w.gone && w.gone->load()) return absl::CancelledError("the caller went away");
  if (!job_id.empty() && w.job_id != job_id) return std::nullopt;
  for (const auto& e : committed) {
    const v1::CheckpointSaved& ck = e.checkpoint();
    if (e.has_checkpoint() && ck.requested() && e.rank() == 0 && e.attempt() == w.want.attempt &&
        ck.step() >= w.want.min_step) {
      v1::CheckpointRef ref;
      ref.set_step(ck.step());
      ref.set_path(ck.path());
      ref.set_attempt(e.attempt());
      ref.set_bytes(ck.bytes());
      return ref;
    }
  }
  if (std::string why; !evictions_.CheckpointStillPossible(w.job_id, w.want, &why)) {
    return absl::AbortedError(why);
  }
  if (now >= w.deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", w.job_id,
                     "'s checkpoint was not complete in time (its ranks save at their next "
                     "step boundary; a long step or a slow write takes longer)"));
  }
  return std::nullopt;
}

std::vector<JobManager::Answer> JobManager::TakeAnsweredLocked(const std::string& job_id,
                                                               const std::vector<v1::Event>& committed) {
  std::vector<Answer> out;
  const absl::Time now = clock_->Now();
  for (auto it = checkpoint_waiters_.begin(); it != checkpoint_waiters_.end();) {
    if (auto a = AnswerOfLocked(*it, job_id, committed, now)) {
      out.emplace_back(std::move(it->done), std::move(*a));
      it = checkpoint_waiters_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void JobManager::AbortCheckpointWaiters() {
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& w : checkpoint_waiters_) {
      answers.emplace_back(std::move(w.done), absl::UnavailableError("the controller is stopping"));
    }
    checkpoint_waiters_.clear();
  }
  Deliver(std::move(answers));
}

void JobManager::Deliver(std::vector<Answer> answers) {
  for (auto& [done, answer] : answers) done(std::move(answer));
}

absl::StatusOr<v1::WorkerInfo> JobManager::Cordon(const std::string& name, bool cordon, const std::string& reason) {
  absl::MutexLock commit(&commit_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!registry_.Info(name)) {
      return absl::NotFoundError(absl::StrCat("worker ", Quoted(name), " is not known to this controller"));
    }
  }
  // Stored before it is in force: a restart never forgets a cordon it acted on.
  TY_RETURN_IF_ERROR(store_->PutCordon(name, cordon, reason));
  absl::Status in_force;
  Write([&](Effects*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    in_force = registry_.Cordon(name, cordon, reason);
    if (!in_force.ok()) return in_force;
    spdlog::info("worker={} {}{}", name, cordon ? "cordoned" : "uncordoned", reason.empty() ? "" : ": " + reason);
    return absl::OkStatus();
  }).IgnoreError();  // a refused cordon is returned below; a store error is logged by Run
  TY_RETURN_IF_ERROR(in_force);
  absl::MutexLock lock(&mu_);
  return *registry_.Info(name);
}

absl::StatusOr<v1::DrainWorkerResponse> JobManager::Drain(const std::string& name, const std::string& reason) {
  TY_RETURN_IF_ERROR(Cordon(name, true, reason.empty() ? "draining" : reason).status());
  absl::MutexLock commit(&commit_mu_);
  v1::DrainWorkerResponse response;
  TY_RETURN_IF_ERROR(Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& id : evictions_.Drain(name, reason, fx)) response.add_job_ids(std::move(id));
    spdlog::info("worker={} drained: {} job(s) move", name, response.job_ids_size());
    return absl::OkStatus();
  }));
  absl::MutexLock lock(&mu_);
  *response.mutable_worker() = *registry_.Info(name);
  return response;
}

void JobManager::SetPolicy(SharingPolicy policy) {
  absl::MutexLock lock(&mu_);
  fair_share_.SetPolicy(std::move(policy));
}

std::vector<std::string> JobManager::QueueOrder() {
  absl::MutexLock lock(&mu_);
  return cycle_.queue_order();
}

}  // namespace trainyard
