// The load benchmark's clients (bench/load_bench.cc): synthetic workers that speak
// WorkerService.Connect without ranks, heartbeat-only workers, watchers on the gRPC callback API that check
// every event arrives once and in order, a lock-free latency histogram and /proc reads.
#pragma once

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/proto_time.h"
#include "trainyard/v1/job_service.grpc.pb.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard::bench {

// Latency samples in microseconds: log-spaced buckets, lock-free.
class LatencyHistogram {
 public:
  void Add(absl::Duration d) {
    const double us = std::max(1.0, absl::ToDoubleMicroseconds(d));
    int b = static_cast<int>(std::log(us) / std::log(kGrowth));
    b = std::clamp(b, 0, kBuckets - 1);
    buckets_[b].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  int64_t count() const { return count_.load(); }
  // The upper edge of the bucket holding quantile q, in milliseconds.
  double QuantileMs(double q) const {
    const int64_t n = count_.load();
    if (n == 0) return 0;
    int64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += buckets_[b].load();
      if (seen >= q * n) return std::pow(kGrowth, b + 1) / 1000.0;
    }
    return std::pow(kGrowth, kBuckets) / 1000.0;
  }

 private:
  static constexpr double kGrowth = 1.05;  // 5 % resolution
  static constexpr int kBuckets = 400;     // up to ~3e8 us
  std::atomic<int64_t> buckets_[kBuckets] = {};
  std::atomic<int64_t> count_{0};
};

struct ProcStat {
  double cpu_s = 0;
  long rss_kb = 0;
  long hwm_kb = 0;
};

inline ProcStat ReadProc(int pid) {
  ProcStat out;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stol(field);
      if (i == 15) stime = std::stol(field);
    }
    out.cpu_s = static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) out.rss_kb = std::stol(line.substr(6));
    if (line.rfind("VmHWM:", 0) == 0) out.hwm_kb = std::stol(line.substr(6));
  }
  return out;
}

// One synthetic worker with one slot: registers, takes Assigns, acknowledges nothing
// itself, sends event batches and heartbeats on its Connect stream.
class SyntheticWorker {
 public:
  SyntheticWorker(std::shared_ptr<grpc::Channel> channel, std::string name)
      : name_(std::move(name)), stub_(v1::WorkerService::NewStub(channel)) {
    stream_ = stub_->Connect(&ctx_);
    v1::WorkerMessage reg;
    reg.mutable_register_()->set_name(name_);
    reg.mutable_register_()->set_slots(1);
    reg.mutable_register_()->set_address("127.0.0.1");
    reg.mutable_register_()->set_rendezvous_port_min(40000);
    reg.mutable_register_()->set_rendezvous_port_max(40099);
    reg.mutable_register_()->set_device("cpu");
    Write(reg);
    reader_ = std::thread([this] { ReadLoop(); });
    heartbeat_ = std::thread([this] {
      while (!stop_.load()) {
        v1::WorkerMessage hb;
        hb.mutable_heartbeat();
        Write(hb);
        for (int i = 0; i < 10 && !stop_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }

  ~SyntheticWorker() {
    stop_.store(true);
    heartbeat_.join();
    {
      absl::MutexLock lock(&write_mu_);
      stream_->WritesDone();
    }
    ctx_.TryCancel();
    reader_.join();
  }

  // Waits for the next Assign.
  v1::Assign NextAssign() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](std::deque<v1::Assign>* q) { return !q->empty(); }, &assigns_));
    v1::Assign a = assigns_.front();
    assigns_.pop_front();
    return a;
  }

  // Sends `n` events for the job (a RankState RUNNING first when `first`, then step
  // metrics from step `from_step`), all stamped now; waits while `window` batches are
  // unacknowledged.
  int64_t SendBatch(const v1::Assign& a, int n, int64_t from_step, int window) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this, window]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sent_ - acked_ < window; };
      mu_.Await(absl::Condition(&room));
    }
    v1::WorkerMessage m;
    v1::EventBatch* batch = m.mutable_events();
    const google::protobuf::Timestamp now = ToProtoTime(absl::Now());
    int64_t step = from_step;
    for (int i = 0; i < n; ++i) {
      v1::Event* e = batch->add_events();
      e->set_job_id(a.job_id());
      e->set_attempt(a.attempt());
      e->set_rank(0);
      e->set_source_seq(++source_seq_);
      *e->mutable_time() = now;
      auto* s = e->mutable_step_metrics();
      s->set_step(step++);
      s->set_loss(2.0);
      s->set_step_ms(100);
      s->set_tokens(2048);
    }
    SendEvents(&m);
    return step;
  }

  void SendRankState(const v1::Assign& a, v1::RankState::State state) {
    v1::WorkerMessage m;
    v1::Event* e = m.mutable_events()->add_events();
    e->set_job_id(a.job_id());
    e->set_attempt(a.attempt());
    e->set_rank(0);
    e->set_source_seq(++source_seq_);
    e->mutable_rank_state()->set_state(state);
    e->mutable_rank_state()->set_worker(name_);
    SendEvents(&m);
  }

  // Waits until every batch sent so far is acknowledged.
  void Drain() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return acked_ == sent_ || broken_; };
    mu_.Await(absl::Condition(&done));
  }
  bool broken() {
    absl::MutexLock lock(&mu_);
    return broken_;
  }

 private:
  void SendEvents(v1::WorkerMessage* m) {
    {
      absl::MutexLock lock(&mu_);
      m->mutable_events()->set_batch_id(++sent_);
    }
    Write(*m);
  }
  void Write(const v1::WorkerMessage& m) {
    absl::MutexLock lock(&write_mu_);
    if (!stream_->Write(m)) {
      absl::MutexLock l(&mu_);
      broken_ = true;
    }
  }
  void ReadLoop() {
    v1::ControllerMessage m;
    while (stream_->Read(&m)) {
      absl::MutexLock lock(&mu_);
      if (m.has_assign()) assigns_.push_back(m.assign());
      if (m.has_event_ack()) acked_ = std::max(acked_, m.event_ack().batch_id());
    }
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }

  const std::string name_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::ControllerMessage>> stream_;
  absl::Mutex write_mu_;
  absl::Mutex mu_;
  std::deque<v1::Assign> assigns_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  int64_t source_seq_ = 0;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::thread heartbeat_;
};

