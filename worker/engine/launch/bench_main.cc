// trainyard-bench: runs a preset for warmup+steps steps on local trainyard-rank
// processes and prints one summary of the non-warmup steps (JSON with --json).
//
// Figures:
//   step_ms       median rank-0 step time over the non-warmup steps
//   tokens_per_s  global tokens per step (batch_size * seq_len * dp) / median step time
//   model_tflops  flops_per_token (FlopsModel, docs/architecture.md) * tokens_per_s, all ranks
//   mfu           model_tflops / (nproc * per-rank GEMM peak). The peak is the one each
//                 rank measures in its own process at start-up (GemmPeakProbe, same
//                 threads and BLAS kernel as its training); rank 0's is recovered as
//                 model_tflops/mfu from its step metrics. With one rank this equals
//                 the rank's own median mfu.
//   peak_rss_mb   max over ranks of the process's peak RSS (wait4 rusage)
//   device        resources.device: "cpu", or "cuda" (rank i on GPU i % device_count,
//                 NCCL groups; the GEMM peak is then the GPU's fp32 peak, TF32 off)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/spec/json_io.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/launch/job_config.h"
#include "worker/engine/launch/local_launcher.h"
#include "worker/engine/launch/rank_env.h"
#include "worker/engine/parallel/mesh/device_placement.h"
#include "worker/engine/train/flops_model.h"
#include "worker/engine/train/gemm_peak_probe.h"

namespace {

using namespace trainyard::engine;
using nlohmann::json;

struct BenchFlags {
  std::string preset = "debug";
  std::string backend = "eager";
  int steps = 10;
  int warmup = 3;
  int nproc = 0;
  int threads = 0;
  std::vector<std::string> overrides;
  bool json_output = false;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int Bench(const BenchFlags& f) {
  std::vector<std::string> overrides = {"compile.backend=" + f.backend,
                                        "training.steps=" + std::to_string(f.steps + f.warmup),
                                        "training.log_freq=1"};
  overrides.insert(overrides.end(), f.overrides.begin(), f.overrides.end());
  EngineConfig engine = PresetJob(f.preset, overrides);
  // `--nproc N` alone means N data-parallel ranks (dp = N / tp) unless dp was set.
  const bool dp_given = std::any_of(f.overrides.begin(), f.overrides.end(), [](const std::string& o) {
    std::string key = o.substr(0, o.find('='));
    key.erase(std::remove(key.begin(), key.end(), ' '), key.end());  // --set "parallelism.dp = 2"
    return key == "parallelism.dp";
  });
  if (f.nproc > 0 && !dp_given) {
    if (f.nproc % engine.parallelism.tp != 0) throw std::invalid_argument("--nproc must be a multiple of parallelism.tp");
    engine.parallelism.dp = f.nproc / engine.parallelism.tp;
    RequireValid(engine);
  }
  DevicePlacement::RequireUsable(engine.resources);
  const int world = engine.parallelism.world_size();
  if (f.nproc != 0 && f.nproc != world) {
    throw std::invalid_argument("--nproc " + std::to_string(f.nproc) + " disagrees with parallelism.dp*tp = " +
                                std::to_string(world) + " (set parallelism.dp/tp with --set)");
  }
  LaunchOptions opts;
  opts.rank_binary = LocalLauncher::RankBinaryNextToSelf();
  opts.config_json = trainyard::spec::ToJson(engine);
  opts.nproc = world;
  opts.threads = f.threads > 0 ? f.threads : DefaultThreads(world);
  opts.rank_env = RankThreadEnv(opts.threads, OpenBlasThreadsInStep(engine));

  std::vector<double> step_ms, peak_flops, rank0_mfu;
  LocalLauncher::InstallSignalHandlers();
  const LaunchResult result = LocalLauncher::Run(opts, [&](int rank, const std::string& line) {
    if (rank != 0) return;
    const json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.contains("step_metrics")) return;
    const json& m = e["step_metrics"];
    if (m.value("step", 0) <= f.warmup) return;
    step_ms.push_back(m.value("step_ms", 0.0));
    const double mfu = m.value("mfu", 0.0);
    rank0_mfu.push_back(mfu);
    if (mfu > 0) peak_flops.push_back(m.value("model_tflops", 0.0) * 1e12 / mfu);
  });
  if (result.exit_code != 0) {
    std::cerr << "trainyard-bench: " << result.error << std::endl;
    return result.exit_code;
  }
  if (step_ms.empty()) throw std::runtime_error("rank 0 reported no step metrics after warmup");

