#include "server/state/watch_cache.h"

#include <algorithm>
#include <utility>

namespace trainyard {
namespace {

// Store reads of one refresh, at most this many events each.
constexpr int kReadChunk = 1024;

}  // namespace

WatchCache::WatchCache(JobStore* store, WatchCacheOptions options)
    : store_(store), options_(options) {}

CachedEvent WatchCache::Serialize(const v1::Event& event) {
  std::string bytes = event.SerializeAsString();
  CachedEvent out;
  out.seq = event.seq();
  out.bytes = grpc::Slice(bytes);
  return out;
}

int64_t WatchCache::LastSeq(const std::string& job_id) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = windows_.find(job_id);
  if (it == windows_.end() || it->second.events.empty()) return 0;
  return it->second.events.back().seq;
}

absl::Status WatchCache::Refresh(const std::string& job_id) {
  int64_t from = LastSeq(job_id) + 1;
  if (from == 1) {
    // Nothing cached: start at the job's newest events; older ones stay in the store.
    const int64_t last = store_->LastSeq(job_id);
    from = std::max<int64_t>(1, last - static_cast<int64_t>(options_.max_events) + 1);
  }
  while (true) {
    auto events = store_->ReadEvents(job_id, from, kReadChunk);
    if (!events.ok()) {
      Drop(job_id);
      return events.status();
    }
    if (events->empty()) return absl::OkStatus();
    std::vector<CachedEvent> batch;
    batch.reserve(events->size());
    // Serialized outside the lock: readers never wait for it.
    for (const v1::Event& e : *events) batch.push_back(Serialize(e));
    from = batch.back().seq + 1;
    const bool more = static_cast<int>(batch.size()) == kReadChunk;
    Append(job_id, std::move(batch));
    if (!more) return absl::OkStatus();
  }
}

void WatchCache::Append(const std::string& job_id, std::vector<CachedEvent> batch) {
  absl::MutexLock lock(&mu_);
  Window& w = windows_[job_id];
  if (!w.events.empty() && batch.front().seq != w.events.back().seq + 1) {
    // Not the next seq (cannot happen with a gapless store): start the window afresh.
    w.events.clear();
    w.bytes = 0;
  }
  for (CachedEvent& e : batch) {
    w.bytes += e.bytes.size();
    w.events.push_back(std::move(e));
  }
  while (!w.events.empty() &&
         (w.events.size() > options_.max_events || w.bytes > options_.max_bytes)) {
    w.bytes -= w.events.front().bytes.size();
    w.events.pop_front();
  }
}

void WatchCache::Drop(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  windows_.erase(job_id);
}

bool WatchCache::Read(const std::string& job_id, int64_t from_seq, size_t max, std::vector<CachedEvent>* out) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = windows_.find(job_id);
  if (it == windows_.end() || it->second.events.empty()) return false;
  const std::deque<CachedEvent>& events = it->second.events;
  const int64_t first = events.front().seq;
  if (from_seq < first) return false;
  const int64_t skip = from_seq - first;
  if (skip >= static_cast<int64_t>(events.size())) return true;  // nothing newer yet
  const size_t n = std::min(max, events.size() - static_cast<size_t>(skip));
  auto begin = events.begin() + skip;
  out->insert(out->end(), begin, begin + static_cast<int64_t>(n));
  return true;
}

size_t WatchCache::jobs() {
  absl::ReaderMutexLock lock(&mu_);
  return windows_.size();
}

size_t WatchCache::events() {
  absl::ReaderMutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, w] : windows_) n += w.events.size();
  return n;
}

}  // namespace trainyard
