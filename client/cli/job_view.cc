#include "client/cli/job_view.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/cli_format.h"
#include "client/cli/fleet_format.h"
#include "client/cli/gpu_format.h"
#include "client/cli/watch_display.h"
#include "common/base/text.h"

namespace trainyard::cli {
namespace {

std::string ClockTime(absl::Time t) { return absl::FormatTime("%H:%M:%S", t, absl::UTCTimeZone()); }

std::string SpecSummary(const v1::JobSpec& s) {
  const v1::ModelSpec& m = s.model();
  const v1::TrainingSpec& t = s.training();
  const v1::ParallelismSpec& p = s.parallelism();
  std::string out =
      absl::StrCat("model      preset ", m.preset().empty() ? "-" : m.preset(), ": dim ", m.dim(), ", ", m.n_layers(),
                   " layers (", m.n_dense_layers(), " dense), ", m.n_routed_experts(), " experts top-", m.top_k(),
                   " + ", m.n_shared_experts(), " shared, vocab ", m.vocab_size(), "\n");
  absl::StrAppend(&out, "training   ", t.steps(), " steps, batch ", t.batch_size(), " x seq ", t.seq_len());
  if (t.grad_accum_steps() > 1) absl::StrAppend(&out, " x accum ", t.grad_accum_steps());
  absl::StrAppend(&out, absl::StrFormat(", lr %.1e", t.lr()), ", dataset ", t.dataset(), "\n");
  absl::StrAppend(
      &out, "layout     dp ", p.dp(), " x tp ", p.tp(), ", ep ", p.ep(),
      p.dp_shard() > 1 ? absl::StrCat(", dp_shard ", p.dp_shard()) : std::string(), " on ", s.resources().device(),
      "; compile ", s.compile().backend(), " ", s.compile().regions(), "; checkpoints ",
      s.checkpoint().interval() > 0 ? absl::StrCat("every ", s.checkpoint().interval(), " steps") : std::string("off"),
      "; restarts ", s.restart().max_restarts(), "\n");
  return out;
}

// "local×2, w2×1" in rank order, "-" with no ranks.
// "20 steps" when the losses are one per step from step 1, else what they are: "10
// reports of steps 2 to 20" (training.log_freq 2), or across a restart "5 reports of
// steps 1 to 4".
std::string LossSpan(const JobHistory& history) {
  const std::vector<int64_t>& steps = history.loss_steps();
  bool every_step = steps.front() == 1;
  for (size_t i = 1; i < steps.size() && every_step; ++i) every_step = steps[i] == steps[i - 1] + 1;
  if (every_step) return Counted(static_cast<int64_t>(steps.size()), "step");
  return absl::StrCat(Counted(static_cast<int64_t>(steps.size()), "report"), " of steps ", steps.front(), " to ",
                      steps.back());
}

std::string WorkersOf(const std::map<int, std::string>& rank_workers) {
  std::vector<std::string> workers;
  for (const auto& entry : rank_workers) workers.push_back(entry.second);
  return workers.empty() ? "-" : CountWorkers(workers);
}

}  // namespace

std::string FormatJobDescription(const v1::Job& job, const JobHistory& history,
                                 const std::vector<v1::ArtifactInfo>& artifacts, const std::string& artifacts_error) {
  std::string out = absl::StrCat(job.id(), "  ", job.spec().job().name(), "  ", StateName(job.state()));
  if (!job.owner().empty()) absl::StrAppend(&out, "  owner ", job.owner());
  absl::StrAppend(&out, "  priority ", job.spec().job().priority(), "  world ", job.world_size(), "\n");
  if (job.state() == v1::Job::PENDING && !job.pending_reason().empty()) {
    absl::StrAppend(&out, "pending    ", job.pending_reason(), "  (see `trainyard explain ", job.id(), "`)\n");
  }
  if (!job.spec().job().after().empty()) absl::StrAppend(&out, "after      ", job.spec().job().after(), "\n");
  if (!job.failure_reason().empty()) absl::StrAppend(&out, "reason     ", job.failure_reason(), "\n");
  if (!job.unreachable_reason().empty()) absl::StrAppend(&out, "waiting    ", job.unreachable_reason(), "\n");
  if (job.has_compacted()) {  // retention removed the events: no history, metrics or logs below
    absl::StrAppend(&out, "compacted  ", job.compacted().events_removed(), " events removed ",
                    FormatUtc(ToTime(job.compacted().time())), " after --retain-finished ",
                    job.compacted().retain_finished(), "; what follows is the job's stored summary\n");
  }
  out += FormatPreemptedLine(job);
  out += SpecSummary(job.spec());
  const absl::Time created = job.has_create_time() ? ToTime(job.create_time()) : absl::InfinitePast();
  const absl::Time started = job.has_start_time() ? ToTime(job.start_time()) : absl::InfinitePast();
  const absl::Time ended = job.has_end_time() ? ToTime(job.end_time()) : absl::InfinitePast();
  absl::StrAppend(&out, "times      created ", FormatUtc(created), ", started ", FormatUtc(started), ", ended ",
                  FormatUtc(ended));
  if (started != absl::InfinitePast() && ended != absl::InfinitePast()) {
    absl::StrAppend(&out, " (ran ", HumanDuration(ended - started), ")");
  }
  out += "\n";

  if (!history.states().empty()) {
    out += "\nstate history (UTC):\n";
    for (const StateChangeRecord& s : history.states()) {
      std::string line = absl::StrFormat("  %s  %-10s", ClockTime(s.time), StateName(s.state));
      if (s.attempt > 0) absl::StrAppend(&line, "  attempt ", s.attempt);
      if (!s.reason.empty()) absl::StrAppend(&line, "  ", ClipReason(s.reason, 200));
      line.erase(line.find_last_not_of(' ') + 1);
      absl::StrAppend(&out, line, "\n");
    }
  }

  if (!history.attempts().empty()) {
    out += "\nattempts:\n";
    for (const auto& [n, a] : history.attempts()) {
      absl::StrAppend(&out, "  ", n, "  ", ClockTime(a.start));
      if (a.end != absl::InfinitePast())
        absl::StrAppend(&out, " - ", ClockTime(a.end), " (", HumanDuration(a.end - a.start), ")");
      absl::StrAppend(&out, "  on ", WorkersOf(a.rank_workers), "  reached step ", a.last_step);
      absl::StrAppend(&out, "  ", a.end_state.empty() ? "running" : absl::StrCat("ended ", a.end_state), "\n");
      for (const std::string& f : a.rank_failures) absl::StrAppend(&out, "       ", f, "\n");
    }
  }
  // The controller's own record: the checkpoint a restart resumes from, and why each
  // failed attempt ended.
  if (const std::string details = FormatJobDetails(job); !details.empty()) absl::StrAppend(&out, "\n", details);

  std::vector<std::string> ranks;
  for (const auto& r : job.placement().ranks()) {
    ranks.push_back(absl::StrCat("rank ", r.rank(), "@", r.worker()));
  }
  absl::StrAppend(&out, "\nworkers    ", ranks.empty() ? "-" : absl::StrJoin(ranks, ", "));
  if (!job.placement().master_addr().empty()) {
    absl::StrAppend(&out, "  (rendezvous ", job.placement().master_addr(), ":", job.placement().master_port(), ")");
  }
  out += "\n";
  out += FormatPlacementGpus(job.placement(), "gpus       ", "nccl env   ");

  if (history.last_step().has_value()) {
    const v1::StepMetrics& m = history.last_step()->step_metrics();
    absl::StrAppend(&out, "metrics    step ", m.step(), "/", job.spec().training().steps(),
                    absl::StrFormat(" loss %.4f grad_norm %.2f lr %.1e tok/s %.0f step_ms %.0f", m.loss(),
                                    m.grad_norm(), m.lr(), m.tokens_per_s(), m.step_ms()));
    if (m.mfu() > 0) absl::StrAppend(&out, absl::StrFormat(" MFU %.1f%%", 100 * m.mfu()));
    // The synthetic dataset has no epochs (0).
    if (m.epoch() > 0) absl::StrAppend(&out, " epoch ", m.epoch());
    absl::StrAppend(&out, " at ", ClockTime(ToTime(history.last_step()->time())), "\n");
    absl::StrAppend(&out, "loss       ", Sparkline(history.losses(), 40), "  (", LossSpan(history),
                    absl::StrFormat(", first %.4f, last %.4f)\n", history.losses().front(), history.losses().back()));
  } else {
    out += "metrics    no step reported yet\n";
  }
  if (history.last_validation().has_value()) {
    const v1::Event& e = *history.last_validation();
    const v1::Validation& v = e.validation();
    absl::StrAppend(&out, "validation step ", v.step(), absl::StrFormat(" loss %.4f", v.loss()), " (", v.tokens(),
                    absl::StrFormat(" tokens, %.0f ms", v.ms()), ") at ", ClockTime(ToTime(e.time())), "; ",
                    history.validation_count(), history.validation_count() == 1 ? " run" : " runs", "\n");
  } else if (!job.spec().validation().dataset().empty()) {
    absl::StrAppend(&out, "validation none yet (every ", job.spec().validation().freq(), " steps on ",
                    job.spec().validation().dataset(), ")\n");
  }

  if (history.checkpoints().empty()) {
    absl::StrAppend(&out, "checkpoints none\n");
  } else {
    out += "checkpoints:";
    if (history.checkpoints_removed() > 0) {
      absl::StrAppend(&out, " ", history.checkpoint_count(), " saved, ", history.checkpoints_removed(),
                      " removed by retention (", FormatBytes(history.checkpoint_bytes_freed()), " freed), ",
                      FormatBytes(std::max<int64_t>(history.checkpoint_bytes_kept(), 0)), " kept on disk;");
    }
    if (history.checkpoint_count() - history.checkpoints_removed() >
        static_cast<int64_t>(history.checkpoints().size())) {
      absl::StrAppend(&out, " ", history.checkpoint_count(), " in all, the newest ", history.checkpoints().size(),
                      " shown");
    }
    out += "\n";
    // The one `export --best` takes among those listed: the lowest finite metric, of
    // equal ones the newest.
    const v1::Event* best = nullptr;
    for (const v1::Event& e : history.checkpoints()) {
      const v1::CheckpointSaved& c = e.checkpoint();
      if (c.metric_name().empty() || !std::isfinite(c.metric())) continue;
      if (best == nullptr || c.metric() <= best->checkpoint().metric()) best = &e;
    }
    for (const v1::Event& e : history.checkpoints()) {
      const v1::CheckpointSaved& c = e.checkpoint();
      absl::StrAppend(&out, "  step ", c.step(), "  ", c.path(), "  ", FormatBytes(c.bytes()), "  attempt ",
                      e.attempt(), "  dp ", c.dp(), " tp ", c.tp(), " ep ", c.ep(),
                      c.requested() ? "  on request" : "");
      if (!c.metric_name().empty()) absl::StrAppend(&out, "  ", c.metric_name(), absl::StrFormat(" %.4f", c.metric()));
      if (&e == best) out += "  (best)";
      out += "\n";
    }
  }
  if (!artifacts_error.empty()) {
    absl::StrAppend(&out, "artifacts  unknown: ", artifacts_error, "\n");
  } else if (artifacts.empty()) {
    out += "artifacts  none\n";
  } else {
    out += "artifacts:\n";
    std::string table = FormatArtifactsTable(artifacts);
    for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, "  ", line, "\n");
    }
  }
  return out;
}

