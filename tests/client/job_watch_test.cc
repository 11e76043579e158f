// JobWatch (client/job_watch.h) against the fake JobService on a loopback port whose
// streams break midway: the exact seqs delivered, the seqs each reconnect asked from,
// and the outage callbacks. The fake sends WatchJobBatched messages of 3 events, so
// breaks and replays fall inside batches; JobClient::Watch's own cases (a stop inside a
// batch, a controller without WatchJobBatched) come last.
#include "client/job_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/fakes/fake_job_service.h"
#include "tests/fakes/loopback_server.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using testing::FakeJobService;

class JobWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    // seq 1 PENDING, 2 RUNNING, 3..5 steps, 6 SUCCEEDED.
    std::vector<v1::Event> events = {FakeJobService::StateEvent("j", 1, v1::Job::PENDING),
                                     FakeJobService::StateEvent("j", 2, v1::Job::RUNNING)};
    for (int64_t seq = 3; seq <= 5; ++seq) events.push_back(FakeJobService::StepEvent("j", seq, seq - 2, 1.0));
    events.push_back(FakeJobService::StateEvent("j", 6, v1::Job::SUCCEEDED));
    service_.SetEvents("j", events);
    service_.AddJob("j", v1::Job::RUNNING);
    options_.first_backoff = absl::Milliseconds(1);
    options_.max_backoff = absl::Milliseconds(4);
    callbacks_.on_event = [this](const v1::Event& e) { seqs_.push_back(e.seq()); };
    callbacks_.on_outage = [this](const absl::Status& why, int64_t resume) {
      outages_.push_back(resume);
      EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable);
    };
    callbacks_.on_reconnected = [this](absl::Duration, int64_t resume) { reconnects_.push_back(resume); };
  }

  JobWatch::Result Run() { return JobWatch(client_.get(), options_).Run("j", callbacks_); }

  static FakeJobService::WatchCall BreakAfter(int64_t seq, int64_t replay_before = 0) {
    FakeJobService::WatchCall call;
    call.stop_after_seq = seq;
    call.replay_before = replay_before;
    call.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller restarting");
    return call;
  }

  FakeJobService service_;
  testing::LoopbackServer server_{&service_, [this] { service_.ReleaseHeldCalls(); }};
  std::unique_ptr<JobClient> client_ = JobClient::Connect(server_.address());
  JobWatch::Options options_;
  JobWatch::Callbacks callbacks_;
  std::vector<int64_t> seqs_;
  std::vector<int64_t> outages_;
  std::vector<int64_t> reconnects_;
};

TEST_F(JobWatchTest, ABrokenStreamResumesAtTheNextSeqWithNoEventTwice) {
  // The first stream breaks after seq 3; the second replays two events too early.
  service_.ScriptWatch("j", 1, BreakAfter(3));
  FakeJobService::WatchCall replaying;
  replaying.replay_before = 2;
  service_.ScriptWatch("j", 2, replaying);
  JobWatch::Result result = Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.end_state, v1::Job::SUCCEEDED);
  EXPECT_EQ(result.last_seq, 6);
  EXPECT_THAT(seqs_, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(service_.WatchFromSeqs("j"), ElementsAre(1, 4));
  EXPECT_THAT(outages_, ElementsAre(4));
  EXPECT_THAT(reconnects_, ElementsAre(4));
}

TEST_F(JobWatchTest, FromSeqAndRepeatedBreaksDeliverEachSeqOnceInOrder) {
  options_.from_seq = 3;
  service_.ScriptWatch("j", 1, BreakAfter(4));
  service_.ScriptWatch("j", 2, BreakAfter(4));  // breaks before sending anything new
  service_.ScriptWatch("j", 3, BreakAfter(5, /*replay_before=*/1));
  JobWatch::Result result = Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.end_state, v1::Job::SUCCEEDED);
  EXPECT_THAT(seqs_, ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(service_.WatchFromSeqs("j"), ElementsAre(3, 5, 5, 6));
  // Break after 4 starts an outage; the probe before call 2 ends it; call 2's break
  // starts the next, the probe before call 3 ends it; call 3 delivers 5 and breaks.
  EXPECT_THAT(outages_, ElementsAre(5, 5, 6));
  EXPECT_THAT(reconnects_, ElementsAre(5, 5, 6));
}

