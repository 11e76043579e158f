// trainyard-e2e-bench: the walking skeleton's figures. Starts a local controller and
// one worker, runs the debug job through the real CLI for each dp given, and prints
// per run: submit -> first step event (s) and steady steps/s, from the events' own
// timestamps (the controller's PENDING event, the ranks' StepMetrics). Prints figures;
// asserts nothing.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/time/time.h"
#include "tests/support/test_process.h"

namespace {

using nlohmann::json;
using trainyard::testing::CommandResult;
using trainyard::testing::RunCommand;
using trainyard::testing::TestProcess;

double Seconds(const json& rfc3339) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, rfc3339.get<std::string>(), &t, &err)) return 0;
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir;
  std::string job_file;
  std::vector<int> dps = {1, 2};
  int steps = 20;
  int slots = 2;
  std::vector<std::string> sets;
  CLI::App app{"trainyard-e2e-bench: submit -> first step and steps/s through the real "
               "controller, worker and CLI"};
  app.add_option("--bin-dir", bin_dir, "Directory with the trainyard binaries")->required();
  app.add_option("--job", job_file, "Job file")->required();
  app.add_option("--dp", dps, "Data-parallel sizes to run, one job each")->capture_default_str();
  app.add_option("--steps", steps, "Steps per job")->capture_default_str();
  app.add_option("--slots", slots, "Worker slots")->capture_default_str();
  app.add_option("--set", sets, "Extra section.key=value overrides");
  CLI11_PARSE(app, argc, argv);

  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("trainyard_e2e_bench_" + std::to_string(getpid()));
  fs::create_directories(dir);
  TestProcess controller({bin_dir + "/trainyard-controller", "--listen", "127.0.0.1:0",
                          "--data-dir", (dir / "data").string(), "--port-file",
                          (dir / "port").string()},
                         (dir / "controller.log").string());
  std::string port = trainyard::testing::WaitForFile((dir / "port").string(), 20000);
  if (port.empty()) {
    std::fprintf(stderr, "controller did not start; see %s\n", (dir / "controller.log").c_str());
    return 1;
  }
  std::string address = "127.0.0.1:" + std::to_string(std::stoi(port));
  TestProcess worker({bin_dir + "/trainyard-worker", "--controller", address, "--slots",
                      std::to_string(slots), "--name", "bench", "--work-dir",
                      (dir / "worker").string()},
                     (dir / "worker.log").string());
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), bin_dir + "/trainyard");
    args.push_back("--controller");
    args.push_back(address);
    return RunCommand(args);
  };
  for (int i = 0; i < 100; ++i) {
    if (cli({"workers"}).out.find("bench") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("machine: %u cores (hardware_concurrency), worker slots %d\n",
              std::thread::hardware_concurrency(), slots);
  for (int dp : dps) {
    std::vector<std::string> args = {"submit", job_file, "--wait", "--output", "json",
                                     "--set", "training.steps=" + std::to_string(steps),
                                     "--set", "parallelism.dp=" + std::to_string(dp)};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    CommandResult r = cli(args);
    double submitted = -1, first_step = -1, last_step = -1;
    int64_t n_steps = 0;
    std::string engine_line, end_state;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
      json e = json::parse(line, nullptr, false);
      if (e.is_discarded() || !e.contains("time")) continue;
      if (e.contains("job_state")) {
        end_state = e["job_state"].value("state", "");
        if (submitted < 0) submitted = Seconds(e["time"]);
      }
      if (e.contains("log") && engine_line.empty() &&
          e["log"].value("message", "").rfind("engine start", 0) == 0) {
        engine_line = e["log"]["message"];
      }
      if (e.contains("step_metrics")) {
        double t = Seconds(e["time"]);
        if (first_step < 0) first_step = t;
        last_step = t;
        ++n_steps;
      }
    }
    std::printf("dp=%d: end state %s (exit %d), %lld step events\n", dp, end_state.c_str(),
                r.exit_code, static_cast<long long>(n_steps));
    if (n_steps >= 2) {
      std::printf("  submit -> first step event: %.2f s\n", first_step - submitted);
      std::printf("  steady steps/s (steps 1..%lld): %.3f\n", static_cast<long long>(n_steps),
                  (n_steps - 1) / (last_step - first_step));
    }
    std::printf("  %s\n", engine_line.c_str());
  }
  worker.Stop();
  controller.Stop();
  fs::remove_all(dir);
  return 0;
}
