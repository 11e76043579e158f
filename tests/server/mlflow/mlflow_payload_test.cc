#include "server/mlflow/mlflow_payload.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/base/text.h"

namespace trainyard::mlflow {
namespace {

using nlohmann::json;

TEST(MlflowPayloadTest, AShortValidValueIsKeptAsItIs) {
  bool cut = true;
  EXPECT_EQ(FitValue("model.dim", 250, &cut), "model.dim");
  EXPECT_FALSE(cut);
  EXPECT_EQ(FitValue("", 10, &cut), "");
  EXPECT_FALSE(cut);
}

TEST(MlflowPayloadTest, ALongValueIsCutToTheLimitWithAMarkerNamingTheBytesCut) {
  const std::string value(10000, 'x');
  bool cut = false;
  const std::string fitted = FitValue(value, kMaxParamValueBytes, &cut);
  EXPECT_TRUE(cut);
  EXPECT_LE(fitted.size(), kMaxParamValueBytes);
  const std::size_t at = fitted.find(kTruncatedMarker);
  ASSERT_NE(at, std::string::npos);
  // What is kept plus what the marker says was cut is the whole value.
  const std::string count = fitted.substr(at + std::string(kTruncatedMarker).size(),
                                          fitted.size() - at - std::string(kTruncatedMarker).size() - 7);
  EXPECT_EQ(fitted.substr(fitted.size() - 7), " bytes]");
  EXPECT_EQ(at + std::stoul(count), value.size());
  EXPECT_EQ(fitted.substr(0, at), std::string(at, 'x'));
}

TEST(MlflowPayloadTest, ACutNeverSplitsAMultiByteCharacter) {
  std::string value;
  for (int i = 0; i < 3000; ++i) value += "\xc3\xa9";  // é, 2 bytes each: 6000 bytes
  value += "tail";
  const std::string fitted = FitValue(value, kMaxParamValueBytes);
  EXPECT_LE(fitted.size(), kMaxParamValueBytes);
  EXPECT_TRUE(IsUtf8(fitted));
  EXPECT_NE(fitted.find(kTruncatedMarker), std::string::npos);
}

TEST(MlflowPayloadTest, InvalidUtf8IsMadeValidBeforeItIsMeasured) {
  bool cut = true;
  const std::string fitted = FitValue(
      "ab\xff\xfe"
      "cd",
      100, &cut);
  EXPECT_TRUE(IsUtf8(fitted));
  EXPECT_EQ(fitted,
            "ab\xef\xbf\xbd\xef\xbf\xbd"
            "cd");
  EXPECT_FALSE(cut);
}

TEST(MlflowPayloadTest, TheSpecFlattensToDottedKeysWithItsValues) {
  v1::JobSpec spec;
  spec.mutable_job()->set_name("moe-tiny");
  spec.mutable_model()->set_dim(64);
  spec.mutable_training()->set_lr(0.003);
  spec.mutable_parallelism()->set_dp(2);
  const SpecParams p = FlattenSpec(spec);
  std::map<std::string, std::string> by_key;
  for (const KeyValue& kv : p.params) by_key[kv.key] = kv.value;
  EXPECT_EQ(by_key.at("job.name"), "moe-tiny");
  EXPECT_EQ(by_key.at("model.dim"), "64");
  EXPECT_EQ(std::stod(by_key.at("training.lr")), 0.003);
  EXPECT_EQ(by_key.at("parallelism.dp"), "2");
  EXPECT_TRUE(std::is_sorted(p.params.begin(), p.params.end(),
                             [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; }));
  EXPECT_TRUE(p.notes.empty());
}

TEST(MlflowPayloadTest, ASpecValuePastMlflowsLimitIsCutAndSaysSo) {
  v1::JobSpec spec;
  spec.mutable_job()->set_name(std::string(7000, 'n'));
  const SpecParams p = FlattenSpec(spec);
  ASSERT_EQ(p.params.size(), 1u);
  EXPECT_LE(p.params[0].value.size(), kMaxParamValueBytes);
  EXPECT_NE(p.params[0].value.find(kTruncatedMarker), std::string::npos);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("job.name is 7000 bytes"), std::string::npos) << p.notes[0];
}

v1::Event Step(int64_t seq, int64_t step, double loss, int attempt = 1) {
  v1::Event e;
  e.set_seq(seq);
  e.set_attempt(attempt);
  e.mutable_time()->set_seconds(1700000000 + step);
  e.mutable_time()->set_nanos(250000000);
  auto* m = e.mutable_step_metrics();
  m->set_step(step);
  m->set_loss(loss);
  m->set_lr(1e-3);
  m->set_grad_norm(0.5);
  m->set_tokens_per_s(1234.5);
  m->set_mfu(0.25);
  m->set_step_ms(80);
  m->set_peak_rss_mb(512);
  m->set_imbalance(1.5);
  m->set_dropped_tokens(6);
  m->add_expert_load(10);
  m->add_expert_load(30);
  return e;
}

TEST(MlflowPayloadTest, AStepReportBecomesItsMetricsAtItsStepAndTime) {
  Totals totals;
  std::vector<Metric> out;
  EXPECT_EQ(AppendEventMetrics(Step(5, 7, 2.5), &totals, &out), "");
  std::map<std::string, Metric> by_key;
  for (const Metric& m : out) by_key[m.key] = m;
  ASSERT_TRUE(by_key.count("train/loss"));
  EXPECT_EQ(by_key["train/loss"].value, 2.5);
  EXPECT_EQ(by_key["train/loss"].step, 7);
  EXPECT_EQ(by_key["train/loss"].timestamp_ms, (1700000000LL + 7) * 1000 + 250);
  EXPECT_EQ(by_key["train/lr"].value, 1e-3);
  EXPECT_EQ(by_key["train/grad_norm"].value, 0.5);
  EXPECT_EQ(by_key["train/tokens_per_s"].value, 1234.5);
  EXPECT_EQ(by_key["train/mfu"].value, 0.25);
  EXPECT_EQ(by_key["train/step_ms"].value, 80);
  EXPECT_EQ(by_key["memory/peak_rss_mb"].value, 512);
  EXPECT_EQ(by_key["moe/expert_imbalance"].value, 1.5);
  EXPECT_EQ(by_key["moe/dropped_tokens"].value, 6);
  EXPECT_EQ(by_key["moe/expert_load/1"].value, 30);
  // The first event of attempt 1 records the attempt.
  EXPECT_EQ(by_key["job/attempt"].value, 1);
  EXPECT_EQ(totals.attempt, 1);
  EXPECT_EQ(totals.last_step, 7);
}

TEST(MlflowPayloadTest, RecompilesAndStallsAreCountedAcrossEventsAtTheLatestStep) {
  Totals totals;
  std::vector<Metric> out;
  AppendEventMetrics(Step(1, 3, 1.0), &totals, &out);
  out.clear();
  v1::Event recompile;
  recompile.set_attempt(1);
  recompile.mutable_compile()->set_kind(v1::CompileEvent::RECOMPILE);
  AppendEventMetrics(recompile, &totals, &out);
  AppendEventMetrics(recompile, &totals, &out);
  v1::Event compile;
  compile.set_attempt(1);
  compile.mutable_compile()->set_kind(v1::CompileEvent::COMPILE);
  AppendEventMetrics(compile, &totals, &out);
  v1::Event stall;
  stall.set_attempt(1);
  stall.mutable_stall()->set_step(4);
  AppendEventMetrics(stall, &totals, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].key, "compile/recompiles");
  EXPECT_EQ(out[1].value, 2);
  EXPECT_EQ(out[1].step, 3);
  EXPECT_EQ(out[2].key, "job/stalls");
  EXPECT_EQ(out[2].value, 1);
  EXPECT_EQ(out[2].step, 4);
}

