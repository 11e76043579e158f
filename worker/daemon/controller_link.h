#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "trainyard/v1/worker_service.grpc.pb.h"
#include "worker/daemon/event_outbox.h"
#include "worker/daemon/job_runner.h"

namespace trainyard {

// The worker's side of WorkerService.Connect. Keeps one stream open to the
// controller and reconnects with capped exponential backoff when it breaks. On
// each stream it sends Register (with the attempts still running here), waits
// for RegisterAck, resends every unacknowledged event batch in order, then
// sends new batches as the outbox seals them and a Heartbeat at the interval
// the controller asked for. Assign, Cancel and CheckpointRequest go to the JobRunner;
// EventAck to the outbox.
//
// Every time it reads or waits for (reconnect backoff, heartbeat and flush
// timing, Drain's timeout) comes from the injected Clock.
//
// Thread contract: public methods are thread-safe. One long-lived thread connects
// and reads (so Assign, Cancel and RequestCheckpoint run on it); one writer thread per
// stream does every Write, so no lock is held across an RPC. mu_ guards the link's
// state and is taken before the outbox's own lock (never the other way round);
// EventAck is applied to the outbox under mu_ so that Drain's wait sees it.
class ControllerLink {
 public:
  // Reconnect backoff bounds, for the link and for gRPC's own subchannel (ChannelArgs).
  static constexpr int kReconnectInitialMs = 200;
  static constexpr int kReconnectMaxMs = 2000;

  struct Options {
    // name, slots, address, rendezvous ports, device; `running` is filled per
    // connect.
    trainyard::v1::Register registration;
    absl::Duration initial_backoff = absl::Milliseconds(kReconnectInitialMs);
    // The cap bounds how long a worker takes to notice that a controller is back (a
    // restart): at most max_backoff·(1 + jitter) ≈ 2.4 s after it is.
    absl::Duration max_backoff = absl::Milliseconds(kReconnectMaxMs);
    // Each wait is the backoff times a uniform factor in [1 - jitter, 1 + jitter].
    double backoff_jitter = 0.2;
    // Used until the controller's RegisterAck says otherwise.
    absl::Duration heartbeat_interval = absl::Seconds(1);
    // How often the writer looks for events added to the outbox since it last
    // looked (adding an event does not wake it).
    absl::Duration outbox_poll = absl::Milliseconds(20);
    // The newest reading of each offered GPU (GpuSampler::Latest), sent with every
    // Heartbeat; empty (no GPUs) when unset. Called on the writer thread.
    std::function<std::vector<trainyard::v1::GpuSample>()> gpu_samples;
  };

  // Insecure channel with keepalive, so a dead controller breaks the stream.
  static std::shared_ptr<grpc::Channel> MakeChannel(const std::string &target);
  // The same with `credentials` (the worker's mutual TLS, common/tls_files.h).
  static std::shared_ptr<grpc::Channel> MakeChannel(
      const std::string &target, std::shared_ptr<grpc::ChannelCredentials> credentials);
  // The arguments MakeChannel uses: keepalive, and gRPC's reconnect backoff bounded
  // like the link's.
  static grpc::ChannelArguments ChannelArgs();

  ControllerLink(Options options, std::shared_ptr<grpc::Channel> channel, JobRunner *runner,
                 EventOutbox *outbox, Clock *clock);
  ~ControllerLink();  // Stop()
  ControllerLink(const ControllerLink &) = delete;
  ControllerLink &operator=(const ControllerLink &) = delete;

  void Start();
  // Flushes pending events and waits until the controller acknowledged every
  // batch or `timeout` passed on the clock; true when everything was acknowledged.
  bool Drain(absl::Duration timeout);
  void Stop();

  // True while a stream is registered with the controller.
  bool registered() const;
  // Whether a stream that ended before its RegisterAck with `status` was the controller
  // refusing the registration (a name already connected, a name not the certificate's,
  // a Register it cannot take) rather than a broken link. Either way the link retries;
  // a refusal is logged as an error with the controller's reason.
  static bool RefusedRegistration(const grpc::Status &status);
  // Streams opened so far (for tests and logs).
  int connects() const;

 private:
  struct Stream;
  void Run();
  void ServeStream();
  void WriteLoop(Stream *stream);

  const Options options_;
  const std::unique_ptr<trainyard::v1::WorkerService::Stub> stub_;
  JobRunner *const runner_;
  EventOutbox *const outbox_;
  Clock *const clock_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool force_flush_ ABSL_GUARDED_BY(mu_) = false;
  Stream *current_ ABSL_GUARDED_BY(mu_) = nullptr;
  int connects_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread run_thread_;
};

}  // namespace trainyard
