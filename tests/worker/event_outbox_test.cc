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
