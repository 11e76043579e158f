#include "server/state/event_hub.h"

#include <utility>
#include <vector>

#include "spdlog/spdlog.h"

namespace trainyard {

EventHub::Subscription::~Subscription() {
  if (hub_ != nullptr) hub_->Unsubscribe(job_id_, id_);
}

EventHub::EventHub() : thread_([this] { FanOut(); }) {}

EventHub::~EventHub() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void EventHub::AttachStore(JobStore* store, WatchCacheOptions options) {
  absl::MutexLock lock(&mu_);
  if (cache_owner_ != nullptr) return;
  cache_owner_ = std::make_unique<WatchCache>(store, options);
  cache_.store(cache_owner_.get(), std::memory_order_release);
}

void EventHub::DetachStore() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !in_round_; };
  mu_.Await(absl::Condition(&idle));
  cache_.store(nullptr, std::memory_order_release);
  cache_owner_.reset();
}

WatchCache* EventHub::cache() { return cache_.load(std::memory_order_acquire); }

std::unique_ptr<EventHub::Subscription> EventHub::Subscribe(const std::string& job_id,
                                                            std::function<void()> wake) {
  auto sub = std::make_unique<Subscription>();
  absl::MutexLock lock(&mu_);
  sub->hub_ = this;
  sub->job_id_ = job_id;
  sub->id_ = next_id_++;
  watchers_[job_id][sub->id_] = std::move(wake);
  return sub;
}

void EventHub::Unsubscribe(const std::string& job_id, uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = watchers_.find(job_id);
  if (it == watchers_.end()) return;
  it->second.erase(id);
  if (!it->second.empty()) return;
  watchers_.erase(it);
  // The fan-out thread drops the job's cached window unless a watcher came back.
  if (cache_owner_ != nullptr && queued_.insert(job_id).second) {
    queue_.push_back(job_id);
    ++enqueued_;
  }
}

void EventHub::AddCommitObserver(std::function<void(const std::string& job_id)> observer) {
  observers_.push_back(std::move(observer));
}

void EventHub::Notify(const std::string& job_id) {
  for (const auto& observer : observers_) observer(job_id);
  absl::MutexLock lock(&mu_);
  // A job with no watcher and no cached window has no one to tell.
  if (!watchers_.contains(job_id) && cache_owner_ == nullptr) return;
  if (!queued_.insert(job_id).second) return;  // its turn is still to come
  queue_.push_back(job_id);
  ++enqueued_;
}

void EventHub::MarkSettled(const std::string& job_id) {
  {
    absl::MutexLock lock(&mu_);
    settled_.insert(job_id);
  }
  Notify(job_id);
}

bool EventHub::IsSettled(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return settled_.contains(job_id);
}

void EventHub::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= target || stopping_; };
  mu_.Await(absl::Condition(&done));
}

void EventHub::FanOut() {
  std::vector<std::function<void()>> wakes;
  while (true) {
    std::string job_id;
    WatchCache* cache = nullptr;
    bool watched = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      in_round_ = true;
      job_id = std::move(queue_.front());
      queue_.pop_front();
      // Taken off the queue before the store is read: a commit from now on queues it
      // again, so no commit goes unseen.
      queued_.erase(job_id);
      cache = cache_owner_.get();
      auto it = watchers_.find(job_id);
      watched = it != watchers_.end();
      wakes.clear();
      if (watched) {
        for (const auto& [id, wake] : it->second) wakes.push_back(wake);
      }
    }
    if (cache != nullptr) {
      if (watched) {
        if (absl::Status s = cache->Refresh(job_id); !s.ok()) {
          // Its watchers read the store instead.
          spdlog::warn("job={}: watch cache: {}", job_id, std::string(s.message()));
        }
      } else {
        cache->Drop(job_id);
      }
    }
    for (auto& wake : wakes) wake();
    absl::MutexLock lock(&mu_);
    in_round_ = false;
    ++done_;
  }
}

}  // namespace trainyard
