// RunCli against an in-process fake JobService: global flags anywhere, --version,
// --help with the exit-code table and an example per command, one exit-code table for
// every command, watch's reconnect and live line, logs, get and explain.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/client/cli/cli_test_fixture.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::FakeJobService;

// An OSC title change, a bell, colours, a carriage return, a C1 CSI. (Invalid UTF-8
// cannot come this way: protobuf refuses it in a string field; TerminalSafeTest covers
// it.)
constexpr const char* kHostile = "\x1b]0;pwned\x07\x1b[31mred\x1b[0m\r\xc2\x9b" "2J ok";

grpc::Status Unavailable(const std::string& why) { return grpc::Status(grpc::StatusCode::UNAVAILABLE, why); }

class CliArgsTest : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    auto add_job = [this](const std::string& id, v1::Job::State state, int steps, int64_t last_seq,
                          const std::string& failure_reason = "") {
      v1::Job job = service_.AddJob(id, state, steps);
      job.set_last_seq(last_seq);
      job.set_failure_reason(failure_reason);
      service_.PutJob(job);
    };
    // "done": PENDING, RUNNING, two steps, a RECOMPILE, SUCCEEDED.
    add_job("done", v1::Job::SUCCEEDED, 2, 6);
    v1::Event recompile = FakeJobService::MakeEvent("done", 4, 0);
    recompile.mutable_compile()->set_kind(v1::CompileEvent::RECOMPILE);
    recompile.mutable_compile()->set_region("attention.d256");
    recompile.mutable_compile()->set_reason("input[0].size(1): expected 256, got 128");
    std::vector<v1::Event> done = {FakeJobService::StateEvent("done", 1, v1::Job::PENDING, "needs 1 slot"),
                                   FakeJobService::StateEvent("done", 2, v1::Job::RUNNING),
                                   FakeJobService::StepEvent("done", 3, 1, 6.5), recompile,
                                   FakeJobService::StepEvent("done", 5, 2, 5.5),
                                   FakeJobService::StateEvent("done", 6, v1::Job::SUCCEEDED)};
    service_.SetEvents("done", done);
    // "failed" and "cancelled" end so.
    for (auto [id, state] : {std::pair<std::string, v1::Job::State>{"failed", v1::Job::FAILED},
                             {"cancelled", v1::Job::CANCELLED}}) {
      add_job(id, state, 1, 2);
      service_.SetEvents(id, {FakeJobService::StateEvent(id, 1, v1::Job::PENDING, "needs 1 slot"),
                              FakeJobService::StateEvent(id, 2, state, "why")});
    }
    // "live": RUNNING with log lines; its stream stays open after them.
    add_job("live", v1::Job::RUNNING, 10, 4);
    v1::Job live = service_.Job("live");
    live.set_world_size(2);
    live.mutable_spec()->mutable_parallelism()->set_dp(2);
    service_.PutJob(live);
    service_.SetEvents("live", {FakeJobService::StateEvent("live", 1, v1::Job::RUNNING),
                                FakeJobService::LogEvent("live", 2, 0, "info", "engine start rank 0"),
                                FakeJobService::LogEvent("live", 3, 1, "warn", "rank 1 is slow"),
                                FakeJobService::LogEvent("live", 4, -1, "info", "controller says hi")});
    FakeJobService::WatchCall open;
    open.hold_until_released = true;
    service_.SetWatchFallback("live", open);
    // "flaky": same events as "done"; its first stream breaks after seq 3, and a resumed
    // one starts two events early, as a server that replays a little too much would:
    // the CLI must not show them twice.
    add_job("flaky", v1::Job::SUCCEEDED, 2, 6);
    for (v1::Event& e : done) e.set_job_id("flaky");
    service_.SetEvents("flaky", done);
    FakeJobService::WatchCall broken;
    broken.stop_after_seq = 3;
    broken.status = Unavailable("controller restarting");
    service_.ScriptWatch("flaky", 1, broken);
    FakeJobService::WatchCall replaying;
    replaying.replay_before = 2;
    service_.SetWatchFallback("flaky", replaying);
    // "hostile": a rank's log line and reasons full of escape sequences and control
    // characters.
    add_job("hostile", v1::Job::FAILED, 1, 3, kHostile);
    service_.SetEvents("hostile",
                       {FakeJobService::StateEvent("hostile", 1, v1::Job::RUNNING, "go\x1b[2J"),
                        FakeJobService::LogEvent("hostile", 2, 0, "warn\x1b[5m", kHostile),
                        FakeJobService::StateEvent("hostile", 3, v1::Job::FAILED,
                                                   std::string("bad\xc2\x9b" "\r\n") + kHostile)});
    // "quiet": its first stream breaks after seq 1; the resumed stream has nothing to
    // send for 1.5 s (longer than --reconnect-for 1) and then breaks again; the third
    // ends the job.
    add_job("quiet", v1::Job::RUNNING, 1, 2);
    service_.SetEvents("quiet", {FakeJobService::StateEvent("quiet", 1, v1::Job::RUNNING),
                                 FakeJobService::StateEvent("quiet", 2, v1::Job::SUCCEEDED)});
    FakeJobService::WatchCall first;
    first.stop_after_seq = 1;
    first.status = Unavailable("controller restarting");
    service_.ScriptWatch("quiet", 1, first);
    FakeJobService::WatchCall silent;
    silent.stop_after_seq = 0;
    silent.hold_for = absl::Milliseconds(1500);
    silent.status = Unavailable("controller restarting again");
    service_.ScriptWatch("quiet", 2, silent);

    service_.FailCall("GetJob", "secret", grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not yours"));
    service_.FailCall("CancelJob", "done",
                      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job done already ended"));
    v1::WorkerInfo w;
    w.set_name("w1");
    w.set_slots(2);
    w.set_free_slots(2);
    w.set_connected(true);
    service_.AddWorker(w);
  }

  // `trainyard --controller FAKE ARGS...`: the global flag before the subcommand.
  int Run(std::vector<std::string> args, bool terminal = false) {
    args.insert(args.begin(), {"--controller", address_});
    return RunRaw(args, terminal);
  }
};

