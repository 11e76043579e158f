#include "client/cli/sweep_format.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/cli_format.h"
#include "client/cli/job_view.h"
#include "client/job_watch.h"

namespace trainyard::cli {
namespace {

// Active states first: what a sweep is doing now reads before what it has done.
constexpr std::array<v1::Job::State, 7> kStateOrder = {v1::Job::RUNNING,  v1::Job::RESTARTING, v1::Job::SCHEDULED,
                                                       v1::Job::PENDING,  v1::Job::SUCCEEDED,  v1::Job::FAILED,
                                                       v1::Job::CANCELLED};

bool HasRankableLoss(const v1::SweepChild& c) {
  return c.has_last_validation() && !std::isnan(c.last_validation().loss());
}

std::string Loss(double loss) { return std::isnan(loss) ? "nan" : absl::StrFormat("%.4f", loss); }

// "job-12 lr-grid-3 (lr=0.0003,top_k=4)": how watch names a child.
std::string ChildTitle(const v1::Sweep& sweep, const v1::SweepChild& c) {
  std::string out = absl::StrCat(c.job_id(), " ", SweepChildName(sweep, c.index()));
  if (!c.label().empty()) absl::StrAppend(&out, " (", c.label(), ")");
  return out;
}

std::string StateLine(const v1::Sweep& sweep, const v1::SweepChild& c) {
  std::string line = absl::StrCat(ChildTitle(sweep, c), " ", StateName(c.state()));
  if (!c.reason().empty()) absl::StrAppend(&line, ": ", c.reason());
  return line;
}

std::string CreatedUtc(const v1::Sweep& sweep, const char* format) {
  if (!sweep.has_create_time()) return "-";
  return absl::FormatTime(format, ToTime(sweep.create_time()), absl::UTCTimeZone());
}

std::string MaxConcurrentText(int32_t max_concurrent) {
  return max_concurrent > 0 ? absl::StrCat(max_concurrent) : "-";
}

}  // namespace

bool IsSweepId(std::string_view id) { return absl::StartsWith(absl::string_view(id.data(), id.size()), "sweep-"); }

std::string SweepChildName(const v1::Sweep& sweep, int index) {
  return sweep.name().empty() ? absl::StrCat(index) : absl::StrCat(sweep.name(), "-", index);
}

std::map<std::string, int32_t> SweepStateCounts(const v1::SweepView& view) {
  std::map<std::string, int32_t> counts(view.states().begin(), view.states().end());
  if (counts.empty()) {
    for (const v1::SweepChild& c : view.children()) ++counts[v1::Job::State_Name(c.state())];
  }
  return counts;
}

std::string FormatStateCounts(const std::map<std::string, int32_t>& counts) {
  std::vector<std::string> parts;
  std::set<std::string> known;
  for (v1::Job::State state : kStateOrder) {
    const std::string name = v1::Job::State_Name(state);
    known.insert(name);
    const auto it = counts.find(name);
    if (it != counts.end() && it->second > 0)
      parts.push_back(absl::StrCat(it->second, " ", absl::AsciiStrToLower(name)));
  }
  for (const auto& [name, n] : counts) {
    if (known.count(name) == 0 && n > 0) parts.push_back(absl::StrCat(n, " ", absl::AsciiStrToLower(name)));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::vector<RankedChild> RankSweepChildren(const v1::SweepView& view) {
  std::vector<RankedChild> ranked;
  for (const v1::SweepChild& c : view.children()) ranked.push_back({0, &c});
  // Ranked children by loss, then NaN losses, then no validation; ties by index.
  auto group = [](const v1::SweepChild& c) { return HasRankableLoss(c) ? 0 : c.has_last_validation() ? 1 : 2; };
  std::stable_sort(ranked.begin(), ranked.end(), [&](const RankedChild& a, const RankedChild& b) {
    const int ga = group(*a.child);
    const int gb = group(*b.child);
    if (ga != gb) return ga < gb;
    if (ga == 0 && a.child->last_validation().loss() != b.child->last_validation().loss()) {
      return a.child->last_validation().loss() < b.child->last_validation().loss();
    }
    return a.child->index() < b.child->index();
  });
  int place = 0;
  for (RankedChild& r : ranked) {
    if (HasRankableLoss(*r.child)) r.rank = ++place;
  }
  return ranked;
}

std::string FormatSweepRanking(const v1::SweepView& view) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"RANK", "JOB", "STATE", "STEP", "VAL_LOSS", "VAL_STEP", "LABEL"});
  for (const RankedChild& r : RankSweepChildren(view)) {
    const v1::SweepChild& c = *r.child;
    const bool val = c.has_last_validation();
    rows.push_back({r.rank > 0 ? absl::StrCat(r.rank) : "-", c.job_id(), StateName(c.state()),
                    c.last_step() > 0 ? absl::StrCat(c.last_step()) : "-", val ? Loss(c.last_validation().loss()) : "-",
                    val ? absl::StrCat(c.last_validation().step()) : "-", c.label()});
  }
  return FormatColumns(rows);
}

