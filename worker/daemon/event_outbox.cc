#include "worker/daemon/event_outbox.h"

#include <map>
#include <set>
#include <string>
#include <utility>

namespace trainyard {

EventOutbox::EventOutbox(Options options) : options_(options) {}

void EventOutbox::Add(trainyard::v1::Event event, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) oldest_pending_ = now;
  pending_.push_back(std::move(event));
  ++held_events_;
  while (held_events_ > options_.max_held_events && !unacked_.empty()) {
    int n = unacked_.front().events_size();
    held_events_ -= n;
    dropped_events_ += n;
    unacked_.pop_front();
  }
}

std::optional<trainyard::v1::EventBatch> EventOutbox::SealReady(absl::Time now, bool force) {
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) return std::nullopt;
  bool due = force || static_cast<int>(pending_.size()) >= options_.max_batch_events ||
             now - oldest_pending_ >= options_.flush_interval;
  if (!due) return std::nullopt;
  trainyard::v1::EventBatch batch;
  batch.set_batch_id(next_batch_id_++);
  size_t n = std::min(pending_.size(), static_cast<size_t>(options_.max_batch_events));
  for (size_t i = 0; i < n; ++i) *batch.add_events() = std::move(pending_[i]);
  pending_.erase(pending_.begin(), pending_.begin() + n);
  // Whatever is left over was already waiting, so it stays due at the old time.
  unacked_.push_back(batch);
  return batch;
}

absl::Time EventOutbox::NextDeadline() const {
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) return absl::InfiniteFuture();
  if (static_cast<int>(pending_.size()) >= options_.max_batch_events) return absl::InfinitePast();
  return oldest_pending_ + options_.flush_interval;
}

void EventOutbox::Ack(int64_t batch_id) {
  absl::MutexLock lock(&mu_);
  for (auto it = unacked_.begin(); it != unacked_.end(); ++it) {
    if (it->batch_id() == batch_id) {
      held_events_ -= it->events_size();
      unacked_.erase(it);
      return;
    }
  }
}

std::vector<trainyard::v1::EventBatch> EventOutbox::Unacked() const {
  absl::MutexLock lock(&mu_);
  return {unacked_.begin(), unacked_.end()};
}

std::vector<trainyard::v1::RunningAttempt> EventOutbox::EndedAttempts() const {
  absl::MutexLock lock(&mu_);
  std::map<std::pair<std::string, int>, std::set<int>> ended;
  auto note = [&ended](const trainyard::v1::Event& e) {
    if (!e.has_rank_state()) return;
    const auto state = e.rank_state().state();
    if (state == trainyard::v1::RankState::EXITED || state == trainyard::v1::RankState::FAILED ||
        state == trainyard::v1::RankState::KILLED) {
      ended[{e.job_id(), e.attempt()}].insert(e.rank());
    }
  };
  for (const auto& batch : unacked_) {
    for (const auto& e : batch.events()) note(e);
  }
  for (const auto& e : pending_) note(e);
  std::vector<trainyard::v1::RunningAttempt> out;
  for (const auto& [key, ranks] : ended) {
    trainyard::v1::RunningAttempt a;
    a.set_job_id(key.first);
    a.set_attempt(key.second);
    for (int r : ranks) a.add_ranks(r);
    a.set_ended(true);
    out.push_back(std::move(a));
  }
  return out;
}

bool EventOutbox::Empty() const {
  absl::MutexLock lock(&mu_);
  return pending_.empty() && unacked_.empty();
}

int64_t EventOutbox::dropped_events() const {
  absl::MutexLock lock(&mu_);
  return dropped_events_;
}

}  // namespace trainyard