  const FlopsModel fm = FlopsModel::FromConfig(engine.model, engine.training.seq_len);
  const double median_ms = Median(step_ms);
  const double global_tokens = static_cast<double>(engine.training.batch_size) * engine.training.seq_len *
                               engine.parallelism.dp;
  const double tokens_per_s = global_tokens / (median_ms / 1000.0);
  const double model_flops = fm.flops_per_token * tokens_per_s;
  const double peak = Median(peak_flops);
  double rss = 0;
  for (const auto& r : result.ranks) rss = std::max(rss, r.peak_rss_mb);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");

  json out = {{"preset", f.preset}, {"backend", f.backend}, {"device", engine.resources.device}, {"nproc", world},
              {"dp", engine.parallelism.dp}, {"tp", engine.parallelism.tp}, {"ep", engine.parallelism.ep},
              {"threads", opts.threads}, {"steps", f.steps}, {"warmup", f.warmup},
              {"step_ms", median_ms}, {"tokens_per_s", tokens_per_s},
              {"model_tflops", model_flops / 1e12},
              {"mfu", peak > 0 ? model_flops / (world * peak) : 0.0},
              {"rank0_mfu", Median(rank0_mfu)},
              {"gemm_peak_gflops_per_rank", peak / 1e9},
              {"flops_per_token", fm.flops_per_token},
              {"peak_rss_mb", rss}, {"blas_core", GemmPeakProbe::BlasCoreName()},
              {"openblas_coretype", coretype ? json(coretype) : json(nullptr)}};
  // The thread environment the ranks ran with: inherited, or set by the launcher.
  json rank_env = json::object();
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY"}) {
    const char* v = std::getenv(name);
    rank_env[name] = v ? json(v) : json(nullptr);
  }
  for (const auto& [name, value] : opts.rank_env) rank_env[name] = value;
  out["rank_env"] = rank_env;
  if (f.json_output) {
    std::cout << out.dump() << std::endl;
  } else {
    std::printf("%s, %s, %s, %d rank(s) (dp=%d tp=%d ep=%d), %d threads/rank, BLAS core %s%s\n", f.preset.c_str(),
                f.backend.c_str(), engine.resources.device.c_str(), world, engine.parallelism.dp, engine.parallelism.tp, engine.parallelism.ep,
                opts.threads, out["blas_core"].get<std::string>().c_str(),
                coretype ? (std::string(" (OPENBLAS_CORETYPE=") + coretype + ")").c_str() : "");
    std::printf("  %d steps after %d warmup: step %.1f ms (median), %.0f tokens/s\n", f.steps, f.warmup, median_ms,
                tokens_per_s);
    std::printf("  rank environment: %s\n", rank_env.dump().c_str());
    std::printf("  model %.3f TFLOP/s, MFU %.1f%% of %.1f GFLOP/s GEMM peak per rank, peak RSS %.0f MB\n",
                model_flops / 1e12, 100 * out["mfu"].get<double>(), peak / 1e9, rss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchFlags f;
  CLI::App app{"trainyard-bench: measure training throughput and MFU on local ranks\n"
               "  --set resources.device=cuda: measure on CUDA (rank i on GPU i % device_count, NCCL groups;\n"
               "  MFU against the GPU's measured fp32 GEMM peak, TF32 off)"};
  app.add_option("--preset", f.preset, "model preset (debug, tiny)")->capture_default_str();
  app.add_option("--backend", f.backend, "compile backend: eager, jit (cudagraph needs a CUDA build)")
      ->capture_default_str();
  app.add_option("--steps", f.steps, "measured steps")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", f.warmup, "steps run before measuring")->capture_default_str()->check(CLI::Range(0, 1000000));
  app.add_option("--nproc", f.nproc, "ranks; must equal parallelism.dp*tp (default: that)");
  app.add_option("--threads", f.threads,
                 "intra-op threads per rank (default: cores / nproc; sets OMP_NUM_THREADS and "
                 "OPENBLAS_NUM_THREADS for the ranks unless set, and OMP_WAIT_POLICY=PASSIVE unless the "
                 "step is the fused eager CPU one)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--set", f.overrides, "override section.key=value (repeatable)")->allow_extra_args(false);
  app.add_flag("--json", f.json_output, "print one JSON object");
  CLI11_PARSE(app, argc, argv);
  try {
    return Bench(f);
  } catch (const std::exception& e) {
    std::cerr << "trainyard-bench: error: " << e.what() << std::endl;
    return 2;
  }
}
