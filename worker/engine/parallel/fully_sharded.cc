#include "worker/engine/parallel/fully_sharded.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace trainyard::engine {
namespace {

// Forward order: the token embedding, then each block, then the final norm and head
// (TransformerModelImpl::set_before_unit's numbering).
int UnitOfName(const std::string& name, int n_layers) {
  if (name.rfind("tok_embeddings", 0) == 0) return 0;
  if (name.rfind("layers.", 0) == 0) return std::atoi(name.c_str() + std::strlen("layers.")) + 1;
  return n_layers + 1;
}

int LayerCount(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  int n = 0;
  for (const auto& [name, t] : named) {
    if (name.rfind("layers.", 0) == 0) n = std::max(n, std::atoi(name.c_str() + std::strlen("layers.")) + 1);
  }
  return n;
}

}  // namespace

FullyShardedParameters::FullyShardedParameters(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                                               const std::vector<CollectiveGroup*>& groups,
                                               torch::ScalarType gather_dtype, bool prefetch)
    : gather_dtype_(gather_dtype), prefetch_(prefetch) {
  TORCH_CHECK(named.size() == groups.size(), "FSDP: ", groups.size(), " groups for ", named.size(), " parameters");
  torch::NoGradGuard no_grad;
  const int n_layers = LayerCount(named);
  units_.resize(n_layers + 2);
  for (size_t i = 0; i < named.size(); ++i) {
    Param p;
    p.name = named[i].first;
    p.module = named[i].second;
    p.shape = p.module.sizes().vec();
    p.unit = UnitOfName(p.name, n_layers);
    CollectiveGroup* g = groups[i];
    if (g != nullptr && g->world_size() > 1) {
      TORCH_CHECK(p.module.dim() >= 1 && p.module.is_contiguous(), "FSDP: parameter ", p.name,
                  " must be a contiguous tensor of at least one dimension");
      const int64_t S = g->world_size();
      p.group = g;
      p.chunk = ShardChunkRows(p.shape[0], S);
      p.begin = std::min<int64_t>(g->rank() * p.chunk, p.shape[0]);
      p.rows = ShardRowCount(p.shape[0], S, g->rank());
      p.shard = p.module.detach().narrow(0, p.begin, p.rows).clone();
      p.shard.set_requires_grad(true);
    } else {
      p.shard = p.module;
    }
    index_[p.module.unsafeGetTensorImpl()] = i;
    units_[p.unit].push_back(i);
    params_.push_back(std::move(p));
  }
  gathers_.resize(params_.size());
  unit_started_.assign(units_.size(), false);
  unit_ready_.assign(units_.size(), false);
}

std::vector<torch::Tensor> FullyShardedParameters::OptimizerParams() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_) out.push_back(p.shard);
  return out;
}

void FullyShardedParameters::Release(Param& p) {
  p.module.mutable_grad() = torch::Tensor();
  p.module.set_data(torch::empty({0}, p.module.options()));
}

bool FullyShardedParameters::PrefetchFromEnvironment() {
  const char* v = std::getenv("TRAINYARD_FSDP_PREFETCH");
  return v == nullptr || std::string(v) != "0";
}

void FullyShardedParameters::StartGather() {
  if (!prefetch_) return;
  for (size_t u = 0; u < units_.size(); ++u) StartUnit(u);
}

void FullyShardedParameters::StartUnit(size_t u) {
  if (unit_started_[u]) return;
  unit_started_[u] = true;
  torch::NoGradGuard no_grad;
  for (size_t i : units_[u]) {
    Param& p = params_[i];
    if (p.group == nullptr) continue;
    Gather& g = gathers_[i];
    torch::Tensor rows = p.shard.detach().to(gather_dtype_);
    if (p.rows < p.chunk) {
      std::vector<int64_t> pad = p.shape;
      pad[0] = p.chunk - p.rows;
      rows = torch::cat({rows, torch::zeros(pad, rows.options())});
    }
    g.send = rows.contiguous();
    std::vector<int64_t> all = p.shape;
    all[0] = p.chunk * p.group->world_size();
    g.recv = torch::empty(all, g.send.options());
    g.pending = p.group->AllGatherAsync(g.send, g.recv);
  }
}

void FullyShardedParameters::WaitUnit(int unit) {
  TORCH_CHECK(unit >= 0 && static_cast<size_t>(unit) < units_.size(), "FSDP: no unit ", unit);
  if (unit_ready_[unit]) return;
  StartUnit(static_cast<size_t>(unit));
  torch::NoGradGuard no_grad;
  for (size_t i : units_[unit]) {
    Param& p = params_[i];
    if (p.group == nullptr) continue;
    Gather& g = gathers_[i];
    g.pending.Wait();
    torch::Tensor full = g.recv.narrow(0, 0, p.shape[0]);
    if (full.scalar_type() != p.module.scalar_type()) full = full.to(p.module.scalar_type());
    p.module.set_data(full);
    g = Gather();
  }
  unit_ready_[unit] = true;
}

void FullyShardedParameters::GatherAll() {
  for (size_t u = 0; u < units_.size(); ++u) StartUnit(u);
  for (size_t u = 0; u < units_.size(); ++u) WaitUnit(static_cast<int>(u));
}

void FullyShardedParameters::ReleaseAll() {
  // Gathers still in flight (a forward that ended early) must end before their buffers go.
  for (auto& g : gathers_) {
    g.pending.Wait();
    g = Gather();
  }
  for (auto& p : params_) {
    if (p.group != nullptr) Release(p);
  }
  unit_started_.assign(units_.size(), false);
  unit_ready_.assign(units_.size(), false);
}

void FullyShardedParameters::ReshardFromModule() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p.group == nullptr) continue;
    TORCH_CHECK(p.module.sizes().vec() == p.shape, "FSDP: parameter ", p.name, " is not gathered");
    p.shard.copy_(p.module.narrow(0, p.begin, p.rows));
  }
  ReleaseAll();
}

size_t FullyShardedParameters::IndexOf(const torch::Tensor& module) const {
  auto it = index_.find(module.unsafeGetTensorImpl());
  TORCH_CHECK(it != index_.end(), "FSDP: a gradient for a parameter it does not hold");
  return it->second;
}

void FullyShardedParameters::Packed(const torch::Tensor& param) {
  Param& p = params_[IndexOf(param)];
  if (p.group != nullptr) Release(p);
}

void FullyShardedParameters::Reduced(const torch::Tensor& param, const torch::Tensor& grad) {
  Param& p = params_[IndexOf(param)];
  torch::NoGradGuard no_grad;
  if (p.group == nullptr) {
    p.module.mutable_grad() = grad.clone();
    return;
  }
  TORCH_CHECK(grad.dim() >= 1 && grad.size(0) == p.rows, "FSDP: the reduced gradient of ", p.name, " has ",
              grad.sizes(), " where this rank holds ", p.rows, " rows");
  p.shard.mutable_grad() = grad.clone();
}

}  // namespace trainyard::engine
