// Reduces gradients over one process group with a few collectives instead of one per
// parameter (all-reduces; for FSDP, reduce-scatters then all-reduces over replicas): gradients are packed into flat buckets, summed, multiplied by `scale` and
// copied back. The trainer keeps one per gradient class, since the group and scale
// differ: dense params average over the DP group, the router sums over TP and averages
// over DP (the world group, scale 1/dp), and expert params sum over the expert-DP group
// with scale 1/dp (see parameter_sharding.h). A parameter without a gradient on this
// rank (an expert no token chose) contributes zeros, so every rank sends identical
// layouts.
//
// Buckets follow the order backward produces gradients: parameters in reverse
// registration order (output head and final norm first, then the last layer, ..., the
// first layer and the embedding), a new bucket at every layer boundary and whenever a
// bucket would pass kBucketElements.
//
// Overlap (on unless the environment has TRAINYARD_OVERLAP_GRAD_REDUCE=0): Arm() before
// the last micro-batch's backward; a post-hook on each parameter's gradient accumulator
// marks it ready, and a bucket whose parameters are all ready starts its all-reduce
// asynchronously (c10d work handle) while backward goes on, buckets strictly in index
// order so every rank starts them in the same order. Finish() starts what is left (a
// parameter the graph did not reach), waits for all in order, scales and copies back.
// Without overlap Finish() runs the same buckets blocking, one after another: the same
// sums of the same buffers, so the two give bit-identical gradients.
//
// Thread model: the hooks run on the autograd thread that reaches the accumulator (the
// calling thread for CPU tensors); Arm and Finish on the training thread before and
// after backward. Not thread-safe otherwise; owned by the Trainer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine {

// Rows per member when `rows` rows are sharded on dim 0 over `members` ranks: member s
// holds [s·c, min((s+1)·c, rows)), c = ceil(rows / members) (the last ones may hold
// fewer, or none).
inline int64_t ShardChunkRows(int64_t rows, int64_t members) { return (rows + members - 1) / members; }
// The rows member `s` of `members` holds.
inline int64_t ShardRowCount(int64_t rows, int64_t members, int64_t s) {
  const int64_t c = ShardChunkRows(rows, members);
  return std::clamp<int64_t>(rows - s * c, 0, c);
}

// Where reduced gradients go instead of back into each parameter's .grad (FSDP,
// fully_sharded.h). Called on the thread that runs Launch/Finish.
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // `param`'s gradient is packed into its bucket (and its .grad dropped): the full
  // parameter is no longer needed by this step's backward.
  virtual void Packed(const torch::Tensor& param) = 0;
  // The reduced and scaled gradient of `param`: with a shard group, this rank's rows
  // of it ([ShardRowCount(...), ...]); without, all of it. A view into the bucket,
  // valid only during the call.
  virtual void Reduced(const torch::Tensor& param, const torch::Tensor& grad) = 0;
};

class GradientSynchronizer {
 public:
  static constexpr int64_t kBucketElements = int64_t{8} << 20;  // 32 MiB of fp32

  // `names[i]` is params[i]'s module path ("layers.3.attention.wq.weight"): the layer
  // boundaries of the buckets.
  // With a `sink` (borrowed, outlives this), gradients are handed to it: each .grad is
  // dropped once packed into its bucket, bucket buffers exist only from their launch to
  // the end of Finish, and parameters may be emptied between steps (their shapes are
  // taken here).
  // With a `shard_group` too (FSDP: every parameter here is sharded on dim 0 over it, a
  // sub-group of `group`), each bucket is reduce-scattered over it instead, laid out so
  // that member s receives the rows it holds of every parameter of the bucket, then
  // summed over `replicate_group` (the members of `group` holding the same shard; null
  // or one rank: nothing more), and the sink gets this rank's rows.
  GradientSynchronizer(std::vector<torch::Tensor> params, const std::vector<std::string>& names,
                       CollectiveGroup& group, double scale, bool overlap, GradientSink* sink = nullptr,
                       CollectiveGroup* shard_group = nullptr, CollectiveGroup* replicate_group = nullptr);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  // With overlap on and more than one rank: the next backward starts bucket all-reduces
  // as their gradients become ready. Call before the last micro-batch's backward.
  void Arm();
  // grad = scale · Σ_group grad (into .grad, or handed to the sink). The scale applies
  // even to a group of one.
  void Finish();

  bool overlap() const { return overlap_; }
  size_t bucket_count() const { return buckets_.size(); }
  // Buckets the last Finish found already started during backward (0 without overlap).
  size_t started_in_backward() const { return started_in_backward_; }
  CollectiveGroup& group() { return group_; }
  // TRAINYARD_OVERLAP_GRAD_REDUCE: "0" turns overlap off (A/B figures).
  static bool OverlapFromEnvironment();

 private:
  class ReadyHook;
  void OnReady(size_t param);
  void Launch(size_t bucket);
  // The FSDP path (shard_group_): pack and reduce-scatter one bucket; then sum its block
  // over the replicas, scale, and hand each parameter's rows to the sink.
  void LaunchSharded(size_t bucket);
  void FinishSharded(size_t bucket);
  int64_t ShardBlock(size_t bucket) const;  // elements of one member's block
  int64_t RowNumel(size_t param) const;     // elements of one dim-0 row

  std::vector<torch::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;  // per parameter, at construction
  std::vector<int64_t> numels_;
  GradientSink* sink_;
  CollectiveGroup& group_;
  CollectiveGroup* shard_group_;      // null: all-reduce over group_
  CollectiveGroup* replicate_group_;  // with shard_group_, when it has more than one rank
  std::vector<torch::Tensor> shard_out_;  // per bucket with shard_group_: this rank's block
  double scale_;
  bool overlap_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices per bucket
  std::vector<size_t> bucket_of_;             // per parameter
  std::vector<torch::Tensor> flat_;           // one buffer per bucket (with a sink: per step)
  // Kept alive so the hooks persist across steps (a leaf's accumulator is held weakly).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  bool armed_ = false;
  std::vector<bool> ready_;                  // per parameter, this backward
  std::vector<size_t> waiting_;              // per bucket: parameters not yet ready
  size_t next_launch_ = 0;                   // buckets [0, next_launch_) are started
  size_t started_in_backward_ = 0;
  std::vector<CollectiveGroup::Pending> pending_;  // per bucket
};

}  // namespace trainyard::engine
