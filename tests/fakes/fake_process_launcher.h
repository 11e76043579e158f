// A ProcessLauncher whose "processes" are pipe pairs the test drives: it writes their
// stdout/stderr lines and decides when and how they exit. SIGKILL ends a process at
// once (as the kernel would); SIGTERM does only when `exit_on_sigterm` is set, so a
// test can model a rank that ignores it. Every signal is recorded with the time the
// given clock showed when it was sent.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/process_launcher.h"

namespace trainyard::testing {

class FakeProcessLauncher : public ProcessLauncher {
 public:
  struct SentSignal {
    pid_t pid;
    int signal;
    absl::Time at;
  };

  explicit FakeProcessLauncher(Clock *clock, bool exit_on_sigterm = false)
      : clock_(clock), exit_on_sigterm_(exit_on_sigterm) {}
  ~FakeProcessLauncher() override {
    absl::MutexLock lock(&mu_);
    for (auto &[pid, p] : procs_) CloseWriteEnds(p);
  }

  absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest &request) override {
    int out[2], err[2];
    if (pipe(out) != 0) return absl::InternalError("pipe");
    if (pipe(err) != 0) {
      close(out[0]), close(out[1]);
      return absl::InternalError("pipe");
    }
    absl::MutexLock lock(&mu_);
    const pid_t pid = next_pid_++;
    requests_.push_back(request);
    procs_[pid] = Proc{out[1], err[1], false, {}};
    return LaunchedProcess{pid, out[0], err[0]};
  }

  ProcessExit Wait(pid_t pid) override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Proc *p) { return p->exited; }, &procs_.at(pid)));
    return procs_.at(pid).exit;
  }

  void SignalGroup(pid_t pid, int signal) override {
    absl::MutexLock lock(&mu_);
    signals_.push_back({pid, signal, clock_->Now()});
    if (signal == SIGKILL || (signal == SIGTERM && exit_on_sigterm_)) {
      ExitLocked(pid, ProcessExit{0, signal});
    }
  }

  // Test side. The pid of the n-th launch is kFirstPid + n.
  static constexpr pid_t kFirstPid = 4000;

  void WriteStdout(pid_t pid, const std::string &line) { Write(pid, line, true); }
  void WriteStderr(pid_t pid, const std::string &line) { Write(pid, line, false); }
  void Exit(pid_t pid, ProcessExit exit) {
    absl::MutexLock lock(&mu_);
    ExitLocked(pid, exit);
  }
  std::vector<LaunchRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::vector<SentSignal> signals() const {
    absl::MutexLock lock(&mu_);
    return signals_;
  }

 private:
  struct Proc {
    int stdout_w = -1, stderr_w = -1;
    bool exited = false;
    ProcessExit exit;
  };

  static void CloseWriteEnds(Proc &p) {
    if (p.stdout_w >= 0) close(p.stdout_w);
    if (p.stderr_w >= 0) close(p.stderr_w);
    p.stdout_w = p.stderr_w = -1;
  }

  void ExitLocked(pid_t pid, ProcessExit exit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Proc &p = procs_.at(pid);
    if (p.exited) return;
    CloseWriteEnds(p);  // the readers see EOF, as after a real exit
    p.exited = true;
    p.exit = exit;
  }

  void Write(pid_t pid, const std::string &line, bool to_stdout) {
    absl::MutexLock lock(&mu_);
    const Proc &p = procs_.at(pid);
    const std::string text = line + "\n";
    (void)!write(to_stdout ? p.stdout_w : p.stderr_w, text.data(), text.size());
  }

  Clock *const clock_;
  const bool exit_on_sigterm_;
  mutable absl::Mutex mu_;
  pid_t next_pid_ ABSL_GUARDED_BY(mu_) = kFirstPid;
  std::map<pid_t, Proc> procs_ ABSL_GUARDED_BY(mu_);
  std::vector<LaunchRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<SentSignal> signals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::testing
