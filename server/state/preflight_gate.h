#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/preflight_runner.h"
#include "common/base/process_launcher.h"
#include "server/metrics/controller_metrics.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

struct PreflightGateOptions {
  std::string binary;  // --preflight-binary: trainyard-train
  absl::Duration timeout = absl::Seconds(300);  // --preflight-timeout
  std::string spec_dir;  // an existing directory for the runner's JobSpec files
  int max_queued = 8;  // waiting preflights past this are refused
  // What this machine can give a runner; unset: ReadHostMemory() at each preflight.
  std::function<absl::StatusOr<HostMemory>()> host_memory;
};

// The compile preflight a job with compile.preflight=true must pass before the
// controller creates it: `trainyard-train SPEC.json --preflight --json` (3 steps of the
// job's structure on local CPU ranks). Preflights run one at a time, in arrival order,
// on the gate's own thread, never on a gRPC thread: each one starts the job's dp·tp
// ranks on this machine, so running several at once would only slow every one down.
// A runner whose ranks would need more memory than this machine can give is refused
// before it starts, and every runner runs under a memory cap (common/preflight_memory.h).
//
// Thread-safe. Destroy it before the launcher; the destructor Stop()s and joins.
class PreflightGate {
 public:
  using Done = std::function<void(absl::Status)>;
  // True once the caller no longer wants the answer (the RPC was cancelled).
  using CancelCheck = std::function<bool()>;

  // `clock` times each preflight (its timeout and duration).
  PreflightGate(ProcessLauncher* launcher, ControllerMetrics* metrics,
                PreflightGateOptions options, Clock* clock);
  ~PreflightGate();
  PreflightGate(const PreflightGate&) = delete;
  PreflightGate& operator=(const PreflightGate&) = delete;

  // Queues a preflight of `normalised` (a validated spec). `done` is called exactly
  // once, on the gate's thread, or inline when the request is refused at once:
  //   OK                   the preflight was clean;
  //   FAILED_PRECONDITION  "preflight findings, so no job was created: <findings>",
  //                        "preflight failed: <why>" (bad config, rank failure, timeout),
  //                        "preflight refused, so no job was created: <the memory the
  //                        runner's ranks need, more than this machine can give, and a
  //                        layout that fits or --shrink>" (no runner started),
  //                        or the runner binary is missing;
  //   RESOURCE_EXHAUSTED   max_queued preflights are already waiting;
  //   CANCELLED            `cancelled` turned true first (the runner was killed);
  //   UNAVAILABLE          the gate is stopping.
  void Check(v1::JobSpec normalised, CancelCheck cancelled, Done done);

  // Kills the preflight in flight and refuses the queued and later ones (UNAVAILABLE).
  // Idempotent; returns once every `done` of a queued request has been called.
  void Stop();

 private:
  struct Request {
    v1::JobSpec spec;
    CancelCheck cancelled;
    Done done;
  };

  void Loop();
  absl::Status RunOne(const Request& request);
  void Record(const std::string& outcome, absl::Duration elapsed, const absl::Status& status);

  ControllerMetrics* const metrics_;
  const PreflightGateOptions options_;
  const PreflightRunner runner_;

  absl::Mutex mu_;
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard
