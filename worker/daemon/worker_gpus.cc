#include "worker/daemon/worker_gpus.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/text.h"

namespace trainyard {

namespace {

// The controller refuses a Register with a NAME=VALUE over 1024 bytes or more than 64
// of them (server/policy/device_validation.h): refused here at start instead.
constexpr size_t kMaxNcclSettingBytes = 1024;

bool NcclName(absl::string_view name) {
  if (absl::StartsWith(name, "TORCH_")) name.remove_prefix(6);
  if (!absl::StartsWith(name, "NCCL_") || name.size() == 5) return false;
  for (char c : name.substr(5)) {
    if (!(absl::ascii_isupper(c) || absl::ascii_isdigit(c) || c == '_')) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<WorkerGpus> SetUpGpus(const std::string &selection, const std::string &nvml_library) {
  WorkerGpus out;
  const std::string chosen(absl::StripAsciiWhitespace(selection));
  if (chosen == "none") return out;  // NVML is not loaded
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> nvml = NvmlLibrary::Open(nvml_library);
  if (!nvml.ok()) {
    if (nvml.status().code() == absl::StatusCode::kNotFound && chosen == "all") {
      out.notes.push_back(absl::StrCat(nvml.status().message(), "; running as a CPU worker"));
      return out;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--gpus ", Quoted(selection), ": ", nvml.status().message(),
        nvml.status().code() == absl::StatusCode::kNotFound ? "" : " (--gpus none runs this worker without GPUs)"));
  }
  absl::StatusOr<GpuInventory> inventory = DiscoverGpus(**nvml);
  if (!inventory.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("GPU discovery through ", nvml_library, " failed: ",
                                                      inventory.status().message(),
                                                      " (--gpus none runs this worker without GPUs)"));
  }
  for (const auto &[index, why] : inventory->unusable) {
    out.notes.push_back(absl::StrCat("GPU ", index, " is not offered: ", why));
  }
  absl::StatusOr<std::vector<v1::GpuDevice>> offered = ParseGpuSelection(selection, *inventory);
  if (!offered.ok()) return offered.status();
  if (offered->empty()) {
    out.notes.push_back(absl::StrCat("NVML (", nvml_library, ") reports no usable GPUs; running as a CPU worker"));
    return out;  // NVML is closed: nothing to sample
  }
  out.nvml = std::move(*nvml);
  out.inventory = std::move(*inventory);
  out.offered = std::move(*offered);
  return out;
}

absl::StatusOr<std::pair<std::string, std::string>> ParseNcclEnvSetting(const std::string &setting) {
  const size_t eq = setting.find('=');
  const std::string name = setting.substr(0, eq);
  if (eq == std::string::npos || !NcclName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("--nccl-env ", Quoted(setting),
                                                   ": expected NAME=VALUE with NAME matching (TORCH_)?NCCL_[A-Z0-9_]+"));
  }
  std::string value = setting.substr(eq + 1);
  if (setting.size() > kMaxNcclSettingBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--nccl-env ", name, ": NAME=VALUE is longer than ",
                                                   kMaxNcclSettingBytes, " bytes"));
  }
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nccl-env ", name, ": the value ", Quoted(value), " has a control or non-ASCII byte"));
    }
  }
  return std::make_pair(name, std::move(value));
}

absl::StatusOr<int> ResolveSlots(std::optional<int> given, size_t offered_gpus) {
  if (offered_gpus == 0) {
    if (!given) return absl::InvalidArgumentError("--slots is required on a worker that offers no GPUs");
    return *given;
  }
  if (!given) return static_cast<int>(offered_gpus);
  if (*given > static_cast<int>(offered_gpus)) {
    return absl::InvalidArgumentError(absl::StrCat("--slots ", *given, " exceeds the ", offered_gpus,
                                                   " GPU(s) this worker offers (one rank per GPU)"));
  }
  return *given;
}

}  // namespace trainyard