TEST_F(JobWatchTest, AFirstCallThatFailsIsTheResultWithoutRetrying) {
  service_.ScriptWatch("j", 1, BreakAfter(0));
  JobWatch::Result result = Run();
  EXPECT_EQ(result.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(seqs_.empty());
  EXPECT_THAT(service_.WatchFromSeqs("j"), ElementsAre(1));
  EXPECT_TRUE(outages_.empty());
}

TEST_F(JobWatchTest, AStreamThatKeepsBreakingGivesUpAfterReconnectFor) {
  options_.reconnect_for = absl::Milliseconds(30);
  service_.SetWatchFallback("j", BreakAfter(2));
  JobWatch::Result result = Run();
  EXPECT_EQ(result.status.code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(result.gave_up_after.has_value());
  EXPECT_GE(*result.gave_up_after, absl::Milliseconds(30));
  EXPECT_FALSE(result.end_state.has_value());
  EXPECT_THAT(seqs_, ElementsAre(1, 2));
  // Only the first probe ends the outage: the stream sent nothing new after it.
  EXPECT_THAT(reconnects_, ElementsAre(3));
  const std::vector<int64_t> from = service_.WatchFromSeqs("j");
  ASSERT_GE(from.size(), 2u);  // at least one reconnect (how many depends on the machine)
  for (size_t i = 1; i < from.size(); ++i) EXPECT_EQ(from[i], 3) << i;
}

TEST_F(JobWatchTest, ARefusalIsNotRetried) {
  service_.ScriptWatch("j", 1, BreakAfter(2));
  FakeJobService::WatchCall refused = BreakAfter(2);
  refused.status = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not yours");
  service_.ScriptWatch("j", 2, refused);
  JobWatch::Result result = Run();
  EXPECT_EQ(result.status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(seqs_, ElementsAre(1, 2));
  EXPECT_THAT(service_.WatchFromSeqs("j"), ElementsAre(1, 3));
}

}  // namespace
TEST_F(JobWatchTest, EventsOfABatchComeOneByOneAndAStopInsideABatchEndsTheWatch) {
  service_.SetWatchBatch(4);  // messages: seqs 1-4, 5-6
  std::vector<int64_t> got;
  absl::Status s = client_->Watch("j", 1, [&](const v1::Event& e) {
    got.push_back(e.seq());
    return e.seq() < 3;  // stop at the third event of the first message
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(got, ElementsAre(1, 2, 3));
  EXPECT_THAT(service_.WatchRpcs("j"), ElementsAre("WatchJobBatched"));
  got.clear();
  ASSERT_TRUE(client_->Watch("j", 2, [&](const v1::Event& e) {
    got.push_back(e.seq());
    return true;
  }).ok());
  EXPECT_THAT(got, ElementsAre(2, 3, 4, 5, 6));
}

TEST_F(JobWatchTest, AControllerWithoutWatchJobBatchedIsWatchedWithWatchJobFromThenOn) {
  service_.SetWatchBatch(0);  // UNIMPLEMENTED, as an older controller answers
  service_.ScriptWatch("j", 1, BreakAfter(3));
  JobWatch::Result result = Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.end_state, v1::Job::SUCCEEDED);
  EXPECT_THAT(seqs_, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(service_.WatchFromSeqs("j"), ElementsAre(1, 4));
  // Asked once; the reconnect, and a later watch by the same client, go to WatchJob.
  EXPECT_EQ(service_.BatchedRefusals(), 1);
  ASSERT_TRUE(client_->Watch("j", 6, [](const v1::Event&) { return true; }).ok());
  EXPECT_EQ(service_.BatchedRefusals(), 1);
  EXPECT_THAT(service_.WatchRpcs("j"), ElementsAre("WatchJob", "WatchJob", "WatchJob"));
}

}  // namespace trainyard
