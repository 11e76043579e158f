// The controller's --tensorboard-dir writer over a real SQLite store: it follows what is
// committed, never holds up the committing thread (a stuck writer only fills its
// bounded queue), retries a failed write from its durable state, and a new exporter on
// the same folder (a restarted controller) continues the files without writing a step
// twice or leaving one out.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/synchronization/notification.h"
#include "common/base/file_io.h"
#include "server/store/sqlite_job_store.h"
#include "server/tensorboard/tensorboard_exporter.h"
#include "tests/common/tensorboard/tensorboard_files.h"
#include "tests/support/temp_dir.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;

class TensorBoardExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteJobStore::Open(data_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    tb_dir_ = out_.path() + "/tb";
  }

  std::string NewJob() {
    v1::Job job;
    job.mutable_spec()->mutable_job()->set_name("tb");
    EXPECT_TRUE(store_->CreateJob(&job).ok());
    specs_[job.id()] = job.spec();
    return job.id();
  }

  void AppendSteps(const std::string& id, int attempt, int from, int to) {
    std::vector<v1::Event> events;
    for (int step = from; step <= to; ++step) {
      v1::Event e;
      e.set_attempt(attempt);
      e.set_rank(0);
      e.set_source_seq(attempt * 100000 + step);
      e.mutable_time()->set_seconds(1700000000 + step);
      e.mutable_step_metrics()->set_step(step);
      e.mutable_step_metrics()->set_loss(100.0 / step);
      events.push_back(e);
    }
    ASSERT_TRUE(store_->AppendEvents(id, events).ok());
  }

  std::unique_ptr<TensorBoardExporter> Make(int max_queued = 100,
                                            std::function<void()> on_lookup = nullptr) {
    TensorBoardExporterOptions o;
    o.dir = tb_dir_;
    o.host = "h";
    o.flush_period = absl::Milliseconds(20);
    o.max_queued_jobs = max_queued;
    o.read_batch = 7;  // several reads per round
    auto e = TensorBoardExporter::Create(
        o, store_.get(),
        [this, on_lookup](const std::string& id) -> absl::StatusOr<v1::JobSpec> {
          if (on_lookup) on_lookup();
          auto it = specs_.find(id);
          if (it == specs_.end()) return absl::NotFoundError(id);
          return it->second;
        },
        registry_, SystemClock());
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }

  std::map<int64_t, float> Losses(const std::string& id, int attempt) {
    std::map<int64_t, float> out;
    const fs::path run = fs::path(tb_dir_) / id / ("attempt-" + std::to_string(attempt));
    if (!fs::exists(run)) return out;
    for (const auto& f : fs::directory_iterator(run)) {
      std::string error;
      for (const auto& r : ParseRecords(*ReadFile(f.path().string(), 1 << 26), &error)) {
        for (const auto& v : r.summary().value()) {
          if (v.tag() == "train/loss") {
            EXPECT_EQ(out.count(r.step()), 0u) << "step " << r.step() << " written twice";
            out[r.step()] = v.simple_value();
          }
        }
      }
      EXPECT_EQ(error, "") << f.path();
    }
    return out;
  }

  std::string Metrics() { return prometheus::TextSerializer().Serialize(registry_.Collect()); }

  TempDir data_;
  TempDir out_;
  std::string tb_dir_;
  std::unique_ptr<SqliteJobStore> store_;
  std::map<std::string, v1::JobSpec> specs_;
  prometheus::Registry registry_;
};

TEST_F(TensorBoardExporterTest, AnUnwritableDirectoryFailsCreateNamingTheFlag) {
  const std::string file = out_.path() + "/file";
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  for (const std::string& dir : std::vector<std::string>{file, file + "/sub"}) {
    TensorBoardExporterOptions o;
    o.dir = dir;
    auto e = TensorBoardExporter::Create(o, store_.get(), nullptr, registry_, SystemClock());
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("--tensorboard-dir '" + dir + "'"), std::string::npos) << e.status();
  }
}

