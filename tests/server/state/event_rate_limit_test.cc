// The per-job event cap: a token bucket over log lines and compile events; step metrics
// and state-bearing events always pass; the excess is dropped and counted, and the stream
// (its batch acknowledged) and every other job are unaffected.
#include "server/state/event_rate_limit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

v1::Event Log(const std::string& job, int i) {
  v1::Event e;
  e.set_job_id(job);
  e.mutable_log()->set_message("line " + std::to_string(i));
  return e;
}

v1::Event RankRunning(const std::string& job) {
  v1::Event e;
  e.set_job_id(job);
  e.mutable_rank_state()->set_state(v1::RankState::RUNNING);
  return e;
}

TEST(EventRateLimiterTest, ABurstOfTwoSecondsThenTheRateAndStateEventsAlwaysPass) {
  EventRateLimiter limiter(10, 2.0);  // 20 tokens, 10 a second
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::vector<v1::Event> events;
  for (int i = 0; i < 25; ++i) events.push_back(Log("a", i));
  events.insert(events.begin() + 22, RankRunning("a"));  // past the budget: still kept
  EXPECT_EQ(limiter.Admit("a", 1, t0, &events), 5);
  ASSERT_EQ(events.size(), 21u);
  EXPECT_EQ(events[19].log().message(), "line 19");
  EXPECT_TRUE(events[20].has_rank_state());

  // Another job has its own bucket.
  std::vector<v1::Event> other{Log("b", 0)};
  EXPECT_EQ(limiter.Admit("b", 1, t0, &other), 0);

  // 0.5 s later: 5 tokens back.
  events.clear();
  for (int i = 0; i < 8; ++i) events.push_back(Log("a", i));
  EXPECT_EQ(limiter.Admit("a", 1, t0 + absl::Milliseconds(500), &events), 3);
  EXPECT_EQ(events.size(), 5u);

  // An hour later the bucket holds its capacity, no more.
  events.clear();
  for (int i = 0; i < 30; ++i) events.push_back(Log("a", i));
  EXPECT_EQ(limiter.Admit("a", 1, t0 + absl::Hours(1), &events), 10);
}

TEST(EventRateLimiterTest, TheBudgetIsPerRankOfTheJob) {
  EventRateLimiter limiter(10, 2.0);  // 8 ranks: 160 tokens, 80 a second
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  std::vector<v1::Event> events;
  for (int i = 0; i < 200; ++i) events.push_back(Log("a", i));
  EXPECT_EQ(limiter.Admit("a", 8, t0, &events), 40);
  events.clear();
  for (int i = 0; i < 100; ++i) events.push_back(Log("a", i));
  EXPECT_EQ(limiter.Admit("a", 8, t0 + absl::Seconds(1), &events), 20);
  // A smaller next attempt (2 ranks): the bucket shrinks to its capacity, 40.
  events.clear();
  for (int i = 0; i < 100; ++i) events.push_back(Log("a", i));
  EXPECT_EQ(limiter.Admit("a", 2, t0 + absl::Seconds(10), &events), 60);
}

TEST(EventRateLimiterTest, ZeroMeansNoCap) {
  EventRateLimiter limiter(0, 2.0);
  std::vector<v1::Event> events;
  for (int i = 0; i < 100000; ++i) events.push_back(Log("a", i));
  EXPECT_EQ(limiter.Admit("a", 1, absl::FromUnixSeconds(1), &events), 0);
  EXPECT_EQ(events.size(), 100000u);
}

TEST(EventRateLimiterTest, OnlyLogAndCompileEventsAreLimited) {
  v1::Event e;
  e.mutable_step_metrics()->set_step(1);
  EXPECT_FALSE(IsRateLimitedKind(e)) << "the job's record: every step once";
  e.mutable_compile();
  EXPECT_TRUE(IsRateLimitedKind(e));
  e.mutable_log();
  EXPECT_TRUE(IsRateLimitedKind(e));
  e.mutable_rank_state();
  EXPECT_FALSE(IsRateLimitedKind(e));
  e.mutable_checkpoint();
  EXPECT_FALSE(IsRateLimitedKind(e));
  e.mutable_stall();
  EXPECT_FALSE(IsRateLimitedKind(e));
  e.mutable_validation()->set_step(10);
  EXPECT_FALSE(IsRateLimitedKind(e)) << "the job's record: one per validation.freq steps";
}

class EventCapManagerTest : public ManagerFixture {};

// A rank flooding logs: the job keeps its budget's worth, the rest is counted under
// rate_limited, the batch is acknowledged (IngestEvents OK), every step metric in the
// same batch is stored, and the job's state transitions still happen.
TEST_F(EventCapManagerTest, AFloodingJobIsCappedAndCountedWhileItsStateEventsPass) {
  max_events_per_s_per_rank_ = 10;  // one rank: 100 in the first burst (10 s worth)
  manager_ = NewManager();
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  v1::EventBatch flood;
  flood.set_batch_id(99);
  for (int i = 0; i < 300; ++i) {
    v1::Event* e = flood.add_events();
    e->set_job_id(id);
    e->set_attempt(1);
    e->set_rank(0);
    e->set_source_seq(1000 + i);
    if (i % 2 == 0) {
      e->mutable_log()->set_message("spam " + std::to_string(i));
    } else {
      e->mutable_step_metrics()->set_step(1 + i / 2);  // 150 steps, as a replay after an outage sends them
    }
  }
  for (int i = 0; i < 150; ++i) {
    v1::Event* e = flood.add_events();
    *e = flood.events(2 * i);
    e->set_source_seq(2000 + i);
  }
  ASSERT_TRUE(manager_->IngestEvents(w1.id, flood).ok());
  int logs = 0, steps = 0;
  for (const auto& e : Stored(id)) {
    logs += e.has_log();
    steps += e.has_step_metrics();
  }
  EXPECT_EQ(logs, 100);
  EXPECT_EQ(steps, 150);
  EXPECT_EQ(Dropped(kDropRateLimited), 200);
  // The rank's exit still lands: the job ends.
  Report(w1, id, 1, {0}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
}

}  // namespace
}  // namespace trainyard::testing
