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

StallVerdict AnalyzeCollectiveStall(const std::vector<RingSnapshot>& rings, const std::string& group, std::uint64_t seq,
                                    std::int64_t group_size, std::int64_t now_mono_ns, std::int64_t stale_ns) {
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
    v.summary +=
        "; lagging rank " + std::to_string(v.lagging_rank) + " last entered seq " + std::to_string(lowest_entered);
  } else if (v.members_seen < group_size) {
    v.summary += "; the lagging member is not on this host (unknown)";
  } else {
    v.summary += "; every member entered it (a peer is stuck inside the collective)";
  }
  return v;
}

namespace {

const RingSnapshot* FindRing(const std::vector<RingSnapshot>& rings, int rank) {
  for (const RingSnapshot& r : rings) {
    if (r.rank == rank) return &r;
  }
  return nullptr;
}

// "rank 3 (stage 1)", or "rank 3" when the ring or its member_rank is unknown.
std::string RankAndStage(const RingSnapshot* ring, int rank, const std::string& group) {
  std::string s = "rank " + std::to_string(rank);
  const int g = ring != nullptr ? ring->FindGroup(group) : -1;
  if (g >= 0 && ring->groups[g].member_rank >= 0) s += " (stage " + std::to_string(ring->groups[g].member_rank) + ")";
  return s;
}

bool IsCounterpart(const EntrySnapshot& e, const std::string& group, const std::string& op, int rank) {
  return e.is_p2p() && e.group_name == group && e.op == op && e.peer == rank;
}

}  // namespace

std::string DescribeEntry(const EntrySnapshot& e) {
  const std::string group = "group \"" + e.group_name + "\"";
  if (!e.is_p2p()) return e.op + " on " + group + " (seq " + std::to_string(e.group_seq) + ")";
  return e.op + " of microbatch " + std::to_string(e.microbatch) + (e.op == "send" ? " to" : " from") + " rank " +
         std::to_string(e.peer) + " on " + group + " (p2p seq " + std::to_string(e.p2p_seq) + ")";
}

StallVerdict AnalyzeP2PStall(const std::vector<RingSnapshot>& rings, int rank, const EntrySnapshot& stuck,
                             std::int64_t now_mono_ns, std::int64_t stale_ns) {
  StallVerdict v;
  const std::string& group = stuck.group_name;
  const int peer = stuck.peer;
  const std::string want = stuck.op == "recv" ? "send" : "recv";
  const RingSnapshot* self = FindRing(rings, rank);
  const RingSnapshot* other = FindRing(rings, peer);
  v.waiting_ranks.push_back(rank);
  if (self != nullptr && self->FindGroup(group) >= 0) ++v.members_seen;
  v.summary = RankAndStage(self, rank, group) + " waits in " + DescribeEntry(stuck) + "; ";
  const std::string who = RankAndStage(other, peer, group);
  if (other == nullptr) {
    v.lagging_rank = peer;
    v.missing_ranks.push_back(peer);
    v.summary += who + "'s ring is not on this host: naming it, the only other party of the " + stuck.op +
                 ": lagging rank " + std::to_string(peer);
    return v;
  }
  if (other->FindGroup(group) < 0) {
    v.lagging_rank = peer;
    v.missing_ranks.push_back(peer);
    v.summary += who + " has no group \"" + group + "\" in its ring: lagging rank " + std::to_string(peer);
    return v;
  }
  ++v.members_seen;
  // The peer's counterpart: in flight, completed (the newest of that direction), or
  // not reached.
  const EntrySnapshot* last = nullptr;  // newest completed op of that direction
  for (const EntrySnapshot& e : other->entries) {
    if (e.end_ns != 0 && IsCounterpart(e, group, want, rank) && (last == nullptr || e.p2p_seq > last->p2p_seq)) {
      last = &e;
    }
  }
  const EntrySnapshot& current = other->inflight;
  const bool inside = current.id != 0 && IsCounterpart(current, group, want, rank) && current.p2p_seq == stuck.p2p_seq;
  const bool done = last != nullptr && last->p2p_seq >= stuck.p2p_seq;
  const bool frozen = stale_ns > 0 && other->heartbeat_mono_ns > 0 && now_mono_ns - other->heartbeat_mono_ns > stale_ns;
  const std::string frozen_text = frozen
                                      ? " and is frozen (no watchdog heartbeat for " +
                                            std::to_string((now_mono_ns - other->heartbeat_mono_ns) / 1000000) + " ms)"
                                      : "";
  auto mismatch = [&](const EntrySnapshot& e) {
    return e.microbatch == stuck.microbatch
               ? std::string()
               : " (microbatch " + std::to_string(e.microbatch) + " there, " + std::to_string(stuck.microbatch) +
                     " here: the two sides label their ops differently)";
  };
  if (inside || done) {
    if (inside) {
      v.waiting_ranks.push_back(peer);
      v.summary += who + " waits in the matching " + DescribeEntry(current) + " too" + mismatch(current);
    } else {
      v.summary += who + " has completed the matching " + want + " (p2p seq " + std::to_string(last->p2p_seq) + ")" +
                   mismatch(*last);
    }
    v.summary += frozen_text;
    if (frozen) {
      v.lagging_rank = peer;
      v.waiting_ranks.erase(std::remove(v.waiting_ranks.begin(), v.waiting_ranks.end(), peer), v.waiting_ranks.end());
      v.summary += ": lagging rank " + std::to_string(peer);
    } else {
      v.summary += "; no rank lags (the transport between them is stuck)";
    }
    std::sort(v.waiting_ranks.begin(), v.waiting_ranks.end());
    return v;
  }
  v.lagging_rank = peer;
  v.missing_ranks.push_back(peer);
  v.summary += who + " has not reached the matching " + want + " (";
  if (last != nullptr) {
    v.summary += "its last " + want + (want == "send" ? " to" : " from") + " rank " + std::to_string(rank) + " on \"" +
                 group + "\" was p2p seq " + std::to_string(last->p2p_seq) + ", microbatch " +
                 std::to_string(last->microbatch) + ")";
  } else {
    v.summary += "no " + want + (want == "send" ? " to" : " from") + " rank " + std::to_string(rank) +
                 " completed in its last " + std::to_string(other->entries.size()) + " entries)";
  }
  if (current.id != 0) {
    v.summary += " and waits in " + DescribeEntry(current);
  } else {
    v.summary += " and is in no collective or send/recv";
  }
  v.summary += " at step " + std::to_string(other->step) + frozen_text + ": lagging rank " + std::to_string(peer);
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
