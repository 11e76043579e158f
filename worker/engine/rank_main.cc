// trainyard-rank: one training rank. stdout carries only trainyard.v1.Event JSON lines;
// human-readable diagnostics go to stderr. Exit 0 after the last step, 1 on any error
// (after a final "error" log event).
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "worker/engine/collective_group.h"
#include "worker/engine/engine_config.h"
#include "worker/engine/event_writer.h"
#include "worker/engine/gemm_peak_probe.h"
#include "worker/engine/trainer.h"

namespace {

struct RankFlags {
  std::string config_path;
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string gloo_host;
  int attempt = 1;
  int threads = 1;
};

using namespace trainyard::engine;

void RunRank(const RankFlags& f, EventWriter& events) {
  const EngineConfig config = LoadEngineConfigFile(f.config_path);
  at::set_num_threads(f.threads);
  const double peak = GemmPeakProbe::MeasureFlops();
  auto group = CollectiveGroup::Connect({f.rank, f.world_size, f.master_addr, f.master_port,
                                         f.gloo_host, config.parallelism.collective_timeout_s});
  Trainer trainer(config, *group, events, {f.threads, peak});
  if (f.rank == 0) {
    const FlopsModel& fm = trainer.flops();
    std::ostringstream os;
    os << "engine start: model=" << (config.model.preset.empty() ? "custom" : config.model.preset)
       << " params_total=" << fm.total_params << " params_embedding=" << fm.embedding_params
       << " params_active_non_embedding=" << fm.active_params
       << " flops_per_token=" << fm.flops_per_token << " dp=" << config.parallelism.dp
       << " threads=" << f.threads << " blas_core=" << GemmPeakProbe::BlasCoreName()
       << " gemm_peak_gflops=" << peak / 1e9 << " torch=" << TORCH_VERSION;
    events.Log("info", os.str());
  }
  trainer.Run();
}

}  // namespace

int main(int argc, char** argv) {
  RankFlags f;
  CLI::App app{"trainyard-rank: one data-parallel training rank of a Trainyard job"};
  app.add_option("--config", f.config_path, "JobSpec as proto3 JSON (proto field names)")->required();
  app.add_option("--rank", f.rank, "this rank, 0-based")->capture_default_str();
  app.add_option("--world-size", f.world_size, "number of ranks (= parallelism.dp)")->capture_default_str();
  app.add_option("--master-addr", f.master_addr, "host of rank 0's TCPStore")->capture_default_str();
  app.add_option("--master-port", f.master_port, "port of rank 0's TCPStore")->capture_default_str();
  app.add_option("--gloo-host", f.gloo_host, "address Gloo binds to (default: --master-addr)");
  app.add_option("--attempt", f.attempt, "attempt number, echoed into events")->capture_default_str();
  app.add_option("--threads", f.threads, "intra-op CPU threads")->capture_default_str()->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  EventWriter events(std::cout, f.rank, f.attempt);
  std::string error;
  try {
    RunRank(f, events);
    return 0;
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::cerr << "trainyard-rank " << f.rank << ": error: " << error << std::endl;
  events.Log("error", error);
  return 1;
}
