#include "server/service/job_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"
#include "common/grpc_status.h"
#include "common/base/status_macros.h"
#include "server/policy/request_validation.h"
#include "server/service/unary_call.h"
#include "server/service/watch_reactor.h"
#include "server/service/wire_codec.h"

namespace trainyard {
namespace {

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

class FailedWatch : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedWatch(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
  void OnDone() override { delete this; }
};

// Streams one stored artifact: its info, then its bytes in chunks of at most 256 KiB.
// A stored artifact never changes, so the file is read as it is.
class PullReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullReactor(int fd, v1::ArtifactInfo info) : fd_(fd), size_(info.size_bytes()) {
    v1::ArtifactData first;
    *first.mutable_info() = std::move(info);
    Write(first);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the puller went away"));
      return;
    }
    if (sent_ >= size_) {
      Finish(grpc::Status::OK);
      return;
    }
    std::string buffer(static_cast<size_t>(std::min<int64_t>(kMaxArtifactChunkBytes, size_ - sent_)), '\0');
    size_t got = 0;
    while (got < buffer.size()) {
      ssize_t n = ::pread(fd_, buffer.data() + got, buffer.size() - got, sent_ + static_cast<int64_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Finish(ToGrpcStatus(absl::DataLossError(absl::StrCat("the stored artifact ends at ", sent_ + got,
                                                             " of its ", size_, " bytes"))));
        return;
      }
      got += static_cast<size_t>(n);
    }
    sent_ += static_cast<int64_t>(got);
    v1::ArtifactData data;
    data.set_data(std::move(buffer));
    Write(data);
  }

  void OnDone() override {
    ::close(fd_);
    delete this;
  }

 private:
  void Write(const v1::ArtifactData& message) {
    if (auto s = SerializeResponse(message, &current_); !s.ok()) {
      Finish(ToGrpcStatus(s));
      return;
    }
    StartWrite(&current_);
  }

  const int fd_;
  const int64_t size_;
  int64_t sent_ = 0;
  grpc::ByteBuffer current_;
};

}  // namespace

JobServiceImpl::JobServiceImpl(JobManager* manager, JobStore* store, EventHub* hub, PreflightGate* preflight,
                               ArtifactStore* artifacts, JobServiceOptions options)
    : manager_(manager), store_(store), hub_(hub), preflight_(preflight), artifacts_(artifacts),
      disabled_(options.authorizer == nullptr ? Authorizer::Disabled() : nullptr),
      authorizer_(options.authorizer != nullptr ? options.authorizer : disabled_.get()),
      own_actions_(options.actions == nullptr
                       ? std::make_unique<JobActions>(manager, preflight, nullptr, SystemClock())
                       : nullptr),
      actions_(options.actions != nullptr ? options.actions : own_actions_.get()),
      watchers_(options.max_watchers_per_owner),
      webhook_status_(std::move(options.webhook_status)) {
  hub_->AttachStore(store_);  // WatchJob's events come from its watch cache
}

JobServiceImpl::~JobServiceImpl() { hub_->DetachStore(); }

