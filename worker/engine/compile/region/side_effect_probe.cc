#include "worker/engine/compile/region/side_effect_probe.h"

#include <unordered_set>

namespace trainyard::engine::compile {

WatchedTensors WatchModule(const torch::nn::Module& module) {
  WatchedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

SideEffectProbe::SideEffectProbe(const WatchedTensors& watched, const std::vector<torch::Tensor>& inputs,
                                 const std::vector<torch::Tensor>& params) {
  std::unordered_set<const c10::TensorImpl*> received;
  for (const auto& t : inputs) received.insert(t.unsafeGetTensorImpl());
  for (const auto& t : params) received.insert(t.unsafeGetTensorImpl());
  probes_.reserve(watched.size());
  for (const auto& [name, tensor] : watched) {
    if (!tensor.defined() || tensor.is_inference()) continue;
    if (received.count(tensor.unsafeGetTensorImpl()) != 0) continue;
    probes_.push_back({name, tensor, tensor._version()});
  }
}

std::vector<std::string> SideEffectProbe::Written() const {
  std::vector<std::string> out;
  for (const Probe& p : probes_) {
    if (p.tensor._version() != p.version) out.push_back(p.name);
  }
  return out;
}

}  // namespace trainyard::engine::compile
