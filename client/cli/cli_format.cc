#include "client/cli/cli_format.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/fleet_format.h"
#include "client/cli/gpu_format.h"

namespace trainyard::cli {
namespace {

std::string Source(const v1::Event& event) {
  if (event.rank() < 0) return "job";
  return absl::StrCat("rank=", event.rank());
}

std::string FormatStep(const v1::StepMetrics& m) {
  std::string line = absl::StrFormat("step %d loss=%.4f grad_norm=%.2f lr=%.1e tok/s=%.0f step_ms=%.0f", m.step(),
                                     m.loss(), m.grad_norm(), m.lr(), m.tokens_per_s(), m.step_ms());
  if (m.mfu() > 0) absl::StrAppend(&line, absl::StrFormat(" mfu=%.1f%%", 100.0 * m.mfu()));
  if (m.imbalance() > 0) absl::StrAppend(&line, absl::StrFormat(" imbalance=%.2f", m.imbalance()));
  // Only with a capacity that drops: a dropless job's line stays as it was.
  if (m.dropped_tokens() > 0) absl::StrAppend(&line, " dropped=", m.dropped_tokens());
  if (m.epoch() > 0) absl::StrAppend(&line, " epoch=", m.epoch());
  return line;
}

std::string FormatValidation(const v1::Validation& v) {
  return absl::StrFormat("validation step %d loss=%.4f tokens=%d ms=%.0f", v.step(), v.loss(), v.tokens(), v.ms());
}

std::string FormatCompile(const v1::CompileEvent& c) {
  std::string line = absl::StrCat("compile ", v1::CompileEvent::Kind_Name(c.kind()));
  if (!c.region().empty()) absl::StrAppend(&line, " region=", c.region());
  if (c.layers_size() > 0) absl::StrAppend(&line, " layers=", absl::StrJoin(c.layers(), ","));
  if (c.compile_ms() > 0) absl::StrAppend(&line, absl::StrFormat(" compile_ms=%.1f", c.compile_ms()));
  if (c.cache_entries() > 0) absl::StrAppend(&line, " cache_entries=", c.cache_entries());
  if (!c.reason().empty()) absl::StrAppend(&line, ": ", c.reason());
  return line;
}

std::string FormatRankState(const v1::RankState& r) {
  std::string line = v1::RankState::State_Name(r.state());
  if (r.pid() > 0) absl::StrAppend(&line, " pid=", r.pid());
  if (r.state() == v1::RankState::FAILED || r.state() == v1::RankState::EXITED) {
    absl::StrAppend(&line, " exit_code=", r.exit_code());
  }
  if (r.signal() > 0) absl::StrAppend(&line, " signal=", r.signal());
  if (!r.worker().empty()) absl::StrAppend(&line, " on worker ", r.worker());
  if (!r.message().empty()) absl::StrAppend(&line, ": ", r.message());
  return line;
}

// Display width: the bytes that start a UTF-8 character ("×" is one column).
size_t CellWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

std::string FormatColumns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], CellWidth(row[i]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += "  ";
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - CellWidth(row[i]), ' ');
    }
    // Rows whose trailing cells are empty would otherwise end in spaces.
    line.erase(line.find_last_not_of(' ') + 1);
    out += line;
    out += '\n';
  }
  return out;
}

int WatchExitCode(v1::Job::State state) {
  switch (state) {
    case v1::Job::SUCCEEDED:
      return kExitOk;
    case v1::Job::FAILED:
    case v1::Job::CANCELLED:
      return kExitJobFailed;
    default:
      return kExitError;
  }
}

int ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitDenied;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    default:
      return kExitError;
  }
}

std::string ExitCodeTable() {
  return absl::StrCat(
      "  ", kExitOk, "  success; watch, submit --wait, logs --follow: the job SUCCEEDED\n", "  ", kExitJobFailed,
      "  the job ended FAILED or CANCELLED (watch, submit --wait, logs --follow); preflight: findings\n", "  ",
      kExitUsage,
      "  usage error: bad flag, argument, job file or value (INVALID_ARGUMENT); preflight: a runner too "
      "big for this machine\n",
      "  ", kExitNotFound, "  not found: no such job, artifact or file (NOT_FOUND)\n", "  ", kExitDenied,
      "  not allowed: UNAUTHENTICATED or PERMISSION_DENIED\n", "  ", kExitUnavailable,
      "  controller unreachable: UNAVAILABLE or DEADLINE_EXCEEDED (watch: after --reconnect-for)\n", "  ", kExitError,
      "  any other error: the controller refused the request (FAILED_PRECONDITION, ...), an "
      "internal error, preflight's runner failed\n");
}

