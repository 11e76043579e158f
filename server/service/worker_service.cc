#include "server/service/worker_service.h"

#include "server/service/peer_identity.h"
#include "server/policy/request_validation.h"
#include "server/service/wire_codec.h"

#include <deque>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/spec/spec_error.h"
#include "common/base/status_macros.h"
#include "server/state/worker_channel.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

class ConnectReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `caller`: the name in the worker's certificate ("" when none is required), or why
  // the call is refused before anything is read.
  ConnectReactor(JobManager* manager, int64_t conn, absl::StatusOr<std::string> caller)
      : manager_(manager), conn_(conn), channel_(std::make_shared<Channel>()) {
    channel_->reactor = this;
    if (!caller.ok()) {
      absl::MutexLock lock(&mu_);
      FinishLocked(ToGrpcStatus(caller.status()));
      return;
    }
    certified_ = std::move(*caller);
    StartRead(&in_bytes_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (registered_) manager_->StreamClosed(conn_);
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      if (!writing_) FinishLocked(grpc::Status::OK);
      return;
    }
    absl::Status status = ParseRequest(in_bytes_, &in_);
    switch (status.ok() ? in_.msg_case() : v1::WorkerMessage::MSG_NOT_SET) {
      case v1::WorkerMessage::kRegister:
        status = request_validation::Check(in_.register_());
        if (status.ok() && !certified_.empty()) {
          status = CheckClaimedWorkerName("Register.name", in_.register_().name(), certified_);
        }
        if (status.ok()) status = manager_->RegisterWorker(conn_, in_.register_(), channel_);
        registered_ = registered_ || status.ok();  // a refused second Register still ends a live stream
        break;
      case v1::WorkerMessage::kHeartbeat:
        manager_->Heartbeat(conn_, in_.heartbeat());
        break;
      case v1::WorkerMessage::kEvents:
        status = request_validation::Check(in_.events());
        if (status.ok()) status = manager_->IngestEvents(conn_, in_.events());
        if (status.ok()) {
          v1::ControllerMessage ack;
          ack.mutable_event_ack()->set_batch_id(in_.events().batch_id());
          Enqueue(std::move(ack));
        }
        break;
      default:
        if (status.ok()) status = absl::InvalidArgumentError("empty WorkerMessage");
    }
    if (!status.ok()) {
      spdlog::warn("worker stream {}: {}", conn_, std::string(status.message()));
      if (registered_) manager_->StreamClosed(conn_);
      registered_ = false;
      absl::MutexLock lock(&mu_);
      FinishLocked(ToGrpcStatus(status));
      return;
    }
    StartRead(&in_bytes_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    out_.pop_front();
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to worker failed"));
      return;
    }
    WriteNextLocked();
    if (!writing_ && reads_done_) FinishLocked(grpc::Status::OK);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&channel_->mu);
      channel_->reactor = nullptr;
    }
    delete this;
  }

 private:
  // The manager's handle on this stream; safe to use after the stream ended.
  struct Channel : WorkerChannel {
    absl::Mutex mu;
    ConnectReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    void Send(v1::ControllerMessage message) override {
      absl::MutexLock lock(&mu);
      if (reactor != nullptr) reactor->Enqueue(std::move(message));
    }
    void Close(const std::string& reason) override {
      absl::MutexLock lock(&mu);
      if (reactor == nullptr) return;
      absl::MutexLock inner(&reactor->mu_);
      reactor->FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, reason));
    }
  };

  void Enqueue(const v1::ControllerMessage& message) {
    grpc::ByteBuffer bytes;
    if (auto s = SerializeResponse(message, &bytes); !s.ok()) {
      spdlog::error("worker stream {}: {}", conn_, std::string(s.message()));
      return;
    }
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    out_.push_back(std::move(bytes));
    WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || out_.empty() || finished_) return;
    writing_ = true;
    StartWrite(&out_.front());
  }

  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  JobManager* const manager_;
  const int64_t conn_;
  std::shared_ptr<Channel> channel_;
  std::string certified_;  // set before the first read
  grpc::ByteBuffer in_bytes_;  // touched only by the read chain
  v1::WorkerMessage in_;  // likewise
  bool registered_ = false;  // likewise
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// The caller of an artifact call, as far as this service can tell (see the header): a
// connected worker that held the header's rank in the header's attempt (any rank of
// the attempt for a worker's own file, rank -1), the current attempt or an earlier one
// (JobManager::AttemptWorkers). An attempt whose placement this controller does not
// know is refused. `certified`: the caller's certificate name, or "" when certificates
// are not required.
absl::Status CheckUploader(JobManager* manager, const v1::ArtifactHeader& header,
                           const std::string& certified) {
  if (!certified.empty()) {
    if (absl::Status s = CheckClaimedWorkerName("ArtifactHeader.worker", header.worker(), certified);
        !s.ok()) {
      return s;
    }
  }
  if (header.worker().empty() || !manager->WorkerConnected(header.worker())) {
    return absl::PermissionDeniedError(absl::StrCat("ArtifactHeader.worker ", Quote(header.worker()),
                                                    " is not a connected worker"));
  }
  if (!manager->Get(header.job_id()).ok()) return absl::OkStatus();  // the store says NOT_FOUND
  std::optional<std::vector<std::string>> placed = manager->AttemptWorkers(header.job_id(), header.attempt());
  if (!placed) {
    return absl::PermissionDeniedError(absl::StrCat(
        "attempt ", header.attempt(), " of job ", Quote(header.job_id()),
        " has no placement this controller knows (never started, or before a restart after the job ended)"));
  }
  for (std::size_t r = 0; r < placed->size(); ++r) {
    if ((*placed)[r] == header.worker() && (header.rank() < 0 || static_cast<int>(r) == header.rank())) {
      return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "ArtifactHeader.worker ", Quote(header.worker()), " holds no rank ",
      header.rank() < 0 ? std::string("of") : absl::StrCat(header.rank(), " in"), " attempt ",
      header.attempt(), " of job ", Quote(header.job_id())));
}

