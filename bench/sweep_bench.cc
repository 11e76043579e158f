// trainyard-sweep-bench: what a sweep costs at the spec level, before the controller
// stores it. Reads a job file (examples/debug.toml by default) with four --sweep flags
// of --points points in all (top_k x lr x load_balance_coeff x seed), then expands it
// and validates every point (spec::ExpandSweep), --repeat times; prints the best and
// median of each, and how long a sweep of 10^6 and one of 10,000 points take to be
// refused. Prints figures; asserts nothing.
//
//   trainyard-sweep-bench                                   # 1,000 points
//   trainyard-sweep-bench --file examples/tiny.toml --repeat 50
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/spec/sweep.h"
#include "common/spec/sweep_reader.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainyard::spec::ExpandSweep;
using trainyard::spec::LoadSweepJobFile;
using trainyard::spec::Result;
using trainyard::spec::SweepFlags;
using trainyard::spec::SweepJob;
using trainyard::spec::SweepPoint;

double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// "1,2,...,n" with `format` applied to 1..n.
template <class F>
std::string Values(int n, F format) {
  std::string out;
  for (int i = 1; i <= n; ++i) out += (i > 1 ? "," : "") + format(i);
  return out;
}

std::string Integers(int n) {
  return Values(n, [](int i) { return std::to_string(i); });
}

void PrintMachine() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  const std::string cpuinfo = text.str();
  std::smatch m;
  std::string model = "unknown";
  if (std::regex_search(cpuinfo, m, std::regex("model name\\s*:\\s*([^\\n]*)"))) model = m[1];
  std::printf("cpu: %s, %ld online cores (one thread used)\n", model.c_str(), sysconf(_SC_NPROCESSORS_ONLN));
#if defined(NDEBUG)
  const char* build = "NDEBUG";
#else
  const char* build = "assertions on";
#endif
#if defined(__clang__)
  const char* compiler = "clang";
#else
  const char* compiler = "gcc";
#endif
  std::printf("compiler: %s %s, %s\n", compiler, __VERSION__, build);
}

struct Timing {
  double best = 0;
  double median = 0;
};

Timing Summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2]};
}

// Time to refuse a sweep over the limit: the flags read, the points counted, nothing
// expanded.
double RefuseMs(const std::string& file, const std::vector<std::string>& sweeps, std::string* error) {
  SweepFlags flags;
  flags.sweeps = sweeps;
  const auto t0 = Clock::now();
  Result<SweepJob> job = LoadSweepJobFile(file, {}, flags);
  const double ms = MsSince(t0);
  *error = job.ok() ? "(accepted)" : job.error().ToString();
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file = "examples/debug.toml";
  int repeat = 20;
  CLI::App app{"trainyard-sweep-bench: read, expand and validate a 1,000-point sweep"};
  app.add_option("--file", file, "the base job file")->capture_default_str();
  app.add_option("--repeat", repeat, "runs of each measurement (best and median printed)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // 8 x 5 x 5 x 5 = 1,000 points, every one valid for the debug preset (8 experts).
  SweepFlags flags;
  flags.sweeps = {
      "model.top_k=" + Integers(8),
      "training.lr=1e-4,2e-4,4e-4,8e-4,1.6e-3",
      "model.load_balance_coeff=0,1e-4,1e-3,1e-2,1e-1",
      "training.seed=" + Integers(5),
  };
  PrintMachine();

  std::vector<double> read_ms, expand_ms;
  std::size_t points = 0;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    Result<SweepJob> job = LoadSweepJobFile(file, {}, flags);
    read_ms.push_back(MsSince(t0));
    if (!job.ok()) {
      std::fprintf(stderr, "%s\n", job.error().ToString().c_str());
      return 1;
    }
    t0 = Clock::now();
    Result<std::vector<SweepPoint>> expanded = ExpandSweep(job.value().base, job.value().sweep);
    expand_ms.push_back(MsSince(t0));
    if (!expanded.ok()) {
      std::fprintf(stderr, "%s\n", expanded.error().ToString().c_str());
      return 1;
    }
    points = expanded.value().size();
  }
  const Timing read = Summarise(read_ms);
  const Timing expand = Summarise(expand_ms);
  std::printf("sweep of %zu points over %s, %d runs:\n", points, file.c_str(), repeat);
  std::printf("  read (file, --sweep flags, count, typed values): best %.3f ms, median %.3f ms\n", read.best,
              read.median);
  std::printf("  expand + validate every point: best %.3f ms, median %.3f ms (%.2f us per point)\n", expand.best,
              expand.median, 1000.0 * expand.median / static_cast<double>(points));

  std::string error;
  const std::string thousand = Integers(1000);
  const double million_ms = RefuseMs(file, {"training.seed=" + thousand, "training.log_freq=" + thousand}, &error);
  std::printf("10^6 points refused in %.3f ms: %s\n", million_ms, error.c_str());
  const std::string hundred = Integers(100);
  const double ten_thousand_ms = RefuseMs(file, {"training.seed=" + hundred, "training.steps=" + hundred}, &error);
  std::printf("10,000 points refused in %.3f ms: %s\n", ten_thousand_ms, error.c_str());
  return 0;
}
