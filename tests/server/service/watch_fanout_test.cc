// WatchJob's and WatchJobBatched's fan-out through the hub's watch cache, over real
// gRPC on loopback
// (JobServiceImpl on a real SqliteJobStore, JobManager and EventHub, with a watch
// window of only 32 events so watchers cross between cache and store): many watchers
// each see every committed event exactly once, in seq order, gapless, byte for byte
// what the store holds, whether they start at seq 1, mid-stream, reconnect from a seq
// or fall far behind the window; and a watcher that stops reading holds up no other.
// Every test runs for both RPCs; a batched stream's messages hold consecutive events,
// several once a watcher is behind, and never more than kMaxWatchBatchBytes of them
// unless one event alone is larger.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/service/job_service.h"
#include "tests/fakes/auth_fixture.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard::testing {
namespace {

constexpr int kWindow = 32;

// Reads one watch stream (WatchJobBatched when `batched`) on its own thread until it has
// the event of seq `until`; pauses before reading the event of seq `pause_after + 1`
// until `resume` is notified (a batched stream: before the message after the one that
// brought it there).
class SyncWatcher {
 public:
  SyncWatcher(v1::JobService::Stub* stub, bool batched, std::string job_id, int64_t from_seq, int64_t until,
              int64_t pause_after = 0, absl::Notification* resume = nullptr)
      : from_seq_(from_seq) {
    thread_ = std::thread([this, stub, batched, job_id, from_seq, until, pause_after, resume] {
      v1::WatchJobRequest req;
      req.set_id(job_id);
      req.set_from_seq(from_seq);
      ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      int64_t last = from_seq - 1;
      auto take = [&](const v1::Event& e) {
        last = e.seq();
        absl::MutexLock lock(&mu_);
        got_.push_back(e.SerializeAsString());
        seqs_.push_back(e.seq());
      };
      if (batched) {
        auto reader = stub->WatchJobBatched(&ctx_, req);
        v1::WatchJobResponse m;
        while (last < until) {
          if (resume != nullptr && last >= pause_after && !resumed_) {
            resume->WaitForNotification();
            resumed_ = true;
          }
          if (!reader->Read(&m)) break;
          {
            absl::MutexLock lock(&mu_);
            batches_.push_back({m.events_size(), m.ByteSizeLong()});
          }
          for (const v1::Event& e : m.events()) take(e);
        }
        ctx_.TryCancel();
        reader->Finish().IgnoreError();
      } else {
        auto reader = stub->WatchJob(&ctx_, req);
        v1::Event e;
        while (last < until) {
          if (resume != nullptr && last == pause_after) resume->WaitForNotification();
          if (!reader->Read(&e)) break;
          take(e);
        }
        ctx_.TryCancel();
        reader->Finish().IgnoreError();
      }
      done_.Notify();
    });
  }
  ~SyncWatcher() {
    ctx_.TryCancel();
    thread_.join();
  }
  void Wait() { done_.WaitForNotification(); }
  bool Done() { return done_.HasBeenNotified(); }
  std::vector<int64_t> seqs() {
    absl::MutexLock lock(&mu_);
    return seqs_;
  }
  std::vector<std::string> got() {
    absl::MutexLock lock(&mu_);
    return got_;
  }
  int64_t from_seq() const { return from_seq_; }
  // A batched stream's messages: events and bytes of each.
  struct Batch {
    int events = 0;
    size_t bytes = 0;
  };
  std::vector<Batch> batches() {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  const int64_t from_seq_;
  bool resumed_ = false;  // the reader thread's own
  std::vector<Batch> batches_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext ctx_;
  absl::Mutex mu_;
  std::vector<std::string> got_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> seqs_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
  std::thread thread_;
};

// The parameter: whether the watchers use WatchJobBatched.
class WatchFanoutTest : public AuthFixture, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    AuthFixture::SetUp();
    if (HasFatalFailure()) return;
    WatchCacheOptions cache;
    cache.max_events = kWindow;
    hub_.AttachStore(store_.get(), cache);  // first: the service's own attach is then a no-op
    service_ = std::make_unique<JobServiceImpl>(manager_.get(), store_.get(), &hub_, nullptr, artifacts_.get(),
                                                JobServiceOptions{});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Stub({});
    v1::JobSpec spec;
    spec.mutable_job()->set_name("t");
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_parallelism()->set_dp(1);
    spec.mutable_parallelism()->set_tp(1);
    auto job = manager_->Submit(spec, "local");
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = job->id();
  }

