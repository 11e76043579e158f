#include "worker/daemon/controller_link.h"

#include <set>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_join.h"
#include "common/grpc_status.h"

namespace trainyard {

struct ControllerLink::Stream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::ControllerMessage>> rw;
  // Guarded by the link's mu_.
  bool registered = false;
  bool done = false;
  absl::Duration heartbeat_interval;
};

grpc::ChannelArguments ControllerLink::ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC's own reconnect backoff (1 s doubling by 1.6 to 5 s here before) ran under the
  // link's and made workers take 10.6-12.6 s to return after a controller restart: a
  // call on a channel in TRANSIENT_FAILURE fails at once until the subchannel's next
  // attempt. Same bounds as the link's backoff (kept within ~2.4 s).
  // (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is gRPC's minimum connect timeout, 20 s, and
  // stays: a shorter one would abandon slow handshakes.)
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectInitialMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kReconnectMaxMs);
  return args;
}

std::shared_ptr<grpc::Channel> ControllerLink::MakeChannel(const std::string &target) {
  return MakeChannel(target, grpc::InsecureChannelCredentials());
}

std::shared_ptr<grpc::Channel> ControllerLink::MakeChannel(
    const std::string &target, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return grpc::CreateCustomChannel(target, std::move(credentials), ChannelArgs());
}

bool ControllerLink::RefusedRegistration(const grpc::Status &status) {
  switch (status.error_code()) {
    case grpc::StatusCode::ALREADY_EXISTS:     // the name is connected on another stream
    case grpc::StatusCode::PERMISSION_DENIED:  // the name is not the certificate's
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::INVALID_ARGUMENT:   // a Register the controller cannot take
    case grpc::StatusCode::FAILED_PRECONDITION:
      return true;
    default:  // UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED...: the link, not the request
      return false;
  }
}

ControllerLink::ControllerLink(Options options, std::shared_ptr<grpc::Channel> channel,
                               JobRunner *runner, EventOutbox *outbox, Clock *clock)
    : options_(std::move(options)),
      stub_(v1::WorkerService::NewStub(channel)),
      runner_(runner),
      outbox_(outbox),
      clock_(clock) {}

ControllerLink::~ControllerLink() { Stop(); }

void ControllerLink::Start() {
  run_thread_ = std::thread([this] { Run(); });
}

void ControllerLink::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (current_ != nullptr) current_->context.TryCancel();
  }
  if (run_thread_.joinable()) run_thread_.join();
}

bool ControllerLink::registered() const {
  absl::MutexLock lock(&mu_);
  return current_ != nullptr && current_->registered && !current_->done;
}

int ControllerLink::connects() const {
  absl::MutexLock lock(&mu_);
  return connects_;
}

bool ControllerLink::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  force_flush_ = true;
  return clock_->AwaitWithDeadline(
      &mu_, absl::Condition(+[](EventOutbox *outbox) { return outbox->Empty(); }, outbox_),
      clock_->Now() + timeout);
}

