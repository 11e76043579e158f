#include "client/job_client.h"

#include <type_traits>

#include "common/base/file_io.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/spec/spec_error.h"
#include "common/tls_files.h"

namespace trainyard {

namespace {
// A token file's first line may be at most this long (a token is a few dozen bytes).
constexpr std::size_t kMaxTokenBytes = 4096;
}  // namespace

std::unique_ptr<JobClient> JobClient::Connect(const std::string& address,
                                              std::chrono::milliseconds timeout,
                                              const Credentials& credentials) {
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials =
      credentials.tls_ca_pem.empty() ? grpc::InsecureChannelCredentials()
                                     : MakeChannelCredentials(credentials.tls_ca_pem);
  return std::make_unique<JobClient>(grpc::CreateChannel(address, channel_credentials), timeout,
                                     credentials.bearer_token);
}

JobClient::JobClient(std::shared_ptr<grpc::ChannelInterface> channel,
                     std::chrono::milliseconds timeout, std::string bearer_token)
    : stub_(v1::JobService::NewStub(std::move(channel))),
      timeout_(timeout),
      bearer_token_(std::move(bearer_token)) {}

absl::Status JobClient::CheckBearerToken(const std::string& token, const std::string& source) {
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": the token is empty"));
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the token is ", token.size(), " bytes, more than the ", kMaxTokenBytes, " allowed"));
  }
  for (std::size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the token has a space or a byte that is not printable ASCII at offset ", i,
          " (it is sent as an HTTP/2 header value)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobClient::ReadTokenFile(const std::string& path) {
  const std::string source = absl::StrCat("--token-file ", Quoted(path));
  // One line is read; a file far past a token's size is not a token file.
  absl::StatusOr<std::string> text = ReadFile(path, 1 << 20);
  if (!text.ok()) {
    return absl::Status(absl::IsInternal(text.status()) ? absl::StatusCode::kDataLoss : text.status().code(),
                        absl::StrCat(source, ": ", text.status().message()));
  }
  std::string line = text->substr(0, std::min(text->find('\n'), kMaxTokenBytes + 1));
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  if (absl::Status s = CheckBearerToken(line, source); !s.ok()) return s;
  return line;
}

void JobClient::Authorize(grpc::ClientContext* context) const {
  if (!bearer_token_.empty()) context->AddMetadata("authorization", "Bearer " + bearer_token_);
}

void JobClient::SetDeadline(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + timeout_);
  Authorize(context);
}

absl::StatusOr<v1::Job> JobClient::SubmitJob(const v1::JobSpec& spec,
                                             std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout.value_or(timeout_));
  Authorize(&context);
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::Job job;
  grpc::Status status = stub_->SubmitJob(&context, request, &job);
  if (!status.ok()) return FromGrpcStatus(status);
  return job;
}

absl::StatusOr<v1::Job> JobClient::GetJob(const std::string& id) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetJobRequest request;
  request.set_id(id);
  v1::Job job;
  grpc::Status status = stub_->GetJob(&context, request, &job);
  if (!status.ok()) return FromGrpcStatus(status);
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobClient::ListJobs(const std::vector<v1::Job::State>& states,
                                                         int limit) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListJobsRequest request;
  for (v1::Job::State state : states) request.add_states(state);
  request.set_limit(limit);
  v1::ListJobsResponse response;
  grpc::Status status = stub_->ListJobs(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::Job> JobClient::CancelJob(const std::string& id, const std::string& reason) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason(reason);
  v1::Job job;
  grpc::Status status = stub_->CancelJob(&context, request, &job);
  if (!status.ok()) return FromGrpcStatus(status);
  return job;
}

absl::StatusOr<v1::Job> JobClient::ResizeJob(const std::string& id, int dp) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ResizeJobRequest request;
  request.set_job_id(id);
  request.set_dp(dp);
  v1::ResizeJobResponse response;
  grpc::Status status = stub_->ResizeJob(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::move(*response.mutable_job());
}

absl::StatusOr<std::vector<v1::WorkerInfo>> JobClient::ListWorkers() {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListWorkersResponse response;
  grpc::Status status = stub_->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::WorkerInfo>(response.workers().begin(), response.workers().end());
}

