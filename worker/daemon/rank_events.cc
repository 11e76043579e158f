#include "worker/daemon/rank_events.h"

#include "common/proto_time.h"

#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {

v1::Event RankEvents::State(v1::RankState::State state, const std::string &worker) {
  v1::Event e;
  e.mutable_rank_state()->set_state(state);
  e.mutable_rank_state()->set_worker(worker);
  return e;
}

v1::Event RankEvents::Log(const std::string &level, std::string message) {
  if (message.size() > kMaxMessageBytes) {
    const size_t cut = message.size() - kMaxMessageBytes;
    message.resize(kMaxMessageBytes);
    absl::StrAppend(&message, "...(", cut, " more bytes)");
  }
  v1::Event e;
  e.mutable_log()->set_level(level);
  e.mutable_log()->set_message(std::move(message));
  return e;
}

v1::Event RankEvents::Exit(const std::string &worker, pid_t pid, const ProcessExit &exit,
                           bool killed, const std::string &kill_reason,
                           const std::string &stderr_tail) {
  v1::Event event = State(v1::RankState::EXITED, worker);
  v1::RankState *state = event.mutable_rank_state();
  state->set_pid(pid);
  state->set_exit_code(exit.exit_code);
  state->set_signal(exit.signal);
  const std::string how =
      exit.signal != 0
          ? absl::StrCat("killed by signal ", exit.signal, " (", SignalName(exit.signal), ")")
          : absl::StrCat("exit code ", exit.exit_code);
  if (killed) {
    state->set_state(v1::RankState::KILLED);
    state->set_message(absl::StrCat(kill_reason, " (", how, ")"));
  } else if (exit.signal != 0 || exit.exit_code != 0) {
    state->set_state(v1::RankState::FAILED);
    // The tail's last bytes say most about the failure: keep those.
    const std::string tail = stderr_tail.size() > kMaxMessageBytes
                                 ? absl::StrCat("...", stderr_tail.substr(stderr_tail.size() - kMaxMessageBytes))
                                 : stderr_tail;
    state->set_message(exit.signal == 0 && !tail.empty() ? absl::StrCat(how, ": ", tail) : how);
  }
  return event;
}

std::string RankEvents::SignalName(int signal) {
  switch (signal) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return absl::StrCat("signal ", signal);
  }
}

google::protobuf::Timestamp RankEvents::Timestamp(absl::Time t) { return ToProtoTime(t); }

}  // namespace trainyard
