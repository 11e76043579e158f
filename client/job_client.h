#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard {

// Client library for the controller's JobService. Every unary call carries a deadline
// of `timeout`; Watch streams have none (a job may run for days) but can be cancelled.
// Errors come back as absl::Status with the gRPC code preserved. With a bearer token every
// call carries `authorization: Bearer TOKEN` metadata (added to each call's context:
// gRPC refuses call credentials on an insecure channel, and loopback may be plaintext).
//
// Thread-safe: calls may run concurrently, and CancelWatches() may be called from any
// thread to end the Watch calls in flight.
class JobClient {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{10'000};

  struct Credentials {
    std::string tls_ca_pem;    // non-empty: TLS, the controller verified against this CA
    std::string bearer_token;  // non-empty: sent with every call (see CheckBearerToken)
  };

  // Connects (lazily) to `address` ("host:port"), plaintext unless `credentials` has a CA.
  static std::unique_ptr<JobClient> Connect(const std::string& address,
                                            std::chrono::milliseconds timeout = kDefaultTimeout,
                                            const Credentials& credentials = {});

  JobClient(std::shared_ptr<grpc::ChannelInterface> channel, std::chrono::milliseconds timeout,
            std::string bearer_token = "");

  // Why `token` cannot be sent (empty, or a byte outside printable ASCII, or a space: it
  // travels as an HTTP/2 header value); `source` names where it came from. The message
  // never holds the token.
  static absl::Status CheckBearerToken(const std::string& token, const std::string& source);
  // The token in the first line of `path` with trailing whitespace removed, checked.
  static absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

  // `timeout` overrides the client's deadline for this call (a submit with
  // compile.preflight=true waits for the controller's preflight run).
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec,
                                    std::optional<std::chrono::milliseconds> timeout = {});
  absl::StatusOr<v1::Job> GetJob(const std::string& id);
  // `states` empty: all states. `limit` 0: the server's default.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const std::vector<v1::Job::State>& states,
                                                int limit = 0);
  absl::StatusOr<v1::Job> CancelJob(const std::string& id, const std::string& reason);
  // Restarts the job from its last checkpoint at data-parallel degree `dp`; returns
  // the job after the request (RESTARTING, or unchanged when already at `dp`).
  absl::StatusOr<v1::Job> ResizeJob(const std::string& id, int dp);
  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();

  // Asks the job's ranks to save a checkpoint at their next step boundary and waits for
  // it: the controller gives up after `timeout_s` (0: its default, 300 s; it takes at
  // most 3600), and this call's deadline is that plus kCheckpointDeadlineMargin, so the
  // controller's own DEADLINE_EXCEEDED (which says how far the ranks got) arrives
  // rather than the client's.
  static constexpr double kCheckpointDefaultTimeoutS = 300;
  static constexpr double kCheckpointMaxTimeoutS = 3600;
  static constexpr std::chrono::seconds kCheckpointDeadlineMargin{30};
  absl::StatusOr<v1::CheckpointRef> CheckpointJob(const std::string& id, double timeout_s);
  // Admin only. `cordon` false uncordons (and clears the reason).
  absl::StatusOr<v1::WorkerInfo> CordonWorker(const std::string& name, bool cordon, const std::string& reason);
  // Admin only: cordons the worker and moves every job with a rank there.
  absl::StatusOr<v1::DrainWorkerResponse> DrainWorker(const std::string& name, const std::string& reason);

  // Admin only: each --webhooks endpoint's queue, counts and last error
  // (configured = false when the controller has no --webhooks).
  absl::StatusOr<v1::GetWebhookStatusResponse> GetWebhookStatus();
  // The audit log, newest first (admin only); `since` unset: from the start.
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAudit(const std::string& job_id,
                                                         const google::protobuf::Timestamp* since, int limit);

  // The job's complete artifacts, oldest first.
  absl::StatusOr<std::vector<v1::ArtifactInfo>> ListArtifacts(const std::string& job_id);

  // Called for each message of a pull in order (the first carries info); a non-OK
  // return cancels the pull and becomes its result.
  using ArtifactDataCallback = std::function<absl::Status(const v1::ArtifactData&)>;
  // Streams one artifact. The call's deadline is kPullTimeout (a large file outlasts
  // the unary deadline); the stream's own error (NOT_FOUND, UNAVAILABLE...) is returned
  // as it is. Checking the bytes is the caller's (see client/artifact_pull.h).
  static constexpr std::chrono::minutes kPullTimeout{30};
  absl::Status PullArtifact(const std::string& job_id, const std::string& name,
                            const ArtifactDataCallback& on_data);

  // Called for each event in seq order; return false to stop watching.
  using EventCallback = std::function<bool(const v1::Event&)>;

  // Streams the job's events from `from_seq` (0 or 1: from the start) until the server
  // ends the stream (after the terminal job_state event), `on_event` returns false, or
  // CancelWatches() is called. The last two return OK; a broken stream returns its
  // gRPC error (UNAVAILABLE, NOT_FOUND, ...). Uses WatchJobBatched (several events per
  // stream message); against a controller without it (UNIMPLEMENTED before any event)
  // falls back to WatchJob, and keeps to WatchJob for this client's later watches.
  absl::Status Watch(const std::string& id, int64_t from_seq, const EventCallback& on_event);

  // Ends every Watch in flight and every later one, as if its callback returned false.
  void CancelWatches();

 private:
  void SetDeadline(grpc::ClientContext* context) const;  // and Authorize
  void Authorize(grpc::ClientContext* context) const;
  // One watch stream: WatchJobBatched when Message is v1::WatchJobResponse, WatchJob
  // when it is v1::Event. `*unimplemented` (may be null): the server has no such RPC.
  template <typename Message>
  absl::Status WatchOnce(const std::string& id, int64_t from_seq, const EventCallback& on_event,
                         bool* unimplemented);

  std::unique_ptr<v1::JobService::StubInterface> stub_;
  const std::chrono::milliseconds timeout_;
  const std::string bearer_token_;

  std::atomic<bool> one_per_message_{false};  // the controller has no WatchJobBatched
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> watches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
