#include "worker/daemon/rank_supervisor.h"

#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base/posix_process_launcher.h"
#include "tests/fakes/fake_clock.h"
#include "common/events/proto_json.h"
#include "common/events/rank_exit.h"
#include "tests/worker/daemon/test_util.h"

namespace trainyard {
namespace {

using testing::EventCollector;
using testing::HasState;
using ::testing::HasSubstr;
using testing::TempDir;

// Launch always fails; Wait/SignalGroup must never be reached.
class CountingLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest &) override {
    ++launches;
    return absl::UnavailableError("no launching in this test");
  }
  ProcessExit Wait(pid_t) override {
    ADD_FAILURE() << "Wait called";
    return {};
  }
  void SignalGroup(pid_t, int) override { ADD_FAILURE() << "SignalGroup called"; }
  int launches = 0;
};

v1::Assign MakeAssign(std::vector<int> ranks, int world_size) {
  v1::Assign a;
  a.set_job_id("job1");
  a.set_attempt(1);
  a.mutable_spec()->mutable_job()->set_name("demo");
  a.set_world_size(world_size);
  for (int r : ranks) a.add_ranks(r);
  a.set_master_addr("127.0.0.1");
  a.set_master_port(29501);
  return a;
}

class RankSupervisorTest : public ::testing::Test {
 protected:
  std::unique_ptr<RankSupervisor> Make(const std::string &binary, int slots = 4,
                                       RankSupervisor::ArtifactSink artifact_sink = {}) {
    RankSupervisor::Options o;
    o.artifact_sink = std::move(artifact_sink);
    o.worker_name = "w1";
    o.rank_binary = binary;
    o.work_dir = dir_.path() + "/work";
    o.slots = slots;
    o.threads_per_rank = 2;
    o.kill_grace = absl::Milliseconds(100);
    return std::make_unique<RankSupervisor>(o, &launcher_, &clock_,
                                            [this](v1::Event e) { events_.Add(std::move(e)); });
  }

  TempDir dir_;
  RealClock clock_;
  PosixProcessLauncher launcher_;
  EventCollector events_;
};

TEST_F(RankSupervisorTest, RelaysOutputInOrderAndReportsFailureWithStderrTail) {
  std::string script = dir_.WriteScript("rank.sh", R"(
echo '{"step_metrics":{"step":1,"loss":2.5}}'
echo "args: $*"
echo 'oops' >&2
echo 'boom' >&2
echo '{"compile":{"kind":"RECOMPILE","region":"attn"},"source_seq":99,"job_id":"bogus","rank":7}'
exit 3
)");
  auto sup = Make(script);
  ASSERT_TRUE(sup->Assign(MakeAssign({1}, 2)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 1, v1::RankState::FAILED); }));
  ASSERT_TRUE(sup->WaitIdle(absl::Seconds(30)));

  auto ev = events_.events();
  // Every event is stamped and numbered 1..N in emission order.
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].job_id(), "job1");
    EXPECT_EQ(ev[i].attempt(), 1);
    EXPECT_EQ(ev[i].rank(), 1);
    EXPECT_EQ(ev[i].source_seq(), static_cast<int64_t>(i + 1));
    EXPECT_TRUE(ev[i].has_time());
  }
  ASSERT_GE(ev.size(), 7u);
  EXPECT_EQ(ev[0].rank_state().state(), v1::RankState::STARTING);
  EXPECT_EQ(ev[1].rank_state().state(), v1::RankState::RUNNING);
  EXPECT_GT(ev[1].rank_state().pid(), 0);
  EXPECT_EQ(ev[1].rank_state().worker(), "w1");

  // Stdout events keep their order; stderr lines interleave anywhere between.
  std::vector<v1::Event> out, err;
  for (size_t i = 2; i + 1 < ev.size(); ++i) {
    (ev[i].has_log() && ev[i].log().level() == "warn" ? err : out).push_back(ev[i]);
  }
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].step_metrics().step(), 1);
  EXPECT_DOUBLE_EQ(out[0].step_metrics().loss(), 2.5);
  EXPECT_EQ(out[1].log().level(), "info");
  EXPECT_THAT(out[1].log().message(),
              HasSubstr("--rank 1 --world-size 2 --master-addr 127.0.0.1 --master-port 29501 "
                        "--gloo-host 127.0.0.1 --attempt 1 --threads 2 --run-dir " + dir_.path() +
                        "/work/job1/1"));
  EXPECT_EQ(out[2].compile().kind(), v1::CompileEvent::RECOMPILE);
  EXPECT_EQ(out[2].compile().region(), "attn");
  ASSERT_EQ(err.size(), 2u);
  EXPECT_EQ(err[0].log().message(), "oops");
  EXPECT_EQ(err[1].log().message(), "boom");

  const auto &last = ev.back().rank_state();
  EXPECT_EQ(last.state(), v1::RankState::FAILED);
  EXPECT_EQ(last.exit_code(), 3);
  EXPECT_EQ(last.message(), "exit code 3: oops\nboom");

  // The config the rank got is the spec as JSON.
  std::string config = dir_.path() + "/work/job1/1/config.json";
  EXPECT_THAT(out[1].log().message(), HasSubstr("--config " + config));
  std::ifstream in(config);
  std::stringstream text;
  text << in.rdbuf();
  v1::JobSpec spec;
  ASSERT_TRUE(FromJson(text.str(), &spec).ok()) << text.str();
  EXPECT_EQ(spec.job().name(), "demo");
  EXPECT_EQ(sup->FreeSlots(), 4);
}