// One UploadArtifact stream: the first chunk's header takes the upload, every chunk is
// appended as it arrives, and the stream ends with the status after the last one (or
// the first error, which ends the upload: the client re-Opens to resume).
class UploadReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  UploadReactor(JobManager* manager, ArtifactStore* store, grpc::ByteBuffer* response,
                absl::StatusOr<std::string> caller)
      : manager_(manager), store_(store), response_(response) {
    if (!caller.ok()) {
      Done(caller.status());
      return;
    }
    certified_ = std::move(*caller);
    StartRead(&in_bytes_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (upload_ == nullptr) {
        Done(absl::InvalidArgumentError("UploadArtifact: no chunk was sent"));
        return;
      }
      v1::ArtifactStatus status = upload_->Status();
      upload_.reset();
      Done(SerializeResponse(status, response_));
      return;
    }
    if (absl::Status s = Take(); !s.ok()) {
      upload_.reset();
      Done(s);
      return;
    }
    StartRead(&in_bytes_);
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Take() {
    TY_RETURN_IF_ERROR(ParseRequest(in_bytes_, &in_));
    if (upload_ == nullptr) {
      if (!in_.has_header()) return absl::InvalidArgumentError("ArtifactChunk.header: the first chunk must carry it");
      TY_RETURN_IF_ERROR(store_->CheckHeader(in_.header()));
      TY_RETURN_IF_ERROR(CheckUploader(manager_, in_.header(), certified_));
      TY_ASSIGN_OR_RETURN(upload_, store_->BeginUpload(in_.header()));
    } else if (in_.has_header() && !SameArtifactHeader(in_.header(), upload_->header())) {
      return absl::FailedPreconditionError("ArtifactChunk.header differs from the stream's first one");
    }
    return upload_->Append(in_.offset(), in_.data()).status();
  }

  void Done(const absl::Status& status) { Finish(ToGrpcStatus(status)); }

  JobManager* const manager_;
  ArtifactStore* const store_;
  grpc::ByteBuffer* const response_;
  std::string certified_;  // set before the first read
  grpc::ByteBuffer in_bytes_;  // touched only by the read chain
  v1::ArtifactChunk in_;
  std::unique_ptr<ArtifactUpload> upload_;
};

}  // namespace

absl::StatusOr<std::string> WorkerServiceImpl::CallerName(const grpc::CallbackServerContext* ctx) const {
  if (!require_worker_certificate_) return std::string();
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  absl::StatusOr<std::string> name =
      auth ? WorkerNameFromCertificate(PeerCertificateOf(*auth))
           : absl::UnauthenticatedError("WorkerService needs a worker certificate: the call has no TLS context");
  if (!name.ok()) spdlog::warn("WorkerService call from {} refused: {}", ctx->peer(), std::string(name.status().message()));
  return name;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::OpenArtifact(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  absl::StatusOr<std::string> caller = CallerName(ctx);
  v1::ArtifactHeader header;
  absl::Status status = caller.status();
  if (status.ok()) status = ParseRequest(*request, &header);
  if (status.ok()) status = artifacts_->CheckHeader(header);
  if (status.ok()) status = CheckUploader(manager_, header, *caller);
  absl::StatusOr<v1::ArtifactStatus> opened;
  if (status.ok()) {
    opened = artifacts_->OpenArtifact(header);
    status = opened.status();
  }
  if (status.ok()) status = SerializeResponse(*opened, response);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* WorkerServiceImpl::UploadArtifact(grpc::CallbackServerContext* ctx,
                                                                             grpc::ByteBuffer* response) {
  return new UploadReactor(manager_, artifacts_, response, CallerName(ctx));
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* WorkerServiceImpl::Connect(
    grpc::CallbackServerContext* ctx) {
  return new ConnectReactor(manager_, next_conn_++, CallerName(ctx));
}

}  // namespace trainyard
