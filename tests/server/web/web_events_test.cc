// The events endpoint (server/web/web_api.h, web_json.h): pages read from the store
// and filtered by kind, bounded in bytes, and each event the proto3 JSON of
// trainyard.v1.Event (the one dialect the CLI and trainyard-train print), exact field
// by field, read back strictly; non-finite metrics in valid JSON.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/events/proto_json.h"
#include "tests/server/web/web_api_fixture.h"

namespace trainyard::testing {
namespace {

TEST_F(WebApiTest, EventsArePagedFromTheStoreAndFilteredByKind) {
  Append(alice_job_,
         {Step(alice_job_, 1, 5.5, 1000), Step(alice_job_, 2, 5.25, 1100),
          Compile(alice_job_, v1::CompileEvent::COMPILE, "block/moe", ""),
          Compile(alice_job_, v1::CompileEvent::RECOMPILE, "block/moe", "input[0].size(0): expected 4, got 8"),
          Step(alice_job_, 3, 5.0, 1200)});
  auto stored = store_->ReadEvents(alice_job_, 1, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_GE(stored->size(), 5u);

  // Page through everything, three at a time: the same seqs as the store, in order.
  std::vector<int64_t> seqs;
  int64_t after = 0;
  for (int pages = 0; pages < 100; ++pages) {
    WebResponse r =
        Call("/api/jobs/" + alice_job_ + "/events?after_seq=" + std::to_string(after) + "&limit=3", kViewer);
    ASSERT_EQ(r.status, 200) << r.body;
    json page = Body(r);
    // proto3 JSON writes a 64-bit integer as a decimal string.
    for (const auto& e : page["events"]) seqs.push_back(std::stoll(e["seq"].get<std::string>()));
    EXPECT_LE(page["events"].size(), 3u);
    after = page["next_after_seq"].get<int64_t>();
    EXPECT_EQ(page["last_seq"].get<int64_t>(), stored->back().seq());
    if (!page["more"].get<bool>()) break;
  }
  std::vector<int64_t> expected;
  for (const auto& e : *stored) expected.push_back(e.seq());
  EXPECT_EQ(seqs, expected);

  // Only step metrics, each under its payload's key; 64-bit integers exact, as strings.
  json page = Body(Call("/api/jobs/" + alice_job_ + "/events?kinds=step_metrics", kAlice));
  std::vector<std::pair<int64_t, double>> loss;
  for (const auto& e : page["events"]) {
    ASSERT_TRUE(e.contains("step_metrics")) << e;
    const json& m = e["step_metrics"];
    loss.emplace_back(std::stoll(m["step"].get<std::string>()), m["loss"].get<double>());
    EXPECT_EQ(m["tokens"], "1099511627776");  // 2^40, past 2^32
    EXPECT_EQ(m["expert_load"], (json{"5", "9", "1", "3"}));
  }
  EXPECT_EQ(loss, (std::vector<std::pair<int64_t, double>>{{1, 5.5}, {2, 5.25}, {3, 5.0}}));
  page = Body(Call("/api/jobs/" + alice_job_ + "/events?kinds=compile,stall", kAlice));
  ASSERT_EQ(page["events"].size(), 2u);
  EXPECT_EQ(page["events"][1]["compile"]["kind"], "RECOMPILE");
  EXPECT_EQ(page["events"][1]["compile"]["reason"], "input[0].size(0): expected 4, got 8");
  // Past the end: nothing, and the cursor stays.
  page = Body(Call("/api/jobs/" + alice_job_ + "/events?after_seq=" + std::to_string(stored->back().seq()), kAlice));
  EXPECT_TRUE(page["events"].empty());
  EXPECT_EQ(page["next_after_seq"].get<int64_t>(), stored->back().seq());
  EXPECT_FALSE(page["more"].get<bool>());
}

// One JSON dialect of an Event: a page's events are the proto3 JSON of trainyard.v1.Event
// with the .proto field names, every field present, the very bytes the CLI and
// trainyard-train print (common/events/proto_json.h), and they read back strictly. Only
// what names a file on a machine is blanked: an artifact's uri, a checkpoint's path.
TEST_F(WebApiTest, AnEventIsTheProto3JsonOfTrainyardV1Event) {
  v1::Event step = Step(alice_job_, 7, 2.25, 1536.5);  // source_seq 1
  step.mutable_time()->set_seconds(1700000000);        // 2023-11-14T22:13:20Z
  step.mutable_time()->set_nanos(250000000);
  step.mutable_step_metrics()->set_grad_norm(0.5);
  step.mutable_step_metrics()->set_mfu(0.125);
  step.mutable_step_metrics()->set_step_ms(40.5);
  step.mutable_step_metrics()->set_epoch(3);
  v1::Event artifact;
  artifact.set_job_id(alice_job_);
  artifact.set_rank(1);
  artifact.set_attempt(2);
  artifact.set_source_seq(9);
  artifact.mutable_artifact()->set_name("rank1.trace.json");
  artifact.mutable_artifact()->set_kind("trace");
  artifact.mutable_artifact()->set_size_bytes(2048);
  artifact.mutable_artifact()->set_uri("file:///var/lib/secret-w1/attempt-2/rank1.trace.json");
  artifact.mutable_artifact()->set_sha256(std::string(64, 'a'));
  v1::Event checkpoint;
  checkpoint.set_job_id(alice_job_);
  checkpoint.set_attempt(2);
  checkpoint.mutable_checkpoint()->set_step(100);
  checkpoint.mutable_checkpoint()->set_path("/mnt/secret-ckpt/job/step-100");
  checkpoint.mutable_checkpoint()->set_bytes(int64_t{5} << 32);
  checkpoint.mutable_checkpoint()->set_blocked_ms(1.5);
  checkpoint.mutable_checkpoint()->set_write_ms(20);
  checkpoint.mutable_checkpoint()->set_dp(2);
  checkpoint.mutable_checkpoint()->set_tp(1);
  checkpoint.mutable_checkpoint()->set_ep(1);
  const int64_t first = store_->LastSeq(alice_job_) + 1;
  Append(alice_job_, {step, artifact, checkpoint});

  WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=step_metrics,artifact,checkpoint", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["events"].size(), 3u) << r.body;
  const json expected_step = {{"job_id", alice_job_},
                              {"seq", std::to_string(first)},
                              {"time", "2023-11-14T22:13:20.250Z"},
                              {"rank", 0},
                              {"attempt", 1},
                              {"source_seq", "1"},
                              {"step_metrics",
                               {{"step", "7"},
                                {"loss", 2.25},
                                {"grad_norm", 0.5},
                                {"lr", 0},
                                {"tokens_per_s", 1536.5},
                                {"model_tflops", 0},
                                {"mfu", 0.125},
                                {"step_ms", 40.5},
                                {"data_ms", 0},
                                {"peak_rss_mb", 0},
                                {"expert_load", {"5", "9", "1", "3"}},
                                {"imbalance", 0},
                                {"tokens", "1099511627776"},
                                {"epoch", "3"},
                                {"peak_tensor_bytes", "0"},
                                {"dropped_tokens", "0"}}}};
  EXPECT_EQ(body["events"][0], expected_step);
  const json expected_artifact = {{"job_id", alice_job_},
                                  {"seq", std::to_string(first + 1)},
                                  {"rank", 1},
                                  {"attempt", 2},
                                  {"source_seq", "9"},
                                  {"artifact",
                                   {{"name", "rank1.trace.json"},
                                    {"kind", "trace"},
                                    {"size_bytes", "2048"},
                                    {"uri", ""},
                                    {"sha256", std::string(64, 'a')}}}};
  EXPECT_EQ(body["events"][1], expected_artifact);
  const json expected_checkpoint = {{"job_id", alice_job_},
                                    {"seq", std::to_string(first + 2)},
                                    {"rank", 0},
                                    {"attempt", 2},
                                    {"source_seq", "0"},
                                    {"checkpoint",
                                     {{"step", "100"},
                                      {"path", ""},
                                      {"bytes", "21474836480"},
                                      {"blocked_ms", 1.5},
                                      {"write_ms", 20},
                                      {"dp", 2},
                                      {"tp", 1},
                                      {"ep", 1},
                                      {"requested", false},
                                      {"metric_name", ""},
                                      {"metric", 0}}}};
  EXPECT_EQ(body["events"][2], expected_checkpoint);
  EXPECT_EQ(r.body.find("secret"), std::string::npos) << r.body;

  // The step's bytes are what proto_json prints for the stored event.
  auto stored = store_->ReadEvents(alice_job_, first, 3);
  ASSERT_TRUE(stored.ok() && stored->size() == 3u);
  EXPECT_NE(r.body.find(ToJsonLine((*stored)[0])), std::string::npos) << r.body;
  // And each reads back strictly into the generated message (unknown fields refused).
  for (size_t i = 0; i < 3; ++i) {
    v1::Event parsed;
    ASSERT_TRUE(FromJson(body["events"][i].dump(), &parsed).ok()) << body["events"][i];
    v1::Event shown = (*stored)[i];
    if (shown.has_artifact()) shown.mutable_artifact()->clear_uri();
    if (shown.has_checkpoint()) shown.mutable_checkpoint()->clear_path();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, shown)) << parsed.DebugString();
  }
}

// One stored event may be up to 1 MiB, so a page of `limit` events could be gigabytes:
// a page also ends past kMaxEventsPageBytes, and the rest follows from next_after_seq.
TEST_F(WebApiTest, AnEventsPageIsBoundedInBytes) {
  const std::string filler(900 * 1024, 'x');
  std::vector<v1::Event> big;
  for (int i = 0; i < 10; ++i) {
    v1::Event e;
    e.set_job_id(alice_job_);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_);
    e.mutable_log()->set_level("info");
    e.mutable_log()->set_message(std::to_string(i) + filler);
    big.push_back(std::move(e));
  }
  Append(alice_job_, std::move(big));
  std::string order;
  int64_t after = 0;
  int pages = 0;
  while (true) {
    WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=log&after_seq=" + std::to_string(after), kAlice);
    ASSERT_EQ(r.status, 200) << r.body.substr(0, 200);
    // The budget, plus at most the one event that passed it.
    EXPECT_LT(r.body.size(), web::kMaxEventsPageBytes + filler.size() + 4096) << "page " << pages;
    const json body = Body(r);
    EXPECT_LT(body["events"].size(), 10u) << "page " << pages;
    for (const auto& e : body["events"]) order += e["log"]["message"].get<std::string>().substr(0, 1);
    EXPECT_GT(body["next_after_seq"].get<int64_t>(), after);
    after = body["next_after_seq"].get<int64_t>();
    ++pages;
    if (!body["more"].get<bool>()) break;
    ASSERT_LT(pages, 20);
  }
  EXPECT_EQ(order, "0123456789");
  EXPECT_EQ(after, store_->LastSeq(alice_job_));
}

