#include "worker/daemon/rank_environment.h"

#include <stdlib.h>

#include <algorithm>

namespace trainyard {

int RankEnvironment::DefaultThreads(int cores, int slots) {
  return std::max(1, cores / std::max(1, slots));
}

std::vector<RankEnvironment::Variable> RankEnvironment::ThreadVariables(int threads,
                                                                        const Lookup &parent) {
  const std::string count = std::to_string(threads);
  const std::vector<Variable> wanted = {
      {"OMP_NUM_THREADS", count},
      {"OPENBLAS_NUM_THREADS", count},
      {"OMP_WAIT_POLICY", "PASSIVE"},
  };
  std::vector<Variable> out;
  for (const Variable &v : wanted) {
    if (!parent(v.name).has_value()) out.push_back(v);
  }
  return out;
}

RankEnvironment::Lookup RankEnvironment::ProcessEnvironment() {
  return [](const std::string &name) -> std::optional<std::string> {
    const char *value = getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

void RankEnvironment::Export(const std::vector<Variable> &variables) {
  for (const Variable &v : variables) setenv(v.name.c_str(), v.value.c_str(), 1);
}

}  // namespace trainyard