// A rank writes files under --run-dir/artifacts and announces them; the supervisor
// hands the good one to the uploader, warns about the rest, relays none of them, and
// relays a Stall as it is.
TEST_F(RankSupervisorTest, HandsCheckedArtifactsToTheUploaderAndRelaysNoArtifactRef) {
  std::string script = dir_.WriteScript("rank.sh", R"(
while [ $# -gt 0 ]; do [ "$1" = --run-dir ] && run="$2"; shift; done
echo '{}' > "$run/artifacts/trace-r0.json"
echo 'secret' > "$run/outside.txt"
ln -s "$run/outside.txt" "$run/artifacts/link"
echo '{"artifact":{"name":"trace-r0.json","kind":"trace","uri":"file://'"$run"'/artifacts/trace-r0.json"}}'
echo '{"artifact":{"name":"leak","kind":"trace","uri":"file://'"$run"'/outside.txt"}}'
echo '{"artifact":{"name":"link","kind":"flight_recorder","uri":"file://'"$run"'/artifacts/link"}}'
echo '{"artifact":{"name":"../x","kind":"trace","uri":"file://'"$run"'/artifacts/trace-r0.json"}}'
echo '{"artifact":{"name":"core","kind":"core","uri":"file://'"$run"'/artifacts/trace-r0.json"}}'
echo '{"stall":{"collective":"dp:allreduce","collective_seq":7,"lagging_rank":1,"waiting_ranks":[0],"step":3}}'
exit 0
)");
  absl::Mutex mu;
  std::vector<std::pair<std::string, v1::ArtifactHeader>> queued;
  auto sup = Make(script, 4, [&](std::string path, v1::ArtifactHeader header) {
    absl::MutexLock lock(&mu);
    queued.emplace_back(std::move(path), std::move(header));
  });
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::EXITED); }));

  const std::string run_dir = dir_.path() + "/work/job1/1";
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(queued.size(), 1u);
    EXPECT_EQ(queued[0].first,
              std::filesystem::canonical(run_dir + "/artifacts/trace-r0.json").string());
    const v1::ArtifactHeader &h = queued[0].second;
    EXPECT_EQ(h.job_id(), "job1");
    EXPECT_EQ(h.attempt(), 1);
    EXPECT_EQ(h.rank(), 0);
    EXPECT_EQ(h.name(), "trace-r0.json");
    EXPECT_EQ(h.kind(), "trace");
    EXPECT_EQ(h.worker(), "w1");
  }
  std::vector<std::string> warnings;
  int stalls = 0;
  for (const v1::Event &e : events_.events()) {
    EXPECT_FALSE(e.has_artifact());
    if (e.has_log() && e.log().level() == "warn") warnings.push_back(e.log().message());
    if (e.has_stall()) {
      ++stalls;
      EXPECT_EQ(e.stall().collective(), "dp:allreduce");
      EXPECT_EQ(e.stall().collective_seq(), 7);
      EXPECT_EQ(e.stall().lagging_rank(), 1);
      EXPECT_THAT(e.stall().waiting_ranks(), ::testing::ElementsAre(0));
      EXPECT_EQ(e.stall().step(), 3);
    }
  }
  EXPECT_EQ(stalls, 1);
  ASSERT_EQ(warnings.size(), 4u);
  EXPECT_THAT(warnings[0], HasSubstr("artifact refused: artifact leak: "));
  EXPECT_THAT(warnings[0], HasSubstr("is not inside"));
  EXPECT_THAT(warnings[1], HasSubstr("artifact link: "));
  EXPECT_THAT(warnings[1], HasSubstr("is not inside"));
  EXPECT_THAT(warnings[2], HasSubstr("artifact name '../x'"));
  EXPECT_THAT(warnings[3], HasSubstr("kind 'core'"));
}

