#include "server/service/watch_reactor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "server/state/watch_cache.h"

namespace trainyard {
namespace {

class WatchReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchReactor(JobStore* store, EventHub* hub, std::string job_id, int64_t from_seq, WatchFraming framing,
               std::unique_ptr<WatcherCap::Lease> lease)
      : store_(store), hub_(hub), job_id_(std::move(job_id)), framing_(framing),
        next_seq_(std::max<int64_t>(from_seq, 1)), link_(std::make_shared<Link>()), lease_(std::move(lease)) {
    link_->reactor = this;
    subscription_ = hub->Subscribe(job_id_, [link = link_] { link->Wake(); });
    Pump();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "watcher went away"));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    subscription_.reset();
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;
    }
    delete this;
  }

 private:
  // Lets the hub wake this reactor without outliving it.
  struct Link {
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    void Wake() {
      absl::MutexLock lock(&mu);
      if (reactor != nullptr) reactor->Pump();
    }
  };

  void Pump() {
    absl::MutexLock lock(&mu_);
    PumpLocked();
  }

  // Fills buffer_ from next_seq_ on: from the cache when it answers for next_seq_
  // (and `from_store` is false), else from the store.
  absl::Status FillLocked(bool from_store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    buffer_.clear();
    pos_ = 0;
    WatchCache* cache = hub_->cache();
    if (!from_store && cache != nullptr && cache->Read(job_id_, next_seq_, kFill, &buffer_)) {
      return absl::OkStatus();
    }
    auto events = store_->ReadEvents(job_id_, next_seq_, kFill);
    if (!events.ok()) return events.status();
    for (const v1::Event& e : *events) buffer_.push_back(WatchCache::Serialize(e));
    return absl::OkStatus();
  }

  // Makes current_ the next message from buffer_[pos_] on (which holds an event): one
  // event, or a batch of every event committed after next_seq_ - 1 that fits in
  // kMaxWatchBatchBytes (at least one), refilling buffer_ as it goes. The shared bytes,
  // by reference: no copy, no serialization per watcher.
  void TakeMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (framing_ == WatchFraming::kOnePerMessage) {
      const CachedEvent& event = buffer_[pos_++];
      next_seq_ = event.seq + 1;
      current_ = grpc::ByteBuffer(&event.bytes, 1);
      return;
    }
    slices_.clear();  // each holds a reference: a refill below cannot free their bytes
    size_t bytes = 0;
    while (true) {
      if (pos_ >= buffer_.size()) {
        // The fill is used up and the batch has room: take what else is committed. A
        // read that fails ends the batch here; the next pump reads again and reports it.
        if (!FillLocked(/*from_store=*/false).ok() || buffer_.empty()) break;
      }
      const CachedEvent& event = buffer_[pos_];
      if (!slices_.empty() && bytes + event.framed.size() > kMaxWatchBatchBytes) break;
      ++pos_;
      bytes += event.framed.size();
      slices_.push_back(event.framed);
      next_seq_ = event.seq + 1;
    }
    current_ = grpc::ByteBuffer(slices_.data(), slices_.size());
    slices_.clear();
  }

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    bool from_store = false;
    while (true) {
      if (pos_ >= buffer_.size()) {
        if (auto s = FillLocked(from_store); !s.ok()) {
          FinishLocked(ToGrpcStatus(s));
          return;
        }
      }
      if (pos_ < buffer_.size()) {
        TakeMessageLocked();
        writing_ = true;
        // One write in flight, without WriteOptions::set_buffer_hint: a hinted write's
        // OnWriteDone waits for the flush that only the next write would cause.
        StartWrite(&current_);
        return;
      }
      if (!hub_->IsSettled(job_id_)) return;  // the hub wakes us on the next event
      // Settled: anything committed before settling is now readable; send it first.
      if (store_->LastSeq(job_id_) < next_seq_) {
        FinishLocked(grpc::Status::OK);
        return;
      }
      from_store = true;  // the cache may not have caught up yet
    }
  }

  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  // Events taken from the cache or the store at a time.
  static constexpr int kFill = 128;

  JobStore* const store_;
  EventHub* const hub_;
  const std::string job_id_;
  const WatchFraming framing_;
  absl::Mutex mu_;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Link> link_;
  std::unique_ptr<EventHub::Subscription> subscription_;
  const std::unique_ptr<WatcherCap::Lease> lease_;  // released with the reactor, in OnDone
  std::vector<CachedEvent> buffer_ ABSL_GUARDED_BY(mu_);  // from buffer_[pos_] on, unsent
  size_t pos_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<grpc::Slice> slices_ ABSL_GUARDED_BY(mu_);  // scratch for a batch
  grpc::ByteBuffer current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartWatch(JobStore* store, EventHub* hub, std::string job_id,
                                                       int64_t from_seq, WatchFraming framing,
                                                       std::unique_ptr<WatcherCap::Lease> lease) {
  return new WatchReactor(store, hub, std::move(job_id), from_seq, framing, std::move(lease));
}

}  // namespace trainyard
