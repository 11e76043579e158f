#include "worker/engine/compile/backend/graph_capture.h"

#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>

#ifdef TRAINYARD_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainyard::engine::compile {
namespace {

class Rerun final : public GraphCapture {
 public:
  void Capture(const std::function<void()>& body) override {
    body_ = body;
    body_();
  }
  void Replay() override {
    if (!body_) throw std::logic_error("graph replayed before it was captured");
    body_();
  }

 private:
  std::function<void()> body_;
};

#ifdef TRAINYARD_TORCH_CUDA
// One capture stream per device for every graph, as PyTorch's torch.cuda.graph does: the
// backward graph's kernels run on the stream of the forward ops they belong to, so both
// graphs must be captured on the same stream.
c10::cuda::CUDAStream CaptureStream(c10::DeviceIndex index) {
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream>* streams =
      new std::map<c10::DeviceIndex, c10::cuda::CUDAStream>();
  auto it = streams->find(index);
  if (it == streams->end()) {
    it = streams->emplace(index, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index)).first;
  }
  return it->second;
}

class CudaGraph final : public GraphCapture {
 public:
  CudaGraph(const c10::Device& device, CudaGraph* pool_owner) : device_(device), pool_owner_(pool_owner) {}

  void Capture(const std::function<void()>& body) override {
    c10::cuda::CUDAGuard device_guard(device_);
    // Capture needs a stream other than the default one; the work it records replays on
    // whichever stream is current at Replay, ordered after what came before there.
    c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    c10::cuda::CUDAStream side = CaptureStream(device_.index());
    side.synchronize();
    current.synchronize();
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      if (pool_owner_ != nullptr) {
        graph_.capture_begin(pool_owner_->graph_.pool());
      } else {
        graph_.capture_begin();
      }
      try {
        body();
      } catch (...) {
        // End the capture so the stream is usable again; the graph is discarded.
        try {
          graph_.capture_end();
        } catch (...) {
        }
        throw;
      }
      graph_.capture_end();
    }
    side.synchronize();
  }

  void Replay() override {
    c10::cuda::CUDAGuard device_guard(device_);
    graph_.replay();
  }

 private:
  c10::Device device_;
  CudaGraph* pool_owner_;
  at::cuda::CUDAGraph graph_;
};
#endif

}  // namespace

GraphCaptureFactory CudaGraphCaptures() {
  return [](const c10::Device& device, GraphCapture* shares_pool_with) -> std::unique_ptr<GraphCapture> {
    if (!device.is_cuda()) {
      throw std::runtime_error("compile backend cudagraph captures CUDA work; this region's tensors are on " +
                               device.str() + " (cudagraph needs resources.device=cuda)");
    }
#ifdef TRAINYARD_TORCH_CUDA
    return std::make_unique<CudaGraph>(device, dynamic_cast<CudaGraph*>(shares_pool_with));
#else
    (void)shares_pool_with;
    throw std::runtime_error("compile backend cudagraph needs a CUDA build of LibTorch; this engine was built for CPU");
#endif
  };
}

GraphCaptureFactory RerunCaptures() {
  return [](const c10::Device&, GraphCapture*) -> std::unique_ptr<GraphCapture> { return std::make_unique<Rerun>(); };
}

bool CudaGraphsAvailable(std::string* why) {
#ifdef TRAINYARD_TORCH_CUDA
  if (torch::cuda::is_available()) return true;
  if (why != nullptr) {
    *why =
        "compile backend cudagraph needs a visible CUDA GPU; this process sees none (check CUDA_VISIBLE_DEVICES "
        "and the driver)";
  }
  return false;
#else
  if (why != nullptr) *why = "compile backend cudagraph needs a CUDA build of LibTorch; this engine was built for CPU";
  return false;
#endif
}

}  // namespace trainyard::engine::compile
