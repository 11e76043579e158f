#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/support/slice.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/store/job_store.h"

namespace trainyard {

// One committed event as the watch streams send it, serialized once and shared, by
// reference count, by every watcher: `framed` is the event as one element of
// v1::WatchJobResponse.events (the field's tag, the length, then the serialized
// v1::Event), so a WatchJobBatched message is the concatenation of its events' framed
// slices; `bytes` is a slice of the same memory holding the bare v1::Event, a WatchJob
// message.
struct CachedEvent {
  int64_t seq = 0;
  grpc::Slice framed;
  grpc::Slice bytes;
};

struct WatchCacheOptions {
  // Per job: at most this many of its newest events, and at most this many bytes of
  // them (the oldest go first). A watcher further behind reads the store.
  size_t max_events = 4096;
  size_t max_bytes = 1 << 20;
};

// The recently committed events of the jobs being watched, serialized once: the
// watch cache of the Kubernetes API server. EventHub's fan-out thread fills it
// (Refresh, one store read per job per wake-up round, not one per watcher) before it
// wakes the job's watchers; watchers copy slices out of it (Read) under a reader lock
// that no writer of the store ever holds. Each job's events are kept gapless and in
// seq order: a batch that does not follow on restarts that job's window.
//
// Only watched jobs have a window (the hub drops it when the last watcher goes), so
// memory is bounded by max_bytes per watched job. Thread-safe. Refresh and Drop are
// meant for one thread (the hub's); Read for any.
class WatchCache {
 public:
  explicit WatchCache(JobStore* store, WatchCacheOptions options = {});

  // Reads what the store committed for `job_id` after the newest cached event (with
  // none cached: its newest `max_events`) and appends it, each event serialized once.
  // On an error the job's window is dropped, so its watchers read the store.
  absl::Status Refresh(const std::string& job_id);
  // Forgets the job's window (no one watches it).
  void Drop(const std::string& job_id);

  // Appends to `out` the cached events of `job_id` from `from_seq` on, at most `max`.
  // False when the cache cannot answer for `from_seq` (nothing cached for the job, or
  // `from_seq` is older than its oldest cached event): the caller reads the store.
  // True with nothing appended: nothing after `from_seq` is cached yet.
  bool Read(const std::string& job_id, int64_t from_seq, size_t max, std::vector<CachedEvent>* out);

  // Jobs with a window, and their events in all (tests, diagnostics).
  size_t jobs() ABSL_LOCKS_EXCLUDED(mu_);
  size_t events() ABSL_LOCKS_EXCLUDED(mu_);

  // Serializes `event` once, in both framings.
  static CachedEvent Serialize(const v1::Event& event);

 private:
  struct Window {
    std::deque<CachedEvent> events;  // consecutive seqs
    size_t bytes = 0;
  };
  // The newest cached seq of `job_id`, 0 when none is.
  int64_t LastSeq(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  void Append(const std::string& job_id, std::vector<CachedEvent> batch) ABSL_LOCKS_EXCLUDED(mu_);

  JobStore* const store_;
  const WatchCacheOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
