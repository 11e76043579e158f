#include "worker/engine/launch/rank_env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace trainyard::engine {

int DefaultThreads(int nproc) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return std::max(1, static_cast<int>(cores) / std::max(1, nproc));
}

std::vector<std::pair<std::string, std::string>> RankThreadEnv(int threads, bool openblas_threads_in_step) {
  std::vector<std::pair<std::string, std::string>> env;
  const std::string t = std::to_string(threads);
  std::vector<std::pair<std::string, std::string>> wanted = {{"OMP_NUM_THREADS", t}, {"OPENBLAS_NUM_THREADS", t}};
  if (openblas_threads_in_step) wanted.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  for (const auto& [name, value] : wanted) {
    if (std::getenv(name.c_str()) == nullptr) env.emplace_back(name, value);
  }
  return env;
}

bool OpenBlasThreadsInStep(const spec::JobSpec& config) {
  const char* fused = std::getenv("TRAINYARD_FUSED_CPU_KERNELS");  // read again by each rank
  const bool fused_on = fused == nullptr || std::string(fused) != "0";
  // On CPU both backends run the fused operators (a traced region calls them too).
  return !(fused_on && config.resources.device == "cpu");
}

}  // namespace trainyard::engine
