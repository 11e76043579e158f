// PreflightGate with fake runners (/bin/sh scripts standing in for trainyard-train):
// the Status each verdict becomes, the metrics, the queue, cancellation and Stop.
#include "server/state/preflight_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/base/posix_process_launcher.h"
#include "common/spec_proto.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using trainyard::testing::TempDir;

// The Status a gate handed back, once it has.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  PreflightGate::Done Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(30)); }
};

double CounterValue(prometheus::Registry& registry, const std::string& family,
                    const std::string& label, const std::string& value) {
  for (const auto& f : registry.Collect()) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) {
        if (l.name == label && l.value == value) return m.counter.value;
      }
      if (label.empty() && m.label.empty()) return m.counter.value;
    }
  }
  return -1;
}

bool WaitForFile(const std::string& path) {
  return testing::WaitUntil([&] { return std::filesystem::exists(path); }, std::chrono::seconds(15),
                            std::chrono::milliseconds(25));
}

class PreflightGateTest : public ::testing::Test {
 protected:
  PreflightGateTest() {
    spec_.mutable_model()->set_preset("tiny");
    absl::StatusOr<v1::JobSpec> resolved = ResolveAndValidateProto(spec_);
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    if (resolved.ok()) spec_ = *resolved;
    std::filesystem::create_directories(dir_.path() + "/specs");
  }

  // A gate whose runner is the script `body`.
  std::unique_ptr<PreflightGate> Gate(const std::string& body, int max_queued = 8,
                                      absl::Duration timeout = absl::Seconds(60)) {
    PreflightGateOptions options;
    // Asked --print-config, the runner prints the spec it was given (and runs nothing).
    options.binary = dir_.WriteScript(
        "runner.sh", "case \" $* \" in *\" --print-config \"*) cat \"$1\"; exit 0 ;; esac\n" + body);
    options.host_memory = host_memory_;
    options.timeout = timeout;
    options.spec_dir = dir_.path() + "/specs";
    options.max_queued = max_queued;
    return std::make_unique<PreflightGate>(&launcher_, &metrics_, options, SystemClock());
  }

  double Preflights(const std::string& outcome) {
    return CounterValue(*metrics_.registry(), "trainyard_preflights_total", "outcome", outcome);
  }
  double Rejected() {
    return CounterValue(*metrics_.registry(), "trainyard_jobs_rejected_total", "", "");
  }

  TempDir dir_;
  std::function<absl::StatusOr<HostMemory>()> host_memory_;  // unset: this machine's
  PosixProcessLauncher launcher_;
  ControllerMetrics metrics_;
  v1::JobSpec spec_;
};

TEST_F(PreflightGateTest, CleanPreflightIsOk) {
  auto gate = Gate("exit 0\n");
  Outcome out;
  gate->Check(spec_, nullptr, out.Callback());
  ASSERT_TRUE(out.Wait());
  EXPECT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(Preflights("clean"), 1);
  EXPECT_EQ(Rejected(), 0);
}

// The controller's machine runs the preflight whole: a job whose runner would not fit it
// is refused before a runner starts, saying so, with what to do instead.
TEST_F(PreflightGateTest, ARunnerTooBigForTheControllersMachineIsRefusedUnstarted) {
  host_memory_ = [] { return HostMemory{1.0 * (1 << 30), "MemAvailable (test)", 0}; };
  auto gate = Gate("echo ran > " + dir_.path() + "/ran\nexit 0\n");
  v1::JobSpec big = spec_;
  big.mutable_model()->set_dim(4096);
  big.mutable_model()->set_n_layers(16);
  Outcome out;
  gate->Check(big, nullptr, out.Callback());
  ASSERT_TRUE(out.Wait());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(out.status.message());
  EXPECT_THAT(message, HasSubstr("preflight refused, so no job was created: compile.preflight=true runs the job's "
                                 "ranks on the controller's machine, and the runner would need about "));
  EXPECT_THAT(message, HasSubstr("more than the 1 GiB it can give (MemAvailable (test))"));
  EXPECT_THAT(message, HasSubstr("`trainyard preflight JOB.toml --shrink`"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/ran"));
  EXPECT_EQ(Preflights("refused"), 1);
  EXPECT_EQ(Rejected(), 1);
}

TEST_F(PreflightGateTest, FindingsAreFailedPreconditionNamingRegionAndTensor) {
  auto gate = Gate(
      "echo '{\"rank\":0,\"compile\":{\"kind\":\"UNSAFE_SIDE_EFFECT\",\"region\":\"moe_router\","
      "\"layers\":[1],\"reason\":\"layers.1.moe.tokens_per_expert was written inside the "
      "region\"}}'\nexit 3\n");
  Outcome out;
  gate->Check(spec_, nullptr, out.Callback());
  ASSERT_TRUE(out.Wait());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(out.status.message());
  EXPECT_THAT(message, StartsWith("preflight findings, so no job was created: rank 0 "
                                  "UNSAFE_SIDE_EFFECT region=moe_router layers=[1]: "
                                  "layers.1.moe.tokens_per_expert"));
  EXPECT_EQ(Preflights("findings"), 1);
  EXPECT_EQ(Rejected(), 1);
}

TEST_F(PreflightGateTest, RunnerFailureCarriesTheStderrTail) {
  auto gate = Gate("echo 'rank 1: step 2: out of memory' >&2\nexit 1\n");
  Outcome out;
  gate->Check(spec_, nullptr, out.Callback());
  ASSERT_TRUE(out.Wait());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out.status.message(),
            "preflight failed: runner exited with code 1: rank 1: step 2: out of memory");
  EXPECT_EQ(Preflights("failed"), 1);
}

TEST_F(PreflightGateTest, BadConfigIsAFailedPreflight) {
  auto gate = Gate("echo 'compile.backend: unknown' >&2\nexit 2\n");
  Outcome out;
  gate->Check(spec_, nullptr, out.Callback());
  ASSERT_TRUE(out.Wait());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status.message()), StartsWith("preflight failed: "));
  EXPECT_EQ(Preflights("bad_config"), 1);
}

