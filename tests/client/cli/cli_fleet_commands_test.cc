// `trainyard checkpoint` and `trainyard workers cordon | uncordon | drain` against the
// shared fake JobService (tests/fakes/fake_job_service.h): what they send, what they
// print, the controller's refusals shown with their code, and the arguments the CLI
// refuses before sending anything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/events/proto_json.h"
#include "tests/client/cli/cli_test_fixture.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class CliFleetTest : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    for (const char* name : {"w1", "w2"}) {
      v1::WorkerInfo w;
      w.set_name(name);
      w.set_slots(2);
      w.set_connected(true);
      service_.AddWorker(w);
    }
    // job-3 runs with checkpoints on w1, job-4 on w2, job-5 (no checkpoint.dir) on both.
    v1::Job job3 = service_.AddJob("job-3", v1::Job::RUNNING);
    job3.mutable_spec()->mutable_checkpoint()->set_dir("/ckpt");
    job3.mutable_placement()->add_ranks()->set_worker("w1");
    service_.PutJob(job3);
    v1::Job job4 = job3;
    job4.set_id("job-4");
    job4.mutable_placement()->mutable_ranks(0)->set_worker("w2");
    service_.PutJob(job4);
    v1::Job job5 = service_.AddJob("job-5", v1::Job::RUNNING);
    job5.mutable_placement()->add_ranks()->set_worker("w2");
    job5.mutable_placement()->add_ranks()->set_worker("w1");
    service_.PutJob(job5);
    service_.AddJob("done", v1::Job::SUCCEEDED);
    v1::CheckpointRef ck;
    ck.set_step(120);
    ck.set_path("/ckpt/job-3/step-120");
    ck.set_attempt(1);
    ck.set_bytes(73728);
    service_.SetCheckpointAnswer("job-3", ck);
  }

  int Run(std::vector<std::string> args) {
    args.push_back("--controller");
    args.push_back(address_);
    return RunRaw(args);
  }
};

