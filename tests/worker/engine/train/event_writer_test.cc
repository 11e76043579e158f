// The rank's side of the event contract (common/events/rank_line.h): every kind of
// event the engine emits goes through EventWriter (or, for the watchdog's last-resort
// line, Watchdog::EmergencyStallLine) and must come back through the strict reader
// unchanged. A misspelled key anywhere fails the read.
#include <cmath>
#include <limits>
#include <sstream>

#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "common/events/rank_line.h"
#include "worker/engine/diagnostics/watchdog.h"
#include "worker/engine/train/event_writer.h"

namespace trainyard::engine {
namespace {

google::protobuf::Timestamp FixedTime() {
  google::protobuf::Timestamp t;
  t.set_seconds(1796000419);
  t.set_nanos(123000000);
  return t;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Every payload a rank writes, each field set to a value a reader must not lose.
std::vector<v1::Event> EveryEngineEvent() {
  std::vector<v1::Event> events;
  v1::Event log;
  log.mutable_log()->set_level("error");
  log.mutable_log()->set_message("rank 0: bad token in /data/x.bin: 70000 >= vocab 2048");
  events.push_back(log);

  v1::Event step;
  v1::StepMetrics* m = step.mutable_step_metrics();
  m->set_step(5);
  m->set_loss(2.5);
  m->set_grad_norm(std::numeric_limits<double>::quiet_NaN());
  m->set_lr(std::numeric_limits<double>::infinity());
  m->set_tokens_per_s(12345.5);
  m->set_model_tflops(0.25);
  m->set_mfu(0.125);
  m->set_step_ms(700.5);
  m->set_data_ms(1.5);
  m->set_peak_rss_mb(900);
  for (int64_t load : {1, 2, 3}) m->add_expert_load(load);
  m->set_imbalance(1.5);
  m->set_tokens(int64_t{1} << 40);
  m->set_epoch(3);
  events.push_back(step);

  for (int kind = v1::CompileEvent::COMPILE; kind <= v1::CompileEvent::SUMMARY; ++kind) {
    v1::Event compile;
    v1::CompileEvent* c = compile.mutable_compile();
    c->set_kind(static_cast<v1::CompileEvent::Kind>(kind));
    c->set_region("attention{dim=256,heads=8}");
    c->add_layers(1);
    c->add_layers(3);
    c->set_reason("input[0].size(1): expected 256, got 512");
    c->set_compile_ms(12.5);
    c->set_cache_entries(2);
    events.push_back(compile);
  }

  v1::Event checkpoint;
  v1::CheckpointSaved* ck = checkpoint.mutable_checkpoint();
  ck->set_step(10);
  ck->set_path("/ck/job-1/step-00000010-attempt-1");
  ck->set_bytes(4096);
  ck->set_blocked_ms(3.5);
  ck->set_write_ms(40.25);
  ck->set_dp(2);
  ck->set_tp(2);
  ck->set_ep(4);
  events.push_back(checkpoint);

  v1::Event validation;
  v1::Validation* v = validation.mutable_validation();
  v->set_step(40);
  v->set_loss(5.125);
  v->set_tokens(8192);
  v->set_ms(130.5);
  events.push_back(validation);

  v1::Event stall;
  v1::Stall* st = stall.mutable_stall();
  st->set_collective("dp0:allreduce");
  st->set_collective_seq(17);
  st->set_lagging_rank(1);
  st->set_waited_s(300.5);
  st->set_message("rank 0 waited 300.5 s in dp0:allreduce #17");
  st->add_waiting_ranks(0);
  st->add_waiting_ranks(2);
  st->set_step(9);
  events.push_back(stall);

  v1::Event artifact;
  *artifact.mutable_artifact() =
      ArtifactRefOf({"/run/artifacts/trace-a1-r0-s00000002.json", 77, std::string(64, 'a')},
                    "trace-a1-r0-s00000002.json", "trace");
  events.push_back(artifact);
  return events;
}

void Write(EventWriter& w, const v1::Event& e) {
  if (e.has_log()) w.Log(e.log().level(), e.log().message());
  if (e.has_step_metrics()) w.Step(e.step_metrics());
  if (e.has_compile()) w.Compile(e.compile());
  if (e.has_checkpoint()) w.Checkpoint(e.checkpoint());
  if (e.has_validation()) w.Validation(e.validation());
  if (e.has_stall()) w.Stall(e.stall());
  if (e.has_artifact()) w.Artifact(e.artifact());
}

TEST(EventContractTest, EveryEventTheEngineWritesReadsBackStrictlyAndUnchanged) {
  std::ostringstream out;
  EventWriter w(out, &FixedTime);
  const std::vector<v1::Event> events = EveryEngineEvent();
  for (const v1::Event& e : events) Write(w, e);
  const std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), events.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(LooksLikeEvent(lines[i])) << lines[i];
    absl::StatusOr<v1::Event> back = ParseRankLine(lines[i]);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << lines[i];
    v1::Event want = events[i];
    *want.mutable_time() = FixedTime();
    std::string diff;
    google::protobuf::util::DefaultFieldComparator doubles;
    doubles.set_treat_nan_as_equal(true);  // grad_norm is NaN on purpose
    google::protobuf::util::MessageDifferencer differ;
    differ.set_field_comparator(&doubles);
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(want, *back)) << diff << "\n" << lines[i];
    // The rank stamps nothing its reader stamps.
    for (const char* stamped : {"\"rank\"", "\"attempt\"", "\"source_seq\"", "\"seq\"", "\"job_id\""}) {
      EXPECT_EQ(lines[i].find(stamped), std::string::npos) << stamped << " in " << lines[i];
    }
  }
  EXPECT_NE(lines[1].find("\"grad_norm\":\"NaN\""), std::string::npos) << lines[1];
}