// Follows one job from seq 1 until its stream ends; checks seqs are gapless and counts
// step events, recording each one's lag from its worker's send time. gRPC's callback
// API, so 1,000 watchers share gRPC's few threads as an async client would (a thread
// per blocking reader costs this 2-core machine a context switch per event).
// WatchJobBatched (several events a message, what the clients use) or, with `batched`
// false, WatchJob (one event a message), so the two can be compared.
class Watcher {
 public:
  std::string job_id;
  int64_t steps = 0;
  int64_t gaps = 0;
  int64_t last_seq = 0;
  int64_t messages = 0;
  int64_t events = 0;  // every event received, step or not
  grpc::Status status;

  void Start(v1::JobService::Stub* stub, bool batched, LatencyHistogram* lag, std::atomic<int>* ready) {
    lag_ = lag;
    req_.set_id(job_id);
    req_.set_from_seq(1);
    if (batched) {
      batched_ = std::make_unique<Reactor<v1::WatchJobResponse>>(this);
      stub->async()->WatchJobBatched(&ctx_, &req_, batched_.get());
      batched_->Begin();
    } else {
      one_ = std::make_unique<Reactor<v1::Event>>(this);
      stub->async()->WatchJob(&ctx_, &req_, one_.get());
      one_->Begin();
    }
    ready->fetch_add(1);
  }
  void Join() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

 private:
  template <typename Message>
  class Reactor : public grpc::ClientReadReactor<Message> {
   public:
    explicit Reactor(Watcher* w) : w_(w) {}
    void Begin() {
      this->StartRead(&message_);
      this->StartCall();
    }
    void OnReadDone(bool ok) override {
      if (!ok) return;  // OnDone follows with the status
      ++w_->messages;
      if constexpr (std::is_same_v<Message, v1::Event>) {
        w_->Count(message_);
      } else {
        for (const v1::Event& e : message_.events()) w_->Count(e);
      }
      this->StartRead(&message_);
    }
    void OnDone(const grpc::Status& s) override { w_->Done(s); }

   private:
    Watcher* const w_;
    Message message_;
  };

  void Count(const v1::Event& event) {
    ++events;
    if (event.seq() != last_seq + 1) ++gaps;
    last_seq = event.seq();
    if (event.has_step_metrics()) {
      ++steps;
      if (lag_ != nullptr) lag_->Add(absl::Now() - FromProtoTime(event.time()));
    }
  }
  void Done(const grpc::Status& s) {
    absl::MutexLock lock(&mu_);
    status = s;
    done_ = true;
  }

  grpc::ClientContext ctx_;
  v1::WatchJobRequest req_;
  std::unique_ptr<Reactor<v1::Event>> one_;
  std::unique_ptr<Reactor<v1::WatchJobResponse>> batched_;
  LatencyHistogram* lag_ = nullptr;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// One simulated worker for the heartbeat phase: a WorkerService.Connect stream on the
// callback API (so 1,000 of them need no thread each) that registers with one CPU slot
// and then sends a Heartbeat whenever Beat is called, as a worker's daemon does at the
// interval the controller's RegisterAck names. Reads and drops what the controller sends.
class HeartbeatWorker : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::ControllerMessage> {
 public:
  void Start(v1::WorkerService::Stub* stub, const std::string& name) {
    v1::Register* reg = register_.mutable_register_();
    reg->set_name(name);
    reg->set_slots(1);
    reg->set_address("127.0.0.1");
    reg->set_rendezvous_port_min(40000);
    reg->set_rendezvous_port_max(40099);
    reg->set_device("cpu");
    heartbeat_.mutable_heartbeat()->set_free_slots(1);
    stub->async()->Connect(&ctx_, this);
    StartRead(&in_);
    {
      absl::MutexLock lock(&mu_);
      writing_ = true;
    }
    StartWrite(&register_);
    StartCall();
  }
  // Sends one heartbeat; false (nothing sent) while the previous write is in flight.
  bool Beat() {
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || done_) return false;
      writing_ = true;
    }
    StartWrite(&heartbeat_);
    return true;
  }
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (ok) ++written_;
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (in_.has_register_ack()) {
      absl::MutexLock lock(&mu_);
      interval_ms_ = in_.register_ack().heartbeat_interval_ms();
    }
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override {
    absl::MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
  }
  // The controller's heartbeat interval, once it acknowledged the registration (0 until then).
  int interval_ms() {
    absl::MutexLock lock(&mu_);
    return interval_ms_;
  }
  int64_t written() {
    absl::MutexLock lock(&mu_);
    return written_;
  }
  void Stop() {
    ctx_.TryCancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

 private:
  grpc::ClientContext ctx_;
  v1::WorkerMessage register_;
  v1::WorkerMessage heartbeat_;
  v1::ControllerMessage in_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int interval_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::bench
