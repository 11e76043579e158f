// RankSupervisor with a fake clock and fake processes: kill grace, WaitIdle and event
// times run on the injected clock, and launches use the injected launcher, so nothing
// here waits for time to pass.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <future>

#include "tests/fakes/fake_process_launcher.h"
#include "tests/fakes/recording_clock.h"
#include "tests/worker/daemon/test_util.h"
#include "worker/daemon/rank_supervisor.h"

namespace trainyard {
namespace {

using testing::EventCollector;
using testing::FakeProcessLauncher;
using testing::HasState;
using testing::RecordingClock;
using testing::TempDir;

constexpr pid_t kPid = FakeProcessLauncher::kFirstPid;

v1::Assign MakeAssign(std::vector<int> ranks, int world_size) {
  v1::Assign a;
  a.set_job_id("job1");
  a.set_attempt(3);
  a.set_world_size(world_size);
  for (int r : ranks) a.add_ranks(r);
  a.set_master_addr("10.1.1.1");
  a.set_master_port(29555);
  return a;
}

class RankSupervisorClockTest : public ::testing::Test {
 protected:
  RankSupervisor *Make(bool exit_on_sigterm = false) {
    launcher_ = std::make_unique<FakeProcessLauncher>(&clock_, exit_on_sigterm);
    RankSupervisor::Options o;
    o.worker_name = "w9";
    o.gloo_host = "10.1.1.9";
    o.rank_binary = "/bin/rank";
    o.work_dir = dir_.path();
    o.slots = 2;
    o.threads_per_rank = 4;
    o.kill_grace = absl::Seconds(3);
    sup_ = std::make_unique<RankSupervisor>(o, launcher_.get(), &clock_,
                                            [this](v1::Event e) { events_.Add(std::move(e)); });
    return sup_.get();
  }
  void TearDown() override {
    // A failed test may leave a rank whose SIGKILL is still due; let it come.
    if (HasFailure()) clock_.Advance(absl::Hours(24 * 365 * 100));
    sup_.reset();
  }
  bool WaitForState(int rank, v1::RankState::State state) {
    return events_.WaitFor([=](auto &ev) { return HasState(ev, rank, state); });
  }

  TempDir dir_;
  RecordingClock clock_;
  EventCollector events_;
  const absl::Time t0_ = clock_.Now();
  std::unique_ptr<FakeProcessLauncher> launcher_;
  std::unique_ptr<RankSupervisor> sup_;
};

TEST_F(RankSupervisorClockTest, LaunchesEachRankWithItsSpecThroughTheInjectedLauncher) {
  RankSupervisor *sup = Make();
  FakeProcessLauncher &launcher = *launcher_;
  ASSERT_TRUE(sup->Assign(MakeAssign({1, 0}, 2)).ok());
  auto requests = launcher.requests();
  ASSERT_EQ(requests.size(), 2u);
  const std::string config = dir_.path() + "/job1/3/config.json";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(requests[i].binary, "/bin/rank");
    EXPECT_EQ(requests[i].args,
              (std::vector<std::string>{"--config", config, "--rank", i == 0 ? "1" : "0",
                                        "--world-size", "2", "--master-addr", "10.1.1.1",
                                        "--master-port", "29555", "--gloo-host", "10.1.1.9",
                                        "--attempt", "3", "--threads", "4", "--run-dir",
                                        dir_.path() + "/job1/3", "--local-rank", std::to_string(i)}));
  }
  EXPECT_TRUE(std::filesystem::exists(config));
  launcher.Exit(kPid, {0, 0});
  launcher.Exit(kPid + 1, {0, 0});
  ASSERT_TRUE(WaitForState(0, v1::RankState::EXITED) && WaitForState(1, v1::RankState::EXITED));
}

TEST_F(RankSupervisorClockTest, SigkillFollowsSigtermAfterTheGraceOnTheClock) {
  RankSupervisor *sup = Make();  // the rank ignores SIGTERM
  FakeProcessLauncher &launcher = *launcher_;
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(WaitForState(0, v1::RankState::RUNNING));

  v1::Cancel cancel;
  cancel.set_job_id("job1");
  cancel.set_reason("stop");
  sup->Cancel(cancel);
  auto signals = launcher.signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].pid, kPid);
  EXPECT_EQ(signals[0].signal, SIGTERM);
  EXPECT_EQ(signals[0].at, t0_);

  // The supervisor waits for exactly the grace period on the clock, then kills.
  ASSERT_TRUE(clock_.WaitForDeadline(t0_ + absl::Seconds(3)));
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(WaitForState(0, v1::RankState::KILLED));
  signals = launcher.signals();
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[1].pid, kPid);
  EXPECT_EQ(signals[1].signal, SIGKILL);
  EXPECT_EQ(signals[1].at, t0_ + absl::Seconds(3));  // not a moment before the grace ended
  const v1::RankState last = events_.events().back().rank_state();
  EXPECT_EQ(last.signal(), SIGKILL);
  EXPECT_EQ(last.message(), "cancelled: stop (killed by signal 9 (SIGKILL))");
}

