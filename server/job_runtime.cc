#include "server/job_runtime.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "server/event_screen.h"
#include "server/restart_policy.h"

namespace trainyard {

v1::ControllerMessage AssignFor(const JobRuntime& rt, const std::vector<int>& ranks) {
  const v1::Job& job = rt.job;
  v1::ControllerMessage msg;
  auto* assign = msg.mutable_assign();
  assign->set_job_id(job.id());
  assign->set_attempt(job.attempt());
  *assign->mutable_spec() = rt.layout ? rt.layout->spec : job.spec();
  assign->set_world_size(job.world_size());
  for (int r : ranks) assign->add_ranks(r);
  assign->set_master_addr(job.placement().master_addr());
  assign->set_master_port(job.placement().master_port());
  if (job.spec().checkpoint().interval() > 0) assign->set_checkpoint_dir(CheckpointDirOf(job.spec(), job.id()));
  if (job.last_checkpoint().step() > 0) {
    assign->set_resume_path(job.last_checkpoint().path());
    assign->set_resume_step(job.last_checkpoint().step());
  }
  return msg;
}

std::string PlacementNote(const JobRuntime& rt, const GangDecision& decision, absl::Time now) {
  std::vector<std::string> notes;
  if (rt.layout) {
    const std::optional<absl::Time> from = ElasticFrom(rt);
    const absl::Duration waited = from ? now - *from + absl::Seconds(rt.job.spec().restart().elastic_wait_s())
                                       : absl::ZeroDuration();
    notes.push_back(absl::StrCat("elastic: dp=", rt.layout->dp, " of ", rt.job.spec().parallelism().dp(),
                                 ", grad_accum_steps=", rt.layout->grad_accum_steps,
                                 rt.layout->ep != rt.job.spec().parallelism().ep()
                                     ? absl::StrCat(", ep=", rt.layout->ep) : std::string(),
                                 ", after ", absl::ToInt64Seconds(waited), " s without slots for dp=",
                                 rt.job.spec().parallelism().dp()));
  }
  auto failures = [&](const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const auto& n : names) out.push_back(absl::StrCat(n, " (", rt.failures_on.at(n), " failures)"));
    return absl::StrJoin(out, ", ");
  };
  if (!decision.kept_off.empty()) {
    notes.push_back(absl::StrCat("avoiding ", failures(decision.kept_off), ", where this job failed before"));
  }
  if (!decision.placed_on_avoided.empty()) {
    notes.push_back(absl::StrCat("on ", failures(decision.placed_on_avoided),
                                 " although this job failed there: no placement without it"));
  }
  return notes.empty() ? "" : absl::StrCat(" (", absl::StrJoin(notes, "; "), ")");
}

std::string WorkerOf(const JobRuntime& rt, int rank) {
  const auto& ranks = rt.job.placement().ranks();
  return rank >= 0 && rank < ranks.size() ? ranks[rank].worker() : std::string();
}

std::string RestartPendingReason(const JobRuntime& rt, absl::Time now) {
  if (now < rt.not_before) {
    return RestartPolicy::BackoffReason(rt.not_before, rt.job.attempt(), rt.job.spec().restart().max_restarts());
  }
  return "restarting: waiting for slots";
}

std::optional<absl::Time> ElasticFrom(const JobRuntime& rt) {
  const v1::RestartSpec& r = rt.job.spec().restart();
  if (r.min_dp() < 1 || r.min_dp() >= rt.job.spec().parallelism().dp() || rt.job.attempt() < 1 ||
      rt.job.state() != v1::Job::PENDING) {
    return std::nullopt;
  }
  // The wait counts once the job may be placed: from PENDING or the backoff's end.
  return std::max(rt.queued_at, rt.not_before) + absl::Seconds(r.elastic_wait_s());
}

std::vector<std::string> AvoidedWorkers(const JobRuntime& rt) {
  std::vector<std::string> out;
  for (const auto& [name, n] : rt.failures_on) {
    if (n >= RestartPolicy::kAvoidAfterFailures) out.push_back(name);
  }
  return out;
}

bool RecordCheckpoint(JobRuntime& rt, const v1::Event& event) {
  const v1::CheckpointSaved& ck = event.checkpoint();
  // Screening admitted only newer ones; a resend of the recorded one was not committed.
  if (event.rank() != 0 || ck.step() <= rt.job.last_checkpoint().step()) return false;
  v1::CheckpointRef* ref = rt.job.mutable_last_checkpoint();
  ref->set_step(ck.step());
  ref->set_path(ck.path());
  ref->set_attempt(event.attempt());
  ref->set_bytes(ck.bytes());
  return true;
}

void RestoreBackoff(JobRuntime& rt, const std::vector<v1::Event>& events) {
  for (const auto& e : events) {
    if (e.has_job_state() && e.job_state().state() == v1::Job::RESTARTING && e.attempt() == rt.job.attempt()) {
      rt.not_before = FromProtoTime(e.time()) + RestartPolicy::Backoff(rt.job.spec().restart(), rt.job.attempt());
      if (rt.job.state() == v1::Job::PENDING) rt.queued_at = FromProtoTime(e.time());
    }
  }
}

std::string StallCause(const v1::Event& event) {
  const v1::Stall& s = event.stall();
  std::string cause = absl::StrFormat("rank %d stalled in %s #%d for %.0f s waiting for rank %d", event.rank(),
                                      s.collective(), s.collective_seq(), s.waited_s(), s.lagging_rank());
  if (!s.message().empty()) absl::StrAppend(&cause, ": ", s.message());
  return cause;
}

}  // namespace trainyard
