// The MLflow exporter against tests/fakes/fake_mlflow_server.h, over a real SQLite
// store: what it sends, and every way an MLflow can misbehave (errors, HTML, ten
// megabytes, a redirect loop, wrong JSON, a reply lost to a timeout, TLS to a plain
// port, nothing listening): ingestion never waits, and once MLflow answers properly
// every step is there exactly once.
#include "server/mlflow/mlflow_exporter.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <cctype>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "server/store/sqlite_job_store.h"
#include "tests/fakes/fake_mlflow_server.h"
#include "tests/support/temp_dir.h"

namespace trainyard::mlflow {
namespace {

using testing::FakeHttpRequest;
using testing::FakeHttpServer;
using testing::FakeMlflowServer;

constexpr absl::Duration kWait = absl::Seconds(60);

// Metric points stored once each, over every key.
int UniquePoints(const FakeMlflowServer::Run& run) {
  int n = 0;
  for (const auto& [key, points] : run.metrics) n += static_cast<int>(points.size());
  return n;
}

double Loss(int64_t step) { return 10.0 / static_cast<double>(step + 1); }

v1::Event StepEvent(int64_t step, int attempt = 1) {
  v1::Event e;
  e.set_rank(0);
  e.set_attempt(attempt);
  e.set_source_seq(step + 1000 * attempt);
  // A later attempt redoes steps later.
  e.mutable_time()->set_seconds(1700000000 + step + 100 * (attempt - 1));
  e.mutable_step_metrics()->set_step(step);
  e.mutable_step_metrics()->set_loss(Loss(step));
  e.mutable_step_metrics()->set_lr(0.001);
  return e;
}

v1::Event StateEvent(v1::Job::State state) {
  v1::Event e;
  e.set_rank(-1);
  e.mutable_time()->set_seconds(1700009999);
  e.mutable_job_state()->set_state(state);
  return e;
}

class MlflowExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteJobStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    job_.set_owner("alice");
    job_.set_state(v1::Job::RUNNING);
    job_.set_attempt(1);
    job_.mutable_spec()->mutable_job()->set_name("moe-tiny");
    job_.mutable_spec()->mutable_model()->set_dim(64);
    job_.mutable_spec()->mutable_training()->set_steps(12);
    job_.mutable_create_time()->set_seconds(1699999999);
    ASSERT_TRUE(store_->CreateJob(&job_).ok());
    options_.uri = mlflow_.uri();
    options_.experiment = "exp-a";
    options_.connect_timeout = absl::Milliseconds(500);
    options_.request_timeout = absl::Milliseconds(500);
    options_.backoff_initial = absl::Milliseconds(5);
    options_.backoff_max = absl::Milliseconds(50);
  }

  void StartExporter() {
    auto cursors = MlflowCursorStore::Open(dir_.path(), options_.uri + " " + options_.experiment);
    ASSERT_TRUE(cursors.ok()) << cursors.status();
    auto exporter = MlflowExporter::Create(
        options_, store_.get(), [this](const std::string&) -> absl::StatusOr<v1::Job> { return job_; },
        std::move(*cursors), registry_, SystemClock());
    ASSERT_TRUE(exporter.ok()) << exporter.status();
    exporter_ = std::move(*exporter);
    exporter_->Start({job_});
  }

  // Commits as the controller does: the store first, then the observer.
  void Commit(std::vector<v1::Event> events) {
    for (auto& e : events) e.set_job_id(job_.id());
    auto stored = store_->AppendEvents(job_.id(), std::move(events));
    ASSERT_TRUE(stored.ok()) << stored.status();
    if (exporter_) exporter_->OnCommitted(job_.id());
  }
  void CommitSteps(int64_t from, int64_t to, int attempt = 1) {
    std::vector<v1::Event> events;
    for (int64_t s = from; s <= to; ++s) events.push_back(StepEvent(s, attempt));
    Commit(std::move(events));
  }

  double Series(const std::string& name_and_labels) {
    const std::string text = prometheus::TextSerializer().Serialize(registry_.Collect());
    const std::size_t at = text.find("\n" + name_and_labels + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name_and_labels.size() + 2));
  }

  // The one run there is, with every step from 1 to `steps` logged exactly once with its loss.
  FakeMlflowServer::Run CheckAllSteps(int64_t steps) {
    const auto runs = mlflow_.runs();
    EXPECT_EQ(runs.size(), 1u);
    if (runs.empty()) return {};
    const FakeMlflowServer::Run run = runs.begin()->second;
    auto it = run.metrics.find("train/loss");
    EXPECT_NE(it, run.metrics.end());
    if (it == run.metrics.end()) return run;
    EXPECT_EQ(it->second.size(), static_cast<std::size_t>(steps));
    int64_t want = 1;
    for (const auto& p : it->second) {
      EXPECT_EQ(p.step, want);
      EXPECT_EQ(p.value, Loss(want));
      EXPECT_EQ(p.timestamp, (1700000000 + want) * 1000);
      ++want;
    }
    EXPECT_EQ(run.params.at("model.dim"), "64");
    EXPECT_EQ(run.params.at("job.name"), "moe-tiny");
    EXPECT_EQ(run.tags.at("trainyard.job_id"), job_.id());
    EXPECT_EQ(run.tags.at("trainyard.owner"), "alice");
    EXPECT_EQ(mlflow_.experiments().at(run.experiment_id), "exp-a");
    return run;
  }

  testing::TempDir dir_;
  std::unique_ptr<SqliteJobStore> store_;
  v1::Job job_;
  FakeMlflowServer mlflow_;
  prometheus::Registry registry_;
  MlflowExporterOptions options_;
  std::unique_ptr<MlflowExporter> exporter_;
};

