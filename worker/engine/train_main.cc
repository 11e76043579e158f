// trainyard-train: runs a job locally on N trainyard-rank processes, as torchrun does.
// stdout: with --json, rank 0's Event JSON lines as they come; otherwise one human line
// per step. Diagnostics and the ranks' stderr go to stderr. Exits 0 when every rank
// succeeded, else the failing rank's exit code with its error on stderr.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "worker/engine/engine_config.h"
#include "worker/engine/local_launcher.h"

namespace {

using namespace trainyard::engine;
using nlohmann::json;

struct TrainFlags {
  std::string config_path;
  std::vector<std::string> overrides;
  int nproc = 0;  // 0: dp*tp from the config
  int threads = 0;  // 0: cores / nproc
  std::string save_init;
  std::string load;
  bool json_output = false;
  bool print_config = false;
};

void PrintHuman(const json& event) {
  if (event.contains("step_metrics")) {
    const json& m = event["step_metrics"];
    std::printf("step %5lld  loss %.4f  grad_norm %.4f  lr %.3e  tok/s %.0f  step_ms %.1f\n",
                m.value("step", 0LL), m.value("loss", 0.0), m.value("grad_norm", 0.0),
                m.value("lr", 0.0), m.value("tokens_per_s", 0.0), m.value("step_ms", 0.0));
  } else if (event.contains("log")) {
    std::printf("[%s] %s\n", event["log"].value("level", "").c_str(), event["log"].value("message", "").c_str());
  } else {
    std::printf("%s\n", event.dump().c_str());
  }
  std::fflush(stdout);
}

int Train(const TrainFlags& f) {
  const json config = LoadLocalJobConfig(f.config_path, f.overrides);
  ParseEngineConfig(config.dump());  // the rank's own validation, before spawning anything
  if (f.print_config) {
    std::cout << config.dump() << std::endl;
    return 0;
  }
  const int world = ConfigWorldSize(config);
  if (f.nproc != 0 && f.nproc != world) {
    throw std::invalid_argument("--nproc " + std::to_string(f.nproc) + " disagrees with parallelism.dp*tp = " +
                                std::to_string(world));
  }
  LaunchOptions opts;
  opts.rank_binary = LocalLauncher::RankBinaryNextToSelf();
  opts.config = config;
  opts.nproc = world;
  opts.threads = f.threads > 0 ? f.threads : LocalLauncher::DefaultThreads(world);
  opts.rank_env = LocalLauncher::RankThreadEnv(opts.threads);
  if (!f.save_init.empty()) opts.rank_args.insert(opts.rank_args.end(), {"--save-init", f.save_init});
  if (!f.load.empty()) opts.rank_args.insert(opts.rank_args.end(), {"--load", f.load});

  LocalLauncher::InstallSignalHandlers();
  const LaunchResult result = LocalLauncher::Run(opts, [&](int rank, const std::string& line) {
    if (rank != 0) return;  // other ranks' errors reach stderr through their own stderr
    const json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded()) {
      std::cerr << "rank 0: " << line << "\n";
    } else if (f.json_output) {
      std::cout << line << std::endl;
    } else {
      PrintHuman(event);
    }
  });
  if (result.exit_code != 0) std::cerr << "trainyard-train: " << result.error << std::endl;
  return result.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  TrainFlags f;
  CLI::App app{"trainyard-train: run a Trainyard job on local trainyard-rank processes"};
  app.add_option("config", f.config_path, "job file: TOML, or JobSpec proto3 JSON")->required();
  app.add_option("--set", f.overrides, "override section.key=value (repeatable)")->allow_extra_args(false);
  app.add_option("--nproc", f.nproc, "number of ranks; must equal parallelism.dp*tp (default: that)");
  app.add_option("--threads", f.threads, "intra-op threads per rank (default: cores / nproc)")->check(CLI::Range(1, 1024));
  app.add_option("--save-init", f.save_init, "rank writes the initial weights to this .safetensors");
  app.add_option("--load", f.load, "ranks start from the weights in this .safetensors");
  app.add_flag("--json", f.json_output, "print rank 0's events as JSON lines");
  app.add_flag("--print-config", f.print_config, "print the normalised JobSpec JSON and exit");
  CLI11_PARSE(app, argc, argv);
  try {
    return Train(f);
  } catch (const std::exception& e) {
    std::cerr << "trainyard-train: error: " << e.what() << std::endl;
    return 2;
  }
}
