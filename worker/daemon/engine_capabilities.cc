#include "worker/daemon/engine_capabilities.h"

#include <google/protobuf/util/json_util.h>
#include <signal.h>

#include <deque>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/line_reader.h"
#include "common/base/text.h"

namespace trainyard {

namespace {

constexpr size_t kMaxStdoutBytes = 64 * 1024;
constexpr size_t kStderrTailLines = 5;

}  // namespace

absl::StatusOr<v1::EngineCapabilities> ParseEngineCapabilities(const std::string& printed) {
  const std::string text(absl::StripAsciiWhitespace(printed));
  if (text.empty()) return absl::InvalidArgumentError("printed nothing on stdout");
  v1::EngineCapabilities caps;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &caps, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("printed no EngineCapabilities JSON (",
                                                   std::string(status.message()), "): ", Quoted(text)));
  }
  return caps;
}

absl::StatusOr<v1::EngineCapabilities> ProbeEngineCapabilities(ProcessLauncher* launcher,
                                                                const std::string& rank_binary,
                                                                absl::Duration deadline, Clock* clock) {
  const std::string what = absl::StrCat(Quoted(rank_binary), " --capabilities");
  absl::StatusOr<LaunchedProcess> launched = launcher->Launch({rank_binary, {"--capabilities"}, {}});
  if (!launched.ok()) return absl::FailedPreconditionError(absl::StrCat(what, ": ", launched.status().message()));

  absl::Mutex mu;
  std::string out;
  std::deque<std::string> err_tail;
  bool exited = false;
  ProcessExit exit;
  std::thread out_reader([&, fd = launched->stdout_fd] {
    ReadLines(fd, [&](std::string line) {
      absl::MutexLock lock(&mu);
      if (out.size() < kMaxStdoutBytes) out.append(line).append("\n");
    });
  });
  std::thread err_reader([&, fd = launched->stderr_fd] {
    ReadLines(fd, [&](std::string line) {
      absl::MutexLock lock(&mu);
      err_tail.push_back(std::move(line));
      if (err_tail.size() > kStderrTailLines) err_tail.pop_front();
    }, 4096);
  });
  std::thread waiter([&, pid = launched->pid] {
    ProcessExit e = launcher->Wait(pid);
    absl::MutexLock lock(&mu);
    exit = e;
    exited = true;
  });
  bool in_time;
  {
    absl::MutexLock lock(&mu);
    in_time = clock->AwaitWithDeadline(&mu, absl::Condition(&exited), clock->Now() + deadline);
  }
  if (!in_time) launcher->SignalGroup(launched->pid, SIGKILL);
  waiter.join();
  out_reader.join();
  err_reader.join();

  absl::MutexLock lock(&mu);
  const std::string tail = err_tail.empty() ? "" : absl::StrCat("; stderr: ", Quoted(absl::StrJoin(err_tail, " | ")));
  if (!in_time) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, " did not finish within ", absl::FormatDuration(deadline), "; killed", tail));
  }
  if (exit.signal != 0) return absl::FailedPreconditionError(absl::StrCat(what, " was killed by signal ", exit.signal, tail));
  if (exit.exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(what, " exited with status ", exit.exit_code, tail));
  }
  absl::StatusOr<v1::EngineCapabilities> caps = ParseEngineCapabilities(out);
  if (!caps.ok()) return absl::InvalidArgumentError(absl::StrCat(what, " ", caps.status().message()));
  return caps;
}

}  // namespace trainyard