TEST(MlflowPayloadTest, TheJobsEndMapsToTheRunStatus) {
  EXPECT_EQ(RunStatusFor(v1::Job::SUCCEEDED), "FINISHED");
  EXPECT_EQ(RunStatusFor(v1::Job::FAILED), "FAILED");
  EXPECT_EQ(RunStatusFor(v1::Job::CANCELLED), "KILLED");
  EXPECT_EQ(RunStatusFor(v1::Job::RESTARTING), "");
  EXPECT_EQ(RunStatusFor(v1::Job::RUNNING), "");
  Totals totals;
  std::vector<Metric> out;
  v1::Event end;
  end.mutable_job_state()->set_state(v1::Job::CANCELLED);
  EXPECT_EQ(AppendEventMetrics(end, &totals, &out), "KILLED");
  EXPECT_TRUE(out.empty());
}

TEST(MlflowPayloadTest, NanAndInfinityAreSentAsProtoJsonStringsAndFiniteValuesRoundTrip) {
  const double third = 1.0 / 3.0;
  const std::string body = LogBatchBody("r1",
                                        {{"a", std::nan(""), 1, 1},
                                         {"b", std::numeric_limits<double>::infinity(), 1, 1},
                                         {"c", -std::numeric_limits<double>::infinity(), 1, 1},
                                         {"d", third, 1, 1}},
                                        {}, {});
  const json j = json::parse(body);
  EXPECT_EQ(j["metrics"][0]["value"], "NaN");
  EXPECT_EQ(j["metrics"][1]["value"], "Infinity");
  EXPECT_EQ(j["metrics"][2]["value"], "-Infinity");
  EXPECT_EQ(j["metrics"][3]["value"].get<double>(), third);
  EXPECT_EQ(j["run_id"], "r1");
}

TEST(MlflowPayloadTest, TheRunSearchFilterCannotBeBrokenOutOfByAQuote) {
  const json j = json::parse(SearchRunBody("7", "trainyard.job_id", "job-1' OR '1'='1"));
  EXPECT_EQ(j["filter"], "tags.`trainyard.job_id` = 'job-1\\' OR \\'1\\'=\\'1'");
  EXPECT_EQ(j["experiment_ids"][0], "7");
}

}  // namespace
}  // namespace trainyard::mlflow
