#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/process_launcher.h"

namespace trainyard {

// fork/exec launcher. Each child gets its own process group, stdin from
// /dev/null, stdout/stderr pipes, a default signal mask, and
// PR_SET_PDEATHSIG(SIGKILL).
//
// PDEATHSIG fires when the *thread* that forked exits, not the process, so
// every fork runs on one thread owned by this object, which lives until the
// launcher is destroyed. Destroy the launcher only after its children are gone.
// Thread-safe.
class PosixProcessLauncher : public ProcessLauncher {
 public:
  PosixProcessLauncher();
  ~PosixProcessLauncher() override;
  PosixProcessLauncher(const PosixProcessLauncher &) = delete;
  PosixProcessLauncher &operator=(const PosixProcessLauncher &) = delete;

  absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest &request) override;
  ProcessExit Wait(pid_t pid) override;
  void SignalGroup(pid_t pid, int signal) override;

 private:
  void ForkLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread fork_thread_;
};

// `name` in the directory of the running executable (/proc/self/exe), e.g. the
// trainyard-train next to trainyard-controller; just `name` when that cannot be read.
std::string ExecutableSibling(const std::string &name);

}  // namespace trainyard
