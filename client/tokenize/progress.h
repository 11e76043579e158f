// The live progress line of trainyard-tokenize: bytes done of the total, MB/s and the
// time left, redrawn in place ("\r", erase line) at most five times a second. Only for
// a terminal: a disabled display prints nothing, so logs and pipes get the summary
// line alone.
//
// Thread contract: not thread-safe; used by the thread that drives the run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "common/base/clock.h"

namespace trainyard::tokenize {

class ProgressDisplay {
 public:
  ProgressDisplay(std::FILE* out, bool enabled, Clock* clock) : out_(out), enabled_(enabled), clock_(clock) {}
  ~ProgressDisplay() { Clear(); }

  // A new phase ("sample", "encode") over `total_bytes`; its clock starts now.
  void Start(std::string label, std::int64_t total_bytes);
  // `done_bytes` of the phase's total are done; redraws when the last draw is old.
  void Update(std::int64_t done_bytes);
  // Erases the line, so what is printed next starts on a clean line.
  void Clear();

 private:
  std::FILE* out_;
  bool enabled_;
  Clock* clock_;
  std::string label_;
  std::int64_t total_ = 0;
  absl::Time start_, last_draw_;
  bool drawn_ = false;
};

// "12.3 MB" (decimal units, as MB/s are).
std::string FormatBytes(std::int64_t bytes);
// "0:42", "1:02:03".
std::string FormatClock(absl::Duration d);

}  // namespace trainyard::tokenize
