// Tokens and roles on the JobService, over real gRPC on loopback: a JobServiceImpl with
// an Authorizer reading a token file, a real SqliteJobStore and JobManager with one fake
// worker, called through a stub built from the protos with `authorization: Bearer`
// metadata. No token -> UNAUTHENTICATED on every method; a viewer reads everything and
// changes nothing; a submitter sees and changes only its own jobs (another owner's job
// is NOT_FOUND with the very message of a missing one); an admin does everything; the
// owner is stored with the job; concurrent watch streams per owner are capped.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/service/job_service.h"
#include "tests/fakes/auth_fixture.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard::testing {
namespace {

constexpr int kWatchCap = 3;

class JobServiceAuthTest : public AuthFixture {
 protected:
  void SetUp() override {
    AuthFixture::SetUp();
    if (HasFatalFailure()) return;
    JobServiceOptions options;
    options.authorizer = authz_.get();
    options.max_watchers_per_owner = kWatchCap;
    // No preflight gate: these jobs do not ask for one.
    service_ = std::make_unique<JobServiceImpl>(manager_.get(), store_.get(), &hub_, nullptr, artifacts_.get(),
                                                options);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::JobService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    for (auto& w : watches_) w.ctx->TryCancel();
    for (auto& w : watches_) w.Finish().IgnoreError();
    watches_.clear();
    if (server_) server_->Shutdown();
  }

  // A context carrying `token` (none when empty).
  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.mutable_job()->set_name("t");
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_parallelism()->set_dp(1);
    spec.mutable_parallelism()->set_tp(1);
    return spec;
  }

  grpc::Status Submit(const std::string& token, v1::Job* job) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    return stub_->SubmitJob(Ctx(token).get(), req, job);
  }
  std::string SubmitOk(const std::string& token) {
    v1::Job job;
    const grpc::Status s = Submit(token, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job.id();
  }
  grpc::Status Get(const std::string& token, const std::string& id, v1::Job* job = nullptr) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job scratch;
    return stub_->GetJob(Ctx(token).get(), req, job ? job : &scratch);
  }
  std::vector<std::string> ListIds(const std::string& token) {
    v1::ListJobsResponse resp;
    const grpc::Status s = stub_->ListJobs(Ctx(token).get(), v1::ListJobsRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> ids;
    for (const auto& j : resp.jobs()) ids.push_back(j.id());
    return ids;
  }
  grpc::Status Cancel(const std::string& token, const std::string& id) {
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::Job job;
    return stub_->CancelJob(Ctx(token).get(), req, &job);
  }
  grpc::Status Resize(const std::string& token, const std::string& id) {
    v1::ResizeJobRequest req;
    req.set_job_id(id);
    req.set_dp(1);
    v1::ResizeJobResponse resp;
    return stub_->ResizeJob(Ctx(token).get(), req, &resp);
  }
  grpc::Status ListArtifacts(const std::string& token, const std::string& id) {
    v1::ListArtifactsRequest req;
    req.set_job_id(id);
    v1::ListArtifactsResponse resp;
    return stub_->ListArtifacts(Ctx(token).get(), req, &resp);
  }
  grpc::Status Pull(const std::string& token, const std::string& id) {
    v1::PullArtifactRequest req;
    req.set_job_id(id);
    req.set_name("trace.json");
    auto ctx = Ctx(token);
    auto reader = stub_->PullArtifact(ctx.get(), req);
    v1::ArtifactData data;
    while (reader->Read(&data)) {
    }
    return reader->Finish();
  }

  struct Watch {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReader<v1::Event>> reader;
    std::unique_ptr<grpc::ClientReader<v1::WatchJobResponse>> batched;
    grpc::Status Finish() { return reader ? reader->Finish() : batched->Finish(); }
  };
  // Opens a watch of job `id` (WatchJobBatched when `batched`). OK once its first
  // message arrived (the stream is then open and kept in watches_), else the status it
  // ended with.
  grpc::Status OpenWatch(const std::string& token, const std::string& id, bool batched = false) {
    Watch w;
    w.ctx = Ctx(token);
    v1::WatchJobRequest req;
    req.set_id(id);
    if (batched) {
      w.batched = stub_->WatchJobBatched(w.ctx.get(), req);
      v1::WatchJobResponse first;
      if (!w.batched->Read(&first)) return w.batched->Finish();
    } else {
      w.reader = stub_->WatchJob(w.ctx.get(), req);
      v1::Event event;
      if (!w.reader->Read(&event)) return w.reader->Finish();
    }
    watches_.push_back(std::move(w));
    return grpc::Status::OK;
  }
  grpc::Status OpenBatchedWatch(const std::string& token, const std::string& id) { return OpenWatch(token, id, true); }

  v1::Job::State StateOf(const std::string& id) {
    v1::Job job;
    EXPECT_TRUE(Get(kAdmin, id, &job).ok());
    return job.state();
  }

  std::unique_ptr<JobServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::vector<Watch> watches_;
};