// The rank line protocol (common/events/rank_line.h), read strictly: a line meant as
// an event that is not one is kept, loud, as an error log naming what is wrong; plain
// text stays an info log; a payload only the controller may send is refused too.
TEST_F(RankSupervisorTest, InvalidEventLinesBecomeErrorLogsNotSilentDrops) {
  std::string script = dir_.WriteScript("rank.sh", R"(
echo '{"step_metrics":{"step":1,"los":2.5}}'
echo '{"step_metric":{"step":2}}'
echo '{"job_state":{"state":"SUCCEEDED"}}'
echo '{"log":{"level":"info","message":"fine"}}'
echo 'a banner a library printed'
exit 0
)");
  auto sup = Make(script);
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::EXITED); }));
  std::vector<v1::Event> logs;
  for (const v1::Event &e : events_.events()) {
    EXPECT_FALSE(e.has_step_metrics()) << e.ShortDebugString();
    EXPECT_FALSE(e.has_job_state()) << e.ShortDebugString();
    if (e.has_log()) logs.push_back(e);
  }
  ASSERT_EQ(logs.size(), 5u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(logs[i].log().level(), "error");
    EXPECT_THAT(logs[i].log().message(), HasSubstr("invalid event line from the rank"));
  }
  EXPECT_THAT(logs[0].log().message(), HasSubstr("los"));
  EXPECT_THAT(logs[1].log().message(), HasSubstr("step_metric"));
  EXPECT_THAT(logs[2].log().message(), HasSubstr("job_state is the controller's payload"));
  EXPECT_EQ(logs[3].log().level(), "info");
  EXPECT_EQ(logs[3].log().message(), "fine");
  EXPECT_EQ(logs[4].log().level(), "info");
  EXPECT_EQ(logs[4].log().message(), "a banner a library printed");
}

TEST_F(RankSupervisorTest, RefusesArtifactsWithoutAnUploader) {
  std::string script = dir_.WriteScript("rank.sh", R"(
while [ $# -gt 0 ]; do [ "$1" = --run-dir ] && run="$2"; shift; done
echo '{}' > "$run/artifacts/t.json"
echo '{"artifact":{"name":"t.json","kind":"trace","uri":"file://'"$run"'/artifacts/t.json"}}'
)");
  auto sup = Make(script);
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::EXITED); }));
  int warnings = 0;
  for (const v1::Event &e : events_.events()) {
    EXPECT_FALSE(e.has_artifact());
    if (e.has_log() && e.log().level() == "warn") {
      ++warnings;
      EXPECT_THAT(e.log().message(), HasSubstr("does not upload artifacts"));
    }
  }
  EXPECT_EQ(warnings, 1);
}

TEST_F(RankSupervisorTest, CleanExitIsExited) {
  auto sup = Make(dir_.WriteScript("ok.sh", "exit 0\n"));
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::EXITED); }));
  EXPECT_FALSE(HasState(events_.events(), 0, v1::RankState::FAILED));
}

