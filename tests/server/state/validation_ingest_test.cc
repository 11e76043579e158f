// Validation events (the engine's rank 0, every validation.freq steps) through
// JobManager::IngestEvents (fake clock, fake worker channels, real SqliteJobStore): a
// current attempt's is stored, replayed after a controller restart and exported as
// trainyard_job_validation_loss with the value sent (NaN kept, as for the training
// loss); one of an ended attempt or from a worker the rank does not run on is fenced
// like StepMetrics; a negative count or duration is refused as invalid; none is rate
// limited.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "server/state/event_rate_limit.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

class ValidationIngestTest : public ManagerFixture {
 protected:
  v1::Event Val(const std::string& job, int attempt, int64_t step, double loss, int64_t tokens = 4096,
                double ms = 125.5) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(attempt);
    e.set_rank(0);
    e.set_source_seq(++source_seq_[{job, attempt, 0}]);
    e.mutable_validation()->set_step(step);
    e.mutable_validation()->set_loss(loss);
    e.mutable_validation()->set_tokens(tokens);
    e.mutable_validation()->set_ms(ms);
    return e;
  }
  std::vector<v1::Validation> StoredValidations(const std::string& id) {
    std::vector<v1::Validation> out;
    for (const auto& e : Stored(id)) {
      if (e.has_validation()) out.push_back(e.validation());
    }
    return out;
  }
  // The exposition /metrics serves (the same serializer prometheus::Exposer uses).
  std::string Scrape() { return prometheus::TextSerializer().Serialize(metrics_.registry()->Collect()); }
  static bool Has(const std::string& text, const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  }
};

TEST_F(ValidationIngestTest, AValidationOfTheRunningAttemptIsStoredExportedAndReplayed) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Val(id, 1, 0, 6.9375, 8192, 40.25), Val(id, 1, 50, 4.8125, 8192, 38.5)});
  const std::vector<v1::Validation> stored = StoredValidations(id);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].step(), 0) << "before the first step";
  EXPECT_EQ(stored[1].step(), 50);
  EXPECT_EQ(stored[1].loss(), 4.8125);
  EXPECT_EQ(stored[1].tokens(), 8192);
  EXPECT_EQ(stored[1].ms(), 38.5);
  const std::string text = Scrape();
  EXPECT_TRUE(Has(text, "trainyard_job_validation_loss{job_id=\"" + id + "\"} 4.8125")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_validations_total{job_id=\"" + id + "\"} 2")) << text;

  // A controller restart keeps them: WatchJob replays them from the store.
  Restart();
  std::vector<v1::Event> replay;
  for (const auto& e : Stored(id)) {
    if (e.has_validation()) replay.push_back(e);
  }
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_EQ(replay[1].validation().loss(), 4.8125);
  EXPECT_GT(replay[1].seq(), replay[0].seq());
  // A worker's resend after the restart (same source_seq) is not stored twice.
  Conn again = Connect("w1", 1, {[&] {
                         v1::RunningAttempt a;
                         a.set_job_id(id);
                         a.set_attempt(1);
                         a.add_ranks(0);
                         return a;
                       }()});
  v1::Event resend = replay[1];
  resend.clear_seq();
  Send(again, {resend});
  EXPECT_EQ(StoredValidations(id).size(), 2u);
}

// Rank 0's CheckpointsPruned, through the ingest path, becomes the retention metrics.
TEST_F(ValidationIngestTest, ACheckpointsPrunedEventIsExportedAsRetentionMetrics) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  v1::Event e;
  e.set_job_id(id);
  e.set_attempt(1);
  e.set_rank(0);
  e.set_source_seq(++source_seq_[{id, 1, 0}]);
  e.mutable_checkpoints_pruned()->set_step(20);
  e.mutable_checkpoints_pruned()->set_bytes_freed(123456);
  e.mutable_checkpoints_pruned()->set_bytes_kept(654321);
  e.mutable_checkpoints_pruned()->set_kept(3);
  Send(w1, {e});
  const std::string text = Scrape();
  EXPECT_TRUE(Has(text, "trainyard_job_checkpoint_bytes_freed_total{job_id=\"" + id + "\"} 123456")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_checkpoint_bytes_kept{job_id=\"" + id + "\"} 654321")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_checkpoints_kept{job_id=\"" + id + "\"} 3")) << text;
}

