// The worker's controller end of WorkerService.Connect, in process, for the
// ControllerLink tests: it records every Register, heartbeat and EventBatch, and does
// on each stream what the test's Plan says (ack or not, close, hold, send an Assign and
// a CheckpointRequest).
// Times are read from the injected clock (a RecordingClock or the real one).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard::testing {

// What the fake controller does on stream N.
struct Plan {
  bool close_after_register = false;  // end the stream at once, without RegisterAck
  bool hold_until_released = false;   // keep it open, without RegisterAck, until Release()
  int heartbeat_interval_ms = 3600 * 1000;
  bool ack_events = true;
  bool close_on_first_batch = false;  // end the stream, unacked, on its first EventBatch
  std::optional<v1::Assign> assign;   // sent right after the RegisterAck
  std::optional<v1::CheckpointRequest> checkpoint;  // sent right after the Assign
  // End the stream with this status instead of a RegisterAck, as the controller refuses
  // a Register (ALREADY_EXISTS: the name is another connected worker's).
  std::optional<grpc::Status> refuse_register;
};

class FakeController final : public v1::WorkerService::Service {
 public:
  FakeController(Clock *clock, std::function<Plan(int stream)> plan)
      : clock_(clock), plan_(std::move(plan)) {}

  grpc::Status Connect(
      grpc::ServerContext *context,
      grpc::ServerReaderWriter<v1::ControllerMessage, v1::WorkerMessage> *stream) override {
    v1::WorkerMessage msg;
    if (!stream->Read(&msg) || !msg.has_register_()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "expected Register first");
    }
    int index;
    {
      absl::MutexLock lock(&mu_);
      index = static_cast<int>(connects_.size());
      connects_.push_back(clock_->Now());
      registers_.push_back(msg.register_());
    }
    const Plan plan = plan_(index);
    if (plan.close_after_register) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "bye");
    if (plan.refuse_register) return *plan.refuse_register;
    if (plan.hold_until_released) {
      absl::MutexLock lock(&mu_);
      while (!released_ && !context->IsCancelled()) {
        mu_.AwaitWithTimeout(absl::Condition(&released_), absl::Milliseconds(10));
      }
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "released");
    }
    v1::ControllerMessage ack;
    ack.mutable_register_ack()->set_heartbeat_interval_ms(plan.heartbeat_interval_ms);
    stream->Write(ack);
    if (plan.assign) {
      v1::ControllerMessage assign;
      *assign.mutable_assign() = *plan.assign;
      stream->Write(assign);
    }
    if (plan.checkpoint) {
      v1::ControllerMessage checkpoint;
      *checkpoint.mutable_checkpoint() = *plan.checkpoint;
      stream->Write(checkpoint);
    }
    while (stream->Read(&msg)) {
      if (msg.has_heartbeat()) {
        absl::MutexLock lock(&mu_);
        heartbeats_.push_back({clock_->Now(), msg.heartbeat().free_slots()});
      } else if (msg.has_events()) {
        {
          absl::MutexLock lock(&mu_);
          batches_.push_back({index, msg.events()});
        }
        if (plan.close_on_first_batch) return grpc::Status::OK;
        if (plan.ack_events) {
          v1::ControllerMessage event_ack;
          event_ack.mutable_event_ack()->set_batch_id(msg.events().batch_id());
          stream->Write(event_ack);
        }
      }
    }
    return grpc::Status::OK;
  }

  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  // Waits until pred() holds under mu_; false after a cutoff that only bounds how
  // long a failing test hangs.
  bool WaitFor(std::function<bool()> pred) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&pred), absl::Seconds(20));
  }

  absl::Mutex mu_;
  std::vector<absl::Time> connects_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Register> registers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<absl::Time, int>> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, v1::EventBatch>> batches_ ABSL_GUARDED_BY(mu_);

 private:
  Clock *const clock_;
  const std::function<Plan(int)> plan_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainyard::testing
