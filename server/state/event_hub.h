#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

// Wakes the watchers of a job when new events are committed for it, and remembers
// which jobs are settled (ended, with every rank accounted for), so a watcher knows
// when nothing more can come. Watchers read the events themselves from the store, so
// a slow watcher never holds up ingestion. Thread-safe; callbacks run on the
// notifying thread, outside the hub's lock.
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

  // `wake` must be cheap and must not call back into the hub.
  std::unique_ptr<Subscription> Subscribe(const std::string& job_id,
                                          std::function<void()> wake);
  void Notify(const std::string& job_id);
  void MarkSettled(const std::string& job_id);
  bool IsSettled(const std::string& job_id);

 private:
  void Unsubscribe(const std::string& job_id, uint64_t id);

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::string, absl::flat_hash_map<uint64_t, std::function<void()>>>
      watchers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> settled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
