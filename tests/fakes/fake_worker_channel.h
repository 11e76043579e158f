// A WorkerChannel that records what the controller sends to one worker stream: every
// ControllerMessage in order and every Close. An optional shared journal lets a test
// see sends interleaved with other recorded actions (store writes, for example).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/state/worker_channel.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard::testing {

class FakeWorkerChannel : public WorkerChannel {
 public:
  // Called on every Send with a one-line description ("assign job-1 attempt 1").
  using Journal = std::function<void(const std::string&)>;

  FakeWorkerChannel() = default;
  explicit FakeWorkerChannel(Journal journal) : journal_(std::move(journal)) {}

  void Send(v1::ControllerMessage message) override {
    if (journal_) journal_(Describe(message));
    absl::MutexLock lock(&mu_);
    sent_.push_back(std::move(message));
  }
  void Close(const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    closes_.push_back(reason);
  }

  std::vector<v1::ControllerMessage> sent() const {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  std::vector<std::string> closes() const {
    absl::MutexLock lock(&mu_);
    return closes_;
  }
  // The sent messages of one kind, e.g. Of(v1::ControllerMessage::kAssign).
  std::vector<v1::ControllerMessage> Of(v1::ControllerMessage::MsgCase kind) const {
    std::vector<v1::ControllerMessage> out;
    for (auto& m : sent()) {
      if (m.msg_case() == kind) out.push_back(m);
    }
    return out;
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    sent_.clear();
    closes_.clear();
  }

  static std::string Describe(const v1::ControllerMessage& m) {
    switch (m.msg_case()) {
      case v1::ControllerMessage::kAssign:
        return "assign " + m.assign().job_id() + " attempt " +
               std::to_string(m.assign().attempt());
      case v1::ControllerMessage::kCancel:
        return "cancel " + m.cancel().job_id() + " attempt " +
               std::to_string(m.cancel().attempt());
      case v1::ControllerMessage::kRegisterAck:
        return "register_ack";
      case v1::ControllerMessage::kEventAck:
        return "event_ack";
      default:
        return "other";
    }
  }

 private:
  const Journal journal_;
  mutable absl::Mutex mu_;
  std::vector<v1::ControllerMessage> sent_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> closes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::testing
