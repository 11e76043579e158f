#include "worker/engine/io/state_dict_io.h"

#include <map>
#include <sstream>
#include <stdexcept>

#include "worker/engine/parallel/parameter_sharding.h"

namespace trainyard::engine {
namespace {

NamedTensors LocalState(TransformerModelImpl& model) {
  NamedTensors state;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) state.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true)) state.emplace_back(item.key(), item.value());
  return state;
}

std::string ShapeString(c10::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

}  // namespace

NamedTensors GatherFullState(TransformerModelImpl& model, ProcessMesh& mesh) {
  torch::NoGradGuard no_grad;
  const ParallelContext& ctx = model.parallel();
  NamedTensors full_state;
  for (const auto& [name, local] : LocalState(model)) {
    const ShardKind kind = ShardKindOf(name);
    auto full = torch::zeros(FullShape(kind, local.sizes(), ctx), local.options().dtype(torch::kFloat32));
    if (OwnsShard(kind, ctx)) TakeShard(full, kind, ctx).copy_(local);
    mesh.world().AllReduceSum(full);  // on the model's device, which is the mesh's
    full_state.emplace_back(name, full.to(torch::kCPU));
  }
  return full_state;
}

void LoadFullState(TransformerModelImpl& model, const NamedTensors& tensors) {
  torch::NoGradGuard no_grad;
  const ParallelContext& ctx = model.parallel();
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = t;
  for (auto& [name, local] : LocalState(model)) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::invalid_argument("load: tensor " + name + " is missing");
    const ShardKind kind = ShardKindOf(name);
    const auto want = FullShape(kind, local.sizes(), ctx);
    if (it->second.sizes() != c10::IntArrayRef(want)) {
      throw std::invalid_argument("load: tensor " + name + " has shape " + ShapeString(it->second.sizes()) +
                                  ", the model needs " + ShapeString(want));
    }
    local.copy_(TakeShard(it->second, kind, ctx).to(local.dtype()));
    by_name.erase(it);
  }
  if (!by_name.empty()) {
    throw std::invalid_argument("load: tensor " + by_name.begin()->first + " is not in the model (" +
                                std::to_string(by_name.size()) + " unknown names)");
  }
}

}  // namespace trainyard::engine
