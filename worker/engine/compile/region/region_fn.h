// The function a region computes. Contract: pure in (inputs, params). It reads no
// tensor it did not receive (a jit trace would bake such a tensor in as a constant,
// shared by every layer with the same key), writes no state (counters and other side
// effects are returned as outputs and applied outside the region, so activation-
// checkpoint recompute cannot double-count), has no data-dependent host sync (those
// are graph breaks between regions), and returns defined tensors only. Params are
// passed separately from inputs because a traced graph must receive every tensor that
// requires grad as a graph input.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine::compile {

using RegionFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& inputs,
                                                          const std::vector<torch::Tensor>& params)>;

}  // namespace trainyard::engine::compile
