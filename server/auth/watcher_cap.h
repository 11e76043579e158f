// The cap on concurrent watch streams (WatchJob and WatchJobBatched) per identity (owner): a watcher holds a
// Lease for as long as its stream lives, so one identity cannot pin an unbounded
// number of streams (each one a reactor, a hub subscription and store reads) on the
// controller.
//
// A Lease shares the counters, so a stream that outlives the service still releases
// its slot safely. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

class WatcherCap {
 public:
  static constexpr int kDefaultPerOwner = 64;

  // Releases its slot when destroyed.
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    friend class WatcherCap;
    struct Counts;
    Lease(std::shared_ptr<Counts> counts, std::string owner)
        : counts_(std::move(counts)), owner_(std::move(owner)) {}
    std::shared_ptr<Counts> counts_;
    std::string owner_;
  };

  // `per_owner` >= 1 streams at a time per owner.
  explicit WatcherCap(int per_owner = kDefaultPerOwner);

  // A slot for one more stream of `owner`, or RESOURCE_EXHAUSTED naming the owner and
  // the cap when it already holds per_owner of them.
  absl::StatusOr<std::unique_ptr<Lease>> Acquire(const std::string& owner);

  // Streams `owner` holds now.
  int Open(const std::string& owner) const;
  int per_owner() const { return per_owner_; }

 private:
  const int per_owner_;
  std::shared_ptr<Lease::Counts> counts_;
};

}  // namespace trainyard