TEST_F(PreflightGateTest, TimeoutKillsTheRunnerAndFails) {
  auto gate = Gate("exec sleep 600\n", 8, absl::Milliseconds(300));
  Outcome out;
  gate->Check(spec_, nullptr, out.Callback());
  ASSERT_TRUE(out.Wait());
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(out.status.message()), StartsWith("preflight failed: timed out after"));
  EXPECT_EQ(Preflights("timeout"), 1);
}

TEST_F(PreflightGateTest, MissingBinaryIsRefusedAtOnceNamingIt) {
  PreflightGateOptions options;
  options.binary = dir_.path() + "/bin/trainyard-train";
  options.spec_dir = dir_.path() + "/specs";
  PreflightGate gate(&launcher_, &metrics_, options, SystemClock());
  bool called = false;
  gate.Check(spec_, nullptr, [&](absl::Status s) {
    called = true;  // inline: nothing was queued
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.message()), HasSubstr(dir_.path() + "/bin/trainyard-train"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("--preflight-binary"));
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(Preflights("refused"), 1);
}

TEST_F(PreflightGateTest, RunsOneAtATimeAndRefusesPastTheQueueLimit) {
  const std::string started = dir_.path() + "/started";
  const std::string go = dir_.path() + "/go";
  // Each run announces itself, then waits for the test's go.
  auto gate = Gate("touch " + started + "\nwhile [ ! -f " + go + " ]; do sleep 0.02; done\nexit 0\n",
                   /*max_queued=*/1);
  Outcome first, second, third;
  gate->Check(spec_, nullptr, first.Callback());
  ASSERT_TRUE(WaitForFile(started));  // the first is running, not queued
  std::filesystem::remove(started);
  gate->Check(spec_, nullptr, second.Callback());  // queued
  gate->Check(spec_, nullptr, third.Callback());   // over the limit
  ASSERT_TRUE(third.done.HasBeenNotified());
  EXPECT_EQ(third.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(second.done.HasBeenNotified());
  EXPECT_FALSE(std::filesystem::exists(started)) << "two preflights ran at once";

  std::ofstream(go) << "go";
  ASSERT_TRUE(first.Wait());
  ASSERT_TRUE(second.Wait());
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(Preflights("clean"), 2);
  EXPECT_EQ(Preflights("refused"), 1);
}

TEST_F(PreflightGateTest, ACancelledRequestIsKilledOrNeverRun) {
  const std::string started = dir_.path() + "/started";
  auto gate = Gate("touch " + started + "\nexec sleep 600\n");
  std::atomic<bool> client_gone{false};
  Outcome running, queued;
  gate->Check(spec_, [&] { return client_gone.load(); }, running.Callback());
  ASSERT_TRUE(WaitForFile(started));
  std::filesystem::remove(started);
  gate->Check(spec_, [] { return true; }, queued.Callback());  // gone before its turn
  client_gone = true;
  ASSERT_TRUE(running.Wait());
  ASSERT_TRUE(queued.Wait());
  EXPECT_EQ(running.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queued.status.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(std::filesystem::exists(started)) << "a cancelled request still ran";
  EXPECT_EQ(Preflights("cancelled"), 2);
  EXPECT_EQ(Rejected(), 0);  // nobody was told no: the callers went away
}

TEST_F(PreflightGateTest, StopFinishesRunningAndQueuedRequests) {
  const std::string started = dir_.path() + "/started";
  auto gate = Gate("touch " + started + "\nexec sleep 600\n");
  Outcome running, queued, late;
  gate->Check(spec_, nullptr, running.Callback());
  ASSERT_TRUE(WaitForFile(started));
  gate->Check(spec_, nullptr, queued.Callback());
  gate->Stop();
  // Stop returns only once every caller has its answer.
  EXPECT_TRUE(running.done.HasBeenNotified());
  EXPECT_TRUE(queued.done.HasBeenNotified());
  EXPECT_EQ(running.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queued.status.code(), absl::StatusCode::kUnavailable);
  gate->Check(spec_, nullptr, late.Callback());
  EXPECT_EQ(late.status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace trainyard
