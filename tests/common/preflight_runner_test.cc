// PreflightRunner against fake runners: small /bin/sh scripts that print canned Event
// lines and exit with the status of the trainyard-train --preflight contract.
#include "common/preflight_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base/posix_process_launcher.h"
#include "common/events/proto_json.h"
#include "common/spec_proto.h"
#include "tests/fakes/fake_clock.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_process.h"
#include "tests/support/files.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using trainyard::testing::ProcessAlive;
using trainyard::testing::TempDir;

constexpr char kCompileLine[] =
    R"({"rank":0,"compile":{"kind":"COMPILE","region":"attention","layers":[0,1],"compile_ms":12.5}})";
constexpr char kSummaryLine[] =
    R"({"rank":0,"compile":{"kind":"SUMMARY","region":"attention","cache_entries":1}})";
constexpr char kSideEffectRank0[] =
    R"({"rank":0,"compile":{"kind":"UNSAFE_SIDE_EFFECT","region":"moe_router","layers":[1],"reason":"layers.1.moe.tokens_per_expert was written inside the region"}})";
constexpr char kSideEffectRank1[] =
    R"({"rank":1,"compile":{"kind":"UNSAFE_SIDE_EFFECT","region":"moe_router","layers":[1],"reason":"layers.1.moe.tokens_per_expert was written inside the region"}})";
constexpr char kLimitLine[] =
    R"({"rank":0,"compile":{"kind":"RECOMPILE_LIMIT","region":"attention","layers":[2],"reason":"input[0].size(1): expected 256, got 512"}})";

// How a fake runner answers `--print-config`: the spec it was given (proto3 JSON, which
// the spec core's JSON reader takes), and no run.
constexpr char kPrintConfig[] = "case \" $* \" in *\" --print-config \"*) cat \"$1\"; exit 0 ;; esac\n";

// Waits (bounded) until `path` holds a pid, so a test knows its runner got that far.
int WaitForPid(const std::string& path) {
  std::string text;
  const bool written = testing::WaitUntil(
      [&] {
        text = testing::ReadFileOrEmpty(path);
        return !text.empty() && text.back() == '\n';
      },
      std::chrono::seconds(10), std::chrono::milliseconds(25));
  return written ? std::stoi(text) : -1;
}

