// Runs the `trainyard` CLI's RunCli and JobClient against an in-process fake
// JobService on a loopback port chosen by the OS.
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/cli/commands.h"
#include "client/job_client.h"
#include "common/events/proto_json.h"
#include "tests/client/cli/cli_test_fixture.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Events 1..n of `id`: a PENDING job_state, a step, then `end` as a job_state unless unset.
void AddEvents(testing::FakeJobService& service, const std::string& id, v1::Job::State end) {
  std::vector<v1::Event> events;
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
  service.SetEvents(id, events);
}

// The stream of `id` stays open after its events until the client ends it.
void HangAfterEvents(testing::FakeJobService& service, const std::string& id) {
  testing::FakeJobService::WatchCall hang;
  hang.hold_until_released = true;
  service.SetWatchFallback(id, hang);
}

class CliCommandsTest : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    v1::WorkerInfo w;
    w.set_name("w1");
    w.set_slots(4);
    w.set_free_slots(2);
    w.set_connected(true);
    service_.AddWorker(w);
    service_.HoldCall("GetJob", "slow");  // until the client's deadline cancels it
  }

  // Runs `trainyard <args...> --controller <fake>`.
  int Run(std::vector<std::string> args) {
    if (!args.empty()) {
      args.push_back("--controller");
      args.push_back(address_);
    }
    return RunRaw(args);
  }
};

TEST_F(CliCommandsTest, WatchExitsWithTheEndStateOfTheTerminalEvent) {
  AddEvents(service_, "ok", v1::Job::SUCCEEDED);
  AddEvents(service_, "bad", v1::Job::FAILED);
  AddEvents(service_, "stopped", v1::Job::CANCELLED);
  EXPECT_EQ(Run({"watch", "ok"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre("seq=1 job PENDING: needs 1 slot",
                                                 StartsWith("seq=2 rank=0 step 1 loss=7.5000"),
                                                 "seq=3 job SUCCEEDED"));
  EXPECT_EQ(Run({"watch", "bad"}), 1);
  EXPECT_EQ(Run({"watch", "stopped"}), 1);  // one code for FAILED and CANCELLED
}

TEST_F(CliCommandsTest, WatchAsksGetJobWhenTheStreamEndsWithoutATerminalEvent) {
  AddEvents(service_, "j1", v1::Job::STATE_UNSPECIFIED);
  service_.AddJob("j1", v1::Job::FAILED);
  EXPECT_EQ(Run({"watch", "j1"}), 1) << err_.str();

  AddEvents(service_, "j2", v1::Job::STATE_UNSPECIFIED);
  service_.AddJob("j2", v1::Job::RUNNING);
  // watch reconnects after such an end; with --reconnect-for 0 it gives up at once.
  EXPECT_EQ(Run({"watch", "j2", "--reconnect-for", "0"}), 5);
  EXPECT_THAT(err_.str(), HasSubstr("ended while the job is RUNNING"));
}

TEST_F(CliCommandsTest, WatchJsonLinesAndFromSeq) {
  AddEvents(service_, "j", v1::Job::SUCCEEDED);
  EXPECT_EQ(Run({"watch", "j", "--from-seq", "2", "--json"}), 0) << err_.str();
  std::vector<std::string> lines = OutLines();
  ASSERT_EQ(lines.size(), 2u);
  v1::Event step;
  ASSERT_TRUE(FromJson(lines[0], &step).ok()) << lines[0];
  EXPECT_EQ(step.seq(), 2);
  EXPECT_DOUBLE_EQ(step.step_metrics().loss(), 7.5);
  EXPECT_THAT(lines[0], HasSubstr("\"step_metrics\""));  // proto field names preserved
  EXPECT_THAT(service_.WatchFromSeqs("j"), ::testing::ElementsAre(2));
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
  const std::vector<v1::JobSpec> submitted = service_.Submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].training().steps(), 5);
  EXPECT_EQ(submitted[0].model().preset(), "tiny");
  EXPECT_EQ(submitted[0].job().name(), "t");
}

TEST_F(CliCommandsTest, SubmitWaitExitsLikeWatch) {
  AddEvents(service_, "j-new", v1::Job::CANCELLED);
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
  EXPECT_TRUE(service_.Submitted().empty());
}

