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
#include "common/spec/json_io.h"
#include "common/spec/presets.h"
#include "common/spec_proto.h"

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

// Keeps the last kPreflightTailBytes of the lines appended to it. Thread-safe.
class PreflightRunner::OutputTail {
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
    case PreflightVerdict::kTooBig:
      return "refused";  // no runner ran: the controller's label of a preflight it refused
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
    case PreflightVerdict::kTooBig:
      return absl::StrCat("refused, so no runner was started: ",
                          report.fit ? DescribeRefusal(*report.fit, "") : report.error);
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

PreflightRunner::Child PreflightRunner::RunChild(const LaunchRequest& request, absl::Time deadline,
                                                const std::function<void(const std::string&)>& on_stdout,
                                                const CancelCheck& cancel, OutputTail* tail) const {
  Child result;
  absl::StatusOr<LaunchedProcess> child = launcher_->Launch(request);
  if (!child.ok()) {
    result.launch = child.status();
    return result;
  }
  std::thread out_reader([&, fd = child->stdout_fd] { ReadLines(fd, on_stdout); });
  std::thread err_reader([&, fd = child->stderr_fd] {
    ReadLines(fd, [&](std::string line) { tail->Append(line); });
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
  while (true) {
    {
      absl::MutexLock lock(&exit_mu);
      if (exited) break;
    }
    const absl::Time now = clock_->Now();
    if (cancel && cancel()) {
      result.cancelled = true;
    } else if (now >= deadline) {
      result.timed_out = true;
    }
    if (result.timed_out || result.cancelled) {
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
  absl::MutexLock lock(&exit_mu);
  result.exit = exit;
  return result;
}

namespace {

// The verdict of a runner that ended without findings being the question: timed out,
// cancelled, killed, or its exit status under the contract.
PreflightVerdict VerdictOf(const ProcessExit& exit, bool timed_out, bool cancelled, bool findings) {
  if (cancelled) return PreflightVerdict::kCancelled;
  if (timed_out) return PreflightVerdict::kTimedOut;
  if (exit.signal != 0) return PreflightVerdict::kRunnerFailed;
  if (exit.exit_code == 3 || (exit.exit_code == 0 && findings)) return PreflightVerdict::kFindings;
  if (exit.exit_code == 0) return PreflightVerdict::kClean;
  if (exit.exit_code == 2) return PreflightVerdict::kBadConfig;
  return PreflightVerdict::kRunnerFailed;
}

// The spec the runner prints with --print-config (spec::ToJson: every field).
absl::StatusOr<spec::JobSpec> ParseRunnerConfig(const std::string& text) {
  spec::Result<spec::SpecInput> input = spec::ParseJson(text, "trainyard-train --print-config");
  if (!input.ok()) return SpecErrorToStatus(input.error());
  spec::Result<spec::JobSpec> resolved = spec::ResolveAndValidate(input.value());
  if (!resolved.ok()) return SpecErrorToStatus(resolved.error());
  return resolved.value();
}

}  // namespace

absl::StatusOr<PreflightReport> PreflightRunner::Run(const v1::JobSpec& normalised,
                                                     const LineCallback& on_line,
                                                     const CancelCheck& cancel) const {
  const absl::Time start = clock_->Now();
  const absl::Time deadline = start + options_.timeout;
  absl::StatusOr<HostMemory> host = options_.host_memory ? options_.host_memory() : ReadHostMemory();
  if (!host.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot tell how much memory this machine can give the runner, so it was not started: ",
        host.status().message()));
  }
  absl::StatusOr<std::string> spec_path =
      WriteSpecFile(options_.spec_dir, ToJsonLine(normalised) + "\n");
  if (!spec_path.ok()) return spec_path.status();
  struct Unlink {
    std::string path;
    ~Unlink() { unlink(path.c_str()); }
  } unlink_spec{*spec_path};

  PreflightReport report;
  OutputTail tail;
  auto finish = [&](const Child& child, bool findings) {
    report.exit = child.exit;
    report.verdict = VerdictOf(child.exit, child.timed_out, child.cancelled, findings);
    report.output_tail = tail.Take();
    report.elapsed = clock_->Now() - start;
    return report;
  };

  // 1. What the runner will run (its --preflight [--shrink] changes: CPU ranks, 3 steps,
  //    synthetic data, the shrunk widths), from the runner itself, so the estimate is of
  //    exactly that; then whether this machine can hold its ranks.
  LaunchRequest request;
  request.binary = options_.binary;
  request.args = {*spec_path, "--preflight"};
  if (options_.shrink) request.args.push_back("--shrink");
  LaunchRequest print_config = request;
  print_config.args.push_back("--print-config");
  print_config.data_limit_bytes = static_cast<std::int64_t>(std::max(host->available_bytes, kRunnerLauncherBytes));
  std::string config_text;
  const Child config = RunChild(
      print_config, deadline, [&](std::string line) { absl::StrAppend(&config_text, line, "\n"); }, cancel, &tail);
  if (!config.launch.ok()) return config.launch;
  if (config.timed_out || config.cancelled || config.exit.signal != 0 || config.exit.exit_code != 0) {
    if (!config_text.empty()) tail.Append(config_text);
    return finish(config, false);
  }
  absl::StatusOr<spec::JobSpec> runner_spec = ParseRunnerConfig(config_text);
  if (!runner_spec.ok()) {
    report.exit = config.exit;
    report.verdict = PreflightVerdict::kRunnerFailed;
    report.error = absl::StrCat("its --print-config output is not a job spec: ", runner_spec.status().message());
    report.output_tail = tail.Take();
    report.elapsed = clock_->Now() - start;
    return report;
  }
  report.fit = FitRunner(*runner_spec, *host);
  if (!report.fit->fits) {
    report.verdict = PreflightVerdict::kTooBig;
    report.error = report.fit->refusal;
    report.elapsed = clock_->Now() - start;
    return report;
  }

  // 2. The run, every process of it under the cap.
  request.args.push_back("--json");
  request.data_limit_bytes = report.fit->data_limit_bytes;
  // Only the stdout reader touches these until RunChild returns.
  std::vector<v1::Event> findings;
  int compile_events = 0;
  std::string error;
  const Child run = RunChild(
      request, deadline,
      [&](std::string line) {
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
      },
      cancel, &tail);
  if (!run.launch.ok()) return run.launch;
  report.findings = std::move(findings);
  report.compile_events = compile_events;
  report.error = std::move(error);
  return finish(run, !report.findings.empty());
}

}  // namespace trainyard
