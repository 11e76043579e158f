// Whether a compile preflight's runner fits the machine it would run on, and the memory
// cap it runs under. A preflight starts the job's dp·tp ranks on this one machine; a
// model whose ranks need 232 GiB must be refused here, before a runner exists, not
// found by the kernel's OOM killer (which may pick the controller instead).
//
// What the machine can give is the smaller of the kernel's MemAvailable (free memory
// plus what it can reclaim without swapping) and, when this process is in a memory
// cgroup with a limit, that limit less the cgroup's current use (the nearest limited
// ancestor that leaves the least: v2 memory.max / memory.current, v1
// memory.limit_in_bytes / memory.usage_in_bytes). A container's MemAvailable is the
// host's, so the cgroup is what stops it first.
//
// The cap is RLIMIT_DATA, set on the runner and inherited by each rank it starts, not
// RLIMIT_AS: LibTorch with CUDA reserves tens of GiB of address space it never touches
// (CUDA's unified address range, mapped PROT_NONE), and glibc reserves 64 MiB of
// address space per malloc arena, so an address-space cap either kills a healthy rank
// or has to be so loose that it stops nothing. RLIMIT_DATA counts the private writable
// mappings (heap, anonymous mmap, thread stacks), which is where tensors live, and
// leaves reservations alone; an allocation past it fails with ENOMEM, which LibTorch
// reports as an error the rank exits with, instead of the OOM killer. (RLIMIT_RSS is
// not enforced by Linux.) Each process may hold (available − the launcher's share) /
// dp·tp, so the ranks together stay within what the machine can give.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/spec/job_spec.h"

namespace trainyard {

struct HostMemory {
  double available_bytes = 0;
  // Which figure that is, for messages: "MemAvailable (/proc/meminfo)" or
  // "the memory cgroup /a/b's limit 8 GiB less the 1.2 GiB it uses".
  std::string source;
  // This process's own RLIMIT_DATA (`ulimit -d`), which every process it starts keeps
  // at most; 0: none.
  double process_limit_bytes = 0;
};

// Where ReadHostMemory looks; tests point it at files of their own.
struct HostMemoryPaths {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

// UNAVAILABLE when /proc/meminfo has no MemAvailable line (Linux < 3.14); a cgroup
// whose files cannot be read is left out (MemAvailable still bounds the runner).
absl::StatusOr<HostMemory> ReadHostMemory(const HostMemoryPaths& paths = {});

// What a runner's process holds besides the estimate's tensors: LibTorch's and its
// libraries' writable data (the pinned wheel's CUDA libraries among them), the intra-op
// and Gloo threads' 8 MiB stacks, the allocator's slack; the estimate (docs/memory.md)
// leaves all of that out. Measured as VmData (what RLIMIT_DATA counts) at its peak in
// /proc/PID/status, 2 cores: a preflight rank of the tiny preset 662 MiB (RSS 425 MiB),
// of debug 1094 MiB for a 408 MiB estimate (RSS 924 MiB); VmPeak, the address space an
// RLIMIT_AS would count, was 2.9 and 3.3 GiB. More cores add a stack per thread.
inline constexpr double kRunnerRankOverheadBytes = 768.0 * (1 << 20);
// trainyard-train itself, which links LibTorch too: VmData 619 MiB (RSS 411-464 MiB).
inline constexpr double kRunnerLauncherBytes = 640.0 * (1 << 20);

struct PreflightFit {
  bool fits = false;
  int world = 1;             // dp·tp ranks on this machine
  double rank_estimate = 0;  // spec::EstimateRankMemory of the runner's own spec
  double rank_bytes = 0;     // rank_estimate + kRunnerRankOverheadBytes
  double need_bytes = 0;     // world · rank_bytes + kRunnerLauncherBytes
  HostMemory host;
  // RLIMIT_DATA of the runner and each of its ranks: (available − kRunnerLauncherBytes)
  // / world, or the inherited process limit when that is lower; at least rank_bytes
  // when it fits.
  std::int64_t data_limit_bytes = 0;
  // When it does not fit: the figures and the layout estimated, e.g. "the runner would
  // need about 233 GiB on this machine (1 rank of 232 GiB estimated at dp=1 ..., plus
  // ...), more than the 19.8 GiB it can give (MemAvailable (/proc/meminfo))".
  std::string refusal;
  // And a layout of the same world size whose ranks fit this machine
  // (spec::SuggestLayout, DescribeSuggestion: "fits at ep=8: 9.5 GiB"), or that none does.
  bool layout_fits = false;
  std::string layout;
};

// Pure: `runner_spec` is the spec the runner runs (trainyard-train --print-config with
// the same --preflight [--shrink] flags: CPU ranks, the shrunk widths with --shrink).
PreflightFit FitRunner(const spec::JobSpec& runner_spec, const HostMemory& host);

// The refusal and what to do, in one message: the layout that fits, and `shrink_advice`
// ("" when the run was already shrunk).
std::string DescribeRefusal(const PreflightFit& fit, const std::string& shrink_advice);

}  // namespace trainyard