void ExpectCode(const grpc::Status& s, grpc::StatusCode code, const std::string& message) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_EQ(s.error_message(), message);
}

TEST_F(JobServiceAuthTest, EveryMethodWithoutAKnownTokenIsUnauthenticated) {
  const std::string id = SubmitOk(kAlice);
  for (const std::string& token : {std::string(), std::string("alice-token-1112")}) {
    const std::string message = token.empty() ? "no bearer token" : "unknown token";
    v1::Job job;
    ExpectCode(Submit(token, &job), grpc::StatusCode::UNAUTHENTICATED, message);
    ExpectCode(Get(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
    v1::ListJobsResponse list;
    ExpectCode(stub_->ListJobs(Ctx(token).get(), v1::ListJobsRequest(), &list), grpc::StatusCode::UNAUTHENTICATED,
               message);
    EXPECT_EQ(list.jobs_size(), 0);
    ExpectCode(Cancel(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
    ExpectCode(Resize(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
    ExpectCode(OpenWatch(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
    ExpectCode(OpenBatchedWatch(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
    v1::ListWorkersResponse workers;
    ExpectCode(stub_->ListWorkers(Ctx(token).get(), v1::ListWorkersRequest(), &workers),
               grpc::StatusCode::UNAUTHENTICATED, message);
    EXPECT_EQ(workers.workers_size(), 0);
    ExpectCode(ListArtifacts(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
    ExpectCode(Pull(token, id), grpc::StatusCode::UNAUTHENTICATED, message);
  }
  // Another scheme is refused without echoing what it carried.
  auto ctx = Ctx("");
  ctx->AddMetadata("authorization", std::string("Basic ") + kAdmin);
  v1::Job job;
  v1::GetJobRequest req;
  req.set_id(id);
  const grpc::Status basic = stub_->GetJob(ctx.get(), req, &job);
  ExpectCode(basic, grpc::StatusCode::UNAUTHENTICATED, "the authorization metadata is not a bearer token");
  EXPECT_NE(StateOf(id), v1::Job::CANCELLED);
}

TEST_F(JobServiceAuthTest, AViewerReadsEverythingAndChangesNothing) {
  const std::string id = SubmitOk(kAlice);
  v1::Job job;
  ASSERT_TRUE(Get(kViewer, id, &job).ok());
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(ListIds(kViewer), std::vector<std::string>{id});
  EXPECT_TRUE(OpenWatch(kViewer, id).ok());
  EXPECT_TRUE(ListArtifacts(kViewer, id).ok());
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(stub_->ListWorkers(Ctx(kViewer).get(), v1::ListWorkersRequest(), &workers).ok());
  EXPECT_EQ(workers.workers_size(), 1);

  v1::Job submitted;
  ExpectCode(Submit(kViewer, &submitted), grpc::StatusCode::PERMISSION_DENIED,
             "dashboard has the viewer role, which cannot submit jobs; that needs submitter or admin");
  ExpectCode(Cancel(kViewer, id), grpc::StatusCode::PERMISSION_DENIED,
             "dashboard has the viewer role, which cannot cancel jobs; that needs submitter or admin");
  ExpectCode(Resize(kViewer, id), grpc::StatusCode::PERMISSION_DENIED,
             "dashboard has the viewer role, which cannot resize jobs; that needs submitter or admin");
  EXPECT_NE(StateOf(id), v1::Job::CANCELLED);
  EXPECT_EQ(ListIds(kAdmin).size(), 1u);  // the viewer's submit created nothing
}

TEST_F(JobServiceAuthTest, ASubmitterSeesAndCancelsOnlyItsOwnJobs) {
  const std::string mine = SubmitOk(kAlice);
  const std::string theirs = SubmitOk(kBob);
  EXPECT_EQ(ListIds(kAlice), std::vector<std::string>{mine});
  EXPECT_EQ(ListIds(kBob), std::vector<std::string>{theirs});

  // Bob's job looks to alice exactly like a job that does not exist.
  const std::string missing = "job-999";
  ExpectCode(Get(kAlice, missing), grpc::StatusCode::NOT_FOUND, "job job-999 not found");
  const std::string not_found = "job " + theirs + " not found";
  ExpectCode(Get(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  ExpectCode(OpenWatch(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  ExpectCode(OpenBatchedWatch(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  ExpectCode(Cancel(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  ExpectCode(Resize(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  ExpectCode(ListArtifacts(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  ExpectCode(Pull(kAlice, theirs), grpc::StatusCode::NOT_FOUND, not_found);
  EXPECT_NE(StateOf(theirs), v1::Job::CANCELLED);

  // Her own job: all of it.
  v1::Job job;
  ASSERT_TRUE(Get(kAlice, mine, &job).ok());
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_TRUE(OpenWatch(kAlice, mine).ok());
  EXPECT_TRUE(OpenBatchedWatch(kAlice, mine).ok());
  EXPECT_TRUE(ListArtifacts(kAlice, mine).ok());
  ASSERT_TRUE(Cancel(kAlice, mine).ok());
  EXPECT_EQ(StateOf(mine), v1::Job::CANCELLED);
}

TEST_F(JobServiceAuthTest, AnAdminSeesAndCancelsEveryJobAndOwnersAreStored) {
  const std::string a = SubmitOk(kAlice);
  const std::string b = SubmitOk(kBob);
  const std::string r = SubmitOk(kAdmin);
  EXPECT_EQ(ListIds(kAdmin), (std::vector<std::string>{r, b, a}));
  EXPECT_TRUE(OpenWatch(kAdmin, a).ok());
  ASSERT_TRUE(Cancel(kAdmin, b).ok());
  EXPECT_EQ(StateOf(b), v1::Job::CANCELLED);

  auto stored = store_->LoadJobs();
  ASSERT_TRUE(stored.ok()) << stored.status();
  std::map<std::string, std::string> owners;
  for (const auto& job : *stored) owners[job.id()] = job.owner();
  EXPECT_EQ(owners, (std::map<std::string, std::string>{{a, "alice"}, {b, "bob"}, {r, "root"}}));
}

TEST_F(JobServiceAuthTest, WatchStreamsPerOwnerAreCappedAndReleasedWhenAStreamEnds) {
  const std::string id = SubmitOk(kAlice);
  // Both watch calls count against the one cap.
  for (int i = 0; i < kWatchCap - 1; ++i) ASSERT_TRUE(OpenWatch(kAlice, id).ok()) << i;
  ASSERT_TRUE(OpenBatchedWatch(kAlice, id).ok());
  const std::string full =
      "owner alice already has 3 watch streams open (WatchJob and WatchJobBatched together), the most one "
      "identity may; end one first";
  ExpectCode(OpenWatch(kAlice, id), grpc::StatusCode::RESOURCE_EXHAUSTED, full);
  ExpectCode(OpenBatchedWatch(kAlice, id), grpc::StatusCode::RESOURCE_EXHAUSTED, full);
  // Other identities have their own count.
  EXPECT_TRUE(OpenWatch(kViewer, id).ok());
  EXPECT_TRUE(OpenWatch(kAdmin, id).ok());

  // Alice ends one stream; its slot comes back once the server has finished it (OnDone
  // runs after the client saw the end, so wait for that, bounded).
  watches_.front().ctx->TryCancel();
  EXPECT_EQ(watches_.front().Finish().error_code(), grpc::StatusCode::CANCELLED);
  watches_.erase(watches_.begin());
  grpc::Status reopened;
  for (int i = 0; i < 400; ++i) {
    reopened = OpenWatch(kAlice, id);
    if (reopened.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(reopened.ok()) << reopened.error_message();
  EXPECT_EQ(OpenWatch(kAlice, id).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace trainyard::testing

namespace trainyard::testing {
namespace {

// Sharing the fleet: CheckpointJob follows the job's owner like CancelJob; cordon and
// drain are the admin's; opting out of preemption above priority 0 is the admin's; the
// requests are checked before anything happens.
class SharingAuthTest : public JobServiceAuthTest {
 protected:
  grpc::Status Checkpoint(const std::string& token, const std::string& id, double timeout_s = 1) {
    v1::CheckpointJobRequest req;
    req.set_job_id(id);
    req.set_timeout_s(timeout_s);
    v1::CheckpointJobResponse resp;
    return stub_->CheckpointJob(Ctx(token).get(), req, &resp);
  }
  grpc::Status Cordon(const std::string& token, const std::string& name, bool cordon, const std::string& reason = "") {
    v1::CordonWorkerRequest req;
    req.set_name(name);
    req.set_cordon(cordon);
    req.set_reason(reason);
    v1::WorkerInfo info;
    return stub_->CordonWorker(Ctx(token).get(), req, &info);
  }
  grpc::Status Drain(const std::string& token, const std::string& name) {
    v1::DrainWorkerRequest req;
    req.set_name(name);
    v1::DrainWorkerResponse resp;
    return stub_->DrainWorker(Ctx(token).get(), req, &resp);
  }
  grpc::Status SubmitPinned(const std::string& token, int priority) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    req.mutable_spec()->mutable_job()->set_priority(priority);
    req.mutable_spec()->mutable_job()->set_preemptible(false);
    v1::Job job;
    return stub_->SubmitJob(Ctx(token).get(), req, &job);
  }
};

TEST_F(SharingAuthTest, CheckpointFollowsTheOwnerAndTheFleetIsTheAdmins) {
  const std::string mine = SubmitOk(kAlice);
  const std::string theirs = SubmitOk(kBob);
  ExpectCode(Checkpoint("", mine), grpc::StatusCode::UNAUTHENTICATED, "no bearer token");
  ExpectCode(Cordon("", "w1", true), grpc::StatusCode::UNAUTHENTICATED, "no bearer token");
  ExpectCode(Drain("", "w1"), grpc::StatusCode::UNAUTHENTICATED, "no bearer token");

  ExpectCode(Checkpoint(kViewer, mine), grpc::StatusCode::PERMISSION_DENIED,
             "dashboard has the viewer role, which cannot checkpoint jobs; that needs submitter or admin");
  ExpectCode(Checkpoint(kAlice, theirs), grpc::StatusCode::NOT_FOUND, "job " + theirs + " not found");
  // Her own job has no checkpoint.dir: refused for what it is, not for who asks.
  const grpc::Status own = Checkpoint(kAlice, mine);
  EXPECT_EQ(own.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << own.error_message();
  EXPECT_NE(own.error_message().find("sets no checkpoint.dir"), std::string::npos) << own.error_message();

  for (const char* token : {kViewer, kAlice}) {
    const std::string who = token == kViewer ? "dashboard has the viewer" : "alice has the submitter";
    ExpectCode(Cordon(token, "w1", true), grpc::StatusCode::PERMISSION_DENIED,
               who + " role, which cannot cordon workers; that needs admin");
    ExpectCode(Cordon(token, "w1", false), grpc::StatusCode::PERMISSION_DENIED,
               who + " role, which cannot uncordon workers; that needs admin");
    ExpectCode(Drain(token, "w1"), grpc::StatusCode::PERMISSION_DENIED,
               who + " role, which cannot drain workers; that needs admin");
  }
  for (const auto& w : manager_->Workers()) EXPECT_FALSE(w.cordoned()) << "nothing was cordoned";

  ExpectCode(Cordon(kAdmin, "w9", true), grpc::StatusCode::NOT_FOUND, "worker 'w9' is not known to this controller");
  ExpectCode(Drain(kAdmin, "w9"), grpc::StatusCode::NOT_FOUND, "worker 'w9' is not known to this controller");
  ASSERT_TRUE(Cordon(kAdmin, "w1", true, "fan").ok());
  EXPECT_TRUE(manager_->Workers()[0].cordoned());
  EXPECT_EQ(manager_->Workers()[0].cordon_reason(), "fan");
}

TEST_F(SharingAuthTest, OnlyAnAdminOptsOutOfPreemptionAbovePriorityZero) {
  ExpectCode(SubmitPinned(kAlice, 5), grpc::StatusCode::PERMISSION_DENIED,
             "alice has the submitter role, which cannot submit a job with job.preemptible = false above priority "
             "0 (this one has priority 5); that needs admin");
  EXPECT_TRUE(ListIds(kAdmin).empty()) << "nothing was created";
  EXPECT_TRUE(SubmitPinned(kAlice, 0).ok());
  EXPECT_TRUE(SubmitPinned(kAdmin, 5).ok());
}

TEST_F(SharingAuthTest, SharingRequestsAreCheckedBeforeAnythingHappens) {
  const std::string id = SubmitOk(kAlice);
  for (double t : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 3601.0}) {
    const grpc::Status s = Checkpoint(kAdmin, id, t);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << t;
    EXPECT_EQ(s.error_message().rfind("CheckpointJobRequest.timeout_s: must be in [0, 3600]", 0), 0u)
        << s.error_message();
  }
  EXPECT_EQ(Checkpoint(kAdmin, std::string(65, 'j')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Checkpoint(kAdmin, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const std::string& name : {std::string(), std::string(300, 'w'), std::string("w 1"), std::string("w\n1")}) {
    EXPECT_EQ(Cordon(kAdmin, name, true).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_EQ(Drain(kAdmin, name).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
  }
  const grpc::Status long_reason = Cordon(kAdmin, "w1", true, std::string(2000, 'r'));
  EXPECT_EQ(long_reason.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(long_reason.error_message().size(), 300u) << "quotes at most ~100 characters";
  EXPECT_EQ(Cordon(kAdmin, "w1", true, "bell\a").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const auto& w : manager_->Workers()) EXPECT_FALSE(w.cordoned());
}

// Webhook status names endpoints and receivers' errors: admins only. This service runs
// without --webhooks, so an admin is told there is none (webhook_manager_test covers
// the answer with endpoints).
TEST_F(SharingAuthTest, WebhookStatusIsTheAdmins) {
  auto status = [this](const std::string& token, v1::GetWebhookStatusResponse* response) {
    return stub_->GetWebhookStatus(Ctx(token).get(), v1::GetWebhookStatusRequest(), response);
  };
  v1::GetWebhookStatusResponse response;
  ExpectCode(status("", &response), grpc::StatusCode::UNAUTHENTICATED, "no bearer token");
  ExpectCode(status("alice-token-1112", &response), grpc::StatusCode::UNAUTHENTICATED, "unknown token");
  ExpectCode(status(kViewer, &response), grpc::StatusCode::PERMISSION_DENIED,
             "dashboard has the viewer role, which cannot read webhook status; that needs admin");
  ExpectCode(status(kAlice, &response), grpc::StatusCode::PERMISSION_DENIED,
             "alice has the submitter role, which cannot read webhook status; that needs admin");
  ASSERT_TRUE(status(kAdmin, &response).ok());
  EXPECT_FALSE(response.configured());
  EXPECT_EQ(response.endpoints_size(), 0);
}

}  // namespace
}  // namespace trainyard::testing