  void TearDown() override {
    watchers_.clear();
    if (server_) server_->Shutdown();
  }

  // A stub on a channel (and so a connection) of its own.
  std::unique_ptr<v1::JobService::Stub> Stub(grpc::ChannelArguments args) {
    args.SetInt("trainyard.test.channel", ++channels_);
    return v1::JobService::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args));
  }

  // Commits `n` controller log events of `bytes` bytes each, one transaction each.
  void Commit(int n, size_t bytes = 16) {
    for (int i = 0; i < n; ++i) {
      v1::Event e;
      e.mutable_log()->set_level("info");
      std::string text = "line " + std::to_string(++lines_) + " ";
      text.resize(std::max(bytes, text.size()), 'x');
      e.mutable_log()->set_message(text);
      auto ok = manager_->AppendControllerEvent(job_, std::move(e));
      ASSERT_TRUE(ok.ok()) << ok.status();
      ASSERT_TRUE(*ok);
    }
  }

  // Each watcher got exactly the store's events from its from_seq to the last, in order.
  void ExpectComplete(SyncWatcher& w) {
    const int64_t last = store_->LastSeq(job_);
    auto stored = store_->ReadEvents(job_, w.from_seq(), 1 << 20);
    ASSERT_TRUE(stored.ok()) << stored.status();
    std::vector<int64_t> want_seqs;
    std::vector<std::string> want;
    for (const auto& e : *stored) {
      want_seqs.push_back(e.seq());
      want.push_back(e.SerializeAsString());
    }
    ASSERT_EQ(static_cast<int64_t>(want_seqs.size()), last - w.from_seq() + 1);
    EXPECT_EQ(w.seqs(), want_seqs);
    EXPECT_TRUE(w.got() == want) << "bytes differ from the stored events";
    for (const SyncWatcher::Batch& b : w.batches()) {
      EXPECT_GE(b.events, 1);
      if (b.events > 1) {
        EXPECT_LE(b.bytes, kMaxWatchBatchBytes);
      }
    }
  }

  SyncWatcher* Watch(v1::JobService::Stub* stub, int64_t from_seq, int64_t until, int64_t pause_after = 0,
                     absl::Notification* resume = nullptr) {
    watchers_.push_back(std::make_unique<SyncWatcher>(stub, GetParam(), job_, from_seq, until, pause_after, resume));
    return watchers_.back().get();
  }

  std::unique_ptr<JobServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int channels_ = 0;
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::string job_;
  int lines_ = 0;
  std::vector<std::unique_ptr<SyncWatcher>> watchers_;
};

TEST_P(WatchFanoutTest, ManyWatchersSeeEveryEventOnceInOrderFromCacheAndStore) {
  const int64_t start = store_->LastSeq(job_);  // the job's own first events
  constexpr int kEvents = 200;
  const int64_t until = start + kEvents;
  // Waits for an event that never comes: the job stays watched, its window kept.
  Watch(stub_.get(), 1, until + 1);
  std::vector<SyncWatcher*> from_start;
  for (int i = 0; i < 24; ++i) from_start.push_back(Watch(stub_.get(), 1, until));
  Commit(kEvents / 2);
  // Mid-stream: one from seq 1 (its start is long out of the window: the store), one
  // reconnecting from a seq still in the window, one from a seq out of it.
  hub_.Flush();
  SyncWatcher* late = Watch(stub_.get(), 1, until);
  SyncWatcher* reconnect_cached = Watch(stub_.get(), start + kEvents / 2 - 5, until);
  SyncWatcher* reconnect_old = Watch(stub_.get(), start + 10, until);
  Commit(kEvents / 2);
  for (SyncWatcher* w : from_start) {
    w->Wait();
    ExpectComplete(*w);
  }
  for (SyncWatcher* w : {late, reconnect_cached, reconnect_old}) {
    w->Wait();
    ExpectComplete(*w);
  }
  // The live watchers were served from the cache: it holds the job's newest window.
  hub_.Flush();
  std::vector<CachedEvent> cached;
  ASSERT_TRUE(hub_.cache()->Read(job_, until - kWindow + 1, kWindow, &cached));
  EXPECT_EQ(cached.size(), static_cast<size_t>(kWindow));
  EXPECT_EQ(cached.back().seq, until);
}

