// Activation checkpointing: run `fn` without keeping its activations, and run it again
// in backward to get them. Only the inputs are saved. The recompute calls the same `fn`,
// so regions inside it go through the same compiled caches (with grad mode on, which
// their guards tell apart from the no-grad forward). `fn` must give the same result
// when re-run: no writes to state (the compile layer rejects those in regions) and no
// random numbers, since RNG state is not replayed.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace trainyard::engine::compile {

using CheckpointFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Outputs equal fn(inputs), and so do the gradients with respect to every input that
// requires grad and to every parameter fn uses (accumulated into .grad, as a plain
// backward does). Integer outputs are non-differentiable. Values fn returns are taken
// from the forward; the recompute's copies only feed gradients, so a count fn returns
// is never counted twice. Under no-grad mode this is just fn(inputs).
std::vector<torch::Tensor> Checkpointed(const CheckpointFn& fn, const std::vector<torch::Tensor>& inputs);

}  // namespace trainyard::engine::compile
