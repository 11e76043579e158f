#include "client/cli/watch_display.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/cli_format.h"
#include "client/cli/job_view.h"
#include "common/events/proto_json.h"

namespace trainyard::cli {
namespace {

// Carriage return and "erase the whole line" (ECMA-48 EL 2).
constexpr const char* kClearLine = "\r\x1b[2K";

}  // namespace

std::string Sparkline(const std::vector<double>& values, size_t width) {
  static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  if (values.empty() || width == 0) return "";
  const size_t first = values.size() > width ? values.size() - width : 0;
  double lo = 0;
  double hi = 0;
  bool any = false;
  for (size_t i = first; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    lo = any ? std::min(lo, values[i]) : values[i];
    hi = any ? std::max(hi, values[i]) : values[i];
    any = true;
  }
  std::string out;
  for (size_t i = first; i < values.size(); ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) {
      out += ' ';
    } else if (hi <= lo) {
      out += kBlocks[3];
    } else {
      const int level = static_cast<int>(std::lround((v - lo) / (hi - lo) * 7));
      out += kBlocks[std::clamp(level, 0, 7)];
    }
  }
  return out;
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

void StepRate::Add(int64_t step, absl::Time time) {
  if (!samples_.empty() && step < samples_.back().first) samples_.clear();
  if (!samples_.empty() && step == samples_.back().first) return;  // another rank's report
  samples_.emplace_back(step, time);
  while (samples_.size() > kWindow) samples_.pop_front();
}

std::optional<absl::Duration> StepRate::Eta(int64_t total) const {
  if (samples_.size() < 2) return std::nullopt;
  const auto& [s0, t0] = samples_.front();
  const auto& [s1, t1] = samples_.back();
  const double seconds = absl::ToDoubleSeconds(t1 - t0);
  if (s1 <= s0 || seconds <= 0) return std::nullopt;
  const double rate = static_cast<double>(s1 - s0) / seconds;
  const int64_t left = std::max<int64_t>(0, total - s1);
  return absl::Seconds(static_cast<double>(left) / rate);
}

std::string FormatStatusLine(const WatchStatus& s, size_t max_columns) {
  std::vector<std::string> parts;
  std::string head = absl::StrCat(TerminalSafe(s.job_id), " ", s.state == v1::Job::STATE_UNSPECIFIED ? "..." : StateName(s.state));
  if (s.attempt > 1) absl::StrAppend(&head, " (attempt ", s.attempt, ")");
  parts.push_back(head);
  if (!s.note.empty()) parts.push_back(absl::StrCat("[", s.note, "]"));
  if (s.have_step) {
    std::string step = s.total_steps > 0 ? absl::StrCat("step ", s.step, "/", s.total_steps)
                                         : absl::StrCat("step ", s.step);
    if (s.epoch > 0) absl::StrAppend(&step, " epoch ", s.epoch);
    parts.push_back(step);
    std::string loss = absl::StrFormat("loss %.4f", s.loss);
    if (s.losses.size() > 1) loss = absl::StrCat(Sparkline(s.losses, WatchDisplay::kSparkWidth), " ", loss);
    parts.push_back(loss);
    if (s.have_validation) parts.push_back(absl::StrFormat("val %.4f@%d", s.val_loss, s.val_step));
    parts.push_back(absl::StrFormat("%.0f tok/s", s.tokens_per_s));
    parts.push_back(s.mfu > 0 ? absl::StrFormat("MFU %.1f%%", 100 * s.mfu) : std::string("MFU n/a"));
    if (s.total_steps > 0 && !IsTerminal(s.state)) {
      parts.push_back(s.eta.has_value() ? absl::StrCat("ETA ", HumanDuration(*s.eta)) : std::string("ETA -"));
    }
    parts.push_back(absl::StrCat("recompiles ", s.recompiles));
  } else {
    parts.push_back("waiting for the first step");
  }
  std::string line;
  for (const std::string& part : parts) {
    std::string next = line.empty() ? part : absl::StrCat(line, "  ", part);
    if (max_columns > 0 && DisplayWidth(next) > max_columns) break;
    line = std::move(next);
  }
  if (line.empty()) {
    // Not even the job id fits: cut it (ASCII) to the width.
    line = parts.front().substr(0, max_columns);
  }
  return line;
}

WatchDisplay::WatchDisplay(Mode mode, std::ostream& out, std::ostream& err, std::vector<Job> jobs, int columns)
    : mode_(mode), out_(out), err_(err), columns_(columns > 0 ? static_cast<size_t>(columns) : 80) {
  for (const Job& job : jobs) {
    PerJob j;
    j.status.job_id = job.id;
    j.status.total_steps = job.total_steps;
    jobs_.push_back(std::move(j));
  }
}

WatchStatus WatchDisplay::status(size_t i) const {
  absl::MutexLock lock(&mu_);
  return jobs_.at(i).status;
}

WatchDisplay::PerJob* WatchDisplay::Find(const std::string& job_id) {
  if (jobs_.size() == 1 && (job_id.empty() || job_id == jobs_[0].status.job_id)) return &jobs_[0];
  for (PerJob& j : jobs_) {
    if (j.status.job_id == job_id) return &j;
  }
  return nullptr;
}

bool WatchDisplay::Notable(const v1::Event& event) {
  switch (event.payload_case()) {
    case v1::Event::kJobState:
    case v1::Event::kStall:
    case v1::Event::kCheckpoint:
    case v1::Event::kArtifact:
    case v1::Event::kValidation:  // one every validation.freq steps: its own line
      return true;
    case v1::Event::kRankState:
      return event.rank_state().state() == v1::RankState::FAILED;
    case v1::Event::kLog:
      return event.log().level() == "warn" || event.log().level() == "error";
    case v1::Event::kCompile:
      switch (event.compile().kind()) {
        case v1::CompileEvent::RECOMPILE:
        case v1::CompileEvent::RECOMPILE_LIMIT:
        case v1::CompileEvent::FALLBACK:
        case v1::CompileEvent::UNSAFE_SIDE_EFFECT:
          return true;
        default:
          return false;
      }
    default:
      return false;
  }
}

void WatchDisplay::OnEvent(const v1::Event& event) {
  absl::MutexLock lock(&mu_);
  PerJob* j = Find(event.job_id());
  if (j == nullptr) return;  // not one of ours: the controller answered for another job
  WatchStatus& st = j->status;
  if (event.has_job_state()) {
    st.state = event.job_state().state();
    if (event.attempt() > 0) st.attempt = event.attempt();
  }
  if (event.has_compile() && event.compile().kind() == v1::CompileEvent::RECOMPILE) ++st.recompiles;
  if (event.has_step_metrics()) {
    const v1::StepMetrics& m = event.step_metrics();
    // A new attempt resumes from a checkpoint at an earlier step: follow it.
    const bool newer = event.attempt() != j->loss_attempt || m.step() > j->loss_step;
    if (newer) {
      st.losses.push_back(m.loss());
      if (st.losses.size() > kSparkWidth) st.losses.erase(st.losses.begin());
      j->loss_step = m.step();
      j->loss_attempt = event.attempt();
      st.step = m.step();
      st.loss = m.loss();
      st.tokens_per_s = m.tokens_per_s();
      st.mfu = m.mfu();
      st.epoch = m.epoch();
      st.have_step = true;
      if (event.attempt() > 0) st.attempt = event.attempt();
      if (st.state == v1::Job::STATE_UNSPECIFIED || st.state == v1::Job::SCHEDULED) st.state = v1::Job::RUNNING;
      j->rate.Add(m.step(), ToTime(event.time()));
      if (st.total_steps > 0) st.eta = j->rate.Eta(st.total_steps);
    }
  }
  if (event.has_validation()) {
    const v1::Validation& v = event.validation();
    // The newest attempt's newest: a restart evaluates again from its resumed step.
    if (!st.have_validation || event.attempt() > j->val_attempt ||
        (event.attempt() == j->val_attempt && v.step() >= st.val_step)) {
      st.have_validation = true;
      st.val_loss = v.loss();
      st.val_step = v.step();
      j->val_attempt = event.attempt();
    }
  }
  const std::string prefix = jobs_.size() > 1 ? absl::StrCat("[", st.job_id, "] ") : "";
  switch (mode_) {
    case Mode::kJson:
      out_ << ToJsonLine(event) << std::endl;
      return;
    case Mode::kPlain:
      out_ << prefix << FormatEventText(event) << std::endl;
      return;
    case Mode::kTerminal:
      if (Notable(event)) {
        PrintAbove(prefix + FormatEventText(event));
      } else {
        Redraw();
      }
      return;
  }
}

void WatchDisplay::Warn(const std::string& line) {
  // The line quotes a gRPC error, which may quote the controller or the network.
  const std::string safe = TerminalSafe(line);
  absl::MutexLock lock(&mu_);
  if (mode_ == Mode::kTerminal) {
    PrintAbove(safe);
  } else {
    err_ << safe << std::endl;
  }
}

void WatchDisplay::SetNote(const std::string& job_id, const std::string& note) {
  absl::MutexLock lock(&mu_);
  PerJob* j = Find(job_id);
  if (j == nullptr) return;
  j->status.note = TerminalSafe(note);
  if (mode_ == Mode::kTerminal) Redraw();
}

void WatchDisplay::CursorToFirstLine() {
  if (lines_drawn_ > 1) out_ << "\x1b[" << lines_drawn_ - 1 << 'A';  // ECMA-48 CUU
}

void WatchDisplay::PrintAbove(const std::string& line) {
  // The line takes the first status line's row; the status lines are drawn again below.
  CursorToFirstLine();
  out_ << kClearLine << line << '\n';
  lines_drawn_ = 0;
  Redraw();
}

void WatchDisplay::Redraw() {
  CursorToFirstLine();
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (i > 0) out_ << '\n';
    // One column spare: some terminals wrap when the last column is written.
    out_ << kClearLine << FormatStatusLine(jobs_[i].status, columns_ - 1);
  }
  out_ << std::flush;
  lines_drawn_ = jobs_.size();
}

void WatchDisplay::Finish() {
  absl::MutexLock lock(&mu_);
  if (mode_ != Mode::kTerminal || lines_drawn_ == 0) return;
  Redraw();
  out_ << '\n' << std::flush;
  lines_drawn_ = 0;
}

}  // namespace trainyard::cli
