#include "worker/engine/parallel/gradient_synchronizer.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <torch/csrc/autograd/function_hook.h>

namespace trainyard::engine {
namespace {

// The layer a parameter belongs to: N for "layers.N.…", INT_MAX for the output head and
// the final norm (their gradients come first), -1 for the embedding (last).
int UnitOf(const std::string& name) {
  if (name.rfind("layers.", 0) == 0) return std::atoi(name.c_str() + std::strlen("layers."));
  if (name.rfind("tok_embeddings", 0) == 0) return -1;
  return INT_MAX;
}

}  // namespace

class GradientSynchronizer::ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradientSynchronizer* sync, size_t param) : sync_(sync), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (sync_ != nullptr) sync_->OnReady(param_);
    return outputs;
  }
  GradientSynchronizer* sync_;

 private:
  size_t param_;
};

bool GradientSynchronizer::OverlapFromEnvironment() {
  const char* v = std::getenv("TRAINYARD_OVERLAP_GRAD_REDUCE");
  return v == nullptr || std::string(v) != "0";
}

GradientSynchronizer::GradientSynchronizer(std::vector<torch::Tensor> params, const std::vector<std::string>& names,
                                           CollectiveGroup& group, double scale, bool overlap, GradientSink* sink,
                                           CollectiveGroup* shard_group, CollectiveGroup* replicate_group)
    : params_(std::move(params)),
      sink_(sink),
      group_(group),
      shard_group_(shard_group != nullptr && shard_group->world_size() > 1 ? shard_group : nullptr),
      replicate_group_(replicate_group != nullptr && replicate_group->world_size() > 1 ? replicate_group : nullptr),
      scale_(scale),
      overlap_(overlap && group.world_size() > 1) {
  TORCH_CHECK(names.size() == params_.size(), "GradientSynchronizer: ", names.size(), " names for ",
              params_.size(), " parameters");
  TORCH_CHECK(shard_group_ == nullptr || sink_ != nullptr, "GradientSynchronizer: a shard group needs a sink");
  if (shard_group_ == nullptr) replicate_group_ = nullptr;
  TORCH_CHECK(shard_group_ == nullptr || (replicate_group_ == nullptr ? 1 : replicate_group_->world_size()) *
                                                 shard_group_->world_size() == group.world_size(),
              "GradientSynchronizer: shard group of ", shard_group_ ? shard_group_->world_size() : 0,
              " ranks and replicate group of ", replicate_group_ ? replicate_group_->world_size() : 1,
              " do not cover the reduction group of ", group.world_size());
  for (size_t i = 0; i < params_.size(); ++i) {
    TORCH_CHECK(shard_group_ == nullptr || params_[i].dim() >= 1, "GradientSynchronizer: sharded parameter ",
                names[i], " has no dim 0");
  }
  for (const auto& p : params_) {
    shapes_.push_back(p.sizes().vec());
    numels_.push_back(p.numel());
  }
  bucket_of_.resize(params_.size());
  int64_t filled = 0;
  int unit = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int u = UnitOf(names[k]);
    if (buckets_.empty() || u != unit || filled + numels_[k] > kBucketElements) {
      if (buckets_.empty() || !buckets_.back().empty()) buckets_.emplace_back();
      filled = 0;
      unit = u;
    }
    buckets_.back().push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    filled += numels_[k];
  }
  for (const auto& bucket : buckets_) {
    int64_t n = 0;
    for (size_t i : bucket) n += numels_[i];
    flat_.push_back(sink_ != nullptr ? torch::Tensor() : torch::empty({n}, params_.front().options()));
  }
  pending_.resize(buckets_.size());
  shard_out_.resize(buckets_.size());
  if (!overlap_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    accumulators_.push_back(torch::autograd::impl::grad_accumulator(params_[i]));
    TORCH_CHECK(accumulators_.back() != nullptr, "GradientSynchronizer: parameter ", names[i],
                " has no gradient accumulator (not a leaf that requires grad)");
    accumulators_.back()->add_post_hook(std::make_unique<ReadyHook>(this, i));
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  // The accumulators may outlive this object (the parameters hold them weakly, a graph
  // strongly): their hooks must not call back into it.
  for (auto& acc : accumulators_) {
    for (auto& hook : acc->post_hooks()) {
      if (auto* h = dynamic_cast<ReadyHook*>(hook.get()); h != nullptr && h->sync_ == this) h->sync_ = nullptr;
    }
  }
}

void GradientSynchronizer::Arm() {
  if (!overlap_) return;
  armed_ = true;
  ready_.assign(params_.size(), false);
  waiting_.clear();
  for (const auto& bucket : buckets_) waiting_.push_back(bucket.size());
  next_launch_ = 0;
}

void GradientSynchronizer::OnReady(size_t param) {
  if (!armed_) return;
  // One accumulation per parameter per backward is what makes a ready bucket final; a
  // parameter used on two paths that autograd accumulates separately (inside and
  // outside a reentrant checkpoint) would start its bucket with part of its gradient.
  TORCH_CHECK(!ready_[param], "GradientSynchronizer: parameter ", param,
              "'s gradient was accumulated twice in one backward; its bucket had already started");
  ready_[param] = true;
  --waiting_[bucket_of_[param]];
  while (next_launch_ < buckets_.size() && waiting_[next_launch_] == 0) Launch(next_launch_++);
}

int64_t GradientSynchronizer::ShardBlock(size_t b) const {
  const int64_t S = shard_group_->world_size();
  int64_t block = 0;
  for (size_t i : buckets_[b]) block += ShardChunkRows(shapes_[i][0], S) * RowNumel(i);
  return block;
}