absl::StatusOr<v1::Job::State> ParseJobState(std::string_view name) {
  v1::Job::State state;
  if (v1::Job::State_Parse(absl::AsciiStrToUpper(absl::string_view(name.data(), name.size())), &state) &&
      state != v1::Job::STATE_UNSPECIFIED) {
    return state;
  }
  std::vector<std::string> known;
  for (int i = v1::Job::State_MIN; i <= v1::Job::State_MAX; ++i) {
    if (v1::Job::State_IsValid(i) && i != v1::Job::STATE_UNSPECIFIED) {
      known.push_back(v1::Job::State_Name(static_cast<v1::Job::State>(i)));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown job state \"", absl::string_view(name.data(), name.size()),
                                                 "\" (known: ", absl::StrJoin(known, ", "), ")"));
}

std::string StateName(v1::Job::State state) {
  const std::string& name = v1::Job::State_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

std::string FormatEventText(const v1::Event& event) {
  std::string line = absl::StrCat("seq=", event.seq(), " ", Source(event));
  if (event.attempt() > 1) absl::StrAppend(&line, " attempt=", event.attempt());
  line += ' ';
  switch (event.payload_case()) {
    case v1::Event::kStepMetrics:
      line += FormatStep(event.step_metrics());
      break;
    case v1::Event::kValidation:
      line += FormatValidation(event.validation());
      break;
    case v1::Event::kCompile:
      line += FormatCompile(event.compile());
      break;
    case v1::Event::kRankState:
      line += FormatRankState(event.rank_state());
      break;
    case v1::Event::kLog:
      absl::StrAppend(&line, "[", event.log().level().empty() ? "info" : event.log().level(), "] ",
                      event.log().message());
      break;
    case v1::Event::kArtifact: {
      const v1::ArtifactRef& a = event.artifact();
      absl::StrAppend(&line, "artifact ", a.name(), " kind=", a.kind(), " bytes=", a.size_bytes());
      if (!a.uri().empty()) absl::StrAppend(&line, " ", a.uri());
      break;
    }
    case v1::Event::kStall: {
      const v1::Stall& s = event.stall();
      absl::StrAppend(&line, "STALL in ", s.collective(), " #", s.collective_seq(), ", lagging rank ", s.lagging_rank(),
                      absl::StrFormat(", waited %.1fs", s.waited_s()));
      if (!s.message().empty()) absl::StrAppend(&line, ": ", s.message());
      break;
    }
    case v1::Event::kJobState:
      line += StateName(event.job_state().state());
      if (!event.job_state().reason().empty()) {
        absl::StrAppend(&line, ": ", event.job_state().reason());
      }
      break;
    case v1::Event::kCheckpoint: {
      const v1::CheckpointSaved& c = event.checkpoint();
      absl::StrAppend(&line, "checkpoint step ", c.step(), " at ", c.path(), " (", FormatBytes(c.bytes()),
                      absl::StrFormat(", write %.0f ms)", c.write_ms()));
      // Saved for `trainyard checkpoint`, a preemption or a drain, outside the interval.
      if (c.requested()) line += " on request";
      if (!c.metric_name().empty()) absl::StrAppend(&line, " ", c.metric_name(), absl::StrFormat(" %.4f", c.metric()));
      break;
    }
    case v1::Event::kCheckpointsPruned: {
      const v1::CheckpointsPruned& p = event.checkpoints_pruned();
      std::vector<std::string> steps;
      for (const v1::CheckpointRef& r : p.removed()) steps.push_back(absl::StrCat(r.step()));
      absl::StrAppend(&line, "checkpoints pruned after step ", p.step(), ": removed ",
                      steps.empty() ? "none" : absl::StrCat("step ", absl::StrJoin(steps, ", ")), " (",
                      FormatBytes(p.bytes_freed()), " freed), ", p.kept(), " kept (", FormatBytes(p.bytes_kept()), ")");
      break;
    }
    case v1::Event::PAYLOAD_NOT_SET:
      line += "(no payload)";
      break;
  }
  // Messages, reasons, paths and names come from ranks: one terminal-safe line.
  return TerminalSafe(line);
}

std::string FormatJobsTable(const std::vector<v1::Job>& jobs) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"ID", "NAME", "STATE", "WORLD", "OWNER", "REASON"});
  for (const v1::Job& job : jobs) {
    const std::string& reason = job.state() == v1::Job::PENDING ? job.pending_reason() : job.failure_reason();
    rows.push_back({job.id(), job.spec().job().name(), StateName(job.state()), absl::StrCat(job.world_size()),
                    job.owner(), reason});
  }
  return FormatColumns(rows);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < sizeof(units) / sizeof(units[0])) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