TEST_F(RankSupervisorTest, SignalDeathIsFailedWithSignalName) {
  auto sup = Make(dir_.WriteScript("segv.sh", "kill -KILL $$\n"));
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::FAILED); }));
  const v1::RankState last = events_.events().back().rank_state();
  EXPECT_EQ(last.signal(), SIGKILL);
  EXPECT_EQ(last.message(), "killed by signal 9 (SIGKILL)");
}

TEST_F(RankSupervisorTest, CancelKillsSleepingRanks) {
  auto sup = Make(dir_.WriteScript("sleep.sh", "echo started\nexec sleep 1000\n"));
  ASSERT_TRUE(sup->Assign(MakeAssign({0, 1}, 2)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) {
    int started = 0;
    for (auto &e : ev) started += e.has_log() && e.log().message() == "started";
    return started == 2;
  }));
  EXPECT_EQ(sup->FreeSlots(), 2);
  ASSERT_EQ(sup->Running().size(), 1u);
  EXPECT_EQ(sup->Running()[0].ranks_size(), 2);

  std::vector<pid_t> pids;
  for (auto &e : events_.events()) {
    if (e.has_rank_state() && e.rank_state().state() == v1::RankState::RUNNING) {
      pids.push_back(e.rank_state().pid());
    }
  }
  ASSERT_EQ(pids.size(), 2u);

  v1::Cancel other;
  other.set_job_id("unknown-job");
  sup->Cancel(other);  // ignored

  v1::Cancel cancel;
  cancel.set_job_id("job1");
  cancel.set_reason("user asked");
  sup->Cancel(cancel);
  ASSERT_TRUE(events_.WaitFor([](auto &ev) {
    return HasState(ev, 0, v1::RankState::KILLED) && HasState(ev, 1, v1::RankState::KILLED);
  }));
  ASSERT_TRUE(sup->WaitIdle(absl::Seconds(30)));
  for (pid_t pid : pids) {
    EXPECT_EQ(kill(pid, 0), -1);
    EXPECT_EQ(errno, ESRCH);
  }
  EXPECT_FALSE(HasState(events_.events(), 0, v1::RankState::FAILED));
  EXPECT_EQ(sup->FreeSlots(), 4);
  EXPECT_TRUE(sup->Running().empty());
}

TEST_F(RankSupervisorTest, RankIgnoringSigtermIsKilledAfterGrace) {
  auto sup = Make(dir_.WriteScript("stubborn.sh", "trap '' TERM\necho ready\nsleep 1000\n"));
  ASSERT_TRUE(sup->Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) {
    for (auto &e : ev)
      if (e.has_log() && e.log().message() == "ready") return true;
    return false;
  }));
  v1::Cancel cancel;
  cancel.set_job_id("job1");
  cancel.set_attempt(1);
  sup->Cancel(cancel);
  ASSERT_TRUE(events_.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::KILLED); }));
  EXPECT_EQ(events_.events().back().rank_state().signal(), SIGKILL);
}

// Time stands still (nothing advances the fake clock), so every stderr line falls
// into one rate-limit window.
using FrozenClock = testing::FakeClock;

TEST(RankSupervisorStderrTest, RateLimitsStderrAndKeepsTail) {
  TempDir dir;
  FrozenClock clock;
  PosixProcessLauncher launcher;
  EventCollector events;
  RankSupervisor::Options o;
  o.worker_name = "w1";
  o.rank_binary = dir.WriteScript("noisy.sh",
                                  "i=1\nwhile [ $i -le 200 ]; do echo \"line "
                                  "$i\" >&2; i=$((i+1)); done\nexit 1\n");
  o.work_dir = dir.path();
  RankSupervisor sup(o, &launcher, &clock, [&](v1::Event e) { events.Add(std::move(e)); });
  ASSERT_TRUE(sup.Assign(MakeAssign({0}, 1)).ok());
  ASSERT_TRUE(events.WaitFor([](auto &ev) { return HasState(ev, 0, v1::RankState::FAILED); }));
  std::vector<std::string> warn;
  for (auto &e : events.events()) {
    if (e.has_log()) warn.push_back(e.log().message());
  }
  ASSERT_EQ(warn.size(), 51u);
  EXPECT_EQ(warn[0], "line 1");
  EXPECT_EQ(warn[49], "line 50");
  EXPECT_EQ(warn[50], "150 lines dropped");
  std::string message = events.events().back().rank_state().message();
  EXPECT_THAT(message, ::testing::StartsWith("exit code 1: line 181\n"));
  EXPECT_THAT(message, ::testing::EndsWith("\nline 200"));
}