// A diverging run reports a NaN or infinite loss; JSON has no such numbers, so they
// come out as proto3 JSON spells them ("NaN", "Infinity", "-Infinity") and the page
// still parses.
TEST_F(WebApiTest, NonFiniteMetricsAreProto3JsonStringsInValidJson) {
  v1::Event nan_step = Step(alice_job_, 1, std::numeric_limits<double>::quiet_NaN(), 10.0);
  nan_step.mutable_step_metrics()->set_grad_norm(std::numeric_limits<double>::infinity());
  nan_step.mutable_step_metrics()->set_lr(-std::numeric_limits<double>::infinity());
  Append(alice_job_, {nan_step, Step(alice_job_, 2, 2.5, 11.0)});
  WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=step_metrics", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["events"].size(), 2u) << r.body;
  const json& d = body["events"][0]["step_metrics"];
  EXPECT_EQ(d["loss"], "NaN") << d;
  EXPECT_EQ(d["grad_norm"], "Infinity") << d;
  EXPECT_EQ(d["lr"], "-Infinity") << d;
  EXPECT_EQ(d["step"], "1");
  EXPECT_EQ(body["events"][1]["step_metrics"]["loss"], 2.5);
}

// A Validation (rank 0, every validation.freq steps) is served as the proto3 JSON of
// its payload, under "validation", filtered by that kind like any other; a diverged
// model's NaN loss is the string "NaN".
TEST_F(WebApiTest, ValidationEventsAreServedUnderTheirKind) {
  v1::Event val = Step(alice_job_, 0, 0, 0);
  val.clear_step_metrics();
  val.mutable_validation()->set_step(40);
  val.mutable_validation()->set_loss(3.125);
  val.mutable_validation()->set_tokens(int64_t{3} << 33);
  val.mutable_validation()->set_ms(812.5);
  v1::Event diverged = val;
  diverged.set_source_seq(++source_seq_);
  diverged.mutable_validation()->set_step(80);
  diverged.mutable_validation()->set_loss(std::numeric_limits<double>::quiet_NaN());
  const int64_t first = store_->LastSeq(alice_job_) + 1;
  Append(alice_job_, {Step(alice_job_, 40, 3.5, 100), val, Step(alice_job_, 41, 3.4, 100), diverged});

  WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=validation", kViewer);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["events"].size(), 2u) << r.body;
  EXPECT_EQ(body["events"][0]["seq"], std::to_string(first + 1));
  EXPECT_EQ(body["events"][0]["validation"],
            (json{{"step", "40"}, {"loss", 3.125}, {"tokens", "25769803776"}, {"ms", 812.5}}));
  EXPECT_EQ(body["events"][1]["validation"]["step"], "80");
  EXPECT_EQ(body["events"][1]["validation"]["loss"], "NaN");
  // Both kinds at once, in seq order.
  const json both = Body(
      Call("/api/jobs/" + alice_job_ + "/events?kinds=validation,step_metrics&after_seq=" + std::to_string(first - 1),
           kViewer));
  std::vector<std::string> kinds;
  for (const auto& e : both["events"]) kinds.push_back(e.contains("validation") ? "validation" : "step_metrics");
  EXPECT_EQ(kinds, (std::vector<std::string>{"step_metrics", "validation", "step_metrics", "validation"}));
}

// The job page asks for the kinds it charts in one query: that query names validation
// (the loss chart's second series) and every kind in it is one the API knows, so the
// page's request is answered, not refused with a 400.
TEST_F(WebApiTest, TheJobPageAsksForValidationEvents) {
  WebResponse page = Call("/job_page.js", "");
  ASSERT_EQ(page.status, 200);
  const std::string marker = "const EVENT_KINDS = '";
  const size_t at = page.body.find(marker);
  ASSERT_NE(at, std::string::npos) << "job_page.js names its kinds in EVENT_KINDS";
  const size_t start = at + marker.size();
  const std::string kinds = page.body.substr(start, page.body.find('\'', start) - start);
  EXPECT_NE(("," + kinds + ",").find(",validation,"), std::string::npos) << kinds;
  EXPECT_NE(("," + kinds + ",").find(",step_metrics,"), std::string::npos) << kinds;
  WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=" + kinds, kViewer);
  EXPECT_EQ(r.status, 200) << kinds << " -> " << r.body.substr(0, 300);
  // That the loss chart draws them (data-validation-points) is the browser test's
  // (job_page_test.py).
}

}  // namespace
}  // namespace trainyard::testing
