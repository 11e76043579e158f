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
StallVerdict AnalyzeCollectiveStall(const std::vector<RingSnapshot>& rings, const std::string& group,
                                    std::uint64_t seq, std::int64_t group_size, std::int64_t now_mono_ns = 0,
                                    std::int64_t stale_ns = 0);

// Step s (1-based) is profiled when (s-1) mod freq is in [warmup, warmup+active).
bool IsProfiledStep(std::int64_t step, int freq, int warmup, int active);
// The first step of a profiling window, or 0 when `step` is not profiled.
std::int64_t ProfileWindowStart(std::int64_t step, int freq, int warmup, int active);

}  // namespace trainyard::flight
