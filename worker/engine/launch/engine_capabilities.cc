#include "worker/engine/launch/engine_capabilities.h"

#include <stdexcept>

#include "common/events/proto_json.h"
#include "worker/engine/base/torch_compat.h"

namespace trainyard::engine {

v1::EngineCapabilities BuildCapabilities() {
  v1::EngineCapabilities caps;
  caps.set_libtorch_version(compat::TorchVersionNumber());
  // cuda: resources.device=cuda runs, which needs NCCL too (CudaUnavailableReason).
  caps.set_cuda(compat::kBuiltWithCuda && compat::kBuiltWithNccl);
  caps.set_cuda_version(compat::CudaBuildVersion());
  caps.set_nccl(compat::kBuiltWithNccl);
  caps.set_bf16(kHasBf16Path);
  caps.set_cudagraph(kCudaGraphProven);
  return caps;
}

std::string CapabilitiesJson() { return ToJsonLine(BuildCapabilities()); }

void RequireSupported(const EngineConfig& config) {
  if (config.compile.backend == "cudagraph" && !compat::kBuiltWithCuda) {
    throw std::invalid_argument(
        "config: compile.backend=cudagraph: this engine was built for CPU (CUDA graphs need a CUDA build of "
        "LibTorch); use compile.backend=jit");
  }
}

}  // namespace trainyard::engine
