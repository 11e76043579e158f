#include "worker/engine/parallel/mesh/device_placement.h"

#include <stdexcept>

#include "worker/engine/base/torch_compat.h"

namespace trainyard::engine {

void DevicePlacement::RequireUsable(const ResourcesConfig& resources) {
  if (resources.device == "cpu") return;
  if (resources.device != "cuda") {
    throw std::invalid_argument("config: resources.device=\"" + resources.device + "\" must be \"cpu\" or \"cuda\"");
  }
  const std::string why = compat::CudaUnavailableReason();
  if (!why.empty()) throw std::invalid_argument("config: resources.device=cuda: " + why);
}

c10::Device DevicePlacement::ForLocalRank(const ResourcesConfig& resources, int local_rank) {
  RequireUsable(resources);
  if (resources.device == "cpu") return c10::Device(c10::DeviceType::CPU);
  if (local_rank < 0) throw std::invalid_argument("local rank " + std::to_string(local_rank) + " must be >= 0");
  const int count = compat::CudaDeviceCount();
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local_rank % count));
  compat::SetCurrentDevice(device);
  compat::DisableTf32();
  return device;
}

std::string DevicePlacement::Describe(const c10::Device& device) {
  if (!device.is_cuda()) return device.str();
  return device.str() + " (" + std::to_string(compat::CudaDeviceCount()) + " visible, TF32 " +
         (compat::Tf32Enabled() ? "on" : "off") + ")";
}

}  // namespace trainyard::engine
