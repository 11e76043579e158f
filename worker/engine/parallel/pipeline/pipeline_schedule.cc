#include "worker/engine/parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"

namespace trainyard::engine {
namespace {

constexpr char k1F1BKind[] = "1F1B";
constexpr char kInterleavedKind[] = "Interleaved1F1B";

PipeAction Forward(int microbatch, int stage) { return {PipeOp::kForward, microbatch, stage}; }
PipeAction Backward(int microbatch, int stage) { return {PipeOp::kBackward, microbatch, stage}; }

absl::Status CheckCommonShape(const char* kind, int pp, int microbatches) {
  if (pp < 1) return absl::InvalidArgumentError(absl::StrCat(kind, " needs pp >= 1, got ", pp));
  if (microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " needs microbatches >= 1, got ", microbatches));
  }
  return absl::OkStatus();
}

// Where an action sits in the table: rank and tick (index in the rank's list).
struct Where {
  int rank = -1;
  int tick = -1;
};

std::string DescribeWhere(const Where& w) { return absl::StrCat("rank ", w.rank, " tick ", w.tick); }

// One slot per (op, stage, microbatch), for the per-action arrays below.
size_t Slot(const PipelineSchedule& s, const PipeAction& a) {
  return (static_cast<size_t>(a.op) * s.num_stages() + a.stage) * s.microbatches + a.microbatch;
}