TEST_F(CliCommandsTest, ListFiltersByStateAndPrintsColumns) {
  service_.AddJob("j1", v1::Job::RUNNING);
  EXPECT_EQ(Run({"list", "--state", "running", "--state", "pending,failed"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre(StartsWith("ID  NAME     STATE"),
                                                 StartsWith("j1  name-j1  RUNNING")));
  EXPECT_THAT(service_.LastList().states(),
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
    v1::Job stored = service_.Job("j1");
    stored.mutable_last_checkpoint()->set_step(40);
    stored.mutable_last_checkpoint()->set_path("/ckpt/j1/step-40");
    stored.mutable_last_checkpoint()->set_attempt(1);
    stored.add_failure_causes("rank 0 on worker w1 failed: exit code 1");
    service_.PutJob(stored);
  }
  EXPECT_EQ(Run({"get", "j1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\nlast checkpoint: step 40 at /ckpt/j1/step-40 (attempt 1, 0 bytes)\n"
                                    "failure causes (oldest first):\n"
                                    "  1. rank 0 on worker w1 failed: exit code 1\n"));

  EXPECT_EQ(Run({"get", "missing"}), 3);  // not found
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));

  EXPECT_EQ(Run({"cancel", "j1", "--reason", "oops"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("CANCELLED"));
  EXPECT_EQ(service_.LastCancel().reason(), "oops");

  EXPECT_EQ(Run({"workers"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre(StartsWith("NAME  SLOTS  FREE"),
                                                 StartsWith("w1    4      2     yes")));
}

// A job with [validation]: watch prints each Validation as its own line, get shows the
// newest one (step, loss) and the last step's epoch.
TEST_F(CliCommandsTest, WatchAndGetShowValidations) {
  v1::Job job = service_.AddJob("jv", v1::Job::SUCCEEDED, /*steps=*/20);
  job.mutable_spec()->mutable_validation()->set_dataset("synthetic");
  job.mutable_spec()->mutable_validation()->set_freq(10);
  std::vector<v1::Event> events;
  events.push_back(testing::FakeJobService::StateEvent("jv", 1, v1::Job::RUNNING));
  auto validation = [](int64_t seq, int64_t step, double loss) {
    v1::Event e = testing::FakeJobService::MakeEvent("jv", seq, 0);
    e.mutable_validation()->set_step(step);
    e.mutable_validation()->set_loss(loss);
    e.mutable_validation()->set_tokens(2048);
    e.mutable_validation()->set_ms(12.5);
    return e;
  };
  events.push_back(validation(2, 0, 7.0));
  events.push_back(testing::FakeJobService::StepEvent("jv", 3, 10, 5.5));
  events.back().mutable_step_metrics()->set_epoch(2);
  events.push_back(validation(4, 10, 5.8125));
  events.push_back(testing::FakeJobService::StateEvent("jv", 5, v1::Job::SUCCEEDED));
  service_.SetEvents("jv", events);
  job.set_last_seq(5);
  service_.PutJob(job);

  EXPECT_EQ(Run({"watch", "jv"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ::testing::ElementsAre(
                              "seq=1 job RUNNING", "seq=2 rank=0 validation step 0 loss=7.0000 tokens=2048 ms=12",
                              "seq=3 rank=0 step 10 loss=5.5000 grad_norm=0.00 lr=0.0e+00 tok/s=1000 step_ms=0 epoch=2",
                              "seq=4 rank=0 validation step 10 loss=5.8125 tokens=2048 ms=12", "seq=5 job SUCCEEDED"));
  EXPECT_EQ(Run({"get", "jv"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\nmetrics    step 10/20 loss 5.5000"));
  EXPECT_THAT(out_.str(), HasSubstr(" epoch 2 at "));
  EXPECT_THAT(out_.str(), HasSubstr("\nvalidation step 10 loss 5.8125 (2048 tokens, 12 ms) at "));
  EXPECT_THAT(out_.str(), HasSubstr("; 2 runs\n"));
}

TEST_F(CliCommandsTest, ResizeSendsTheDpAndPrintsTheJob) {
  v1::Job j1 = service_.AddJob("j1", v1::Job::RUNNING);
  j1.mutable_spec()->mutable_parallelism()->set_dp(2);  // the fake refuses --dp past it
  service_.PutJob(j1);
  EXPECT_EQ(Run({"resize", "j1", "--dp", "1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("RESTARTING"));
  EXPECT_EQ(service_.LastResize().job_id(), "j1");
  EXPECT_EQ(service_.LastResize().dp(), 1);
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
  service_.ClearLastResize();
  EXPECT_EQ(Run({"resize", "j1"}), 2);  // --dp is required
  EXPECT_EQ(Run({"resize", "j1", "--dp", "0"}), 2);
  EXPECT_EQ(Run({"resize", "j1", "--dp", "two"}), 2);
  EXPECT_EQ(Run({"resize", "--dp", "1"}), 2);  // missing JOB
  EXPECT_EQ(service_.LastResize().job_id(), "");
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
  AddEvents(service_, "j", v1::Job::STATE_UNSPECIFIED);
  HangAfterEvents(service_, "j");
  auto client = JobClient::Connect(address_);
  int seen = 0;
  absl::Status status = client->Watch("j", 0, [&](const v1::Event&) { return ++seen < 2; });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(seen, 2);
}

TEST_F(CliCommandsTest, CancelWatchesEndsAStreamBlockedOnTheServer) {
  AddEvents(service_, "j", v1::Job::STATE_UNSPECIFIED);
  HangAfterEvents(service_, "j");
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