absl::StatusOr<v1::Job> JobServiceImpl::VisibleJob(const Caller& caller, const std::string& id) {
  return actions_->VisibleJob(caller, id);
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  auto authenticated = authorizer_->Authenticate(*ctx);
  if (!authenticated.ok()) return Done(ctx, authenticated.status());
  const Caller caller = std::move(*authenticated);
  v1::SubmitJobRequest request;
  if (auto s = ParseRequest(*in, &request); !s.ok()) {
    actions_->RecordRefusal(caller, Via::kGrpc, "submit", "", s);
    return Done(ctx, s);
  }
  auto* reactor = new PreflightSubmitReactor();
  // `out` lives until the call is done, which is after Finish; `done` runs once, at
  // once or from the preflight gate's thread.
  actions_->Submit(caller, Via::kGrpc, std::move(*request.mutable_spec()), reactor->cancelled(),
                   [reactor, out](absl::StatusOr<v1::Job> job) {
                     absl::Status status = job.status();
                     if (job.ok()) status = SerializeResponse(*job, out);
                     reactor->Finish(ToGrpcStatus(status));
                   });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return Serve<v1::GetJobRequest, v1::Job>(
      ctx, *authorizer_, in, out, [this](const Caller& caller, const v1::GetJobRequest& request, v1::Job* response) {
        if (auto s = request_validation::Check(request); !s.ok()) return s;
        auto job = VisibleJob(caller, request.id());
        if (!job.ok()) return job.status();
        *response = std::move(*job);
        for (auto& row : actions_->StoppedBy(request.id())) *response->add_stopped_by() = std::move(row);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return Serve<v1::ListJobsRequest, v1::ListJobsResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::ListJobsRequest& request, v1::ListJobsResponse* response) {
        if (auto s = request_validation::Check(request); !s.ok()) return s;
        std::vector<v1::Job::State> states;
        for (int s : request.states()) states.push_back(static_cast<v1::Job::State>(s));
        // A submitter lists only its own jobs; the filter comes before the limit.
        const std::string owner = caller.role == Role::kSubmitter ? caller.owner : "";
        for (auto& job : manager_->List(states, request.limit(), owner, request.without_sweep_children())) {
          *response->add_jobs() = std::move(job);
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return Serve<v1::CancelJobRequest, v1::Job>(
      ctx, *authorizer_, in, out, [this](const Caller& caller, const v1::CancelJobRequest& request, v1::Job* response) {
        auto job = actions_->Cancel(caller, Via::kGrpc, request);
        if (job.ok()) *response = std::move(*job);
        return job.status();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ResizeJob(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return Serve<v1::ResizeJobRequest, v1::ResizeJobResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::ResizeJobRequest& request, v1::ResizeJobResponse* response) {
        auto job = actions_->Resize(caller, Via::kGrpc, request);
        if (job.ok()) *response->mutable_job() = std::move(*job);
        return job.status();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListWorkers(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return Serve<v1::ListWorkersRequest, v1::ListWorkersResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::ListWorkersRequest&, v1::ListWorkersResponse* response) {
        if (!Authorizer::CanSeeFleet(caller)) return Denied(caller, "list workers", "any role");
        for (auto& w : manager_->Workers()) *response->add_workers() = std::move(w);
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::WatchJob(grpc::CallbackServerContext* ctx,
                                                                     const grpc::ByteBuffer* in) {
  return Watch(ctx, in, WatchFraming::kOnePerMessage);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::WatchJobBatched(grpc::CallbackServerContext* ctx,
                                                                            const grpc::ByteBuffer* in) {
  return Watch(ctx, in, WatchFraming::kBatched);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::Watch(grpc::CallbackServerContext* ctx,
                                                                  const grpc::ByteBuffer* in, WatchFraming framing) {
  auto caller = authorizer_->Authenticate(*ctx);
  if (!caller.ok()) return new FailedWatch(caller.status());
  v1::WatchJobRequest request;
  if (auto s = ParseRequest(*in, &request); !s.ok()) return new FailedWatch(s);
  if (auto s = request_validation::Check(request); !s.ok()) return new FailedWatch(s);
  if (auto job = VisibleJob(*caller, request.id()); !job.ok()) return new FailedWatch(job.status());
  // Per identity: with authorization off there is none (every caller is "local"), and
  // one cap for the whole controller would refuse a dashboard's 65th watcher.
  std::unique_ptr<WatcherCap::Lease> lease;
  if (authorizer_->enabled()) {
    auto acquired = watchers_.Acquire(caller->owner);
    if (!acquired.ok()) return new FailedWatch(acquired.status());
    lease = std::move(*acquired);
  }
  return StartWatch(store_, hub_, request.id(), request.from_seq(), framing, std::move(lease));
}

grpc::ServerUnaryReactor* JobServiceImpl::ListArtifacts(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return Serve<v1::ListArtifactsRequest, v1::ListArtifactsResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::ListArtifactsRequest& request, v1::ListArtifactsResponse* response) {
        TY_RETURN_IF_ERROR(request_validation::CheckJobId("ListArtifactsRequest.job_id", request.job_id()));
        TY_RETURN_IF_ERROR(VisibleJob(caller, request.job_id()).status());
        TY_ASSIGN_OR_RETURN(auto artifacts, artifacts_->List(request.job_id()));
        for (auto& a : artifacts) *response->add_artifacts() = std::move(a);
        return absl::OkStatus();
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* JobServiceImpl::PullArtifact(grpc::CallbackServerContext* ctx,
                                                                         const grpc::ByteBuffer* in) {
  auto caller = authorizer_->Authenticate(*ctx);
  if (!caller.ok()) return new FailedWatch(caller.status());
  v1::PullArtifactRequest request;
  if (auto s = ParseRequest(*in, &request); !s.ok()) return new FailedWatch(s);
  if (auto s = request_validation::CheckJobId("PullArtifactRequest.job_id", request.job_id()); !s.ok()) {
    return new FailedWatch(s);
  }
  if (std::string p = ArtifactStore::NameProblem(request.name()); !p.empty()) {
    return new FailedWatch(absl::InvalidArgumentError(absl::StrCat("PullArtifactRequest.name: ", p)));
  }
  if (auto job = VisibleJob(*caller, request.job_id()); !job.ok()) return new FailedWatch(job.status());
  auto info = artifacts_->Find(request.job_id(), request.name());
  if (!info.ok()) return new FailedWatch(info.status());
  const std::string path = artifacts_->PathOf(request.job_id(), request.name());
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // The controller's path goes to its log, not to the client.
    spdlog::error("artifact {}/{}: {} cannot be read: {}", request.job_id(), request.name(), path, std::strerror(errno));
    return new FailedWatch(absl::DataLossError(
        absl::StrCat("artifact ", request.name(), " is indexed but its file cannot be read at the controller")));
  }
  return new PullReactor(fd, std::move(*info));
}

}  // namespace trainyard
