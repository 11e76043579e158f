// How a trainyard-rank process is started, whoever starts it: the worker daemon for the
// controller's jobs (worker/daemon/launch_spec.h) and trainyard-train / trainyard-bench
// for local ones (worker/engine/launch/local_launcher.h). One argv and one thread
// environment, so a job gets the same process either way.
//
// Threads: each rank runs `threads` intra-op threads (default max(1, cores / ranks on
// this machine)) and gets, unless the parent environment already sets them (as an
// operator or torchrun would):
//   OMP_NUM_THREADS=T, OPENBLAS_NUM_THREADS=T: LibTorch's BLAS (the pinned wheel's MKL,
//     on the same OpenMP threads) follows the first; a LibTorch built on OpenBLAS's
//     pthreads build ignores at::set_num_threads and reads the second, and without it
//     every rank would run `cores` BLAS threads next to its T OpenMP threads;
//   OMP_WAIT_POLICY=PASSIVE, only for CUDA ranks: their host threads mostly wait for the
//     GPU, and idle OpenMP workers would otherwise spin (libgomp) on cores other ranks'
//     host work needs. A CPU step keeps libgomp's default (spin briefly, then sleep):
//     its hundreds of parallel regions then start without a futex wake-up each, and
//     MKL's GEMMs run on those same threads (debug preset, 1 rank, 2 cores: the fused
//     step 265 ms against 344 ms passive in bf16; with the fused kernels off, 383-418 ms
//     against 467-523 ms passive in fp32).
// The variables go to each rank's own environment (LaunchRequest::env), never into the
// launching process's.
//
// Pure functions over their arguments (ProcessEnvironment reads getenv); thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base/process_launcher.h"

namespace trainyard {

// A value for `name` when the parent environment sets it, else nullopt.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// getenv over this process's environment.
EnvLookup ProcessEnvironment();

// max(1, cores / ranks): a rank's default intra-op threads.
int DefaultRankThreads(int cores, int ranks);
// Online CPU cores (sysconf), at least 1.
int OnlineCores();

// Whether a rank on `device` waits passively (OMP_WAIT_POLICY=PASSIVE): CUDA ranks only.
bool PassiveThreadWait(std::string_view device);

// The thread variables above for a rank of `threads` threads, leaving out each one
// `parent` sets (even to ""), in the order listed.
std::vector<std::pair<std::string, std::string>> RankThreadEnv(int threads, bool passive_wait,
                                                               const EnvLookup& parent);

// One rank process of a gang.
struct RankProcess {
  std::string rank_binary;  // trainyard-rank
  std::string config_path;  // the normalised JobSpec as proto3 JSON
  int rank = 0;
  int local_rank = 0;  // its index among the gang's ranks on this machine
  // The number of those ranks; > 0 adds LOCAL_RANK and LOCAL_WORLD_SIZE (torchrun's
  // names) to the environment, after `env`. 0: neither is set.
  int local_world_size = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";  // rank 0's TCPStore
  int master_port = 0;
  std::string gloo_host;  // the address Gloo binds to; "" = master_addr
  int attempt = 1;
  int threads = 1;
  std::string run_dir;         // flight rings and artifacts; "" = the rank's default
  std::string checkpoint_dir;  // where it writes checkpoints; "" = checkpoint.dir
  std::string resume_path;     // a checkpoint to resume from; "" = none
  std::vector<std::string> extra_args;  // e.g. --save-init P, --load P
  std::vector<std::pair<std::string, std::string>> env;  // RankThreadEnv(...)
};

// The launch of `p`: `rank_binary --config C --rank R --world-size W --master-addr A
// --master-port P --gloo-host H --attempt N --threads T [--run-dir D] --local-rank L
// [--checkpoint-dir C] [--resume R] EXTRA...` with `p.env` added to the inherited
// environment, then LOCAL_RANK=L and LOCAL_WORLD_SIZE=N when p.local_world_size > 0.
LaunchRequest RankLaunchRequest(const RankProcess& p);

}  // namespace trainyard
