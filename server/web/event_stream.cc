#include "server/web/event_stream.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/web/web_json.h"

namespace trainyard::web {

namespace {

constexpr int kReadChunk = 64;

// One stream's wake-up flag, set on the hub's thread (and by Stop).
struct Wake {
  absl::Mutex mu;
  bool woken ABSL_GUARDED_BY(mu) = false;
  void Set() {
    absl::MutexLock lock(&mu);
    woken = true;
  }
};

}  // namespace

// What the streams share with the registry: the count, the stop flag and each open
// stream's wake-up, so that Stop ends a stream that is waiting.
struct EventStreams::Shared {
  absl::Mutex mu;
  int open ABSL_GUARDED_BY(mu) = 0;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::flat_hash_set<Wake*> waiting ABSL_GUARDED_BY(mu);
};

namespace {

// Holds one of the bounded places from Open until the body is destroyed, whether it ran
// (a GET) or not (a HEAD, a client gone before the headers).
class Slot {
 public:
  explicit Slot(std::shared_ptr<EventStreams::Shared> shared) : shared_(std::move(shared)) {}
  ~Slot() {
    absl::MutexLock lock(&shared_->mu);
    --shared_->open;
  }
  EventStreams::Shared& shared() { return *shared_; }

 private:
  std::shared_ptr<EventStreams::Shared> shared_;
};

}  // namespace

std::string EventFrame(const v1::Event& event) {
  // The JSON is one line (proto_json prints no newlines), as SSE's data field needs.
  return absl::StrCat("id: ", event.seq(), "\nevent: event\ndata: ", EventJsonLine(event), "\n\n");
}

EventStreams::EventStreams(JobStore* store, EventHub* hub, int max_streams)
    : store_(store), hub_(hub), max_streams_(max_streams), shared_(std::make_shared<Shared>()) {}

void EventStreams::Stop() {
  absl::MutexLock lock(&shared_->mu);
  shared_->stopping = true;
  for (Wake* wake : shared_->waiting) wake->Set();
}

int EventStreams::open_streams() {
  absl::MutexLock lock(&shared_->mu);
  return shared_->open;
}

absl::StatusOr<StreamBody> EventStreams::Open(const std::string& job_id, int64_t after) {
  {
    absl::MutexLock lock(&shared_->mu);
    if (shared_->stopping) return absl::UnavailableError("the controller is stopping");
    if (shared_->open >= max_streams_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the controller already serves ", max_streams_,
          " event streams (each holds one of the web server's threads); poll /api/jobs/", job_id,
          "/events instead, or retry later"));
    }
    ++shared_->open;
  }
  JobStore* store = store_;
  EventHub* hub = hub_;
  auto slot = std::make_shared<Slot>(shared_);
  return StreamBody([store, hub, slot, job_id, after](const std::function<bool(std::string_view)>& write) {
    Shared* shared = &slot->shared();
    auto wake = std::make_shared<Wake>();
    // Cheap and non-blocking, as the hub requires: it only flags this stream.
    auto subscription = hub->Subscribe(job_id, [wake] { wake->Set(); });
    {
      absl::MutexLock lock(&shared->mu);
      shared->waiting.insert(wake.get());
    }
    struct Unlist {
      Shared* shared;
      Wake* wake;
      ~Unlist() {
        absl::MutexLock lock(&shared->mu);
        shared->waiting.erase(wake);
      }
    } unlist{shared, wake.get()};
    int64_t next = after + 1;
    bool from_store = false;
    std::string end;
    while (true) {
      {
        absl::MutexLock lock(&shared->mu);
        if (shared->stopping) {
          end = "event: end\ndata: {\"reason\":\"the controller is stopping\"}\n\n";
          break;
        }
      }
      {
        absl::MutexLock lock(&wake->mu);
        wake->woken = false;  // before the read: a wake-up during it is not lost
      }
      const bool settled = hub->IsSettled(job_id);
      std::vector<v1::Event> events;
      std::vector<CachedEvent> cached;
      WatchCache* cache = hub->cache();
      if (!from_store && cache != nullptr && cache->Read(job_id, next, kReadChunk, &cached)) {
        for (const CachedEvent& c : cached) {
          v1::Event e;
          std::string bytes(reinterpret_cast<const char*>(c.bytes.begin()), c.bytes.size());
          if (!e.ParseFromString(bytes)) break;  // cannot happen: the cache serialized it
          events.push_back(std::move(e));
        }
      } else {
        auto read = store->ReadEvents(job_id, next, kReadChunk);
        if (!read.ok()) {
          nlohmann::json why{{"error", std::string(read.status().message())}};
          end = absl::StrCat("event: error\ndata: ", why.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                             "\n\n");
          break;
        }
        events = std::move(*read);
      }
      from_store = false;
      for (const v1::Event& e : events) {
        if (!write(EventFrame(e))) return;  // the client went away
        next = e.seq() + 1;
      }
      if (!events.empty()) continue;
      if (settled) {
        // Anything committed before settling is readable now; the cache may lag.
        if (store->LastSeq(job_id) < next) {
          end = absl::StrCat("event: end\ndata: {\"last_seq\":", next - 1, "}\n\n");
          break;
        }
        from_store = true;
        continue;
      }
      bool woken = false;
      {
        absl::MutexLock lock(&wake->mu);
        woken = wake->mu.AwaitWithTimeout(absl::Condition(&wake->woken), kKeepAlive);
      }
      if (!woken && !write(": keep-alive\n\n")) return;
    }
    write(end);
  });
}

}  // namespace trainyard::web
