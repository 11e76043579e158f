#include "worker/engine/parallel/parallel_autograd.h"

#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

CollectiveGroup* GroupOf(AutogradContext* ctx) {
  return reinterpret_cast<CollectiveGroup*>(ctx->saved_data["group"].toInt());
}

struct CopyToRegionFn : public torch::autograd::Function<CopyToRegionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    // A fresh tensor, not `x` itself: returning an input from a custom Function is
    // handled differently across LibTorch versions.
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].contiguous().clone();
    GroupOf(ctx)->AllReduceSum(g);
    return {g, torch::Tensor()};
  }
};

struct ReduceFromRegionFn : public torch::autograd::Function<ReduceFromRegionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    auto out = x.contiguous().clone();
    reinterpret_cast<CollectiveGroup*>(group)->AllReduceSum(out);
    return out;
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

struct AllToAllRowsFn : public torch::autograd::Function<AllToAllRowsFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group,
                               std::vector<int64_t> out_splits, std::vector<int64_t> in_splits) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["out_splits"] = out_splits;
    ctx->saved_data["in_splits"] = in_splits;
    return reinterpret_cast<CollectiveGroup*>(group)->AllToAll(x, out_splits, in_splits);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto out_splits = ctx->saved_data["out_splits"].toIntVector();
    const auto in_splits = ctx->saved_data["in_splits"].toIntVector();
    // Rows travel back to where they came from: the splits swap roles.
    auto g = GroupOf(ctx)->AllToAll(grads[0], in_splits, out_splits);
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

int64_t Handle(CollectiveGroup* group) { return reinterpret_cast<int64_t>(group); }

}  // namespace

torch::Tensor CopyToRegion(const torch::Tensor& x, CollectiveGroup* group) {
  if (group == nullptr) return x;
  return CopyToRegionFn::apply(x, Handle(group));
}

torch::Tensor ReduceFromRegion(const torch::Tensor& x, CollectiveGroup* group) {
  if (group == nullptr) return x;
  return ReduceFromRegionFn::apply(x, Handle(group));
}

torch::Tensor AllToAllRows(const torch::Tensor& x, CollectiveGroup* group,
                           const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits) {
  if (group == nullptr) return x;
  return AllToAllRowsFn::apply(x, Handle(group), out_splits, in_splits);
}

}  // namespace trainyard::engine
