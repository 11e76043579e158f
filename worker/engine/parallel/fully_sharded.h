// Sharded data parallelism (FSDP2-style, parallelism.dp_shard > 1; docs/parallelism.md).
// Every parameter of the model is sharded on dim 0 of its TP/EP-local tensor over its
// FSDP group (the mesh's fsdp group; routed experts over expert_fsdp, when it has more
// than one rank): member s of S keeps rows [s·c, min((s+1)·c, rows)), c = ceil(rows/S),
// as a tensor of its own. Between steps the module's parameters are empty (0 elements)
// and a rank holds only its shards: the fp32 master rows, their gradient and, in AdamW,
// their moments, so a rank's persistent state is 1/S of a replica's.
//
// A step: StartGather() issues every unit's all-gathers at once, in forward order
// (c10d async work; bf16 jobs gather bf16, half the bytes, and unpack to fp32), and the
// model's before-unit hook waits for unit u's just before u's forward, so unit u+1's
// transfer runs while u computes (prefetch). The full parameters stay through every
// micro-batch's forward and backward (no reshard after forward: backward needs no second
// gather). In the last backward, the gradient synchronizer (this is its GradientSink)
// packs each layer's full gradient into a bucket, drops it, and this class empties that
// layer's parameters. The reduction is FSDP's: each bucket is reduce-scattered over the
// FSDP group (laid out so each member receives its own rows of every parameter in it),
// then summed over the replicas (HSDP; dp_replicate > 1) and, for the router, over TP
// (process_mesh.h's replicate groups); each rank keeps the rows of its shard. On NCCL a
// reduce-scatter moves half an all-reduce's bytes; Gloo runs it as an all-reduce of the
// bucket, so with one replica the sums are those of replicated dp, bit for bit.
//
// Thread model: the training thread calls everything; Packed/Reduced run from the
// synchronizer's hooks on the autograd thread that reaches a gradient accumulator (the
// training thread for CPU tensors). Not thread-safe; owned by the Trainer.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/parallel/gradient_synchronizer.h"
#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine {

class FullyShardedParameters final : public GradientSink {
 public:
  struct Param {
    std::string name;
    torch::Tensor module;              // the model's parameter (emptied between steps)
    torch::Tensor shard;               // this rank's rows (what the optimizer updates)
    CollectiveGroup* group = nullptr;  // its FSDP group
    std::vector<int64_t> shape;        // the full TP/EP-local shape
    int64_t chunk = 0;                 // rows per member (the last ones may hold fewer)
    int64_t begin = 0, rows = 0;       // this rank's rows: [begin, begin + rows)
    int unit = 0;                      // the forward unit that uses it (set_before_unit)
  };

  // `named`: the model's parameters (full TP/EP-local tensors, as InitWeights left them),
  // each with its FSDP group (a group of one leaves that parameter as it is).
  // `gather_dtype`: kFloat, or kBFloat16 to all-gather bf16 (training.mixed_precision).
  // Takes each rank's rows; the parameters stay full until ReleaseAll (so a gradient
  // synchronizer can take their shapes and accumulators first).
  // `prefetch` false: StartGather does nothing and each unit's gathers start when the
  // model reaches it (PrefetchFromEnvironment; A/B runs), the same transfers in the same
  // order, so the same results bit for bit.
  FullyShardedParameters(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                         const std::vector<CollectiveGroup*>& groups, torch::ScalarType gather_dtype,
                         bool prefetch);
  // TRAINYARD_FSDP_PREFETCH: "0" turns the prefetch off.
  static bool PrefetchFromEnvironment();
  bool prefetch() const { return prefetch_; }
  size_t unit_count() const { return units_.size(); }

  // Per parameter, in model order: the shard (sharded) or the module parameter.
  std::vector<torch::Tensor> OptimizerParams() const;
  const std::vector<Param>& params() const { return params_; }
  bool sharded(size_t i) const { return params_[i].group != nullptr; }

  // Starts every unit's all-gathers not yet started, in forward order (with prefetch).
  void StartGather();
  // Waits for unit u's gathers and gives its parameters their full data.
  void WaitUnit(int unit);
  // Gathers (if not yet) and waits for every unit: the model holds full parameters.
  void GatherAll();
  // Empties every sharded module parameter and drops its .grad.
  void ReleaseAll();
  // After a load into the full parameters (GatherAll first): copies each rank's rows into
  // its shard, then ReleaseAll.
  void ReshardFromModule();

  // GradientSink.
  void Packed(const torch::Tensor& param) override;
  void Reduced(const torch::Tensor& param, const torch::Tensor& grad) override;

 private:
  void StartUnit(size_t unit);
  size_t IndexOf(const torch::Tensor& module) const;
  void Release(Param& p);

  std::vector<Param> params_;
  std::vector<std::vector<size_t>> units_;  // parameter indices per unit, forward order
  std::unordered_map<const void*, size_t> index_;  // module TensorImpl → index
  torch::ScalarType gather_dtype_;
  bool prefetch_;
  struct Gather {
    torch::Tensor send, recv;
    CollectiveGroup::Pending pending;
  };
  std::vector<Gather> gathers_;        // per parameter, while in flight
  std::vector<bool> unit_started_, unit_ready_;
};

}  // namespace trainyard::engine
