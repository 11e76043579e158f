#include "worker/engine/checkpoint/checkpoint_retention.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "common/base/file_io.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/checkpoint_pin.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

std::string Normal(const std::string& path) { return fs::path(path).lexically_normal().string(); }

// The finite `name` metric of a complete checkpoint's manifest, if it has one. A
// manifest that does not parse gives none: it cannot be chosen as best, and whether it
// stays is up to `keep` alone.
std::optional<double> ManifestMetric(const std::string& dir, const std::string& name) {
  absl::StatusOr<std::string> text = ReadFile((fs::path(dir) / kManifestName).string(), kMaxManifestBytes);
  if (!text.ok()) return std::nullopt;
  try {
    const CheckpointManifest m = ParseManifest(*text, dir);
    if (!m.metric || m.metric->name != name || !std::isfinite(m.metric->value)) return std::nullopt;
    return m.metric->value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

enum class Removal { kRemoved, kPinned, kFailed };

// Rename first, so that a crash leaves a .deleting-* name that nothing loads and the
// next prune finishes; then look at the pins again (a reader may have pinned it just
// before the rename) and give the directory back its name if one did.
Removal RemoveCheckpointDir(const std::string& root, const std::string& path, const PruneHook& hook,
                            std::string* error) {
  std::error_code ec;
  const fs::path target = fs::path(root) / (kDeletingPrefix + fs::path(path).filename().string());
  fs::remove_all(target, ec);  // a leftover of the same name
  fs::rename(path, target, ec);
  if (ec) {
    *error = path + ": cannot rename to " + target.filename().string() + ": " + ec.message();
    return Removal::kFailed;
  }
  (void)FsyncPath(root, /*directory=*/true);
  if (HasLivePin(target.string())) {
    fs::rename(target, path, ec);
    if (ec) {
      *error = target.string() + ": pinned while being pruned, and cannot be renamed back: " + ec.message();
      return Removal::kFailed;
    }
    (void)FsyncPath(root, /*directory=*/true);
    return Removal::kPinned;
  }
  fs::remove(target / kManifestName, ec);
  if (hook) hook(target.string());
  fs::remove_all(target, ec);
  if (ec) {
    *error = target.string() + ": " + ec.message() + " (the next prune finishes it)";
    return Removal::kFailed;
  }
  (void)FsyncPath(root, /*directory=*/true);
  return Removal::kRemoved;
}

}  // namespace

const char* RetentionVerdictName(RetentionVerdict v) {
  switch (v) {
    case RetentionVerdict::kRemove:
      return "remove";
    case RetentionVerdict::kNewest:
      return "newest";
    case RetentionVerdict::kBest:
      return "best";
    case RetentionVerdict::kPinned:
      return "pinned";
    case RetentionVerdict::kBeingWritten:
      return "being written";
  }
  return "?";
}

std::vector<RetentionVerdict> PlanRetention(const std::vector<RetentionCandidate>& dirs, const RetentionPolicy& policy,
                                            const std::string& just_written) {
  std::vector<RetentionVerdict> verdicts(dirs.size(), RetentionVerdict::kRemove);
  const std::string written = just_written.empty() ? "" : Normal(just_written);
  const int keep = std::max(1, policy.keep);
  // Newest first by (step, attempt), whatever order the caller gave.
  std::vector<size_t> order(dirs.size());
  std::iota(order.begin(), order.end(), 0);
  auto newer = [&](size_t a, size_t b) {
    return dirs[a].step != dirs[b].step ? dirs[a].step > dirs[b].step : dirs[a].attempt > dirs[b].attempt;
  };
  std::stable_sort(order.begin(), order.end(), newer);
  int complete_seen = 0;
  bool newer_complete = false;
  for (size_t i : order) {
    const RetentionCandidate& d = dirs[i];
    const bool is_written = !written.empty() && Normal(d.path) == written;
    if (is_written || d.complete) {
      if (is_written || complete_seen < keep) verdicts[i] = RetentionVerdict::kNewest;
      ++complete_seen;
      newer_complete = true;
    } else if (!newer_complete) {
      verdicts[i] = RetentionVerdict::kBeingWritten;
    }
  }
  if (policy.keep_best > 0) {
    std::vector<size_t> scored;
    for (size_t i = 0; i < dirs.size(); ++i) {
      if (dirs[i].complete && dirs[i].metric && std::isfinite(*dirs[i].metric)) scored.push_back(i);
    }
    // Lowest first; of equal values the newer wins (it saw more data).
    std::stable_sort(scored.begin(), scored.end(), [&](size_t a, size_t b) {
      return *dirs[a].metric != *dirs[b].metric ? *dirs[a].metric < *dirs[b].metric : newer(a, b);
    });
    const size_t n = std::min(scored.size(), static_cast<size_t>(policy.keep_best));
    for (size_t k = 0; k < n; ++k) {
      if (verdicts[scored[k]] == RetentionVerdict::kRemove) verdicts[scored[k]] = RetentionVerdict::kBest;
    }
  }
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (verdicts[i] == RetentionVerdict::kRemove && dirs[i].pinned) verdicts[i] = RetentionVerdict::kPinned;
  }
  return verdicts;
}

