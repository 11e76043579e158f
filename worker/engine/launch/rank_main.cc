// trainyard-rank: one training rank. stdout carries only trainyard.v1.Event JSON lines;
// human-readable diagnostics go to stderr. Exit 0 after the last step, 1 on any error
// (after a final "error" log event), kRankExitInputError (87) when the error is in the
// job's own inputs — its dataset, its initial weights (engine::InputError): the
// controller fails the job then instead of restarting it (common/events/rank_exit.h).
//
// Checkpoints (docs/checkpoints.md): every checkpoint.interval steps each rank writes
// its shards under --checkpoint-dir (default checkpoint.dir) in
// step-<8 digits>-attempt-<--attempt>/; --resume DIR continues from one written under
// any layout. Without --resume, --load or checkpoint.initial_load_path (full
// torchtitan-named weights, a checkpoint directory or a folder of them, under any
// layout: LoadInitialWeights) sets the starting weights. Test hook: the environment
// variable TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP=N stops each rank's checkpoint
// writer mid-file at step N until the rank is killed, in attempt 1 only (so the restart
// that follows the kill runs through).
//
// Checkpoint now: the worker asks for a checkpoint by creating RUN_DIR/checkpoint.request
// (see --run-dir); the trainer removes it at its next step and every rank saves after
// that step (CheckpointSaved.requested), also with checkpoint.interval = 0. A request
// file older than --config is left from an earlier run in that folder and is removed at
// start. Test hook: TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT=1 stops each rank's writer
// of a requested checkpoint mid-file until the rank is killed, in attempt 1 only.
//
// Hang detection and profiling (docs/diagnostics.md): --run-dir DIR is the attempt's
// folder (the worker passes it). The rank keeps its flight ring in DIR/flight/
// rank-RRRRR.ring and writes artifacts (flight dumps, profiler traces) to
// DIR/artifacts/. Without --run-dir it uses $TMPDIR (or /tmp) /trainyard-run-pPORT-aA
// for a multi-rank job (so the ranks of a local run find each other's rings) and
// /trainyard-run-pidPID for one rank, and says so in a log event. A watchdog
// (diagnostics/watchdog.h) reports a collective past parallelism.collective_timeout_s
// or no step progress for training.step_timeout_s as a Stall event plus the flight
// dump, and exits with kStallExitCode (86). Gloo's own timeout is
// collective_timeout_s + kBackstopS, so the Stall comes first.
// Test hooks (TEST ONLY, honoured in attempt 1 only): TRAINYARD_TEST_STALL_RANK=R with
// TRAINYARD_TEST_STALL_AT_STEP=S makes rank R sleep forever before step S's data fetch
// (outside any collective). A default run folder loses its ring after a clean run and
// is removed once empty.
//
// `trainyard-rank --capabilities` prints what this build can run, one line of proto3
// JSON of trainyard.v1.EngineCapabilities, and exits 0; it needs no --config
// (launch/engine_capabilities.h). A config asking for what this build cannot run
// (cudagraph in a CPU build) is refused right after loading, with exit 87.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "common/events/rank_exit.h"
#include "common/flight/flight_ring.h"
#include "worker/engine/base/input_error.h"
#include "worker/engine/checkpoint/checkpoint_export.h"
#include "worker/engine/checkpoint/checkpoint_loader.h"
#include "worker/engine/checkpoint/checkpoint_pin.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/diagnostics/tensor_memory.h"
#include "worker/engine/diagnostics/watchdog.h"
#include "worker/engine/io/safetensors_file.h"
#include "worker/engine/io/state_dict_io.h"
#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/kernels/ops.h"
#include "worker/engine/launch/engine_capabilities.h"
#include "worker/engine/parallel/mesh/collective_group.h"
#include "worker/engine/parallel/mesh/device_placement.h"
#include "worker/engine/parallel/mesh/process_mesh.h"
#include "worker/engine/train/event_writer.h"
#include "worker/engine/train/gemm_peak_probe.h"
#include "worker/engine/train/trainer.h"

