#include "worker/engine/parallel/gradient_synchronizer.h"

#include <utility>

namespace trainyard::engine {

GradientSynchronizer::GradientSynchronizer(std::vector<torch::Tensor> params, CollectiveGroup& group,
                                           double scale)
    : params_(std::move(params)), group_(group), scale_(scale) {
  int64_t filled = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (buckets_.empty() || filled + params_[i].numel() > kBucketElements) {
      if (buckets_.empty() || !buckets_.back().empty()) buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().push_back(i);
    filled += params_[i].numel();
  }
  for (const auto& bucket : buckets_) {
    int64_t n = 0;
    for (size_t i : bucket) n += params_[i].numel();
    flat_.push_back(torch::empty({n}, params_.front().options()));
  }
}

void GradientSynchronizer::Reduce() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  if (group_.world_size() == 1) {
    if (scale_ != 1.0) {
      for (auto& p : params_) p.mutable_grad().mul_(scale_);
    }
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    torch::Tensor& flat = flat_[b];
    int64_t offset = 0;
    for (size_t i : buckets_[b]) {
      const int64_t n = params_[i].numel();
      flat.narrow(0, offset, n).copy_(params_[i].grad().reshape({-1}));
      offset += n;
    }
    group_.AllReduceSum(flat);
    if (scale_ != 1.0) flat.mul_(scale_);
    offset = 0;
    for (size_t i : buckets_[b]) {
      torch::Tensor g = params_[i].mutable_grad();
      const int64_t n = params_[i].numel();
      g.copy_(flat.narrow(0, offset, n).view(g.sizes()));
      offset += n;
    }
  }
}

}  // namespace trainyard::engine