bool DiesWithin(int pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (ProcessAlive(pid)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class PreflightRunnerTest : public ::testing::Test {
 protected:
  PreflightRunnerTest() {
    spec_.mutable_job()->set_name("pf-test");
    spec_.mutable_model()->set_preset("tiny");
    spec_.mutable_compile()->set_test_plant_side_effect(true);
    absl::StatusOr<v1::JobSpec> resolved = ResolveAndValidateProto(spec_);
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    if (resolved.ok()) spec_ = *resolved;
    std::filesystem::create_directories(SpecDir());
  }

  std::string SpecDir() const { return dir_.path() + "/specs"; }

  // A runner whose body is `body` (sh); it records its argv and a copy of its spec file.
  // Asked --print-config, it prints the spec it was given, as trainyard-train prints the
  // one it would run.
  std::string Script(const std::string& body) {
    return dir_.WriteScript("runner.sh", std::string(kPrintConfig) + "echo \"$@\" > " + dir_.path() +
                                             "/args\ncp \"$1\" " + dir_.path() + "/spec.json\n" + body);
  }

  absl::StatusOr<PreflightReport> Run(const std::string& binary, PreflightOptions options = {},
                                      const PreflightRunner::LineCallback& on_line = nullptr,
                                      const PreflightRunner::CancelCheck& cancel = nullptr) {
    options.binary = binary;
    options.spec_dir = SpecDir();
    PreflightRunner runner(&launcher_, options);
    return runner.Run(spec_, on_line, cancel);
  }

  TempDir dir_;
  PosixProcessLauncher launcher_;
  v1::JobSpec spec_;
};

TEST_F(PreflightRunnerTest, CleanRunGetsTheResolvedSpecAsProtoJsonAndTheContractFlags) {
  std::vector<std::string> lines;
  std::vector<bool> parsed;
  auto report = Run(Script(std::string("echo '") + kCompileLine + "'\necho '" + kSummaryLine +
                           "'\necho 'not json'\nexit 0\n"),
                    {}, [&](const std::string& line, const v1::Event* event) {
                      lines.push_back(line);
                      parsed.push_back(event != nullptr);
                    });
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kClean);
  EXPECT_EQ(report->exit.exit_code, 0);
  EXPECT_EQ(report->compile_events, 2);
  EXPECT_THAT(report->findings, IsEmpty());
  EXPECT_EQ(report->output_tail, "not json");  // not an Event: kept as diagnostics
  EXPECT_THAT(lines, ElementsAre(kCompileLine, kSummaryLine, "not json"));
  EXPECT_THAT(parsed, ElementsAre(true, true, false));

  // argv is `SPEC.json --preflight --json`, and SPEC.json is the normalised JobSpec.
  const std::string args = testing::ReadFileOrEmpty(dir_.path() + "/args");
  EXPECT_THAT(args, StartsWith(SpecDir() + "/trainyard-preflight-"));
  EXPECT_THAT(args, HasSubstr(".json --preflight --json\n"));
  v1::JobSpec got;
  ASSERT_TRUE(FromJson(testing::ReadFileOrEmpty(dir_.path() + "/spec.json"), &got).ok());
  EXPECT_EQ(got.SerializeAsString(), spec_.SerializeAsString());
  EXPECT_TRUE(got.compile().test_plant_side_effect());
  // The spec file is gone once Run returns.
  EXPECT_TRUE(std::filesystem::is_empty(SpecDir()));
}

TEST_F(PreflightRunnerTest, ShrinkIsPassedBeforeJson) {
  PreflightOptions options;
  options.shrink = true;
  auto report = Run(Script("exit 0\n"), options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(testing::ReadFileOrEmpty(dir_.path() + "/args"), HasSubstr(".json --preflight --shrink --json\n"));
}

TEST_F(PreflightRunnerTest, ExitThreeIsFindingsWithEveryFindingEvent) {
  auto report = Run(Script(std::string("echo '") + kCompileLine + "'\necho '" + kSideEffectRank0 +
                           "'\necho '" + kSideEffectRank1 + "'\necho '" + kLimitLine +
                           "'\nexit 3\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kFindings);
  EXPECT_EQ(report->compile_events, 4);
  ASSERT_EQ(report->findings.size(), 3u);
  EXPECT_EQ(report->findings[0].compile().kind(), v1::CompileEvent::UNSAFE_SIDE_EFFECT);
  EXPECT_EQ(report->findings[1].rank(), 1);
  EXPECT_EQ(report->findings[2].compile().kind(), v1::CompileEvent::RECOMPILE_LIMIT);
  // The same finding on two ranks is listed once.
  EXPECT_EQ(SummarizeFindings(report->findings),
            "ranks 0,1 UNSAFE_SIDE_EFFECT region=moe_router layers=[1]: "
            "layers.1.moe.tokens_per_expert was written inside the region; "
            "rank 0 RECOMPILE_LIMIT region=attention layers=[2]: "
            "input[0].size(1): expected 256, got 512");
  EXPECT_EQ(SummarizeFindings(report->findings, 1),
            "ranks 0,1 UNSAFE_SIDE_EFFECT region=moe_router layers=[1]: "
            "layers.1.moe.tokens_per_expert was written inside the region (and 1 more)");
}

TEST_F(PreflightRunnerTest, AFindingPrintedWithExitZeroStillCounts) {
  auto report = Run(Script(std::string("echo '") + kLimitLine + "'\nexit 0\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kFindings);
}

TEST_F(PreflightRunnerTest, ExitOneIsRunnerFailureWithStderrAndErrorLog) {
  auto report = Run(Script(
      "echo 'rank 1: step 2: shape mismatch [4, 8] vs [4, 16]' >&2\n"
      "echo '{\"rank\":1,\"log\":{\"level\":\"error\",\"message\":\"step 2: shape mismatch\"}}'\n"
      "exit 1\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kRunnerFailed);
  EXPECT_EQ(report->error, "step 2: shape mismatch");
  EXPECT_EQ(report->output_tail, "rank 1: step 2: shape mismatch [4, 8] vs [4, 16]");
  EXPECT_EQ(DescribePreflightFailure(*report),
            "runner exited with code 1: rank 1: step 2: shape mismatch [4, 8] vs [4, 16]");
}

TEST_F(PreflightRunnerTest, ExitTwoIsBadConfig) {
  auto report = Run(Script("echo 'compile.backend: unknown backend' >&2\nexit 2\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kBadConfig);
  EXPECT_THAT(DescribePreflightFailure(*report), HasSubstr("exit code 2"));
  EXPECT_THAT(DescribePreflightFailure(*report), HasSubstr("compile.backend: unknown backend"));
}

TEST_F(PreflightRunnerTest, OtherStatusesAndSignalsAreRunnerFailures) {
  auto report = Run(Script("exit 7\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kRunnerFailed);
  EXPECT_EQ(DescribePreflightFailure(*report), "runner exited with code 7: (no output)");

  report = Run(Script("kill -KILL $$\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kRunnerFailed);
  EXPECT_EQ(report->exit.signal, SIGKILL);
  EXPECT_THAT(DescribePreflightFailure(*report), StartsWith("runner was killed by signal 9"));
}

TEST_F(PreflightRunnerTest, TimeoutKillsTheWholeProcessGroup) {
  // The runner's own child stands in for its ranks.
  const std::string pid_file = dir_.path() + "/child.pid";
  PreflightOptions options;
  options.timeout = absl::Milliseconds(500);
  auto report = Run(Script("sleep 600 &\necho $! > " + pid_file + "\necho 'rank 0 started' >&2\nwait\n"),
                    options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kTimedOut);
  EXPECT_EQ(report->exit.signal, SIGKILL);
  EXPECT_GE(report->elapsed, absl::Milliseconds(500));
  EXPECT_THAT(DescribePreflightFailure(*report), StartsWith("timed out after "));
  EXPECT_THAT(DescribePreflightFailure(*report), HasSubstr("rank 0 started"));
  const int child = WaitForPid(pid_file);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(DiesWithin(child, std::chrono::seconds(5))) << "the runner's child outlived it";
}

TEST_F(PreflightRunnerTest, CancelKillsTheRunner) {
  const std::string pid_file = dir_.path() + "/child.pid";
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    if (WaitForPid(pid_file) > 0) cancelled = true;
  });
  auto report = Run(Script("sleep 600 &\necho $! > " + pid_file + "\nwait\n"), {}, nullptr,
                    [&] { return cancelled.load(); });
  canceller.join();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kCancelled);
  EXPECT_TRUE(DiesWithin(WaitForPid(pid_file), std::chrono::seconds(5)));
}

TEST_F(PreflightRunnerTest, TheTimeoutAndElapsedFollowTheInjectedClock) {
  trainyard::testing::FakeClock clock;
  PreflightOptions options;
  const std::string started = dir_.path() + "/started";
  options.binary = Script("echo $$ > " + started + "\nexec sleep 600\n");
  options.spec_dir = SpecDir();
  options.timeout = absl::Minutes(10);
  PreflightRunner runner(&launcher_, options, &clock);
  absl::StatusOr<PreflightReport> report;
  std::thread run([&] { report = runner.Run(spec_); });
  // The run proper (after its --print-config step) waits for its runner or its deadline.
  EXPECT_GT(WaitForPid(started), 0);
  clock.WaitForSleepers(1);
  clock.Advance(absl::Minutes(10) + absl::Seconds(1));
  run.join();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kTimedOut);
  EXPECT_EQ(report->exit.signal, SIGKILL);
  EXPECT_EQ(report->elapsed, absl::Minutes(10) + absl::Seconds(1));

  // A runner that ends by itself takes no time on a clock that did not move.
  options.binary = Script("exit 0\n");
  PreflightRunner quick(&launcher_, options, &clock);
  auto clean = quick.Run(spec_);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ(clean->verdict, PreflightVerdict::kClean);
  EXPECT_EQ(clean->elapsed, absl::ZeroDuration());
}

// A runner whose ranks would not fit this machine is never started: only asked what it
// would run.
TEST_F(PreflightRunnerTest, ARunnerTooBigForTheMachineIsRefusedBeforeItStarts) {
  v1::JobSpec big = spec_;
  big.mutable_model()->set_dim(8192);
  big.mutable_model()->set_n_layers(48);
  spec_ = big;
  PreflightOptions options;
  options.host_memory = [] { return HostMemory{2.0 * (1 << 30), "the test's 2 GiB", 0}; };
  auto report = Run(Script("echo ran > " + dir_.path() + "/ran\nexit 0\n"), options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kTooBig);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/ran")) << "the runner ran";
  ASSERT_TRUE(report->fit.has_value());
  EXPECT_FALSE(report->fit->fits);
  EXPECT_GT(report->fit->need_bytes, 100.0 * (1 << 30));
  EXPECT_THAT(report->error, HasSubstr("more than the 2 GiB it can give (the test's 2 GiB)"));
  EXPECT_THAT(DescribePreflightFailure(*report), StartsWith("refused, so no runner was started: the runner would need"));
  EXPECT_STREQ(PreflightVerdictName(report->verdict), "refused");
  EXPECT_TRUE(std::filesystem::is_empty(SpecDir()));
}

// Every process of the run is capped at its share of the machine: RLIMIT_DATA, which
// `ulimit -d` (KiB) reports in the runner.
TEST_F(PreflightRunnerTest, TheRunRunsUnderTheCapItsFitSays) {
  PreflightOptions options;
  options.host_memory = [] { return HostMemory{8.0 * (1 << 30), "test", 0}; };
  auto report = Run(Script("echo \"cap $(ulimit -d)\"\nexit 0\n"), options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verdict, PreflightVerdict::kClean);
  ASSERT_TRUE(report->fit.has_value());
  EXPECT_TRUE(report->fit->fits);
  const int64_t cap = static_cast<int64_t>(8.0 * (1 << 30) - kRunnerLauncherBytes);  // one rank
  EXPECT_EQ(report->fit->data_limit_bytes, cap);
  EXPECT_EQ(report->output_tail, "cap " + std::to_string(cap / 1024));
}

// What the runner would run comes from the runner (its --print-config), so a failure
// there is the preflight's verdict, with its output.
TEST_F(PreflightRunnerTest, APrintConfigThatFailsEndsThePreflight) {
  auto bad = Run(dir_.WriteScript("runner.sh", "echo 'compile.backend: no such backend' >&2\nexit 2\n"));
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->verdict, PreflightVerdict::kBadConfig);
  EXPECT_EQ(bad->output_tail, "compile.backend: no such backend");
  EXPECT_FALSE(bad->fit.has_value());
  auto garbled = Run(dir_.WriteScript("runner.sh", "echo 'not a spec'\nexit 0\n"));
  ASSERT_TRUE(garbled.ok()) << garbled.status();
  EXPECT_EQ(garbled->verdict, PreflightVerdict::kRunnerFailed);
  EXPECT_THAT(garbled->error, StartsWith("its --print-config output is not a job spec: "));
}

TEST_F(PreflightRunnerTest, MissingBinaryIsAnErrorNamingIt) {
  auto report = Run(dir_.path() + "/no-such-trainyard-train");
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("no-such-trainyard-train"));
  EXPECT_TRUE(std::filesystem::is_empty(SpecDir()));
}

TEST_F(PreflightRunnerTest, OutputTailKeepsTheEnd) {
  auto report = Run(Script("i=0\nwhile [ $i -lt 2000 ]; do echo \"line $i\" >&2; i=$((i+1)); done\n"
                           "exit 1\n"));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_LE(report->output_tail.size(), kPreflightTailBytes);
  EXPECT_THAT(report->output_tail, StartsWith("line "));  // cut at a line start
  EXPECT_THAT(report->output_tail, ::testing::EndsWith("line 1999"));
}

TEST(PreflightFormatTest, OneLinePerCompileEvent) {
  v1::Event e;
  ASSERT_TRUE(FromJson(kSideEffectRank0, &e).ok());
  EXPECT_EQ(FormatPreflightEvent(e),
            "rank 0  UNSAFE_SIDE_EFFECT  region=moe_router layers=[1]  "
            "layers.1.moe.tokens_per_expert was written inside the region");
  ASSERT_TRUE(FromJson(kCompileLine, &e).ok());
  EXPECT_EQ(FormatPreflightEvent(e), "rank 0  COMPILE  region=attention layers=[0,1] compile_ms=12.5");
}

TEST(PreflightFormatTest, KindsShownAndKindsThatFail) {
  EXPECT_TRUE(IsPreflightFinding(v1::CompileEvent::UNSAFE_SIDE_EFFECT));
  EXPECT_TRUE(IsPreflightFinding(v1::CompileEvent::RECOMPILE_LIMIT));
  EXPECT_FALSE(IsPreflightFinding(v1::CompileEvent::FALLBACK));
  EXPECT_FALSE(IsPreflightFinding(v1::CompileEvent::GRAPH_BREAK));
  EXPECT_TRUE(IsShownPreflightKind(v1::CompileEvent::GRAPH_BREAK));
  EXPECT_TRUE(IsShownPreflightKind(v1::CompileEvent::FALLBACK));
  EXPECT_FALSE(IsShownPreflightKind(v1::CompileEvent::SUMMARY));
  EXPECT_FALSE(IsShownPreflightKind(v1::CompileEvent::KIND_UNSPECIFIED));
}

}  // namespace
}  // namespace trainyard
