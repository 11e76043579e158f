// Runs the `trainyard` CLI's RunCli and JobClient against an in-process fake
// JobService on a loopback port chosen by the OS.
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/cli/commands.h"
#include "client/job_client.h"
#include "common/events/proto_json.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Canned jobs and events; records what it was asked.
class FakeJobService final : public v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    submitted_.push_back(request->spec());
    job->set_id("j-new");
    job->set_state(v1::Job::PENDING);
    *job->mutable_spec() = request->spec();
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* job) override {
    if (request->id() == "slow") {
      // Holds the call until the client's deadline cancels it.
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    absl::MutexLock lock(&mu_);
    for (const v1::Job& j : jobs_) {
      if (j.id() == request->id()) {
        *job = j;
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + request->id() + " not found");
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_list_ = *request;
    for (const v1::Job& j : jobs_) *response->add_jobs() = j;
    return grpc::Status::OK;
  }
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::Job* job) override {
    absl::MutexLock lock(&mu_);
    last_cancel_ = *request;
    job->set_id(request->id());
    job->set_state(v1::Job::CANCELLED);
    job->set_failure_reason(request->reason());
    return grpc::Status::OK;
  }
  grpc::Status ResizeJob(grpc::ServerContext*, const v1::ResizeJobRequest* request,
                         v1::ResizeJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    last_resize_ = *request;
    if (request->job_id() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job missing not found");
    }
    if (request->dp() > 2) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "ResizeJobRequest.dp: must be in [1, 2] for job j1, got " + std::to_string(request->dp()));
    }
    v1::Job* job = response->mutable_job();
    job->set_id(request->job_id());
    job->set_state(v1::Job::RESTARTING);
    job->set_world_size(4);
    return grpc::Status::OK;
  }
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    v1::WorkerInfo* w = response->add_workers();
    w->set_name("w1");
    w->set_slots(4);
    w->set_free_slots(2);
    w->set_connected(true);
    return grpc::Status::OK;
  }
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::Event>* writer) override {
    std::vector<v1::Event> events;
    bool hang = false;
    {
      absl::MutexLock lock(&mu_);
      last_watch_ = *request;
      auto it = events_.find(request->id());
      if (it == events_.end()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + request->id() + " not found");
      }
      events = it->second;
      hang = hang_after_events_;
    }
    for (const v1::Event& e : events) {
      if (e.seq() >= request->from_seq()) writer->Write(e);
    }
    if (hang) {
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return grpc::Status::OK;
  }

  void AddJob(const std::string& id, v1::Job::State state) {
    absl::MutexLock lock(&mu_);
    v1::Job job;
    job.set_id(id);
    job.set_state(state);
    job.set_world_size(1);
    job.mutable_spec()->mutable_job()->set_name("name-" + id);
    jobs_.push_back(job);
  }
  // Events 1..n: a PENDING job_state, a step, then `end` as a job_state unless unset.
  void AddEvents(const std::string& id, v1::Job::State end) {
    absl::MutexLock lock(&mu_);
    std::vector<v1::Event>& events = events_[id];
    v1::Event pending;
    pending.set_job_id(id);
    pending.set_seq(1);
    pending.set_rank(-1);
    pending.mutable_job_state()->set_state(v1::Job::PENDING);
    pending.mutable_job_state()->set_reason("needs 1 slot");
    events.push_back(pending);
    v1::Event step;
    step.set_job_id(id);
    step.set_seq(2);
    step.set_rank(0);
    step.mutable_step_metrics()->set_step(1);
    step.mutable_step_metrics()->set_loss(7.5);
    events.push_back(step);
    if (end != v1::Job::STATE_UNSPECIFIED) {
      v1::Event done;
      done.set_job_id(id);
      done.set_seq(3);
      done.set_rank(-1);
      done.mutable_job_state()->set_state(end);
      events.push_back(done);
    }
  }
  void HangAfterEvents() {
    absl::MutexLock lock(&mu_);
    hang_after_events_ = true;
  }

  absl::Mutex mu_;
  std::vector<v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<v1::Event>> events_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JobSpec> submitted_ ABSL_GUARDED_BY(mu_);
  v1::ListJobsRequest last_list_ ABSL_GUARDED_BY(mu_);
  v1::CancelJobRequest last_cancel_ ABSL_GUARDED_BY(mu_);
  v1::ResizeJobRequest last_resize_ ABSL_GUARDED_BY(mu_);
  v1::WatchJobRequest last_watch_ ABSL_GUARDED_BY(mu_);
  bool hang_after_events_ ABSL_GUARDED_BY(mu_) = false;
};

class CliCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs `trainyard <args...> --controller <fake>`.
  int Run(std::vector<std::string> args) {
    args.insert(args.begin(), "trainyard");
    if (args.size() > 1) {
      args.push_back("--controller");
      args.push_back(address_);
    }
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    out_.str("");
    err_.str("");
    cli::CliEnvironment env;
    env.out = &out_;
    env.err = &err_;
    return cli::RunCli(static_cast<int>(argv.size()), argv.data(), env);
  }

  std::vector<std::string> OutLines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::ostringstream out_;
  std::ostringstream err_;
};

TEST_F(CliCommandsTest, WatchExitsWithTheEndStateOfTheTerminalEvent) {
  service_.AddEvents("ok", v1::Job::SUCCEEDED);
  service_.AddEvents("bad", v1::Job::FAILED);
  service_.AddEvents("stopped", v1::Job::CANCELLED);
  EXPECT_EQ(Run({"watch", "ok"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre("seq=1 job PENDING: needs 1 slot",
                                                 StartsWith("seq=2 rank=0 step 1 loss=7.5000"),
                                                 "seq=3 job SUCCEEDED"));
  EXPECT_EQ(Run({"watch", "bad"}), 1);
  EXPECT_EQ(Run({"watch", "stopped"}), 1);  // one code for FAILED and CANCELLED
}

TEST_F(CliCommandsTest, WatchAsksGetJobWhenTheStreamEndsWithoutATerminalEvent) {
  service_.AddEvents("j1", v1::Job::STATE_UNSPECIFIED);
  service_.AddJob("j1", v1::Job::FAILED);
  EXPECT_EQ(Run({"watch", "j1"}), 1) << err_.str();

  service_.AddEvents("j2", v1::Job::STATE_UNSPECIFIED);
  service_.AddJob("j2", v1::Job::RUNNING);
  // watch reconnects after such an end; with --reconnect-for 0 it gives up at once.
  EXPECT_EQ(Run({"watch", "j2", "--reconnect-for", "0"}), 5);
  EXPECT_THAT(err_.str(), HasSubstr("ended while the job is RUNNING"));
}

TEST_F(CliCommandsTest, WatchJsonLinesAndFromSeq) {
  service_.AddEvents("j", v1::Job::SUCCEEDED);
  EXPECT_EQ(Run({"watch", "j", "--from-seq", "2", "--json"}), 0) << err_.str();
  std::vector<std::string> lines = OutLines();
  ASSERT_EQ(lines.size(), 2u);
  v1::Event step;
  ASSERT_TRUE(FromJson(lines[0], &step).ok()) << lines[0];
  EXPECT_EQ(step.seq(), 2);
  EXPECT_DOUBLE_EQ(step.step_metrics().loss(), 7.5);
  EXPECT_THAT(lines[0], HasSubstr("\"step_metrics\""));  // proto field names preserved
  absl::MutexLock lock(&service_.mu_);
  EXPECT_EQ(service_.last_watch_.from_seq(), 2);
}

TEST_F(CliCommandsTest, WatchOfUnknownJobIsAnError) {
  EXPECT_EQ(Run({"watch", "nope"}), 3);  // not found
  EXPECT_THAT(err_.str(), StartsWith("trainyard: NOT_FOUND: job nope not found"));
}

TEST_F(CliCommandsTest, SubmitSendsTheFileWithOverridesAndPrintsTheId) {
  const std::string path = ::testing::TempDir() + "/cli_submit.toml";
  std::ofstream(path) << "[job]\nname = \"t\"\n[training]\nsteps = 100\n";
  EXPECT_EQ(Run({"submit", path, "--set", "training.steps=5", "--set", "model.preset=tiny"}), 0)
      << err_.str();
  EXPECT_EQ(out_.str(), "j-new\n");
  absl::MutexLock lock(&service_.mu_);
  ASSERT_EQ(service_.submitted_.size(), 1u);
  EXPECT_EQ(service_.submitted_[0].training().steps(), 5);
  EXPECT_EQ(service_.submitted_[0].model().preset(), "tiny");
  EXPECT_EQ(service_.submitted_[0].job().name(), "t");
}

TEST_F(CliCommandsTest, SubmitWaitExitsLikeWatch) {
  service_.AddEvents("j-new", v1::Job::CANCELLED);
  const std::string path = ::testing::TempDir() + "/cli_wait.toml";
  std::ofstream(path) << "[training]\nsteps = 1\n";
  EXPECT_EQ(Run({"submit", path, "--wait"}), 1) << err_.str();  // CANCELLED
  EXPECT_THAT(OutLines(), ::testing::ElementsAre("j-new", StartsWith("seq=1"), StartsWith("seq=2"),
                                                 "seq=3 job CANCELLED"));
}

TEST_F(CliCommandsTest, SubmitOfABadFileReportsFileLineAndSendsNothing) {
  const std::string path = ::testing::TempDir() + "/cli_bad.toml";
  std::ofstream(path) << "[model]\n\ndimm = 3\n";
  EXPECT_EQ(Run({"submit", path}), 2);  // usage: a bad job file
  EXPECT_THAT(err_.str(),
              StartsWith("trainyard: INVALID_ARGUMENT: " + path + ":3:1: unknown key model.dimm"));
  absl::MutexLock lock(&service_.mu_);
  EXPECT_TRUE(service_.submitted_.empty());
}

TEST_F(CliCommandsTest, ListFiltersByStateAndPrintsColumns) {
  service_.AddJob("j1", v1::Job::RUNNING);
  EXPECT_EQ(Run({"list", "--state", "running", "--state", "pending,failed"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre(StartsWith("ID  NAME     STATE"),
                                                 StartsWith("j1  name-j1  RUNNING")));
  absl::MutexLock lock(&service_.mu_);
  EXPECT_THAT(service_.last_list_.states(),
              ::testing::ElementsAre(v1::Job::RUNNING, v1::Job::PENDING, v1::Job::FAILED));
}

TEST_F(CliCommandsTest, ListRejectsUnknownState) {
  EXPECT_EQ(Run({"list", "--state", "done"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown job state \"done\""));
}

TEST_F(CliCommandsTest, GetCancelAndWorkers) {
  service_.AddJob("j1", v1::Job::RUNNING);
  EXPECT_EQ(Run({"get", "j1", "--output", "json"}), 0) << err_.str();
  v1::Job job;
  ASSERT_TRUE(FromJson(OutLines().at(0), &job).ok());
  EXPECT_EQ(job.id(), "j1");
  EXPECT_EQ(job.state(), v1::Job::RUNNING);

  {
    absl::MutexLock lock(&service_.mu_);
    v1::Job& stored = service_.jobs_.back();
    stored.mutable_last_checkpoint()->set_step(40);
    stored.mutable_last_checkpoint()->set_path("/ckpt/j1/step-40");
    stored.mutable_last_checkpoint()->set_attempt(1);
    stored.add_failure_causes("rank 0 on worker w1 failed: exit code 1");
  }
  EXPECT_EQ(Run({"get", "j1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\nlast checkpoint: step 40 at /ckpt/j1/step-40 (attempt 1, 0 bytes)\n"
                                    "failure causes (oldest first):\n"
                                    "  1. rank 0 on worker w1 failed: exit code 1\n"));

  EXPECT_EQ(Run({"get", "missing"}), 3);  // not found
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));

  EXPECT_EQ(Run({"cancel", "j1", "--reason", "oops"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("CANCELLED"));
  {
    absl::MutexLock lock(&service_.mu_);
    EXPECT_EQ(service_.last_cancel_.reason(), "oops");
  }

  EXPECT_EQ(Run({"workers"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre(StartsWith("NAME  SLOTS  FREE"),
                                                 StartsWith("w1    4      2     yes")));
}

TEST_F(CliCommandsTest, ResizeSendsTheDpAndPrintsTheJob) {
  EXPECT_EQ(Run({"resize", "j1", "--dp", "1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("RESTARTING"));
  {
    absl::MutexLock lock(&service_.mu_);
    EXPECT_EQ(service_.last_resize_.job_id(), "j1");
    EXPECT_EQ(service_.last_resize_.dp(), 1);
  }
  EXPECT_EQ(Run({"resize", "j1", "--dp", "2", "--output", "json"}), 0) << err_.str();
  v1::Job job;
  ASSERT_TRUE(FromJson(OutLines().at(0), &job).ok()) << out_.str();
  EXPECT_EQ(job.id(), "j1");
  EXPECT_EQ(job.state(), v1::Job::RESTARTING);

  // The controller's refusals come back with their code and message: INVALID_ARGUMENT
  // exits 2, NOT_FOUND 3.
  EXPECT_EQ(Run({"resize", "j1", "--dp", "3"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("ResizeJobRequest.dp: must be in [1, 2] for job j1, got 3"));
  EXPECT_EQ(Run({"resize", "missing", "--dp", "1"}), 3);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));
  // Usage errors never reach the controller.
  {
    absl::MutexLock lock(&service_.mu_);
    service_.last_resize_.Clear();
  }
  EXPECT_EQ(Run({"resize", "j1"}), 2);  // --dp is required
  EXPECT_EQ(Run({"resize", "j1", "--dp", "0"}), 2);
  EXPECT_EQ(Run({"resize", "j1", "--dp", "two"}), 2);
  EXPECT_EQ(Run({"resize", "--dp", "1"}), 2);  // missing JOB
  absl::MutexLock lock(&service_.mu_);
  EXPECT_EQ(service_.last_resize_.job_id(), "");
}

TEST_F(CliCommandsTest, HelpListsResize) {
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("resize"));
  EXPECT_EQ(Run({"resize", "--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("--dp"));
  EXPECT_THAT(out_.str(), HasSubstr("without using a restart of restart.max_restarts"));
}

TEST_F(CliCommandsTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Run({}), 2);
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_EQ(Run({"get"}), 2);  // missing JOB
  EXPECT_EQ(Run({"watch", "j", "--output", "yaml"}), 2);
}

TEST_F(CliCommandsTest, UnreachableControllerIsUnavailable) {
  std::vector<const char*> argv = {"trainyard",   "list",      "--controller",
                                   "127.0.0.1:1", "--timeout", "2"};
  cli::CliEnvironment env;
  env.out = &out_;
  env.err = &err_;
  EXPECT_EQ(cli::RunCli(static_cast<int>(argv.size()), argv.data(), env), 5);
  EXPECT_THAT(err_.str(), StartsWith("trainyard: UNAVAILABLE: "));
}

// A bearer token never travels in plaintext beyond this machine: without --tls-ca the
// CLI refuses before connecting (10.255.255.1 would only time out), and never quotes it.
TEST_F(CliCommandsTest, ABearerTokenIsNotSentInPlaintextBeyondLoopback) {
  std::vector<const char*> argv = {"trainyard", "list", "--controller", "10.255.255.1:7070", "--timeout", "60"};
  cli::CliEnvironment env;
  env.out = &out_;
  env.err = &err_;
  env.default_token = "tok-do-not-print";
  EXPECT_EQ(cli::RunCli(static_cast<int>(argv.size()), argv.data(), env), 6);  // FAILED_PRECONDITION
  EXPECT_EQ(err_.str(),
            "trainyard: FAILED_PRECONDITION: refusing to send the bearer token (TRAINYARD_TOKEN) in plaintext "
            "to 10.255.255.1:7070, which is not a loopback address: give --tls-ca to connect over TLS\n");
  // On loopback it is sent (the fake controller ignores it).
  env.default_token = "tok-local";
  err_.str("");
  std::vector<const char*> local = {"trainyard", "list", "--controller", address_.c_str()};
  EXPECT_EQ(cli::RunCli(static_cast<int>(local.size()), local.data(), env), 0) << err_.str();
}

TEST_F(CliCommandsTest, UnaryCallsHaveADeadline) {
  JobClient client(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()),
                   std::chrono::milliseconds(200));
  absl::StatusOr<v1::Job> job = client.GetJob("slow");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CliCommandsTest, WatchStopsWhenTheCallbackSaysSo) {
  service_.AddEvents("j", v1::Job::STATE_UNSPECIFIED);
  service_.HangAfterEvents();
  auto client = JobClient::Connect(address_);
  int seen = 0;
  absl::Status status = client->Watch("j", 0, [&](const v1::Event&) { return ++seen < 2; });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen, 2);
}

TEST_F(CliCommandsTest, CancelWatchesEndsAStreamBlockedOnTheServer) {
  service_.AddEvents("j", v1::Job::STATE_UNSPECIFIED);
  service_.HangAfterEvents();
  auto client = JobClient::Connect(address_);
  absl::Notification got_events;
  std::atomic<int> seen{0};
  absl::Status status;
  std::thread watcher([&] {
    status = client->Watch("j", 0, [&](const v1::Event&) {
      if (++seen == 2) got_events.Notify();
      return true;
    });
  });
  got_events.WaitForNotification();
  client->CancelWatches();
  watcher.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen.load(), 2);
}

}  // namespace
}  // namespace trainyard
