#include "server/state/tracked_job.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "common/spec/memory_estimate.h"
#include "common/spec/rules.h"
#include "common/spec_proto.h"
#include "server/policy/event_fencing.h"
#include "server/policy/resize_policy.h"
#include "server/policy/restart_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {

v1::ControllerMessage AssignFor(const TrackedJob& rt, const std::vector<int>& ranks) {
  const v1::Job& job = rt.job;
  v1::ControllerMessage msg;
  auto* assign = msg.mutable_assign();
  assign->set_job_id(job.id());
  assign->set_attempt(job.attempt());
  *assign->mutable_spec() = rt.layout ? rt.layout->spec : job.spec();
  assign->set_world_size(job.world_size());
  for (int r : ranks) {
    assign->add_ranks(r);
    if (r < 0 || r >= job.placement().ranks_size() || !job.placement().ranks(r).has_gpu()) continue;
    auto* gpu = assign->add_gpus();
    gpu->set_rank(r);
    gpu->set_index(job.placement().ranks(r).gpu());
    gpu->set_uuid(job.placement().ranks(r).gpu_uuid());
  }
  assign->set_master_addr(job.placement().master_addr());
  assign->set_master_port(job.placement().master_port());
  // With a directory the ranks can checkpoint on request (CheckpointJob, a preemption)
  // even when checkpoint.interval is 0.
  if (!job.spec().checkpoint().dir().empty()) assign->set_checkpoint_dir(CheckpointDirOf(job.spec(), job.id()));
  if (job.last_checkpoint().step() > 0) assign->set_resume_path(job.last_checkpoint().path());
  return msg;
}

int64_t RankMemoryOf(TrackedJob& rt, const v1::JobSpec& spec) {
  if (spec.resources().device() != "cuda") return 0;
  const bool own = &spec == &rt.job.spec();
  if (own && rt.rank_memory) return *rt.rank_memory;
  absl::StatusOr<spec::JobSpec> core = ResolveAndValidateCore(spec);
  const int64_t bytes = core.ok() ? static_cast<int64_t>(spec::EstimateRankMemory(*core).total_bytes()) : 0;
  if (own) rt.rank_memory = bytes;
  return bytes;
}

void NoteStep(TrackedJob& rt, const v1::StepMetrics& step) {
  rt.last_step = std::max(rt.last_step, step.step());
  if (std::isfinite(step.step_ms()) && step.step_ms() > 0) rt.step_seconds = step.step_ms() / 1000.0;
}

std::optional<absl::Duration> RemainingTime(const TrackedJob& rt, absl::Time now) {
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
  if (rt.eviction) {  // stopped at the latest when its grace ends
    const absl::Duration by_grace = std::max(absl::ZeroDuration(), rt.eviction->deadline - now);
    out = out ? std::min(*out, by_grace) : by_grace;
  }
  return out;
}

