// WatchCache against a real SqliteJobStore: each committed event serialized once, to
// exactly the bytes of the stored event; windows gapless, bounded, and honest about
// what they cannot answer (the caller then reads the store).
#include "server/state/watch_cache.h"

#include "server/state/event_hub.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/store/sqlite_job_store.h"
#include "trainyard/v1/job_service.pb.h"
#include "tests/support/temp_dir.h"

namespace trainyard::testing {
namespace {

class WatchCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteJobStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    v1::Job job;
    job.mutable_spec()->mutable_job()->set_name("t");
    ASSERT_TRUE(store_->CreateJob(&job, nullptr).ok());
    job_ = job.id();
  }

  // Commits `n` log events, each message naming its position.
  void Commit(int n) {
    std::vector<v1::Event> events;
    for (int i = 0; i < n; ++i) {
      v1::Event e;
      e.set_job_id(job_);
      e.set_source_seq(++source_seq_);
      e.mutable_log()->set_level("info");
      e.mutable_log()->set_message("line " + std::to_string(source_seq_));
      events.push_back(std::move(e));
    }
    auto stored = store_->AppendEvents(job_, std::move(events));
    ASSERT_TRUE(stored.ok()) << stored.status();
    ASSERT_EQ(stored->size(), static_cast<size_t>(n));
  }

  // The store's own bytes of events [from, to].
  std::vector<std::string> Stored(int64_t from, int64_t to) {
    auto events = store_->ReadEvents(job_, from, static_cast<int>(to - from + 1));
    EXPECT_TRUE(events.ok()) << events.status();
    std::vector<std::string> out;
    for (const auto& e : *events) out.push_back(e.SerializeAsString());
    return out;
  }

  static std::vector<std::string> Bytes(const std::vector<CachedEvent>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) out.emplace_back(reinterpret_cast<const char*>(e.bytes.begin()), e.bytes.size());
    return out;
  }

  TempDir dir_;
  std::unique_ptr<SqliteJobStore> store_;
  std::string job_;
  int64_t source_seq_ = 0;
};

TEST_F(WatchCacheTest, NothingCachedIsAMiss) {
  WatchCache cache(store_.get());
  Commit(3);
  std::vector<CachedEvent> out;
  EXPECT_FALSE(cache.Read(job_, 1, 10, &out));
  EXPECT_TRUE(out.empty());
}

TEST_F(WatchCacheTest, HoldsTheStoredBytesInSeqOrder) {
  WatchCache cache(store_.get());
  Commit(5);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  Commit(7);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  std::vector<CachedEvent> out;
  ASSERT_TRUE(cache.Read(job_, 1, 100, &out));
  ASSERT_EQ(out.size(), 12u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].seq, static_cast<int64_t>(i + 1));
  EXPECT_EQ(Bytes(out), Stored(1, 12));
  // From the middle, at most `max`.
  out.clear();
  ASSERT_TRUE(cache.Read(job_, 4, 3, &out));
  EXPECT_EQ(Bytes(out), Stored(4, 6));
  // Past the newest: answered, nothing yet.
  out.clear();
  EXPECT_TRUE(cache.Read(job_, 13, 10, &out));
  EXPECT_TRUE(out.empty());
}

TEST_F(WatchCacheTest, EveryWatcherGetsTheSameBytesNotACopy) {
  WatchCache cache(store_.get());
  Commit(2);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  std::vector<CachedEvent> a, b;
  ASSERT_TRUE(cache.Read(job_, 1, 10, &a));
  ASSERT_TRUE(cache.Read(job_, 1, 10, &b));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].bytes.begin(), b[0].bytes.begin()) << "one serialization, shared";
  EXPECT_EQ(a[1].bytes.begin(), b[1].bytes.begin());
}

