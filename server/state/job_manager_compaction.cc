// JobManager's side of event compaction (server/state/event_compaction.h): which
// finished jobs are due, and marking one compacted in its row and in memory before
// its events go.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/proto_time.h"
#include "server/state/job_manager.h"

namespace trainyard {

std::vector<std::string> JobManager::CompactionCandidates(absl::Time cutoff) {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<absl::Time, std::string>> due;
  for (const auto& [id, view] : views_) {
    const v1::Job& job = view.job;
    if (job.has_compacted() || !jobs_.Closed(id)) continue;
    // A row without an end time (none should lack one) counts from its creation.
    const absl::Time ended = FromProtoTime(job.has_end_time() ? job.end_time() : job.create_time());
    if (ended < cutoff) due.emplace_back(ended, id);
  }
  std::sort(due.begin(), due.end());
  std::vector<std::string> out;
  for (auto& [ended, id] : due) out.push_back(std::move(id));
  return out;
}

absl::StatusOr<v1::Job> JobManager::MarkCompacted(const std::string& id, v1::Compaction compaction) {
  // A writer: no other write of this job's row can interleave with this one.
  absl::MutexLock commit(&commit_mu_);
  v1::Job row;
  {
    absl::MutexLock lock(&mu_);
    auto it = views_.find(id);
    if (it == views_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
    if (it->second.job.has_compacted()) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " is already compacted"));
    }
    if (!jobs_.Closed(id)) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " has not ended and settled"));
    }
    row = it->second.job;
    // Seqs are gapless from 1: the job's last seq is the number of its events.
    compaction.set_last_seq(it->second.last_seq);
    compaction.set_events_removed(it->second.last_seq);
  }
  *row.mutable_compacted() = compaction;
  TY_RETURN_IF_ERROR(store_->PutJob(row));  // from here the events read as compacted
  absl::MutexLock lock(&mu_);
  auto it = views_.find(id);
  if (it != views_.end()) *it->second.job.mutable_compacted() = compaction;
  jobs_.MarkCompacted(id, compaction);
  return row;
}

}  // namespace trainyard
