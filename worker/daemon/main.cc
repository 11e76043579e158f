// trainyard-worker: runs the ranks the controller assigns to this machine. Flags →
// Options → wiring; the only place that builds the real clock and process launcher.
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <unistd.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/base/clock.h"
#include "common/base/dir_lock.h"
#include "common/base/listen_probe.h"
#include "common/base/posix_process_launcher.h"
#include "common/base/text.h"
#include "common/tls_files.h"
#include "common/worker_identity.h"
#include "worker/daemon/artifact_uploader.h"
#include "worker/daemon/controller_link.h"
#include "worker/daemon/engine_capabilities.h"
#include "worker/daemon/event_outbox.h"
#include "worker/daemon/health_server.h"
#include "worker/daemon/rank_supervisor.h"
#include "worker/daemon/worker_gpus.h"
#include "worker/gpu/gpu_sampler.h"
#include "worker/launch/rank_launch.h"

namespace {

// MemTotal of /proc/meminfo in bytes, or 0 when it cannot be read.
int64_t HostMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

struct Options {
  std::string controller, name, rank_binary, work_dir;
  std::string address = "127.0.0.1";
  std::string rendezvous_ports = "29500-29999";
  int port_min = 0, port_max = 0;  // parsed from rendezvous_ports
  int slots = 0;  // resolved by ParseFlags (ResolveSlots)
  std::string gpus = "all";
  std::vector<std::string> nccl_env_flags;
  std::vector<std::pair<std::string, std::string>> nccl_env;  // parsed
  std::string nvml_library = trainyard::NvmlLibrary::kDefaultPath;
  double gpu_sample_interval_s = 5;
  trainyard::WorkerGpus worker_gpus;
  double memory_gib = 0;  // 0: MemTotal of /proc/meminfo
  int threads_per_rank = 0;
  std::string health_listen;  // resolved by ParseFlags; "" = no health endpoint
  bool insecure = false;
  trainyard::TlsFilePaths tls;
  std::optional<trainyard::TlsMaterial> tls_material;  // loaded when tls.any()
};

// Parses and completes the flags; an exit status when the process should end now.
std::optional<int> ParseFlags(int argc, char **argv, Options &opt) {
  CLI::App app{"trainyard-worker: runs Trainyard rank processes assigned by the controller"};
  app.add_option("--controller", opt.controller, "Controller WorkerService address, HOST:PORT")
      ->required();
  app.add_option("--slots", opt.slots,
                 "Rank processes this worker may run at once. Required without GPUs; with GPUs "
                 "it defaults to their number and may not exceed it (one rank per GPU)")
      ->check(CLI::PositiveNumber);
  app.add_option("--gpus", opt.gpus,
                 "GPUs to offer: all (every GPU NVML reports; none found or no NVML: a CPU "
                 "worker), none, or a comma list of NVML indices (0,2,3) or UUIDs (GPU-...)")
      ->capture_default_str();
  app.add_option("--nvml-library", opt.nvml_library,
                 "NVML shared library, loaded at start with dlopen (a name is searched as "
                 "dlopen searches)")
      ->capture_default_str();
  app.add_option("--gpu-sample-interval", opt.gpu_sample_interval_s,
                 "Seconds between GPU readings (utilisation, memory, power, temperature, ECC, "
                 "XID), sent with heartbeats")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--nccl-env", opt.nccl_env_flags,
                 "NAME=VALUE added to every rank's environment, NAME matching "
                 "(TORCH_)?NCCL_[A-Z0-9_]+ (e.g. NCCL_SOCKET_IFNAME=eth0); repeatable")
      ->take_all();
  app.add_option("--memory-gib", opt.memory_gib,
                 "Memory its ranks may use together, reported to the controller, which refuses "
                 "a job whose estimated per-rank memory exceeds every worker's (default: "
                 "MemTotal from /proc/meminfo)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--name", opt.name,
                 "Unique worker name shown by the controller: 1-128 printable ASCII bytes, no "
                 "spaces. Required without TLS; with TLS it defaults to the certificate's CN, "
                 "and the controller refuses any other");
  app.add_option("--tls-cert", opt.tls.cert,
                 "PEM worker certificate (OU=trainyard-worker, CN=the name) presented to the "
                 "controller; with --tls-key and --tls-ca the link is mutual TLS");
  app.add_option("--tls-key", opt.tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", opt.tls.ca, "PEM CA the controller's certificate must chain to");
  app.add_option("--address", opt.address, "Host other workers' ranks use to reach this one")
      ->capture_default_str();
  app.add_option("--rendezvous-ports", opt.rendezvous_ports,
                 "Port range MIN-MAX for rendezvous stores hosted here")
      ->capture_default_str();
  app.add_option("--rank-binary", opt.rank_binary,
                 "Rank executable (default: trainyard-rank next to this binary)");
  app.add_option("--work-dir", opt.work_dir,
                 "Directory for attempts' files, JOB/ATTEMPT/{config.json,flight,artifacts}; "
                 "made absolute and created if missing (default: /tmp/trainyard-worker-NAME). "
                 "Held for the worker's life (a lock on WORK_DIR/trainyard-worker.lock, released "
                 "when the process dies): a second worker on it refuses to start, naming the "
                 "holder's pid, host and start time");
  app.add_option("--threads-per-rank", opt.threads_per_rank,
                 "Compute threads per rank (default: max(1, cores / slots))");
  app.add_option("--health-listen", opt.health_listen,
                 "Serve gRPC health checking (grpc.health.v1) on PORT (127.0.0.1) or HOST:PORT: "
                 "SERVING while registered with the controller, else NOT_SERVING, for "
                 "Kubernetes gRPC probes. Plaintext and unauthenticated: beyond loopback only "
                 "with --insecure");
  app.add_flag("--insecure", opt.insecure,
               "Allow a --health-listen beyond loopback; logs a warning at every start");
  app.footer(
      "Names: a --name that another worker connected to the controller already uses is "
      "refused; the worker logs the controller's reason (which names the other worker) and "
      "retries every 2 s, and takes the name once that connection has been silent for three "
      "heartbeats (how a restarted worker replaces its own half-open connection).\n\n"
      "Exit status: 0 after SIGINT or SIGTERM; 2 when it cannot start (a --health-listen port "
      "in use, a work dir another worker holds or that cannot be written, a flag value it "
      "refuses, unreadable TLS files), before it contacts the controller; CLI11's codes for a "
      "malformed command line.\n\n"
      "Example (a CPU worker with two slots):\n"
      "  trainyard-worker --controller 127.0.0.1:7070 --name cpu-node-1 --slots 2 \\\n"
      "      --work-dir /var/lib/trainyard-worker --health-listen 8081");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  if (opt.tls.any()) {
    absl::StatusOr<trainyard::TlsMaterial> material = trainyard::LoadTlsMaterial(opt.tls);
    if (!material.ok()) {
      std::fprintf(stderr, "trainyard-worker: %s\n", std::string(material.status().message()).c_str());
      return 2;
    }
    opt.tls_material = std::move(*material);
    if (opt.name.empty()) {
      absl::StatusOr<std::string> cn = trainyard::CertificateCommonName(opt.tls_material->cert_pem);
      if (!cn.ok()) {
        std::fprintf(stderr, "trainyard-worker: --name not given and --tls-cert: %s\n",
                     std::string(cn.status().message()).c_str());
        return 2;
      }
      opt.name = *cn;
    }
  } else if (opt.name.empty()) {
    std::fprintf(stderr, "trainyard-worker: --name is required (without TLS there is no certificate to take it from)\n");
    return 2;
  }
  // The controller refuses these; refusing them here fails at once rather than at every
  // reconnect.
  if (std::string p = trainyard::WorkerNameProblem(opt.name); !p.empty()) {
    std::fprintf(stderr, "--name: %s\n", p.c_str());
    return 2;
  }
  if (std::string p = trainyard::WorkerAddressProblem(opt.address); !p.empty()) {
    std::fprintf(stderr, "--address: %s\n", p.c_str());
    return 2;
  }
  char dash = 0;
  const int n = std::sscanf(opt.rendezvous_ports.c_str(), "%d%c%d", &opt.port_min, &dash,
                            &opt.port_max);
  if (n != 3 || dash != '-' || opt.port_min < 1 || opt.port_max > 65535 ||
      opt.port_min > opt.port_max) {
    std::fprintf(stderr, "--rendezvous-ports: expected MIN-MAX within 1-65535, got '%s'\n",
                 opt.rendezvous_ports.c_str());
    return 2;
  }
  if (!opt.health_listen.empty()) {
    absl::StatusOr<std::string> address =
        trainyard::HealthServer::ResolveAddress(opt.health_listen, opt.insecure);
    if (!address.ok()) {
      std::fprintf(stderr, "trainyard-worker: %s\n", std::string(address.status().message()).c_str());
      return 2;
    }
    opt.health_listen = *address;
  }
  if (opt.rank_binary.empty()) opt.rank_binary = trainyard::ExecutableSibling("trainyard-rank");
  // Every rank is started from it: a worker that cannot would only fail each one later.
  if (access(opt.rank_binary.c_str(), X_OK) != 0) {
    const int err = errno;
    std::fprintf(stderr, "trainyard-worker: --rank-binary %s: cannot execute it: %s\n",
                 trainyard::Quoted(opt.rank_binary).c_str(), std::strerror(err));
    return 2;
  }
  if (opt.work_dir.empty()) opt.work_dir = "/tmp/trainyard-worker-" + opt.name;
  // Ranks get attempt directories under it and announce artifacts by absolute path.
  std::error_code ec;
  opt.work_dir = std::filesystem::absolute(opt.work_dir, ec).lexically_normal().string();
  if (ec) {
    std::fprintf(stderr, "--work-dir: %s\n", ec.message().c_str());
    return 2;
  }
  if (opt.nccl_env_flags.size() > 64) {  // the controller's limit (device_validation.h)
    std::fprintf(stderr, "trainyard-worker: --nccl-env given %zu times; at most 64 settings\n",
                 opt.nccl_env_flags.size());
    return 2;
  }
  for (const std::string &setting : opt.nccl_env_flags) {
    absl::StatusOr<std::pair<std::string, std::string>> parsed = trainyard::ParseNcclEnvSetting(setting);
    if (!parsed.ok()) {
      std::fprintf(stderr, "trainyard-worker: %s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
    opt.nccl_env.push_back(std::move(*parsed));
  }
  absl::StatusOr<trainyard::WorkerGpus> gpus = trainyard::SetUpGpus(opt.gpus, opt.nvml_library);
  if (!gpus.ok()) {
    std::fprintf(stderr, "trainyard-worker: %s\n", std::string(gpus.status().message()).c_str());
    return 2;
  }
  opt.worker_gpus = std::move(*gpus);
  absl::StatusOr<int> slots = trainyard::ResolveSlots(
      app.count("--slots") ? std::optional<int>(opt.slots) : std::nullopt, opt.worker_gpus.offered.size());
  if (!slots.ok()) {
    std::fprintf(stderr, "trainyard-worker: %s\n", std::string(slots.status().message()).c_str());
    return 2;
  }
  opt.slots = *slots;
  if (opt.threads_per_rank <= 0) {
    opt.threads_per_rank = trainyard::DefaultRankThreads(trainyard::OnlineCores(), opt.slots);
  }
  return std::nullopt;
}

// Takes what this worker must not share before it starts anything: its --health-listen
// port (probed; the server binds it later, never shared) and its --work-dir (locked for
// the process's life). An exit status when it cannot.
std::optional<int> ClaimExclusive(const Options &opt, std::unique_ptr<trainyard::DirLock> *work_lock) {
  if (!opt.health_listen.empty()) {
    if (absl::Status free = trainyard::ProbeListen("--health-listen", opt.health_listen); !free.ok()) {
      std::fprintf(stderr, "trainyard-worker: %s\n", std::string(free.message()).c_str());
      return 2;
    }
  }
  absl::StatusOr<std::unique_ptr<trainyard::DirLock>> lock = trainyard::DirLock::Acquire(
      opt.work_dir, "--work-dir", "trainyard-worker", trainyard::SystemClock()->Now());
  if (!lock.ok()) {
    std::fprintf(stderr, "trainyard-worker: %s\n", std::string(lock.status().message()).c_str());
    return 2;
  }
  if (const std::optional<trainyard::DirLock::Holder> &before = (*lock)->previous()) {
    spdlog::warn("--work-dir {}: the previous trainyard-worker (pid {} on host {}, started {}) ended without "
                 "releasing it (killed or crashed); taking over",
                 opt.work_dir, before->pid, trainyard::Quote(before->host), trainyard::Quote(before->started));
  }
  *work_lock = std::move(*lock);
  return std::nullopt;
}

}  // namespace

int main(int argc, char **argv) {
  using namespace trainyard;
  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
  Options opt;
  if (std::optional<int> status = ParseFlags(argc, argv, opt)) return *status;
  std::unique_ptr<DirLock> work_lock;  // held until the process ends
  if (std::optional<int> status = ClaimExclusive(opt, &work_lock)) return *status;
  for (const std::string &note : opt.worker_gpus.notes) spdlog::warn("{}", note);
  // Every thread inherits this mask; the main thread takes the signals with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Clock *clock = SystemClock();
  EventOutbox outbox({});
  PosixProcessLauncher launcher;
  const std::vector<v1::GpuDevice> &offered = opt.worker_gpus.offered;
  // What the rank binary can run; a failed probe registers no capabilities (no CUDA
  // jobs are placed here) and the worker keeps serving CPU jobs.
  v1::EngineCapabilities capabilities;
  if (absl::StatusOr<v1::EngineCapabilities> probed =
          ProbeEngineCapabilities(&launcher, opt.rank_binary, kCapabilitiesDeadline, clock);
      probed.ok()) {
    capabilities = std::move(*probed);
    spdlog::info("rank binary capabilities: libtorch={} cuda={} ({}) nccl={} bf16={} cudagraph={}",
                 capabilities.libtorch_version(), capabilities.cuda(), capabilities.cuda_version(),
                 capabilities.nccl(), capabilities.bf16(), capabilities.cudagraph());
  } else {
    spdlog::error("{}; registering with no capabilities (no CUDA job is placed on this worker)",
                  std::string(probed.status().message()));
  }
  if (!offered.empty() && !capabilities.cuda()) {
    spdlog::warn("{} GPU(s) offered but the rank binary has no CUDA: only CPU jobs will run here", offered.size());
  }
  std::unique_ptr<GpuSampler> sampler;
  if (!offered.empty()) {
    for (const v1::GpuDevice &g : offered) {
      spdlog::info("offering GPU {} {} {} ({} MiB, NVLink domain {})", g.index(), g.uuid(), g.name(),
                   g.memory_bytes() >> 20, g.nvlink_domain());
    }
    sampler = std::make_unique<GpuSampler>(
        opt.worker_gpus.nvml.get(), offered,
        GpuSampler::Options{absl::Milliseconds(static_cast<int64_t>(opt.gpu_sample_interval_s * 1000))}, clock);
    sampler->Start();
  }
  // One channel (same target and credentials) for Connect and the artifact uploads.
  std::shared_ptr<grpc::Channel> channel =
      opt.tls_material ? ControllerLink::MakeChannel(opt.controller, MakeChannelCredentials(*opt.tls_material))
                       : ControllerLink::MakeChannel(opt.controller);
  // Files ranks announce go up in the background; the queue is not persisted, so what
  // is still queued at shutdown is not uploaded (a partial stays resumable).
  ArtifactUploader uploader(ArtifactUploader::Options::FromEnvironment(),
                            MakeGrpcArtifactTransport(channel), clock);
  RankSupervisor supervisor(
      {.worker_name = opt.name, .gloo_host = opt.address, .rank_binary = opt.rank_binary,
       .work_dir = opt.work_dir, .slots = opt.slots, .threads_per_rank = opt.threads_per_rank,
       .artifact_sink =
           [&uploader](std::string path, v1::ArtifactHeader header) {
             uploader.Enqueue(std::move(path), std::move(header));
           },
       .gpus = offered, .nccl_env = opt.nccl_env},
      &launcher, clock, [&](v1::Event e) { outbox.Add(std::move(e), clock->Now()); });

  ControllerLink::Options link_opt;
  v1::Register &reg = link_opt.registration;
  reg.set_name(opt.name);
  reg.set_slots(opt.slots);
  reg.set_address(opt.address);
  reg.set_rendezvous_port_min(opt.port_min);
  reg.set_rendezvous_port_max(opt.port_max);
  reg.set_device(offered.empty() ? "cpu" : "cuda");
  for (const v1::GpuDevice &g : offered) *reg.add_gpus() = g;
  reg.set_gpu_driver_version(opt.worker_gpus.inventory.driver_version);
  reg.set_cuda_driver_version(opt.worker_gpus.inventory.cuda_driver_version);
  reg.set_nvlink_topology_known(!offered.empty() && opt.worker_gpus.inventory.nvlink_topology_known);
  *reg.mutable_capabilities() = capabilities;
  for (const std::string &setting : opt.nccl_env_flags) reg.add_nccl_env(setting);
  if (sampler) link_opt.gpu_samples = [&sampler] { return sampler->Latest(); };
  reg.set_memory_bytes(opt.memory_gib > 0 ? static_cast<int64_t>(opt.memory_gib * (1ull << 30)) : HostMemoryBytes());
  ControllerLink link(link_opt, channel, &supervisor, &outbox, clock);
  spdlog::info("worker {} starting: controller={} ({}) slots={} gpus={} rank_binary={} work_dir={} threads={}",
               opt.name, opt.controller, opt.tls_material ? "mutual TLS" : "plaintext", opt.slots,
               offered.size(), opt.rank_binary, opt.work_dir, opt.threads_per_rank);
  if (opt.insecure) {
    spdlog::warn("--insecure: a --health-listen beyond loopback is allowed (plaintext, no authentication)");
  }
  std::unique_ptr<HealthServer> health;
  if (!opt.health_listen.empty()) {
    absl::StatusOr<std::unique_ptr<HealthServer>> started =
        HealthServer::Start(opt.health_listen, [&link] { return link.registered(); });
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      uploader.Stop();
      return 2;
    }
    health = std::move(*started);
    spdlog::info("health: grpc.health.v1 on {} (port {})", opt.health_listen, health->port());
  }
  link.Start();
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {} received: stopping ranks", sig);
  if (health) health->Shutdown();  // not ready from here on
  supervisor.KillAll("worker shutting down");
  if (!link.Drain(absl::Seconds(2))) spdlog::warn("exiting with unacknowledged events");
  link.Stop();
  if (sampler) sampler->Stop();
  uploader.Stop();
  return 0;
}
