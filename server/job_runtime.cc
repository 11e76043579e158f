#include "server/job_runtime.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "server/event_screen.h"
#include "server/resize_policy.h"
#include "server/restart_policy.h"
#include "spdlog/spdlog.h"

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

void NoteStep(JobRuntime& rt, const v1::StepMetrics& step) {
  rt.last_step = std::max(rt.last_step, step.step());
  if (std::isfinite(step.step_ms()) && step.step_ms() > 0) rt.step_seconds = step.step_ms() / 1000.0;
}

std::optional<absl::Duration> RemainingTime(const JobRuntime& rt, absl::Time now) {
  const v1::Job::State state = rt.job.state();
  if (state == v1::Job::RESTARTING || state == v1::Job::SUCCEEDED || state == v1::Job::FAILED ||
      state == v1::Job::CANCELLED) {
    return absl::ZeroDuration();  // its ranks are being stopped
  }
  std::optional<absl::Duration> out;
  if (rt.step_seconds > 0) {
    const int64_t left = std::max<int64_t>(0, rt.job.spec().training().steps() - rt.last_step);
    out = absl::Seconds(static_cast<double>(left) * rt.step_seconds);
  }
  if (const int limit = rt.job.spec().job().time_limit_s(); limit > 0) {
    const absl::Duration by_limit = std::max(absl::ZeroDuration(), rt.attempt_started + absl::Seconds(limit) - now);
    out = out ? std::min(*out, by_limit) : by_limit;
  }
  return out;
}

const v1::JobSpec* ResizedSpec(JobRuntime& rt) {
  if (!rt.resize_dp || *rt.resize_dp == rt.job.spec().parallelism().dp()) return nullptr;
  absl::StatusOr<ElasticLayout> resized = ElasticPolicy::Resize(rt.job.spec(), *rt.resize_dp);
  if (!resized.ok()) {  // checked when requested; only a damaged stored event gets here
    spdlog::error("job={} dropped its resize to dp={}: {}", rt.job.id(), *rt.resize_dp,
                  std::string(resized.status().message()));
    rt.resize_dp.reset();
    return nullptr;
  }
  rt.layout = *std::move(resized);
  return &rt.layout->spec;
}

int RestartsUsed(const JobRuntime& rt) { return std::max(0, rt.job.attempt() - 1 - rt.resizes); }

std::string PlacementNote(const JobRuntime& rt, const GangDecision& decision, absl::Time now) {
  std::vector<std::string> notes;
  const v1::JobSpec& spec = rt.job.spec();
  if (rt.resize_dp) {
    const int ep = rt.layout ? rt.layout->ep : spec.parallelism().ep();
    notes.push_back(absl::StrCat("resized on request: dp=", *rt.resize_dp, " of ", spec.parallelism().dp(),
                                 ", grad_accum_steps=",
                                 rt.layout ? rt.layout->grad_accum_steps : spec.training().grad_accum_steps(),
                                 ep != spec.parallelism().ep() ? absl::StrCat(", ep=", ep) : std::string()));
  } else if (rt.layout) {
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
  const std::string resize = rt.resize_dp ? absl::StrCat(" at dp=", *rt.resize_dp, " (resize requested)") : "";
  if (now < rt.not_before) {
    return absl::StrCat(RestartPolicy::BackoffReason(rt.not_before, RestartsUsed(rt) + 1,
                                                     rt.job.spec().restart().max_restarts()),
                        rt.resize_dp ? absl::StrCat("; then", resize) : std::string());
  }
  return absl::StrCat("restarting", resize, ": waiting for slots");
}

std::optional<absl::Time> ElasticFrom(const JobRuntime& rt) {
  const v1::RestartSpec& r = rt.job.spec().restart();
  if (r.min_dp() < 1 || r.min_dp() >= rt.job.spec().parallelism().dp() || rt.job.attempt() < 1 ||
      rt.job.state() != v1::Job::PENDING || rt.resize_dp) {  // a resize's dp is exact
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

bool RestoreCheckpoint(JobRuntime& rt, const std::vector<v1::Event>& events) {
  bool newer = false;
  for (const auto& e : events) {
    if (e.has_checkpoint() && RecordCheckpoint(rt, e)) newer = true;
  }
  return newer;
}

void RestoreBackoff(JobRuntime& rt, const std::vector<v1::Event>& events) {
  std::set<int> ended;  // attempts whose first RESTARTING event was read
  rt.resizes = 0;
  rt.resize_dp.reset();
  for (const auto& e : events) {
    if (!e.has_job_state()) continue;
    const v1::JobStateChange& change = e.job_state();
    const std::optional<int> target = ResizePolicy::TargetOf(change.reason());
    const bool current = e.attempt() == rt.job.attempt();
    if (change.state() == v1::Job::RESTARTING && ended.insert(e.attempt()).second) {
      if (target) ++rt.resizes;  // ended by a resize, not a failure
      if (current) {
        const absl::Time at = FromProtoTime(e.time());
        // A resize restarts without backoff; a failure's restart k waits Backoff(k).
        rt.not_before = target ? at : at + RestartPolicy::Backoff(rt.job.spec().restart(), RestartsUsed(rt) + 1);
        if (rt.job.state() == v1::Job::PENDING) rt.queued_at = at;
      }
    }
    if (current && target) rt.resize_dp = target;  // the newest resize of this attempt
  }
  if (rt.job.state() != v1::Job::PENDING && rt.job.state() != v1::Job::RESTARTING) rt.resize_dp.reset();
}

std::string StallCause(const v1::Event& event) {
  const v1::Stall& s = event.stall();
  std::string cause = absl::StrFormat("rank %d stalled in %s #%d for %.0f s waiting for rank %d", event.rank(),
                                      s.collective(), s.collective_seq(), s.waited_s(), s.lagging_rank());
  if (!s.message().empty()) absl::StrAppend(&cause, ": ", s.message());
  return cause;
}

}  // namespace trainyard
