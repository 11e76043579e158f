#include "server/policy/event_fencing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/spec/checkpoint_path.h"
#include "common/spec/spec_error.h"

namespace trainyard {

std::string CheckpointDirOf(const v1::JobSpec& spec, std::string_view job_id) {
  return spec::JobCheckpointRoot(spec.checkpoint().dir(), job_id);
}

std::string CheckpointJobProblem(const v1::Job& job, const v1::CheckpointSaved& ck, int64_t floor) {
  const int64_t steps = job.spec().training().steps();
  if (ck.step() < 1 || ck.step() > steps) {
    return absl::StrCat("checkpoint.step must be in [1, ", steps, "] (training.steps), got ", ck.step());
  }
  if (ck.step() <= floor) {
    return absl::StrCat("checkpoint.step ", ck.step(), " is not past the last recorded checkpoint (step ", floor,
                        ")");
  }
  const std::string dir = CheckpointDirOf(job.spec(), job.id());
  if (dir.empty()) return "checkpoint: the job sets no checkpoint.dir, so it has no checkpoints";
  // Exactly the directory the job's rank 0 writes for this step in this attempt
  // (common/spec/checkpoint_path.h, as the engine names it), so a report can name no
  // other step's (or attempt's) files.
  const std::string want = spec::CheckpointPath(job.spec().checkpoint().dir(), job.id(), ck.step(), job.attempt());
  if (ck.path() != want) {
    const std::string prefix = absl::StrCat(dir, "/");
    if (!absl::StartsWith(ck.path(), prefix) || ck.path().size() == prefix.size()) {
      return absl::StrCat("checkpoint.path must be under ", Quote(prefix), ", got ", Quote(ck.path()));
    }
    return absl::StrCat("checkpoint.path must be ", want, " for step ", ck.step(), " of attempt ", job.attempt(),
                        ", got ", Quote(ck.path()));
  }
  return "";
}

EventRefusal ScreenEvent(const v1::Job& job, const std::string& worker, const v1::Event& event,
                         int64_t checkpoint_floor) {
  if (event.has_artifact()) {
    // Only the controller announces an artifact, once it stored and checked the bytes
    // (server/artifact_store); a worker's claim would point watchers at nothing.
    return {kDropForged, "an ArtifactRef, which only the controller writes (after an upload)"};
  }
  if (event.attempt() < job.attempt()) {
    return {kDropStaleAttempt, absl::StrCat("attempt ", event.attempt(), " ended; the job runs attempt ",
                                            job.attempt())};
  }
  if (event.attempt() > job.attempt()) {
    return {kDropForged, absl::StrCat("attempt ", event.attempt(), " was never started; the job's latest is ",
                                      job.attempt())};
  }
  const auto& ranks = job.placement().ranks();
  const int r = event.rank();
  if (r < 0 || r >= ranks.size()) {
    return {kDropForged, absl::StrCat("rank ", r, " is outside attempt ", job.attempt(), "'s ", ranks.size(),
                                      " ranks")};
  }
  if (ranks[r].worker() != worker) {
    return {kDropForged, absl::StrCat("rank ", r, " of attempt ", job.attempt(), " runs on worker ",
                                      Quote(ranks[r].worker()), ", not on ", Quote(worker))};
  }
  if (event.has_checkpoint()) {
    const v1::CheckpointRef& last = job.last_checkpoint();
    const v1::CheckpointSaved& ck = event.checkpoint();
    if (ck.step() == last.step() && ck.path() == last.path() && event.attempt() == last.attempt()) {
      return {};  // a resend of the recorded one: the store drops the repeat
    }
    if (r != 0) return {kDropBadCheckpoint, absl::StrCat("a checkpoint from rank ", r, "; only rank 0 reports them")};
    if (std::string p = CheckpointJobProblem(job, event.checkpoint(), checkpoint_floor); !p.empty()) {
      return {kDropBadCheckpoint, p};
    }
  }
  return {};
}

std::vector<EventRefusal> ScreenEvents(const v1::Job& job, const std::string& worker,
                                       std::vector<v1::Event>* events) {
  std::vector<EventRefusal> refused;
  int64_t floor = job.last_checkpoint().step();
  std::vector<v1::Event> kept;
  kept.reserve(events->size());
  for (auto& e : *events) {
    EventRefusal r = ScreenEvent(job, worker, e, floor);
    if (!r.label.empty()) {
      refused.push_back(std::move(r));
      continue;
    }
    if (e.has_checkpoint()) floor = std::max(floor, e.checkpoint().step());
    kept.push_back(std::move(e));
  }
  *events = std::move(kept);
  return refused;
}

}  // namespace trainyard
