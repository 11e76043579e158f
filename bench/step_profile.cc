// trainyard-step-profile: where one rank's training step spends its time, by operator.
// Builds the Trainer in this process (one rank, an in-process store), runs --warmup
// steps, then --steps steps under OpProfile (worker/engine/train/op_profile.h) and
// prints, per step: the wall time, each operator's / range's self time and calls
// (largest first, those above --min-ms), and the time outside any range. Prints the
// BLAS core it ran (openblas_get_corename) and the threads.
//
//   trainyard-step-profile --preset debug --backend eager --steps 5
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "worker/engine/base/torch_compat.h"
#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/parallel/mesh/collective_group.h"
#include "worker/engine/parallel/mesh/process_mesh.h"
#include "worker/engine/train/event_writer.h"
#include "worker/engine/train/gemm_peak_probe.h"
#include "worker/engine/train/op_profile.h"
#include "worker/engine/train/trainer.h"

namespace {

using namespace trainyard::engine;

struct Flags {
  std::string preset = "debug";
  std::string backend = "eager";
  int steps = 5;
  int warmup = 3;
  int threads = 2;
  int top = 40;
  double min_ms = 0.05;
  std::vector<std::string> overrides;
};

int Profile(const Flags& f) {
  fused::SetEnabledFromEnvironment();
  std::vector<std::string> overrides = {"compile.backend=" + f.backend,
                                        "training.steps=" + std::to_string(f.steps + f.warmup)};
  overrides.insert(overrides.end(), f.overrides.begin(), f.overrides.end());
  const EngineConfig config = PresetJob(f.preset, overrides);
  if (config.parallelism.world_size() != 1 || config.resources.device != "cpu") {
    throw std::invalid_argument("trainyard-step-profile profiles one CPU rank (dp = tp = 1, device = cpu)");
  }
  at::set_num_threads(f.threads);
  GemmPeakProbe::SetBlasThreads(f.threads);
  auto world = CollectiveGroup::OverStore(compat::MakeHashStore(), 0, 1, "127.0.0.1", std::chrono::seconds(60));
  auto mesh = ProcessMesh::Build(std::move(world), config.parallelism);
  std::ostringstream sink;  // step metrics are not this program's output
  EventWriter events(sink);
  TrainerOptions options;
  options.threads = f.threads;
  Trainer trainer(config, *mesh, events, options);
  for (int s = 1; s <= f.warmup; ++s) trainer.Step(s);

  OpProfile::Start();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = f.warmup + 1; s <= f.warmup + f.steps; ++s) trainer.Step(s);
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<OpTime> ops = OpProfile::Stop();

  const double per_step = wall_ms / f.steps;
  double ranged = 0;
  for (const auto& o : ops) ranged += o.self_ms;
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("%s, %s, 1 rank, %d threads, GEMM %s, BLAS core %s%s; %d steps after %d warmup\n", f.preset.c_str(),
              f.backend.c_str(), f.threads, cpu_blas::GemmName().c_str(), GemmPeakProbe::BlasCoreName().c_str(),
              coretype ? (std::string(" (OPENBLAS_CORETYPE=") + coretype + ")").c_str() : "", f.steps, f.warmup);
  std::printf("step %.1f ms (wall, mean, profiled); self time per step by range:\n", per_step);
  std::printf("%10s %6s %10s  %s\n", "ms/step", "%", "calls/step", "range");
  int shown = 0;
  double rest = 0;
  for (const auto& o : ops) {
    const double ms = o.self_ms / f.steps;
    if (shown >= f.top || ms < f.min_ms) {
      rest += ms;
      continue;
    }
    ++shown;
    std::printf("%10.2f %6.1f %10.1f  %s\n", ms, 100 * ms / per_step, static_cast<double>(o.calls) / f.steps,
                o.name.c_str());
  }
  std::printf("%10.2f %6.1f %10s  (%zu other ranges)\n", rest, 100 * rest / per_step, "", ops.size() - shown);
  const double outside = per_step - ranged / f.steps;
  std::printf("%10.2f %6.1f %10s  (outside any range)\n", outside, 100 * outside / per_step, "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"trainyard-step-profile: self time per operator of one CPU rank's training step"};
  app.add_option("--preset", f.preset, "model preset (debug, tiny, gpu_small)")->capture_default_str();
  app.add_option("--backend", f.backend, "compile backend: eager, jit")->capture_default_str();
  app.add_option("--steps", f.steps, "profiled steps")->capture_default_str()->check(CLI::Range(1, 10000));
  app.add_option("--warmup", f.warmup, "steps run first, not profiled")->capture_default_str()->check(CLI::Range(0, 10000));
  app.add_option("--threads", f.threads, "intra-op threads (also OpenBLAS's)")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--top", f.top, "ranges listed")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--min-ms", f.min_ms, "list only ranges above this many ms per step")->capture_default_str();
  app.add_option("--set", f.overrides, "override section.key=value (repeatable)")->allow_extra_args(false);
  CLI11_PARSE(app, argc, argv);
  try {
    return Profile(f);
  } catch (const std::exception& e) {
    std::cerr << "trainyard-step-profile: error: " << e.what() << std::endl;
    return 2;
  }
}