std::string FormatSweepDescription(const v1::SweepView& view) {
  const v1::Sweep& s = view.sweep();
  std::string out = s.id();
  if (!s.name().empty()) absl::StrAppend(&out, "  ", s.name());
  if (!s.owner().empty()) absl::StrAppend(&out, "  owner ", s.owner());
  out += "\n";
  absl::StrAppend(&out, "created    ", s.has_create_time() ? FormatUtc(ToTime(s.create_time())) : "-", "\n");
  absl::StrAppend(&out, "children   ", s.job_ids_size() > 0 ? s.job_ids_size() : view.children_size(),
                  s.max_concurrent() > 0 ? absl::StrCat(", at most ", s.max_concurrent(), " at once (max_concurrent)")
                                         : std::string(", no max_concurrent"),
                  "\n");
  for (int i = 0; i < s.axes_size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "axes       " : "           ", s.axes(i).key(), " = ",
                    absl::StrJoin(s.axes(i).values(), ", "), "\n");
  }
  absl::StrAppend(&out, "states     ", FormatStateCounts(SweepStateCounts(view)), view.ended() ? "; ended" : "", "\n");
  if (view.children_size() > 0) absl::StrAppend(&out, "\n", FormatSweepRanking(view));
  std::vector<std::string> failures;
  for (const v1::SweepChild& c : view.children()) {
    if (c.state() == v1::Job::FAILED) failures.push_back(absl::StrCat("  ", StateLine(s, c), "\n"));
  }
  if (!failures.empty()) absl::StrAppend(&out, "\nfailed:\n", absl::StrJoin(failures, ""));
  return out;
}

std::string FormatSubmittedSweep(const v1::SweepView& view) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"JOB", "INDEX", "NAME", "STATE", "LABEL"});
  for (const v1::SweepChild& c : view.children()) {
    rows.push_back({c.job_id(), absl::StrCat(c.index()), SweepChildName(view.sweep(), c.index()), StateName(c.state()),
                    c.label()});
  }
  return absl::StrCat(view.sweep().id(), "\n", FormatColumns(rows));
}

std::string FormatSweepsTable(const std::vector<v1::SweepView>& sweeps) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SWEEP", "NAME", "OWNER", "CHILDREN", "MAX_CONCURRENT", "CREATED", "STATES"});
  for (const v1::SweepView& v : sweeps) {
    const v1::Sweep& s = v.sweep();
    rows.push_back({s.id(), s.name(), s.owner(), absl::StrCat(s.job_ids_size()), MaxConcurrentText(s.max_concurrent()),
                    CreatedUtc(s, "%Y-%m-%dT%H:%M:%SZ"), FormatStateCounts(SweepStateCounts(v))});
  }
  return FormatColumns(rows);
}

