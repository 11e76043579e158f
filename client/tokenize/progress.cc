#include "client/tokenize/progress.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace trainyard::tokenize {

std::string FormatBytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b < 1e3) return absl::StrFormat("%d B", bytes);
  if (b < 1e6) return absl::StrFormat("%.1f kB", b / 1e3);
  if (b < 1e9) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.2f GB", b / 1e9);
}

std::string FormatClock(absl::Duration d) {
  const std::int64_t s = std::max<std::int64_t>(0, absl::ToInt64Seconds(d));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

void ProgressDisplay::Start(std::string label, std::int64_t total_bytes) {
  label_ = std::move(label);
  total_ = total_bytes;
  start_ = clock_->Now();
  last_draw_ = absl::InfinitePast();
}

void ProgressDisplay::Update(std::int64_t done_bytes) {
  if (!enabled_) return;
  const absl::Time now = clock_->Now();
  if (now - last_draw_ < absl::Milliseconds(200)) return;
  last_draw_ = now;
  const double seconds = absl::ToDoubleSeconds(now - start_);
  const double rate = seconds > 0 ? static_cast<double>(done_bytes) / seconds : 0;  // bytes/s
  const double fraction = total_ > 0 ? std::min(1.0, static_cast<double>(done_bytes) / total_) : 1.0;
  constexpr int kBarWidth = 24;
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar(filled, '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  std::string eta = "--:--";
  if (rate > 0 && done_bytes <= total_) {
    eta = FormatClock(absl::Seconds(static_cast<double>(total_ - done_bytes) / rate));
  }
  std::fprintf(out_, "\r\033[K%s [%s] %s / %s  %.1f MB/s  ETA %s", label_.c_str(), bar.c_str(),
               FormatBytes(done_bytes).c_str(), FormatBytes(total_).c_str(), rate / 1e6, eta.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressDisplay::Clear() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace trainyard::tokenize
