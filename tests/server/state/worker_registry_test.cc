// WorkerRegistry with plain values, a fake clock and fake channels: registration and
// replacement, disconnects, slot accounting, port rotation, lost-worker detection and
// refused Register values.
#include "server/state/job_manager.h"
#include "server/state/worker_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/worker_identity.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::Register Reg(const std::string& name, int slots, int port_min = 100, int port_max = 102) {
  v1::Register reg;
  reg.set_name(name);
  reg.set_slots(slots);
  reg.set_address(name + ".local");
  reg.set_rendezvous_port_min(port_min);
  reg.set_rendezvous_port_max(port_max);
  return reg;
}

// Carries out the registry's recorded worker messages, as JobManager does.
void Deliver(Effects& fx) {
  for (auto& o : fx.outbound()) {
    if (o.message) {
      o.channel->Send(*o.message);
    } else {
      o.channel->Close(o.close_reason);
    }
  }
  fx.outbound().clear();
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeWorkerChannel> Register(int64_t conn, const v1::Register& reg) {
    auto channel = std::make_shared<FakeWorkerChannel>();
    Effects fx;
    absl::Status s = registry_.Register(conn, reg, channel, &fx);
    EXPECT_TRUE(s.ok()) << s;
    Deliver(fx);
    return channel;
  }

  FakeClock clock_;
  WorkerRegistry registry_{&clock_, absl::Seconds(2), absl::Seconds(15)};
};

TEST_F(WorkerRegistryTest, RegisterAcksWithTheHeartbeatIntervalAndListsTheWorker) {
  auto ch = Register(7, Reg("w1", 3));
  auto sent = ch->sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].register_ack().heartbeat_interval_ms(), 2000);
  EXPECT_EQ(registry_.NameOf(7), "w1");
  EXPECT_EQ(registry_.NameOf(8), std::nullopt);
  EXPECT_EQ(registry_.Channel("w1"), ch);
  EXPECT_EQ(registry_.Address("w1"), "w1.local");
  auto list = registry_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name(), "w1");
  EXPECT_EQ(list[0].slots(), 3);
  EXPECT_EQ(list[0].free_slots(), 3);
  EXPECT_TRUE(list[0].connected());
  EXPECT_EQ(registry_.ConnectedSlots(), 3);
}

TEST_F(WorkerRegistryTest, ASecondStreamClaimingALiveWorkersNameIsRefusedAndChangesNothing) {
  auto real = Register(1, Reg("w1", 2, 100, 102));
  registry_.Reserve("w1");
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(registry_.Touch(1));  // a heartbeat
  clock_.Advance(absl::Seconds(6));  // 16 s after registering, 6 s (three intervals) after the heartbeat
  auto forger = std::make_shared<FakeWorkerChannel>();
  Effects fx;
  absl::Status s = registry_.Register(2, Reg("w1", 8, 300, 310), forger, &fx);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.message(),
            "register: the name 'w1' is taken by a connected worker (address 'w1.local', 2 slots, registered " +
                absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", clock_.Now() - absl::Seconds(16), absl::UTCTimeZone()) +
                ", last heard from 6s ago); each worker needs its own --name. A new connection takes the name "
                "only once that one has been silent for 6s (the same worker reconnecting behind a stale "
                "connection)");
  EXPECT_TRUE(fx.outbound().empty()) << "neither stream gets a message";
  EXPECT_THAT(real->closes(), IsEmpty());
  EXPECT_EQ(registry_.NameOf(1), "w1");
  EXPECT_EQ(registry_.NameOf(2), std::nullopt);
  EXPECT_EQ(registry_.Channel("w1"), real);
  EXPECT_EQ(registry_.FreeSlots("w1"), 1) << "the real worker's slots, not the forger's";
  EXPECT_EQ(registry_.Address("w1"), "w1.local");
  // Once the old stream missed three heartbeats, the newcomer takes the name, before
  // the timeout (15 s) would declare the worker lost: its slots stay reserved.
  clock_.Advance(absl::Seconds(1));
  auto next = Register(2, Reg("w1", 2));
  EXPECT_EQ(registry_.FreeSlots("w1"), 1) << "the reserved slot survives the takeover";
  EXPECT_THAT(real->closes(),
              ElementsAre("replaced by a newer connection of the same worker (the old one fell silent)"));
  EXPECT_EQ(registry_.Channel("w1"), next);
}

TEST_F(WorkerRegistryTest, AStreamOfADisconnectedWorkerTakesTheNameAtOnce) {
  Register(1, Reg("w1", 2));
  ASSERT_TRUE(registry_.Disconnect(1));
  auto again = Register(2, Reg("w1", 2));
  EXPECT_EQ(registry_.NameOf(2), "w1");
  EXPECT_EQ(registry_.Channel("w1"), again);
}

