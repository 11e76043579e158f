#include "worker/launch/rank_launch.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace trainyard {

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

int DefaultRankThreads(int cores, int ranks) { return std::max(1, cores / std::max(1, ranks)); }

int OnlineCores() { return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))); }

bool PassiveThreadWait(std::string_view device) { return device == "cuda"; }

std::vector<std::pair<std::string, std::string>> RankThreadEnv(int threads, bool passive_wait,
                                                               const EnvLookup& parent) {
  const std::string t = std::to_string(threads);
  std::vector<std::pair<std::string, std::string>> wanted = {{"OMP_NUM_THREADS", t}, {"OPENBLAS_NUM_THREADS", t}};
  if (passive_wait) wanted.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  std::vector<std::pair<std::string, std::string>> env;
  for (auto& [name, value] : wanted) {
    if (!parent(name).has_value()) env.emplace_back(name, value);
  }
  return env;
}

LaunchRequest RankLaunchRequest(const RankProcess& p) {
  LaunchRequest request;
  request.binary = p.rank_binary;
  request.args = {"--config",      p.config_path,
                  "--rank",        std::to_string(p.rank),
                  "--world-size",  std::to_string(p.world_size),
                  "--master-addr", p.master_addr,
                  "--master-port", std::to_string(p.master_port),
                  "--gloo-host",   p.gloo_host.empty() ? p.master_addr : p.gloo_host,
                  "--attempt",     std::to_string(p.attempt),
                  "--threads",     std::to_string(p.threads)};
  if (!p.run_dir.empty()) request.args.insert(request.args.end(), {"--run-dir", p.run_dir});
  request.args.insert(request.args.end(), {"--local-rank", std::to_string(p.local_rank)});
  if (!p.checkpoint_dir.empty()) request.args.insert(request.args.end(), {"--checkpoint-dir", p.checkpoint_dir});
  if (!p.resume_path.empty()) request.args.insert(request.args.end(), {"--resume", p.resume_path});
  request.args.insert(request.args.end(), p.extra_args.begin(), p.extra_args.end());
  request.env = p.env;
  if (p.local_world_size > 0) {
    request.env.emplace_back("LOCAL_RANK", std::to_string(p.local_rank));
    request.env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(p.local_world_size));
  }
  return request;
}

}  // namespace trainyard
