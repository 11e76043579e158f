// How `trainyard watch` shows a job's events: on a terminal one live status line
// redrawn in place with notable events printed above it; plain lines when piped; JSON
// Lines with --output json.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// The newest `width` of `values` as block characters ▁▂▃▄▅▆▇█ scaled between their min
// (▁) and max (█); all equal: ▄ each. A non-finite value is a space. "" for none.
std::string Sparkline(const std::vector<double>& values, size_t width);

// Columns a UTF-8 string takes on a terminal (one per code point: what this CLI writes).
size_t DisplayWidth(const std::string& s);

// Steps per second over the newest reports, for an ETA.
class StepRate {
 public:
  // A report of `step` at `time`; an earlier step (a restart resumed from a checkpoint)
  // starts over.
  void Add(int64_t step, absl::Time time);
  // Time left to reach `total` from the newest step at the measured rate; nullopt with
  // fewer than two reports or no progress between them.
  std::optional<absl::Duration> Eta(int64_t total) const;

  static constexpr size_t kWindow = 20;

 private:
  std::deque<std::pair<int64_t, absl::Time>> samples_;
};

// One status line's content.
struct WatchStatus {
  std::string job_id;
  v1::Job::State state = v1::Job::STATE_UNSPECIFIED;
  int attempt = 0;
  int64_t step = 0;
  int64_t total_steps = 0;  // 0: unknown
  std::vector<double> losses;
  double loss = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  std::optional<absl::Duration> eta;
  int recompiles = 0;
  bool have_step = false;
  int64_t epoch = 0;              // of the last step; 0: synthetic data (no epochs)
  bool have_validation = false;   // val_loss and val_step hold the newest Validation
  double val_loss = 0;
  int64_t val_step = 0;
  std::string note;  // e.g. "reconnecting: try 2, next in 500ms", shown after the state
};

// e.g. "job-3 RUNNING  step 12/20 epoch 2  ▇▆▅▄▃▂  loss 5.4123  val 5.6012@10  1520 tok/s  MFU 31.2%  ETA 12s
// recompiles 0" (epoch with a dataset that has them, val once a Validation arrived);
// parts are dropped from the end until it fits `max_columns` (0: no limit), so that the
// line never wraps (a wrapped line cannot be redrawn with a carriage return).
std::string FormatStatusLine(const WatchStatus& status, size_t max_columns);

// Thread-safe: `watch` with several jobs follows each on its own thread.
class WatchDisplay {
 public:
  enum class Mode { kTerminal, kPlain, kJson };
  struct Job {
    std::string id;
    int64_t total_steps = 0;  // 0: unknown
  };
  // `out` gets events and the status lines (one per job, in this order); `err` gets
  // warnings outside terminal mode. `columns`: the terminal's width (0: unknown, 80
  // assumed). With more than one job, plain lines start with "[JOB] ".
  WatchDisplay(Mode mode, std::ostream& out, std::ostream& err, std::vector<Job> jobs, int columns);
  WatchDisplay(Mode mode, std::ostream& out, std::ostream& err, const std::string& job_id,
               int64_t total_steps, int columns)
      : WatchDisplay(mode, out, err, std::vector<Job>{{job_id, total_steps}}, columns) {}

  // An event of one of the jobs (by event.job_id(); the only job's when it is empty).
  void OnEvent(const v1::Event& event);
  // A line about the watch itself (a lost connection): above the status lines on a
  // terminal, else on `err`.
  void Warn(const std::string& line);
  // Sets a job's status-line note ("" clears it); redraws on a terminal.
  void SetNote(const std::string& job_id, const std::string& note);
  // Ends the status lines (terminal mode); idempotent.
  void Finish();

  WatchStatus status(size_t i = 0) const;

  static constexpr size_t kSparkWidth = 16;

 private:
  struct PerJob {
    WatchStatus status;
    StepRate rate;
    int64_t loss_step = 0;
    int loss_attempt = 0;
    int val_attempt = 0;
  };
  // On a terminal, whether the event gets its own line above the status lines.
  static bool Notable(const v1::Event& event);
  PerJob* Find(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Redraw() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PrintAbove(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the cursor from the last status line to the first one's row.
  void CursorToFirstLine() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Mode mode_;
  std::ostream& out_;
  std::ostream& err_;
  const size_t columns_;
  mutable absl::Mutex mu_;
  std::vector<PerJob> jobs_ ABSL_GUARDED_BY(mu_);
  // Status lines on screen (0 or jobs_.size()); the cursor is on the last, unterminated.
  size_t lines_drawn_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard::cli