TEST_F(RankSupervisorClockTest, ARankThatStopsOnSigtermIsKilledWithoutSigkill) {
  RankSupervisor *sup = Make(/*exit_on_sigterm=*/true);
  FakeProcessLauncher &launcher = *launcher_;
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  sup->KillAll("shutting down");  // returns once the rank is reaped
  ASSERT_EQ(launcher.signals().size(), 1u);
  EXPECT_EQ(launcher.signals()[0].signal, SIGTERM);
  // The slot is freed before the final state goes out, so that state may follow KillAll.
  ASSERT_TRUE(WaitForState(0, v1::RankState::KILLED));
  const v1::RankState last = events_.events().back().rank_state();
  EXPECT_EQ(last.state(), v1::RankState::KILLED);
  EXPECT_EQ(last.message(), "shutting down (killed by signal 15 (SIGTERM))");
  EXPECT_EQ(sup->FreeSlots(), 2);
}

TEST_F(RankSupervisorClockTest, EventTimesComeFromTheClock) {
  RankSupervisor *sup = Make();
  FakeProcessLauncher &launcher = *launcher_;
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  launcher.WriteStdout(kPid, "hello");
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return ev.size() == 3; }));
  clock_.Advance(absl::Seconds(5));
  launcher.Exit(kPid, {0, 0});
  ASSERT_TRUE(WaitForState(0, v1::RankState::EXITED));
  auto ev = events_.events();
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[2].log().message(), "hello");
  const int64_t t0_s = absl::ToUnixSeconds(t0_);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ev[i].time().seconds(), t0_s) << i;
  EXPECT_EQ(ev[3].time().seconds(), t0_s + 5);
  EXPECT_EQ(ev[3].rank_state().state(), v1::RankState::EXITED);
}

TEST_F(RankSupervisorClockTest, WaitIdleTimesOutOnTheClock) {
  RankSupervisor *sup = Make();
  FakeProcessLauncher &launcher = *launcher_;
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  auto idle = std::async(std::launch::async, [&] { return sup->WaitIdle(absl::Seconds(10)); });
  EXPECT_TRUE(clock_.WaitForDeadline(t0_ + absl::Seconds(10)));
  clock_.Advance(absl::Seconds(10));
  const std::future_status status = idle.wait_for(std::chrono::seconds(20));
  if (status != std::future_status::ready) clock_.Advance(absl::Hours(24));  // let it end
  ASSERT_EQ(status, std::future_status::ready);
  EXPECT_FALSE(idle.get());

  launcher.Exit(kPid, {0, 0});
  EXPECT_TRUE(sup->WaitIdle(absl::Hours(1)));  // returns when the rank is gone
  EXPECT_EQ(sup->FreeSlots(), 2);
}

}  // namespace
}  // namespace trainyard
