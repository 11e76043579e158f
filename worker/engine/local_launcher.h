// The engine's standalone runner, as torchrun is for PyTorch: turns a job file into the
// normalised JobSpec JSON a rank reads, then runs N local trainyard-rank processes with
// a TCPStore rendezvous on a free loopback port and supervises them. Used by
// trainyard-train and trainyard-bench; needs only LibTorch's toolchain (no protobuf),
// so it builds on a GPU box with nothing but LibTorch.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainyard::engine {

// ---- Job config (the engine-side twin of common/job_file + common/spec_defaults) ----
//
// DUPLICATION: the preset table and defaults below repeat common/spec_defaults.cc, and
// the key set repeats proto/trainyard/v1/spec.proto, because common/ depends on
// protobuf and the engine must build with LibTorch alone. local_launcher_test checks
// the TOML and JSON paths agree; keep the tables in step when spec.proto changes.

// Reads a job file: TOML (`[section] key = value`, the controller's job-file form) or
// JSON (proto3 JSON of trainyard.v1.JobSpec with proto field names, e.g. what the
// worker writes). `.json` files, or files starting with '{', are JSON. Then applies
// `overrides` ("section.key=value", later wins), the preset (model.preset, default
// "debug") and defaults exactly as the controller does, and returns the normalised
// JobSpec JSON. Throws std::invalid_argument naming the file, line and field
// ("job.toml:3:1: unknown key model.dimm", "--set training.steps: expected integer,
// got string").
nlohmann::json LoadLocalJobConfig(const std::string& path, const std::vector<std::string>& overrides);

// Same, starting from an empty job that names only `preset` (the benchmark's input).
nlohmann::json PresetJobConfig(const std::string& preset, const std::vector<std::string>& overrides);

// Ranks a normalised config needs: parallelism.dp * parallelism.tp (EP is carved from
// them, as torchtitan does).
int ConfigWorldSize(const nlohmann::json& config);

// ---- Launching ----

struct LaunchOptions {
  std::string rank_binary;             // trainyard-rank
  nlohmann::json config;               // normalised JobSpec JSON, written to a temp file
  int nproc = 1;
  int threads = 1;                     // intra-op threads per rank
  std::vector<std::string> rank_args;  // passed to every rank (--save-init P, --load P)
  // Added to the ranks' environment (NAME -> value); see RankThreadEnv.
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

  // max(1, online cores / nproc).
  static int DefaultThreads(int nproc);

  // The thread settings each rank gets unless this process's environment already sets
  // them (as torchrun sets OMP_NUM_THREADS):
  //   OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=T: Debian's OpenBLAS is the pthreads build
  //     and ignores at::set_num_threads, so without this every rank runs `cores` BLAS
  //     threads next to its T OpenMP threads;
  //   OMP_WAIT_POLICY=PASSIVE, when `openblas_threads_in_step`: idle OpenMP workers
  //     otherwise spin (libgomp) while OpenBLAS's own threads run each GEMM on the same
  //     cores. Measured on the debug preset, 1 rank, 2 cores: step 2.24 s spinning vs
  //     1.06 s passive. Without OpenBLAS threads in the step, libgomp's default (spin
  //     briefly, then sleep) is kept: the step's ~500 parallel regions then start
  //     without a futex wake-up each (debug step 676–734 ms vs 757–782 ms passive, 3
  //     runs each).
  static std::vector<std::pair<std::string, std::string>> RankThreadEnv(int threads, bool openblas_threads_in_step);

  // Whether a rank of `config` runs GEMMs on OpenBLAS's own thread pool during its steps:
  // all but an eager CPU step with the fused kernels on (fused_cpu_kernels.h), which
  // keeps OpenBLAS at one thread and splits every GEMM over its OpenMP threads.
  static bool OpenBlasThreadsInStep(const nlohmann::json& config);
};

}  // namespace trainyard::engine