TEST(EventContractTest, TheWatchdogsLastResortLineIsAStrictEventToo) {
  char buf[1024];
  for (const char* collective : {"dp0:allreduce", ""}) {
    const std::size_t n =
        Watchdog::EmergencyStallLine(buf, sizeof(buf), "2026-12-01T10:00:00.250Z", collective, 17, 3, 301.25, 42);
    ASSERT_GT(n, 0u);
    const std::vector<std::string> lines = Lines(std::string(buf, n));
    ASSERT_EQ(lines.size(), 2u);  // a newline first, so a half-written line before it stays apart
    EXPECT_TRUE(lines[0].empty());
    absl::StatusOr<v1::Event> e = ParseRankLine(lines[1]);
    ASSERT_TRUE(e.ok()) << e.status() << "\n" << lines[1];
    ASSERT_TRUE(e->has_stall());
    EXPECT_EQ(e->stall().collective(), collective);
    EXPECT_EQ(e->stall().collective_seq(), 17);
    EXPECT_EQ(e->stall().lagging_rank(), collective[0] ? -1 : 3);
    EXPECT_DOUBLE_EQ(e->stall().waited_s(), 301.25);
    EXPECT_EQ(e->stall().step(), 42);
    ASSERT_EQ(e->stall().waiting_ranks_size(), 1);
    EXPECT_EQ(e->stall().waiting_ranks(0), 3);
    EXPECT_EQ(e->time().seconds(), 1796119200);
  }
}

TEST(EventContractTest, AMisspelledFieldAnywhereFailsTheRead) {
  std::ostringstream out;
  EventWriter w(out, &FixedTime);
  for (const v1::Event& e : EveryEngineEvent()) Write(w, e);
  const std::vector<std::string> lines = Lines(out.str());
  const std::pair<const char*, const char*> typos[] = {
      {"\"step_metrics\"", "\"step_metric\""}, {"\"grad_norm\"", "\"grad_nrom\""}, {"\"kind\"", "\"knd\""},
      {"\"blocked_ms\"", "\"blocked\""},       {"\"lagging_rank\"", "\"laggin_rank\""}, {"\"sha256\"", "\"sha\""},
      {"\"message\"", "\"mesage\""},           {"\"time\"", "\"when\""}};
  for (const auto& [right, wrong] : typos) {
    bool tried = false;
    for (const std::string& line : lines) {
      const std::size_t at = line.find(right);
      if (at == std::string::npos) continue;
      std::string bad = line;
      bad.replace(at, std::string(right).size(), wrong);
      absl::StatusOr<v1::Event> e = ParseRankLine(bad);
      EXPECT_FALSE(e.ok()) << "accepted " << bad;
      if (!e.ok()) {
        EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
      }
      tried = true;
    }
    EXPECT_TRUE(tried) << right << " appears in no line";
  }
}

TEST(EventContractTest, ReaderRefusesLinesARankMayNotWrite) {
  EXPECT_FALSE(ParseRankLine("{}").ok());
  EXPECT_FALSE(ParseRankLine("{\"time\":\"2026-12-01T10:00:00Z\"}").ok());
  EXPECT_FALSE(ParseRankLine("{\"job_state\":{\"state\":\"SUCCEEDED\"}}").ok());
  EXPECT_FALSE(ParseRankLine("{\"log\":{\"level\":\"info\"}").ok());  // cut short
  EXPECT_FALSE(ParseRankLine("{\"log\":{\"level\":\"info\"},\"compile\":{}}").ok());  // two payloads
  EXPECT_FALSE(LooksLikeEvent("step 5 loss 2.5"));
  EXPECT_TRUE(LooksLikeEvent("  {\"log\":{}}"));
  // Stamps a line carries are the reader's to set: cleared, not trusted.
  absl::StatusOr<v1::Event> e = ParseRankLine("{\"rank\":7,\"attempt\":9,\"source_seq\":99,\"log\":{\"level\":\"info\"}}");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->rank(), 0);
  EXPECT_EQ(e->attempt(), 0);
  EXPECT_EQ(e->source_seq(), 0);
}

TEST(EventContractTest, InvalidUtf8InAMessageIsReplacedNotLost) {
  std::ostringstream out;
  EventWriter w(out, &FixedTime);
  w.Log("error", std::string("cannot open /data/\xff\xfe.bin"));
  const std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 1u);
  absl::StatusOr<v1::Event> e = ParseRankLine(lines[0]);
  ASSERT_TRUE(e.ok()) << e.status() << "\n" << lines[0];
  EXPECT_EQ(e->log().message(), "cannot open /data/\xef\xbf\xbd\xef\xbf\xbd.bin");
}

TEST(EventWriterTest, NowIsTheWallClockInMilliseconds) {
  const google::protobuf::Timestamp t = EventWriter::Now();
  EXPECT_GT(t.seconds(), 1700000000);
  EXPECT_EQ(t.nanos() % 1000000, 0);
}

}  // namespace
}  // namespace trainyard::engine
