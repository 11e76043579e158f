// The controller's Prometheus series as a scrape sees them (the text exposition format).
#include "server/metrics/controller_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <limits>
#include <string>

namespace trainyard {
namespace {

std::string Scrape(ControllerMetrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.registry()->Collect());
}

// Prometheus sets `job` to its scrape job on every series it ingests (a target's own
// `job` label becomes `exported_job`), so per-job series carry `job_id`.
TEST(ControllerMetricsTest, PerJobSeriesAreLabelledJobId) {
  ControllerMetrics metrics;
  v1::StepMetrics step;
  step.set_step(7);
  step.set_loss(2.5);
  metrics.StepReported("job-3", step);
  v1::CompileEvent compile;
  compile.set_kind(v1::CompileEvent::RECOMPILE);
  metrics.CompileReported("job-3", compile);
  const std::string text = Scrape(metrics);
  EXPECT_NE(text.find("trainyard_job_step{job_id=\"job-3\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("trainyard_job_loss{job_id=\"job-3\"} 2.5"), std::string::npos) << text;
  EXPECT_NE(text.find("trainyard_compile_events_total{job_id=\"job-3\",kind=\"recompile\"} 1"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("job=\""), std::string::npos) << text;
}

TEST(ControllerMetricsTest, DroppedEventsAreCountedByReason) {
  ControllerMetrics metrics;
  metrics.EventsDropped("job_ended", 3);
  metrics.EventsDropped("job_ended", 2);
  EXPECT_NE(Scrape(metrics).find("trainyard_events_dropped_total{reason=\"job_ended\"} 5"), std::string::npos)
      << Scrape(metrics);
}

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(ControllerMetricsTest, TokensAccumulateOverReportsAndStepSecondsFollowTheLast) {
  ControllerMetrics metrics;
  for (int64_t tokens : {4096, 4096, 2048}) {
    v1::StepMetrics step;
    step.set_tokens(tokens);
    step.set_step_ms(250);
    metrics.StepReported("job-1", step);
  }
  v1::StepMetrics broken;
  broken.set_tokens(-5);  // a broken rank's report is not subtracted
  metrics.StepReported("job-1", broken);
  const std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_tokens_total{job_id=\"job-1\"} 10240")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_step_seconds{job_id=\"job-1\"} 0")) << text;  // the last: 0 ms
}

TEST(ControllerMetricsTest, JobsByStateAndQueueDepthFollowMoves) {
  ControllerMetrics metrics;
  metrics.JobMoved(v1::Job::STATE_UNSPECIFIED, v1::Job::PENDING);
  metrics.JobMoved(v1::Job::STATE_UNSPECIFIED, v1::Job::PENDING);
  metrics.JobMoved(v1::Job::STATE_UNSPECIFIED, v1::Job::SUCCEEDED);  // recovered, ended
  metrics.JobMoved(v1::Job::PENDING, v1::Job::SCHEDULED);
  metrics.JobMoved(v1::Job::SCHEDULED, v1::Job::SCHEDULED);  // no move
  const std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_jobs{state=\"pending\"} 1")) << text;
  EXPECT_TRUE(Has(text, "trainyard_jobs{state=\"scheduled\"} 1")) << text;
  EXPECT_TRUE(Has(text, "trainyard_jobs{state=\"succeeded\"} 1")) << text;
  EXPECT_TRUE(Has(text, "trainyard_queue_depth 1")) << text;
}

TEST(ControllerMetricsTest, RestartsStallsAndRecompilesByRegionArePerJob) {
  ControllerMetrics metrics;
  metrics.JobRestarted("job-2");
  metrics.JobRestarted("job-2");
  metrics.StallReported("job-2");
  v1::CompileEvent c;
  c.set_kind(v1::CompileEvent::RECOMPILE);
  c.set_region("layer0.attention");
  metrics.CompileReported("job-2", c);
  metrics.CompileReported("job-2", c);
  c.set_kind(v1::CompileEvent::COMPILE);  // a first compile is not a recompile
  metrics.CompileReported("job-2", c);
  // A hostile rank cannot grow the registry: long names are cut, and past 256 regions
  // a job's further regions share "other".
  c.set_kind(v1::CompileEvent::RECOMPILE);
  for (int i = 0; i < 300; ++i) {
    c.set_region("r" + std::to_string(i) + std::string(200, 'x'));
    metrics.CompileReported("job-2", c);
  }
  const std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_restarts_total{job_id=\"job-2\"} 2")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_stalls_total{job_id=\"job-2\"} 1")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_recompiles_total{job_id=\"job-2\",region=\"layer0.attention\"} 2")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_recompiles_total{job_id=\"job-2\",region=\"other\"} 45")) << text;
  size_t series = 0;
  for (size_t at = text.find("trainyard_job_recompiles_total{"); at != std::string::npos;
       at = text.find("trainyard_job_recompiles_total{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 256u + 1u);
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// expert_load {10, 30, 20, 40}: mean 25, max 40, so the ratio is 1.6; each expert's
// count is its own series, and the next step replaces them.
TEST(ControllerMetricsTest, ExpertLoadSetsPerExpertTokensAndMaxOverMean) {
  ControllerMetrics metrics;
  v1::StepMetrics step;
  for (int64_t n : {10, 30, 20, 40}) step.add_expert_load(n);
  metrics.StepReported("job-5", step);
  std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_load_imbalance_ratio{job_id=\"job-5\"} 1.6")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"0\",job_id=\"job-5\"} 10")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"3\",job_id=\"job-5\"} 40")) << text;
  EXPECT_EQ(Count(text, "trainyard_job_expert_tokens{"), 4u) << text;

