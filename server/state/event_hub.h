#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/state/watch_cache.h"
#include "server/store/job_store.h"

namespace trainyard {

// Fans committed events out to the watchers of a job, and remembers which jobs are
// settled (ended, with every rank accounted for), so a watcher knows when nothing
// more can come.
//
// Notify and MarkSettled only queue the job and return: the writer that committed
// (under JobManager's commit lock) never runs a watcher. The hub's own fan-out thread
// takes each queued job (a job notified again before its turn is queued once), brings
// the job's watch cache up to date when one is attached (one store read and one
// serialization per event for all its watchers, WatchCache), then calls the job's
// wake callbacks. Watchers copy the serialized events out of the cache, or read the
// store themselves when they are behind its window, so a slow watcher never holds up
// ingestion or another watcher. Thread-safe.
class EventHub {
 public:
  class Subscription {
   public:
    ~Subscription();
   private:
    friend class EventHub;
    EventHub* hub_ = nullptr;
    std::string job_id_;
    uint64_t id_ = 0;
  };

  EventHub();
  // Stops the fan-out thread; wake-ups still queued are dropped.
  ~EventHub();

  // Keeps a watch cache of `store`'s events for the watched jobs from now on (the
  // JobService that serves WatchJob attaches its store). Once; later calls do nothing.
  void AttachStore(JobStore* store, WatchCacheOptions options = {}) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops keeping the cache, once the fan-out round under way (if any) is over; the
  // store may then go. No watcher may be reading the cache (the server is down).
  void DetachStore() ABSL_LOCKS_EXCLUDED(mu_);
  // The cache, or null before AttachStore.
  WatchCache* cache() ABSL_LOCKS_EXCLUDED(mu_);

  // `wake` runs on the hub's thread; it must be cheap and must not call back into the
  // hub's Subscribe or Unsubscribe.
  std::unique_ptr<Subscription> Subscribe(const std::string& job_id,
                                          std::function<void()> wake);
  // Each observer is called (on the committing thread, under JobManager's commit lock)
  // with the job of every Notify: it must only queue the job and return. Add them before
  // anything can Notify from another thread (before the controller serves): the
  // TensorBoard exporter, webhooks. They are never removed: each outlives the hub's use.
  void AddCommitObserver(std::function<void(const std::string& job_id)> observer);
  void Notify(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Settled at once (IsSettled); the watchers are woken as by Notify.
  void MarkSettled(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsSettled(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until every wake-up queued before the call has run (tests).
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Unsubscribe(const std::string& job_id, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void FanOut() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, absl::flat_hash_map<uint64_t, std::function<void()>>>
      watchers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> settled_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<WatchCache> cache_owner_ ABSL_GUARDED_BY(mu_);
  std::atomic<WatchCache*> cache_{nullptr};  // cache_owner_, read without the lock
  // Jobs to fan out, in the order first notified; each at most once.
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;  // wake-up rounds queued, ever
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;      // ... and finished
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool in_round_ ABSL_GUARDED_BY(mu_) = false;  // the fan-out thread is between turns' locks
  std::vector<std::function<void(const std::string&)>> observers_;  // added before serving
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace trainyard