TEST_F(WorkerRegistryTest, ANewStreamOfTheSameWorkerReplacesAndClosesTheOldOnceItFellSilent) {
  auto old_channel = Register(1, Reg("w1", 2));
  registry_.Reserve("w1");
  clock_.Advance(absl::Seconds(7));
  auto new_channel = Register(2, Reg("w1", 2));
  EXPECT_THAT(old_channel->closes(),
              ElementsAre("replaced by a newer connection of the same worker (the old one fell silent)"));
  EXPECT_THAT(new_channel->closes(), IsEmpty());
  EXPECT_EQ(registry_.NameOf(1), std::nullopt);
  EXPECT_EQ(registry_.NameOf(2), "w1");
  EXPECT_EQ(registry_.Channel("w1"), new_channel);
  EXPECT_EQ(registry_.FreeSlots("w1"), 1) << "a reconnect keeps the slots its ranks hold";
  EXPECT_EQ(registry_.List().size(), 1u);
}

TEST_F(WorkerRegistryTest, DisconnectKeepsTheWorkerKnownButOutOfTheFleet) {
  Register(1, Reg("w1", 2));
  Register(2, Reg("w2", 1));
  EXPECT_TRUE(registry_.Disconnect(1));
  EXPECT_FALSE(registry_.Disconnect(1)) << "already disconnected";
  EXPECT_FALSE(registry_.Touch(1));
  EXPECT_EQ(registry_.NameOf(1), std::nullopt);
  EXPECT_EQ(registry_.Channel("w1"), nullptr);
  EXPECT_FALSE(registry_.IsConnected("w1"));
  EXPECT_EQ(registry_.ConnectedSlots(), 1);
  ASSERT_EQ(registry_.ConnectedFree().size(), 1u);
  EXPECT_EQ(registry_.ConnectedFree()[0].name, "w2");
  auto list = registry_.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_FALSE(list[0].connected());
  auto totals = registry_.Count();
  EXPECT_EQ(totals.connected, 1);
  EXPECT_EQ(totals.slots, 1);
  EXPECT_EQ(totals.free, 1);
}

TEST_F(WorkerRegistryTest, SlotsAreReservedPerRankAndReleased) {
  Register(1, Reg("w1", 3));
  Register(2, Reg("w2", 2));
  registry_.Reserve("w1");
  registry_.Reserve("w1");
  registry_.Reserve("w2");
  registry_.Reserve("gone");  // unknown: ignored
  EXPECT_EQ(registry_.FreeSlots("w1"), 1);
  EXPECT_EQ(registry_.FreeSlots("w2"), 1);
  EXPECT_EQ(registry_.FreeSlots("gone"), 0);
  auto free = registry_.ConnectedFree();
  ASSERT_EQ(free.size(), 2u);
  EXPECT_EQ(free[0].name, "w1");
  EXPECT_EQ(free[0].free_slots, 1);
  EXPECT_EQ(free[1].free_slots, 1);
  EXPECT_EQ(registry_.Count().free, 2);
  registry_.Release("w1");
  EXPECT_EQ(registry_.FreeSlots("w1"), 2);
  registry_.Release("w2");
  registry_.Release("w2");  // more releases than reservations do not add slots
  EXPECT_EQ(registry_.FreeSlots("w2"), 2);
  EXPECT_EQ(registry_.Count().free, 4);
  EXPECT_EQ(registry_.ConnectedSlots(), 5);
}

// Slots come back when the worker reports the ranks gone, not when the controller stops
// counting them; a registration replaces the strays with what it reports.
TEST_F(WorkerRegistryTest, StrayRanksHoldSlotsUntilReportedGoneOrNotReportedAgain) {
  Register(1, Reg("w1", 3));
  registry_.Reserve("w1");
  registry_.HoldStray("w1", StrayRank{"job-1", 1, 0});
  registry_.HoldStray("w1", StrayRank{"job-1", 1, 1});
  registry_.HoldStray("w9", StrayRank{"job-1", 1, 2});  // unknown: ignored
  EXPECT_EQ(registry_.FreeSlots("w1"), 0);
  EXPECT_EQ(registry_.StrayCount("w1"), 2);
  EXPECT_EQ(registry_.Count().free, 0);
  EXPECT_FALSE(registry_.RankGone("w2", "job-1", 1, 0)) << "another worker's report frees nothing here";
  EXPECT_TRUE(registry_.RankGone("w1", "job-1", 1, 0));
  EXPECT_FALSE(registry_.RankGone("w1", "job-1", 1, 0)) << "once";
  EXPECT_EQ(registry_.FreeSlots("w1"), 1);
  ASSERT_EQ(registry_.ConnectedFree().size(), 1u);
  EXPECT_EQ(registry_.ConnectedFree()[0].free_slots, 1);
  registry_.SetStrays("w1", {StrayRank{"job-2", 4, 0}, StrayRank{"job-2", 4, 1}});
  EXPECT_EQ(registry_.FreeSlots("w1"), 0);
  registry_.SetStrays("w1", {});
  EXPECT_EQ(registry_.FreeSlots("w1"), 2);
}