TEST_F(MlflowExporterTest, OneRunPerJobWithParamsTagsEveryStepAndTheEndStatus) {
  StartExporter();
  CommitSteps(1, 6);
  // A restart: attempt 2 redoes steps 5 and 6 from a checkpoint, then ends.
  job_.set_attempt(2);
  CommitSteps(5, 12, 2);
  Commit({StateEvent(v1::Job::CANCELLED)});
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  const auto runs = mlflow_.runs();
  ASSERT_EQ(runs.size(), 1u);
  const FakeMlflowServer::Run& run = runs.begin()->second;
  EXPECT_EQ(run.name, job_.id() + " moe-tiny");
  EXPECT_EQ(run.start_time, 1699999999000);
  EXPECT_EQ(run.status, "KILLED");
  EXPECT_EQ(run.end_time, 1700009999000);
  EXPECT_EQ(run.tags.at("trainyard.attempt"), "2");
  // Steps 5 and 6 twice (once per attempt, at their own times), the rest once.
  EXPECT_EQ(run.metrics.at("train/loss").size(), 14u);
  EXPECT_EQ(run.metrics.at("train/lr").size(), 14u);
  EXPECT_EQ(run.metrics.at("job/attempt").size(), 2u);
  EXPECT_EQ(Series("trainyard_mlflow_outbox_events"), 0);
  EXPECT_EQ(Series("trainyard_mlflow_requests_total{outcome=\"failed\"}"), 0);
  EXPECT_GE(Series("trainyard_mlflow_requests_total{outcome=\"ok\"}"), 6);
  EXPECT_EQ(Series("trainyard_mlflow_events_sent_total"), 15);
}

// Each hostile answer: the fault answers every call until it has failed `n` of them,
// while the job keeps committing; then MLflow heals and everything arrives once.
struct Hostile {
  const char* name;
  std::function<void(mg_connection*, const FakeHttpRequest&)> answer;
  int answers_per_request = 1;  // a redirect loop: the request and both redirects followed
};

class MlflowHostileTest : public MlflowExporterTest, public ::testing::WithParamInterface<int> {};

std::vector<Hostile> HostileAnswers() {
  return {
      {"500", [](mg_connection* c, const FakeHttpRequest&) {
         FakeHttpServer::Reply(c, 500, R"({"error_code":"INTERNAL_ERROR","message":"db locked"})");
       }},
      {"404 html", [](mg_connection* c, const FakeHttpRequest&) {
         FakeHttpServer::Reply(c, 404, "<html>not here</html>", "", "text/html");
       }},
      {"10 MB", [](mg_connection* c, const FakeHttpRequest&) {
         FakeHttpServer::Reply(c, 200, std::string(10 << 20, 'x'));
       }},
      {"redirect loop", [](mg_connection* c, const FakeHttpRequest& r) {
         FakeHttpServer::Reply(c, 302, "", "Location: " + r.path + "\r\n");
       }, 3},
      {"html 200", [](mg_connection* c, const FakeHttpRequest&) {
         FakeHttpServer::Reply(c, 200, "<html>login</html>", "", "text/html");
       }},
      {"wrong json", [](mg_connection* c, const FakeHttpRequest&) {
         FakeHttpServer::Reply(c, 200, R"({"experiment":{"experiment_id":5},"run":[],"runs":"x"})");
       }},
      {"slow", [](mg_connection* c, const FakeHttpRequest&) {
         std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the 500 ms timeout
         FakeHttpServer::Reply(c, 200, "{}");
       }},
  };
}

TEST_P(MlflowHostileTest, EachBadAnswerIsRetriedWithoutHoldingIngestionAndNothingIsLost) {
  const Hostile hostile = HostileAnswers()[GetParam()];
  SCOPED_TRACE(hostile.name);
  std::atomic<int> failed{0};
  const int n = 4;
  mlflow_.SetFault([&](mg_connection* c, const FakeHttpRequest& r) {
    if (failed.load() >= n) return false;
    ++failed;
    hostile.answer(c, r);
    return true;
  });
  StartExporter();
  CommitSteps(1, 4);
  // Ingestion goes on whatever MLflow does: these commits return while it fails.
  CommitSteps(5, 8);
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  EXPECT_GE(failed.load(), n);
  Commit({StateEvent(v1::Job::SUCCEEDED)});
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  const FakeMlflowServer::Run run = CheckAllSteps(8);
  EXPECT_EQ(run.status, "FINISHED");
  EXPECT_GE(Series("trainyard_mlflow_requests_total{outcome=\"failed\"}"), n / hostile.answers_per_request);
  EXPECT_EQ(Series("trainyard_mlflow_outbox_events"), 0);
}

INSTANTIATE_TEST_SUITE_P(Answers, MlflowHostileTest, ::testing::Range(0, 7),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name;
                           for (char c : std::string(HostileAnswers()[info.param].name)) {
                             if (std::isalnum(static_cast<unsigned char>(c))) name.push_back(c);
                           }
                           return "Answer" + name;
                         });

TEST_F(MlflowExporterTest, ABatchThatLandedButWhoseAnswerWasLostIsResentAndStoredOnce) {
  // Shared: the held handler thread may still be leaving it when the test ends.
  auto release = std::make_shared<absl::Notification>();
  mlflow_.AfterNextLogBatch([release] { release->WaitForNotificationWithTimeout(absl::Seconds(30)); });
  StartExporter();
  CommitSteps(1, 5);
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  release->Notify();
  const FakeMlflowServer::Run run = CheckAllSteps(5);
  // The first batch's rows arrived twice (applied, then resent after the timeout).
  EXPECT_GT(run.rows_logged, UniquePoints(run));
  EXPECT_GE(Series("trainyard_mlflow_requests_total{outcome=\"failed\"}"), 1);
}

TEST_F(MlflowExporterTest, ARestartResumesTheSameRunFromItsCursor) {
  StartExporter();
  CommitSteps(1, 5);
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  exporter_->Stop();
  exporter_.reset();
  StartExporter();  // a new controller on the same store
  CommitSteps(6, 9);
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  const FakeMlflowServer::Run run = CheckAllSteps(9);
  // Nothing resent: the cursor said where it was.
  EXPECT_EQ(run.rows_logged, UniquePoints(run));
}

TEST_F(MlflowExporterTest, ALostCursorFindsTheRunByItsJobTagInsteadOfMakingASecond) {
  StartExporter();
  CommitSteps(1, 5);
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  exporter_.reset();
  auto db = SqliteDb::Open(dir_.path() + "/trainyard.db");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("DELETE FROM mlflow_runs").ok());
  StartExporter();
  Commit({StepEvent(6)});
  ASSERT_TRUE(exporter_->WaitIdle(kWait));
  CheckAllSteps(6);
}

TEST_F(MlflowExporterTest, AnUnreachableMlflowKeepsEveryEventInTheOutboxAndStopsPromptly) {
  for (const std::string& uri : std::vector<std::string>{"http://127.0.0.1:1", "https://127.0.0.1:" + std::to_string(mlflow_.http().port())}) {
    SCOPED_TRACE(uri);
    options_.uri = uri;
    const double failed_before = std::max(0.0, Series("trainyard_mlflow_requests_total{outcome=\"failed\"}"));
    StartExporter();
    CommitSteps(1, 3);
    // Several failed tries (connection refused, or a TLS handshake with a plain HTTP server).
    auto failed = [&] { return Series("trainyard_mlflow_requests_total{outcome=\"failed\"}") - failed_before; };
    for (int i = 0; i < 2000 && failed() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_GE(failed(), 3);
    EXPECT_EQ(Series("trainyard_mlflow_outbox_events"), static_cast<double>(store_->LastSeq(job_.id())));
    EXPECT_EQ(Series("trainyard_mlflow_outbox_jobs"), 1);
    exporter_->Stop();
    exporter_.reset();
    CommitSteps(4, 4);  // (no exporter: the store alone)
  }
  EXPECT_TRUE(mlflow_.runs().empty());
}

TEST(MlflowOptionsTest, BadUrisAndExperimentsAreRefusedNamingTheFlag) {
  struct Case {
    std::string uri, experiment, expect;
  };
  const std::vector<Case> cases = {
      {"ftp://mlflow:21", "x", "--mlflow-uri"},
      {"http://user:hunter2@mlflow:5000", "x", "--mlflow-uri"},
      {"", "x", "--mlflow-uri"},
      {"http://" + std::string(3000, 'a') + ":5000", "x", "--mlflow-uri"},
      {"http://ml\xff" "flow:5000", "x", "--mlflow-uri"},
      {"mlflow:5000", "x", "--mlflow-uri"},
      {"http://mlflow:5000", "", "--mlflow-experiment"},
      {"http://mlflow:5000", std::string(501, 'e'), "--mlflow-experiment"},
      {"http://mlflow:5000", "bad\xc3", "--mlflow-experiment"},
      {"http://mlflow:5000", "tab\there", "--mlflow-experiment"},
  };
  for (const Case& c : cases) {
    MlflowExporterOptions o;
    o.uri = c.uri;
    o.experiment = c.experiment;
    const absl::Status s = ValidateMlflowOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.uri.substr(0, 40) << " " << c.experiment.substr(0, 20);
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("hunter2"), std::string::npos) << s.message();
  }
  MlflowExporterOptions ok;
  ok.uri = "https://mlflow.example.com:5000/prefix";
  EXPECT_TRUE(ValidateMlflowOptions(ok).ok());
}

}  // namespace
}  // namespace trainyard::mlflow
