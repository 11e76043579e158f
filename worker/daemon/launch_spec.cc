#include "worker/daemon/launch_spec.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_json.h"

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
  if (!assign.resume_path().empty() && assign.resume_step() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_step must be >= 1 with a resume_path, got ", assign.resume_step()));
  }
  std::set<int> seen;
  for (int r : assign.ranks()) {
    if (r < 0 || r >= assign.world_size() || !seen.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, " is duplicated or outside [0, world_size=", assign.world_size(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AttemptLaunch> LaunchSpecBuilder::Build(const v1::Assign &assign) const {
  if (absl::Status valid = Validate(assign); !valid.ok()) return valid;
  namespace fs = std::filesystem;
  AttemptLaunch launch;
  const fs::path dir =
      fs::path(options_.work_dir) / assign.job_id() / std::to_string(assign.attempt());
  launch.attempt_dir = dir.string();
  launch.artifacts_dir = (dir / "artifacts").string();
  launch.config_path = (dir / "config.json").string();
  launch.config_text = ToJsonLine(assign.spec()) + "\n";
  for (int r : assign.ranks()) {
    RankLaunch rank;
    rank.rank = r;
    rank.request.binary = options_.rank_binary;
    rank.request.args = {"--config",      launch.config_path,
                         "--rank",        std::to_string(r),
                         "--world-size",  std::to_string(assign.world_size()),
                         "--master-addr", assign.master_addr(),
                         "--master-port", std::to_string(assign.master_port()),
                         "--gloo-host",   options_.gloo_host,
                         "--attempt",     std::to_string(assign.attempt()),
                         "--threads",     std::to_string(options_.threads_per_rank),
                         "--run-dir",     launch.attempt_dir};
    // Checkpoints of this job go under checkpoint.dir/JOB; a restart resumes from the
    // newest one the controller recorded.
    if (!assign.checkpoint_dir().empty()) {
      rank.request.args.insert(rank.request.args.end(), {"--checkpoint-dir", assign.checkpoint_dir()});
    }
    if (!assign.resume_path().empty()) {
      rank.request.args.insert(rank.request.args.end(), {"--resume", assign.resume_path()});
    }
    launch.ranks.push_back(std::move(rank));
  }
  return launch;
}

absl::Status LaunchSpecBuilder::WriteConfig(const AttemptLaunch &launch) {
  namespace fs = std::filesystem;
  const fs::path dir = launch.attempt_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  if (!launch.artifacts_dir.empty()) {
    fs::create_directories(launch.artifacts_dir, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", launch.artifacts_dir, ": ", ec.message()));
    }
  }
  const fs::path tmp_path = launch.config_path + ".tmp";
  {
    std::ofstream out(tmp_path, std::ios::trunc);
    out << launch.config_text;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp_path.string()));
  }
  fs::rename(tmp_path, launch.config_path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp_path.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