void ControllerLink::Run() {
  std::minstd_rand rng(std::random_device{}());
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    const absl::Time started = clock_->Now();
    ServeStream();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    // A stream that stayed up a while was a success: start the backoff afresh.
    if (clock_->Now() - started > options_.max_backoff) backoff = options_.initial_backoff;
    absl::Duration wait = backoff;
    if (options_.backoff_jitter > 0) {
      std::uniform_real_distribution<double> jitter(1 - options_.backoff_jitter,
                                                    1 + options_.backoff_jitter);
      wait = backoff * jitter(rng);
    }
    spdlog::info("controller stream closed; reconnecting in {}", absl::FormatDuration(wait));
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&stopping_), clock_->Now() + wait);
    if (stopping_) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void ControllerLink::ServeStream() {
  Stream stream;
  stream.heartbeat_interval = options_.heartbeat_interval;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    current_ = &stream;
    ++connects_;
  }
  // While the controller is down the call waits for the channel instead of failing at
  // once: it starts as soon as gRPC's subchannel reconnects (its backoff is bounded by
  // ChannelArgs), not at the link's next backoff tick after that. Stop cancels it.
  stream.context.set_wait_for_ready(true);
  // Once per stream (a waiting call is one stream however long the controller is
  // away), so a worker pointed at the wrong address says what it waits for.
  spdlog::info("connecting to the controller; waiting for it while it is unreachable");
  stream.rw = stub_->Connect(&stream.context);
  std::thread writer([this, &stream] { WriteLoop(&stream); });

  v1::ControllerMessage msg;
  while (stream.rw->Read(&msg)) {
    switch (msg.msg_case()) {
      case v1::ControllerMessage::kRegisterAck: {
        absl::MutexLock lock(&mu_);
        stream.registered = true;
        if (msg.register_ack().heartbeat_interval_ms() > 0) {
          stream.heartbeat_interval =
              absl::Milliseconds(msg.register_ack().heartbeat_interval_ms());
        }
        spdlog::info("registered with controller as {} (heartbeat every {})",
                     options_.registration.name(), absl::FormatDuration(stream.heartbeat_interval));
        break;
      }
      case v1::ControllerMessage::kAssign: {
        const v1::Assign &a = msg.assign();
        spdlog::info("job={} attempt={} assign ranks [{}] world_size={} master={}:{}", a.job_id(),
                     a.attempt(), absl::StrJoin(a.ranks(), ","), a.world_size(), a.master_addr(),
                     a.master_port());
        absl::Status status = runner_->Assign(a);
        if (!status.ok()) {
          spdlog::error("job={} attempt={} assign failed: {}", a.job_id(), a.attempt(),
                        status.ToString());
        }
        break;
      }
      case v1::ControllerMessage::kCancel:
        spdlog::info("job={} attempt={} cancel: {}", msg.cancel().job_id(), msg.cancel().attempt(),
                     msg.cancel().reason());
        runner_->Cancel(msg.cancel());
        break;
      case v1::ControllerMessage::kCheckpoint:
        spdlog::info("job={} attempt={} checkpoint requested", msg.checkpoint().job_id(),
                     msg.checkpoint().attempt());
        runner_->RequestCheckpoint(msg.checkpoint());
        break;
      case v1::ControllerMessage::kEventAck: {
        absl::MutexLock lock(&mu_);  // so that Drain's condition is re-evaluated
        outbox_->Ack(msg.event_ack().batch_id());
        break;
      }
      default:
        spdlog::warn("ignoring controller message with no known payload");
        break;
    }
  }
  bool registered;
  {
    absl::MutexLock lock(&mu_);
    stream.done = true;
    registered = stream.registered;
  }
  // The call is over (Read returned false), so Finish returns its status at once: the
  // controller's own reason for ending the stream. Cancelling first would replace that
  // reason with CANCELLED, which is all a refused worker used to print.
  grpc::Status status = stream.rw->Finish();
  stream.context.TryCancel();  // unblocks a writer stuck on flow control
  writer.join();
  bool stopping;
  {
    absl::MutexLock lock(&mu_);
    current_ = nullptr;
    stopping = stopping_;
  }
  if (status.ok() || stopping) return;  // Stop() cancelled it: nothing to report
  if (!registered && RefusedRegistration(status)) {
    // Not a broken link: the controller read Register and said no. The link retries at
    // its backoff, so a worker whose old connection is half-open takes its name back once
    // the controller gives up on that connection; a real duplicate is refused each time.
    spdlog::error("the controller refused to register this worker as {}: {}{}", options_.registration.name(),
                  FromGrpcStatus(status).ToString(),
                  status.error_code() == grpc::StatusCode::ALREADY_EXISTS
                      ? "; retrying (a worker reconnecting behind its own stale connection gets its name back "
                        "once that connection falls silent)"
                      : "; retrying");
    return;
  }
  spdlog::warn("controller stream ended: {}", FromGrpcStatus(status).ToString());
}

void ControllerLink::WriteLoop(Stream *stream) {
  auto fail = [&](const char *what) {
    spdlog::warn("controller stream: writing {} failed", what);
    stream->context.TryCancel();
  };
  v1::WorkerMessage reg;
  *reg.mutable_register_() = options_.registration;
  std::set<std::pair<std::string, int>> running;
  for (auto &attempt : runner_->Running()) {
    running.insert({attempt.job_id(), attempt.attempt()});
    *reg.mutable_register_()->add_running() = attempt;
  }
  // Attempts that ended while the controller was away: their final states follow.
  for (auto &attempt : outbox_->EndedAttempts()) {
    if (!running.count({attempt.job_id(), attempt.attempt()})) *reg.mutable_register_()->add_running() = attempt;
  }
  if (!stream->rw->Write(reg)) return fail("Register");

  {
    // Nothing else goes out until the controller accepts the registration.
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Stream *s) { return s->registered || s->done; }, stream));
    if (stream->done) return;
  }
  for (auto &batch : outbox_->Unacked()) {
    v1::WorkerMessage m;
    *m.mutable_events() = std::move(batch);
    if (!stream->rw->Write(m)) return fail("resent EventBatch");
  }

  absl::Time next_heartbeat = clock_->Now();
  // Wakes the writer early: the stream ended, or events are pending and either a
  // full batch is waiting or Drain asked for a flush.
  auto wake_early = [this, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stream->done) return true;
    const absl::Time due = outbox_->NextDeadline();
    return due == absl::InfinitePast() || (force_flush_ && due != absl::InfiniteFuture());
  };
  while (true) {
    bool force;
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time wake = std::min(
          {next_heartbeat, outbox_->NextDeadline(), clock_->Now() + options_.outbox_poll});
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&wake_early), wake);
      if (stream->done) return;
      force = force_flush_;
      interval = stream->heartbeat_interval;
    }
    while (auto batch = outbox_->SealReady(clock_->Now(), force)) {
      v1::WorkerMessage m;
      *m.mutable_events() = std::move(*batch);
      if (!stream->rw->Write(m)) return fail("EventBatch");
    }
    if (clock_->Now() >= next_heartbeat) {
      v1::WorkerMessage m;
      m.mutable_heartbeat()->set_free_slots(runner_->FreeSlots());
      if (options_.gpu_samples) {
        for (v1::GpuSample &s : options_.gpu_samples()) *m.mutable_heartbeat()->add_gpus() = std::move(s);
      }
      if (!stream->rw->Write(m)) return fail("Heartbeat");
      next_heartbeat = clock_->Now() + interval;
    }
  }
}

}  // namespace trainyard