// Checks the shape, the ranges and placement, and that each action is in the table
// exactly once; fills where[Slot(a)] for every action.
absl::Status CheckTable(const PipelineSchedule& s, std::vector<Where>& where) {
  if (s.pp < 1) return absl::InvalidArgumentError(absl::StrCat("schedule has pp = ", s.pp, "; want >= 1"));
  if (s.virtual_stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("schedule has virtual_stages = ", s.virtual_stages, "; want >= 1"));
  }
  if (s.microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("schedule has microbatches = ", s.microbatches, "; want >= 1"));
  }
  if (static_cast<int>(s.ranks.size()) != s.pp) {
    return absl::InvalidArgumentError(absl::StrCat("schedule has ", s.ranks.size(), " rank lists for pp = ", s.pp));
  }
  const int stages = s.num_stages();
  where.assign(2 * static_cast<size_t>(stages) * s.microbatches, Where{});
  for (int r = 0; r < s.pp; ++r) {
    for (int t = 0; t < static_cast<int>(s.ranks[r].size()); ++t) {
      const PipeAction& a = s.ranks[r][t];
      const Where here{r, t};
      if (a.op != PipeOp::kForward && a.op != PipeOp::kBackward) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeWhere(here), ": unknown op ", static_cast<int>(a.op)));
      }
      if (a.stage < 0 || a.stage >= stages) {
        return absl::InvalidArgumentError(
            absl::StrCat(DescribeWhere(here), ": ", DescribeAction(a), ": stage out of range [0, ", stages, ")"));
      }
      if (a.microbatch < 0 || a.microbatch >= s.microbatches) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeWhere(here), ": ", DescribeAction(a),
                                                       ": microbatch out of range [0, ", s.microbatches, ")"));
      }
      if (a.stage % s.pp != r) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeWhere(here), ": ", DescribeAction(a), " is on rank ", r,
                                                       ", but stage ", a.stage, " lives on rank ", a.stage % s.pp,
                                                       " (stage % pp)"));
      }
      Where& w = where[Slot(s, a)];
      if (w.rank >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(DescribeWhere(here), ": ", DescribeAction(a),
                                                       " runs twice (first at ", DescribeWhere(w), ")"));
      }
      w = here;
    }
  }
  for (int stage = 0; stage < stages; ++stage) {
    for (int mb = 0; mb < s.microbatches; ++mb) {
      for (const PipeAction& a : {Forward(mb, stage), Backward(mb, stage)}) {
        if (where[Slot(s, a)].rank < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(DescribeAction(a), " never runs: rank ", stage % s.pp, " has no such action"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// What `a` must wait for, in the order a deadlock report names them: the activation
// from the stage before, or the gradient from the stage after and then the stage's own
// forward (whose saved activations the backward reads).
std::vector<PipeAction> Dependencies(const PipelineSchedule& s, const PipeAction& a) {
  std::vector<PipeAction> deps;
  if (a.op == PipeOp::kForward) {
    if (a.stage > 0) deps.push_back(Forward(a.microbatch, a.stage - 1));
  } else {
    if (a.stage + 1 < s.num_stages()) deps.push_back(Backward(a.microbatch, a.stage + 1));
    deps.push_back(Forward(a.microbatch, a.stage));
  }
  return deps;
}

// Validation and simulation in one: the timeline exists only when no rank gets stuck.
absl::StatusOr<PipelineTimeline> Run(const PipelineSchedule& s, double forward_cost, double backward_cost) {
  std::vector<Where> where;
  TY_RETURN_IF_ERROR(CheckTable(s, where));

  std::vector<double> end_of(where.size(), 0);
  std::vector<bool> done(where.size(), false);
  PipelineTimeline timeline;
  timeline.pp = s.pp;
  timeline.virtual_stages = s.virtual_stages;
  timeline.ranks.resize(s.pp);
  std::vector<double> rank_free(s.pp, 0);
  std::vector<size_t> head(s.pp, 0);
  double busy = 0;

  // Each pass lets every rank run what it can; an action's start depends only on its
  // rank's previous end and its dependencies' ends, so the pass order does not change
  // any time. A pass without progress while actions remain is a deadlock.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.pp; ++r) {
      const std::vector<PipeAction>& list = s.ranks[r];
      while (head[r] < list.size()) {
        const PipeAction& a = list[head[r]];
        double ready = rank_free[r];
        bool blocked = false;
        for (const PipeAction& dep : Dependencies(s, a)) {
          const size_t slot = Slot(s, dep);
          if (!done[slot]) {
            blocked = true;
            break;
          }
          ready = std::max(ready, end_of[slot]);
        }
        if (blocked) break;
        const double cost = a.op == PipeOp::kForward ? forward_cost : backward_cost;
        const size_t slot = Slot(s, a);
        end_of[slot] = ready + cost;
        done[slot] = true;
        rank_free[r] = end_of[slot];
        busy += cost;
        timeline.ranks[r].push_back(TimedAction{a, ready, end_of[slot]});
        ++head[r];
        progress = true;
      }
    }
  }

  std::vector<std::string> stuck;
  for (int r = 0; r < s.pp; ++r) {
    if (head[r] == s.ranks[r].size()) continue;
    const PipeAction& a = s.ranks[r][head[r]];
    for (const PipeAction& dep : Dependencies(s, a)) {
      const size_t slot = Slot(s, dep);
      if (done[slot]) continue;
      stuck.push_back(absl::StrCat(DescribeWhere(Where{r, static_cast<int>(head[r])}), ": ", DescribeAction(a),
                                   " waits for ", DescribeAction(dep), " (", DescribeWhere(where[slot]),
                                   "), which never runs"));
      break;
    }
  }
  if (!stuck.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("deadlock: ", absl::StrJoin(stuck, "; ")));
  }

  timeline.makespan = *std::max_element(rank_free.begin(), rank_free.end());
  timeline.idle = s.pp * timeline.makespan - busy;
  timeline.bubble_fraction = timeline.idle / (s.pp * timeline.makespan);
  return timeline;
}

std::string Label(const PipeAction& a, int virtual_stages) {
  std::string label = absl::StrCat(a.op == PipeOp::kForward ? "F" : "B", a.microbatch);
  if (virtual_stages > 1) absl::StrAppend(&label, "s", a.stage);
  return label;
}

}  // namespace

std::string DescribeAction(const PipeAction& action) {
  return absl::StrCat(action.op == PipeOp::kForward ? "forward" : "backward", " of microbatch ", action.microbatch,
                      " at stage ", action.stage);
}

absl::StatusOr<PipelineSchedule> Make1F1B(int pp, int microbatches) {
  TY_RETURN_IF_ERROR(CheckCommonShape(k1F1BKind, pp, microbatches));
  PipelineSchedule s{k1F1BKind, pp, 1, microbatches, {}};
  s.ranks.resize(pp);
  for (int r = 0; r < pp; ++r) {
    // The last rank starts its first backward right after its first forward; each
    // rank before it is one forward and one backward further from that, hence one
    // more forward in flight.
    const int warmup = std::min(pp - 1 - r, microbatches);
    std::vector<PipeAction>& list = s.ranks[r];
    for (int i = 0; i < warmup; ++i) list.push_back(Forward(i, r));
    for (int i = 0; i < microbatches - warmup; ++i) {
      list.push_back(Forward(warmup + i, r));
      list.push_back(Backward(i, r));
    }
    for (int i = microbatches - warmup; i < microbatches; ++i) list.push_back(Backward(i, r));
  }
  return s;
}

absl::StatusOr<PipelineSchedule> MakeInterleaved1F1B(int pp, int virtual_stages, int microbatches) {
  TY_RETURN_IF_ERROR(CheckCommonShape(kInterleavedKind, pp, microbatches));
  if (virtual_stages < 2) {
    return absl::InvalidArgumentError(absl::StrCat(kInterleavedKind, " needs virtual_stages >= 2, got ", virtual_stages,
                                                   " (one stage per rank is 1F1B)"));
  }
  if (microbatches % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kInterleavedKind, " needs microbatches to be a multiple of pp, got ",
                                                   microbatches, " microbatches for pp = ", pp));
  }
  const int v = virtual_stages;
  const int total = microbatches * v;  // forwards (and backwards) per rank
  PipelineSchedule s{kInterleavedKind, pp, v, microbatches, {}};
  s.ranks.resize(pp);
  for (int r = 0; r < pp; ++r) {
    // The k-th forward (backward) of rank r: groups of pp microbatches walk the chunks
    // in order (in reverse for backwards) before the next group starts.
    auto nth = [&](int k, PipeOp op) {
      const int round = (k / pp) % v;
      const int chunk = op == PipeOp::kForward ? round : v - 1 - round;
      return PipeAction{op, (k / (pp * v)) * pp + k % pp, chunk * pp + r};
    };
    // (v-1)*pp forwards take the first group of microbatches up to the last chunk; two
    // more per hop from the last rank (a forward out, a backward back) keep the rank
    // busy until the first gradient arrives.
    const int warmup = std::min((pp - r - 1) * 2 + (v - 1) * pp, total);
    std::vector<PipeAction>& list = s.ranks[r];
    for (int k = 0; k < warmup; ++k) list.push_back(nth(k, PipeOp::kForward));
    for (int i = 0; i < total - warmup; ++i) {
      list.push_back(nth(warmup + i, PipeOp::kForward));
      list.push_back(nth(i, PipeOp::kBackward));
    }
    for (int i = total - warmup; i < total; ++i) list.push_back(nth(i, PipeOp::kBackward));
  }
  return s;
}