int64_t DirectoryBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

std::vector<std::string> FinishInterruptedDeletions(const std::string& root, int64_t* bytes_freed) {
  std::vector<std::string> finished;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return finished;
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().rfind(kDeletingPrefix, 0) == 0 && entry.is_directory(ec)) {
      leftovers.push_back(entry.path());
    }
  }
  for (const fs::path& p : leftovers) {
    // A leftover that a reader pinned (a pruner that died before it could rename the
    // directory back, or whose rename back failed) is restored, not removed, as long
    // as its manifest is still there.
    std::error_code ex;
    if (HasLivePin(p.string()) && fs::exists(p / kManifestName, ex)) {
      const fs::path original =
          fs::path(root) / fs::path(p.filename().string().substr(std::string(kDeletingPrefix).size()));
      std::error_code mv;
      if (!fs::exists(original, ex)) fs::rename(p, original, mv);
      continue;
    }
    const int64_t bytes = DirectoryBytes(p.string());
    std::error_code rm;
    fs::remove_all(p, rm);
    if (rm) continue;  // tried again by the next prune
    if (bytes_freed != nullptr) *bytes_freed += bytes;
    finished.push_back(p.string());
  }
  if (!finished.empty()) (void)FsyncPath(root, /*directory=*/true);
  return finished;
}

PruneResult PruneCheckpoints(const std::string& root, const RetentionPolicy& policy, int attempt,
                             const std::string& just_written, const PruneHook& hook) {
  PruneResult result;
  result.finished = FinishInterruptedDeletions(root, &result.bytes_freed);
  std::vector<RetentionCandidate> candidates;
  for (const CheckpointDirEntry& d : ListCheckpointDirs(root)) {
    if (d.attempt > attempt) continue;
    RetentionCandidate c;
    c.path = d.path;
    c.step = d.step;
    c.attempt = d.attempt;
    c.complete = d.complete;
    c.pinned = HasLivePin(d.path);
    if (d.complete && policy.keep_best > 0) c.metric = ManifestMetric(d.path, policy.best_metric);
    candidates.push_back(std::move(c));
  }
  const std::vector<RetentionVerdict> verdicts = PlanRetention(candidates, policy, just_written);
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (verdicts[i] != RetentionVerdict::kRemove) continue;
    const RetentionCandidate& c = candidates[i];
    const int64_t bytes = DirectoryBytes(c.path);
    std::string error;
    switch (RemoveCheckpointDir(root, c.path, hook, &error)) {
      case Removal::kRemoved:
        result.removed.push_back({c.path, c.step, c.attempt, bytes});
        result.bytes_freed += bytes;
        break;
      case Removal::kPinned:
        break;
      case Removal::kFailed:
        result.failures.push_back(error);
        break;
    }
  }
  for (const CheckpointDirEntry& d : ListCheckpointDirs(root)) {
    result.bytes_kept += DirectoryBytes(d.path);
    ++result.kept;
  }
  return result;
}

}  // namespace trainyard::engine
