// Figures for hang detection and profiler traces (issue 12), one CPU rank:
//   - the flight recorder's cost per collective (FlightRing::Enter + Exit, the work
//     CollectiveGroup adds to each collective of a group of more than one rank);
//   - mean step time with neither watchdog nor profiler, with the watchdog thread
//     running over a ring (nothing hangs), and with the trace profiler recording every
//     step (the cost of a profiling window), plus the trace size per step.
// Prints the BLAS core it ran (openblas_get_corename) and the threads. Asserts nothing.
//
//   trainyard-diagnostics-bench --preset debug --steps 10
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/flight/flight_ring.h"
#include "worker/engine/base/torch_compat.h"
#include "worker/engine/diagnostics/watchdog.h"
#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/parallel/mesh/collective_group.h"
#include "worker/engine/parallel/mesh/process_mesh.h"
#include "worker/engine/train/event_writer.h"
#include "worker/engine/train/gemm_peak_probe.h"
#include "worker/engine/train/trace_profiler.h"
#include "worker/engine/train/trainer.h"

namespace {

using namespace trainyard::engine;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string preset = "debug";
  int steps = 10;
  int warmup = 3;
  int threads = 2;
  long records = 2000000;
};

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double RecordNs(const std::string& dir, long n) {
  std::string error;
  auto ring = trainyard::flight::FlightRing::Create(dir, 0, 2, &error);
  if (!ring) throw std::runtime_error(error);
  const int g = ring->RegisterGroup("world", 2);
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) ring->Exit(g, ring->Enter(g, "allreduce", i));
  return MsSince(t0) * 1e6 / static_cast<double>(n);
}

int Run(const Flags& f) {
#if defined(__GLIBC__)
  // As trainyard-rank does: freed step memory stays in the heap for the next step.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  fused::SetEnabledFromEnvironment();
  char tmpl[] = "/tmp/trainyard-diag-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::string dir = tmpl;
  const double ns = RecordNs(dir + "/record", f.records);

  const int total = f.warmup + 3 * f.steps;
  const EngineConfig config = PresetJob(f.preset, {"training.steps=" + std::to_string(total)});
  if (config.parallelism.world_size() != 1 || config.resources.device != "cpu") {
    throw std::invalid_argument("trainyard-diagnostics-bench runs one CPU rank (dp = tp = 1, device = cpu)");
  }
  at::set_num_threads(f.threads);
  GemmPeakProbe::SetBlasThreads(f.threads);
  std::string error;
  auto ring = trainyard::flight::FlightRing::Create(dir + "/flight", 0, 1, &error);
  if (!ring) throw std::runtime_error(error);
  auto world = CollectiveGroup::OverStore(compat::MakeHashStore(), 0, 1, "127.0.0.1", std::chrono::seconds(60));
  world->AttachRecorder(ring.get(), "world");
  auto mesh = ProcessMesh::Build(std::move(world), config.parallelism);
  std::ostringstream sink;
  EventWriter events(sink);
  TrainerOptions options;
  options.threads = f.threads;
  Trainer trainer(config, *mesh, events, options);

  int step = 0;
  auto timed = [&](int n) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      ring->SetStep(++step);
      trainer.Step(step);
      ring->MarkProgress();
    }
    return MsSince(t0) / n;
  };
  // The variants take turns, one step each, so a machine that speeds up or slows down
  // during the run shifts all three alike.
  timed(f.warmup);
  double plain = 0, watched = 0, profiled = 0;
  std::size_t trace_bytes = 0;
  WatchdogOptions w;
  w.artifacts_dir = dir + "/artifacts";
  w.collective_timeout_s = 300;
  w.step_timeout_s = 300;
  for (int i = 0; i < f.steps; ++i) {
    plain += timed(1);
    {
      Watchdog watchdog(*ring, events, w);
      watchdog.Start();
      watched += timed(1);
    }
    TraceProfiler::Start();
    profiled += timed(1);
    trace_bytes += TraceProfiler::Stop(0, 1, "gloo", dir).size();
  }
  plain /= f.steps;
  watched /= f.steps;
  profiled /= f.steps;

  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("%s, 1 CPU rank, %d threads, GEMM %s, BLAS core %s%s; %d steps of each variant, interleaved, after %d warmup\n",
              f.preset.c_str(), f.threads, cpu_blas::GemmName().c_str(), GemmPeakProbe::BlasCoreName().c_str(),
              coretype ? (std::string(" (OPENBLAS_CORETYPE=") + coretype + ")").c_str() : "", f.steps, f.warmup);
  std::printf("flight recorder: %.1f ns per collective (Enter + Exit, mean of %ld)\n", ns, f.records);
  std::printf("step, no watchdog, no profiler:     %8.2f ms\n", plain);
  std::printf("step, watchdog running (no hang):   %8.2f ms (%+.1f%%)\n", watched, 100 * (watched / plain - 1));
  std::printf("step, trace profiler recording:     %8.2f ms (%+.1f%%), trace %.1f KiB per step\n", profiled,
              100 * (profiled / plain - 1), static_cast<double>(trace_bytes) / 1024.0 / f.steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"trainyard-diagnostics-bench: cost of the flight recorder, the watchdog and the trace profiler"};
  app.add_option("--preset", f.preset, "model preset (debug, tiny, gpu_small)")->capture_default_str();
  app.add_option("--steps", f.steps, "timed steps per variant")->capture_default_str()->check(CLI::Range(1, 10000));
  app.add_option("--warmup", f.warmup, "untimed steps before each variant")->capture_default_str()->check(CLI::Range(0, 10000));
  app.add_option("--threads", f.threads, "intra-op threads")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--records", f.records, "Enter/Exit pairs timed")->capture_default_str()->check(CLI::Range(1L, 1000000000L));
  CLI11_PARSE(app, argc, argv);
  try {
    return Run(f);
  } catch (const std::exception& e) {
    std::cerr << "trainyard-diagnostics-bench: error: " << e.what() << std::endl;
    return 2;
  }
}
