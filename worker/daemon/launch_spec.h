#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/process_launcher.h"
#include "trainyard/v1/device.pb.h"
#include "trainyard/v1/worker_service.pb.h"
#include "worker/launch/rank_launch.h"

namespace trainyard {

// How one rank of an attempt is started.
struct RankLaunch {
  int rank = 0;
  LaunchRequest request;  // the rank binary and its arguments
};

// How an attempt's ranks on this worker are started: the directory that holds the
// attempt's files, the config file every rank reads (the JobSpec as one line of proto3
// JSON) and one launch per assigned rank, in the Assign's order.
struct AttemptLaunch {
  std::string attempt_dir;  // work_dir/JOB/ATTEMPT, the ranks' --run-dir
  std::string artifacts_dir;  // attempt_dir/artifacts: where ranks put files to upload
  std::string config_path;  // attempt_dir/config.json
  std::string config_text;  // what config_path holds
  std::vector<RankLaunch> ranks;
};

// Turns an Assign into an AttemptLaunch and writes the attempt's config file.
// Build is pure (no I/O; the parent environment comes in through Options); each rank's
// argv and thread environment are the shared rank launch policy's
// (worker/launch/rank_launch.h), so a rank runs here as under trainyard-train, with
// `--run-dir attempt_dir` (it writes RUN_DIR/flight/*.ring and RUN_DIR/artifacts/*) and
// `--local-rank` its position among the Assign's ranks.
//
// Each rank's environment adds, after the thread variables: the worker's --nccl-env
// settings; LOCAL_RANK (its position among the Assign's ranks) and LOCAL_WORLD_SIZE
// (their number); and CUDA_VISIBLE_DEVICES: the UUID of its GPU (Assign.gpus) for a
// resources.device = "cuda" job, "" (no GPU) for every other job. The variable is
// always set, so the worker's own CUDA_VISIBLE_DEVICES never reaches a rank: the
// controller's choice wins. A cuda job whose Assign.gpus does not give every rank
// exactly one GPU this worker offers (same index and UUID, no GPU twice), a cuda job on
// a worker that offers none, and a CPU job that names GPUs are refused
// (INVALID_ARGUMENT): the ranks fail to start with that message. WriteConfig creates attempt_dir
// and attempt_dir/artifacts and writes config.json durably (common/base/file_io.h).
//
// Thread contract: immutable after construction; every method is thread-safe.
// Concurrent WriteConfig calls for one (job, attempt) race on the same file, which
// the supervisor prevents by refusing a duplicate attempt before writing.
class LaunchSpecBuilder {
 public:
  struct Options {
    std::string rank_binary;
    std::string work_dir;
    std::string gloo_host = "127.0.0.1";
    int threads_per_rank = 1;
    // The worker's environment, which ranks inherit: a thread variable it sets is kept.
    EnvLookup parent_env = ProcessEnvironment();
    // The GPUs this worker offers (--gpus); empty on a CPU worker.
    std::vector<trainyard::v1::GpuDevice> gpus = {};
    // --nccl-env NAME=VALUE settings, added to every rank's environment.
    std::vector<std::pair<std::string, std::string>> nccl_env = {};
  };

  explicit LaunchSpecBuilder(Options options);

  // INVALID_ARGUMENT when the job id is not a safe directory name (1-200 of
  // [A-Za-z0-9._-], not "." or ".."), there are no ranks, world_size <= 0, or a rank
  // is duplicated or outside [0, world_size).
  static absl::Status Validate(const trainyard::v1::Assign &assign);

  // The CUDA_VISIBLE_DEVICES of each of assign.ranks() (same order), by the rules above.
  absl::StatusOr<std::vector<std::string>> RankDevices(const trainyard::v1::Assign &assign) const;

  // Validate and RankDevices, then the launch of every assigned rank.
  absl::StatusOr<AttemptLaunch> Build(const trainyard::v1::Assign &assign) const;

  // Creates launch.attempt_dir and launch.artifacts_dir and writes launch.config_text to launch.config_path.
  static absl::Status WriteConfig(const AttemptLaunch &launch);

 private:
  const Options options_;
};

}  // namespace trainyard