  // The next step: {50, 50, 50, 50} is balanced (ratio 1).
  v1::StepMetrics even;
  for (int i = 0; i < 4; ++i) even.add_expert_load(50);
  metrics.StepReported("job-5", even);
  // Ignored: a step with no expert_load (a dense step), one with a negative count.
  v1::StepMetrics dense;
  metrics.StepReported("job-5", dense);
  v1::StepMetrics broken;
  for (int64_t n : {1, -7, 1, 1}) broken.add_expert_load(n);
  metrics.StepReported("job-5", broken);
  text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_load_imbalance_ratio{job_id=\"job-5\"} 1")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"1\",job_id=\"job-5\"} 50")) << text;
  // A dropless MoE step reports no drops: the gauge says 0.
  EXPECT_TRUE(Has(text, "trainyard_job_expert_dropped_tokens{job_id=\"job-5\"} 0")) << text;
}

// The assignments the expert capacity dropped in the last reported MoE step; a dense
// step (no expert_load) or a negative count from a broken rank leaves the gauge alone.
TEST(ControllerMetricsTest, DroppedTokensFollowTheLastMoEStep) {
  ControllerMetrics metrics;
  v1::StepMetrics step;
  for (int64_t n : {10, 30, 20, 40}) step.add_expert_load(n);
  step.set_dropped_tokens(17);
  metrics.StepReported("job-4", step);
  std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_dropped_tokens{job_id=\"job-4\"} 17")) << text;
  v1::StepMetrics dense;
  dense.set_dropped_tokens(5);
  metrics.StepReported("job-4", dense);
  v1::StepMetrics broken = step;
  broken.set_dropped_tokens(-3);
  metrics.StepReported("job-4", broken);
  text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_dropped_tokens{job_id=\"job-4\"} 17")) << text;
  step.set_dropped_tokens(2);
  metrics.StepReported("job-4", step);
  text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_dropped_tokens{job_id=\"job-4\"} 2")) << text;
  // A dense job gets no series at all.
  metrics.StepReported("job-3", dense);
  EXPECT_EQ(Scrape(metrics).find("trainyard_job_expert_dropped_tokens{job_id=\"job-3\"}"), std::string::npos);
}

