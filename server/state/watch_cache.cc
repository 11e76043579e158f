#include "server/state/watch_cache.h"

#include <algorithm>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "trainyard/v1/job_service.pb.h"

namespace trainyard {
namespace {

// Store reads of one refresh, at most this many events each.
constexpr int kReadChunk = 1024;

}  // namespace

WatchCache::WatchCache(JobStore* store, WatchCacheOptions options)
    : store_(store), options_(options) {}

CachedEvent WatchCache::Serialize(const v1::Event& event) {
  using google::protobuf::io::CodedOutputStream;
  using google::protobuf::internal::WireFormatLite;
  const size_t size = event.ByteSizeLong();  // an event is far below 2 GiB (ingest caps it)
  const uint32_t tag = WireFormatLite::MakeTag(v1::WatchJobResponse::kEventsFieldNumber,
                                               WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  const size_t header = CodedOutputStream::VarintSize32(tag) + CodedOutputStream::VarintSize32(static_cast<uint32_t>(size));
  grpc::Slice framed(header + size);  // uninitialised; every byte is written below
  auto* p = const_cast<uint8_t*>(framed.begin());
  p = CodedOutputStream::WriteVarint32ToArray(tag, p);
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), p);
  event.SerializeWithCachedSizesToArray(p);
  CachedEvent out;
  out.seq = event.seq();
  out.bytes = framed.sub(header, header + size);
  out.framed = std::move(framed);
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
    w.bytes += e.framed.size();
    w.events.push_back(std::move(e));
  }
  while (!w.events.empty() &&
         (w.events.size() > options_.max_events || w.bytes > options_.max_bytes)) {
    w.bytes -= w.events.front().framed.size();
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