const v1::JobSpec* ResizedSpec(TrackedJob& rt) {
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

int RestartsUsed(const TrackedJob& rt) {
  return std::max(0, rt.job.attempt() - 1 - rt.resizes - rt.refusals - rt.job.preemptions());
}

namespace {
constexpr char kRefusalNote[] =
    "; placing the job again (the controller counted free slots the worker did not have: no restart used, no "
    "worker blamed)";
}  // namespace

std::string RefusalReason(const std::string& worker, int rank, int attempt, const std::string& message) {
  return absl::StrCat("worker ", worker, " refused rank ", rank, " of attempt ", attempt, " (",
                      message.empty() ? std::string("no reason given") : message, ")", kRefusalNote);
}

bool IsRefusalReason(const std::string& reason) {
  return absl::StartsWith(reason, "worker ") && absl::EndsWith(reason, kRefusalNote);
}

std::string PlacementNote(const TrackedJob& rt, const GangDecision& decision, absl::Time now) {
  std::vector<std::string> notes;
  const v1::JobSpec& spec = rt.job.spec();
  // The FSDP degree, named when the resize changed it (gcd(dp_shard, dp)).
  const int dp_shard = std::max(1, spec.parallelism().dp_shard());
  const std::string shard_note =
      rt.layout && rt.layout->dp_shard != dp_shard ? absl::StrCat(", dp_shard=", rt.layout->dp_shard) : std::string();
  if (rt.resize_dp) {
    const int ep = rt.layout ? rt.layout->ep : spec.parallelism().ep();
    notes.push_back(absl::StrCat(
        "resized on request: dp=", *rt.resize_dp, " of ", spec.parallelism().dp(),
        ", grad_accum_steps=", rt.layout ? rt.layout->grad_accum_steps : spec.training().grad_accum_steps(),
        ep != spec.parallelism().ep() ? absl::StrCat(", ep=", ep) : std::string(), shard_note));
  } else if (rt.layout) {
    const std::optional<absl::Time> from = ElasticFrom(rt);
    const absl::Duration waited =
        from ? now - *from + absl::Seconds(rt.job.spec().restart().elastic_wait_s()) : absl::ZeroDuration();
    notes.push_back(absl::StrCat(
        "elastic: dp=", rt.layout->dp, " of ", rt.job.spec().parallelism().dp(),
        ", grad_accum_steps=", rt.layout->grad_accum_steps,
        rt.layout->ep != rt.job.spec().parallelism().ep() ? absl::StrCat(", ep=", rt.layout->ep) : std::string(),
        shard_note, ", after ", absl::ToInt64Seconds(waited),
        " s without slots for dp=", rt.job.spec().parallelism().dp()));
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

std::string WorkerOf(const TrackedJob& rt, int rank) {
  const auto& ranks = rt.job.placement().ranks();
  return rank >= 0 && rank < ranks.size() ? ranks[rank].worker() : std::string();
}

std::string RestartPendingReason(const TrackedJob& rt, absl::Time now) {
  if (!rt.evicted_reason.empty()) return AfterEviction(rt, "waiting for slots");
  const std::string resize = rt.resize_dp ? absl::StrCat(" at dp=", *rt.resize_dp, " (resize requested)") : "";
  if (now < rt.not_before) {
    return absl::StrCat(
        RestartPolicy::BackoffReason(rt.not_before, RestartsUsed(rt) + 1, rt.job.spec().restart().max_restarts()),
        rt.resize_dp ? absl::StrCat("; then", resize) : std::string());
  }
  return absl::StrCat("restarting", resize, ": waiting for slots");
}

std::optional<absl::Time> ElasticFrom(const TrackedJob& rt) {
  const v1::RestartSpec& r = rt.job.spec().restart();
  if (r.min_dp() < 1 || r.min_dp() >= rt.job.spec().parallelism().dp() || rt.job.attempt() < 1 ||
      rt.job.state() != v1::Job::PENDING || rt.resize_dp) {  // a resize's dp is exact
    return std::nullopt;
  }
  // The wait counts once the job may be placed: from PENDING or the backoff's end.
  return std::max(rt.queued_at, rt.not_before) + absl::Seconds(r.elastic_wait_s());
}

std::vector<std::string> AvoidedWorkers(const TrackedJob& rt) {
  std::vector<std::string> out;
  for (const auto& [name, n] : rt.failures_on) {
    if (n >= RestartPolicy::kAvoidAfterFailures) out.push_back(name);
  }
  return out;
}

bool RecordCheckpoint(TrackedJob& rt, const v1::Event& event) {
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

bool RestoreCheckpoint(TrackedJob& rt, const std::vector<v1::Event>& events) {
  bool newer = false;
  for (const auto& e : events) {
    if (e.has_checkpoint() && RecordCheckpoint(rt, e)) newer = true;
  }
  return newer;
}

void RestoreBackoff(TrackedJob& rt, const std::vector<v1::Event>& events) {
  std::set<int> ended;  // attempts whose first RESTARTING event was read
  rt.resizes = 0;
  rt.refusals = 0;
  rt.resize_dp.reset();
  for (const auto& e : events) {
    if (!e.has_job_state()) continue;
    const v1::JobStateChange& change = e.job_state();
    const std::optional<int> target = ResizePolicy::TargetOf(change.reason());
    const std::string evicted = EvictionOf(change.reason());
    const bool refused = IsRefusalReason(change.reason());
    const bool current = e.attempt() == rt.job.attempt();
    if (change.state() == v1::Job::RESTARTING && ended.insert(e.attempt()).second) {
      if (target) ++rt.resizes;  // ended by a resize, not a failure
      if (refused) ++rt.refusals;
      if (current) {
        const absl::Time at = FromProtoTime(e.time());
        // A resize, an eviction or a refusal restarts without backoff; a failure's
        // restart k waits Backoff(k). (Evictions are counted in the row: Job.preemptions.)
        rt.not_before = target || !evicted.empty() || refused
                            ? at
                            : at + RestartPolicy::Backoff(rt.job.spec().restart(), RestartsUsed(rt) + 1);
        if (rt.job.state() == v1::Job::PENDING) rt.queued_at = at;
        rt.evicted_reason = evicted;
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

v1::Event ControllerLog(const std::string& level, const std::string& message, int attempt, absl::Time now) {
  v1::Event event;
  event.set_rank(-1);
  event.set_attempt(attempt);
  event.mutable_log()->set_level(level);
  event.mutable_log()->set_message(message);
  *event.mutable_time() = ToProtoTime(now);
  return event;
}

v1::Event JobStateEvent(v1::Job::State state, const std::string& reason, int attempt, absl::Time now) {
  v1::Event event;
  event.mutable_job_state()->set_state(state);
  event.mutable_job_state()->set_reason(reason);
  event.set_rank(-1);
  event.set_attempt(attempt);
  *event.mutable_time() = ToProtoTime(now);
  return event;
}

void RestorePastPlacements(TrackedJob& rt, const std::vector<v1::Event>& events) {
  for (const auto& e : events) {
    if (e.attempt() <= 0 || e.attempt() >= rt.job.attempt() || !e.has_rank_state() || e.rank() < 0 ||
        e.rank() >= spec::kMaxWorldSize || e.rank_state().worker().empty()) {
      continue;
    }
    std::vector<std::string>& past = rt.past_placements[e.attempt()];
    if (static_cast<int>(past.size()) <= e.rank()) past.resize(e.rank() + 1);
    past[e.rank()] = e.rank_state().worker();
  }
  while (rt.past_placements.size() > kMaxPastPlacements) rt.past_placements.erase(rt.past_placements.begin());
}

std::string EvictionOf(const std::string& reason) {
  for (const char* prefix : {"preempted by job-", "drained from "}) {
    if (absl::StartsWith(reason, prefix)) return reason;
  }
  return "";
}

RunningJob RunningJobOf(const TrackedJob& rt, absl::Time now) {
  RunningJob r{rt.job.id(), {}, RemainingTime(rt, now), {}};
  const auto& placement = rt.job.placement();
  for (size_t rank = 0; rank < rt.ranks.size() && static_cast<int>(rank) < placement.ranks_size(); ++rank) {
    if (rt.ranks[rank] == RankPhase::kEnded) continue;
    r.rank_workers.push_back(placement.ranks(rank).worker());
    r.rank_gpus.push_back(placement.ranks(rank).has_gpu() ? placement.ranks(rank).gpu() : -1);
  }
  return r;
}

std::string AfterEviction(const TrackedJob& rt, const std::string& why) {
  return rt.evicted_reason.empty() ? why : absl::StrCat(rt.evicted_reason, "; ", why);
}

std::string PendingReasonOf(const TrackedJob& rt, const GangDecision& decision, absl::Time now) {
  std::string why = AfterEviction(rt, decision.pending_reason);
  if (!rt.preempting.empty()) {
    std::vector<std::string> ids;
    for (const Victim& v : rt.preempting) ids.push_back(v.id);
    absl::StrAppend(&why, "; preempting ", absl::StrJoin(ids, ", "),
                    rt.preempting_until > now
                        ? absl::StrCat(" (checkpointing, stopped at the latest at ",
                                       absl::FormatTime("%H:%M:%SZ", rt.preempting_until, absl::UTCTimeZone()), ")")
                        : std::string(" (stopping)"));
  }
  if (rt.resize_dp) {
    absl::StrAppend(&why, "; resize to dp=", *rt.resize_dp, " of ", rt.job.spec().parallelism().dp(), " requested");
  } else if (std::optional<absl::Time> from = ElasticFrom(rt); from && now < *from) {
    absl::StrAppend(&why, "; elastic: may restart at dp >= ", rt.job.spec().restart().min_dp(), " from ",
                    absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", *from, absl::UTCTimeZone()));
  }
  return why;
}

}  // namespace trainyard
