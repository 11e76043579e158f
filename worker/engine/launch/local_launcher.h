// The engine's standalone runner, as torchrun is for PyTorch: runs N local
// trainyard-rank processes on a normalised JobSpec JSON (job_config.h) with a TCPStore
// rendezvous on a free loopback port and supervises them. Used by trainyard-train and
// trainyard-bench; needs only LibTorch's toolchain (no protobuf, no torch), so it builds
// on a GPU box with nothing but LibTorch.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainyard::engine {

struct LaunchOptions {
  std::string rank_binary;             // trainyard-rank
  std::string config_json;             // the resolved JobSpec (spec::ToJson), written to a temp file
  int nproc = 1;
  int threads = 1;                     // intra-op threads per rank
  std::vector<std::string> rank_args;  // passed to every rank (--save-init P, --load P)
  // Added to the ranks' environment (NAME -> value); see RankThreadEnv (rank_env.h).
  std::vector<std::pair<std::string, std::string>> rank_env;
  double kill_grace_s = 5.0;           // SIGTERM, then SIGKILL after this long
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
};

// Supervises one local gang. Not thread-safe; one Run at a time per process (the
// signal plumbing is process-wide).
class LocalLauncher {
 public:
  // Called for every stdout line of every rank (an Event JSON line, normally), in
  // arrival order per rank.
  using LineHandler = std::function<void(int rank, const std::string& line)>;

  // Spawns the ranks (rank i gets --rank i --local-rank i: one machine, so with
  // resources.device=cuda rank i trains on GPU i % device_count), forwards their
  // lines, and waits for all of them. When one rank
  // fails, or on StopFromSignal, the others get SIGTERM (then SIGKILL). Rank stderr is
  // inherited. Throws std::runtime_error only when the gang cannot be started.
  static LaunchResult Run(const LaunchOptions& options, const LineHandler& on_line);

  // Installs SIGINT/SIGTERM handlers that stop a running (or the next) Run.
  static void InstallSignalHandlers();

  // trainyard-rank next to this executable (/proc/self/exe).
  static std::string RankBinaryNextToSelf();

  // A loopback port that was free a moment ago (bind to port 0).
  static int FreeLoopbackPort();
};

}  // namespace trainyard::engine