TEST_F(TensorBoardExporterTest, FollowsCommitsAndARestartContinuesWithoutDuplicates) {
  const std::string id = NewJob();
  AppendSteps(id, 1, 1, 10);
  {
    auto exporter = Make();
    exporter->Start({});
    exporter->OnCommitted(id);
    exporter->Flush();
    EXPECT_EQ(Losses(id, 1).size(), 10u);
    AppendSteps(id, 1, 11, 12);  // committed, but the exporter stops before it hears
    exporter->Stop();
  }
  AppendSteps(id, 2, 12, 20);
  auto exporter = Make();
  exporter->Start({});  // picks the job up from its folder's progress
  exporter->Flush();
  const std::map<int64_t, float> one = Losses(id, 1);
  ASSERT_EQ(one.size(), 12u);
  for (const auto& [step, loss] : one) EXPECT_EQ(loss, static_cast<float>(100.0 / step)) << step;
  EXPECT_EQ(Losses(id, 2).size(), 9u);
  // One registry for both: 10 read by the first, then 11 (seq 11 on) by the second.
  EXPECT_NE(Metrics().find("trainyard_tensorboard_events_read_total 21"), std::string::npos) << Metrics();
}

TEST_F(TensorBoardExporterTest, AStuckWriterNeverBlocksCommitsAndItsQueueIsBounded) {
  absl::Notification entered, release;
  auto exporter = Make(/*max_queued=*/2, [&] {
    if (!entered.HasBeenNotified()) entered.Notify();
    release.WaitForNotification();
  });
  const std::string a = NewJob(), b = NewJob(), c = NewJob(), d = NewJob();
  AppendSteps(a, 1, 1, 3);
  exporter->Start({});
  exporter->OnCommitted(a);
  entered.WaitForNotification();  // the writer is stuck inside job a
  // Ingestion goes on: each call only queues (a test that hung here would fail).
  for (const std::string& id : {b, c, d, b}) {
    AppendSteps(id, 1, 1, 2);
    exporter->OnCommitted(id);
  }
  EXPECT_NE(Metrics().find("trainyard_tensorboard_queue_depth 2"), std::string::npos) << Metrics();
  EXPECT_NE(Metrics().find("trainyard_tensorboard_queue_overflows_total 1"), std::string::npos) << Metrics();
  release.Notify();
  exporter->Flush();
  EXPECT_EQ(Losses(a, 1).size(), 3u);
  EXPECT_EQ(Losses(b, 1).size(), 2u);
  EXPECT_EQ(Losses(c, 1).size(), 2u);
  EXPECT_TRUE(Losses(d, 1).empty()) << "dropped on overflow until its next event";
  AppendSteps(d, 1, 3, 3);
  exporter->OnCommitted(d);
  exporter->Flush();
  EXPECT_EQ(Losses(d, 1).size(), 3u);
}

TEST_F(TensorBoardExporterTest, AFailedWriteIsCountedAndRetriedFromTheDurableState) {
  const std::string id = NewJob();
  AppendSteps(id, 1, 1, 4);
  fs::create_directories(fs::path(tb_dir_) / id);
  // attempt-1 cannot be a folder while a file holds its name.
  ASSERT_TRUE(WriteFileAtomically((fs::path(tb_dir_) / id / "attempt-1").string(), "in the way").ok());
  auto exporter = Make();
  exporter->Start({});
  exporter->OnCommitted(id);
  exporter->Flush();
  // Once or more: it is retried every round while the file is in the way.
  EXPECT_EQ(Metrics().find("trainyard_tensorboard_write_errors_total 0"), std::string::npos) << Metrics();
  EXPECT_NE(Metrics().find("trainyard_tensorboard_write_errors_total"), std::string::npos) << Metrics();
  fs::remove(fs::path(tb_dir_) / id / "attempt-1");
  exporter->Flush();  // retried without a new commit
  EXPECT_EQ(Losses(id, 1).size(), 4u);
  EXPECT_NE(Metrics().find("trainyard_tensorboard_records_written_total 38"), std::string::npos)
      << "file_version, spec, 9 scalars for each of 4 steps: " << Metrics();
}

}  // namespace
}  // namespace trainyard::testing
