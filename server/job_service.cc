#include "server/job_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "server/request_checks.h"

namespace trainyard {
namespace {

// Until bearer tokens land, every caller is the same principal.
constexpr char kAnonymousOwner[] = "anonymous";

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A SubmitJob waiting for its preflight. The gate's thread finishes it; OnCancel only
// flags that the client went away, so the gate kills the runner and creates no job.
class PreflightSubmitReactor : public grpc::ServerUnaryReactor {
 public:
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }

 private:
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

// Replays stored events from `from_seq`, then follows new ones as the hub signals
// them; finishes once the job is settled and everything stored has been sent. One
// write is in flight at a time; new events only wake it.
class WatchReactor : public grpc::ServerWriteReactor<v1::Event> {
 public:
  WatchReactor(StateStore* store, EventHub* hub, std::string job_id, int64_t from_seq)
      : store_(store), job_id_(std::move(job_id)), next_seq_(std::max<int64_t>(from_seq, 1)),
        hub_(hub), link_(std::make_shared<Link>()) {
    link_->reactor = this;
    subscription_ = hub->Subscribe(job_id_, [link = link_] { link->Wake(); });
    Pump();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "watcher went away"));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    subscription_.reset();
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;
    }
    delete this;
  }

 private:
  // Lets the hub wake this reactor without outliving it.
  struct Link {
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    void Wake() {
      absl::MutexLock lock(&mu);
      if (reactor != nullptr) reactor->Pump();
    }
  };

  void Pump() {
    absl::MutexLock lock(&mu_);
    PumpLocked();
  }

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    while (true) {
      if (buffer_.empty()) {
        auto events = store_->ReadEvents(job_id_, next_seq_, 128);
        if (!events.ok()) {
          FinishLocked(ToGrpcStatus(events.status()));
          return;
        }
        for (auto& e : *events) buffer_.push_back(std::move(e));
      }
      if (!buffer_.empty()) {
        current_ = std::move(buffer_.front());
        buffer_.pop_front();
        next_seq_ = current_.seq() + 1;
        writing_ = true;
        StartWrite(&current_);
        return;
      }
      if (!hub_->IsSettled(job_id_)) return;  // the hub wakes us on the next event
      // Settled: anything committed before settling is now readable; send it first.
      if (store_->LastSeq(job_id_) < next_seq_) {
        FinishLocked(grpc::Status::OK);
        return;
      }
    }
  }

  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  StateStore* const store_;
  const std::string job_id_;
  absl::Mutex mu_;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_);
  EventHub* const hub_;
  std::shared_ptr<Link> link_;
  std::unique_ptr<EventHub::Subscription> subscription_;
  std::deque<v1::Event> buffer_ ABSL_GUARDED_BY(mu_);
  v1::Event current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* ctx,
                                                    const v1::SubmitJobRequest* request,
                                                    v1::Job* response) {
  if (!request->spec().compile().preflight()) {
    auto job = manager_->Submit(request->spec(), kAnonymousOwner);
    if (job.ok()) *response = std::move(*job);
    return Done(ctx, job.status());
  }
  // Refuse what Submit would refuse before spending a preflight on it.
  v1::JobSpec spec = request->spec();
  if (auto s = manager_->Validate(&spec); !s.ok()) return Done(ctx, s);
  auto* reactor = new PreflightSubmitReactor();
  auto cancelled = reactor->cancelled();
  preflight_->Check(
      spec, [cancelled] { return cancelled->load(); },
      [this, reactor, cancelled, spec, response](absl::Status status) {
        if (status.ok() && cancelled->load()) {
          status = absl::CancelledError("the client went away during the preflight");
        }
        if (status.ok()) {
          auto job = manager_->Submit(spec, kAnonymousOwner);
          if (job.ok()) *response = std::move(*job);
          status = job.status();
        }
        reactor->Finish(ToGrpcStatus(status));
      });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* ctx,
                                                 const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  if (auto s = request_checks::Check(*request); !s.ok()) return Done(ctx, s);
  auto job = manager_->Get(request->id());
  if (job.ok()) *response = std::move(*job);
  return Done(ctx, job.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx,
                                                   const v1::ListJobsRequest* request,
                                                   v1::ListJobsResponse* response) {
  if (auto s = request_checks::Check(*request); !s.ok()) return Done(ctx, s);
  std::vector<v1::Job::State> states;
  for (int s : request->states()) states.push_back(static_cast<v1::Job::State>(s));
  for (auto& job : manager_->List(states, request->limit())) {
    *response->add_jobs() = std::move(job);
  }
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* ctx,
                                                    const v1::CancelJobRequest* request,
                                                    v1::Job* response) {
  if (auto s = request_checks::Check(*request); !s.ok()) return Done(ctx, s);
  auto job = manager_->Cancel(request->id(), request->reason());
  if (job.ok()) *response = std::move(*job);
  return Done(ctx, job.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::ListWorkers(grpc::CallbackServerContext* ctx,
                                                      const v1::ListWorkersRequest* request,
                                                      v1::ListWorkersResponse* response) {
  for (auto& w : manager_->Workers()) *response->add_workers() = std::move(w);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::Event>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* request) {
  class Failed : public grpc::ServerWriteReactor<v1::Event> {
   public:
    explicit Failed(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
    void OnDone() override { delete this; }
  };
  if (auto s = request_checks::Check(*request); !s.ok()) return new Failed(s);
  if (auto job = manager_->Get(request->id()); !job.ok()) return new Failed(job.status());
  return new WatchReactor(store_, hub_, request->id(), request->from_seq());
}

}  // namespace trainyard
