#include "common/preflight_memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/file_io.h"
#include "common/spec/memory_estimate.h"

namespace trainyard {
namespace {

constexpr size_t kMaxProcFileBytes = 1 << 20;

std::optional<std::string> Read(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, kMaxProcFileBytes);
  if (!text.ok()) return std::nullopt;
  return *text;
}

// A cgroup file holding one number ("max" or a v1 limit near 2^63: none).
std::optional<double> ReadBytes(const std::string& path) {
  std::optional<std::string> text = Read(path);
  if (!text) return std::nullopt;
  uint64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) return std::nullopt;  // "max"
  if (v >= (uint64_t{1} << 62)) return std::nullopt;  // v1's "unlimited" is PAGE_COUNTER_MAX pages
  return static_cast<double>(v);
}

struct CgroupFiles {
  std::string dir;      // the memory controller's folder of this process's cgroup
  std::string mount;    // the hierarchy's root folder, where the walk up stops
  std::string limit;    // memory.max | memory.limit_in_bytes
  std::string usage;    // memory.current | memory.usage_in_bytes
};

// This process's memory cgroup from /proc/self/cgroup: v2's "0::/path" when the
// unified hierarchy is mounted at the root, else v1's "N:...memory...:/path".
std::optional<CgroupFiles> FindCgroup(const HostMemoryPaths& paths) {
  std::optional<std::string> text = Read(paths.self_cgroup);
  if (!text) return std::nullopt;
  std::optional<CgroupFiles> v2;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::string path = parts[2] == "/" ? "" : parts[2];
    if (parts[1].empty() && parts[0] == "0") {
      v2 = CgroupFiles{paths.cgroup_root + path, paths.cgroup_root, "memory.max", "memory.current"};
      continue;
    }
    for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
      if (c == "memory") {
        const std::string mount = paths.cgroup_root + "/memory";
        return CgroupFiles{mount + path, mount, "memory.limit_in_bytes", "memory.usage_in_bytes"};
      }
    }
  }
  // v2 only where its controller files are (a v1 host mounts cgroup2 elsewhere, empty).
  if (v2 && Read(v2->mount + "/cgroup.controllers")) return v2;
  return std::nullopt;
}

// The least headroom (limit − usage) of this cgroup and its ancestors with a limit.
std::optional<HostMemory> CgroupHeadroom(const HostMemoryPaths& paths) {
  std::optional<CgroupFiles> cg = FindCgroup(paths);
  if (!cg) return std::nullopt;
  std::optional<HostMemory> best;
  for (std::string dir = cg->dir;; dir = dir.substr(0, dir.rfind('/'))) {
    const std::optional<double> limit = ReadBytes(dir + "/" + cg->limit);
    const std::optional<double> usage = ReadBytes(dir + "/" + cg->usage);
    if (limit && usage) {
      const double headroom = std::max(0.0, *limit - *usage);
      if (!best || headroom < best->available_bytes) {
        const std::string name = dir.size() > cg->mount.size() ? dir.substr(cg->mount.size()) : "/";
        best = HostMemory{headroom, absl::StrCat("the memory cgroup ", name, "'s limit ", spec::FormatBytes(*limit),
                                                 " less the ", spec::FormatBytes(*usage), " it uses (",
                                                 dir, "/", cg->limit, ")")};
      }
    }
    if (dir.size() <= cg->mount.size() || dir.rfind('/') == std::string::npos) break;
  }
  return best;
}

}  // namespace

