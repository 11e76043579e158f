#include "client/cli/cli_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "client/cli/gpu_format.h"

namespace trainyard::cli {
namespace {

TEST(CliFormatTest, StepMetricsLine) {
  v1::Event e;
  e.set_seq(12);
  e.set_rank(0);
  e.set_attempt(1);
  v1::StepMetrics* m = e.mutable_step_metrics();
  m->set_step(5);
  m->set_loss(6.81234);
  m->set_grad_norm(1.2345);
  m->set_lr(4e-4);
  m->set_tokens_per_s(1520.4);
  m->set_step_ms(1340.2);
  EXPECT_EQ(FormatEventText(e), "seq=12 rank=0 step 5 loss=6.8123 grad_norm=1.23 lr=4.0e-04 tok/s=1520 step_ms=1340");
}

// An MoE step shows its imbalance, and its dropped assignments when the capacity
// dropped some (a dropless step's line has no dropped=).
TEST(CliFormatTest, ImbalanceAndDroppedTokens) {
  v1::Event e;
  e.set_seq(12);
  e.set_rank(0);
  v1::StepMetrics* m = e.mutable_step_metrics();
  m->set_step(5);
  m->set_loss(6.5);
  m->set_imbalance(1.25);
  EXPECT_EQ(FormatEventText(e),
            "seq=12 rank=0 step 5 loss=6.5000 grad_norm=0.00 lr=0.0e+00 tok/s=0 step_ms=0 imbalance=1.25");
  m->set_dropped_tokens(384);
  EXPECT_EQ(FormatEventText(e),
            "seq=12 rank=0 step 5 loss=6.5000 grad_norm=0.00 lr=0.0e+00 tok/s=0 step_ms=0 "
            "imbalance=1.25 dropped=384");
}

// A dataset with epochs adds the step's epoch; a Validation is its own line.
TEST(CliFormatTest, EpochAndValidationLines) {
  v1::Event e;
  e.set_seq(12);
  e.set_rank(0);
  e.mutable_step_metrics()->set_step(5);
  e.mutable_step_metrics()->set_loss(6.5);
  e.mutable_step_metrics()->set_epoch(3);
  EXPECT_EQ(FormatEventText(e), "seq=12 rank=0 step 5 loss=6.5000 grad_norm=0.00 lr=0.0e+00 tok/s=0 step_ms=0 epoch=3");
  v1::Event v;
  v.set_seq(13);
  v.set_rank(0);
  v.set_attempt(2);
  v.mutable_validation()->set_step(50);
  v.mutable_validation()->set_loss(4.81256);
  v.mutable_validation()->set_tokens(8192);
  v.mutable_validation()->set_ms(38.4);
  EXPECT_EQ(FormatEventText(v), "seq=13 rank=0 attempt=2 validation step 50 loss=4.8126 tokens=8192 ms=38");
  v.mutable_validation()->set_loss(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(FormatEventText(v), "seq=13 rank=0 attempt=2 validation step 50 loss=nan tokens=8192 ms=38");
}

TEST(CliFormatTest, JobStateLineUsesJobAsSource) {
  v1::Event e;
  e.set_seq(1);
  e.set_rank(-1);
  e.mutable_job_state()->set_state(v1::Job::PENDING);
  e.mutable_job_state()->set_reason("needs 2 slots; 1 free");
  EXPECT_EQ(FormatEventText(e), "seq=1 job PENDING: needs 2 slots; 1 free");
}

TEST(CliFormatTest, RankStateLine) {
  v1::Event e;
  e.set_seq(3);
  e.set_rank(1);
  e.mutable_rank_state()->set_state(v1::RankState::RUNNING);
  e.mutable_rank_state()->set_pid(1234);
  e.mutable_rank_state()->set_worker("w1");
  EXPECT_EQ(FormatEventText(e), "seq=3 rank=1 RUNNING pid=1234 on worker w1");

  e.mutable_rank_state()->set_state(v1::RankState::FAILED);
  e.mutable_rank_state()->set_exit_code(1);
  e.mutable_rank_state()->set_message("oom");
  e.set_attempt(2);
  EXPECT_EQ(FormatEventText(e), "seq=3 rank=1 attempt=2 FAILED pid=1234 exit_code=1 on worker w1: oom");
}

TEST(CliFormatTest, LogCompileAndStallLines) {
  v1::Event e;
  e.set_seq(7);
  e.set_rank(2);
  e.mutable_log()->set_level("warn");
  e.mutable_log()->set_message("slow data");
  EXPECT_EQ(FormatEventText(e), "seq=7 rank=2 [warn] slow data");

  v1::CompileEvent* c = e.mutable_compile();
  c->set_kind(v1::CompileEvent::RECOMPILE);
  c->set_region("attention");
  c->add_layers(1);
  c->add_layers(2);
  c->set_reason("input[0].size(1): expected 256, got 512");
  c->set_compile_ms(12.34);
  c->set_cache_entries(2);
  EXPECT_EQ(FormatEventText(e),
            "seq=7 rank=2 compile RECOMPILE region=attention layers=1,2 compile_ms=12.3 "
            "cache_entries=2: input[0].size(1): expected 256, got 512");

  v1::Stall* s = e.mutable_stall();
  s->set_collective("all_reduce");
  s->set_collective_seq(41);
  s->set_lagging_rank(3);
  s->set_waited_s(300);
  EXPECT_EQ(FormatEventText(e), "seq=7 rank=2 STALL in all_reduce #41, lagging rank 3, waited 300.0s");
}

TEST(CliFormatTest, JobsTableIsAligned) {
  v1::Job a;
  a.set_id("j-1");
  a.mutable_spec()->mutable_job()->set_name("moe-debug");
  a.set_state(v1::Job::PENDING);
  a.set_pending_reason("needs 4 slots");
  a.set_world_size(4);
  a.set_owner("alice");
  v1::Job b;
  b.set_id("j-22");
  b.mutable_spec()->mutable_job()->set_name("x");
  b.set_state(v1::Job::FAILED);
  b.set_failure_reason("rank 1 exited 1");
  b.set_world_size(1);
  b.set_owner("bob");
  EXPECT_EQ(FormatJobsTable({a, b}),
            "ID    NAME       STATE    WORLD  OWNER  REASON\n"
            "j-1   moe-debug  PENDING  4      alice  needs 4 slots\n"
            "j-22  x          FAILED   1      bob    rank 1 exited 1\n");
}

TEST(CliFormatTest, WorkersTable) {
  v1::WorkerInfo w;
  w.set_name("w1");
  w.set_slots(4);
  w.set_free_slots(3);
  w.set_connected(true);
  w.set_address("10.0.0.5:7071");
  // A worker that sent no device or capabilities (an older one) shows "-" for them;
  // without GPUs in the fleet there are no GPU columns.
  EXPECT_EQ(FormatWorkersTable({w}),
            "NAME  SLOTS  FREE  CONNECTED  ADDRESS        DEVICE  CAPABILITIES\n"
            "w1    4      3     yes        10.0.0.5:7071  -       -\n");
}

TEST(CliFormatTest, ExitCodesAndStates) {
  EXPECT_EQ(WatchExitCode(v1::Job::SUCCEEDED), 0);
  EXPECT_EQ(WatchExitCode(v1::Job::FAILED), 1);
  EXPECT_EQ(WatchExitCode(v1::Job::CANCELLED), 1);  // one code for FAILED and CANCELLED
  EXPECT_EQ(WatchExitCode(v1::Job::RUNNING), 6);
  EXPECT_FALSE(IsTerminal(v1::Job::RESTARTING));
  EXPECT_EQ(*ParseJobState("running"), v1::Job::RUNNING);
  EXPECT_EQ(*ParseJobState("Cancelled"), v1::Job::CANCELLED);
  absl::StatusOr<v1::Job::State> bad = ParseJobState("done");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("unknown job state \"done\""));
  EXPECT_FALSE(ParseJobState("state_unspecified").ok());
}

TEST(CliFormatTest, ErrorNamesTheCode) {
  EXPECT_EQ(FormatError(absl::NotFoundError("job j-9 not found")), "trainyard: NOT_FOUND: job j-9 not found");
}

}  // namespace
}  // namespace trainyard::cli

