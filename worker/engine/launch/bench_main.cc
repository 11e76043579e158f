// trainyard-bench: runs a preset for warmup+steps steps on local trainyard-rank
// processes and prints one summary of the non-warmup steps (JSON with --json).
// `--backend eager,jit --runs 5` runs the backends alternately, 5 runs each (eager, jit,
// eager, jit, ...: drift in the machine's speed falls on both alike), prints every run
// and then each backend's medians over its runs and their ratio to the first backend's.
// `--precision fp32,bf16` does the same for training.mixed_precision (with several
// backends too: every backend/precision pair is a variant of each round); a bf16 run's
// MFU is against the bf16 GEMM peak its ranks measure.
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
#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/launch/engine_capabilities.h"
#include "worker/engine/launch/local_launcher.h"
#include "worker/launch/rank_launch.h"
#include "worker/engine/parallel/mesh/device_placement.h"
#include "worker/engine/train/flops_model.h"
#include "worker/engine/train/gemm_peak_probe.h"

namespace {

using namespace trainyard::engine;
using nlohmann::json;

struct BenchFlags {
  std::string preset = "debug";
  std::string backend = "eager";  // one backend, or several separated by commas
  std::string precision = "fp32";  // training.mixed_precision: one, or several separated by commas
  int runs = 1;
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

// A variant's name: the backend, with "/precision" when --precision lists more than one.
std::string Variant(const BenchFlags& f, const std::string& backend, const std::string& precision) {
  return f.precision.find(',') == std::string::npos ? backend : backend + "/" + precision;
}

// One run of `backend` in `precision`; the summary object, or throws with the launcher's error.
json Measure(const BenchFlags& f, const std::string& backend, const std::string& precision) {
  std::vector<std::string> overrides = {"compile.backend=" + backend, "training.mixed_precision=" + precision,
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
  RequireSupported(engine);
  const int world = engine.parallelism.world_size();
  if (f.nproc != 0 && f.nproc != world) {
    throw std::invalid_argument("--nproc " + std::to_string(f.nproc) + " disagrees with parallelism.dp*tp = " +
                                std::to_string(world) + " (set parallelism.dp/tp with --set)");
  }
  LaunchOptions opts;
  opts.rank_binary = LocalLauncher::RankBinaryNextToSelf();
  opts.config_json = trainyard::spec::ToJson(engine);
  opts.device = engine.resources.device;
  opts.nproc = world;
  opts.threads = f.threads > 0 ? f.threads : trainyard::DefaultRankThreads(trainyard::OnlineCores(), world);

  std::vector<double> step_ms, peak_flops, rank0_mfu;
  LocalLauncher::InstallSignalHandlers();
  const LaunchResult result = LocalLauncher::Run(opts, [&](const trainyard::v1::Event& e) {
    if (e.rank() != 0 || !e.has_step_metrics()) return;
    const trainyard::v1::StepMetrics& m = e.step_metrics();
    if (m.step() <= f.warmup) return;
    step_ms.push_back(m.step_ms());
    rank0_mfu.push_back(m.mfu());
    if (m.mfu() > 0) peak_flops.push_back(m.model_tflops() * 1e12 / m.mfu());
  });
  if (result.exit_code != 0) throw std::runtime_error(result.error);
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

  json out = {{"preset", f.preset}, {"backend", backend}, {"mixed_precision", precision},
              {"variant", Variant(f, backend, precision)}, {"device", engine.resources.device}, {"nproc", world},
              {"dp", engine.parallelism.dp}, {"tp", engine.parallelism.tp}, {"ep", engine.parallelism.ep},
              {"threads", opts.threads}, {"steps", f.steps}, {"warmup", f.warmup},
              {"step_ms", median_ms}, {"tokens_per_s", tokens_per_s},
              {"model_tflops", model_flops / 1e12},
              {"mfu", peak > 0 ? model_flops / (world * peak) : 0.0},
              {"rank0_mfu", Median(rank0_mfu)},
              {"gemm_peak_gflops_per_rank", peak / 1e9},
              {"flops_per_token", fm.flops_per_token},
              {"peak_rss_mb", rss}, {"blas_core", GemmPeakProbe::BlasCoreName()},
              {"gemm", engine.resources.device == "cpu" ? json(cpu_blas::GemmName()) : json(nullptr)},
              {"openblas_coretype", coretype ? json(coretype) : json(nullptr)}};
  // The thread environment the ranks ran with: inherited, or set by the launcher.
  json rank_env = json::object();
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY"}) {
    const char* v = std::getenv(name);
    rank_env[name] = v ? json(v) : json(nullptr);
  }
  for (const auto& [name, value] : result.rank_env) rank_env[name] = value;
  out["rank_env"] = rank_env;
  return out;
}

void PrintRun(const json& r) {
  const json& coretype = r["openblas_coretype"];
  std::printf("%s, %s, %s, %s, %d rank(s) (dp=%d tp=%d ep=%d), %d threads/rank, GEMM %s, BLAS core %s%s\n",
              r["preset"].get<std::string>().c_str(), r["backend"].get<std::string>().c_str(),
              r["mixed_precision"].get<std::string>().c_str(),
              r["device"].get<std::string>().c_str(), r["nproc"].get<int>(), r["dp"].get<int>(), r["tp"].get<int>(),
              r["ep"].get<int>(), r["threads"].get<int>(),
              r["gemm"].is_null() ? "device" : r["gemm"].get<std::string>().c_str(),
              r["blas_core"].get<std::string>().c_str(),
              coretype.is_null() ? "" : (" (OPENBLAS_CORETYPE=" + coretype.get<std::string>() + ")").c_str());
  std::printf("  %d steps after %d warmup: step %.1f ms (median), %.0f tokens/s\n", r["steps"].get<int>(),
              r["warmup"].get<int>(), r["step_ms"].get<double>(), r["tokens_per_s"].get<double>());
  std::printf("  rank environment: %s\n", r["rank_env"].dump().c_str());
  std::printf("  model %.3f TFLOP/s, MFU %.1f%% of %.1f GFLOP/s GEMM peak per rank, peak RSS %.0f MB\n",
              r["model_tflops"].get<double>(), 100 * r["mfu"].get<double>(),
              r["gemm_peak_gflops_per_rank"].get<double>(), r["peak_rss_mb"].get<double>());
}

std::vector<std::string> CommaList(const std::string& flag, const std::string& list) {
  std::vector<std::string> out;
  std::string::size_type begin = 0;
  while (begin <= list.size()) {
    const auto end = std::min(list.find(',', begin), list.size());
    out.push_back(list.substr(begin, end - begin));
    if (out.back().empty()) throw std::invalid_argument(flag + ": empty name in \"" + list.substr(0, 100) + "\"");
    begin = end + 1;
  }
  return out;
}

int Bench(const BenchFlags& f) {
  // Every (backend, precision) pair is a variant; a round runs each once, in order.
  std::vector<std::pair<std::string, std::string>> variants;
  for (const auto& b : CommaList("--backend", f.backend)) {
    for (const auto& p : CommaList("--precision", f.precision)) variants.emplace_back(b, p);
  }
  std::vector<std::string> names;
  for (const auto& [b, p] : variants) names.push_back(Variant(f, b, p));
  std::vector<json> runs;
  for (int i = 0; i < f.runs; ++i) {
    for (const auto& [b, p] : variants) {
      runs.push_back(Measure(f, b, p));
      if (!f.json_output) {
        if (f.runs > 1 || variants.size() > 1) std::printf("run %d/%d: ", i + 1, f.runs);
        PrintRun(runs.back());
        std::fflush(stdout);
      }
    }
  }
  if (runs.size() == 1) {
    if (f.json_output) std::cout << runs[0].dump() << std::endl;
    return 0;
  }
  // Medians per variant over its runs, and tokens/s relative to the first variant.
  json summary = json::array();
  double first_tokens = 0;
  for (const auto& b : names) {
    std::vector<double> step_ms, tokens, mfu;
    for (const auto& r : runs) {
      if (r["variant"] != b) continue;
      step_ms.push_back(r["step_ms"].get<double>());
      tokens.push_back(r["tokens_per_s"].get<double>());
      mfu.push_back(r["mfu"].get<double>());
    }
    if (summary.empty()) first_tokens = Median(tokens);
    summary.push_back({{"variant", b}, {"runs", tokens.size()}, {"step_ms", Median(step_ms)},
                       {"tokens_per_s", Median(tokens)}, {"mfu", Median(mfu)},
                       {"tokens_per_s_vs_first", first_tokens > 0 ? Median(tokens) / first_tokens : 0.0}});
  }
  if (f.json_output) {
    std::cout << json{{"runs", runs}, {"medians", summary}}.dump() << std::endl;
    return 0;
  }
  std::printf("medians over %d alternating runs each:\n", f.runs);
  for (const auto& m : summary) {
    std::printf("  %-10s step %.1f ms, %.0f tokens/s (%.3fx %s), MFU %.1f%%\n",
                m["variant"].get<std::string>().c_str(), m["step_ms"].get<double>(),
                m["tokens_per_s"].get<double>(), m["tokens_per_s_vs_first"].get<double>(), names[0].c_str(),
                100 * m["mfu"].get<double>());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchFlags f;
  CLI::App app{"trainyard-bench: measure training throughput and MFU on local ranks\n"
               "  --set resources.device=cuda: measure on CUDA (rank i on GPU i % device_count, NCCL groups;\n"
               "  MFU against the GPU's measured fp32 GEMM peak, TF32 off)"};
  app.add_option("--preset", f.preset, "model preset (debug, tiny, gpu_small)")->capture_default_str();
  app.add_option("--backend", f.backend,
                 "compile backend: eager, jit, cudagraph (CUDA with a visible GPU); several separated by commas "
                 "(eager,jit) run alternately and are compared")
      ->capture_default_str();
  app.add_option("--precision", f.precision,
                 "training.mixed_precision: fp32, bf16; both (fp32,bf16) run alternately and are compared "
                 "(MFU against each precision's GEMM peak)")
      ->capture_default_str();
  app.add_option("--runs", f.runs, "runs per variant (backend/precision), alternating between them; medians are printed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--steps", f.steps, "measured steps")->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", f.warmup, "steps run before measuring")->capture_default_str()->check(CLI::Range(0, 1000000));
  app.add_option("--nproc", f.nproc, "ranks; must equal parallelism.dp*tp (default: that)");
  app.add_option("--threads", f.threads,
                 "intra-op threads per rank (default: cores / nproc; sets OMP_NUM_THREADS and "
                 "OPENBLAS_NUM_THREADS for the ranks unless set, and OMP_WAIT_POLICY=PASSIVE for CUDA ranks)")
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