namespace {

struct RankFlags {
  bool capabilities = false;  // print EngineCapabilities JSON and exit
  std::string config_path;
  int rank = 0;
  int local_rank = -1;  // -1: --rank (all ranks on one machine)
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string gloo_host;
  int attempt = 1;
  int threads = 1;
  std::string save_init;                   // full weights before step 1 (written by rank 0)
  std::string load;                        // full weights to start from
  std::string save_final;                  // full weights after the last step (written by rank 0)
  std::string resume;                      // a checkpoint directory to continue from
  std::string checkpoint_dir;              // where checkpoints go (default checkpoint.dir)
  int64_t pause_checkpoint_at_step = 0;    // test hook, from the environment
  bool hang_requested_checkpoint = false;  // test hook, from the environment
  bool kill_in_prune = false;              // test hook, from the environment
  std::string run_dir;                     // the attempt's folder: flight/, artifacts/
  int64_t test_stall_at_step = 0;          // test hook, from the environment
};

// Gloo's (and NCCL's) own collective timeout is this much past the watchdog's.
constexpr double kBackstopS = 60;

std::string DefaultRunDir(const RankFlags& f) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  if (f.world_size > 1)
    return dir + "/trainyard-run-p" + std::to_string(f.master_port) + "-a" + std::to_string(f.attempt);
  return dir + "/trainyard-run-pid" + std::to_string(getpid());
}

using namespace trainyard::engine;

// The worker writes config.json before it starts the ranks, and creates a checkpoint
// request only for ranks that run, so a request file older than the config was left by
// an earlier run in this folder (killed before its next step) and is removed; a newer
// one (or one of the same time) came for this attempt, maybe while this rank was still
// starting, and stays for the trainer's first step.
void RemoveStaleCheckpointRequest(const std::string& request, const std::string& config_path, EventWriter& events) {
  struct stat req {
  }, cfg{};
  if (::stat(request.c_str(), &req) != 0 || ::stat(config_path.c_str(), &cfg) != 0) return;
  const auto older = [](const timespec& a, const timespec& b) {
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
  };
  if (older(req.st_mtim, cfg.st_mtim) && ::unlink(request.c_str()) == 0) {
    events.Log("info", "removed a stale checkpoint request (older than " + config_path + "): " + request);
  }
}

// Collective: every rank gathers, rank 0 writes.
void SaveFull(Trainer& trainer, const std::string& path) {
  NamedTensors full = trainer.FullState();
  if (trainer.mesh().world().rank() == 0) WriteSafetensors(path, full);
}

// A folder of checkpoints as initial weights: each rank picks its newest on its own, so
// a folder that a job is still writing could start the ranks from different steps.
// The ranks compare their picks (a 20-bit hash of the path, its sum and sum of squares
// over the world: equal exactly when every rank picked the same) and refuse to start
// apart; a plain file or one checkpoint directory passes through unchanged.
std::string AgreedInitialCheckpoint(const std::string& path, ProcessMesh& mesh, const c10::Device& device) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "manifest.json", ec)) return path;
  absl::StatusOr<std::string> picked = SelectCheckpoint(path, std::nullopt);
  if (!picked.ok()) return path;  // LoadInitialWeights reports it, on every rank
  const double h = static_cast<double>(std::hash<std::string>{}(*picked) & 0xfffff);
  auto t = torch::tensor({1.0, h, h * h}, torch::TensorOptions().dtype(torch::kFloat64)).to(device);
  mesh.world().AllReduceSum(t);
  t = t.cpu();
  const double n = t[0].item<double>();
  if (t[1].item<double>() != n * h || t[2].item<double>() != n * h * h) {
    throw std::runtime_error("checkpoint.initial_load_path " + path +
                             ": the ranks picked different newest "
                             "checkpoints (this rank " +
                             *picked + "); is a job still writing that folder?");
  }
  return *picked;
}

