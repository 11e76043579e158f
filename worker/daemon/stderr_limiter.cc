#include "worker/daemon/stderr_limiter.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

StderrLimiter::StderrLimiter(int lines_per_second, int tail_lines)
    : lines_per_second_(lines_per_second), tail_lines_(tail_lines) {}

std::vector<std::string> StderrLimiter::Offer(std::string line, absl::Time now) {
  std::vector<std::string> out;
  tail_.push_back(line);
  while (static_cast<int>(tail_.size()) > tail_lines_) tail_.pop_front();
  if (now - window_start_ >= absl::Seconds(1)) {
    if (std::optional<std::string> notice = Flush()) out.push_back(std::move(*notice));
    window_start_ = now;
    window_lines_ = 0;
  }
  if (++window_lines_ <= lines_per_second_) {
    out.push_back(std::move(line));
  } else {
    ++dropped_;
  }
  return out;
}

std::optional<std::string> StderrLimiter::Flush() {
  if (dropped_ == 0) return std::nullopt;
  std::string notice = absl::StrCat(dropped_, " lines dropped");
  dropped_ = 0;
  return notice;
}

std::string StderrLimiter::Tail() const { return absl::StrJoin(tail_, "\n"); }

}  // namespace trainyard