TEST(RankSupervisorSlotsTest, RejectsAssignNeedingMoreSlotsThanFree) {
  TempDir dir;
  RealClock clock;
  CountingLauncher launcher;
  EventCollector events;
  RankSupervisor::Options o;
  o.worker_name = "w1";
  o.rank_binary = "/nonexistent";
  o.work_dir = dir.path();
  o.slots = 1;
  RankSupervisor sup(o, &launcher, &clock, [&](v1::Event e) { events.Add(std::move(e)); });
  absl::Status status = sup.Assign(MakeAssign({0, 1}, 2));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(launcher.launches, 0);
  auto ev = events.events();
  ASSERT_EQ(ev.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ev[r].rank(), r);
    EXPECT_EQ(ev[r].rank_state().state(), v1::RankState::FAILED);
    EXPECT_THAT(ev[r].rank_state().message(), HasSubstr("needs 2 slots"));
  }
  EXPECT_EQ(sup.FreeSlots(), 1);

  // A launch failure is a FAILED rank, and the slot comes back.
  status = sup.Assign(MakeAssign({0}, 1));
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(launcher.launches, 1);
  EXPECT_EQ(events.events().back().rank_state().state(), v1::RankState::FAILED);
  EXPECT_EQ(sup.FreeSlots(), 1);
}

TEST(RankSupervisorInputsTest, AMissingDatasetFailsEveryRankBeforeAnyStartsInOneMessage) {
  TempDir dir;
  RealClock clock;
  CountingLauncher launcher;
  EventCollector events;
  RankSupervisor::Options o;
  o.worker_name = "w1";
  o.rank_binary = "/nonexistent";
  o.work_dir = dir.path();
  o.slots = 2;
  RankSupervisor sup(o, &launcher, &clock, [&](v1::Event e) { events.Add(std::move(e)); });
  v1::Assign assign = MakeAssign({0, 1}, 2);
  const std::string corpus = dir.path() + "/corpus.txt";
  assign.mutable_spec()->mutable_training()->set_dataset("text");
  assign.mutable_spec()->mutable_training()->set_dataset_path(corpus);
  EXPECT_EQ(sup.Assign(assign).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(launcher.launches, 0) << "no rank process was started";
  auto ev = events.events();
  ASSERT_EQ(ev.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ev[r].rank(), r);
    EXPECT_EQ(ev[r].rank_state().state(), v1::RankState::FAILED);
    // Permanent: the controller fails the job instead of restarting it.
    EXPECT_EQ(ev[r].rank_state().exit_code(), kRankExitInputError);
  }
  // The file's name once, on the first rank; the other rank points at it.
  EXPECT_EQ(ev[0].rank_state().message(), "training.dataset_path: entry \"" + corpus + "\": file " + corpus +
                                              " does not exist (checked before starting any rank)");
  EXPECT_EQ(ev[1].rank_state().message(), "not started: the job's inputs are wrong (see rank 0)");
  EXPECT_EQ(sup.FreeSlots(), 2);

  // Once the file is there, the ranks are started (this launcher refuses them).
  std::ofstream(corpus) << "text\n";
  assign.set_attempt(2);
  EXPECT_EQ(sup.Assign(assign).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(launcher.launches, 2);
}

TEST(RankSupervisorSlotsTest, RejectsJobIdThatEscapesWorkDir) {
  TempDir dir;
  RealClock clock;
  CountingLauncher launcher;
  EventCollector events;
  RankSupervisor::Options o;
  o.work_dir = dir.path();
  RankSupervisor sup(o, &launcher, &clock, [&](v1::Event e) { events.Add(std::move(e)); });
  v1::Assign a = MakeAssign({0}, 1);
  a.set_job_id("../etc");
  EXPECT_EQ(sup.Assign(a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(launcher.launches, 0);
}

}  // namespace
}  // namespace trainyard
