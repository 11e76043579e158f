// Who is to blame for a hang: pure functions over flight-ring snapshots (flight_ring.h),
// so the watchdog's decision is tested with hand-built snapshots. Torch-free.
// Thread contract: pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/flight/flight_ring.h"

namespace trainyard::flight {

struct StallVerdict {
  int lagging_rank = -1;           // -1: unknown (e.g. the member is on another host)
  std::vector<int> waiting_ranks;  // members inside that seq (entered, not completed)
  std::vector<int> missing_ranks;  // members behind that seq (lagging_rank is the lowest)
  int members_seen = 0;            // rings that hold the group
  std::string summary;             // one line for the Stall message
};

// The waiting rank is stuck in collective `seq` (1-based) of group `group`, whose
// size is `group_size`. A member is any ring that registered a group of that name.
// Members with entered < seq never reached it: the lowest such rank is the lagging
// one (a peer that is further behind is the most likely cause). Members with
// entered == seq (or more) and completed < seq are waiting. When no member seen lags
// and fewer than group_size rings were seen, the culprit is off this host: -1.
// When every member seen entered the seq and stale_ns > 0, a member whose watchdog
// heartbeat (CLOCK_MONOTONIC, same host) is older than now_mono_ns - stale_ns is
// frozen (SIGSTOPped, or wedged so hard its watchdog stopped): the one with the oldest
// heartbeat is named lagging.
StallVerdict AnalyzeCollectiveStall(const std::vector<RingSnapshot>& rings, const std::string& group, std::uint64_t seq,
                                    std::int64_t group_size, std::int64_t now_mono_ns = 0, std::int64_t stale_ns = 0);

// The waiting rank `rank` (world rank) is stuck in `stuck`, a send/recv entry of its
// ring (group_name, op, peer, microbatch, p2p_seq). Its counterpart is the peer's
// op of the other direction with peer == rank and the same p2p_seq on the same group
// (send/recv pair in order: CollectiveGroup::SendAsync). From the peer's ring (its
// in-flight entry and the entries the snapshot holds):
//  - the peer waits in the counterpart too, or has completed it: nobody lags (-1),
//    unless the peer is frozen (heartbeat older than stale_ns, as above);
//  - otherwise the peer has not reached it and is the lagging rank; the summary says
//    what it does instead (its in-flight entry, or none and its step) and its last op
//    of that direction with this rank;
//  - the peer's ring is not among `rings` (another host): the peer is named, being
//    the only other party of the op.
// The summary starts "rank 3 (stage 1) waits in recv of microbatch 2 from rank 1 on
// group "pp0" (p2p seq 5); rank 1 (stage 0) ...", where a stage is the ring's
// member_rank in that group (omitted when unknown).
StallVerdict AnalyzeP2PStall(const std::vector<RingSnapshot>& rings, int rank, const EntrySnapshot& stuck,
                             std::int64_t now_mono_ns = 0, std::int64_t stale_ns = 0);

// "recv of microbatch 2 from rank 1 on group "pp0" (p2p seq 5)", or for a collective
// "allreduce on group "dp0" (seq 7)".
std::string DescribeEntry(const EntrySnapshot& e);

// Step s (1-based) is profiled when (s-1) mod freq is in [warmup, warmup+active).
bool IsProfiledStep(std::int64_t step, int freq, int warmup, int active);
// The first step of a profiling window, or 0 when `step` is not profiled.
std::int64_t ProfileWindowStart(std::int64_t step, int freq, int warmup, int active);

}  // namespace trainyard::flight
