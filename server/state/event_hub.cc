#include "server/state/event_hub.h"

#include <vector>

namespace trainyard {

EventHub::Subscription::~Subscription() {
  if (hub_ != nullptr) hub_->Unsubscribe(job_id_, id_);
}

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
  if (it->second.empty()) watchers_.erase(it);
}

void EventHub::Notify(const std::string& job_id) {
  std::vector<std::function<void()>> wakes;
  {
    absl::MutexLock lock(&mu_);
    auto it = watchers_.find(job_id);
    if (it == watchers_.end()) return;
    for (const auto& [id, wake] : it->second) wakes.push_back(wake);
  }
  for (auto& wake : wakes) wake();
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

}  // namespace trainyard