TEST_F(CliArgsTest, GlobalFlagsGoBeforeOrAfterTheSubcommand) {
  ASSERT_EQ(RunRaw({"--controller", address_, "list"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("name-done"));
  ASSERT_EQ(RunRaw({"list", "--controller", address_}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("name-done"));
  ASSERT_EQ(RunRaw({"-o", "json", "--controller", address_, "get", "done"}), 0) << err_.str();
  EXPECT_THAT(OutLines().at(0), HasSubstr("\"id\":\"done\""));
  ASSERT_EQ(RunRaw({"get", "done", "--json", "--timeout", "30", "--controller", address_}), 0) << err_.str();
  EXPECT_THAT(OutLines().at(0), HasSubstr("\"id\":\"done\""));
  // Inside a nested subcommand too.
  ASSERT_EQ(RunRaw({"artifacts", "list", "done", "--controller", address_}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("NAME"));
  // A wrong value of a global flag is a usage error wherever it stands.
  EXPECT_EQ(RunRaw({"--output", "yaml", "--controller", address_, "list"}), 2);
  EXPECT_EQ(RunRaw({"list", "--controller", address_, "--timeout", "-1"}), 2);
}

// Ambiguous and bad global flags: exit 2 with a message that names the mistake.
TEST_F(CliArgsTest, MisplacedOrBadGlobalFlagsSayWhatIsWrong) {
  // The subcommand taken as --controller's value.
  EXPECT_EQ(RunRaw({"--controller", "list"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("expected host:port, got the subcommand name list (")) << err_.str();
  EXPECT_EQ(RunRaw({"--controller", "watch", "job-1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("got the subcommand name watch (")) << err_.str();
  // A bad number of seconds, in words (not CLI11's 300-digit range).
  for (const char* bad : {"0", "-1", "nan", "inf", "5s"}) {
    EXPECT_EQ(RunRaw({"--timeout", bad, "--controller", address_, "list"}), 2) << bad;
    EXPECT_THAT(err_.str(), HasSubstr("must be a positive number of seconds")) << err_.str();
    EXPECT_LT(err_.str().size(), 300u) << err_.str();
  }
  EXPECT_EQ(Run({"watch", "done", "--reconnect-for", "-1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("must be a non-negative number of seconds, got -1\n")) << err_.str();
  EXPECT_EQ(Run({"watch", "done", "--reconnect-for", "0"}), 0) << err_.str();
  EXPECT_EQ(Run({"watch", "done", "--from-seq", "-3"}), 2);
  EXPECT_LT(err_.str().size(), 300u) << err_.str();
  // After `--`, a word that looks like a flag is the job id.
  EXPECT_EQ(Run({"get", "--", "--json"}), 3);
  EXPECT_THAT(err_.str(), HasSubstr("job --json not found"));
}

TEST_F(CliArgsTest, VersionPrintsTheProjectVersion) {
  EXPECT_EQ(RunRaw({"--version"}), 0);
  EXPECT_EQ(out_.str(), std::string("trainyard ") + TRAINYARD_PROJECT_VERSION + "\n");
}

TEST_F(CliArgsTest, HelpHasTheExitTableAndEveryCommandAnExample) {
  ASSERT_EQ(RunRaw({"--help"}), 0);
  const std::string help = out_.str();
  EXPECT_THAT(help, HasSubstr("Exit status (every command):"));
  for (const char* row : {"  0  success", "  1  the job ended FAILED or CANCELLED", "  2  usage error",
                          "  3  not found", "  4  not allowed", "  5  controller unreachable", "  6  any other"}) {
    EXPECT_THAT(help, HasSubstr(row));
  }
  EXPECT_THAT(help, HasSubstr("trainyard --controller 10.0.0.5:7070 list"));
  const std::vector<std::vector<std::string>> commands = {
      {"submit"}, {"list"},   {"get"},    {"explain"},   {"workers"},          {"cancel"},          {"resize"},
      {"watch"},  {"logs"},   {"artifacts"}, {"artifacts", "list"}, {"artifacts", "pull"}, {"preflight"}};
  for (std::vector<std::string> command : commands) {
    const std::string name = command.back();
    command.push_back("--help");
    EXPECT_EQ(RunRaw(command), 0) << name;
    EXPECT_THAT(out_.str(), HasSubstr("Example: trainyard ")) << name;
  }
}

TEST_F(CliArgsTest, OneExitCodeTableForEveryCommand) {
  EXPECT_EQ(RunRaw({}), 2);
  EXPECT_EQ(RunRaw({"frobnicate"}), 2);
  EXPECT_EQ(Run({"get"}), 2) << "missing JOB";
  EXPECT_EQ(Run({"logs", "live", "--rank", "x"}), 2);
  EXPECT_EQ(Run({"preflight"}), 2);
  EXPECT_EQ(Run({"get", "nope"}), 3);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));
  EXPECT_EQ(Run({"watch", "nope"}), 3);
  EXPECT_EQ(Run({"submit", "/nonexistent/job.toml"}), 3);
  EXPECT_EQ(Run({"get", "secret"}), 4);
  EXPECT_EQ(Run({"explain", "secret"}), 4);
  EXPECT_EQ(Run({"cancel", "done"}), 6);
  EXPECT_THAT(err_.str(), HasSubstr("FAILED_PRECONDITION"));
  EXPECT_EQ(Run({"watch", "done"}), 0);
  EXPECT_EQ(Run({"watch", "failed"}), 1);
  EXPECT_EQ(Run({"watch", "cancelled"}), 1);
  EXPECT_EQ(Run({"logs", "failed", "--follow"}), 1);
  // Nothing listens on port 1 of loopback.
  EXPECT_EQ(RunRaw({"list", "--controller", "127.0.0.1:1", "--timeout", "5"}), 5);
  EXPECT_THAT(err_.str(), HasSubstr("UNAVAILABLE"));
  // Refused: nothing listens there, which no TLS flag would change.
  EXPECT_THAT(err_.str(), HasSubstr("(nothing listens at 127.0.0.1:1: is the controller running"));
  EXPECT_THAT(err_.str(), Not(HasSubstr("--tls-ca")));
  EXPECT_EQ(RunRaw({"watch", "done", "--controller", "127.0.0.1:1", "--timeout", "5"}), 5)
      << "a first connection that fails is not retried";
}

TEST_F(CliArgsTest, SubmitOfABadFileIsAUsageError) {
  const std::string path = ::testing::TempDir() + "/cli_args_bad.toml";
  std::ofstream(path) << "[training]\nsteps = \"many\"\n";
  EXPECT_EQ(Run({"submit", path}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("training.steps"));
}

TEST_F(CliArgsTest, WatchReconnectsAndShowsNoEventTwice) {
  ASSERT_EQ(Run({"watch", "flaky"}), 0) << err_.str();
  std::vector<std::string> seqs;
  for (const std::string& line : OutLines()) seqs.push_back(line.substr(0, line.find(' ')));
  EXPECT_EQ(seqs, (std::vector<std::string>{"seq=1", "seq=2", "seq=3", "seq=4", "seq=5", "seq=6"})) << out_.str();
  // The first stream broke after seq 3; the second asked for 4.
  EXPECT_EQ(service_.WatchFromSeqs("flaky"), (std::vector<int64_t>{1, 4}));
  EXPECT_THAT(err_.str(), HasSubstr("connection to the controller lost (UNAVAILABLE: controller restarting)"));
  EXPECT_THAT(err_.str(), HasSubstr("reconnecting from seq 4 for up to 5m00s"));
  EXPECT_THAT(err_.str(), HasSubstr("trainyard: reconnected after "));
  EXPECT_THAT(err_.str(), HasSubstr("; resuming at seq 4\n"));
  // One line when the outage starts and one when it ends.
  const std::string err = err_.str();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
}

// A resumed stream with nothing to send is a working connection: the outage ended
// when the controller answered, so a later break starts a new outage instead of
// counting from the first one (which would give up at once).
TEST_F(CliArgsTest, WatchOutageEndsWhenTheControllerAnswersNotAtTheNextEvent) {
  ASSERT_EQ(Run({"watch", "quiet", "--reconnect-for", "1"}), 0) << err_.str();
  EXPECT_EQ(service_.WatchFromSeqs("quiet"), (std::vector<int64_t>{1, 2, 2}));
  const std::string err = err_.str();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 4) << "two outages, each lost and back:\n" << err;
  EXPECT_THAT(err, HasSubstr("(UNAVAILABLE: controller restarting again)"));
  EXPECT_THAT(err, Not(HasSubstr("gave up")));
  EXPECT_THAT(out_.str(), HasSubstr("seq=2 job SUCCEEDED"));
}

// The first control byte or byte that can never be UTF-8 in `s` (our own redraw
// sequences removed first), as "\xNN at offset N"; "" when there is none.
std::string RawControl(std::string s) {
  for (const std::regex& own : {std::regex("\r\x1b\\[2K"), std::regex("\x1b\\[[0-9]+A")}) {
    s = std::regex_replace(s, own, "");
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool c1 = c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xa0;
    if ((c < 0x20 && c != '\n') || c == 0x7f || c1 || c >= 0xf5 || c == 0xc0 || c == 0xc1) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "\\x%02x at offset %zu", c, i);
      return buf;
    }
  }
  return "";
}

TEST_F(CliArgsTest, TextFromRanksNeverReachesTheTerminalRaw) {
  const std::vector<std::vector<std::string>> commands = {
      {"logs", "hostile"}, {"get", "hostile"}, {"explain", "hostile"}, {"watch", "hostile"}, {"list"}};
  for (const std::vector<std::string>& command : commands) {
    for (bool terminal : {false, true}) {
      Run(command, terminal);
      EXPECT_EQ(RawControl(out_.str()), "") << command[0] << " terminal=" << terminal << ":\n" << out_.str();
      EXPECT_EQ(RawControl(err_.str()), "") << command[0] << " terminal=" << terminal << ":\n" << err_.str();
    }
  }
  // The text itself is still there, its control bytes spelled out.
  const std::string escaped = "\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m\\r\\u009b2J ok";
  ASSERT_EQ(Run({"logs", "hostile"}), 0);
  EXPECT_EQ(OutLines(), (std::vector<std::string>{"00:00:02 rank 0 [warn\\x1b[5m] " + escaped}));
  ASSERT_EQ(Run({"watch", "hostile"}), 1);
  EXPECT_THAT(out_.str(), HasSubstr("seq=3 job FAILED: bad\\u009b\\r\\n" + escaped + "\n"));
  ASSERT_EQ(Run({"get", "hostile"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr(escaped));
}

TEST_F(CliArgsTest, WatchWithoutReconnectExitsUnavailable) {
  EXPECT_EQ(Run({"watch", "flaky", "--reconnect-for", "0"}), 5);
  EXPECT_THAT(err_.str(), HasSubstr("UNAVAILABLE"));
  EXPECT_EQ(service_.WatchFromSeqs("flaky").size(), 1u);
}

TEST_F(CliArgsTest, WatchOnATerminalRedrawsOneStatusLine) {
  ASSERT_EQ(Run({"watch", "flaky"}, /*terminal=*/true), 0) << err_.str();
  const std::string s = out_.str();
  EXPECT_THAT(s, HasSubstr("\r\x1b[2K"));
  EXPECT_THAT(s, HasSubstr("flaky RUNNING  step 1/2"));
  // The warning went above the status line, on stdout, not to stderr.
  EXPECT_THAT(s, HasSubstr("\r\x1b[2Ktrainyard: connection to the controller lost"));
  // While it waited, the status line said so; the note is gone at the end.
  EXPECT_THAT(s, HasSubstr("flaky RUNNING  [reconnecting: try 1, next in 250ms]  step 1/2"));
  EXPECT_TRUE(err_.str().empty()) << err_.str();
  // The last line: the final state, the loss sparkline of both steps, the recompile.
  const std::string last = s.substr(s.rfind("\r\x1b[2K") + 5);
  EXPECT_EQ(last, "flaky SUCCEEDED  step 2/2  █▁ loss 5.5000  1000 tok/s  MFU n/a  recompiles 1\n");
  // Step lines never get their own line: only notable events end with a newline.
  EXPECT_THAT(s, Not(HasSubstr("step 1 loss=")));
}

// What a terminal shows after `bytes`: "\r\x1b[2K" clears the cursor's line, "\x1b[NA"
// moves the cursor N lines up, "\n" down (adding a line at the bottom), text is written
// at the cursor's line.
std::vector<std::string> Screen(const std::string& bytes) {
  std::vector<std::string> screen{""};
  size_t row = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes.compare(i, 5, "\r\x1b[2K") == 0) {
      screen[row].clear();
      i += 4;
    } else if (bytes.compare(i, 2, "\x1b[") == 0) {
      size_t end = bytes.find('A', i);
      const size_t n = std::stoul(bytes.substr(i + 2, end - i - 2));
      row = n > row ? 0 : row - n;
      i = end;
    } else if (bytes[i] == '\n') {
      if (++row == screen.size()) screen.emplace_back();
    } else {
      screen[row] += bytes[i];
    }
  }
  return screen;
}

TEST_F(CliArgsTest, WatchOfSeveralJobsKeepsOneStatusLineEach) {
  EXPECT_EQ(Run({"watch", "done", "failed"}, /*terminal=*/true), 1) << err_.str();
  const std::vector<std::string> screen = Screen(out_.str());
  ASSERT_GE(screen.size(), 3u) << out_.str();
  // The last line is empty (Finish ends the block); above it one status line per job,
  // in the order given, with their final states.
  EXPECT_EQ(screen.back(), "");
  EXPECT_EQ(screen[screen.size() - 3], "done SUCCEEDED  step 2/2  █▁ loss 5.5000  1000 tok/s  MFU n/a  recompiles 1");
  EXPECT_EQ(screen[screen.size() - 2], "failed FAILED  waiting for the first step");
  // Notable events above, each once, marked with their job.
  const std::vector<std::string> above(screen.begin(), screen.end() - 3);
  EXPECT_EQ(std::count(above.begin(), above.end(), "[done] seq=6 job SUCCEEDED"), 1) << out_.str();
  EXPECT_EQ(std::count(above.begin(), above.end(), "[failed] seq=2 job FAILED: why"), 1) << out_.str();
  EXPECT_EQ(above.size(), 6u) << "PENDING, RUNNING, RECOMPILE and SUCCEEDED of done; PENDING and FAILED of failed";
  // Piped, the lines carry the job too; --from-seq needs one job.
  EXPECT_EQ(Run({"watch", "done", "cancelled"}), 1);
  EXPECT_THAT(out_.str(), HasSubstr("[cancelled] seq=2 job CANCELLED: why\n"));
  EXPECT_THAT(out_.str(), HasSubstr("[done] seq=6 job SUCCEEDED\n"));
  EXPECT_EQ(Run({"watch", "done", "failed", "--from-seq", "2"}), 2);
  // A missing job is the error, whatever the others did.
  EXPECT_EQ(Run({"watch", "done", "nope"}), 3);
}

TEST_F(CliArgsTest, JsonWatchIsOneEventPerLine) {
  ASSERT_EQ(Run({"watch", "done", "-o", "json"}), 0);
  ASSERT_EQ(OutLines().size(), 6u);
  EXPECT_THAT(OutLines()[2], HasSubstr("\"step_metrics\""));
}

TEST_F(CliArgsTest, LogsFilterByRankAndStopAtTheStoredEnd) {
  // "live" keeps its stream open: without --follow, logs stops at the job's last_seq.
  ASSERT_EQ(Run({"logs", "live"}), 0) << err_.str();
  EXPECT_EQ(OutLines(), (std::vector<std::string>{"00:00:02 rank 0 [info] engine start rank 0",
                                                  "00:00:03 rank 1 [warn] rank 1 is slow",
                                                  "00:00:04 job [info] controller says hi"}));
  ASSERT_EQ(Run({"logs", "live", "--rank", "1"}), 0) << err_.str();
  EXPECT_EQ(OutLines(), (std::vector<std::string>{"00:00:03 rank 1 [warn] rank 1 is slow"}));
  ASSERT_EQ(Run({"logs", "done"}), 0);
  EXPECT_TRUE(out_.str().empty());
}

TEST_F(CliArgsTest, LogsOfARankTheJobDoesNotHaveNameItsRanks) {
  // Printing nothing and exiting 0 would look like a quiet rank.
  EXPECT_EQ(Run({"logs", "live", "--rank", "5"}), 2);
  EXPECT_TRUE(out_.str().empty());
  EXPECT_THAT(err_.str(), HasSubstr("INVALID_ARGUMENT: --rank 5: live has ranks 0 to 1 (world size 2)"));
  EXPECT_EQ(Run({"logs", "done", "--rank", "1", "--follow"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--rank 1: done has only rank 0 (world size 1)"));
}

TEST_F(CliArgsTest, LogsFollowSaysWhyItEnded) {
  EXPECT_EQ(Run({"logs", "cancelled", "--follow"}), 1);
  EXPECT_TRUE(out_.str().empty()) << "stdout stays the log lines";
  EXPECT_THAT(err_.str(), HasSubstr("trainyard: cancelled ended CANCELLED: why"));
  EXPECT_EQ(Run({"logs", "done", "--follow", "-o", "json"}), 0);
  EXPECT_TRUE(out_.str().empty());
  EXPECT_THAT(err_.str(), HasSubstr("trainyard: done ended SUCCEEDED"));
}

TEST_F(CliArgsTest, GetDescribesTheJobAndExplainItsCompiles) {
  ASSERT_EQ(Run({"get", "done"}), 0) << err_.str();
  const std::string get = out_.str();
  EXPECT_THAT(get, HasSubstr("done  name-done  SUCCEEDED"));
  EXPECT_THAT(get, HasSubstr("state history (UTC):"));
  EXPECT_THAT(get, HasSubstr("00:00:01  PENDING     needs 1 slot"));
  EXPECT_THAT(get, HasSubstr("metrics    step 2/2 loss 5.5000"));
  EXPECT_THAT(get, HasSubstr("artifacts  none"));
  ASSERT_EQ(Run({"explain", "done"}), 0) << err_.str();
  const std::string explain = out_.str();
  EXPECT_THAT(explain, HasSubstr("attention.d256: 0 compiles, 1 recompiles"));
  EXPECT_THAT(explain, HasSubstr("last recompile: input[0].size(1): expected 256, got 128"));
  EXPECT_THAT(explain, HasSubstr("hint: an input's shape changed"));
}

}  // namespace
}  // namespace trainyard
