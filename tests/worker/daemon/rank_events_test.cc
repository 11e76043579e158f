#include "worker/daemon/rank_events.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace trainyard {
namespace {

TEST(RankEventsTest, ExitCodeZeroIsExitedWithoutMessage) {
  v1::RankState s = RankEvents::Exit("w1", 42, {0, 0}, false, "", "some stderr").rank_state();
  EXPECT_EQ(s.state(), v1::RankState::EXITED);
  EXPECT_EQ(s.worker(), "w1");
  EXPECT_EQ(s.pid(), 42);
  EXPECT_EQ(s.message(), "");
}

TEST(RankEventsTest, NonZeroExitIsFailedWithTheStderrTail) {
  v1::RankState s = RankEvents::Exit("w1", 42, {3, 0}, false, "", "e1\ne2").rank_state();
  EXPECT_EQ(s.state(), v1::RankState::FAILED);
  EXPECT_EQ(s.exit_code(), 3);
  EXPECT_EQ(s.message(), "exit code 3: e1\ne2");
  EXPECT_EQ(RankEvents::Exit("w1", 42, {3, 0}, false, "", "").rank_state().message(),
            "exit code 3");
}

TEST(RankEventsTest, SignalDeathIsFailedWithTheSignalNameAndNoTail) {
  v1::RankState s = RankEvents::Exit("w1", 42, {0, SIGSEGV}, false, "", "tail").rank_state();
  EXPECT_EQ(s.state(), v1::RankState::FAILED);
  EXPECT_EQ(s.signal(), SIGSEGV);
  EXPECT_EQ(s.message(), "killed by signal 11 (SIGSEGV)");
  EXPECT_EQ(RankEvents::Exit("w1", 1, {0, 63}, false, "", "").rank_state().message(),
            "killed by signal 63 (signal 63)");
}

TEST(RankEventsTest, AKilledRankIsKilledWhateverItsEnd) {
  EXPECT_EQ(RankEvents::Exit("w1", 1, {0, SIGKILL}, true, "cancelled: user", "t").rank_state()
                .message(),
            "cancelled: user (killed by signal 9 (SIGKILL))");
  v1::RankState clean = RankEvents::Exit("w1", 1, {0, 0}, true, "cancelled", "").rank_state();
  EXPECT_EQ(clean.state(), v1::RankState::KILLED);
  EXPECT_EQ(clean.message(), "cancelled (exit code 0)");
}

TEST(RankEventsTest, TimestampSplitsUnixNanos) {
  google::protobuf::Timestamp ts =
      RankEvents::Timestamp(absl::FromUnixNanos(1'700'000'000'123'456'789));
  EXPECT_EQ(ts.seconds(), 1'700'000'000);
  EXPECT_EQ(ts.nanos(), 123'456'789);
}

TEST(RankEventsTest, StateAndLogCarryTheirFields) {
  v1::Event state = RankEvents::State(v1::RankState::STARTING, "w2");
  EXPECT_EQ(state.rank_state().state(), v1::RankState::STARTING);
  EXPECT_EQ(state.rank_state().worker(), "w2");
  v1::Event log = RankEvents::Log("warn", "disk full");
  EXPECT_EQ(log.log().level(), "warn");
  EXPECT_EQ(log.log().message(), "disk full");
}

// Every event a rank produces stays under the controller's 1 MiB per event: a 1 MiB
// stdout line and a 1.25 MiB stderr tail are cut to 64 KiB (the tail keeps its end).
TEST(RankEventsTest, LongMessagesAreCutToStayUnderTheEventCap) {
  const v1::Event log = RankEvents::Log("info", std::string(1 << 20, 'a'));
  EXPECT_LT(log.ByteSizeLong(), 70u * 1024);
  EXPECT_NE(log.log().message().find("more bytes)"), std::string::npos);
  ProcessExit exit;
  exit.exit_code = 1;
  const std::string tail = std::string(20 * 64 * 1024, 'e') + "the last line";
  const v1::Event failed = RankEvents::Exit("w1", 42, exit, false, "", tail);
  EXPECT_EQ(failed.rank_state().state(), v1::RankState::FAILED);
  EXPECT_LT(failed.ByteSizeLong(), 70u * 1024);
  const std::string& m = failed.rank_state().message();
  EXPECT_EQ(m.substr(m.size() - 13), "the last line");
}

}  // namespace
}  // namespace trainyard
