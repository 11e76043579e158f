// The compiled entries of one region key, shared by every CompiledRegion with that key
// (N identical layers compile once), plus the key's state and counters. Owned by the
// CompileContext; not thread-safe (see CompileContext).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "worker/engine/compile/backend/jit_executable.h"
#include "worker/engine/compile/region/region_guard.h"
#include "worker/engine/compile/region/region_key.h"

namespace trainyard::engine::compile {

struct RegionStats {
  int64_t hits = 0;             // a compiled entry ran (eager backend: every call)
  int64_t misses = 0;           // no entry's guards passed
  int64_t eager_fallbacks = 0;  // ran eager although the backend compiles
};

class RegionCache {
 public:
  explicit RegionCache(RegionKey key) : key_(std::move(key)) {}
  RegionCache(const RegionCache&) = delete;
  RegionCache& operator=(const RegionCache&) = delete;

  const RegionKey& key() const { return key_; }

  // The first entry (in insertion order) whose guards pass, or nullptr. No allocation.
  JitExecutable* Find(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params,
                      bool grad_mode) const;

  // The first failing guard, in words, of the closest entry: the one with the fewest
  // failing guards; among equals the most recent, since shapes that drift (a growing
  // sequence length) are closest to the last one compiled. nullopt when empty.
  std::optional<std::string> ClosestFailure(const std::vector<torch::Tensor>& inputs,
                                            const std::vector<torch::Tensor>& params, bool grad_mode) const;

  void Add(GuardSet guards, std::unique_ptr<JitExecutable> executable);
  int32_t size() const { return static_cast<int32_t>(entries_.size()); }

  // Declares input `input`'s dimension `dim` dynamic for every region of the key: new
  // entries do not guard its size. Idempotent; throws std::logic_error for a new
  // declaration once entries exist, since they were guarded without it.
  void SetDynamicDim(int input, int dim);
  const DynamicDims& dynamic_dims() const { return dynamic_dims_; }

  // Set by an unsafe-side-effect fallback: every call of the key runs eager.
  bool eager_only() const { return eager_only_; }
  void SetEagerOnly() { eager_only_ = true; }
  // True the first time only: RECOMPILE_LIMIT is reported once per key.
  bool TakeFirstLimitHit() { return !std::exchange(limit_reported_, true); }
  // Eager backend: whether a call of the key has been probed for side effects.
  bool side_effects_probed() const { return side_effects_probed_; }
  void SetSideEffectsProbed() { side_effects_probed_ = true; }

  // Layers whose regions use this key, sorted, without repeats.
  void AddLayer(int32_t layer);
  const std::vector<int32_t>& layers() const { return layers_; }

  RegionStats& stats() { return stats_; }
  const RegionStats& stats() const { return stats_; }

 private:
  struct Entry {
    GuardSet guards;
    std::unique_ptr<JitExecutable> executable;
  };

  RegionKey key_;
  std::vector<Entry> entries_;
  DynamicDims dynamic_dims_;
  bool eager_only_ = false;
  bool limit_reported_ = false;
  bool side_effects_probed_ = false;
  std::vector<int32_t> layers_;
  RegionStats stats_;
};

}  // namespace trainyard::engine::compile
