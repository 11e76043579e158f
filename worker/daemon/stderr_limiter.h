#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace trainyard {

// Decides which of a rank's stderr lines become events: at most `lines_per_second`
// per one-second window (a window starts at the first line after the previous one
// ended), with a "N lines dropped" notice at the start of the next window or at the
// end of the stream. Keeps the last `tail_lines` lines, relayed or not, for the
// message of a failed rank. It keeps no time of its own: callers pass `now`.
//
// Thread contract: not thread-safe; the supervisor calls it under the rank's mutex.
class StderrLimiter {
 public:
  StderrLimiter(int lines_per_second, int tail_lines);

  // The messages to relay, in order, for one more stderr line seen at `now`: a
  // drop notice for the previous window (if it dropped any) and then the line
  // itself, unless this window is already full.
  std::vector<std::string> Offer(std::string line, absl::Time now);

  // The drop notice for the current window, if it dropped any; resets the count.
  std::optional<std::string> Flush();

  // The last tail_lines lines, joined with '\n'.
  std::string Tail() const;

 private:
  const int lines_per_second_;
  const int tail_lines_;
  std::deque<std::string> tail_;
  absl::Time window_start_ = absl::InfinitePast();
  int window_lines_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace trainyard
