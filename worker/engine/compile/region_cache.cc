#include "worker/engine/compile/region_cache.h"

#include <algorithm>
#include <stdexcept>

namespace trainyard::engine::compile {

JitExecutable* RegionCache::Find(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params,
                                 bool grad_mode) const {
  if (entries_.empty()) return nullptr;
  const GuardSet::Observation call(inputs, params, grad_mode);
  for (const Entry& e : entries_) {
    if (e.guards.Matches(call)) return e.executable.get();
  }
  return nullptr;
}

std::optional<std::string> RegionCache::ClosestFailure(const std::vector<torch::Tensor>& inputs,
                                                       const std::vector<torch::Tensor>& params, bool grad_mode) const {
  std::optional<std::string> best;
  size_t best_count = 0;
  for (const Entry& e : entries_) {
    std::vector<std::string> failures = e.guards.Failures(inputs, params, grad_mode);
    if (failures.empty()) continue;
    // `<=` so a later entry wins a tie.
    if (!best || failures.size() <= best_count) {
      best = std::move(failures.front());
      best_count = failures.size();
    }
  }
  return best;
}

void RegionCache::Add(GuardSet guards, std::unique_ptr<JitExecutable> executable) {
  entries_.push_back({std::move(guards), std::move(executable)});
}

void RegionCache::SetDynamicDim(int input, int dim) {
  if (input < 0 || dim < 0) {
    throw std::invalid_argument("region " + key_.str() + ": dynamic dim (" + std::to_string(input) + ", " +
                                std::to_string(dim) + ") must be non-negative");
  }
  const std::pair<int, int> d{input, dim};
  if (std::find(dynamic_dims_.begin(), dynamic_dims_.end(), d) != dynamic_dims_.end()) return;
  if (!entries_.empty()) {
    throw std::logic_error("region " + key_.str() + ": dynamic dim (" + std::to_string(input) + ", " +
                           std::to_string(dim) + ") declared after entries were compiled");
  }
  dynamic_dims_.push_back(d);
}

void RegionCache::AddLayer(int32_t layer) {
  auto it = std::lower_bound(layers_.begin(), layers_.end(), layer);
  if (it == layers_.end() || *it != layer) layers_.insert(it, layer);
}

}  // namespace trainyard::engine::compile