TEST_F(CliFleetTest, CheckpointPrintsWhereTheCheckpointIs) {
  ASSERT_EQ(Run({"checkpoint", "job-3"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "job-3: checkpoint at step 120: /ckpt/job-3/step-120 (73728 bytes)\n");
  EXPECT_EQ(err_.str(), "");
  EXPECT_EQ(service_.LastCheckpoint().job_id(), "job-3");
  // Without --timeout the controller's default (0 sent) and a deadline 30 s past its
  // 300 s (gRPC rounds a deadline up on the wire: 1 s slack).
  EXPECT_EQ(service_.LastCheckpoint().timeout_s(), 0);
  EXPECT_GT(service_.LastCheckpointDeadline(), absl::Seconds(300));
  EXPECT_LE(service_.LastCheckpointDeadline(), absl::Seconds(331));

  ASSERT_EQ(Run({"checkpoint", "job-3", "--timeout", "5", "--json"}), 0) << err_.str();
  EXPECT_EQ(service_.LastCheckpoint().timeout_s(), 5);
  // The controller's own DEADLINE_EXCEEDED must arrive before the client's deadline.
  EXPECT_GT(service_.LastCheckpointDeadline(), absl::Seconds(5));
  EXPECT_LE(service_.LastCheckpointDeadline(), absl::Seconds(36));
  ASSERT_EQ(OutLines().size(), 1u) << out_.str();
  v1::CheckpointJobResponse response;
  ASSERT_TRUE(FromJson(OutLines()[0], &response).ok()) << out_.str();
  EXPECT_EQ(response.checkpoint().step(), 120);
  EXPECT_EQ(response.checkpoint().path(), "/ckpt/job-3/step-120");
  EXPECT_EQ(response.checkpoint().bytes(), 73728);

  // A global flag before the subcommand means the same.
  ASSERT_EQ(RunRaw({"--timeout", "7.5", "--controller", address_, "checkpoint", "job-3"}), 0) << err_.str();
  EXPECT_EQ(service_.LastCheckpoint().timeout_s(), 7.5);
}

TEST_F(CliFleetTest, CheckpointRefusalsKeepTheControllersCodeAndMessage) {
  EXPECT_EQ(Run({"checkpoint", "nope"}), 3);
  EXPECT_EQ(err_.str(), "trainyard: NOT_FOUND: job nope not found\n");
  EXPECT_EQ(Run({"checkpoint", "done"}), 6);
  EXPECT_EQ(err_.str(), "trainyard: FAILED_PRECONDITION: job done already ended SUCCEEDED\n");
  EXPECT_EQ(Run({"checkpoint", "job-5"}), 6);
  EXPECT_EQ(err_.str(),
            "trainyard: FAILED_PRECONDITION: job job-5 sets no checkpoint.dir, so its ranks have nowhere to write a "
            "checkpoint\n");
  // The controller's deadline says how far the ranks got: shown as it is, with no hint
  // about reaching the controller (it answered).
  service_.FailCall("CheckpointJob", "job-4",
                    grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                 "job job-4: no checkpoint within 5 s (ranks at step 40)"));
  EXPECT_EQ(Run({"checkpoint", "job-4", "--timeout", "5"}), 5);
  EXPECT_EQ(err_.str(), "trainyard: DEADLINE_EXCEEDED: job job-4: no checkpoint within 5 s (ranks at step 40)\n");
  service_.FailCall("CheckpointJob", "job-3",
                    grpc::Status(grpc::StatusCode::ABORTED, "job job-3: attempt 1 ended before the checkpoint"));
  EXPECT_EQ(Run({"checkpoint", "job-3"}), 6);
  EXPECT_EQ(err_.str(), "trainyard: ABORTED: job job-3: attempt 1 ended before the checkpoint\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliFleetTest, CheckpointArgumentsAreCheckedBeforeAnythingIsSent) {
  for (const char* bad : {"-1", "nan", "inf", "0", "ten"}) {
    EXPECT_EQ(Run({"checkpoint", "job-3", "--timeout", bad}), 2) << bad;
    EXPECT_THAT(err_.str(), HasSubstr("must be a positive number of seconds")) << bad;
  }
  EXPECT_EQ(Run({"checkpoint", "job-3", "--timeout", "3601"}), 2);
  EXPECT_EQ(err_.str(),
            "trainyard: INVALID_ARGUMENT: checkpoint: --timeout must be at most 3600 seconds (the controller waits "
            "no longer for a checkpoint), got 3601\n");
  EXPECT_EQ(Run({"checkpoint"}), 2);  // missing JOB
  EXPECT_THAT(err_.str(), HasSubstr("job is required"));
  EXPECT_EQ(service_.LastCheckpoint().job_id(), "");  // nothing reached the controller
}

TEST_F(CliFleetTest, CordonAndUncordonPrintTheWorkersState) {
  ASSERT_EQ(Run({"workers", "cordon", "w1", "--reason", "disk swap"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "w1: cordoned (disk swap): takes no new ranks; what runs there keeps running\n");
  EXPECT_EQ(service_.LastCordon().name(), "w1");
  EXPECT_TRUE(service_.LastCordon().cordon());
  EXPECT_EQ(service_.LastCordon().reason(), "disk swap");

  ASSERT_EQ(Run({"workers"}), 0) << err_.str();
  EXPECT_THAT(OutLines(), ElementsAre("NAME  SLOTS  FREE  CONNECTED  ADDRESS  DEVICE  CAPABILITIES  CORDONED",
                                      "w1    2      0     yes        -        -       -             yes (disk swap)",
                                      "w2    2      0     yes        -        -       -             -"));
  ASSERT_EQ(Run({"workers", "--json"}), 0) << err_.str();
  v1::WorkerInfo w1;
  ASSERT_TRUE(FromJson(OutLines().at(0), &w1).ok()) << out_.str();
  EXPECT_TRUE(w1.cordoned());
  EXPECT_EQ(w1.cordon_reason(), "disk swap");

  ASSERT_EQ(Run({"workers", "uncordon", "w1", "--json"}), 0) << err_.str();
  ASSERT_TRUE(FromJson(OutLines().at(0), &w1).ok()) << out_.str();
  EXPECT_FALSE(w1.cordoned());
  EXPECT_FALSE(service_.LastCordon().cordon());
  ASSERT_EQ(Run({"workers", "uncordon", "w1"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "w1: uncordoned: takes new ranks again\n");
  ASSERT_EQ(Run({"workers"}), 0) << err_.str();
  EXPECT_EQ(OutLines().at(0), "NAME  SLOTS  FREE  CONNECTED  ADDRESS  DEVICE  CAPABILITIES");
}

TEST_F(CliFleetTest, DrainPrintsTheJobsItMoves) {
  ASSERT_EQ(Run({"workers", "drain", "w2", "--reason", "kernel update"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "w2: cordoned (kernel update); moving 2 jobs (each saves a checkpoint, stops and is rescheduled "
            "elsewhere):\n  job-4\n  job-5\n");
  EXPECT_EQ(service_.LastDrain().name(), "w2");
  EXPECT_EQ(service_.LastDrain().reason(), "kernel update");
  ASSERT_EQ(Run({"workers", "drain", "w1", "-o", "json"}), 0) << err_.str();
  v1::DrainWorkerResponse drained;
  ASSERT_TRUE(FromJson(OutLines().at(0), &drained).ok()) << out_.str();
  EXPECT_EQ(drained.worker().name(), "w1");
  EXPECT_TRUE(drained.worker().cordoned());
  EXPECT_THAT(drained.job_ids(), ElementsAre("job-3", "job-5"));
}

TEST_F(CliFleetTest, WorkerCommandRefusals) {
  // Missing NAME, an unknown sub-subcommand, a flag uncordon does not take, two names:
  // usage errors that send nothing.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"workers", "cordon"}, {"workers", "drain"}, {"workers", "uncordon"}, {"workers", "evict", "w1"},
           {"workers", "uncordon", "w1", "--reason", "x"}, {"workers", "cordon", "w1", "w2"}}) {
    EXPECT_EQ(Run(args), 2) << args.back();
    EXPECT_THAT(err_.str(), Not(HasSubstr("trainyard: "))) << "a usage error, not a call's: " << err_.str();
  }
  EXPECT_EQ(service_.LastCordon().name(), "");
  EXPECT_EQ(service_.LastDrain().name(), "");

  EXPECT_EQ(Run({"workers", "cordon", "nope"}), 3);
  EXPECT_EQ(err_.str(), "trainyard: NOT_FOUND: worker 'nope' is not known to this controller\n");
  EXPECT_EQ(Run({"workers", "drain", "nope"}), 3);
  EXPECT_EQ(err_.str(), "trainyard: NOT_FOUND: worker 'nope' is not known to this controller\n");
  service_.FailCall("CordonWorker", "w1",
                    grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "CordonWorker needs the admin role"));
  EXPECT_EQ(Run({"workers", "cordon", "w1"}), 4);
  EXPECT_EQ(err_.str(), "trainyard: PERMISSION_DENIED: CordonWorker needs the admin role\n");
  EXPECT_EQ(out_.str(), "");
  EXPECT_FALSE(service_.Workers().at(0).cordoned());
}

TEST_F(CliFleetTest, HelpNamesTheNewCommandsWithExamples) {
  ASSERT_EQ(RunRaw({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("\n  checkpoint "));
  EXPECT_THAT(out_.str(), HasSubstr("trainyard workers drain w1 --reason 'kernel update'"));
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
           {"checkpoint"}, {"workers"}, {"workers", "cordon"}, {"workers", "uncordon"}, {"workers", "drain"}}) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    EXPECT_EQ(RunRaw(args), 0) << command.back();
    EXPECT_THAT(out_.str(), HasSubstr("Example: trainyard ")) << command.back();
  }
  ASSERT_EQ(RunRaw({"checkpoint", "--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("checkpoint.dir"));
  EXPECT_THAT(out_.str(), HasSubstr("at most 3600 seconds"));
  ASSERT_EQ(RunRaw({"workers", "--help"}), 0);
  for (const char* sub : {"cordon", "uncordon", "drain"}) EXPECT_THAT(out_.str(), HasSubstr(sub));
}

}  // namespace
}  // namespace trainyard