TEST(ControllerMetricsTest, ExpertLoadWithoutAMeaningfulRatioSetsNoRatio) {
  ControllerMetrics metrics;
  v1::StepMetrics one;
  one.add_expert_load(12);  // one expert: max/mean is 1 by construction, not a measurement
  metrics.StepReported("job-6", one);
  v1::StepMetrics zeros;
  for (int i = 0; i < 4; ++i) zeros.add_expert_load(0);  // mean 0
  metrics.StepReported("job-7", zeros);
  const std::string text = Scrape(metrics);
  EXPECT_EQ(text.find("trainyard_job_expert_load_imbalance_ratio{"), std::string::npos) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"0\",job_id=\"job-6\"} 12")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"3\",job_id=\"job-7\"} 0")) << text;
}

// A rank cannot grow the registry: past 256 experts no series is created, but the ratio
// still covers every expert (1000 experts, the last with 1000 tokens, the rest with 1:
// mean (999 + 1000) / 1000 = 1.999, ratio 1000 / 1.999).
TEST(ControllerMetricsTest, ExpertSeriesAreCappedAt256PerJob) {
  ControllerMetrics metrics;
  v1::StepMetrics step;
  for (int i = 0; i < 999; ++i) step.add_expert_load(1);
  step.add_expert_load(1000);
  metrics.StepReported("job-8", step);
  const std::string text = Scrape(metrics);
  EXPECT_EQ(Count(text, "trainyard_job_expert_tokens{"), 256u);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"255\",job_id=\"job-8\"} 1")) << text;
  EXPECT_EQ(text.find("expert=\"256\""), std::string::npos);
  const std::string prefix = "trainyard_job_expert_load_imbalance_ratio{job_id=\"job-8\"} ";
  const size_t at = text.find(prefix);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NEAR(std::stod(text.substr(at + prefix.size())), 1000.0 / 1.999, 1e-9);
}

// Removed with the job's other series, 10 minutes (the grace) after it ends.
TEST(ControllerMetricsTest, ExpertSeriesAreSweptWithTheJob) {
  ControllerMetrics metrics;
  v1::StepMetrics step;
  for (int64_t n : {3, 5}) step.add_expert_load(n);
  metrics.StepReported("job-9", step);
  const absl::Time ended = absl::FromUnixSeconds(1000);
  metrics.JobEnded("job-9", ended);
  metrics.Sweep(ended + absl::Minutes(9), absl::Minutes(10));
  std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_expert_tokens{expert=\"1\",job_id=\"job-9\"} 5")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_load_imbalance_ratio{job_id=\"job-9\"} 1.25")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_expert_dropped_tokens{job_id=\"job-9\"} 0")) << text;
  metrics.Sweep(ended + absl::Minutes(10), absl::Minutes(10));
  text = Scrape(metrics);
  EXPECT_EQ(text.find("job-9"), std::string::npos) << text;
}

// The last validation's loss (NaN included: a diverged model) and a count of them; the
// epoch of the last step. All removed with the job's other series.
TEST(ControllerMetricsTest, ValidationLossEvaluationsAndEpochAreSweptWithTheJob) {
  ControllerMetrics metrics;
  metrics.JobStateChanged("job-4", v1::Job::SCHEDULED, absl::FromUnixSeconds(10));
  std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_validations_total{job_id=\"job-4\"} 0")) << "from placement on: " << text;
  EXPECT_EQ(text.find("trainyard_job_validation_loss{"), std::string::npos) << "no loss before one ran: " << text;
  v1::StepMetrics step;
  step.set_step(30);
  step.set_epoch(2);
  metrics.StepReported("job-4", step);
  v1::Validation v;
  v.set_step(20);
  v.set_loss(3.75);
  metrics.ValidationReported("job-4", v);
  v.set_step(30);
  v.set_loss(3.5);
  metrics.ValidationReported("job-4", v);
  text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_validation_loss{job_id=\"job-4\"} 3.5")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_validations_total{job_id=\"job-4\"} 2")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_epoch{job_id=\"job-4\"} 2")) << text;
  v.set_loss(std::numeric_limits<double>::quiet_NaN());
  metrics.ValidationReported("job-4", v);
  text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_validation_loss{job_id=\"job-4\"} Nan")) << text;
  const absl::Time ended = absl::FromUnixSeconds(1000);
  metrics.JobEnded("job-4", ended);
  metrics.Sweep(ended + absl::Minutes(10), absl::Minutes(10));
  text = Scrape(metrics);
  EXPECT_EQ(text.find("job-4"), std::string::npos) << text;
}

