// Records a piece of work once and replays it: on CUDA a CUDA graph (the kernels the
// body launched, replayed with no host work, reading and writing the same device
// memory), behind an interface so the cudagraph backend's autograd plumbing can be
// exercised on CPU by a capture that simply runs the body again (RerunCapture).
//
// Capture returns the tensors the body produced; every Replay rewrites those same
// tensors (the CUDA graph rewrites their memory; the rerun copies its fresh results into
// them), so a caller that keeps a captured tensor across a replay sees it change, as on
// a GPU. Not thread-safe; one per captured graph.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace trainyard::engine::compile {

class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  // Runs `body` eagerly where the capture will run (CUDA: on the capture stream), so
  // that libraries initialise their per-stream state before capture, not under it.
  virtual void Warmup(const std::function<void()>& body) = 0;
  // Runs `body` once under capture and returns its tensors, which every Replay rewrites.
  // Throws what the body or the capture throws.
  virtual std::vector<at::Tensor> Capture(const std::function<std::vector<at::Tensor>()>& body) = 0;
  // Runs the captured work again, on the current stream.
  virtual void Replay() = 0;
};

// Makes one GraphCapture per graph. `shares_pool_with`: a capture made by the same
// factory whose memory pool the new graph allocates from (a backward graph reads the
// forward graph's intermediates), or nullptr.
using GraphCaptureFactory =
    std::function<std::unique_ptr<GraphCapture>(const c10::Device& device, GraphCapture* shares_pool_with)>;

// CUDA graphs (at::cuda::CUDAGraph) captured on a side stream of `device`. Throws
// std::runtime_error in a build without CUDA, and for a device that is not CUDA.
GraphCaptureFactory CudaGraphCaptures();

// Runs the body again on every Replay and copies its results into the tensors Capture
// returned: a CUDA graph's results and aliasing, with none of its speed. Tests only.
GraphCaptureFactory RerunCaptures();

// Whether this process can capture CUDA graphs: a CUDA build with a visible GPU. When
// not, `why` is the refusal: "compile backend cudagraph needs ...".
bool CudaGraphsAvailable(std::string* why);

}  // namespace trainyard::engine::compile