namespace trainyard::cli {
namespace {

v1::Job PendingJob(const std::string& id, int priority, int64_t created) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::Job::PENDING);
  job.set_world_size(4);
  job.mutable_spec()->mutable_job()->set_priority(priority);
  job.mutable_spec()->mutable_parallelism()->set_dp(2);
  job.mutable_spec()->mutable_parallelism()->set_tp(2);
  job.mutable_create_time()->set_seconds(created);
  return job;
}

TEST(CliFormatTest, ExplainShowsTheReasonQueueEstimateReservationAndFleet) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  v1::Job job = PendingJob("job-7", 0, 100);
  job.set_pending_reason(
      "needs 4 slots with TP=2 inside one worker; 2 free: w1=1, w2=1; reserved to start when job-3 ends");
  job.mutable_estimated_start_time()->set_seconds(1'800'000'000 + 252);
  for (int i = 0; i < 4; ++i) job.add_reserved_workers("w1");
  // Ahead of it: a higher priority job submitted later; behind: an earlier low one.
  const std::vector<v1::Job> pending = {PendingJob("job-9", 5, 300), job, PendingJob("job-2", -1, 50)};
  v1::WorkerInfo w1, w2, gone;
  w1.set_name("w1"), w1.set_slots(4), w1.set_free_slots(1), w1.set_connected(true);
  w2.set_name("w2"), w2.set_slots(2), w2.set_free_slots(1), w2.set_connected(true);
  gone.set_name("w3"), gone.set_connected(false);
  EXPECT_EQ(QueuePosition(job, pending), 2);
  EXPECT_EQ(FormatExplain(job, pending, {w1, w2, gone}, now),
            "job-7  PENDING  priority 0  world 4 (dp 2 × tp 2)\n"
            "why:        needs 4 slots with TP=2 inside one worker; 2 free: w1=1, w2=1; reserved to "
            "start when job-3 ends\n"
            "queue:      2nd of 3 pending (higher priority first, then submission order)\n"
            "estimated:  start 2027-01-15T08:04:12Z (in 4m12s), from the running jobs' measured step "
            "times and time limits\n"
            "reserved:   w1×4 (held for this job; smaller jobs start first only if they leave it "
            "alone or end before)\n"
            "fleet free: w1 1/4, w2 1/2\n");
}

