// A JobStore wrapper over a real store for controller tests. It can
//   - hold the next write inside the store (as a slow fsync would) until the test
//     releases it, telling the test once the write has begun;
//   - fail the next write of a kind with a given Status, writing nothing;
//   - report each committed write to a journal ("put job-1 SCHEDULED",
//     "append job-1 seq 3..4", "create job-1"), so a test can check what was on disk
//     before a message was sent.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/store/job_store.h"

namespace trainyard::testing {

class TestJobStore : public JobStore {
 public:
  using Journal = std::function<void(const std::string&)>;
  enum class Kind { kCreate, kPut, kAppend };
  struct Gate {
    absl::Notification entered;  // the held write has begun
    absl::Notification release;  // set by the test: let it commit
  };

  explicit TestJobStore(JobStore* inner, Journal journal = nullptr)
      : inner_(inner), journal_(std::move(journal)) {}

  // The next write (of any kind) waits inside the store until gate->release.
  std::shared_ptr<Gate> HoldNextWrite() {
    absl::MutexLock lock(&mu_);
    gate_ = std::make_shared<Gate>();
    return gate_;
  }
  // The next write of `kind` fails with `status` and changes nothing.
  void FailNext(Kind kind, absl::Status status) {
    absl::MutexLock lock(&mu_);
    failures_.push_back({kind, std::move(status)});
  }
  int writes() const {
    absl::MutexLock lock(&mu_);
    return writes_;
  }

  absl::Status CreateJob(v1::Job* job, std::vector<v1::Event>* events) override {
    if (auto s = Enter(Kind::kCreate); !s.ok()) return s;
    absl::Status s = inner_->CreateJob(job, events);
    if (s.ok()) Log(absl::StrCat("create ", job->id()));
    return s;
  }
  absl::Status PutJob(const v1::Job& job) override {
    if (auto s = Enter(Kind::kPut); !s.ok()) return s;
    absl::Status s = inner_->PutJob(job);
    if (s.ok()) Log(absl::StrCat("put ", job.id(), " ", v1::Job::State_Name(job.state())));
    return s;
  }
  absl::StatusOr<std::vector<v1::Event>> AppendEvents(const std::string& job_id,
                                                      std::vector<v1::Event> events) override {
    if (auto s = Enter(Kind::kAppend); !s.ok()) return s;
    auto out = inner_->AppendEvents(job_id, std::move(events));
    if (out.ok() && !out->empty()) {
      Log(absl::StrCat("append ", job_id, " seq ", out->front().seq(), "..", out->back().seq()));
    }
    return out;
  }
  absl::Status CreateSweep(v1::Sweep* sweep, std::vector<v1::Job>* jobs,
                           std::vector<std::vector<v1::Event>>* events) override {
    if (auto s = Enter(Kind::kCreate); !s.ok()) return s;
    absl::Status s = inner_->CreateSweep(sweep, jobs, events);
    if (s.ok()) Log(absl::StrCat("create ", sweep->id(), " with ", jobs->size(), " jobs"));
    return s;
  }
  absl::StatusOr<std::vector<v1::Sweep>> LoadSweeps() override { return inner_->LoadSweeps(); }
  absl::StatusOr<std::optional<v1::Event>> LastEventOfKind(const std::string& job_id, int kind) override {
    return inner_->LastEventOfKind(job_id, kind);
  }
  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override { return inner_->LoadJobs(); }
  absl::StatusOr<std::vector<v1::Event>> ReadEvents(const std::string& job_id,
                                                    int64_t from_seq, int limit) override {
    return inner_->ReadEvents(job_id, from_seq, limit);
  }
  absl::StatusOr<std::vector<v1::Event>> ReadRecoveryEvents(const std::string& job_id, int attempt,
                                                            int step_tail) override {
    return inner_->ReadRecoveryEvents(job_id, attempt, step_tail);
  }
  int64_t LastSeq(const std::string& job_id) override { return inner_->LastSeq(job_id); }
  absl::Status PutCordon(const std::string& worker, bool cordoned, const std::string& reason) override {
    return inner_->PutCordon(worker, cordoned, reason);
  }
  absl::StatusOr<std::map<std::string, std::string>> LoadCordons() override { return inner_->LoadCordons(); }
  absl::Status SaveUsage(const std::map<std::string, StoredUsage>& usage) override {
    return inner_->SaveUsage(usage);
  }
  absl::StatusOr<std::map<std::string, StoredUsage>> LoadUsage() override { return inner_->LoadUsage(); }

 private:
  struct Failure {
    Kind kind;
    absl::Status status;
  };

  absl::Status Enter(Kind kind) {
    std::shared_ptr<Gate> gate;
    {
      absl::MutexLock lock(&mu_);
      ++writes_;
      for (auto it = failures_.begin(); it != failures_.end(); ++it) {
        if (it->kind != kind) continue;
        absl::Status s = std::move(it->status);
        failures_.erase(it);
        return s;
      }
      gate = std::move(gate_);
      gate_ = nullptr;
    }
    if (gate != nullptr) {
      gate->entered.Notify();
      gate->release.WaitForNotification();
    }
    return absl::OkStatus();
  }
  void Log(const std::string& line) {
    if (journal_) journal_(line);
  }

  JobStore* const inner_;
  const Journal journal_;
  mutable absl::Mutex mu_;
  std::shared_ptr<Gate> gate_ ABSL_GUARDED_BY(mu_);
  std::vector<Failure> failures_ ABSL_GUARDED_BY(mu_);
  int writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard::testing
