// The engine's standalone runner, as torchrun is for PyTorch: runs N local
// trainyard-rank processes on a normalised JobSpec JSON with a TCPStore rendezvous on a
// free loopback port, and supervises them. Each rank is started as the worker daemon
// starts one (worker/launch/rank_launch.h: the same argv and thread environment) by the
// base library's process launcher, and its stdout is read through the rank line
// protocol (common/events/rank_line.h). Used by trainyard-train and trainyard-bench;
// needs no torch and no gRPC, so it builds on a GPU box with LibTorch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainyard/v1/event.pb.h"

namespace trainyard::engine {

struct LaunchOptions {
  std::string rank_binary;    // trainyard-rank
  std::string config_json;    // the resolved JobSpec (spec::ToJson), written to a temp file
  std::string device = "cpu";  // resources.device: which thread environment the ranks get
  int nproc = 1;
  int threads = 1;            // intra-op threads per rank
  int attempt = 1;            // --attempt (checkpoint directory and artifact names)
  std::string run_dir;        // --run-dir, "" for each rank's default
  std::string resume_path;    // --resume, "" for none
  std::vector<std::string> rank_args;  // passed to every rank (--save-init P, --load P)
  double kill_grace_s = 5.0;  // SIGTERM, then SIGKILL after this long
};

struct RankOutcome {
  int exit_code = -1;       // 128+signal when killed by a signal
  double peak_rss_mb = 0;   // from wait4's rusage
  std::string error;        // message of the rank's last "error" log event, if any
};

struct LaunchResult {
  int exit_code = 0;        // 0 only when every rank exited 0
  int failed_rank = -1;     // the first rank seen to fail, or -1
  bool interrupted = false; // stopped by SIGINT/SIGTERM
  std::string error;        // "rank 1 exited with code 1: <its error>"
  std::vector<RankOutcome> ranks;
  std::vector<std::pair<std::string, std::string>> rank_env;  // what the ranks were given
};

// Supervises one local gang. Not thread-safe; one Run at a time per process (the
// signal plumbing is process-wide).
class LocalLauncher {
 public:
  // Called on the launcher's thread for every event a rank writes, in order per rank,
  // with `rank` and `attempt` stamped. A line that is not an event goes to stderr as
  // "rank N: LINE"; an invalid event line as "rank N: invalid event line (WHY): LINE".
  using EventHandler = std::function<void(const v1::Event& event)>;

  // Spawns the ranks (rank i gets --rank i --local-rank i: one machine, so with
  // resources.device=cuda rank i trains on GPU i % device_count), passes their events
  // on, relays their stderr to this process's, and waits for all of them. When one
  // rank fails, or on StopFromSignal, the others get SIGTERM (then SIGKILL). Throws
  // std::runtime_error only when the gang cannot be started.
  static LaunchResult Run(const LaunchOptions& options, const EventHandler& on_event);

  // Installs SIGINT/SIGTERM handlers that stop a running (or the next) Run.
  static void InstallSignalHandlers();

  // trainyard-rank next to this executable (/proc/self/exe).
  static std::string RankBinaryNextToSelf();
};

}  // namespace trainyard::engine
