// ControllerLink on a fake clock against an in-process fake controller: reconnect
// backoff, heartbeat timing, the flush interval and Drain's timeout all run on the
// injected clock, which the tests move; nothing waits for real time to pass.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <functional>
#include <map>
#include <future>
#include <sstream>

#include "tests/fakes/fake_controller.h"
#include "tests/fakes/recording_clock.h"
#include "worker/daemon/controller_link.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::FakeController;
using testing::Plan;
using testing::RecordingClock;

class FakeRunner : public JobRunner {
 public:
  absl::Status Assign(const v1::Assign &) override { return absl::OkStatus(); }
  void Cancel(const v1::Cancel &) override {}
  void RequestCheckpoint(const v1::CheckpointRequest &) override {}
  int FreeSlots() const override { return 3; }
  std::vector<v1::RunningAttempt> Running() const override {
    v1::RunningAttempt a;
    a.set_job_id("j1");
    a.set_attempt(2);
    a.add_ranks(0);
    return {a};
  }
};

v1::Event Ev(int64_t source_seq) {
  v1::Event e;
  e.set_job_id("j1");
  e.set_source_seq(source_seq);
  e.mutable_log()->set_message("m");
  return e;
}

class ControllerLinkClockTest : public ::testing::Test {
 protected:
  // With `default_backoff`, the link keeps Options' reconnect defaults (jittered).
  void Start(std::function<Plan(int)> plan, bool default_backoff = false) {
    controller_ = std::make_unique<FakeController>(&clock_, std::move(plan));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(controller_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.registration.set_name("w1");
    if (!default_backoff) {
      options_.initial_backoff = absl::Seconds(1);
      options_.max_backoff = absl::Seconds(4);
      options_.backoff_jitter = 0;  // so every wait is exactly the backoff
    }
    options_.heartbeat_interval = absl::Seconds(1);
    options_.outbox_poll = absl::Hours(1);  // so only heartbeats and the flush wake the writer
    link_ = std::make_unique<ControllerLink>(
        options_, ControllerLink::MakeChannel("127.0.0.1:" + std::to_string(port)), &runner_,
        &outbox_, &clock_);
    link_->Start();
  }
  void TearDown() override {
    if (link_) link_->Stop();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  bool WaitForConnects(size_t n) {
    FakeController *c = controller_.get();
    return c->WaitFor([c, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->connects_.size() >= n; });
  }
  std::vector<absl::Time> Connects() {
    absl::MutexLock lock(&controller_->mu_);
    return controller_->connects_;
  }
  // Waits for the link to sleep until exactly `deadline`, then moves the clock there.
  void AdvanceTo(absl::Time deadline) {
    EXPECT_TRUE(clock_.WaitForDeadline(deadline, absl::Seconds(20)))
        << "no wait until " << absl::FormatTime(deadline);
    if (deadline > clock_.Now()) clock_.Advance(deadline - clock_.Now());
  }

  RecordingClock clock_;
  const absl::Time t0_ = clock_.Now();
  ControllerLink::Options options_;
  FakeRunner runner_;
  EventOutbox outbox_{{.max_batch_events = 64, .flush_interval = absl::Milliseconds(100)}};
  std::unique_ptr<FakeController> controller_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ControllerLink> link_;
};

TEST_F(ControllerLinkClockTest, ReconnectBackoffDoublesUpToTheMaximumOnTheClock) {
  Start([](int) { return Plan{.close_after_register = true}; });
  // Backoffs 1, 2, 4, 4 s: each reconnect happens when the clock reaches it.
  const absl::Duration backoffs[] = {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                                     absl::Seconds(4)};
  absl::Time at = t0_;
  std::vector<absl::Time> expected = {t0_};
  for (absl::Duration b : backoffs) {
    ASSERT_TRUE(WaitForConnects(expected.size()));
    at += b;
    AdvanceTo(at);
    expected.push_back(at);
  }
  ASSERT_TRUE(WaitForConnects(expected.size()));
  EXPECT_EQ(Connects(), expected);
  EXPECT_EQ(expected.back(), t0_ + absl::Seconds(11));
  EXPECT_EQ(link_->connects(), 5);
}

// A controller that comes back after a 25 s outage (a restart on a slow machine) is
// reached within 3 s of coming back with the default, jittered backoff: the cap keeps
// every wait short (it was 10 s: up to ~12 s after the controller was back).
TEST_F(ControllerLinkClockTest, WithDefaultBackoffAControllerBackAfterAnOutageIsReachedWithinThreeSeconds) {
  const absl::Time back = t0_ + absl::Seconds(25);
  Start([this, back](int) { return clock_.Now() < back ? Plan{.close_after_register = true} : Plan{}; },
        /*default_backoff=*/true);
  ASSERT_TRUE(WaitForConnects(1));
  for (int attempt = 0; attempt < 200 && Connects().back() < back; ++attempt) {
    // The link's next backoff sleep: the nearest deadline after now within a minute.
    const absl::Time now = clock_.Now();
    absl::Time next = absl::InfiniteFuture();
    for (int poll = 0; poll < 2000 && next == absl::InfiniteFuture(); ++poll) {
      for (absl::Time d : clock_.deadlines()) {
        if (d > now && d <= now + absl::Seconds(60)) next = std::min(next, d);
      }
      if (next == absl::InfiniteFuture()) absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_NE(next, absl::InfiniteFuture()) << "no reconnect wait after " << absl::FormatTime(now);
    const size_t seen = Connects().size();
    clock_.Advance(next - now);
    ASSERT_TRUE(WaitForConnects(seen + 1));
  }
  const std::vector<absl::Time> connects = Connects();
  ASSERT_GE(connects.back(), back);
  EXPECT_LE(connects.back() - back, absl::Seconds(3)) << "reconnected " << connects.back() - back << " after";
  EXPECT_GE(connects.size(), 10u) << "the outage should have cost several attempts";
}

// A registration the controller refuses (the name is another connected worker's) is
// printed with the controller's reason, not as the CANCELLED the link's own cancel used
// to turn it into, and the link retries at its backoff: a worker reconnecting behind its
// own stale connection gets its name back, a real duplicate keeps being refused.
TEST_F(ControllerLinkClockTest, ARefusedRegistrationIsLoggedWithTheControllersReasonAndRetried) {
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  const std::string why = "register: the name 'w1' is taken by a connected worker (address '10.0.0.7', 2 slots)";
  Start([why](int stream) {
    Plan plan;
    if (stream == 0) plan.refuse_register = grpc::Status(grpc::StatusCode::ALREADY_EXISTS, why);
    return plan;
  });
  ASSERT_TRUE(WaitForConnects(1));
  AdvanceTo(t0_ + absl::Seconds(1));  // the first backoff: it tries again
  ASSERT_TRUE(WaitForConnects(2));
  link_->Stop();
  spdlog::set_default_logger(previous);
  EXPECT_THAT(log.str(), HasSubstr("the controller refused to register this worker as w1: ALREADY_EXISTS: " + why +
                                   "; retrying"));
  EXPECT_THAT(log.str(), Not(HasSubstr("CANCELLED")));
  EXPECT_TRUE(ControllerLink::RefusedRegistration(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "")));
  EXPECT_FALSE(ControllerLink::RefusedRegistration(grpc::Status(grpc::StatusCode::UNAVAILABLE, "")))
      << "a broken link is not a refusal";
}

TEST(ControllerLinkChannelTest, GrpcsOwnReconnectBackoffIsBoundedLikeTheLinks) {
  const grpc::ChannelArguments channel_args = ControllerLink::ChannelArgs();  // owns what args points to
  const grpc_channel_args args = channel_args.c_channel_args();
  std::map<std::string, int> ints;
  for (size_t i = 0; i < args.num_args; ++i) {
    if (args.args[i].type == GRPC_ARG_INTEGER) ints[args.args[i].key] = args.args[i].value.integer;
  }
  EXPECT_EQ(ints[GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS], 200);
  EXPECT_EQ(ints.count(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS), 0u) << "that is the connect timeout";
  EXPECT_EQ(ints[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS], 2000);
  EXPECT_EQ(absl::Milliseconds(ints[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS]), ControllerLink::Options().max_backoff);
}

TEST_F(ControllerLinkClockTest, AStreamThatLastedLongerThanMaxBackoffResetsIt) {
  Start([](int stream) {
    return stream == 1 ? Plan{.hold_until_released = true} : Plan{.close_after_register = true};
  });
  ASSERT_TRUE(WaitForConnects(1));
  AdvanceTo(t0_ + absl::Seconds(1));  // first backoff
  ASSERT_TRUE(WaitForConnects(2));
  clock_.Advance(absl::Seconds(5));  // stream 1 stays up 5 s > max_backoff
  controller_->Release();
  AdvanceTo(t0_ + absl::Seconds(7));  // backoff back to 1 s, not 2 s
  ASSERT_TRUE(WaitForConnects(3));
  AdvanceTo(t0_ + absl::Seconds(9));  // and doubling again from there
  ASSERT_TRUE(WaitForConnects(4));
  EXPECT_EQ(Connects(), (std::vector<absl::Time>{t0_, t0_ + absl::Seconds(1),
                                                 t0_ + absl::Seconds(7), t0_ + absl::Seconds(9)}));
}

TEST_F(ControllerLinkClockTest, HeartbeatsFollowTheIntervalTheControllerAskedFor) {
  Start([](int) { return Plan{.heartbeat_interval_ms = 500}; });
  FakeController *c = controller_.get();
  auto heartbeats = [c](size_t n) {
    return c->WaitFor([c, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->heartbeats_.size() >= n; });
  };
  ASSERT_TRUE(heartbeats(1));
  AdvanceTo(t0_ + absl::Milliseconds(500));
  ASSERT_TRUE(heartbeats(2));
  AdvanceTo(t0_ + absl::Milliseconds(1000));
  ASSERT_TRUE(heartbeats(3));
  absl::MutexLock lock(&c->mu_);
  EXPECT_EQ(c->heartbeats_, (std::vector<std::pair<absl::Time, int>>{
                                {t0_, 3},
                                {t0_ + absl::Milliseconds(500), 3},
                                {t0_ + absl::Milliseconds(1000), 3}}));
  ASSERT_EQ(c->registers_.size(), 1u);
  EXPECT_EQ(c->registers_[0].name(), "w1");
  ASSERT_EQ(c->registers_[0].running_size(), 1);
  EXPECT_EQ(c->registers_[0].running(0).job_id(), "j1");
}

TEST_F(ControllerLinkClockTest, EventsWaitForTheFlushIntervalAndAreResentAfterReconnect) {
  Start([](int stream) {
    return stream == 0 ? Plan{.close_on_first_batch = true} : Plan{};
  });
  outbox_.Add(Ev(1), clock_.Now());
  AdvanceTo(t0_ + absl::Milliseconds(100));  // the outbox's flush interval
  FakeController *c = controller_.get();
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->batches_.size() == 1; }));
  AdvanceTo(t0_ + absl::Milliseconds(1100));  // the stream closed; 1 s backoff
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->batches_.size() == 2; }));
  absl::MutexLock lock(&c->mu_);
  EXPECT_EQ(c->connects_.size(), 2u);
  EXPECT_EQ(c->batches_[0].first, 0);
  EXPECT_EQ(c->batches_[1].first, 1);
  EXPECT_EQ(c->batches_[1].second.SerializeAsString(), c->batches_[0].second.SerializeAsString());
  ASSERT_EQ(c->batches_[0].second.events_size(), 1);
  EXPECT_EQ(c->batches_[0].second.events(0).source_seq(), 1);
}

TEST_F(ControllerLinkClockTest, DrainFlushesAtOnceAndReturnsWhenAcked) {
  Start([](int) { return Plan{}; });
  FakeController *c = controller_.get();
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !c->heartbeats_.empty(); }));
  outbox_.Add(Ev(7), clock_.Now());
  auto drained = std::async(std::launch::async, [&] { return link_->Drain(absl::Seconds(30)); });
  const std::future_status status = drained.wait_for(std::chrono::seconds(20));
  if (status != std::future_status::ready) clock_.Advance(absl::Seconds(30));  // let it end
  ASSERT_EQ(status, std::future_status::ready);
  EXPECT_TRUE(drained.get());
  EXPECT_EQ(clock_.Now(), t0_);  // no flush interval had to pass
  EXPECT_TRUE(outbox_.Empty());
  absl::MutexLock lock(&c->mu_);
  ASSERT_EQ(c->batches_.size(), 1u);
  EXPECT_EQ(c->batches_[0].second.events(0).source_seq(), 7);
}

TEST_F(ControllerLinkClockTest, DrainGivesUpWhenItsTimeoutPassesOnTheClock) {
  Start([](int) { return Plan{.ack_events = false}; });
  FakeController *c = controller_.get();
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !c->heartbeats_.empty(); }));
  outbox_.Add(Ev(1), clock_.Now());
  auto drained = std::async(std::launch::async, [&] { return link_->Drain(absl::Seconds(2)); });
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->batches_.size() == 1; }));
  AdvanceTo(t0_ + absl::Seconds(2));
  ASSERT_EQ(drained.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_FALSE(drained.get());
  EXPECT_FALSE(outbox_.Empty());
}

}  // namespace
}  // namespace trainyard
