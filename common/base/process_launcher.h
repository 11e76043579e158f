#pragma once

#include <sys/types.h>

#include <cstdint>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

struct LaunchRequest {
  std::string binary;
  std::vector<std::string> args;  // argv[1..]
  // Set in the child on top of the launcher's own environment (NAME, value); a name
  // given twice takes the later value.
  std::vector<std::pair<std::string, std::string>> env;
  // > 0: the child's RLIMIT_DATA (soft and hard; no higher than this process's own hard
  // limit), set before exec and inherited by what it starts; an allocation past it fails
  // (ENOMEM) instead of growing the process.
  std::int64_t data_limit_bytes = 0;
};

// A started child. The caller owns both read ends and must close them.
struct LaunchedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

struct ProcessExit {
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the terminating signal, 0 when the process exited
  double peak_rss_mb = 0;  // its peak resident set (wait4's ru_maxrss)
};

// Starts and controls child processes, each as the leader of its own process
// group. Implementations are thread-safe.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  virtual absl::StatusOr<LaunchedProcess> Launch(const LaunchRequest &request) = 0;

  // Blocks until `pid` exits, kills what is left of its process group, then
  // reaps it.
  virtual ProcessExit Wait(pid_t pid) = 0;

  // Sends `signal` to the process group led by `pid`.
  virtual void SignalGroup(pid_t pid, int signal) = 0;
};

}  // namespace trainyard