// After a refused Assign the worker takes no new ranks until a heartbeat reports at least
// the free slots the controller counts; a registration settles it too.
TEST_F(WorkerRegistryTest, AWorkerThatRefusedAnAssignIsHeldBackUntilItsHeartbeatAgrees) {
  Register(1, Reg("w1", 2));
  registry_.Reserve("w1");
  registry_.AssignRefused("w1");
  EXPECT_TRUE(registry_.Resyncing("w1"));
  EXPECT_THAT(registry_.ConnectedFree(), IsEmpty());
  v1::Heartbeat hb;
  hb.set_free_slots(0);
  registry_.Heartbeat(1, hb);
  EXPECT_TRUE(registry_.Resyncing("w1")) << "it has fewer free than counted (1)";
  hb.set_free_slots(1);
  registry_.Heartbeat(1, hb);
  EXPECT_FALSE(registry_.Resyncing("w1"));
  ASSERT_EQ(registry_.ConnectedFree().size(), 1u);
  registry_.AssignRefused("w1");
  clock_.Advance(absl::Seconds(7));
  Register(2, Reg("w1", 2));
  EXPECT_FALSE(registry_.Resyncing("w1"));
}

TEST_F(WorkerRegistryTest, PortsRotateThroughTheRangeAndSkipHeldOnes) {
  Register(1, Reg("w1", 3, 100, 102));
  EXPECT_EQ(registry_.AllocatePort("w1"), 100);
  EXPECT_EQ(registry_.AllocatePort("w1"), 101);
  registry_.ReleasePort("w1", 100);
  // 100 was just released (maybe in TIME_WAIT): the rotation moves on first.
  EXPECT_EQ(registry_.AllocatePort("w1"), 102);
  EXPECT_EQ(registry_.AllocatePort("w1"), 100) << "wraps around, 101 is still held";
  registry_.ReleasePort("w1", 101);
  EXPECT_EQ(registry_.AllocatePort("w1"), 101);
  // A port held by a recovered gang is skipped.
  Register(2, Reg("w2", 3, 200, 202));
  registry_.HoldPort("w2", 200);
  EXPECT_EQ(registry_.AllocatePort("w2"), 201);
}

// The controller's defaults (JobManagerOptions, and so trainyard-controller's
// --heartbeat-timeout and --reconnect-window): a worker is unreachable after 10 s
// without a heartbeat (5 intervals) and lost 25 s after that.
TEST(WorkerRegistryDefaultsTest, AWorkerIsUnreachableAfterTenSilentSecondsAndLostTwentyFiveLater) {
  FakeClock clock;
  const JobManagerOptions defaults;
  WorkerRegistry registry{&clock, defaults.heartbeat_interval, defaults.heartbeat_timeout, defaults.reconnect_window};
  Effects fx;
  ASSERT_TRUE(registry.Register(1, Reg("w1", 1), std::make_shared<FakeWorkerChannel>(), &fx).ok());
  const absl::Time registered = clock.Now();
  clock.Advance(absl::Seconds(10));
  WorkerChanges changes = registry.Tick(&fx);
  EXPECT_THAT(changes.lost, IsEmpty());
  EXPECT_THAT(changes.unreachable, IsEmpty());
  clock.Advance(absl::Seconds(1));
  changes = registry.Tick(&fx);
  EXPECT_THAT(changes.lost, IsEmpty());
  ASSERT_EQ(changes.unreachable.size(), 1u);
  EXPECT_EQ(changes.unreachable[0].why, "no heartbeat for 11s");
  EXPECT_EQ(changes.unreachable[0].since, registered + absl::Seconds(10));
  EXPECT_EQ(changes.unreachable[0].deadline, registered + absl::Seconds(35));
  clock.Advance(absl::Seconds(24));  // 35 s silent: the window's last second
  changes = registry.Tick(&fx);
  EXPECT_THAT(changes.lost, IsEmpty());
  EXPECT_THAT(changes.unreachable, IsEmpty()) << "reported once";
  clock.Advance(absl::Seconds(1));
  const auto lost = registry.Tick(&fx).lost;
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].why, "no heartbeat for 36s, not back within the 25s reconnect window");
  EXPECT_EQ(defaults.heartbeat_interval, absl::Seconds(2));
}