absl::Status ValidateSchedule(const PipelineSchedule& schedule) { return Run(schedule, 1, 1).status(); }

absl::StatusOr<PipelineTimeline> Simulate(const PipelineSchedule& schedule, double forward_cost, double backward_cost) {
  if (!(forward_cost > 0) || !std::isfinite(forward_cost) || !(backward_cost > 0) || !std::isfinite(backward_cost)) {
    return absl::InvalidArgumentError(
        absl::StrCat("costs must be positive and finite, got forward ", forward_cost, " and backward ", backward_cost));
  }
  return Run(schedule, forward_cost, backward_cost);
}

std::string RenderTimeline(const PipelineTimeline& timeline, double tick) {
  auto cell = [tick](double t) { return static_cast<long long>(std::llround(t / tick)); };
  const long long cells = cell(timeline.makespan);
  size_t width = 1;
  for (const auto& rank : timeline.ranks) {
    for (const TimedAction& t : rank) width = std::max(width, Label(t.action, timeline.virtual_stages).size());
  }
  std::string out;
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    std::vector<std::string> row(cells, ".");
    for (const TimedAction& t : timeline.ranks[r]) {
      const long long first = cell(t.start), last = std::min(cell(t.end), cells);
      if (first >= last) continue;  // shorter than half a tick: not drawn
      row[first] = Label(t.action, timeline.virtual_stages);
      for (long long c = first + 1; c < last; ++c) row[c] = std::string(width, '-');
    }
    std::string line = absl::StrCat("rank ", r, ":");
    for (const std::string& c : row) absl::StrAppend(&line, " ", c, std::string(width - c.size(), ' '));
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace trainyard::engine