int64_t GradientSynchronizer::RowNumel(size_t i) const {
  return shapes_[i][0] == 0 ? 0 : numels_[i] / shapes_[i][0];
}

void GradientSynchronizer::LaunchSharded(size_t b) {
  // Member s's block holds, parameter after parameter, the rows s holds of each
  // (ShardChunkRows per member, zero-padded where a member holds fewer).
  const int64_t S = shard_group_->world_size();
  const int64_t block = ShardBlock(b);
  auto options = torch::TensorOptions().dtype(torch::kFloat).device(group_.device());
  torch::Tensor flat = torch::empty({S * block}, options);
  int64_t offset = 0;
  for (size_t i : buckets_[b]) {
    const int64_t rows = shapes_[i][0], row = RowNumel(i), chunk = ShardChunkRows(rows, S);
    const torch::Tensor& grad = params_[i].grad();
    for (int64_t s = 0; s < S; ++s) {
      torch::Tensor dst = flat.narrow(0, s * block + offset, chunk * row);
      const int64_t held = ShardRowCount(rows, S, s);
      if (grad.defined() && held > 0) {
        dst.narrow(0, 0, held * row).copy_(grad.reshape({rows, row}).narrow(0, s * chunk, held).reshape({-1}));
        dst.narrow(0, held * row, (chunk - held) * row).zero_();
      } else {
        dst.zero_();
      }
    }
    offset += chunk * row;
    params_[i].mutable_grad() = torch::Tensor();
    sink_->Packed(params_[i]);
  }
  flat_[b] = flat;
  shard_out_[b] = torch::empty({block}, options);
  pending_[b] = shard_group_->ReduceScatterSumAsync(flat_[b], shard_out_[b]);
  if (!overlap_) pending_[b].Wait();
}

void GradientSynchronizer::Launch(size_t b) {
  torch::NoGradGuard no_grad;
  if (shard_group_ != nullptr) {
    LaunchSharded(b);
    return;
  }
  torch::Tensor& flat = flat_[b];
  if (!flat.defined()) {
    int64_t total = 0;
    for (size_t i : buckets_[b]) total += numels_[i];
    flat = torch::empty({total}, torch::TensorOptions().dtype(torch::kFloat).device(group_.device()));
  }
  int64_t offset = 0;
  for (size_t i : buckets_[b]) {
    const int64_t n = numels_[i];
    if (params_[i].grad().defined()) {
      flat.narrow(0, offset, n).copy_(params_[i].grad().reshape({-1}));
    } else {
      flat.narrow(0, offset, n).zero_();
    }
    offset += n;
    if (sink_ != nullptr) {
      params_[i].mutable_grad() = torch::Tensor();
      sink_->Packed(params_[i]);
    }
  }
  if (overlap_) {
    pending_[b] = group_.AllReduceSumAsync(flat);
  } else {
    group_.AllReduceSum(flat);
  }
}

void GradientSynchronizer::Finish() {
  torch::NoGradGuard no_grad;
  if (sink_ == nullptr) {
    for (auto& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
  }
  if (group_.world_size() == 1 && sink_ != nullptr) {
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor g = params_[i].grad().defined() ? params_[i].grad() * scale_
                                                    : torch::zeros(shapes_[i], params_[i].options());
      params_[i].mutable_grad() = torch::Tensor();
      sink_->Packed(params_[i]);
      sink_->Reduced(params_[i], g);
    }
    return;
  }
  if (group_.world_size() == 1) {
    if (scale_ != 1.0) {
      for (auto& p : params_) p.mutable_grad().mul_(scale_);
    }
    return;
  }
  // Overlap: start what backward did not (in order), then wait in the same order.
  // Blocking: each bucket in turn.
  const size_t first = armed_ ? next_launch_ : 0;
  started_in_backward_ = first;
  for (size_t b = first; b < buckets_.size(); ++b) Launch(b);
  armed_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b].Wait();
    if (shard_group_ != nullptr) {
      FinishSharded(b);
      continue;
    }
    torch::Tensor& flat = flat_[b];
    if (scale_ != 1.0) flat.mul_(scale_);
    int64_t offset = 0;
    for (size_t i : buckets_[b]) {
      const int64_t n = numels_[i];
      if (sink_ != nullptr) {
        sink_->Reduced(params_[i], flat.narrow(0, offset, n).view(shapes_[i]));
      } else {
        torch::Tensor g = params_[i].mutable_grad();
        g.copy_(flat.narrow(0, offset, n).view(g.sizes()));
      }
      offset += n;
    }
    if (sink_ != nullptr) flat = torch::Tensor();
  }
}

void GradientSynchronizer::FinishSharded(size_t b) {
  flat_[b] = torch::Tensor();
  torch::Tensor out = std::move(shard_out_[b]);
  if (replicate_group_ != nullptr) replicate_group_->AllReduceSum(out);
  if (scale_ != 1.0) out.mul_(scale_);
  const int64_t S = shard_group_->world_size(), me = shard_group_->rank();
  int64_t offset = 0;
  for (size_t i : buckets_[b]) {
    const int64_t rows = shapes_[i][0], row = RowNumel(i), chunk = ShardChunkRows(rows, S);
    const int64_t held = ShardRowCount(rows, S, me);
    std::vector<int64_t> shape = shapes_[i];
    shape[0] = held;
    sink_->Reduced(params_[i], out.narrow(0, offset, held * row).view(shape));
    offset += chunk * row;
  }
}

}  // namespace trainyard::engine