TEST_P(WatchFanoutTest, AStalledWatcherFallsBehindTheWindowAndHoldsUpNoOne) {
  const int64_t start = store_->LastSeq(job_);
  // 300 events of 16 KiB: far more than flow control lets through to a client that
  // does not read, and ten times the window.
  constexpr int kEvents = 300;
  const int64_t until = start + kEvents;
  grpc::ChannelArguments small;
  small.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto slow_stub = Stub(small);
  absl::Notification resume;
  SyncWatcher* slow = Watch(slow_stub.get(), 1, until, start + 3, &resume);
  std::vector<SyncWatcher*> fast;
  for (int i = 0; i < 8; ++i) fast.push_back(Watch(stub_.get(), 1, until));
  Commit(kEvents, 16 << 10);
  // Every other watcher finishes while the slow one still does not read.
  for (SyncWatcher* w : fast) {
    w->Wait();
    ExpectComplete(*w);
  }
  EXPECT_FALSE(slow->Done());
  std::vector<CachedEvent> cached;
  EXPECT_FALSE(hub_.cache()->Read(job_, start + 4, 1, &cached)) << "its next event left the window";
  resume.Notify();
  slow->Wait();
  ExpectComplete(*slow);
  if (GetParam()) {
    // Behind by hundreds of 16 KiB events, it caught up in batches of up to 1 MiB
    // (ExpectComplete checks each batch's bytes). The bound is on bytes, not on a count:
    // when the first read comes after some commits (a slow sanitizer run), the job's own
    // small first events share a batch with big ones, and it may hold a few more than 64.
    int most = 0;
    for (const SyncWatcher::Batch& b : slow->batches()) most = std::max(most, b.events);
    EXPECT_GT(most, 32) << "a watcher far behind gets many events a message";
  }
}

TEST_P(WatchFanoutTest, OneEventLargerThanABatchStillGoesAlone) {
  const int64_t start = store_->LastSeq(job_);
  Commit(1, kMaxWatchBatchBytes + 1000);  // one event over the batch bound
  Commit(2, 400 << 10);                   // two that fit one batch together
  SyncWatcher* w = Watch(stub_.get(), start + 1, start + 3);
  w->Wait();
  ExpectComplete(*w);
  if (GetParam()) {
    const auto batches = w->batches();
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[0].events, 1);
    EXPECT_GT(batches[0].bytes, kMaxWatchBatchBytes);
    EXPECT_EQ(batches[1].events, 2);
  }
}

TEST_P(WatchFanoutTest, TheWindowGoesWithTheLastWatcher) {
  const int64_t start = store_->LastSeq(job_);
  {
    SyncWatcher w(stub_.get(), GetParam(), job_, 1, start + 5);
    Commit(5);
    w.Wait();
    ExpectComplete(w);
  }
  hub_.Flush();
  // Unsubscribed when its stream ended; the hub's thread then drops the window.
  for (int i = 0; i < 200 && hub_.cache()->jobs() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    hub_.Flush();
  }
  EXPECT_EQ(hub_.cache()->jobs(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rpc, WatchFanoutTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "WatchJobBatched" : "WatchJob";
                         });

}  // namespace
}  // namespace trainyard::testing
