// trainyard-memory-table: the memory preflight's estimate against measurement (issue
// 27). For each layout of the debug preset, activation-checkpointing mode and
// precision it runs --steps steps with the local runner (`trainyard-train FILE --json
// --set ...`, real trainyard-rank processes on this machine), reads rank 0's
// StepMetrics.peak_tensor_bytes (tracked tensor bytes: worker/engine/diagnostics/
// tensor_memory.h, not RSS) and prints, per run, the estimate of one rank
// (spec::EstimateRankMemory: state, activations, total), the measured peak (the most
// over the steps after step 1; step 1 alone when only one ran) and measured/estimated.
// Only rank 0 reports step metrics, so rank 0 is what is measured. A run the runner
// refuses (bf16 on an engine without a bf16 path, a layout this box cannot start) is
// printed with its refusal, and the table goes on.
//
//   build/bin/trainyard-memory-table --bin-dir build/bin --examples-dir examples
//   build/bin/trainyard-memory-table --layouts dp1,tp2 --precisions fp32 --ac none
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/spec/memory_estimate.h"
#include "worker/engine/config/engine_config.h"

namespace {

struct Layout {
  std::string name;
  std::string file;                    // under --examples-dir
  std::vector<std::string> overrides;  // --set values
};

// The layouts of the debug preset this table knows, smallest first. ep is carved from
// the dp*tp ranks (docs/parallelism.md).
const std::vector<Layout>& KnownLayouts() {
  static const std::vector<Layout> layouts = {
      {"dp1", "debug.toml", {}},
      {"dp2", "debug.toml", {"parallelism.dp=2"}},
      {"tp2", "debug_tp2.toml", {}},
      {"dp2.ep2", "debug_ep2.toml", {}},
      {"tp2.ep2", "debug_tp2.toml", {"parallelism.ep=2"}},
      {"dp2.tp2", "debug_tp2.toml", {"parallelism.dp=2"}},
      {"dp2.tp2.ep2", "debug_tp2.toml", {"parallelism.dp=2", "parallelism.ep=2"}},
      {"dp4.ep4", "debug_ep2.toml", {"parallelism.dp=4", "parallelism.ep=4"}},
      // Sharded data parallelism (parallelism.dp_shard).
      {"dp2.shard2", "debug.toml", {"parallelism.dp=2", "parallelism.dp_shard=2"}},
      {"dp2.shard2.ep2", "debug_ep2.toml", {"parallelism.dp_shard=2"}},
      {"dp2.tp2.shard2", "debug_tp2.toml", {"parallelism.dp=2", "parallelism.dp_shard=2"}},
      {"dp4.shard4", "debug.toml", {"parallelism.dp=4", "parallelism.dp_shard=4"}},
  };
  return layouts;
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An int64 of proto3 JSON: a string ("123"), or a number from a lenient writer.
int64_t JsonInt64(const nlohmann::json& object, const char* key) {
  if (!object.contains(key)) return 0;
  const auto& v = object[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) return std::strtoll(v.get<std::string>().c_str(), nullptr, 10);
  return 0;
}

// The CPU model and the flags that decide the GEMM paths (fp32 AVX-512, bf16).
void PrintMachine() {
  const std::string cpuinfo = ReadFile("/proc/cpuinfo");
  std::smatch m;
  std::string model = "unknown", flags;
  if (std::regex_search(cpuinfo, m, std::regex("model name\\s*:\\s*([^\\n]*)"))) model = m[1];
  if (std::regex_search(cpuinfo, m, std::regex("\\nflags\\s*:\\s*([^\\n]*)"))) flags = " " + m[1].str() + " ";
  std::printf("cpu: %s, %ld online cores\n", model.c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("cpu flags:");
  for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}) {
    std::printf(" %s=%s", f, flags.find(std::string(" ") + f + " ") != std::string::npos ? "yes" : "no");
  }
  std::printf("\n");
}

struct RunResult {
  int exit_code = -1;
  int steps_seen = 0;
  int64_t peak_bytes = 0;     // max over steps after step 1 (or step 1 alone)
  double peak_rss_mb = 0;     // the same steps' RSS peak, for comparison
  std::string rank_threads;   // from rank 0's "engine start" log line
  std::string refusal;        // the runner's last stderr lines when it failed
};

RunResult RunJob(const std::string& train_bin, const std::string& file, const std::vector<std::string>& sets,
                 int threads) {
  char err_path[] = "/tmp/trainyard-memory-table-XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd >= 0) close(fd);
  std::string cmd = ShellQuote(train_bin) + " " + ShellQuote(file) + " --json";
  if (threads > 0) cmd += " --threads " + std::to_string(threads);
  for (const auto& s : sets) cmd += " --set " + ShellQuote(s);
  cmd += " 2>" + ShellQuote(err_path);
  RunResult r;
  FILE* out = popen(cmd.c_str(), "r");
  if (out == nullptr) {
    r.refusal = "cannot start " + train_bin;
    return r;
  }
  std::map<int64_t, std::pair<int64_t, double>> per_step;
  const std::regex threads_re("threads=([0-9]+)");
  std::string line;
  for (char buf[65536]; fgets(buf, sizeof buf, out) != nullptr;) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    const auto event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    line.clear();
    if (!event.is_object() || event.value("rank", 0) != 0) continue;
    if (event.contains("step_metrics")) {
      const auto& m = event["step_metrics"];
      per_step[JsonInt64(m, "step")] = {JsonInt64(m, "peak_tensor_bytes"), m.value("peak_rss_mb", 0.0)};
    } else if (event.contains("log")) {
      const std::string msg = event["log"].value("message", "");
      std::smatch m;
      if (msg.rfind("engine start:", 0) == 0 && std::regex_search(msg, m, threads_re)) r.rank_threads = m[1];
    }
  }
  const int status = pclose(out);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.steps_seen = static_cast<int>(per_step.size());
  for (const auto& [step, v] : per_step) {
    if (step == 1 && per_step.size() > 1) continue;
    r.peak_bytes = std::max(r.peak_bytes, v.first);
    r.peak_rss_mb = std::max(r.peak_rss_mb, v.second);
  }
  if (r.exit_code != 0) {
    // The runner's own verdict is its last lines ("trainyard-train: ...").
    std::vector<std::string> lines;
    std::stringstream err(ReadFile(err_path));
    for (std::string l; std::getline(err, l);) {
      if (!l.empty()) lines.push_back(l);
    }
    for (size_t i = lines.size() > 2 ? lines.size() - 2 : 0; i < lines.size(); ++i) {
      r.refusal += (r.refusal.empty() ? "" : " | ") + lines[i];
    }
  }
  std::remove(err_path);
  return r;
}

