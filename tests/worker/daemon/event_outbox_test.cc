#include "worker/daemon/event_outbox.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

v1::Event Ev(int64_t source_seq) {
  v1::Event e;
  e.set_job_id("j");
  e.set_source_seq(source_seq);
  e.mutable_log()->set_message("m");
  return e;
}

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::Event RankEv(const std::string& job, int attempt, int rank, v1::RankState::State state) {
  v1::Event e;
  e.set_job_id(job);
  e.set_attempt(attempt);
  e.set_rank(rank);
  e.mutable_rank_state()->set_state(state);
  return e;
}

// What a re-registering worker reports as ended: attempts with a final rank state still
// held (sealed and unacknowledged, or pending), with those ranks; nothing once acked.
TEST(EventOutboxTest, EndedAttemptsAreThoseWithHeldFinalRankStates) {
  EventOutbox outbox({.max_batch_events = 2, .flush_interval = absl::Seconds(10)});
  outbox.Add(RankEv("a", 1, 0, v1::RankState::RUNNING), kT0);
  outbox.Add(RankEv("a", 1, 0, v1::RankState::EXITED), kT0);  // sealed below
  outbox.Add(RankEv("a", 1, 1, v1::RankState::KILLED), kT0);  // pending
  outbox.Add(RankEv("b", 2, 0, v1::RankState::RUNNING), kT0);
  auto sealed = outbox.SealReady(kT0);
  ASSERT_TRUE(sealed.has_value());
  const auto ended = outbox.EndedAttempts();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].job_id(), "a");
  EXPECT_EQ(ended[0].attempt(), 1);
  EXPECT_TRUE(ended[0].ended());
  EXPECT_EQ(std::vector<int>(ended[0].ranks().begin(), ended[0].ranks().end()), (std::vector<int>{0, 1}));
  outbox.Ack(sealed->batch_id());
  auto rest = outbox.SealReady(kT0, /*force=*/true);
  ASSERT_TRUE(rest.has_value());
  outbox.Ack(rest->batch_id());
  EXPECT_TRUE(outbox.EndedAttempts().empty());
}

TEST(EventOutboxTest, SealsAfterFlushIntervalNotBefore) {
  EventOutbox outbox({.max_batch_events = 64, .flush_interval = absl::Milliseconds(100)});
  outbox.Add(Ev(1), kT0);
  EXPECT_FALSE(outbox.SealReady(kT0 + absl::Milliseconds(99)).has_value());
  EXPECT_EQ(outbox.NextDeadline(), kT0 + absl::Milliseconds(100));
  auto batch = outbox.SealReady(kT0 + absl::Milliseconds(100));
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->events_size(), 1);
  EXPECT_EQ(outbox.NextDeadline(), absl::InfiniteFuture());
}

TEST(EventOutboxTest, SealsFullBatchImmediatelyAndKeepsRemainder) {
  EventOutbox outbox({.max_batch_events = 3, .flush_interval = absl::Seconds(10)});
  for (int i = 1; i <= 4; ++i) outbox.Add(Ev(i), kT0);
  auto first = outbox.SealReady(kT0);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->events_size(), 3);
  EXPECT_EQ(first->events(0).source_seq(), 1);
  EXPECT_EQ(first->events(2).source_seq(), 3);
  EXPECT_FALSE(outbox.SealReady(kT0).has_value());
  auto forced = outbox.SealReady(kT0, /*force=*/true);
  ASSERT_TRUE(forced.has_value());
  ASSERT_EQ(forced->events_size(), 1);
  EXPECT_EQ(forced->events(0).source_seq(), 4);
  EXPECT_GT(forced->batch_id(), first->batch_id());
}

TEST(EventOutboxTest, KeepsUnackedInOrderAndForgetsAcked) {
  EventOutbox outbox({.max_batch_events = 1});
  std::vector<int64_t> ids;
  for (int i = 1; i <= 3; ++i) {
    outbox.Add(Ev(i), kT0);
    ids.push_back(outbox.SealReady(kT0)->batch_id());
  }
  outbox.Ack(ids[1]);
  auto unacked = outbox.Unacked();
  ASSERT_EQ(unacked.size(), 2u);
  EXPECT_EQ(unacked[0].batch_id(), ids[0]);
  EXPECT_EQ(unacked[0].events(0).source_seq(), 1);
  EXPECT_EQ(unacked[1].batch_id(), ids[2]);
  EXPECT_EQ(unacked[1].events(0).source_seq(), 3);
  EXPECT_FALSE(outbox.Empty());

  outbox.Ack(ids[0]);
  outbox.Ack(ids[0]);  // a repeated ack is harmless
  outbox.Ack(ids[2]);
  EXPECT_TRUE(outbox.Unacked().empty());
  EXPECT_TRUE(outbox.Empty());
}

TEST(EventOutboxTest, DropsOldestUnackedPastCap) {
  EventOutbox outbox({.max_batch_events = 1, .max_held_events = 2});
  for (int i = 1; i <= 3; ++i) {
    outbox.Add(Ev(i), kT0);
    outbox.SealReady(kT0);
  }
  auto unacked = outbox.Unacked();
  ASSERT_EQ(unacked.size(), 2u);
  EXPECT_EQ(unacked[0].events(0).source_seq(), 2);
  EXPECT_EQ(outbox.dropped_events(), 1);
}

}  // namespace
}  // namespace trainyard
