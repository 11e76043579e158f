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
  void Warmup(const std::function<void()>& body) override { body(); }
  std::vector<at::Tensor> Capture(const std::function<std::vector<at::Tensor>()>& body) override {
    body_ = body;
    results_ = body_();
    return results_;
  }
  void Replay() override {
    if (!body_) throw std::logic_error("graph replayed before it was captured");
    std::vector<at::Tensor> fresh = body_();
    if (fresh.size() != results_.size()) throw std::logic_error("a replay produced another number of tensors");
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < fresh.size(); ++i) {
      if (fresh[i].defined() != results_[i].defined()) throw std::logic_error("a replay produced another tensor set");
      if (fresh[i].defined()) results_[i].detach().copy_(fresh[i]);
    }
  }

 private:
  std::function<std::vector<at::Tensor>()> body_;
  std::vector<at::Tensor> results_;
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

  void Warmup(const std::function<void()>& body) override {
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStream side = CaptureStream(device_.index());
    c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      body();
    }
    side.synchronize();
  }

  std::vector<at::Tensor> Capture(const std::function<std::vector<at::Tensor>()>& body) override {
    c10::cuda::CUDAGuard device_guard(device_);
    // Capture needs a stream other than the default one; the work it records replays on
    // whichever stream is current at Replay, ordered after what came before there.
    c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    c10::cuda::CUDAStream side = CaptureStream(device_.index());
    side.synchronize();
    current.synchronize();
    std::vector<at::Tensor> results;
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      // Thread-local capture mode: another thread's CUDA calls (NCCL's watchdog querying
      // its events) neither break this capture nor fail because of it; the autograd
      // engine's device thread still records onto the capture stream.
      graph_.capture_begin(pool_owner_ != nullptr ? pool_owner_->graph_.pool() : c10::MempoolId_t{0, 0},
                           cudaStreamCaptureModeThreadLocal);
      try {
        results = body();
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
    return results;
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