std::string FormatArtifactsTable(const std::vector<v1::ArtifactInfo>& artifacts) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "KIND", "ATTEMPT", "RANK", "SIZE", "SHA256", "TIME"});
  for (const v1::ArtifactInfo& a : artifacts) {
    std::string time = "-";
    if (a.has_create_time()) {
      const absl::Time t = absl::FromUnixSeconds(a.create_time().seconds());
      time = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
    }
    rows.push_back({a.name(), a.kind(), absl::StrCat(a.attempt()), a.rank() < 0 ? "-" : absl::StrCat(a.rank()),
                    FormatBytes(a.size_bytes()), a.sha256().substr(0, 12), time});
  }
  return FormatColumns(rows);
}

std::string FormatError(const absl::Status& status) {
  // The message may quote what a controller, a rank or a file said.
  return absl::StrCat("trainyard: ", absl::StatusCodeToString(status.code()), ": ",
                      TerminalSafe(status.message(), /*keep_newlines=*/true));
}

std::string UnreachableHint(const absl::Status& status, const std::string& controller, bool tls) {
  const std::string m = absl::AsciiStrToLower(status.message());
  auto has = [&](absl::string_view what) { return absl::StrContains(m, what); };
  if (has("connection refused")) {
    return absl::StrCat(" (nothing listens at ", controller,
                        ": is the controller running, and is --controller (or TRAINYARD_CONTROLLER) right?)");
  }
  if (has("dns resolution failed") || has("name or service not known")) {
    return absl::StrCat(" (cannot resolve the host of ", controller, ": check --controller)");
  }
  if (!tls) {
    if (has("socket closed") || has("connection reset") || has("handshake") || has("end of file")) {
      return absl::StrCat(" (controller at ", controller, "; plaintext: a controller that serves TLS needs --tls-ca)");
    }
    return absl::StrCat(" (controller at ", controller, ")");
  }
  if (has("wrong version number")) {
    return absl::StrCat(" (controller at ", controller,
                        "; TLS with --tls-ca, but the port answered in plaintext: leave out --tls-ca for a "
                        "controller without TLS)");
  }
  if (has("certificate verify failed")) {
    return absl::StrCat(" (controller at ", controller,
                        "; TLS with --tls-ca: its certificate is not signed by that CA, or not for this address)");
  }
  if (has("handshake"))
    return absl::StrCat(" (controller at ", controller, "; TLS with --tls-ca: the handshake failed)");
  return absl::StrCat(" (controller at ", controller, "; TLS with --tls-ca)");
}

namespace {

// The length of the valid UTF-8 sequence at text[i] (2 to 4), or 0 when it is not one
// (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short).
size_t Utf8SequenceLength(absl::string_view text, size_t i, uint32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  uint32_t cp = lead & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const unsigned char c = byte(i + k);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  *code_point = cp;
  return n;
}

}  // namespace

std::string TerminalSafe(absl::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c >= 0x20 && c < 0x7F) || c == '\t' || (c == '\n' && keep_newlines)) {
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else {
        absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = Utf8SequenceLength(text, i, &cp);
    if (n == 0) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
      ++i;
      continue;
    }
    if (cp <= 0x9F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", cp));
    } else {
      out.append(text.data() + i, n);
    }
    i += n;
  }
  return out;
}

int QueuePosition(const v1::Job& job, const std::vector<v1::Job>& pending) {
  // The controller's order: higher priority first, then the earlier submission (ids
  // are "job-<n>", n increasing; create_time breaks nothing that n does not).
  auto key = [](const v1::Job& j) {
    return std::make_pair(-j.spec().job().priority(),
                          std::make_pair(j.create_time().seconds(), j.create_time().nanos()));
  };
  bool found = false;
  int ahead = 0;
  for (const v1::Job& other : pending) {
    if (other.id() == job.id()) {
      found = true;
      continue;
    }
    if (key(other) < key(job)) ++ahead;
  }
  return found ? ahead + 1 : 0;
}

namespace {

std::string FormatIn(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return "now";
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat("in ", s, "s");
  if (s < 3600) return absl::StrCat("in ", s / 60, "m", s % 60, "s");
  return absl::StrCat("in ", s / 3600, "h", (s % 3600) / 60, "m");
}

}  // namespace