std::vector<v1::SweepView> SweepsWithChildrenIn(const std::vector<v1::SweepView>& sweeps,
                                                const std::vector<v1::Job::State>& states) {
  if (states.empty()) return sweeps;
  std::vector<v1::SweepView> out;
  for (const v1::SweepView& v : sweeps) {
    const std::map<std::string, int32_t> counts = SweepStateCounts(v);
    const bool any = std::any_of(states.begin(), states.end(), [&](v1::Job::State state) {
      const auto it = counts.find(v1::Job::State_Name(state));
      return it != counts.end() && it->second > 0;
    });
    if (any) out.push_back(v);
  }
  return out;
}

std::vector<std::string> SweepChangeLines(const v1::SweepView* before, const v1::SweepView& now) {
  std::map<std::string, const v1::SweepChild*> old;
  if (before != nullptr) {
    for (const v1::SweepChild& c : before->children()) old[c.job_id()] = &c;
  }
  std::vector<const v1::SweepChild*> children;
  for (const v1::SweepChild& c : now.children()) children.push_back(&c);
  std::stable_sort(children.begin(), children.end(),
                   [](const v1::SweepChild* a, const v1::SweepChild* b) { return a->index() < b->index(); });
  std::vector<std::string> lines;
  for (const v1::SweepChild* c : children) {
    const auto it = old.find(c->job_id());
    const v1::SweepChild* was = it == old.end() ? nullptr : it->second;
    std::optional<std::string> state;
    if (was == nullptr || was->state() != c->state()) state = StateLine(now.sweep(), *c);
    std::optional<std::string> validation;
    if (c->has_last_validation()) {
      const v1::Validation& v = c->last_validation();
      // NaN != NaN: a repeated NaN loss is the same validation when its step is.
      const bool same = was != nullptr && was->has_last_validation() && was->last_validation().step() == v.step() &&
                        (was->last_validation().loss() == v.loss() ||
                         (std::isnan(was->last_validation().loss()) && std::isnan(v.loss())));
      if (!same) {
        validation = absl::StrCat(ChildTitle(now.sweep(), *c), " val_loss ", Loss(v.loss()), " @ step ", v.step());
      }
    }
    // In the order they happened: a validation runs while the child runs, so before it
    // ended and after it started.
    const bool ended = IsTerminal(c->state());
    if (validation && ended) lines.push_back(*validation);
    if (state) lines.push_back(*state);
    if (validation && !ended) lines.push_back(*validation);
  }
  return lines;
}

std::string FormatSweepCancel(const v1::SweepView& before, const v1::SweepView& after) {
  std::map<std::string, v1::Job::State> was;
  for (const v1::SweepChild& c : before.children()) was[c.job_id()] = c.state();
  int cancelled = 0;
  int already_ended = 0;
  for (const v1::SweepChild& c : after.children()) {
    const auto it = was.find(c.job_id());
    const bool ended_before = it != was.end() && IsTerminal(it->second);
    if (ended_before) {
      ++already_ended;
    } else if (c.state() == v1::Job::CANCELLED) {
      ++cancelled;
    }
  }
  std::string out;
  if (cancelled == 0 && already_ended == after.children_size()) {
    out = absl::StrCat(after.sweep().id(), ": nothing to cancel: every child had already ended");
  } else {
    out = absl::StrCat(after.sweep().id(), ": cancelled ", cancelled, " of ", after.children_size(),
                       after.children_size() == 1 ? " child" : " children");
    if (already_ended > 0) absl::StrAppend(&out, " (", already_ended, " had already ended)");
  }
  absl::StrAppend(&out, "\nstates     ", FormatStateCounts(SweepStateCounts(after)), after.ended() ? "; ended" : "",
                  "\n");
  return out;
}

int SweepExitCode(const v1::SweepView& view) {
  int code = kExitOk;
  for (const auto& [name, n] : SweepStateCounts(view)) {
    if (n <= 0 || name == "SUCCEEDED") continue;
    v1::Job::State state = v1::Job::STATE_UNSPECIFIED;
    if (!v1::Job::State_Parse(name, &state) || !IsTerminal(state)) return kExitError;
    code = kExitJobFailed;
  }
  return code;
}

}  // namespace trainyard::cli