// A diverged model: the loss is NaN (or infinite). That is the run's outcome, stored and
// exported as the training loss is, not an invalid event.
TEST_F(ValidationIngestTest, ANonFiniteLossIsStoredAndExportedAsIs) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Val(id, 1, 10, std::numeric_limits<double>::infinity()),
            Val(id, 1, 20, std::numeric_limits<double>::quiet_NaN())});
  const std::vector<v1::Validation> stored = StoredValidations(id);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_TRUE(std::isinf(stored[0].loss()));
  EXPECT_TRUE(std::isnan(stored[1].loss()));
  EXPECT_EQ(Dropped("invalid"), 0);
  const std::string text = Scrape();
  EXPECT_TRUE(Has(text, "trainyard_job_validation_loss{job_id=\"" + id + "\"} Nan")) << text;
}

// Negative tokens, a negative or non-finite duration, a negative step: only a broken
// rank sends them, so they are refused (counted as invalid), like a CheckpointSaved's
// out-of-range fields; the good one in the same batch is stored and the batch acked.
TEST_F(ValidationIngestTest, NegativeCountsAndDurationsAreRefusedAsInvalid) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Val(id, 1, 10, 4.0, /*tokens=*/-1), Val(id, 1, 10, 4.0, 4096, /*ms=*/-0.5),
            Val(id, 1, 10, 4.0, 4096, std::numeric_limits<double>::quiet_NaN()),
            Val(id, 1, 10, 4.0, 4096, std::numeric_limits<double>::infinity()), Val(id, 1, -1, 4.0),
            Val(id, 1, 10, 3.25, 0, 0)});
  EXPECT_EQ(Dropped("invalid"), 5);
  const std::vector<v1::Validation> stored = StoredValidations(id);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].loss(), 3.25);
  EXPECT_TRUE(Has(Scrape(), "trainyard_job_validation_loss{job_id=\"" + id + "\"} 3.25")) << Scrape();
}

// As a StepMetrics: an ended attempt's Validation (a rank that outlived its teardown) is
// stale, one for a rank placed on another worker forged; neither is stored or exported.
TEST_F(ValidationIngestTest, AStaleOrForgedValidationIsFencedLikeAStep) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  const Conn& runs = Job(id).placement().ranks(0).worker() == "w1" ? w1 : w2;
  const Conn& other = &runs == &w1 ? w2 : w1;
  Report(runs, id, 1, {0}, v1::RankState::RUNNING);
  Send(runs, {Val(id, 1, 20, 5.5)});
  Send(other, {Val(id, 1, 30, 0.125)});
  EXPECT_EQ(Dropped("forged"), 1);
  Report(runs, id, 1, {0}, v1::RankState::FAILED, "exit code 1");
  manager_->Tick();
  ASSERT_EQ(Job(id).attempt(), 2);
  const int64_t seq = Job(id).last_seq();
  v1::Event late_step = Val(id, 1, 40, 0.25);
  late_step.clear_validation();
  late_step.mutable_step_metrics()->set_step(40);
  Send(runs, {Val(id, 1, 40, 0.25), late_step});
  EXPECT_EQ(Dropped("stale_attempt"), 2) << "the Validation and the StepMetrics alike";
  EXPECT_EQ(Job(id).last_seq(), seq);
  const std::vector<v1::Validation> stored = StoredValidations(id);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].loss(), 5.5);
  const std::string text = Scrape();
  EXPECT_TRUE(Has(text, "trainyard_job_validation_loss{job_id=\"" + id + "\"} 5.5")) << text;
  EXPECT_TRUE(Has(text, "trainyard_job_validations_total{job_id=\"" + id + "\"} 1")) << text;
}

// The cap on chatty kinds leaves validations alone, as it does steps.
TEST_F(ValidationIngestTest, ValidationsAreNotRateLimited) {
  max_events_per_s_per_rank_ = 1;  // one rank: 10 chatty events in the first burst
  manager_ = NewManager();
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  std::vector<v1::Event> batch;
  for (int i = 0; i < 40; ++i) {
    v1::Event log = Val(id, 1, 0, 0);
    log.clear_validation();
    log.mutable_log()->set_message("spam");
    batch.push_back(log);
    batch.push_back(Val(id, 1, 10 * i, 5.0 - 0.1 * i));
  }
  Send(w1, batch);
  EXPECT_EQ(StoredValidations(id).size(), 40u);
  EXPECT_EQ(Dropped(kDropRateLimited), 30);
}

}  // namespace
}  // namespace trainyard::testing