TEST_F(WorkerRegistryTest, ASilentWorkerIsLostAfterTheTimeoutAndItsStreamClosed) {
  auto ch1 = Register(1, Reg("w1", 1));
  auto ch2 = Register(2, Reg("w2", 1));
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(registry_.Touch(1));
  clock_.Advance(absl::Seconds(5));  // w2 silent for exactly the timeout
  Effects fx;
  EXPECT_THAT(registry_.Tick(&fx).lost, IsEmpty());
  clock_.Advance(absl::Seconds(1));
  auto lost = registry_.Tick(&fx).lost;
  Deliver(fx);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "w2");
  EXPECT_EQ(lost[0].why, "no heartbeat for 16s");
  EXPECT_THAT(ch2->closes(), ElementsAre("worker lost: no heartbeat for 16s"));
  EXPECT_THAT(ch1->closes(), IsEmpty());
  ASSERT_EQ(registry_.List().size(), 1u);
  EXPECT_EQ(registry_.List()[0].name(), "w1");

  // A disconnected worker that does not come back is lost too.
  EXPECT_TRUE(registry_.Disconnect(1));
  clock_.Advance(absl::Seconds(16));
  lost = registry_.Tick(&fx).lost;
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].why, "disconnected for 16s");
  EXPECT_THAT(registry_.List(), IsEmpty());
  EXPECT_THAT(fx.outbound(), IsEmpty()) << "no stream left to close";
}

TEST_F(WorkerRegistryTest, AnExpectedWorkerWaitsForItsReconnect) {
  registry_.ExpectReconnect("w1");
  registry_.Reserve("w1");
  auto list = registry_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_FALSE(list[0].connected());
  EXPECT_EQ(registry_.ConnectedSlots(), 0);
  clock_.Advance(absl::Seconds(15));
  Effects fx;
  EXPECT_THAT(registry_.Tick(&fx).lost, IsEmpty());
  Register(3, Reg("w1", 2));
  EXPECT_EQ(registry_.FreeSlots("w1"), 1) << "the recovered rank keeps its slot";
  clock_.Advance(absl::Seconds(15));
  EXPECT_THAT(registry_.Tick(&fx).lost, IsEmpty()) << "registering counts as a heartbeat";
}

TEST_F(WorkerRegistryTest, BadRegisterValuesAreInvalidArgumentAndChangeNothing) {
  struct Case {
    v1::Register reg;
    std::string message;
  };
  std::vector<Case> cases = {
      {Reg("", 1), "register: name is empty"},
      {Reg("w1", 0), "register: slots must be in [1, 65536], got 0"},
      {Reg("w1", 70000, 1000, 80000), "register: slots must be in [1, 65536], got 70000"},
      {Reg("w1", 4, 100, 102), "register: rendezvous port range 100-102 holds fewer ports than the 4 slots"},
      {Reg("w1", 1, 0, 10), "register: bad rendezvous port range 0-10"},
      {Reg("w1", 1, 100, 70000), "register: bad rendezvous port range 100-70000"},
      {Reg("w1", 1, 300, 200), "register: bad rendezvous port range 300-200"},
  };
  for (const auto& c : cases) {
    Effects fx;
    auto ch = std::make_shared<FakeWorkerChannel>();
    absl::Status s = registry_.Register(1, c.reg, ch, &fx);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_TRUE(fx.empty()) << c.message;
  }
  EXPECT_THAT(registry_.List(), IsEmpty());
  EXPECT_EQ(registry_.NameOf(1), std::nullopt);
}

}  // namespace
}  // namespace trainyard::testing

namespace trainyard {
namespace {

// A worker's name becomes a path component (run folders, log names): a name that would
// climb out of its folder or be absolute is refused at Register.
TEST(WorkerNameTest, NamesThatWouldBePathsAreRefused) {
  for (const std::string& bad : std::vector<std::string>{"../x", "/etc", "a/b", "..", ".", "a\\b", std::string("w\0x", 3)}) {
    EXPECT_FALSE(WorkerNameProblem(bad).empty()) << bad;
  }
  EXPECT_EQ(WorkerNameProblem("../x"), "holds a path separator: ../x");
  EXPECT_EQ(WorkerNameProblem(".."), "is a path component of its own: ..");
  for (const std::string good : std::vector<std::string>{"w1", "gpu-node-17.example.com", "rack3_w2", "..w", "a.b"}) {
    EXPECT_EQ(WorkerNameProblem(good), "") << good;
  }
}

}  // namespace
}  // namespace trainyard
