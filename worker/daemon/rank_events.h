#pragma once

#include <sys/types.h>

#include <string>

#include "absl/time/time.h"
#include "common/base/process_launcher.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard {

// Builds the payloads of the events the supervisor emits about a rank (the supervisor
// stamps job, attempt, rank, source_seq and time). Pure functions.
//
// Thread contract: stateless; every function is thread-safe.
class RankEvents {
 public:
  // Log messages and a failed rank's stderr tail are cut to this many bytes, so every
  // event stays well under the controller's 1 MiB per event.
  static constexpr size_t kMaxMessageBytes = 64 * 1024;

  // A RankState event in `state`, reported by `worker`.
  static trainyard::v1::Event State(trainyard::v1::RankState::State state,
                                    const std::string &worker);
  // A Log event at `level` ("info" for stdout lines, "warn" for stderr); a message over
  // kMaxMessageBytes keeps its first kMaxMessageBytes and says how much was cut.
  static trainyard::v1::Event Log(const std::string &level, std::string message);
  // The final RankState of a rank that ran as `pid` and ended as `exit`:
  //   KILLED, "REASON (HOW)", when the supervisor killed it;
  //   EXITED on exit code 0;
  //   FAILED otherwise, "HOW" plus ": STDERR_TAIL" when it exited with a code and
  //   wrote to stderr.
  // HOW is "exit code N" or "killed by signal N (SIGNAME)".
  static trainyard::v1::Event Exit(const std::string &worker, pid_t pid, const ProcessExit &exit,
                                   bool killed, const std::string &kill_reason,
                                   const std::string &stderr_tail);
  // "SIGKILL", "SIGSEGV", ... or "signal N" for one without a name here.
  static std::string SignalName(int signal);
  static google::protobuf::Timestamp Timestamp(absl::Time t);
};

}  // namespace trainyard