// Retention's figures: freed bytes add up over prunes, kept bytes and count are the last
// prune's; no series before the first prune, none after the job is swept.
TEST(ControllerMetricsTest, CheckpointRetentionBytesAreCountedAndSweptWithTheJob) {
  ControllerMetrics metrics;
  metrics.JobStateChanged("job-5", v1::Job::SCHEDULED, absl::FromUnixSeconds(10));
  std::string text = Scrape(metrics);
  EXPECT_EQ(text.find("trainyard_job_checkpoint_bytes_kept{"), std::string::npos) << text;
  v1::CheckpointsPruned p;
  p.set_step(10);
  p.set_bytes_freed(1500);
  p.set_bytes_kept(9000);
  p.set_kept(3);
  metrics.CheckpointsPruned("job-5", p);
  p.set_step(20);
  p.set_bytes_freed(2500);
  p.set_bytes_kept(8000);
  p.set_kept(2);
  metrics.CheckpointsPruned("job-5", p);
  p.set_step(30);
  p.set_bytes_freed(0);  // nothing to remove this time
  metrics.CheckpointsPruned("job-5", p);
  text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_job_checkpoint_bytes_freed_total{job_id=\"job-5\"} 4000")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_checkpoint_bytes_kept{job_id=\"job-5\"} 8000")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_checkpoints_kept{job_id=\"job-5\"} 2")) << text;
  const absl::Time ended = absl::FromUnixSeconds(1000);
  metrics.JobEnded("job-5", ended);
  metrics.Sweep(ended + absl::Minutes(10), absl::Minutes(10));
  text = Scrape(metrics);
  EXPECT_EQ(text.find("job-5"), std::string::npos) << text;
}

TEST(ControllerMetricsTest, GrpcCallsAreCountedByMethodAndCodeWithBoundedLabels) {
  ControllerMetrics metrics;
  metrics.GrpcStarted("/trainyard.v1.JobService/SubmitJob");
  metrics.GrpcHandled("/trainyard.v1.JobService/SubmitJob", 3, true, absl::Milliseconds(2));
  metrics.GrpcHandled("/evil.Service/" + std::string(1000, 'm'), 12, true, absl::Milliseconds(1));
  metrics.GrpcHandled("/trainyard.v1.JobService/SubmitJob", 99, true, absl::Milliseconds(1));
  const std::string text = Scrape(metrics);
  EXPECT_TRUE(
      Has(text,
          "trainyard_grpc_server_started_total{grpc_method=\"SubmitJob\",grpc_service=\"trainyard.v1.JobService\"} 1"))
      << text;
  EXPECT_TRUE(Has(text,
                  "trainyard_grpc_server_handled_total{grpc_code=\"INVALID_ARGUMENT\",grpc_method=\"SubmitJob\",grpc_"
                  "service=\"trainyard.v1.JobService\"} 1"))
      << text;
  EXPECT_TRUE(Has(text,
                  "trainyard_grpc_server_handled_total{grpc_code=\"UNIMPLEMENTED\",grpc_method=\"unknown\",grpc_"
                  "service=\"unknown\"} 1"))
      << text;
  EXPECT_TRUE(Has(text,
                  "trainyard_grpc_server_handled_total{grpc_code=\"UNKNOWN\",grpc_method=\"SubmitJob\",grpc_service="
                  "\"trainyard.v1.JobService\"} 1"))
      << text;
  EXPECT_TRUE(Has(text,
                  "trainyard_grpc_server_handling_seconds_count{grpc_method=\"SubmitJob\",grpc_service=\"trainyard.v1."
                  "JobService\"} 2"))
      << text;
}

}  // namespace
}  // namespace trainyard
