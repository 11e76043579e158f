#include "client/cli/job_history.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cli/cli_format.h"

namespace trainyard::cli {

absl::Time ToTime(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

std::string FormatUtc(absl::Time t) {
  if (t == absl::InfinitePast()) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string HumanDuration(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 0) s = 0;
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string ClipReason(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "…";
}

bool ParseSummaryCounts(const std::string& reason, int64_t* hits, int64_t* misses) {
  bool got_hits = false;
  bool got_misses = false;
  for (absl::string_view token : absl::StrSplit(reason, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(token, absl::MaxSplits('=', 1));
    if (kv.first == "hits") got_hits = absl::SimpleAtoi(kv.second, hits);
    if (kv.first == "misses") got_misses = absl::SimpleAtoi(kv.second, misses);
  }
  return got_hits && got_misses;
}

std::string CompileHint(const std::string& reason) {
  auto has = [&](const char* what) { return reason.find(what) != std::string::npos; };
  // Most specific first: a RECOMPILE_LIMIT reason quotes the guard that failed last.
  if (has("reads ") && has("without receiving it")) {
    return "the region reads state it is not given (a captured tensor): pass it as an input or "
           "param; until then it runs eager";
  }
  if (has("unsafe side effect") || has("writes ")) {
    return "the region writes a buffer it was not given (an unsafe side effect): fix the module, "
           "or set compile.on_side_effect=\"fallback\" to run it eager";
  }
  if (has("grad_mode")) {
    return "called both with and without autograd (training and no_grad/eval, or activation "
           "checkpoint recompute): one entry per mode is expected, more is not";
  }
  if (has(".requires_grad")) {
    return "a tensor's requires_grad flips between calls (frozen parameters, detach, or "
           "activation checkpointing): keep it stable or expect one entry per variant";
  }
  if (has(".size(") || has(".dim()")) {
    return "an input's shape changed (a last partial batch, variable sequence length, or a "
           "resized dp/grad_accum): keep batch_size and seq_len fixed, or pad to them";
  }
  if (has(".dtype")) return "an input's dtype changed between calls: cast inputs consistently";
  if (has(".device")) return "an input moved to another device between calls";
  if (has("input count") || has("param count")) {
    return "the region is called with a different number of tensors: a code path changes its "
           "signature (optional inputs); make the signature fixed";
  }
  if (has("recompile_limit")) {
    return "the region hit compile.recompile_limit and runs eager from now on: fix the guard "
           "above or raise compile.recompile_limit";
  }
  if (has("no cached entry matched")) {
    return "no cache entry fit and no single guard was the cause: compare the COMPILE events' "
           "guard lists";
  }
  return "";
}

void JobHistory::Add(const v1::Event& event) {
  last_seq_ = std::max(last_seq_, event.seq());
  const absl::Time time = ToTime(event.time());
  const int attempt = event.attempt();
  AttemptRecord* a = nullptr;
  if (attempt > 0) {
    a = &attempts_[attempt];
    a->attempt = attempt;
    if (a->start == absl::InfinitePast()) a->start = time;
  }
  switch (event.payload_case()) {
    case v1::Event::kJobState: {
      states_.push_back({time, event.job_state().state(), event.job_state().reason(), attempt});
      const v1::Job::State s = event.job_state().state();
      // The attempt that was running ends with a RESTARTING or a terminal state.
      if (s == v1::Job::RESTARTING || IsTerminal(s)) {
        auto it = attempts_.rbegin();
        if (it != attempts_.rend() && it->second.end_state.empty()) {
          it->second.end_state = StateName(s);
          if (it->second.end == absl::InfinitePast() || it->second.end < time) it->second.end = time;
        }
      }
      break;
    }
    case v1::Event::kRankState: {
      const v1::RankState& r = event.rank_state();
      if (a == nullptr) break;
      if (r.state() == v1::RankState::RUNNING || r.state() == v1::RankState::STARTING) {
        if (!r.worker().empty()) a->rank_workers[event.rank()] = r.worker();
      }
      if (r.state() == v1::RankState::FAILED || r.state() == v1::RankState::KILLED ||
          r.state() == v1::RankState::EXITED) {
        if (a->end < time) a->end = time;
      }
      if (r.state() == v1::RankState::FAILED) {
        std::string what = absl::StrCat("rank ", event.rank());
        if (!r.worker().empty()) absl::StrAppend(&what, " on ", r.worker());
        absl::StrAppend(&what, ": exit_code=", r.exit_code());
        if (r.signal() > 0) absl::StrAppend(&what, " signal=", r.signal());
        if (!r.message().empty()) absl::StrAppend(&what, ": ", ClipReason(r.message(), 160));
        a->rank_failures.push_back(std::move(what));
      }
      break;
    }
    case v1::Event::kStepMetrics: {
      const v1::StepMetrics& m = event.step_metrics();
      if (a != nullptr) a->last_step = std::max(a->last_step, m.step());
      // Every DP rank may report the same global loss: keep one per step, and a new
      // attempt (which resumes at an earlier step) starts a new run of losses.
      if (attempt != last_loss_attempt_ || m.step() > last_loss_step_) {
        losses_.push_back(m.loss());
        loss_steps_.push_back(m.step());
        if (losses_.size() > kMaxLosses) {
          losses_.erase(losses_.begin());
          loss_steps_.erase(loss_steps_.begin());
        }
        last_loss_step_ = m.step();
        last_loss_attempt_ = attempt;
      }
      if (!last_step_.has_value() || attempt > last_step_->attempt() ||
          (attempt == last_step_->attempt() && m.step() >= last_step_->step_metrics().step())) {
        last_step_ = event;
      }
      break;
    }
    case v1::Event::kValidation: {
      ++validation_count_;
      const int64_t step = event.validation().step();
      if (!last_validation_.has_value() || attempt > last_validation_->attempt() ||
          (attempt == last_validation_->attempt() && step >= last_validation_->validation().step())) {
        last_validation_ = event;
      }
      break;
    }
    case v1::Event::kCompile: {
      const v1::CompileEvent& c = event.compile();
      const std::string region = c.region().empty() ? "(no region)" : c.region();
      auto [it, inserted] = regions_.try_emplace(region);
      if (inserted) {
        it->second.region = region;
        region_order_.push_back(region);
      }
      RegionCompileStats& r = it->second;
      switch (c.kind()) {
        case v1::CompileEvent::COMPILE:
          ++r.compiles;
          break;
        case v1::CompileEvent::RECOMPILE:
          ++r.recompiles;
          ++recompiles_;
          r.last_recompile_reason = c.reason();
          break;
        case v1::CompileEvent::RECOMPILE_LIMIT:
          r.limit_hit = true;
          r.last_recompile_reason = c.reason();
          break;
        case v1::CompileEvent::GRAPH_BREAK:
          ++r.graph_breaks;
          break;
        case v1::CompileEvent::UNSAFE_SIDE_EFFECT:
          ++r.unsafe_side_effects;
          r.last_fallback_reason = c.reason();
          break;
        case v1::CompileEvent::FALLBACK:
          ++r.fallbacks;
          r.last_fallback_reason = c.reason();
          break;
        case v1::CompileEvent::SUMMARY: {
          int64_t hits = 0;
          int64_t misses = 0;
          if (ParseSummaryCounts(c.reason(), &hits, &misses)) {
            summaries_[{region, attempt, event.rank()}] = {hits, misses};
          }
          break;
        }
        default:
          break;
      }
      break;
    }
    case v1::Event::kStall:
      ++stall_count_;
      stalls_.push_back(event);
      if (stalls_.size() > kMaxListed) stalls_.erase(stalls_.begin());
      break;
    case v1::Event::kCheckpoint:
      ++checkpoint_count_;
      checkpoints_.push_back(event);
      if (checkpoints_.size() > kMaxListed) checkpoints_.erase(checkpoints_.begin());
      break;
    case v1::Event::kCheckpointsPruned: {
      const v1::CheckpointsPruned& p = event.checkpoints_pruned();
      checkpoints_removed_ += p.removed_size();
      checkpoint_bytes_freed_ += p.bytes_freed();
      checkpoint_bytes_kept_ = p.bytes_kept();
      std::set<std::string> removed;
      for (const v1::CheckpointRef& r : p.removed()) removed.insert(r.path());
      checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                        [&](const v1::Event& e) { return removed.count(e.checkpoint().path()) > 0; }),
                         checkpoints_.end());
      break;
    }
    default:
      break;
  }
}

std::vector<RegionCompileStats> JobHistory::Regions() const {
  std::vector<RegionCompileStats> out;
  for (const std::string& name : region_order_) {
    RegionCompileStats r = regions_.at(name);
    for (const auto& [key, counts] : summaries_) {
      if (std::get<0>(key) != name) continue;
      r.hits = std::max<int64_t>(r.hits, 0) + counts.first;
      r.misses = std::max<int64_t>(r.misses, 0) + counts.second;
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool IsPreemptionReason(const std::string& reason) {
  return absl::StartsWith(reason, "preempted by ") || absl::StartsWith(reason, "drained from ");
}

int JobHistory::restarts() const {
  return static_cast<int>(std::count_if(states_.begin(), states_.end(), [](const StateChangeRecord& s) {
    return s.state == v1::Job::RESTARTING && !IsPreemptionReason(s.reason);
  }));
}

std::vector<StateChangeRecord> JobHistory::preemptions() const {
  std::vector<StateChangeRecord> out;
  std::set<int> attempts;
  for (const StateChangeRecord& s : states_) {
    if ((s.state == v1::Job::RESTARTING || s.state == v1::Job::PENDING) && IsPreemptionReason(s.reason) &&
        attempts.insert(s.attempt).second) {
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace trainyard::cli
