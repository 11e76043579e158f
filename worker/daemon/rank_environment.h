#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trainyard {

// The environment rules for the ranks this worker spawns. Ranks inherit the worker's
// own environment (the ProcessLauncher passes no per-process environment), so the
// worker sets these in itself once, at start-up, before any thread runs:
//   OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = the rank's intra-op thread count, and
//   OMP_WAIT_POLICY = PASSIVE,
// because OpenMP and OpenBLAS otherwise size their pools to every core and spin while
// idle, so ranks sharing a machine would oversubscribe it. A variable already set in
// the worker's environment (by the operator) is kept as it is.
//
// Per-rank rendezvous values (rank, world size, master address and port, Gloo host,
// attempt) differ between ranks of one worker, so they travel as arguments
// (LaunchSpecBuilder), not as inherited variables.
//
// Thread contract: ThreadVariables and DefaultThreads are pure and thread-safe;
// Export calls setenv, which races with any concurrent getenv, so call it from main
// before starting threads.
class RankEnvironment {
 public:
  struct Variable {
    std::string name;
    std::string value;
    bool operator==(const Variable &o) const { return name == o.name && value == o.value; }
  };
  // A value for `name` when the parent environment sets it, else nullopt.
  using Lookup = std::function<std::optional<std::string>(const std::string &name)>;

  // max(1, cores / slots): the default --threads-per-rank.
  static int DefaultThreads(int cores, int slots);

  // The thread variables for ranks running `threads` intra-op threads, leaving out
  // every one `parent` already sets. In the order listed above.
  static std::vector<Variable> ThreadVariables(int threads, const Lookup &parent);

  // getenv over this process's environment.
  static Lookup ProcessEnvironment();

  // Sets each variable in this process's environment (overwriting), so every rank
  // spawned later inherits it.
  static void Export(const std::vector<Variable> &variables);
};

}  // namespace trainyard
