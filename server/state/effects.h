#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/state/worker_channel.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

// What one controller operation decided, under the state lock, that must happen in
// the outside world: store writes, then messages to workers, then watcher wake-ups.
// JobManager carries them out in that order after releasing the state lock (see
// job_manager.h). Recording keeps the order of the calls within each kind.
//
// Not thread-safe: a value built and consumed by one operation.
class Effects {
 public:
  struct Write {
    std::string job_id;
    std::optional<v1::Job> job;     // set: replace the job's row with it
    std::vector<v1::Event> events;  // else: append these events (one transaction)
  };
  struct Outbound {
    std::shared_ptr<WorkerChannel> channel;
    std::optional<v1::ControllerMessage> message;  // set: Send it; else Close
    std::string close_reason;
  };

  // Store writes, in order. Consecutive events of one job share one transaction.
  void PutJob(const v1::Job& job);
  void AppendEvent(const std::string& job_id, v1::Event event);
  // Worker messages, in order; a null channel (worker not connected) is dropped.
  void Send(const std::shared_ptr<WorkerChannel>& channel, v1::ControllerMessage message);
  void Close(const std::shared_ptr<WorkerChannel>& channel, const std::string& reason);
  // Watchers of `job_id` are woken (events were committed outside these writes).
  void Notify(const std::string& job_id);
  // The job ended and every rank is accounted for (EventHub::MarkSettled), after the
  // writes and the notifications.
  void Settle(const std::string& job_id);

  std::vector<Write>& writes() { return writes_; }
  std::vector<Outbound>& outbound() { return outbound_; }
  const std::vector<std::string>& notified() const { return notified_; }
  const std::vector<std::string>& settled() const { return settled_; }
  bool empty() const {
    return writes_.empty() && outbound_.empty() && notified_.empty() && settled_.empty();
  }

 private:
  std::vector<Write> writes_;
  std::vector<Outbound> outbound_;
  std::vector<std::string> notified_;
  std::vector<std::string> settled_;
};

}  // namespace trainyard
