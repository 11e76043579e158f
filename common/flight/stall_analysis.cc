#include "common/flight/stall_analysis.h"

#include <algorithm>

namespace trainyard::flight {
namespace {

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return "[" + s + "]";
}

}  // namespace

StallVerdict AnalyzeCollectiveStall(const std::vector<RingSnapshot>& rings, const std::string& group,
                                    std::uint64_t seq, std::int64_t group_size, std::int64_t now_mono_ns,
                                    std::int64_t stale_ns) {
  StallVerdict v;
  std::uint64_t lowest_entered = seq;
  for (const RingSnapshot& r : rings) {
    const int g = r.FindGroup(group);
    if (g < 0) continue;
    ++v.members_seen;
    const GroupSnapshot& gs = r.groups[g];
    if (gs.entered < seq) {
      v.missing_ranks.push_back(r.rank);
      // The furthest behind wins; ties go to the lowest rank.
      if (v.lagging_rank < 0 || gs.entered < lowest_entered) {
        v.lagging_rank = r.rank;
        lowest_entered = gs.entered;
      }
    } else if (gs.completed < seq) {
      v.waiting_ranks.push_back(r.rank);
    }
  }
  std::sort(v.waiting_ranks.begin(), v.waiting_ranks.end());
  std::sort(v.missing_ranks.begin(), v.missing_ranks.end());
  v.summary = group + " seq " + std::to_string(seq) + ": " + std::to_string(v.members_seen) + "/" +
              std::to_string(group_size) + " members' rings seen on this host; waiting " + Join(v.waiting_ranks) +
              "; not entered " + Join(v.missing_ranks);
  if (v.lagging_rank < 0 && stale_ns > 0) {
    std::int64_t oldest = 0;
    for (const RingSnapshot& r : rings) {
      if (r.FindGroup(group) < 0 || r.heartbeat_mono_ns <= 0) continue;
      if (now_mono_ns - r.heartbeat_mono_ns > stale_ns && (v.lagging_rank < 0 || r.heartbeat_mono_ns < oldest)) {
        v.lagging_rank = r.rank;
        oldest = r.heartbeat_mono_ns;
      }
    }
    if (v.lagging_rank >= 0) {
      // Frozen inside the collective is not waiting in it.
      v.waiting_ranks.erase(std::remove(v.waiting_ranks.begin(), v.waiting_ranks.end(), v.lagging_rank),
                            v.waiting_ranks.end());
      v.summary += "; every member entered it, but rank " + std::to_string(v.lagging_rank) +
                   " is frozen (no watchdog heartbeat for " + std::to_string((now_mono_ns - oldest) / 1000000) +
                   " ms): lagging rank " + std::to_string(v.lagging_rank);
      return v;
    }
  }
  if (v.lagging_rank >= 0) {
    v.summary += "; lagging rank " + std::to_string(v.lagging_rank) + " last entered seq " +
                 std::to_string(lowest_entered);
  } else if (v.members_seen < group_size) {
    v.summary += "; the lagging member is not on this host (unknown)";
  } else {
    v.summary += "; every member entered it (a peer is stuck inside the collective)";
  }
  return v;
}

bool IsProfiledStep(std::int64_t step, int freq, int warmup, int active) {
  if (step < 1 || freq < 1) return false;
  const std::int64_t phase = (step - 1) % freq;
  return phase >= warmup && phase < std::int64_t{warmup} + active;
}

std::int64_t ProfileWindowStart(std::int64_t step, int freq, int warmup, int active) {
  if (!IsProfiledStep(step, freq, warmup, active)) return 0;
  return step - ((step - 1) % freq) + warmup;
}

}  // namespace trainyard::flight