TEST(CliFormatTest, ExplainOfARunningOrEndedJobSaysWhereItIs) {
  v1::Job job = PendingJob("job-1", 0, 1);
  job.set_state(v1::Job::RUNNING);
  job.set_attempt(2);
  for (const char* w : {"w1", "w1", "w2", "w2"}) job.mutable_placement()->add_ranks()->set_worker(w);
  EXPECT_EQ(FormatExplain(job, {}, {}, absl::UnixEpoch()),
            "job-1  RUNNING  priority 0  world 4 (dp 2 × tp 2)\nplaced:     attempt 2 on w1×2, w2×2\n");
  job.set_state(v1::Job::FAILED);
  job.set_failure_reason("time limit of 60 s reached (job.time_limit_s)");
  EXPECT_EQ(FormatExplain(job, {}, {}, absl::UnixEpoch()),
            "job-1  FAILED  priority 0  world 4 (dp 2 × tp 2)\n"
            "ended:      FAILED: time limit of 60 s reached (job.time_limit_s)\n");
}

TEST(CliFormatTest, DetailsShowTheLastCheckpointAndEveryFailureCause) {
  v1::Job job = PendingJob("job-3", 0, 1);
  EXPECT_EQ(FormatJobDetails(job), "");
  job.set_state(v1::Job::RUNNING);
  job.set_attempt(3);
  job.mutable_placement()->add_ranks()->set_worker("w2");
  job.mutable_last_checkpoint()->set_step(150);
  job.mutable_last_checkpoint()->set_path("/ckpt/job-3/step-150");
  job.mutable_last_checkpoint()->set_attempt(2);
  job.mutable_last_checkpoint()->set_bytes(4096);
  job.add_failure_causes("rank 1 on worker w1 failed: exit code 1");
  job.add_failure_causes("worker w1 lost (no heartbeat for 11s) running rank 0");
  const std::string details =
      "last checkpoint: step 150 at /ckpt/job-3/step-150 (attempt 2, 4096 bytes)\n"
      "failure causes (oldest first):\n"
      "  1. rank 1 on worker w1 failed: exit code 1\n"
      "  2. worker w1 lost (no heartbeat for 11s) running rank 0\n";
  EXPECT_EQ(FormatJobDetails(job), details);
  EXPECT_EQ(FormatExplain(job, {}, {}, absl::UnixEpoch()),
            "job-3  RUNNING  priority 0  world 4 (dp 2 × tp 2)\nplaced:     attempt 3 on w2×1\n" + details);
  job.clear_last_checkpoint();
  job.set_state(v1::Job::PENDING);
  job.set_pending_reason("restarting: backing off until 2023-11-14T22:13:22Z (restart 2 of 3)");
  EXPECT_THAT(FormatExplain(job, {job}, {}, absl::UnixEpoch()),
              ::testing::EndsWith("fleet free: no workers connected\nfailure causes (oldest first):\n"
                                  "  1. rank 1 on worker w1 failed: exit code 1\n"
                                  "  2. worker w1 lost (no heartbeat for 11s) running rank 0\n"));
}

