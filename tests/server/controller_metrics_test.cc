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

}  // namespace
}  // namespace trainyard