double MiB(double bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir = "build/bin";
  std::string examples_dir = "examples";
  std::string layouts_arg = "dp1,dp2,tp2,dp2.ep2,tp2.ep2,dp2.tp2";
  std::string precisions_arg = "fp32,bf16";
  std::string ac_arg = "none,full";
  std::vector<std::string> extra_sets;
  int steps = 3;
  int threads = 0;
  CLI::App app{"trainyard-memory-table: estimated vs measured (rank 0's tracked tensor bytes) memory per rank"};
  app.add_option("--bin-dir", bin_dir, "directory with trainyard-train and trainyard-rank")->capture_default_str();
  app.add_option("--examples-dir", examples_dir, "directory with debug.toml, debug_tp2.toml, debug_ep2.toml")
      ->capture_default_str();
  std::string known;
  for (const auto& l : KnownLayouts()) known += (known.empty() ? "" : ", ") + l.name;
  app.add_option("--layouts", layouts_arg, "comma-separated layouts, of: " + known)->capture_default_str();
  app.add_option("--precisions", precisions_arg, "training.mixed_precision values")->capture_default_str();
  app.add_option("--ac", ac_arg, "activation_checkpoint.mode values")->capture_default_str();
  app.add_option("--steps", steps, "steps per run (the peak is the most over steps 2..N)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "intra-op threads per rank (0: trainyard-train's default, cores / ranks)")
      ->capture_default_str();
  app.add_option("--set", extra_sets, "a further section.key=value for every run (repeatable)");
  CLI11_PARSE(app, argc, argv);

  std::vector<const Layout*> layouts;
  for (const auto& name : Split(layouts_arg)) {
    const auto it = std::find_if(KnownLayouts().begin(), KnownLayouts().end(),
                                 [&](const Layout& l) { return l.name == name; });
    if (it == KnownLayouts().end()) {
      std::cerr << "trainyard-memory-table: unknown layout " << name << " (known: " << known << ")\n";
      return 2;
    }
    layouts.push_back(&*it);
  }
  const std::string train_bin = bin_dir + "/trainyard-train";
  if (access(train_bin.c_str(), X_OK) != 0) {
    std::cerr << "trainyard-memory-table: no " << train_bin << " (pass --bin-dir)\n";
    return 2;
  }

  PrintMachine();
  std::printf("debug preset, %d steps a run; measured = rank 0's peak tracked tensor bytes (StepMetrics."
              "peak_tensor_bytes), the most over steps 2..%d; estimate = spec::EstimateRankMemory of one rank; "
              "MiB = 2^20 bytes\n\n",
              steps, steps);
  std::printf("%-12s %5s %-5s %-5s %4s %10s %10s %10s %10s %7s %8s\n", "layout", "ranks", "prec", "ac", "thr",
              "est_state", "est_act", "est_total", "measured", "ratio", "rss_MiB");
  for (const Layout* layout : layouts) {
    for (const auto& precision : Split(precisions_arg)) {
      for (const auto& ac : Split(ac_arg)) {
        std::vector<std::string> sets = layout->overrides;
        sets.push_back("training.steps=" + std::to_string(steps));
        sets.push_back("training.log_freq=1");
        sets.push_back("training.mixed_precision=" + precision);
        sets.push_back("activation_checkpoint.mode=" + ac);
        sets.insert(sets.end(), extra_sets.begin(), extra_sets.end());
        const std::string file = examples_dir + "/" + layout->file;
        std::printf("%-12s ", layout->name.c_str());
        trainyard::spec::MemoryEstimate est;
        int ranks = 0;
        try {
          const auto spec = trainyard::engine::LoadLocalJob(file, sets);
          est = trainyard::spec::EstimateRankMemory(spec);
          ranks = spec.parallelism.world_size();
        } catch (const std::exception& e) {
          std::printf("%5s %-5s %-5s refused by the spec: %s\n", "-", precision.c_str(), ac.c_str(), e.what());
          continue;
        }
        std::fflush(stdout);
        const RunResult r = RunJob(train_bin, file, sets, threads);
        std::printf("%5d %-5s %-5s %4s %10.1f %10.1f %10.1f ", ranks, precision.c_str(), ac.c_str(),
                    r.rank_threads.empty() ? "-" : r.rank_threads.c_str(), MiB(est.state_bytes),
                    MiB(est.activation_bytes), MiB(est.total_bytes()));
        if (r.exit_code != 0 || r.steps_seen == 0) {
          std::printf("%10s  run failed (exit %d): %s\n", "-", r.exit_code, r.refusal.c_str());
        } else if (r.peak_bytes == 0) {
          std::printf("%10s  no peak_tensor_bytes (the rank does not track it)\n", "0");
        } else {
          std::printf("%10.1f %7.3f %8.0f\n", MiB(static_cast<double>(r.peak_bytes)),
                      static_cast<double>(r.peak_bytes) / est.total_bytes(), r.peak_rss_mb);
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
