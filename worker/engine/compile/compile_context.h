// The compile layer of one model (one per trainer, per rank): options, the caches by
// region key, graph-break bookkeeping and the event sink. Regions reach it through
// CompiledRegion.
//
// Not thread-safe; owned by the trainer. Every region call must come from the training
// thread or from autograd's backward (activation-checkpoint recompute), which runs
// while the training thread is blocked in backward().
#pragma once

#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "worker/engine/compile/backend/compile_options.h"
#include "worker/engine/compile/events/compile_event.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/compile/region_cache.h"

namespace trainyard::engine::compile {

class CompileContext {
 public:
  // Throws std::invalid_argument when recompile_limit < 1, and std::runtime_error for
  // backend cudagraph where it cannot capture (a CPU build, or no visible GPU) unless
  // options.graph_captures is given.
  // `sink` must outlive the context.
  CompileContext(CompileOptions options, CompileEventSink& sink);
  CompileContext(const CompileContext&) = delete;
  CompileContext& operator=(const CompileContext&) = delete;

  const CompileOptions& options() const { return options_; }

  // The cache for `key`, created on first use. The reference stays valid for the
  // context's lifetime.
  RegionCache& CacheFor(const RegionKey& key);
  // nullptr when no region with `key` has been created.
  const RegionCache* FindCache(const RegionKey& key) const;

  // A declared break between regions (a collective, a data-dependent host sync): emits
  // one GRAPH_BREAK per (region_after, cause) pair, whatever the backend.
  void ReportGraphBreak(const RegionKey& region_after, const std::string& cause);

  // One SUMMARY event per region key, in creation order, with reason
  // "hits=H misses=M eager_fallbacks=F entries=E backend=B".
  void Summary();

  void Emit(const v1::CompileEvent& event) { sink_.OnCompileEvent(event); }
  double NowMs() const { return options_.now_ms(); }

 private:
  CompileOptions options_;
  CompileEventSink& sink_;
  std::vector<std::unique_ptr<RegionCache>> caches_;             // creation order
  std::unordered_map<std::string, RegionCache*> caches_by_key_;  // RegionKey::str()
  std::set<std::pair<std::string, std::string>> reported_breaks_;
};

}  // namespace trainyard::engine::compile