absl::StatusOr<v1::GetWebhookStatusResponse> JobClient::GetWebhookStatus() {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::GetWebhookStatusResponse response;
  grpc::Status status = stub_->GetWebhookStatus(&context, v1::GetWebhookStatusRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::CheckpointRef> JobClient::CheckpointJob(const std::string& id, double timeout_s) {
  grpc::ClientContext context;
  const double waits_s = timeout_s > 0 ? timeout_s : kCheckpointDefaultTimeoutS;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(std::ceil(waits_s * 1000))) +
                       kCheckpointDeadlineMargin);
  Authorize(&context);
  v1::CheckpointJobRequest request;
  request.set_job_id(id);
  request.set_timeout_s(timeout_s);
  v1::CheckpointJobResponse response;
  grpc::Status status = stub_->CheckpointJob(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::move(*response.mutable_checkpoint());
}

absl::StatusOr<v1::WorkerInfo> JobClient::CordonWorker(const std::string& name, bool cordon,
                                                       const std::string& reason) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::CordonWorkerRequest request;
  request.set_name(name);
  request.set_cordon(cordon);
  request.set_reason(reason);
  v1::WorkerInfo worker;
  grpc::Status status = stub_->CordonWorker(&context, request, &worker);
  if (!status.ok()) return FromGrpcStatus(status);
  return worker;
}

absl::StatusOr<v1::DrainWorkerResponse> JobClient::DrainWorker(const std::string& name,
                                                               const std::string& reason) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::DrainWorkerRequest request;
  request.set_name(name);
  request.set_reason(reason);
  v1::DrainWorkerResponse response;
  grpc::Status status = stub_->DrainWorker(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::vector<v1::AuditRecord>> JobClient::ListAudit(const std::string& job_id,
                                                                  const google::protobuf::Timestamp* since,
                                                                  int limit) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListAuditRequest request;
  request.set_job_id(job_id);
  if (since != nullptr) *request.mutable_since() = *since;
  request.set_limit(limit);
  v1::ListAuditResponse response;
  grpc::Status status = stub_->ListAudit(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::AuditRecord>(response.records().begin(), response.records().end());
}

absl::StatusOr<std::vector<v1::ArtifactInfo>> JobClient::ListArtifacts(
    const std::string& job_id) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListArtifactsRequest request;
  request.set_job_id(job_id);
  v1::ListArtifactsResponse response;
  grpc::Status status = stub_->ListArtifacts(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::ArtifactInfo>(response.artifacts().begin(), response.artifacts().end());
}

absl::Status JobClient::PullArtifact(const std::string& job_id, const std::string& name,
                                     const ArtifactDataCallback& on_data) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kPullTimeout);
  Authorize(&context);
  v1::PullArtifactRequest request;
  request.set_job_id(job_id);
  request.set_name(name);
  std::unique_ptr<grpc::ClientReaderInterface<v1::ArtifactData>> reader =
      stub_->PullArtifact(&context, request);
  v1::ArtifactData data;
  absl::Status stopped;
  while (reader->Read(&data)) {
    stopped = on_data(data);
    if (!stopped.ok()) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (!stopped.ok()) return stopped;
  return FromGrpcStatus(status);
}

absl::Status JobClient::Watch(const std::string& id, int64_t from_seq,
                              const EventCallback& on_event) {
  if (!one_per_message_.load()) {
    bool unimplemented = false;
    absl::Status s = WatchOnce<v1::WatchJobResponse>(id, from_seq, on_event, &unimplemented);
    if (!unimplemented) return s;
    // A controller older than WatchJobBatched: WatchJob, from now on.
    one_per_message_.store(true);
  }
  return WatchOnce<v1::Event>(id, from_seq, on_event, nullptr);
}

template <typename Message>
absl::Status JobClient::WatchOnce(const std::string& id, int64_t from_seq, const EventCallback& on_event,
                                  bool* unimplemented) {
  grpc::ClientContext context;  // no deadline: the stream lives as long as the job
  Authorize(&context);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::OkStatus();
    watches_.insert(&context);
  }
  v1::WatchJobRequest request;
  request.set_id(id);
  request.set_from_seq(from_seq);
  std::unique_ptr<grpc::ClientReaderInterface<Message>> reader;
  if constexpr (std::is_same_v<Message, v1::WatchJobResponse>) {
    reader = stub_->WatchJobBatched(&context, request);
  } else {
    reader = stub_->WatchJob(&context, request);
  }
  bool stopped = false;
  bool read_any = false;
  Message message;
  while (!stopped && reader->Read(&message)) {
    read_any = true;
    if constexpr (std::is_same_v<Message, v1::WatchJobResponse>) {
      for (const v1::Event& event : message.events()) {
        if (!on_event(event)) {
          stopped = true;
          break;
        }
      }
    } else {
      stopped = !on_event(message);
    }
  }
  if (stopped) context.TryCancel();
  grpc::Status status = reader->Finish();
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    watches_.erase(&context);
    cancelled = cancelled_;
  }
  if ((stopped || cancelled) && status.error_code() == grpc::StatusCode::CANCELLED) {
    return absl::OkStatus();
  }
  if (unimplemented != nullptr) *unimplemented = !read_any && status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
  return FromGrpcStatus(status);
}

void JobClient::CancelWatches() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : watches_) context->TryCancel();
}

}  // namespace trainyard
