// One call site of a region (e.g. layer 3's attention), created once when the model is
// built and called every step. A call runs the first cached entry of the key whose
// guards pass (a hit); on a miss it compiles a new entry (COMPILE for the key's first,
// RECOMPILE with the closest entry's failed guard otherwise) until the key holds
// recompile_limit entries, after which new guard sets run eager (RECOMPILE_LIMIT, once)
// while existing entries still hit.
//
// Side effects: while an entry is traced (and, on the eager backend, on the key's
// first call) the version counters of the watched tensors the region did not receive
// are compared before and after. A write raises UNSAFE_SIDE_EFFECT naming the tensor;
// policy "error" throws std::runtime_error naming region and tensor, policy "fallback"
// makes the key eager (FALLBACK). Either way the write happened exactly once: that
// call returns the outputs of the traced run itself rather than running fn again.
//
// A trace that bakes a watched tensor in as a constant (fn read model state it did not
// receive; every layer sharing the key would then read layer one's tensor) is handled
// by the same policy, with a FALLBACK event under "fallback".
//
// Dynamic dims (SetDynamicDim) are sizes the key's entries do not guard, such as the
// rows of an expert that change every step. A trace turns C++ arithmetic on sizes
// into constants, so each new entry with a dynamic dim is probed once: the graph and
// fn are run (no grad) on the inputs grown by one slice along every dynamic dim; if
// the results differ, the entry guards those sizes after all and its COMPILE /
// RECOMPILE reason says so. A dynamic dim of size 0 is guarded for that entry (there
// is no slice to grow by).
//
// Regions called while another region is being traced run their fn inline, so they
// become part of the outer graph.
//
// Backend cudagraph: a key without dynamic dims is captured per call site
// (cuda_graph_executable.h), one graph pair per guard set, at most recompile_limit per
// site; its first call runs eager once under the side-effect probe and then captures.
// A call whose previous backward has not run yet runs eager. Keys with dynamic dims
// (the routed experts, whose rows change every step) run the jit path.
// Not thread-safe; see CompileContext.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/compile/backend/cuda_graph_executable.h"
#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/compile/region/side_effect_probe.h"

namespace trainyard::engine::compile {

class CompiledRegion {
 public:
  // `layer` is the block index, or -1 for a region outside the layer stack (the
  // loss). `watched` is usually one list shared by every region of the model
  // (WatchModule(model)); nullptr watches nothing.
  CompiledRegion(CompileContext& ctx, RegionKey key, RegionFn fn, int layer,
                 std::shared_ptr<const WatchedTensors> watched);

  std::vector<torch::Tensor> operator()(const std::vector<torch::Tensor>& inputs,
                                        const std::vector<torch::Tensor>& params);

  // Declares input `input`'s dimension `dim` dynamic for the whole key (every layer
  // sharing it). Call before the first call; see RegionCache::SetDynamicDim.
  void SetDynamicDim(int input, int dim) { cache_.SetDynamicDim(input, dim); }

  const RegionKey& key() const { return cache_.key(); }
  int layer() const { return layer_; }

 private:
  std::vector<torch::Tensor> RunEagerBackend(const std::vector<torch::Tensor>& inputs,
                                             const std::vector<torch::Tensor>& params);
  std::vector<torch::Tensor> RunCudaGraph(const std::vector<torch::Tensor>& inputs,
                                          const std::vector<torch::Tensor>& params, bool grad_mode);
  std::vector<torch::Tensor> Compile(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params,
                                     bool grad_mode);
  // nullopt if `executable` agrees with fn on inputs grown along `dynamic`; else why not.
  std::optional<std::string> ProbeDynamicDims(JitExecutable& executable, const std::vector<torch::Tensor>& inputs,
                                              const std::vector<torch::Tensor>& params,
                                              const DynamicDims& dynamic) const;
  // UNSAFE_SIDE_EFFECT for written tensors; then throws (error) or returns (fallback).
  void OnSideEffect(const std::vector<std::string>& written);
  // Captured watched tensors: throws (error) or returns (fallback).
  void OnCapturedState(const std::vector<std::string>& read);
  // Makes the key eager with a FALLBACK event.
  void FallBack(const std::string& why);
  std::vector<std::string> CapturedWatched(const JitExecutable& executable) const;
  v1::CompileEvent Event(v1::CompileEvent::Kind kind, std::string reason) const;
  std::string Where() const;  // "region attention{...} (layer 3)", for error messages

  CompileContext& ctx_;
  RegionCache& cache_;
  RegionFn fn_;
  int layer_;
  std::shared_ptr<const WatchedTensors> watched_;
  struct Graph {
    GuardSet guards;
    std::unique_ptr<CudaGraphExecutable> executable;
  };
  std::vector<Graph> graphs_;  // cudagraph: this call site's captures
};

}  // namespace trainyard::engine::compile
