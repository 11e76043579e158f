#include "client/watch_display.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli_format.h"
#include "client/job_view.h"
#include "common/proto_json.h"

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
  std::string head = absl::StrCat(s.job_id, " ", s.state == v1::Job::STATE_UNSPECIFIED ? "..." : StateName(s.state));
  if (s.attempt > 1) absl::StrAppend(&head, " (attempt ", s.attempt, ")");
  parts.push_back(head);
  if (!s.note.empty()) parts.push_back(absl::StrCat("[", s.note, "]"));
  if (s.have_step) {
    parts.push_back(s.total_steps > 0 ? absl::StrCat("step ", s.step, "/", s.total_steps)
                                      : absl::StrCat("step ", s.step));
    std::string loss = absl::StrFormat("loss %.4f", s.loss);
    if (s.losses.size() > 1) loss = absl::StrCat(Sparkline(s.losses, WatchDisplay::kSparkWidth), " ", loss);
    parts.push_back(loss);
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

WatchDisplay::WatchDisplay(Mode mode, std::ostream& out, std::ostream& err, const std::string& job_id,
                           int64_t total_steps, int columns)
    : mode_(mode), out_(out), err_(err), columns_(columns > 0 ? static_cast<size_t>(columns) : 80) {
  status_.job_id = job_id;
  status_.total_steps = total_steps;
}

bool WatchDisplay::Notable(const v1::Event& event) {
  switch (event.payload_case()) {
    case v1::Event::kJobState:
    case v1::Event::kStall:
    case v1::Event::kCheckpoint:
    case v1::Event::kArtifact:
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
  if (event.has_job_state()) {
    status_.state = event.job_state().state();
    if (event.attempt() > 0) status_.attempt = event.attempt();
  }
  if (event.has_compile() && event.compile().kind() == v1::CompileEvent::RECOMPILE) ++status_.recompiles;
  if (event.has_step_metrics()) {
    const v1::StepMetrics& m = event.step_metrics();
    // A new attempt resumes from a checkpoint at an earlier step: follow it.
    const bool newer = event.attempt() != loss_attempt_ || m.step() > loss_step_;
    if (newer) {
      status_.losses.push_back(m.loss());
      if (status_.losses.size() > kSparkWidth) status_.losses.erase(status_.losses.begin());
      loss_step_ = m.step();
      loss_attempt_ = event.attempt();
      status_.step = m.step();
      status_.loss = m.loss();
      status_.tokens_per_s = m.tokens_per_s();
      status_.mfu = m.mfu();
      status_.have_step = true;
      if (event.attempt() > 0) status_.attempt = event.attempt();
      if (status_.state == v1::Job::STATE_UNSPECIFIED || status_.state == v1::Job::SCHEDULED) {
        status_.state = v1::Job::RUNNING;
      }
      rate_.Add(m.step(), ToTime(event.time()));
      if (status_.total_steps > 0) status_.eta = rate_.Eta(status_.total_steps);
    }
  }
  switch (mode_) {
    case Mode::kJson:
      out_ << ToJsonLine(event) << std::endl;
      return;
    case Mode::kPlain:
      out_ << FormatEventText(event) << std::endl;
      return;
    case Mode::kTerminal:
      if (Notable(event)) {
        PrintAbove(FormatEventText(event));
      } else {
        Redraw();
      }
      return;
  }
}

void WatchDisplay::Warn(const std::string& line) {
  if (mode_ == Mode::kTerminal) {
    PrintAbove(line);
  } else {
    err_ << line << std::endl;
  }
}

void WatchDisplay::SetNote(const std::string& note) {
  status_.note = note;
  if (mode_ == Mode::kTerminal) Redraw();
}

void WatchDisplay::PrintAbove(const std::string& line) {
  out_ << kClearLine << line << '\n';
  line_open_ = false;
  Redraw();
}

void WatchDisplay::Redraw() {
  // One column spare: some terminals wrap when the last column is written.
  out_ << kClearLine << FormatStatusLine(status_, columns_ - 1) << std::flush;
  line_open_ = true;
}

void WatchDisplay::Finish() {
  if (mode_ != Mode::kTerminal) return;
  if (line_open_) {
    Redraw();
    out_ << '\n' << std::flush;
    line_open_ = false;
  }
}

}  // namespace trainyard::cli
