#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "server/auth/watcher_cap.h"
#include "server/state/event_hub.h"
#include "server/store/job_store.h"

namespace trainyard {

// How a watch stream frames the events it sends.
enum class WatchFraming {
  kOnePerMessage,  // WatchJob: each stream message is one v1::Event
  kBatched,        // WatchJobBatched: each is a v1::WatchJobResponse of >= 1 events
};

// The most event bytes one WatchJobBatched message carries (at least one event is sent
// whatever its size); well under a client's default 4 MiB receive limit.
inline constexpr size_t kMaxWatchBatchBytes = 1 << 20;

// Starts one watch stream: replays committed events from `from_seq`, then follows new
// ones as the hub signals them, and finishes once the job is settled and everything
// stored has been sent. The reactor deletes itself when gRPC is done with it.
//
// Events come from the hub's watch cache, serialized once for every watcher (each
// cached event holds both its bare bytes and its bytes framed as an element of
// WatchJobResponse.events, so either framing is slices of the one serialization, never
// a copy); a watcher behind the cache's window, or of a job nothing was cached for,
// reads the store itself. One write is in flight at a time; new events only wake the
// stream (on the hub's fan-out thread). A batched stream's next write carries every
// event that was committed while the last one was in flight, up to kMaxWatchBatchBytes,
// so a watcher that falls behind catches up in fewer, larger writes.
// `lease` holds the caller's watcher slot until the stream is done.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartWatch(JobStore* store, EventHub* hub, std::string job_id,
                                                       int64_t from_seq, WatchFraming framing,
                                                       std::unique_ptr<WatcherCap::Lease> lease);

}  // namespace trainyard
