#include "worker/engine/compile/compile_context.h"

#include <chrono>
#include <stdexcept>

#include "worker/engine/compile/backend/jit_executable.h"

namespace trainyard::engine::compile {
namespace {

double SteadyNowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CompileContext::CompileContext(CompileOptions options, CompileEventSink& sink)
    : options_(std::move(options)), sink_(sink) {
  if (options_.recompile_limit < 1) {
    throw std::invalid_argument("compile recompile_limit must be >= 1, got " +
                                std::to_string(options_.recompile_limit));
  }
  if (options_.backend == CompileBackend::kCudaGraph && !options_.graph_captures) {
    std::string why;
    if (!CudaGraphsAvailable(&why)) throw std::runtime_error(why);
    options_.graph_captures = CudaGraphCaptures();
  }
  if (!options_.now_ms) options_.now_ms = &SteadyNowMs;
  // cudagraph runs the keys with dynamic dims (the routed experts) through jit.
  if (options_.backend != CompileBackend::kEager) JitExecutable::ConfigureCpuFusion();
}

RegionCache& CompileContext::CacheFor(const RegionKey& key) {
  auto it = caches_by_key_.find(key.str());
  if (it != caches_by_key_.end()) return *it->second;
  caches_.push_back(std::make_unique<RegionCache>(key));
  caches_by_key_.emplace(key.str(), caches_.back().get());
  return *caches_.back();
}

const RegionCache* CompileContext::FindCache(const RegionKey& key) const {
  auto it = caches_by_key_.find(key.str());
  return it == caches_by_key_.end() ? nullptr : it->second;
}

void CompileContext::ReportGraphBreak(const RegionKey& region_after, const std::string& cause) {
  if (!reported_breaks_.emplace(region_after.str(), cause).second) return;
  v1::CompileEvent event;
  event.set_kind(v1::CompileEvent::GRAPH_BREAK);
  event.set_region(region_after.str());
  event.set_reason(cause);
  if (const RegionCache* cache = FindCache(region_after)) {
    for (int layer : cache->layers()) event.add_layers(layer);
    event.set_cache_entries(cache->size());
  }
  Emit(event);
}

void CompileContext::Summary() {
  for (const auto& cache : caches_) {
    const RegionStats& s = cache->stats();
    v1::CompileEvent event;
    event.set_kind(v1::CompileEvent::SUMMARY);
    event.set_region(cache->key().str());
    for (int layer : cache->layers()) event.add_layers(layer);
    event.set_cache_entries(cache->size());
    event.set_reason("hits=" + std::to_string(s.hits) + " misses=" + std::to_string(s.misses) +
                     " eager_fallbacks=" + std::to_string(s.eager_fallbacks) +
                     " entries=" + std::to_string(cache->size()) + " backend=" + CompileBackendName(options_.backend));
    Emit(event);
  }
}

}  // namespace trainyard::engine::compile