TEST_F(WatchCacheTest, TheFramedBytesAreABatchElementAroundTheSameMemory) {
  WatchCache cache(store_.get());
  Commit(3);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  std::vector<CachedEvent> out;
  ASSERT_TRUE(cache.Read(job_, 1, 10, &out));
  ASSERT_EQ(out.size(), 3u);
  // The framed slices, concatenated, parse as one WatchJobResponse of the stored events.
  std::string wire;
  for (const auto& e : out) {
    wire.append(reinterpret_cast<const char*>(e.framed.begin()), e.framed.size());
    // The bare event is the framed slice's tail: the same bytes, not a copy (a slice
    // of at most gRPC's inline size, 15 bytes, would be copied; these are larger).
    ASSERT_GT(e.bytes.size(), 15u);
    EXPECT_EQ(e.framed.end(), e.bytes.end());
    EXPECT_GT(e.framed.size(), e.bytes.size());
  }
  v1::WatchJobResponse batch;
  ASSERT_TRUE(batch.ParseFromString(wire));
  ASSERT_EQ(batch.events_size(), 3);
  const std::vector<std::string> stored = Stored(1, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(batch.events(i).SerializeAsString(), stored[static_cast<size_t>(i)]);
  // A large event's length takes several varint bytes; still one element.
  v1::Event big;
  big.set_seq(7);
  big.mutable_log()->set_message(std::string(300000, 'y'));
  const CachedEvent framed = WatchCache::Serialize(big);
  v1::WatchJobResponse one;
  ASSERT_TRUE(one.ParseFromArray(framed.framed.begin(), static_cast<int>(framed.framed.size())));
  ASSERT_EQ(one.events_size(), 1);
  EXPECT_EQ(one.events(0).log().message().size(), 300000u);
  EXPECT_EQ(framed.seq, 7);
  EXPECT_EQ(framed.bytes.size(), big.ByteSizeLong());
}

TEST_F(WatchCacheTest, AWatcherBehindTheWindowIsAMiss) {
  WatchCacheOptions options;
  options.max_events = 10;
  WatchCache cache(store_.get(), options);
  for (int i = 0; i < 5; ++i) {
    Commit(5);
    ASSERT_TRUE(cache.Refresh(job_).ok());
  }
  std::vector<CachedEvent> out;
  EXPECT_FALSE(cache.Read(job_, 15, 100, &out)) << "seq 15 fell out of a 10-event window";
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(cache.Read(job_, 16, 100, &out));
  EXPECT_EQ(Bytes(out), Stored(16, 25));
  EXPECT_EQ(cache.events(), 10u);
}

TEST_F(WatchCacheTest, TheByteBoundEvictsTheOldest) {
  Commit(20);
  const size_t each = Stored(1, 1)[0].size();
  WatchCacheOptions options;
  options.max_bytes = each * 4 + each / 2;  // room for 4 (messages of one length)
  WatchCache cache(store_.get(), options);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  std::vector<CachedEvent> out;
  EXPECT_FALSE(cache.Read(job_, 16, 100, &out));
  ASSERT_TRUE(cache.Read(job_, 17, 100, &out));
  EXPECT_EQ(Bytes(out), Stored(17, 20));
}

TEST_F(WatchCacheTest, AFirstRefreshStartsAtTheNewestEvents) {
  Commit(50);
  WatchCacheOptions options;
  options.max_events = 8;
  WatchCache cache(store_.get(), options);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  std::vector<CachedEvent> out;
  EXPECT_FALSE(cache.Read(job_, 42, 100, &out));
  ASSERT_TRUE(cache.Read(job_, 43, 100, &out));
  EXPECT_EQ(Bytes(out), Stored(43, 50));
}

TEST_F(WatchCacheTest, DropForgetsTheJob) {
  WatchCache cache(store_.get());
  Commit(3);
  ASSERT_TRUE(cache.Refresh(job_).ok());
  EXPECT_EQ(cache.jobs(), 1u);
  cache.Drop(job_);
  EXPECT_EQ(cache.jobs(), 0u);
  std::vector<CachedEvent> out;
  EXPECT_FALSE(cache.Read(job_, 1, 10, &out));
}

// The hub tells every commit observer (the TensorBoard exporter and webhooks both
// watch commits) of every Notify and MarkSettled, in the order they were added.
TEST(EventHubObserversTest, EveryObserverHearsOfEveryCommit) {
  EventHub hub;
  std::vector<std::string> heard;
  hub.AddCommitObserver([&](const std::string& job) { heard.push_back("a:" + job); });
  hub.AddCommitObserver([&](const std::string& job) { heard.push_back("b:" + job); });
  hub.Notify("job-1");
  hub.MarkSettled("job-2");
  EXPECT_EQ(heard, (std::vector<std::string>{"a:job-1", "b:job-1", "a:job-2", "b:job-2"}));
}

}  // namespace
}  // namespace trainyard::testing
