#include "worker/engine/checkpoint/train_state.h"

#include <stdexcept>

#include "worker/engine/parallel/parameter_sharding.h"

namespace trainyard::engine {
namespace {

// `local` under global `name`, laid out as the parameter `param_name` is.
StateTensor Entry(const ParallelContext& ctx, const std::string& name, const std::string& param_name,
                  const torch::Tensor& local) {
  const ShardKind kind = ShardKindOf(param_name);
  return StateTensor{name, local, FullShape(kind, local.sizes(), ctx), ShardOffsets(kind, local.sizes(), ctx),
                     OwnsShard(kind, ctx)};
}

}  // namespace

std::vector<StateTensor> CollectModelState(TransformerModelImpl& model) {
  const ParallelContext& ctx = model.parallel();
  std::vector<StateTensor> state;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    state.push_back(Entry(ctx, item.key(), item.key(), item.value()));
  }
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    state.push_back(Entry(ctx, item.key(), item.key(), item.value()));
  }
  return state;
}

std::vector<StateTensor> CollectTrainState(TransformerModelImpl& model, const AdamW& optimizer) {
  const ParallelContext& ctx = model.parallel();
  const auto params = model.named_parameters(/*recurse=*/true);
  if (params.size() != optimizer.size()) {
    throw std::logic_error("CollectTrainState: the optimizer holds " + std::to_string(optimizer.size()) +
                           " parameters, the model " + std::to_string(params.size()));
  }
  auto entry = [&](const std::string& name, const std::string& param_name, const torch::Tensor& local) {
    return Entry(ctx, name, param_name, local);
  };
  std::vector<StateTensor> state;
  for (const auto& item : params) state.push_back(entry(item.key(), item.key(), item.value()));
  for (size_t i = 0; i < params.size(); ++i) {
    state.push_back(entry("optim.m." + params[i].key(), params[i].key(), optimizer.exp_avg(i)));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    state.push_back(entry("optim.v." + params[i].key(), params[i].key(), optimizer.exp_avg_sq(i)));
  }
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    state.push_back(entry(item.key(), item.key(), item.value()));
  }
  return state;
}

std::vector<StateTensor> CollectShardedTrainState(TransformerModelImpl& model, const AdamW& optimizer,
                                                  const FullyShardedParameters& fsdp) {
  const ParallelContext& ctx = model.parallel();
  const auto& params = fsdp.params();
  if (params.size() != optimizer.size()) {
    throw std::logic_error("CollectShardedTrainState: the optimizer holds " + std::to_string(optimizer.size()) +
                           " parameters, FSDP " + std::to_string(params.size()));
  }
  auto entry = [&](size_t i, const std::string& name, const torch::Tensor& local) {
    const auto& p = params[i];
    if (!fsdp.sharded(i)) return Entry(ctx, name, p.name, local);
    const ShardKind kind = ShardKindOf(p.name);
    std::vector<int64_t> offsets = ShardOffsets(kind, p.shape, ctx);
    offsets[0] += p.begin;
    // A member whose rows are empty (more members than rows) writes nothing.
    return StateTensor{name, local, FullShape(kind, p.shape, ctx), offsets, OwnsFsdpShard(kind, ctx) && p.rows > 0};
  };
  std::vector<StateTensor> state;
  for (size_t i = 0; i < params.size(); ++i) state.push_back(entry(i, params[i].name, params[i].shard));
  for (size_t i = 0; i < params.size(); ++i) state.push_back(entry(i, "optim.m." + params[i].name, optimizer.exp_avg(i)));
  for (size_t i = 0; i < params.size(); ++i) {
    state.push_back(entry(i, "optim.v." + params[i].name, optimizer.exp_avg_sq(i)));
  }
  for (const auto& item : model.named_buffers(/*recurse=*/true)) state.push_back(Entry(ctx, item.key(), item.key(), item.value()));
  return state;
}

}  // namespace trainyard::engine
