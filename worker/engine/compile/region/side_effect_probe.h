// Detects writes to model state a region did not receive. Snapshot the version counter
// of every watched tensor (the model's named parameters and buffers) that is not one of
// the region's inputs or params, run or trace the region, and list the ones whose
// counter moved: an in-place op on a tensor bumps its counter, and a trace bakes such a
// write into the graph, to be replayed on every call. Not thread-safe; one per capture.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine::compile {

// Named tensors to watch, e.g. {"layers.2.moe.tokens_per_expert", buffer}.
using WatchedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Every named parameter and buffer of `module`, recursively, with the module's names.
WatchedTensors WatchModule(const torch::nn::Module& module);

class SideEffectProbe {
 public:
  // Records the versions now. Tensors that are the same object as one of `inputs` or
  // `params` are skipped (writing your own input is visible to the graph), as are
  // undefined and inference tensors (no version counter).
  SideEffectProbe(const WatchedTensors& watched, const std::vector<torch::Tensor>& inputs,
                  const std::vector<torch::Tensor>& params);

  // Names of the watched tensors written since construction, in watch order.
  std::vector<std::string> Written() const;

 private:
  struct Probe {
    std::string name;
    torch::Tensor tensor;
    int64_t version;
  };
  std::vector<Probe> probes_;
};

}  // namespace trainyard::engine::compile
