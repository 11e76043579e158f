#include "server/state/event_compaction.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/proto_time.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::StatusOr<RetentionSetting> ParseRetainFinished(const std::string& text) {
  RetentionSetting out;
  if (text == "forever" || text == "0") {
    out.keep = absl::InfiniteDuration();
    out.text = "forever";
    return out;
  }
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--retain-finished '", text, "': ", why,
                                                   " (a duration such as 30d, 12h, 90m or 3600s, or forever)"));
  };
  if (text.size() < 2) return bad("no unit");
  const char unit = text.back();
  double n = 0;
  if (!absl::SimpleAtod(text.substr(0, text.size() - 1), &n) || !std::isfinite(n)) return bad("not a number");
  if (n < 0) return bad("negative");
  if (n == 0) return bad("zero with a unit; 0 alone means forever");
  absl::Duration per;
  switch (unit) {
    case 's':
      per = absl::Seconds(1);
      break;
    case 'm':
      per = absl::Minutes(1);
      break;
    case 'h':
      per = absl::Hours(1);
      break;
    case 'd':
      per = absl::Hours(24);
      break;
    default:
      return bad(absl::StrCat("unknown unit '", std::string(1, unit), "'"));
  }
  if (n * absl::ToDoubleSeconds(per) > 100.0 * 365 * 86400) return bad("over 100 years; use forever");
  out.keep = n * per;
  out.text = text;
  return out;
}

RetentionCompactor::RetentionCompactor(JobManager* manager, SqliteJobStore* store, ControllerMetrics* metrics,
                                       Clock* clock, RetentionOptions options)
    : manager_(manager), store_(store), metrics_(metrics), clock_(clock), options_(std::move(options)) {}

RetentionCompactor::~RetentionCompactor() { Stop(); }

absl::StatusOr<int64_t> RetentionCompactor::DeleteAll(const std::string& id) {
  int64_t removed = 0;
  while (true) {
    TY_ASSIGN_OR_RETURN(const int64_t n, store_->DeleteCompactedEvents(id, options_.delete_chunk));
    removed += n;
    if (n == 0) return removed;
  }
}

absl::StatusOr<RetentionCompactor::Pass> RetentionCompactor::RunOnce() {
  Pass pass;
  // Leftovers first: jobs whose marker committed but whose deletes were cut off.
  TY_ASSIGN_OR_RETURN(const std::vector<std::string> leftover, store_->CompactedWithEvents());
  for (const std::string& id : leftover) {
    TY_ASSIGN_OR_RETURN(const int64_t n, DeleteAll(id));
    pass.events += n;
  }
  if (options_.retain.keep != absl::InfiniteDuration()) {
    const absl::Time now = clock_->Now();
    for (const std::string& id : manager_->CompactionCandidates(now - options_.retain.keep)) {
      if (Stopping()) break;  // the next start's pass takes it up
      v1::Compaction compaction;
      *compaction.mutable_time() = ToProtoTime(clock_->Now());
      compaction.set_retain_finished(options_.retain.text);
      auto marked = manager_->MarkCompacted(id, compaction);
      if (!marked.ok()) {  // e.g. a store error: the job stays as it was; next pass
        spdlog::warn("retention: job={} not compacted: {}", id, std::string(marked.status().message()));
        continue;
      }
      TY_ASSIGN_OR_RETURN(const int64_t n, DeleteAll(id));
      ++pass.jobs;
      pass.events += n;
      spdlog::info("retention: job={} compacted, {} events removed (--retain-finished {})", id, n,
                   options_.retain.text);
    }
  }
  // Audit rows: those naming a job stay as long as its row does (compaction keeps it);
  // the others (cordon, drain, policy reloads, refusals of no job) for audit_keep.
  TY_ASSIGN_OR_RETURN(pass.audit_rows, store_->PruneAudit(absl::ToUnixMillis(clock_->Now() - options_.audit_keep)));
  if (pass.audit_rows > 0) spdlog::info("retention: {} audit rows naming no job removed", pass.audit_rows);
  while (true) {
    TY_ASSIGN_OR_RETURN(const int64_t pages, store_->IncrementalVacuum(options_.vacuum_chunk));
    pass.pages += pages;
    if (pages == 0) break;
  }
  TY_ASSIGN_OR_RETURN(const SqliteJobStore::Stats stats, store_->GetStats());
  metrics_->store().SetFile(stats.size_bytes, stats.free_pages);
  metrics_->store().PassDone(absl::ToDoubleSeconds(clock_->Now() - absl::UnixEpoch()), pass.jobs, pass.events,
                             pass.pages);
  return pass;
}

void RetentionCompactor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void RetentionCompactor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool RetentionCompactor::Stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void RetentionCompactor::Loop() {
  while (true) {
    auto pass = RunOnce();
    if (!pass.ok()) spdlog::error("retention pass: {}", std::string(pass.status().message()));
    absl::MutexLock lock(&mu_);
    const absl::Time until = clock_->Now() + options_.interval;
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&stop_), until);
    if (stop_) return;
  }
}

}  // namespace trainyard
