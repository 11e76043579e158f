#include "worker/daemon/launch_spec.h"

#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "common/events/proto_json.h"

namespace trainyard {

namespace {

constexpr size_t kMaxPathBytes = 4096;

// A path handed to a rank as one argument: bounded, no control characters (a NUL
// would cut it), absolute (ranks run in their own working directory).
absl::Status CheckPath(const char *what, const std::string &path) {
  if (path.empty()) return absl::OkStatus();
  if (path.size() > kMaxPathBytes || path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", path.substr(0, 100),
                                                   "' must be an absolute path of at most ",
                                                   kMaxPathBytes, " bytes"));
  }
  for (char c : path) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", path.substr(0, 100), "' contains a control character"));
    }
  }
  return absl::OkStatus();
}

// job_id becomes a directory name, so it must not escape work_dir.
bool SafePathComponent(const std::string &s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 200) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

LaunchSpecBuilder::LaunchSpecBuilder(Options options) : options_(std::move(options)) {}

absl::Status LaunchSpecBuilder::Validate(const v1::Assign &assign) {
  if (!SafePathComponent(assign.job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id '", assign.job_id(), "' must be 1-200 of [A-Za-z0-9._-]"));
  }
  if (assign.ranks().empty() || assign.world_size() <= 0) {
    return absl::InvalidArgumentError("assign has no ranks or world_size <= 0");
  }
  if (absl::Status s = CheckPath("resume_path", assign.resume_path()); !s.ok()) return s;
  if (absl::Status s = CheckPath("checkpoint_dir", assign.checkpoint_dir()); !s.ok()) return s;
  std::set<int> seen;
  for (int r : assign.ranks()) {
    if (r < 0 || r >= assign.world_size() || !seen.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " is duplicated or outside [0, world_size=", assign.world_size(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> LaunchSpecBuilder::RankDevices(const v1::Assign &assign) const {
  const std::string &device = assign.spec().resources().device();
  if (device != "cuda") {
    if (!assign.gpus().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("assign of a ", device.empty() ? "cpu" : device,
                                                     " job names ", assign.gpus_size(), " GPU(s); only cuda jobs get GPUs"));
    }
    return std::vector<std::string>(assign.ranks_size(), "");
  }
  if (options_.gpus.empty()) {
    return absl::InvalidArgumentError("assign of a cuda job to a worker that offers no GPUs");
  }
  std::map<int, const v1::GpuDevice *> offered;
  for (const auto &g : options_.gpus) offered[g.index()] = &g;
  std::set<int> ranks(assign.ranks().begin(), assign.ranks().end());
  std::map<int, std::string> uuid_of_rank;
  std::map<int, int> rank_of_gpu;
  for (const v1::Assign::RankGpu &g : assign.gpus()) {
    if (!ranks.count(g.rank())) {
      return absl::InvalidArgumentError(absl::StrCat("assign gives a GPU to rank ", g.rank(), ", which it does not assign here"));
    }
    auto it = offered.find(g.index());
    if (it == offered.end() || it->second->uuid() != g.uuid()) {
      return absl::InvalidArgumentError(absl::StrCat("assign gives rank ", g.rank(), " GPU ", g.index(), " ",
                                                     Quoted(g.uuid()), ", which this worker does not offer"));
    }
    if (auto [at, added] = rank_of_gpu.emplace(g.index(), g.rank()); !added) {
      return absl::InvalidArgumentError(
          absl::StrCat("assign gives GPU ", g.index(), " to ranks ", at->second, " and ", g.rank()));
    }
    if (!uuid_of_rank.emplace(g.rank(), g.uuid()).second) {
      return absl::InvalidArgumentError(absl::StrCat("assign gives rank ", g.rank(), " more than one GPU"));
    }
  }
  std::vector<std::string> devices;
  for (int r : assign.ranks()) {
    auto it = uuid_of_rank.find(r);
    if (it == uuid_of_rank.end()) {
      return absl::InvalidArgumentError(absl::StrCat("assign of a cuda job gives rank ", r, " no GPU"));
    }
    devices.push_back(it->second);
  }
  return devices;
}

absl::StatusOr<AttemptLaunch> LaunchSpecBuilder::Build(const v1::Assign &assign) const {
  if (absl::Status valid = Validate(assign); !valid.ok()) return valid;
  absl::StatusOr<std::vector<std::string>> devices = RankDevices(assign);
  if (!devices.ok()) return devices.status();
  namespace fs = std::filesystem;
  AttemptLaunch launch;
  const fs::path dir =
      fs::path(options_.work_dir) / assign.job_id() / std::to_string(assign.attempt());
  launch.attempt_dir = dir.string();
  launch.artifacts_dir = (dir / "artifacts").string();
  launch.config_path = (dir / "config.json").string();
  launch.config_text = ToJsonLine(assign.spec()) + "\n";
  const bool passive_wait =
      PassiveThreadWait(assign.spec().resources().device().empty() ? "cpu" : assign.spec().resources().device());
  const auto env = RankThreadEnv(options_.threads_per_rank, passive_wait, options_.parent_env);
  int local_rank = 0;
  for (int r : assign.ranks()) {
    const std::string &cuda_visible_devices = (*devices)[local_rank];
    RankProcess p;
    p.rank_binary = options_.rank_binary;
    p.config_path = launch.config_path;
    p.rank = r;
    p.local_rank = local_rank++;
    p.local_world_size = assign.ranks_size();
    p.world_size = assign.world_size();
    p.master_addr = assign.master_addr();
    p.master_port = assign.master_port();
    p.gloo_host = options_.gloo_host;
    p.attempt = assign.attempt();
    p.threads = options_.threads_per_rank;
    p.run_dir = launch.attempt_dir;
    // Checkpoints of this job go under checkpoint.dir/JOB; a restart resumes from the
    // newest one the controller recorded.
    p.checkpoint_dir = assign.checkpoint_dir();
    p.resume_path = assign.resume_path();
    p.env = env;
    p.env.insert(p.env.end(), options_.nccl_env.begin(), options_.nccl_env.end());
    // Set even when "" (a CPU job, or no GPU here), so the worker's own value never leaks.
    p.env.emplace_back("CUDA_VISIBLE_DEVICES", cuda_visible_devices);
    launch.ranks.push_back(RankLaunch{r, RankLaunchRequest(p)});
  }
  return launch;
}

absl::Status LaunchSpecBuilder::WriteConfig(const AttemptLaunch &launch) {
  TY_RETURN_IF_ERROR(MakeDirectories(launch.attempt_dir));
  if (!launch.artifacts_dir.empty()) TY_RETURN_IF_ERROR(MakeDirectories(launch.artifacts_dir));
  return WriteFileAtomically(launch.config_path, launch.config_text);
}

}  // namespace trainyard
