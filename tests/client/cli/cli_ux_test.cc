// The CLI's pure formatting: sparkline, ETA, the status line, the exit-code table,
// compile hints, and `get`/`explain` descriptions folded from events.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/cli/cli_format.h"
#include "client/cli/job_view.h"
#include "client/cli/watch_display.h"

namespace trainyard::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

google::protobuf::Timestamp StampAt(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(1796083200 + seconds);  // 2026-12-01T00:00:00Z
  return t;
}

v1::Event StepEvent(int64_t seq, int64_t step, double loss, int64_t at_s, int attempt = 1, int rank = 0) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_seq(seq);
  e.set_rank(rank);
  e.set_attempt(attempt);
  *e.mutable_time() = StampAt(at_s);
  e.mutable_step_metrics()->set_step(step);
  e.mutable_step_metrics()->set_loss(loss);
  e.mutable_step_metrics()->set_tokens_per_s(1500);
  return e;
}

v1::Event ValEvent(int64_t seq, int64_t step, double loss, int64_t at_s, int attempt = 1) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_seq(seq);
  e.set_rank(0);
  e.set_attempt(attempt);
  *e.mutable_time() = StampAt(at_s);
  e.mutable_validation()->set_step(step);
  e.mutable_validation()->set_loss(loss);
  e.mutable_validation()->set_tokens(8192);
  e.mutable_validation()->set_ms(41.6);
  return e;
}

v1::Event StateEvent(int64_t seq, v1::Job::State state, const std::string& reason, int64_t at_s, int attempt = 0) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_seq(seq);
  e.set_rank(-1);
  e.set_attempt(attempt);
  *e.mutable_time() = StampAt(at_s);
  e.mutable_job_state()->set_state(state);
  e.mutable_job_state()->set_reason(reason);
  return e;
}

v1::Event CompileEv(int64_t seq, v1::CompileEvent::Kind kind, const std::string& region, const std::string& reason,
                    int rank = 0) {
  v1::Event e;
  e.set_seq(seq);
  e.set_rank(rank);
  e.set_attempt(1);
  *e.mutable_time() = StampAt(seq);
  e.mutable_compile()->set_kind(kind);
  e.mutable_compile()->set_region(region);
  e.mutable_compile()->set_reason(reason);
  return e;
}

TEST(SparklineTest, ScalesBetweenMinAndMax) {
  EXPECT_EQ(Sparkline({1, 2, 3, 4, 5, 6, 7, 8}, 8), "▁▂▃▄▅▆▇█");
  EXPECT_EQ(Sparkline({8, 1}, 8), "█▁");
  // (5-1)/(9-1)*7 = 3.5 rounds to 4: ▅.
  EXPECT_EQ(Sparkline({1, 5, 9}, 8), "▁▅█");
  EXPECT_EQ(Sparkline({3, 3, 3}, 8), "▄▄▄");
  EXPECT_EQ(Sparkline({}, 8), "");
}

