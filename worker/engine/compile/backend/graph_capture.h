// Records a piece of work once and replays it: on CUDA a CUDA graph (the kernels the
// body launched, replayed with no host work, reading and writing the same device
// memory), behind an interface so the cudagraph backend's autograd plumbing can be
// exercised on CPU by a capture that simply runs the body again (RerunCapture).
//
// A body must leave its results in tensors the caller reads after Replay (the CUDA
// graph rewrites the memory the captured body wrote; a rerun assigns new tensors).
// Not thread-safe; one per captured graph.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>

namespace trainyard::engine::compile {

class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  // Runs `body` once under capture. Throws what the body or the capture throws.
  virtual void Capture(const std::function<void()>& body) = 0;
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

// Runs the body again on every Replay: the same results as a CUDA graph's replay, with
// none of its speed. Tests only.
GraphCaptureFactory RerunCaptures();

// Whether this process can capture CUDA graphs: a CUDA build with a visible GPU. When
// not, `why` is the refusal: "compile backend cudagraph needs ...".
bool CudaGraphsAvailable(std::string* why);

}  // namespace trainyard::engine::compile