// gRPC's own messages for each way a connection fails (grpc 1.51, as the CLI printed
// them against a real controller).
TEST(CliFormatTest, TheTlsHintIsForATlsProblemOnly) {
  const std::string addr = "127.0.0.1:7070";
  const absl::Status refused = absl::UnavailableError(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: "
      "Connection refused");
  for (bool tls : {false, true}) {
    const std::string hint = UnreachableHint(refused, addr, tls);
    EXPECT_EQ(hint,
              " (nothing listens at 127.0.0.1:7070: is the controller running, and is --controller (or "
              "TRAINYARD_CONTROLLER) right?)");
    EXPECT_THAT(hint, ::testing::Not(::testing::HasSubstr("TLS")));
  }
  // A plaintext client at a TLS port: the controller closes the connection.
  EXPECT_EQ(UnreachableHint(absl::UnavailableError("failed to connect to all addresses; last error: UNAVAILABLE: "
                                                   "ipv4:127.0.0.1:40963: Socket closed"),
                            addr, false),
            " (controller at 127.0.0.1:7070; plaintext: a controller that serves TLS needs --tls-ca)");
  // --tls-ca at a plaintext port, and at a controller of another CA.
  EXPECT_THAT(
      UnreachableHint(absl::UnavailableError("last error: UNKNOWN: ipv4:127.0.0.1:34323: Ssl handshake failed: "
                                             "SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number"),
                      addr, true),
      ::testing::HasSubstr("the port answered in plaintext: leave out --tls-ca"));
  EXPECT_THAT(UnreachableHint(absl::UnavailableError("Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL "
                                                     "routines::certificate verify failed"),
                              addr, true),
              ::testing::HasSubstr("its certificate is not signed by that CA, or not for this address"));
  EXPECT_EQ(UnreachableHint(absl::DeadlineExceededError("Deadline Exceeded"), addr, false),
            " (controller at 127.0.0.1:7070)");
}

}  // namespace
}  // namespace trainyard::cli