std::string FormatJobDetails(const v1::Job& job) {
  std::string out;
  if (job.has_last_checkpoint() && job.last_checkpoint().step() > 0) {
    const v1::CheckpointRef& ck = job.last_checkpoint();
    absl::StrAppend(&out, "last checkpoint: step ", ck.step(), " at ", ck.path(), " (attempt ", ck.attempt(), ", ",
                    ck.bytes(), " bytes)\n");
  }
  if (job.failure_causes_size() > 0) {
    absl::StrAppend(&out, "failure causes (oldest first):\n");
    for (int i = 0; i < job.failure_causes_size(); ++i) {
      absl::StrAppend(&out, "  ", i + 1, ". ", job.failure_causes(i), "\n");
    }
  }
  return out;
}

std::string FormatExplain(const v1::Job& job, const std::vector<v1::Job>& pending,
                          const std::vector<v1::WorkerInfo>& workers, absl::Time now) {
  std::string out = absl::StrCat(job.id(), "  ", StateName(job.state()), "  priority ", job.spec().job().priority(),
                                 "  world ", job.world_size(), " (dp ", job.spec().parallelism().dp(), " × tp ",
                                 job.spec().parallelism().tp(), ")\n");
  if (job.state() != v1::Job::PENDING) {
    std::vector<std::string> ranks;
    for (const auto& r : job.placement().ranks()) ranks.push_back(r.worker());
    if (IsTerminal(job.state())) {
      absl::StrAppend(&out, "ended:      ", StateName(job.state()),
                      job.failure_reason().empty() ? "" : absl::StrCat(": ", job.failure_reason()), "\n");
    } else {
      absl::StrAppend(&out, "placed:     attempt ", job.attempt(), " on ",
                      ranks.empty() ? "(no ranks)" : CountWorkers(ranks), "\n",
                      FormatPlacementGpus(job.placement(), "gpus:       ", "nccl env:   "));
      if (!job.unreachable_reason().empty()) absl::StrAppend(&out, "waiting:    ", job.unreachable_reason(), "\n");
    }
    return out + FormatShare(job) + FormatJobDetails(job);
  }
  absl::StrAppend(&out, "why:        ", job.pending_reason(), "\n");
  // The controller's own place (Job.share, with fair share among equal priority) when it
  // sends one; an older controller's order is priority, then submission.
  if (job.share().queue_position() > 0) {
    absl::StrAppend(&out, "queue:      ", Ordinal(job.share().queue_position()), " of ", job.share().queue_length(),
                    " pending (higher priority first, then fair share, then submission order)\n");
  } else if (const int pos = QueuePosition(job, pending); pos > 0) {
    absl::StrAppend(&out, "queue:      ", Ordinal(pos), " of ", pending.size(),
                    " pending (higher priority first, then submission order)\n");
  }
  if (job.has_estimated_start_time()) {
    const absl::Time start = absl::FromUnixSeconds(job.estimated_start_time().seconds()) +
                             absl::Nanoseconds(job.estimated_start_time().nanos());
    absl::StrAppend(&out, "estimated:  start ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", start, absl::UTCTimeZone()),
                    " (", FormatIn(start - now),
                    "), from the running jobs' measured step times "
                    "and time limits\n");
  } else {
    absl::StrAppend(&out, "estimated:  no estimate yet\n");
  }
  if (job.reserved_workers_size() > 0) {
    absl::StrAppend(&out, "reserved:   ", CountWorkers({job.reserved_workers().begin(), job.reserved_workers().end()}),
                    " (held for this job; smaller jobs start first only if they leave it alone or end before)\n");
  }
  std::vector<std::string> fleet;
  for (const auto& w : workers) {
    if (!w.connected()) continue;
    std::string free = absl::StrCat(w.name(), " ", w.free_slots(), "/", w.slots());
    if (w.gpus_size() > 0) absl::StrAppend(&free, " (GPUs ", w.free_gpus_size(), "/", w.gpus_size(), ")");
    // Its free slots take no new ranks.
    if (w.cordoned()) free += " cordoned";
    fleet.push_back(std::move(free));
  }
  absl::StrAppend(&out, "fleet free: ", fleet.empty() ? "no workers connected" : absl::StrJoin(fleet, ", "), "\n");
  return out + FormatShare(job) + FormatJobDetails(job);
}

std::string CountWorkers(const std::vector<std::string>& rank_workers) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& w : rank_workers) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == w; });
    if (it == counts.end()) {
      counts.push_back({w, 1});
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [w, n] : counts) parts.push_back(absl::StrCat(w, "×", n));
  return absl::StrJoin(parts, ", ");
}

}  // namespace trainyard::cli
