// The controller's Prometheus series as a scrape sees them (the text exposition format).
#include "server/controller_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

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

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

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
  EXPECT_TRUE(Has(text, "trainyard_job_recompiles_total{job_id=\"job-2\",region=\"layer0.attention\"} 2"))
      << text;
  EXPECT_TRUE(Has(text, "trainyard_job_recompiles_total{job_id=\"job-2\",region=\"other\"} 45")) << text;
  size_t series = 0;
  for (size_t at = text.find("trainyard_job_recompiles_total{"); at != std::string::npos;
       at = text.find("trainyard_job_recompiles_total{", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 256u + 1u);
}

TEST(ControllerMetricsTest, GrpcCallsAreCountedByMethodAndCodeWithBoundedLabels) {
  ControllerMetrics metrics;
  metrics.GrpcStarted("/trainyard.v1.JobService/SubmitJob");
  metrics.GrpcHandled("/trainyard.v1.JobService/SubmitJob", 3, true, absl::Milliseconds(2));
  metrics.GrpcHandled("/evil.Service/" + std::string(1000, 'm'), 12, true, absl::Milliseconds(1));
  metrics.GrpcHandled("/trainyard.v1.JobService/SubmitJob", 99, true, absl::Milliseconds(1));
  const std::string text = Scrape(metrics);
  EXPECT_TRUE(Has(text, "trainyard_grpc_server_started_total{grpc_method=\"SubmitJob\",grpc_service=\"trainyard.v1.JobService\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "trainyard_grpc_server_handled_total{grpc_code=\"INVALID_ARGUMENT\",grpc_method=\"SubmitJob\",grpc_service=\"trainyard.v1.JobService\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "trainyard_grpc_server_handled_total{grpc_code=\"UNIMPLEMENTED\",grpc_method=\"unknown\",grpc_service=\"unknown\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "trainyard_grpc_server_handled_total{grpc_code=\"UNKNOWN\",grpc_method=\"SubmitJob\",grpc_service=\"trainyard.v1.JobService\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "trainyard_grpc_server_handling_seconds_count{grpc_method=\"SubmitJob\",grpc_service=\"trainyard.v1.JobService\"} 2"))
      << text;
}

}  // namespace
}  // namespace trainyard