// Keeps freed tensor memory in the heap for the next step. By default glibc serves
// blocks above a moving threshold with mmap and trims the heap top, so each step
// page-faults its activations in again: ~9,400 minor faults per debug-preset step,
// about 2 µs each on a VM (measured with getrusage around Trainer::Step).
void KeepFreedMemoryInHeap() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's upper bound for this setting
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void RunRank(const RankFlags& f, EventWriter& events) {
  KeepFreedMemoryInHeap();
  fused::SetEnabledFromEnvironment();
  const EngineConfig config = LoadEngineConfigFile(f.config_path);
  // What this build cannot run fails the same way on every attempt: permanent.
  try {
    RequireSupported(config);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  const c10::Device device = DevicePlacement::ForLocalRank(config.resources, f.local_rank >= 0 ? f.local_rank : f.rank);
  tensor_memory::Install(device);  // StepMetrics.peak_tensor_bytes; before any other thread allocates
  at::set_num_threads(f.threads);
  GemmPeakProbe::SetBlasThreads(f.threads);
  // MFU's denominator: the GEMM peak of the dtype the job computes in.
  const bool bf16 = config.training.mixed_precision == "bf16";
  const double peak = GemmPeakProbe::MeasureFlops(0.6, device, bf16 ? torch::kBFloat16 : torch::kFloat);
  const std::string run_dir = f.run_dir.empty() ? DefaultRunDir(f) : f.run_dir;
  if (f.run_dir.empty()) {
    events.Log("info", "no --run-dir: flight ring and artifacts under " + run_dir);
  }
  const std::string checkpoint_request = run_dir + "/checkpoint.request";
  RemoveStaleCheckpointRequest(checkpoint_request, f.config_path, events);
  std::string ring_error;
  auto ring = trainyard::flight::FlightRing::Create(run_dir + "/flight", f.rank, f.world_size, &ring_error);
  if (ring == nullptr) throw std::runtime_error("flight recorder: " + ring_error);
  RendezvousOptions rendezvous{f.rank,        f.world_size, f.master_addr,
                               f.master_port, f.gloo_host,  config.parallelism.collective_timeout_s};
  rendezvous.collective_timeout_s = config.parallelism.collective_timeout_s + kBackstopS;
  rendezvous.device = device;
  auto world = CollectiveGroup::Connect(rendezvous);
  world->AttachRecorder(ring.get(), "world");
  auto mesh = ProcessMesh::Build(std::move(world), config.parallelism);
  WatchdogOptions watch;
  watch.artifacts_dir = run_dir + "/artifacts";
  watch.attempt = f.attempt;
  watch.rank = f.rank;
  watch.world_size = f.world_size;
  watch.collective_timeout_s = config.parallelism.collective_timeout_s;
  watch.step_timeout_s = config.training.step_timeout_s;
  watch.master_addr = f.master_addr;
  watch.master_port = f.world_size > 1 ? f.master_port : 0;
  auto watchdog = std::make_unique<Watchdog>(*ring, events, watch);
  watchdog->Start();
  TrainerOptions options;
  options.threads = f.threads;
  options.peak_flops = peak;
  options.device = device;
  options.checkpoint_dir = f.checkpoint_dir.empty() ? config.checkpoint.dir : f.checkpoint_dir;
  options.attempt = f.attempt;
  options.pause_checkpoint_at_step = f.pause_checkpoint_at_step;
  options.hang_requested_checkpoint = f.hang_requested_checkpoint;
  options.kill_in_prune = f.kill_in_prune;
  options.checkpoint_request_path = checkpoint_request;
  options.flight = ring.get();
  options.artifacts_dir = run_dir + "/artifacts";
  options.test_stall_at_step = f.test_stall_at_step;
  Trainer trainer(config, *mesh, events, options);
  std::string initial = f.load.empty() ? config.checkpoint.initial_load_path : f.load;
  if (f.resume.empty() && !initial.empty()) initial = AgreedInitialCheckpoint(initial, *mesh, device);
  if (!f.resume.empty()) {
    trainer.Resume(f.resume);
  } else if (!initial.empty()) {
    // Pinned while it is read, so that the job that wrote it does not prune it meanwhile
    // (a read-only mount cannot be pinned, and is read as it is).
    std::unique_ptr<CheckpointPin> pin;
    if (std::error_code ec; std::filesystem::exists(std::filesystem::path(initial) / kManifestName, ec)) {
      absl::StatusOr<std::unique_ptr<CheckpointPin>> p =
          CheckpointPin::Acquire(initial, "load-rank-" + std::to_string(f.rank));
      if (p.ok()) {
        pin = std::move(*p);
      } else {
        events.Log("warning", "initial weights " + initial + " not pinned: " + std::string(p.status().message()));
      }
    }
    // A missing or unloadable path is the job's input error: permanent.
    try {
      events.Log("info", "initial weights: " + trainer.LoadWeights(initial));
    } catch (const std::invalid_argument& e) {
      throw InputError(std::string("checkpoint.initial_load_path: ") + e.what());
    }
  }
  if (!f.save_init.empty()) SaveFull(trainer, f.save_init);
  if (f.rank == 0) {
    const FlopsModel& fm = trainer.flops();
    std::ostringstream os;
    os << "engine start: model=" << (config.model.preset.empty() ? "custom" : config.model.preset)
       << " params_total=" << fm.total_params << " params_embedding=" << fm.embedding_params
       << " params_active_non_embedding=" << fm.active_params << " flops_per_token=" << fm.flops_per_token
       << " dp=" << config.parallelism.dp << " tp=" << config.parallelism.tp << " ep=" << config.parallelism.ep
       << " dp_shard=" << config.parallelism.dp_shard << " state_bytes_per_rank=" << trainer.PersistentStateBytes()
       << " device=" << DevicePlacement::Describe(device) << " collectives=" << mesh->world().backend_name()
       << " threads=" << f.threads << " gemm=\"" << cpu_blas::GemmName()
       << "\" blas_core=" << GemmPeakProbe::BlasCoreName() << " mixed_precision=" << config.training.mixed_precision
       << (bf16 ? " bf16_gemm=\"" + GemmPeakProbe::Bf16GemmPath(device) + "\"" : std::string()) << " experts=\""
       << ops::ExpertKernelName(device, bf16 ? torch::kBFloat16 : torch::kFloat32, config.model.dim,
                                config.model.expert_hidden)
       << "\" attention=\"" << ops::AttentionKernelName(device, bf16 ? torch::kBFloat16 : torch::kFloat32) << "\""
       << " gemm_peak_gflops=" << peak / 1e9 << " (" << (bf16 ? "bf16" : "fp32") << ") torch=" << TORCH_VERSION;
    // The thread environment it was started with (worker/launch/rank_launch.h).
    for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY"}) {
      const char* value = std::getenv(name);
      os << ' ' << name << '=' << (value != nullptr ? value : "unset");
    }
    events.Log("info", os.str());
  }
  trainer.Run();
  watchdog->DisableStepTimeout();
  if (!f.save_final.empty()) SaveFull(trainer, f.save_final);
  if (f.run_dir.empty()) {
    // A default run folder is this run's scratch: drop the ring after a clean run, and
    // the folders once empty (the last rank out removes them; artifacts stay).
    const std::string ring_path = ring->path();
    watchdog.reset();  // before the ring it reads
    ring.reset();
    std::remove(ring_path.c_str());
    rmdir((run_dir + "/flight").c_str());
    rmdir((run_dir + "/artifacts").c_str());
    rmdir(run_dir.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  RankFlags f;
  CLI::App app{"trainyard-rank: one training rank (dp x tp mesh, EP carved from it) of a Trainyard job"};
  app.add_flag("--capabilities", f.capabilities,
               "print what this engine build can run (one line of trainyard.v1.EngineCapabilities JSON: "
               "libtorch_version, cuda, cuda_version, nccl, bf16, cudagraph) and exit 0; needs no --config");
  // Required unless --capabilities: checked after parsing.
  app.add_option("--config", f.config_path, "JobSpec as proto3 JSON (proto field names); required");
  app.add_option("--rank", f.rank, "this rank, 0-based")->capture_default_str();
  app.add_option("--local-rank", f.local_rank,
                 "index of this rank among the ranks on this machine; with resources.device=cuda it trains on "
                 "GPU local_rank % device_count (default: --rank)");
  app.add_option("--world-size", f.world_size, "number of ranks (= parallelism.dp * tp)")->capture_default_str();
  app.add_option("--master-addr", f.master_addr, "host of rank 0's TCPStore")->capture_default_str();
  app.add_option("--master-port", f.master_port, "port of rank 0's TCPStore")->capture_default_str();
  app.add_option("--gloo-host", f.gloo_host, "address Gloo binds to (default: --master-addr)");
  app.add_option("--attempt", f.attempt, "attempt number, in checkpoint directory and artifact names")
      ->capture_default_str();
  app.add_option("--threads", f.threads, "intra-op CPU threads")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--save-init", f.save_init,
                 "write the full initial weights (safetensors) before step 1; give it to every rank");
  app.add_option("--load", f.load,
                 "start from these weights: a full safetensors file (torchtitan names), a checkpoint directory "
                 "(holding manifest.json) or a folder of them (its newest), written under any layout");
  app.add_option("--save-final", f.save_final,
                 "write the full weights (safetensors) after the last step; give it to every rank");
  app.add_option("--resume", f.resume,
                 "continue from this checkpoint directory (step-S-attempt-A, holding manifest.json), written under "
                 "any layout; --load and checkpoint.initial_load_path are ignored then");
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "write checkpoints (every checkpoint.interval steps, and on request) under this directory "
                 "(default: checkpoint.dir)");
  app.add_option("--run-dir", f.run_dir,
                 "this attempt's folder: the flight-recorder ring goes to DIR/flight/rank-RRRRR.ring, flight dumps "
                 "and profiler traces to DIR/artifacts/; DIR/checkpoint.request asks for a checkpoint after the "
                 "next step (default: $TMPDIR/trainyard-run-pPORT-aATTEMPT, or -pidPID for one rank)");
  app.footer("Exit status: 0 done, 1 error, " + std::to_string(kStallExitCode) +
             " hang detected (a Stall event and a flight-recorder dump were written), " +
             std::to_string(trainyard::kRankExitInputError) +
             " the job's inputs are wrong (dataset, initial weights: a retry cannot succeed).\n"
             "Test-only environment (attempt 1 only): TRAINYARD_TEST_STALL_RANK=R and "
             "TRAINYARD_TEST_STALL_AT_STEP=S stall rank R before step S's data fetch; "
             "TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP=N pauses the checkpoint writer at step N; "
             "TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT=1 hangs the writer of every requested checkpoint; "
             "TRAINYARD_TEST_KILL_IN_PRUNE=1 kills rank 0 in its first checkpoint removal.");
  CLI11_PARSE(app, argc, argv);
  if (f.capabilities) {
    std::cout << CapabilitiesJson() << std::endl;
    return 0;
  }
  if (f.config_path.empty()) return app.exit(CLI::RequiredError("--config"));
  if (const char* pause = std::getenv("TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP")) {
    if (f.attempt == 1) f.pause_checkpoint_at_step = std::atoll(pause);
  }
  if (const char* hang = std::getenv("TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT")) {
    f.hang_requested_checkpoint = f.attempt == 1 && std::string(hang) == "1";
  }
  if (const char* kill = std::getenv("TRAINYARD_TEST_KILL_IN_PRUNE")) {
    f.kill_in_prune = f.attempt == 1 && std::string(kill) == "1";
  }
  const char* stall_rank = std::getenv("TRAINYARD_TEST_STALL_RANK");
  const char* stall_step = std::getenv("TRAINYARD_TEST_STALL_AT_STEP");
  if (stall_rank != nullptr && stall_step != nullptr && f.attempt == 1 && std::atoi(stall_rank) == f.rank) {
    f.test_stall_at_step = std::atoll(stall_step);
  }

  EventWriter events(std::cout);
  std::string error;
  try {
    RunRank(f, events);
    return 0;
  } catch (const InputError& e) {
    // The job's own inputs are wrong (its dataset, its initial weights): permanent, so
    // the controller fails the job instead of restarting it (common/events/rank_exit.h).
    std::cerr << "trainyard-rank " << f.rank << ": input error: " << e.what() << std::endl;
    events.Log("error", e.what());
    return trainyard::kRankExitInputError;
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::cerr << "trainyard-rank " << f.rank << ": error: " << error << std::endl;
  events.Log("error", error);
  return 1;
}
