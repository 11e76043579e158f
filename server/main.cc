// trainyard-controller: accepts jobs, schedules them onto workers, stores events.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "server/controller_server.h"
#include "spdlog/spdlog.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  trainyard::ControllerOptions options;
  double heartbeat_timeout_s = 15;
  std::string port_file;
  CLI::App app{"trainyard-controller: the Trainyard job controller (gRPC JobService and "
               "WorkerService, SQLite state, Prometheus /metrics)"};
  app.add_option("--listen", options.listen, "gRPC address host:port (port 0 picks one)")
      ->capture_default_str();
  app.add_option("--data-dir", options.data_dir, "Directory for trainyard.db (SQLite, WAL)")
      ->required();
  app.add_option("--metrics-listen", options.metrics_listen,
                 "Prometheus /metrics address host:port (empty: off)");
  app.add_flag("--insecure", options.insecure,
               "Allow a non-loopback --listen without TLS (TLS is not built yet)");
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s,
                 "Seconds without a heartbeat (or connection) before a worker is lost and "
                 "its gangs are torn down")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--port-file", port_file, "Write the bound gRPC port to this file");
  CLI11_PARSE(app, argc, argv);
  options.manager.heartbeat_timeout = absl::Seconds(heartbeat_timeout_s);

  auto server = trainyard::ControllerServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "trainyard-controller: %s\n",
                 std::string(server.status().message()).c_str());
    return 2;
  }
  spdlog::info("trainyard-controller listening on port {} (data {})", (*server)->port(),
               options.data_dir);
  if (!port_file.empty()) {
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  spdlog::info("trainyard-controller shutting down");
  (*server)->Shutdown();
  return 0;
}
