// trainyard-worker: runs the ranks the controller assigns to this machine.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/posix_process_launcher.h"
#include "worker/controller_link.h"
#include "worker/event_outbox.h"
#include "worker/rank_supervisor.h"

namespace {

struct Options {
  std::string controller;
  int slots = 1;
  std::string name;
  std::string address = "127.0.0.1";
  std::string rendezvous_ports = "29500-29999";
  std::string rank_binary;
  std::string work_dir;
  int threads_per_rank = 0;
};

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::App app{
      "trainyard-worker: runs Trainyard rank processes assigned by "
      "the controller"};
  app.add_option("--controller", opt.controller, "Controller WorkerService address, HOST:PORT")
      ->required();
  app.add_option("--slots", opt.slots, "Rank processes this worker may run at once")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--name", opt.name, "Unique worker name shown by the controller")->required();
  app.add_option("--address", opt.address, "Host other workers' ranks use to reach this one")
      ->capture_default_str();
  app.add_option("--rendezvous-ports", opt.rendezvous_ports,
                 "Port range MIN-MAX for rendezvous stores hosted here")
      ->capture_default_str();
  app.add_option("--rank-binary", opt.rank_binary,
                 "Rank executable (default: trainyard-rank next to this binary)");
  app.add_option("--work-dir", opt.work_dir,
                 "Directory for per-attempt configs (default: "
                 "/tmp/trainyard-worker-NAME)");
  app.add_option("--threads-per-rank", opt.threads_per_rank,
                 "Compute threads per rank (default: max(1, cores / slots))");
  CLI11_PARSE(app, argc, argv);

  int port_min = 0, port_max = 0;
  char dash = 0;
  if (std::sscanf(opt.rendezvous_ports.c_str(), "%d%c%d", &port_min, &dash, &port_max) != 3 ||
      dash != '-' || port_min < 1 || port_max > 65535 || port_min > port_max) {
    std::fprintf(stderr, "--rendezvous-ports: expected MIN-MAX within 1-65535, got '%s'\n",
                 opt.rendezvous_ports.c_str());
    return 2;
  }
  if (opt.rank_binary.empty()) opt.rank_binary = trainyard::ExecutableSibling("trainyard-rank");
  if (opt.work_dir.empty()) opt.work_dir = "/tmp/trainyard-worker-" + opt.name;
  if (opt.threads_per_rank <= 0) {
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    opt.threads_per_rank = std::max(1, cores / opt.slots);
  }
  // Ranks inherit these: OpenMP and OpenBLAS otherwise size their pools to every core
  // and spin while idle, so ranks sharing a machine would oversubscribe it. A value
  // the operator set wins.
  const std::string threads = std::to_string(opt.threads_per_rank);
  setenv("OMP_NUM_THREADS", threads.c_str(), 0);
  setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 0);
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));

  // Every thread inherits this mask; the main thread takes the signals with
  // sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  trainyard::RealClock clock;
  trainyard::EventOutbox outbox({});
  trainyard::PosixProcessLauncher launcher;
  trainyard::RankSupervisor::Options sup;
  sup.worker_name = opt.name;
  sup.gloo_host = opt.address;
  sup.rank_binary = opt.rank_binary;
  sup.work_dir = opt.work_dir;
  sup.slots = opt.slots;
  sup.threads_per_rank = opt.threads_per_rank;
  trainyard::RankSupervisor supervisor(sup, &launcher, &clock, [&](trainyard::v1::Event e) {
    outbox.Add(std::move(e), clock.Now());
  });

  trainyard::ControllerLink::Options link_opt;
  auto *reg = &link_opt.registration;
  reg->set_name(opt.name);
  reg->set_slots(opt.slots);
  reg->set_address(opt.address);
  reg->set_rendezvous_port_min(port_min);
  reg->set_rendezvous_port_max(port_max);
  reg->set_device("cpu");
  trainyard::ControllerLink link(link_opt, trainyard::ControllerLink::MakeChannel(opt.controller),
                                 &supervisor, &outbox, &clock);
  spdlog::info(
      "worker {} starting: controller={} slots={} rank_binary={} "
      "work_dir={} threads={}",
      opt.name, opt.controller, opt.slots, opt.rank_binary, opt.work_dir, opt.threads_per_rank);
  link.Start();

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {} received: stopping ranks", sig);
  supervisor.KillAll("worker shutting down");
  if (!link.Drain(absl::Seconds(2))) spdlog::warn("exiting with unacknowledged events");
  link.Stop();
  return 0;
}
