#include "common/preflight_runner.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/line_reader.h"
#include "common/events/proto_json.h"
#include "common/events/rank_line.h"

namespace trainyard {
namespace {

// How often a run asks whether it was cancelled.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

// Writes `text` to a new file `dir/trainyard-preflight-XXXXXX.json`; returns its path.
absl::StatusOr<std::string> WriteSpecFile(const std::string& dir, const std::string& text) {
  std::string path = absl::StrCat(dir.empty() ? "." : dir, "/trainyard-preflight-XXXXXX.json");
  const int fd = mkstemps(path.data(), 5);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the preflight spec file in ", dir, ": ", strerror(errno)));
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(path.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", strerror(e)));
    }
    written += static_cast<size_t>(n);
  }
  close(fd);
  return path;
}

// Keeps the last kPreflightTailBytes of the lines appended to it. Thread-safe.
class OutputTail {
 public:
  void Append(const std::string& line) {
    absl::MutexLock lock(&mu_);
    absl::StrAppend(&text_, line, "\n");
    if (text_.size() > 2 * kPreflightTailBytes) text_.erase(0, text_.size() - kPreflightTailBytes);
  }
  std::string Take() {
    absl::MutexLock lock(&mu_);
    std::string out = std::move(text_);
    if (out.size() > kPreflightTailBytes) {
      out.erase(0, out.size() - kPreflightTailBytes);
      const size_t newline = out.find('\n');
      if (newline != std::string::npos && newline + 1 < out.size()) out.erase(0, newline + 1);
    }
    return std::string(absl::StripTrailingAsciiWhitespace(out));
  }

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

// An Event of trainyard-train's --json output (the proto3 JSON of trainyard.v1.Event),
// read strictly: a field this build does not know is an error, not silently dropped.
bool ParseEvent(const std::string& line, v1::Event* event) {
  return LooksLikeEvent(line) && FromJson(line, event).ok();
}

std::string KindName(v1::CompileEvent::Kind kind) {
  const std::string& name = v1::CompileEvent::Kind_Name(kind);
  return name.empty() ? absl::StrCat("KIND_", static_cast<int>(kind)) : name;
}

std::string Layers(const v1::CompileEvent& c) {
  return absl::StrCat("[", absl::StrJoin(c.layers(), ","), "]");
}

}  // namespace

const char* PreflightVerdictName(PreflightVerdict verdict) {
  switch (verdict) {
    case PreflightVerdict::kClean:
      return "clean";
    case PreflightVerdict::kFindings:
      return "findings";
    case PreflightVerdict::kBadConfig:
      return "bad_config";
    case PreflightVerdict::kRunnerFailed:
      return "failed";
    case PreflightVerdict::kTimedOut:
      return "timeout";
    case PreflightVerdict::kCancelled:
      return "cancelled";
  }
  return "failed";
}

bool IsPreflightFinding(v1::CompileEvent::Kind kind) {
  return kind == v1::CompileEvent::UNSAFE_SIDE_EFFECT ||
         kind == v1::CompileEvent::RECOMPILE_LIMIT;
}

bool IsShownPreflightKind(v1::CompileEvent::Kind kind) {
  switch (kind) {
    case v1::CompileEvent::COMPILE:
    case v1::CompileEvent::RECOMPILE:
    case v1::CompileEvent::RECOMPILE_LIMIT:
    case v1::CompileEvent::GRAPH_BREAK:
    case v1::CompileEvent::UNSAFE_SIDE_EFFECT:
    case v1::CompileEvent::FALLBACK:
      return true;
    default:
      return false;
  }
}

std::string FormatPreflightEvent(const v1::Event& event) {
  const v1::CompileEvent& c = event.compile();
  std::string line = absl::StrCat("rank ", event.rank(), "  ", KindName(c.kind()), "  region=",
                                  c.region().empty() ? "-" : c.region());
  if (c.layers_size() > 0) absl::StrAppend(&line, " layers=", Layers(c));
  if (c.compile_ms() > 0) {
    absl::StrAppend(&line, " compile_ms=", absl::StrFormat("%.1f", c.compile_ms()));
  }
  if (c.cache_entries() > 0) absl::StrAppend(&line, " cache_entries=", c.cache_entries());
  if (!c.reason().empty()) absl::StrAppend(&line, "  ", c.reason());
  return line;
}

std::string SummarizeFindings(const std::vector<v1::Event>& findings, size_t max_items) {
  // Every rank of a data-parallel job reports the same problem: merge them.
  using Key = std::tuple<int, std::string, std::string, std::string>;
  std::vector<Key> order;
  std::map<Key, std::vector<int>> ranks;
  for (const v1::Event& e : findings) {
    const v1::CompileEvent& c = e.compile();
    Key key{c.kind(), c.region(), Layers(c), c.reason()};
    auto [it, inserted] = ranks.try_emplace(key);
    if (inserted) order.push_back(key);
    if (std::find(it->second.begin(), it->second.end(), e.rank()) == it->second.end()) {
      it->second.push_back(e.rank());
    }
  }
  std::vector<std::string> items;
  for (size_t i = 0; i < order.size() && i < max_items; ++i) {
    const auto& [kind, region, layers, reason] = order[i];
    const std::vector<int>& r = ranks[order[i]];
    std::string item = absl::StrCat(r.size() > 1 ? "ranks " : "rank ", absl::StrJoin(r, ","), " ",
                                    KindName(static_cast<v1::CompileEvent::Kind>(kind)),
                                    " region=", region.empty() ? "-" : region);
    if (layers != "[]") absl::StrAppend(&item, " layers=", layers);
    if (!reason.empty()) absl::StrAppend(&item, ": ", reason);
    items.push_back(std::move(item));
  }
  std::string out = absl::StrJoin(items, "; ");
  if (order.size() > max_items) absl::StrAppend(&out, " (and ", order.size() - max_items, " more)");
  return out;
}

std::string DescribePreflightFailure(const PreflightReport& report) {
  std::string detail = report.output_tail;
  if (detail.empty()) detail = report.error;
  if (detail.empty()) detail = "(no output)";
  switch (report.verdict) {
    case PreflightVerdict::kTimedOut:
      return absl::StrCat("timed out after ",
                          absl::StrFormat("%.1fs", absl::ToDoubleSeconds(report.elapsed)),
                          " (its process group was killed); last output: ", detail);
    case PreflightVerdict::kCancelled:
      return "cancelled (its process group was killed)";
    case PreflightVerdict::kBadConfig:
      return absl::StrCat("runner rejected the job (exit code 2, bad config or usage): ", detail);
    case PreflightVerdict::kClean:
    case PreflightVerdict::kFindings:
    case PreflightVerdict::kRunnerFailed:
      break;
  }
  if (report.exit.signal != 0) {
    return absl::StrCat("runner was killed by signal ", report.exit.signal, ": ", detail);
  }
  return absl::StrCat("runner exited with code ", report.exit.exit_code, ": ", detail);
}

absl::StatusOr<PreflightReport> PreflightRunner::Run(const v1::JobSpec& normalised,
                                                     const LineCallback& on_line,
                                                     const CancelCheck& cancel) const {
  const absl::Time start = clock_->Now();
  absl::StatusOr<std::string> spec_path =
      WriteSpecFile(options_.spec_dir, ToJsonLine(normalised) + "\n");
  if (!spec_path.ok()) return spec_path.status();
  struct Unlink {
    std::string path;
    ~Unlink() { unlink(path.c_str()); }
  } unlink_spec{*spec_path};

  LaunchRequest request;
  request.binary = options_.binary;
  request.args = {*spec_path, "--preflight"};
  if (options_.shrink) request.args.push_back("--shrink");
  request.args.push_back("--json");
  absl::StatusOr<LaunchedProcess> child = launcher_->Launch(request);
  if (!child.ok()) return child.status();

  PreflightReport report;
  OutputTail tail;
  // Only the stdout reader touches these until it is joined.
  std::vector<v1::Event> findings;
  int compile_events = 0;
  std::string error;
  std::thread out_reader([&, fd = child->stdout_fd] {
    ReadLines(fd, [&](std::string line) {
      v1::Event event;
      const bool is_event = ParseEvent(line, &event);
      if (is_event) {
        if (event.has_compile()) {
          ++compile_events;
          if (IsPreflightFinding(event.compile().kind())) findings.push_back(event);
        }
        if (event.has_log() && event.log().level() == "error") error = event.log().message();
      } else if (!line.empty()) {
        tail.Append(line);
      }
      if (on_line) on_line(line, is_event ? &event : nullptr);
    });
  });
  std::thread err_reader([&, fd = child->stderr_fd] {
    ReadLines(fd, [&](std::string line) { tail.Append(line); });
  });
  absl::Mutex exit_mu;
  bool exited = false;
  ProcessExit exit;
  std::thread waiter([&, pid = child->pid] {
    ProcessExit e = launcher_->Wait(pid);  // also kills what the runner left in its group
    absl::MutexLock lock(&exit_mu);
    exit = e;
    exited = true;
  });

  const absl::Time deadline = start + options_.timeout;
  bool timed_out = false;
  bool cancelled = false;
  while (true) {
    {
      absl::MutexLock lock(&exit_mu);
      if (exited) break;
    }
    const absl::Time now = clock_->Now();
    if (cancel && cancel()) {
      cancelled = true;
    } else if (now >= deadline) {
      timed_out = true;
    }
    if (timed_out || cancelled) {
      launcher_->SignalGroup(child->pid, SIGKILL);
      break;
    }
    const absl::Time wake = cancel ? std::min(deadline, now + kCancelPoll) : deadline;
    absl::MutexLock lock(&exit_mu);
    clock_->AwaitWithDeadline(&exit_mu, absl::Condition(&exited), wake);
  }
  waiter.join();
  out_reader.join();
  err_reader.join();

  {
    absl::MutexLock lock(&exit_mu);
    report.exit = exit;
  }
  report.findings = std::move(findings);
  report.compile_events = compile_events;
  report.error = std::move(error);
  report.output_tail = tail.Take();
  report.elapsed = clock_->Now() - start;
  if (cancelled) {
    report.verdict = PreflightVerdict::kCancelled;
  } else if (timed_out) {
    report.verdict = PreflightVerdict::kTimedOut;
  } else if (exit.signal != 0) {
    report.verdict = PreflightVerdict::kRunnerFailed;
  } else if (exit.exit_code == 3 || (exit.exit_code == 0 && !report.findings.empty())) {
    report.verdict = PreflightVerdict::kFindings;
  } else if (exit.exit_code == 0) {
    report.verdict = PreflightVerdict::kClean;
  } else if (exit.exit_code == 2) {
    report.verdict = PreflightVerdict::kBadConfig;
  } else {
    report.verdict = PreflightVerdict::kRunnerFailed;
  }
  return report;
}

}  // namespace trainyard
