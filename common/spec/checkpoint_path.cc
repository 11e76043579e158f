#include "common/spec/checkpoint_path.h"

#include <algorithm>
#include <cstdio>

namespace trainyard::spec {

std::string JobCheckpointRoot(std::string_view checkpoint_dir, std::string_view job_id) {
  std::string dir(checkpoint_dir);
  if (dir.empty()) return "";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (job_id.empty()) return dir;
  return dir + (dir == "/" ? "" : "/") + std::string(job_id);
}

std::string CheckpointDirName(int64_t step, int attempt) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "step-%08lld-attempt-%d", static_cast<long long>(step), attempt);
  return buf;
}

std::string CheckpointPath(std::string_view checkpoint_dir, std::string_view job_id, int64_t step, int attempt) {
  return JobCheckpointRoot(checkpoint_dir, job_id) + "/" + CheckpointDirName(step, attempt);
}

bool ParseCheckpointDirName(std::string_view name, int64_t* step, int* attempt) {
  constexpr std::string_view p1 = "step-", p2 = "-attempt-";
  if (name.substr(0, p1.size()) != p1) return false;
  const size_t mid = name.find(p2, p1.size());
  if (mid == std::string_view::npos) return false;
  const std::string_view s = name.substr(p1.size(), mid - p1.size());
  const std::string_view a = name.substr(mid + p2.size());
  auto digits = [](std::string_view d) {
    return !d.empty() && d.size() <= 18 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(s) || !digits(a) || a.size() > 9) return false;
  *step = std::stoll(std::string(s));
  *attempt = std::stoi(std::string(a));
  return true;
}

}  // namespace trainyard::spec