TEST(SparklineTest, KeepsTheNewestWidthValuesAndBlanksNonFinite) {
  // Only the last 3 (7, 8, 9) count: 1..6 would otherwise set the minimum.
  EXPECT_EQ(Sparkline({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3), "▁▅█");
  EXPECT_EQ(Sparkline({1, std::nan(""), 2}, 8), "▁ █");
  EXPECT_EQ(DisplayWidth("▁▅█ ab"), 6u);
}

TEST(StepRateTest, EtaFromTheMeasuredRate) {
  StepRate rate;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(rate.Eta(100).has_value());
  rate.Add(10, t0);
  EXPECT_FALSE(rate.Eta(100).has_value()) << "one report gives no rate";
  rate.Add(20, t0 + absl::Seconds(5));  // 2 steps/s
  ASSERT_TRUE(rate.Eta(100).has_value());
  EXPECT_EQ(*rate.Eta(100), absl::Seconds(40));  // 80 steps left at 2/s
  rate.Add(20, t0 + absl::Seconds(9));           // another rank's report of step 20: ignored
  EXPECT_EQ(*rate.Eta(100), absl::Seconds(40));
  EXPECT_EQ(*rate.Eta(20), absl::ZeroDuration());
  // A restart resumes at an earlier step: the rate starts over.
  rate.Add(15, t0 + absl::Seconds(30));
  EXPECT_FALSE(rate.Eta(100).has_value());
}

TEST(HumanDurationTest, Units) {
  EXPECT_EQ(HumanDuration(absl::Seconds(42)), "42s");
  EXPECT_EQ(HumanDuration(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(HumanDuration(absl::Seconds(7380)), "2h03m");
  EXPECT_EQ(HumanDuration(absl::Seconds(-3)), "0s");
}

TEST(StatusLineTest, ShowsEveryPartAndDropsTailPartsToFit) {
  WatchStatus s;
  s.job_id = "job-7";
  s.state = v1::Job::RUNNING;
  s.step = 12;
  s.total_steps = 20;
  s.losses = {6.0, 5.0, 4.0};
  s.loss = 4.0;
  s.tokens_per_s = 1520;
  s.mfu = 0.312;
  s.eta = absl::Seconds(12);
  s.recompiles = 2;
  s.have_step = true;
  const std::string full = FormatStatusLine(s, 0);
  EXPECT_EQ(full, "job-7 RUNNING  step 12/20  █▅▁ loss 4.0000  1520 tok/s  MFU 31.2%  ETA 12s  recompiles 2");
  // 45 columns: whole parts only, never past the width (the sparkline counts 3).
  const std::string narrow = FormatStatusLine(s, 45);
  EXPECT_LE(DisplayWidth(narrow), 45u);
  EXPECT_EQ(narrow, "job-7 RUNNING  step 12/20  █▅▁ loss 4.0000");
  s.state = v1::Job::SUCCEEDED;
  EXPECT_THAT(FormatStatusLine(s, 0), Not(HasSubstr("ETA"))) << "no ETA once the job ended";
  WatchStatus waiting;
  waiting.job_id = "job-8";
  waiting.state = v1::Job::PENDING;
  EXPECT_EQ(FormatStatusLine(waiting, 0), "job-8 PENDING  waiting for the first step");
  // A dataset with epochs, and a validation run: both right after the training loss.
  s.state = v1::Job::RUNNING;
  s.epoch = 2;
  s.have_validation = true;
  s.val_loss = 4.25;
  s.val_step = 10;
  EXPECT_EQ(FormatStatusLine(s, 0),
            "job-7 RUNNING  step 12/20 epoch 2  █▅▁ loss 4.0000  val 4.2500@10  1520 tok/s  MFU 31.2%  ETA 12s  "
            "recompiles 2");
}

TEST(ExitCodeTest, OneTableForEveryStatus) {
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeForStatus(absl::InvalidArgumentError("x")), 2);
  EXPECT_EQ(ExitCodeForStatus(absl::NotFoundError("x")), 3);
  EXPECT_EQ(ExitCodeForStatus(absl::PermissionDeniedError("x")), 4);
  EXPECT_EQ(ExitCodeForStatus(absl::UnauthenticatedError("x")), 4);
  EXPECT_EQ(ExitCodeForStatus(absl::UnavailableError("x")), 5);
  EXPECT_EQ(ExitCodeForStatus(absl::DeadlineExceededError("x")), 5);
  EXPECT_EQ(ExitCodeForStatus(absl::FailedPreconditionError("x")), 6);
  EXPECT_EQ(ExitCodeForStatus(absl::InternalError("x")), 6);
  EXPECT_EQ(WatchExitCode(v1::Job::SUCCEEDED), 0);
  EXPECT_EQ(WatchExitCode(v1::Job::FAILED), 1);
  EXPECT_EQ(WatchExitCode(v1::Job::CANCELLED), 1);
  EXPECT_EQ(WatchExitCode(v1::Job::RUNNING), 6);
  const std::string table = ExitCodeTable();
  for (int code = 0; code <= 6; ++code) {
    EXPECT_THAT(table, HasSubstr("  " + std::to_string(code) + "  ")) << "code " << code << " undocumented";
  }
}

TEST(CompileHintTest, KnownCausesGetAHint) {
  EXPECT_THAT(CompileHint("input[0].size(1): expected 256, got 200"), HasSubstr("shape changed"));
  EXPECT_THAT(CompileHint("grad_mode: expected true, got false"), HasSubstr("autograd"));
  EXPECT_THAT(CompileHint("param[3].requires_grad: expected true, got false"), HasSubstr("requires_grad"));
  EXPECT_THAT(CompileHint("input[1].dtype: expected float, got c10::BFloat16"), HasSubstr("dtype"));
  EXPECT_THAT(CompileHint("input count: expected 2, got 3"), HasSubstr("number of tensors"));
  EXPECT_THAT(CompileHint("recompile_limit (8) reached; last failed guard: none"), HasSubstr("recompile_limit"));
  // A limit reason quotes the guard: the guard's hint wins.
  EXPECT_THAT(CompileHint("recompile_limit (8) reached; last failed guard: input[0].size(0): expected 8, got 3"),
              HasSubstr("shape changed"));
  EXPECT_THAT(CompileHint("reads rope.cos without receiving it (the trace would bake it in as a constant); "
                          "the region runs eager from now on"),
              HasSubstr("pass it as an input"));
  EXPECT_EQ(CompileHint("something new"), "");
}

TEST(JobHistoryTest, SummaryCountsAndRegions) {
  int64_t hits = 0, misses = 0;
  EXPECT_TRUE(ParseSummaryCounts("hits=12 misses=3 eager_fallbacks=0 entries=2 backend=jit", &hits, &misses));
  EXPECT_EQ(hits, 12);
  EXPECT_EQ(misses, 3);
  EXPECT_FALSE(ParseSummaryCounts("misses=3", &hits, &misses));

  JobHistory h;
  h.Add(CompileEv(1, v1::CompileEvent::COMPILE, "moe_router", "backend=jit", 0));
  h.Add(CompileEv(2, v1::CompileEvent::COMPILE, "moe_router", "backend=jit", 1));
  h.Add(CompileEv(3, v1::CompileEvent::RECOMPILE, "moe_router", "input[0].size(0): expected 8, got 3", 0));
  h.Add(CompileEv(4, v1::CompileEvent::COMPILE, "attention", "backend=jit", 0));
  h.Add(CompileEv(5, v1::CompileEvent::SUMMARY, "moe_router", "hits=10 misses=2 eager_fallbacks=0", 0));
  h.Add(CompileEv(6, v1::CompileEvent::SUMMARY, "moe_router", "hits=4 misses=1 eager_fallbacks=0", 1));
  // A newer summary of rank 0 replaces its older one.
  h.Add(CompileEv(7, v1::CompileEvent::SUMMARY, "moe_router", "hits=20 misses=2 eager_fallbacks=0", 0));
  const std::vector<RegionCompileStats> regions = h.Regions();
  ASSERT_EQ(regions.size(), 2u);
  EXPECT_EQ(regions[0].region, "moe_router");
  EXPECT_EQ(regions[0].compiles, 2);
  EXPECT_EQ(regions[0].recompiles, 1);
  EXPECT_EQ(regions[0].hits, 24);
  EXPECT_EQ(regions[0].misses, 3);
  EXPECT_EQ(regions[0].last_recompile_reason, "input[0].size(0): expected 8, got 3");
  EXPECT_EQ(regions[1].region, "attention");
  EXPECT_EQ(regions[1].hits, -1);
  EXPECT_EQ(h.recompiles(), 1);
}

// A job that failed once (rank 1 died), restarted and succeeded.
JobHistory RestartedJob(v1::Job* job) {
  job->set_id("job-1");
  job->set_state(v1::Job::SUCCEEDED);
  job->set_world_size(2);
  job->mutable_spec()->mutable_job()->set_name("demo");
  job->mutable_spec()->mutable_training()->set_steps(4);
  job->mutable_spec()->mutable_restart()->set_max_restarts(2);
  job->add_failure_causes("rank 1 on w2 failed: exit code 1: boom");
  auto* r = job->mutable_placement()->add_ranks();
  r->set_rank(0);
  r->set_worker("w1");
  JobHistory h;
  int64_t seq = 0;
  h.Add(StateEvent(++seq, v1::Job::PENDING, "needs 2 slots", 0));
  h.Add(StateEvent(++seq, v1::Job::RUNNING, "", 1, 1));
  v1::Event running;
  running.set_seq(++seq);
  running.set_rank(1);
  running.set_attempt(1);
  *running.mutable_time() = StampAt(1);
  running.mutable_rank_state()->set_state(v1::RankState::RUNNING);
  running.mutable_rank_state()->set_worker("w2");
  h.Add(running);
  h.Add(StepEvent(++seq, 1, 6.0, 2));
  h.Add(StepEvent(++seq, 2, 5.0, 3));
  v1::Event failed = running;
  failed.set_seq(++seq);
  *failed.mutable_time() = StampAt(4);
  failed.mutable_rank_state()->set_state(v1::RankState::FAILED);
  failed.mutable_rank_state()->set_exit_code(1);
  failed.mutable_rank_state()->set_message("boom");
  h.Add(failed);
  h.Add(StateEvent(++seq, v1::Job::RESTARTING, "rank 1 on w2 failed: exit code 1: boom", 4, 1));
  h.Add(StepEvent(++seq, 2, 5.5, 10, 2));  // resumed from a checkpoint at step 1
  h.Add(StepEvent(++seq, 3, 4.0, 11, 2));
  h.Add(StepEvent(++seq, 4, 3.0, 12, 2));
  v1::Event stall;
  stall.set_seq(++seq);
  stall.set_rank(0);
  stall.set_attempt(2);
  *stall.mutable_time() = StampAt(12);
  stall.mutable_stall()->set_collective("dp0:allreduce");
  stall.mutable_stall()->set_collective_seq(7);
  stall.mutable_stall()->set_lagging_rank(1);
  stall.mutable_stall()->set_waited_s(30);
  h.Add(stall);
  h.Add(StateEvent(++seq, v1::Job::SUCCEEDED, "", 13, 2));
  return h;
}

TEST(JobHistoryTest, GetDescribesHistoryAttemptsMetricsAndArtifacts) {
  v1::Job job;
  const JobHistory h = RestartedJob(&job);
  EXPECT_EQ(h.restarts(), 1);
  // One loss per step per attempt: 6, 5 (attempt 1), then 5.5, 4, 3 (attempt 2).
  EXPECT_EQ(h.losses(), (std::vector<double>{6.0, 5.0, 5.5, 4.0, 3.0}));
  ASSERT_TRUE(h.last_step().has_value());
  EXPECT_EQ(h.last_step()->step_metrics().step(), 4);

  v1::ArtifactInfo a;
  a.set_name("trace-r0.json");
  a.set_kind("trace");
  a.set_size_bytes(2048);
  const std::string text = FormatJobDescription(job, h, {a});
  EXPECT_THAT(text, HasSubstr("job-1  demo  SUCCEEDED"));
  EXPECT_THAT(text, HasSubstr("00:00:00  PENDING     needs 2 slots"));
  EXPECT_THAT(text, HasSubstr("00:00:04  RESTARTING  attempt 1  rank 1 on w2 failed"));
  EXPECT_THAT(text, HasSubstr("rank 1 on w2: exit_code=1: boom"));
  EXPECT_THAT(text, HasSubstr("ended RESTARTING"));
  EXPECT_THAT(text, HasSubstr("ended SUCCEEDED"));
  EXPECT_THAT(text, HasSubstr("metrics    step 4/4 loss 3.0000"));
  // Five reports, but of steps 1 to 4: attempt 2 resumed at step 2.
  EXPECT_THAT(text, HasSubstr("(5 reports of steps 1 to 4, first 6.0000, last 3.0000)"));
  EXPECT_THAT(text, HasSubstr("workers    rank 0@w1"));
  EXPECT_THAT(text, HasSubstr("trace-r0.json"));
  EXPECT_THAT(text, HasSubstr("checkpoints none"));
}

TEST(JobHistoryTest, TheLossLineCountsStepsOnlyWhenEveryStepReported) {
  v1::Job job;
  job.set_id("job-2");
  job.set_state(v1::Job::SUCCEEDED);
  job.mutable_spec()->mutable_training()->set_steps(20);
  JobHistory every_second;  // training.log_freq = 2: steps 2, 4, ..., 20
  JobHistory every_step;
  for (int step = 1; step <= 20; ++step) {
    if (step % 2 == 0) every_second.Add(StepEvent(step, step, 7.0 - 0.1 * step, step));
    every_step.Add(StepEvent(step, step, 7.0 - 0.1 * step, step));
  }
  EXPECT_THAT(FormatJobDescription(job, every_second, {}),
              HasSubstr("(10 reports of steps 2 to 20, first 6.8000, last 5.0000)"));
  EXPECT_THAT(FormatJobDescription(job, every_step, {}), HasSubstr("(20 steps, first 6.9000, last 5.0000)"));
  JobHistory one;
  one.Add(StepEvent(1, 1, 7.0, 1));
  EXPECT_THAT(FormatJobDescription(job, one, {}), HasSubstr("(1 step, first 7.0000, last 7.0000)"));
}

TEST(JobHistoryTest, GetNamesTheShardDegreeOnlyWhenParametersAreSharded) {
  v1::Job job;
  JobHistory h = RestartedJob(&job);
  v1::ParallelismSpec* p = job.mutable_spec()->mutable_parallelism();
  p->set_dp(4);
  p->set_tp(1);
  p->set_ep(2);
  p->set_dp_shard(1);
  job.mutable_spec()->mutable_resources()->set_device("cpu");
  EXPECT_THAT(FormatJobDescription(job, h, {}), HasSubstr("\nlayout     dp 4 x tp 1, ep 2 on cpu;"));
  p->set_dp_shard(4);
  EXPECT_THAT(FormatJobDescription(job, h, {}), HasSubstr("\nlayout     dp 4 x tp 1, ep 2, dp_shard 4 on cpu;"));
}

// `get` shows the newest validation (newest attempt, then highest step; a late resend
// of an older step does not replace it), how many ran, and the last step's epoch.
TEST(JobHistoryTest, GetShowsTheLastValidationAndTheEpoch) {
  v1::Job job;
  JobHistory h = RestartedJob(&job);
  EXPECT_FALSE(h.last_validation().has_value());
  EXPECT_THAT(FormatJobDescription(job, h, {}), Not(HasSubstr("validation"))) << "[validation] off: no line";
  job.mutable_spec()->mutable_validation()->set_dataset("synthetic");
  job.mutable_spec()->mutable_validation()->set_freq(2);
  EXPECT_THAT(FormatJobDescription(job, h, {}), HasSubstr("\nvalidation none yet (every 2 steps on synthetic)\n"));

  h.Add(ValEvent(100, 2, 5.75, 5, /*attempt=*/1));
  h.Add(ValEvent(101, 2, 5.125, 11, /*attempt=*/2));
  h.Add(ValEvent(102, 4, 3.0625, 12, /*attempt=*/2));
  h.Add(ValEvent(103, 2, 9.0, 13, /*attempt=*/2));  // a late resend of step 2's
  v1::Event step = StepEvent(104, 4, 3.0, 13, 2);
  step.mutable_step_metrics()->set_epoch(3);
  h.Add(step);
  ASSERT_TRUE(h.last_validation().has_value());
  EXPECT_EQ(h.last_validation()->validation().step(), 4);
  EXPECT_EQ(h.validation_count(), 4);
  const std::string text = FormatJobDescription(job, h, {});
  EXPECT_THAT(text, HasSubstr("metrics    step 4/4 loss 3.0000"));
  EXPECT_THAT(text, HasSubstr(" epoch 3 at 00:00:13\n"));
  EXPECT_THAT(text, HasSubstr("\nvalidation step 4 loss 3.0625 (8192 tokens, 42 ms) at 00:00:12; 4 runs\n"));
}

TEST(JobHistoryTest, ExplainShowsCompileRestartsAndStalls) {
  v1::Job job;
  JobHistory h = RestartedJob(&job);
  h.Add(CompileEv(100, v1::CompileEvent::COMPILE, "moe_router", "backend=jit"));
  h.Add(CompileEv(101, v1::CompileEvent::RECOMPILE, "moe_router", "input[0].size(0): expected 8, got 3"));
  const std::string text = FormatExplainHistory(job, h);
  EXPECT_THAT(text, HasSubstr("moe_router: 1 compiles, 1 recompiles, 0 fallbacks"));
  EXPECT_THAT(text, HasSubstr("last recompile: input[0].size(0): expected 8, got 3"));
  EXPECT_THAT(text, HasSubstr("hint: an input's shape changed"));
  EXPECT_THAT(text, HasSubstr("restarts: 1 (restart.max_restarts 2)"));
  EXPECT_THAT(text, HasSubstr("after attempt 1: rank 1 on w2 failed"));
  EXPECT_THAT(text, HasSubstr("waited 30s in dp0:allreduce #7, lagging rank 1"));
  v1::Job quiet;
  EXPECT_EQ(FormatExplainHistory(quiet, JobHistory{}), "");
}

// A job of many checkpoints and stalls: `get` keeps and prints the newest few and the
// count, not one line (and one stored event) per checkpoint.
TEST(JobHistoryTest, CheckpointsAndStallsAreBounded) {
  JobHistory history;
  constexpr int kCheckpoints = 5000;
  int64_t seq = 0;
  for (int i = 1; i <= kCheckpoints; ++i) {
    v1::Event c;
    c.set_seq(++seq);
    c.set_attempt(1);
    *c.mutable_time() = StampAt(i);
    c.mutable_checkpoint()->set_step(10 * i);
    c.mutable_checkpoint()->set_path("/ckpt/job-1/step-" + std::to_string(10 * i));
    history.Add(c);
    v1::Event s;
    s.set_seq(++seq);
    s.set_attempt(1);
    *s.mutable_time() = StampAt(i);
    s.mutable_stall()->set_step(10 * i);
    history.Add(s);
  }
  EXPECT_LE(history.checkpoints().size(), 20u);
  EXPECT_LE(history.stalls().size(), 20u);
  ASSERT_FALSE(history.checkpoints().empty());
  EXPECT_EQ(history.checkpoints().back().checkpoint().step(), 10 * kCheckpoints);
  v1::Job job;
  job.set_id("job-1");
  job.set_state(v1::Job::RUNNING);
  const std::string get = FormatJobDescription(job, history, {});
  EXPECT_LT(std::count(get.begin(), get.end(), '\n'), 100) << get.substr(0, 2000);
  EXPECT_THAT(get, HasSubstr("5000 in all"));
  EXPECT_THAT(get, HasSubstr("/ckpt/job-1/step-50000"));
  EXPECT_THAT(get, Not(HasSubstr("/ckpt/job-1/step-10 ")));
  const std::string explain = FormatExplainHistory(job, history);
  EXPECT_THAT(explain, HasSubstr("stalls: 5000"));
  EXPECT_LT(std::count(explain.begin(), explain.end(), '\n'), 100);
}

// Retention: a CheckpointsPruned event takes the removed checkpoints off `get`'s list,
// which then shows the kept ones with their metric, the best marked (a NaN never is),
// and the bytes freed and kept.
TEST(JobHistoryTest, PrunedCheckpointsLeaveTheListAndTheBestIsMarked) {
  JobHistory history;
  int64_t seq = 0;
  const std::map<int, double> metric = {{5, 3.0}, {10, 1.5}, {15, std::nan("")}, {20, 2.0}};
  for (const auto& [step, value] : metric) {
    v1::Event c;
    c.set_seq(++seq);
    c.set_attempt(1);
    *c.mutable_time() = StampAt(step);
    c.mutable_checkpoint()->set_step(step);
    c.mutable_checkpoint()->set_path("/ckpt/job-1/step-" + std::to_string(step));
    c.mutable_checkpoint()->set_bytes(1000);
    c.mutable_checkpoint()->set_metric_name("val_loss");
    c.mutable_checkpoint()->set_metric(value);
    history.Add(c);
  }
  v1::Event p;
  p.set_seq(++seq);
  p.set_attempt(1);
  v1::CheckpointsPruned* pruned = p.mutable_checkpoints_pruned();
  pruned->set_step(20);
  for (int step : {5, 15}) {
    v1::CheckpointRef* r = pruned->add_removed();
    r->set_step(step);
    r->set_path("/ckpt/job-1/step-" + std::to_string(step));
    r->set_bytes(1000);
  }
  pruned->set_bytes_freed(2000);
  pruned->set_bytes_kept(2000);
  pruned->set_kept(2);
  history.Add(p);
  ASSERT_EQ(history.checkpoints().size(), 2u);
  EXPECT_EQ(history.checkpoints_removed(), 2);
  v1::Job job;
  job.set_id("job-1");
  job.set_state(v1::Job::RUNNING);
  const std::string get = FormatJobDescription(job, history, {});
  EXPECT_THAT(get, HasSubstr("checkpoints: 4 saved, 2 removed by retention ("));
  EXPECT_THAT(get, HasSubstr("/ckpt/job-1/step-10  "));
  EXPECT_THAT(get, HasSubstr("val_loss 1.5000  (best)\n"));
  EXPECT_THAT(get, HasSubstr("val_loss 2.0000\n"));
  EXPECT_THAT(get, Not(HasSubstr("/ckpt/job-1/step-5 ")));
  EXPECT_THAT(get, Not(HasSubstr("/ckpt/job-1/step-15 ")));
}

TEST(TerminalSafeTest, EscapesControlsAndInvalidUtf8AndKeepsText) {
  EXPECT_EQ(TerminalSafe("plain text, tab\there"), "plain text, tab\there");
  EXPECT_EQ(TerminalSafe("loss ▁▂█ 2×3 é 日本"), "loss ▁▂█ 2×3 é 日本");
  EXPECT_EQ(TerminalSafe("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(TerminalSafe("a\r\nb\x07\x7f"), "a\\r\\nb\\x07\\x7f");
  EXPECT_EQ(TerminalSafe("a\nb", /*keep_newlines=*/true), "a\nb");
  // C1 CSI (U+009B) and a right-to-left override (U+202E).
  EXPECT_EQ(TerminalSafe("\xc2\x9b"
                         "2J \xe2\x80\xae"),
            "\\u009b2J \\u202e");
  // Invalid UTF-8: a stray continuation byte, an overlong '/', a surrogate, a cut
  // sequence, bytes never in UTF-8.
  EXPECT_EQ(TerminalSafe("\x80|\xc0\xaf|\xed\xa0\x80|\xe6\x97|\xff\xfe"),
            "\\x80|\\xc0\\xaf|\\xed\\xa0\\x80|\\xe6\\x97|\\xff\\xfe");
  EXPECT_EQ(TerminalSafe(std::string("nul\0byte", 8)), "nul\\x00byte");
}

TEST(WatchDisplayTest, TerminalRedrawsOneLineAndPrintsNotableEventsAbove) {
  std::ostringstream out, err;
  WatchDisplay d(WatchDisplay::Mode::kTerminal, out, err, "job-1", 3, 120);
  d.OnEvent(StateEvent(1, v1::Job::RUNNING, "", 0, 1));
  d.OnEvent(StepEvent(2, 1, 6.0, 1));
  d.OnEvent(StepEvent(3, 2, 5.0, 2));
  d.OnEvent(StepEvent(4, 3, 4.0, 3));
  d.OnEvent(StateEvent(5, v1::Job::SUCCEEDED, "", 4, 1));
  d.Finish();
  const std::string s = out.str();
  // Replay the bytes as a terminal would: \r + erase-line restarts the current line.
  std::vector<std::string> screen{""};
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 5, "\r\x1b[2K") == 0) {
      screen.back().clear();
      i += 4;
    } else if (s[i] == '\n') {
      screen.emplace_back();
    } else {
      screen.back() += s[i];
    }
  }
  ASSERT_EQ(screen.size(), 4u) << s;  // two events, the status line, the empty last line
  EXPECT_EQ(screen[0], "seq=1 job RUNNING");
  EXPECT_EQ(screen[1], "seq=5 job SUCCEEDED");
  EXPECT_EQ(screen[2], "job-1 SUCCEEDED  step 3/3  █▅▁ loss 4.0000  1500 tok/s  MFU n/a  recompiles 0");
  EXPECT_EQ(screen[3], "");
  EXPECT_TRUE(err.str().empty());
  // Each step redrew the line in place: its text appeared for steps 1, 2 and 3.
  EXPECT_THAT(s, HasSubstr("step 1/3"));
  EXPECT_THAT(s, HasSubstr("step 2/3"));
  EXPECT_THAT(s, HasSubstr("ETA 1s"));  // 1 step left at 1 step/s, seen at step 2
}

// A Validation gets its own line above the status line, which then shows it; an older
// step's evaluation arriving late (another rank's resend) does not replace the newest,
// a new attempt's does.
TEST(WatchDisplayTest, AValidationIsPrintedAboveAndShownOnTheStatusLine) {
  std::ostringstream out, err;
  WatchDisplay d(WatchDisplay::Mode::kTerminal, out, err, "job-1", 20, 200);
  d.OnEvent(StepEvent(1, 10, 5.0, 1));
  d.OnEvent(ValEvent(2, 10, 5.25, 2));
  EXPECT_THAT(out.str(), HasSubstr("\r\x1b[2Kseq=2 rank=0 validation step 10 loss=5.2500 tokens=8192 ms=42\n"));
  EXPECT_TRUE(d.status().have_validation);
  EXPECT_EQ(d.status().val_loss, 5.25);
  d.OnEvent(ValEvent(3, 20, 4.5, 3));
  d.OnEvent(ValEvent(4, 10, 9.0, 4));
  EXPECT_EQ(d.status().val_step, 20);
  EXPECT_EQ(d.status().val_loss, 4.5);
  d.OnEvent(ValEvent(5, 0, 6.0, 5, /*attempt=*/2));
  EXPECT_EQ(d.status().val_step, 0) << "a restart evaluates again from its resumed step";
  EXPECT_EQ(d.status().val_loss, 6.0);
  d.Finish();
  EXPECT_THAT(out.str(), HasSubstr("val 6.0000@0"));
}

TEST(WatchDisplayTest, PlainAndJsonModesPrintOneLinePerEvent) {
  std::ostringstream out, err;
  WatchDisplay plain(WatchDisplay::Mode::kPlain, out, err, "job-1", 3, 0);
  plain.OnEvent(StepEvent(2, 1, 6.0, 1));
  plain.Warn("trainyard: connection lost");
  plain.Finish();
  EXPECT_THAT(out.str(), HasSubstr("seq=2 rank=0 step 1 loss=6.0000"));
  EXPECT_THAT(out.str(), Not(HasSubstr("\x1b")));
  EXPECT_EQ(err.str(), "trainyard: connection lost\n");
  std::ostringstream jout, jerr;
  WatchDisplay json(WatchDisplay::Mode::kJson, jout, jerr, "job-1", 3, 0);
  json.OnEvent(StepEvent(2, 1, 6.0, 1));
  EXPECT_THAT(jout.str(), HasSubstr("\"seq\":\"2\""));
  EXPECT_EQ(jout.str().back(), '\n');
}

}  // namespace
}  // namespace trainyard::cli