std::string FormatExplainHistory(const v1::Job& job, const JobHistory& history) {
  std::string out;
  const std::vector<RegionCompileStats> regions = history.Regions();
  if (!regions.empty()) {
    out += "\ncompile (all ranks and attempts):\n";
    std::vector<std::string> hints;
    for (const RegionCompileStats& r : regions) {
      std::string line = absl::StrCat("  ", r.region, ": ", r.compiles, " compiles, ", r.recompiles, " recompiles");
      if (r.hits >= 0) absl::StrAppend(&line, ", ", r.hits, " hits, ", r.misses, " misses");
      absl::StrAppend(&line, ", ", r.fallbacks, " fallbacks");
      if (r.graph_breaks > 0) absl::StrAppend(&line, ", ", r.graph_breaks, " graph breaks");
      if (r.unsafe_side_effects > 0) absl::StrAppend(&line, ", ", r.unsafe_side_effects, " unsafe side effects");
      if (r.limit_hit) absl::StrAppend(&line, ", RECOMPILE LIMIT HIT");
      absl::StrAppend(&out, line, "\n");
      for (const std::string* reason : {&r.last_recompile_reason, &r.last_fallback_reason}) {
        if (reason->empty()) continue;
        absl::StrAppend(&out, "      ", reason == &r.last_recompile_reason ? "last recompile: " : "fallback: ",
                        ClipReason(*reason, 200), "\n");
        const std::string hint = CompileHint(*reason);
        if (!hint.empty()) absl::StrAppend(&out, "      hint: ", hint, "\n");
      }
    }
  }
  const int restarts = history.restarts();
  if (restarts > 0 || job.failure_causes_size() > 0) {
    absl::StrAppend(&out, "\nrestarts: ", restarts, " (restart.max_restarts ", job.spec().restart().max_restarts(),
                    ")\n");
    for (const StateChangeRecord& s : history.states()) {
      if (s.state != v1::Job::RESTARTING || IsPreemptionReason(s.reason)) continue;
      absl::StrAppend(&out, "  ", ClockTime(s.time), "  after attempt ", s.attempt, ": ", ClipReason(s.reason, 200),
                      "\n");
    }
  }
  // Job.preemptions is the controller's count; the history says when and why.
  const std::vector<StateChangeRecord> preempted = history.preemptions();
  if (job.preemptions() > 0 || !preempted.empty()) {
    absl::StrAppend(&out, "\npreemptions: ", std::max<int64_t>(job.preemptions(), preempted.size()),
                    " (not failures: none used a restart of restart.max_restarts)\n");
    for (const StateChangeRecord& s : preempted) {
      absl::StrAppend(&out, "  ", ClockTime(s.time), s.attempt > 0 ? absl::StrCat("  after attempt ", s.attempt) : "",
                      ": ", ClipReason(s.reason, 200), "\n");
    }
  }
  if (!history.stalls().empty()) {
    absl::StrAppend(&out, "\nstalls: ", history.stall_count());
    if (history.stall_count() > static_cast<int64_t>(history.stalls().size())) {
      absl::StrAppend(&out, " (the newest ", history.stalls().size(), " shown)");
    }
    out += "\n";
    for (const v1::Event& e : history.stalls()) {
      const v1::Stall& s = e.stall();
      std::string line = absl::StrCat("  ", ClockTime(ToTime(e.time())), "  attempt ", e.attempt(), " rank ", e.rank(),
                                      " step ", s.step(), ": ");
      if (s.collective().empty()) {
        absl::StrAppend(&line, "no step progress for ", absl::StrFormat("%.0fs", s.waited_s()),
                        " outside any collective (training.step_timeout_s)");
      } else {
        absl::StrAppend(&line, "waited ", absl::StrFormat("%.0fs", s.waited_s()), " in ", s.collective(), " #",
                        s.collective_seq(), ", lagging rank ",
                        s.lagging_rank() < 0 ? std::string("unknown") : absl::StrCat(s.lagging_rank()));
      }
      absl::StrAppend(&out, line, "\n");
    }
  }
  return out;
}

}  // namespace trainyard::cli