absl::StatusOr<HostMemory> ReadHostMemory(const HostMemoryPaths& paths) {
  std::optional<std::string> meminfo = Read(paths.meminfo);
  if (!meminfo) return absl::UnavailableError(absl::StrCat("cannot read ", paths.meminfo));
  std::optional<HostMemory> host;
  for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib = 0;
    if (absl::ConsumeSuffix(&line, "kB") && absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      host = HostMemory{static_cast<double>(kib) * 1024, absl::StrCat("MemAvailable (", paths.meminfo, ")")};
    }
  }
  if (!host) return absl::UnavailableError(absl::StrCat(paths.meminfo, " has no MemAvailable line"));
  if (std::optional<HostMemory> cgroup = CgroupHeadroom(paths);
      cgroup && cgroup->available_bytes < host->available_bytes) {
    host = cgroup;
  }
  struct rlimit own;
  if (getrlimit(RLIMIT_DATA, &own) == 0 && own.rlim_cur != RLIM_INFINITY) {
    host->process_limit_bytes = static_cast<double>(own.rlim_cur);
  }
  return *host;
}

PreflightFit FitRunner(const spec::JobSpec& runner_spec, const HostMemory& host) {
  PreflightFit fit;
  fit.host = host;
  fit.world = std::max(1, runner_spec.parallelism.dp * runner_spec.parallelism.tp);
  const spec::MemoryEstimate estimate = spec::EstimateRankMemory(runner_spec);
  fit.rank_estimate = estimate.total_bytes();
  fit.rank_bytes = fit.rank_estimate + kRunnerRankOverheadBytes;
  fit.need_bytes = fit.world * fit.rank_bytes + kRunnerLauncherBytes;
  double per_rank = (host.available_bytes - kRunnerLauncherBytes) / fit.world;
  const bool process_bound = host.process_limit_bytes > 0 && host.process_limit_bytes < per_rank;
  if (process_bound) per_rank = host.process_limit_bytes;
  fit.fits = fit.need_bytes <= host.available_bytes && fit.rank_bytes <= per_rank;
  fit.data_limit_bytes = per_rank > 0 ? static_cast<std::int64_t>(per_rank) : 0;
  if (fit.fits) return fit;

  const std::string ranks = fit.world == 1 ? std::string("1 rank") : absl::StrCat(fit.world, " ranks");
  const std::string parts = absl::StrCat(
      spec::FormatBytes(fit.rank_estimate), " estimated at ", spec::DescribeLayout(runner_spec), ", plus ",
      spec::FormatBytes(kRunnerRankOverheadBytes), " of LibTorch's own per rank");
  if (fit.need_bytes > host.available_bytes) {
    fit.refusal = absl::StrCat("the runner would need about ", spec::FormatBytes(fit.need_bytes),
                               " on this machine (", ranks, " of ", parts, ", and ",
                               spec::FormatBytes(kRunnerLauncherBytes), " for the launcher), more than the ",
                               spec::FormatBytes(std::max(0.0, host.available_bytes)), " it can give (",
                               host.source, ")");
  } else {
    fit.refusal = absl::StrCat("a rank of the runner would need about ", spec::FormatBytes(fit.rank_bytes), " (",
                               parts, "), more than the ", spec::FormatBytes(host.process_limit_bytes),
                               " RLIMIT_DATA (ulimit -d) this process runs under");
  }
  // The same world size in another layout, each rank held against its share.
  const spec::LayoutSuggestion layout =
      spec::SuggestLayout(runner_spec, std::max(0.0, per_rank - kRunnerRankOverheadBytes));
  fit.layout_fits = layout.fits;
  fit.layout = spec::DescribeSuggestion(runner_spec, layout);
  return fit;
}

std::string DescribeRefusal(const PreflightFit& fit, const std::string& shrink_advice) {
  std::vector<std::string> remedies;
  if (!shrink_advice.empty()) remedies.push_back(shrink_advice);
  std::string out = fit.refusal;
  if (fit.layout_fits) {
    remedies.push_back(absl::StrCat("the job ", fit.layout, " per rank"));
  } else {
    absl::StrAppend(&out, "; ", fit.layout, " on this machine");
  }
  if (!remedies.empty()) absl::StrAppend(&out, "; ", absl::StrJoin(remedies, "; or "));
  return out;
}

}  // namespace trainyard
