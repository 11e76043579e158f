#include "worker/engine/train/trace_profiler.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/kineto_shim.h>

namespace trainyard::engine {
namespace {

namespace kp = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

std::atomic<bool> g_running{false};

std::set<ActivityType> Activities(const c10::Device& device) {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

}  // namespace

void TraceProfiler::Start(const c10::Device& device) {
  bool expected = false;
  if (!g_running.compare_exchange_strong(expected, true)) {
    throw std::logic_error("TraceProfiler::Start: a profile is already running");
  }
  if (!device.is_cuda()) {
    // Kineto initialises itself on the first profile and, on a machine without a GPU,
    // logs an ERROR about the missing device count that means nothing to a CPU job.
    // Its log level comes only from this variable, read at that initialisation; a
    // value the operator set is kept.
    ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  }
  try {
    const ProfilerConfig config(ProfilerState::KINETO);
    const std::set<ActivityType> activities = Activities(device);
    kp::prepareProfiler(config, activities);
    kp::enableProfiler(config, activities);
  } catch (...) {
    g_running = false;
    throw;
  }
}

bool TraceProfiler::Running() { return g_running.load(); }

std::string TraceProfiler::Stop(int rank, int world_size, const std::string& backend,
                                const std::string& scratch_dir) {
  if (!g_running.load()) return R"({"traceEvents":[]})";
  // The key TensorBoard's profiler plugin reads for its distributed view, as
  // torch.profiler writes it.
  std::ostringstream info;
  info << R"({"backend": ")" << backend << R"(", "rank": )" << rank << R"(, "world_size": )" << world_size << "}";
  kp::addMetadataJson("distributedInfo", info.str());
  std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  g_running = false;
  std::error_code ec;
  std::filesystem::create_directories(scratch_dir, ec);
  if (ec) throw std::runtime_error("TraceProfiler::Stop: cannot create " + scratch_dir + ": " + ec.message());
  const std::string path =
      scratch_dir + "/.trace-" + std::to_string(::getpid()) + "-r" + std::to_string(rank) + ".json.tmp";
  result->save(path);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  if (!in.good() && text.str().empty()) {
    throw std::runtime_error("TraceProfiler::Stop: kineto wrote no trace to " + path);
  }
  return text.str();
}

std::string TraceProfiler::TraceName(int attempt, int rank, long long first_step) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "trace-a%d-r%d-s%08lld.json", attempt, rank, first_step);
  return buf;
}

}  // namespace trainyard::engine
