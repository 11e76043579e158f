#include "server/auth/watcher_cap.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {

struct WatcherCap::Lease::Counts {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, int> open ABSL_GUARDED_BY(mu);
};

WatcherCap::Lease::~Lease() {
  absl::MutexLock lock(&counts_->mu);
  auto it = counts_->open.find(owner_);
  if (it == counts_->open.end()) return;
  if (--it->second <= 0) counts_->open.erase(it);
}

WatcherCap::WatcherCap(int per_owner)
    : per_owner_(std::max(1, per_owner)), counts_(std::make_shared<Lease::Counts>()) {}

absl::StatusOr<std::unique_ptr<WatcherCap::Lease>> WatcherCap::Acquire(const std::string& owner) {
  absl::MutexLock lock(&counts_->mu);
  int& open = counts_->open[owner];
  if (open >= per_owner_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("owner ", owner, " already has ", open,
                     " watch streams open (WatchJob and WatchJobBatched together), the most one identity may; "
                     "end one first"));
  }
  ++open;
  return std::unique_ptr<Lease>(new Lease(counts_, owner));
}

int WatcherCap::Open(const std::string& owner) const {
  absl::MutexLock lock(&counts_->mu);
  auto it = counts_->open.find(owner);
  return it == counts_->open.end() ? 0 : it->second;
}

}  // namespace trainyard
