#include "server/policy/device_validation.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard::request_validation {
namespace {

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(std::string(field) + ": " + std::string(what));
}

// A GPU's uuid or name: non-empty, UTF-8, no control characters, bounded.
std::string TextProblem(std::string_view value) {
  if (value.empty()) return "is empty";
  if (value.size() > kMaxGpuTextBytes) {
    return absl::StrCat("is ", value.size(), " bytes, more than the ", kMaxGpuTextBytes, " allowed: ", Quote(value));
  }
  if (!IsUtf8(value)) return absl::StrCat("is not UTF-8: ", Quote(value));
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return absl::StrCat("holds a control character: ", Quote(value));
  }
  return "";
}

// A version string: may be empty; printable ASCII, bounded.
std::string VersionProblem(std::string_view value) {
  if (value.size() > kMaxGpuTextBytes) {
    return absl::StrCat("is ", value.size(), " bytes, more than the ", kMaxGpuTextBytes, " allowed: ", Quote(value));
  }
  for (unsigned char c : value) {
    if (c < 0x20 || c > 0x7e) return absl::StrCat("is not printable ASCII: ", Quote(value));
  }
  return "";
}

bool NameChar(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

std::string NcclEnvProblem(std::string_view setting) {
  if (setting.size() > kMaxNcclEnvBytes) {
    return absl::StrCat("is ", setting.size(), " bytes, more than the ", kMaxNcclEnvBytes, " allowed: ", Quote(setting));
  }
  const size_t eq = setting.find('=');
  if (eq == std::string_view::npos) return absl::StrCat("is not NAME=VALUE: ", Quote(setting));
  std::string_view name = setting.substr(0, eq);
  std::string_view rest = name;
  if (rest.substr(0, 6) == "TORCH_") rest.remove_prefix(6);
  bool ok = rest.substr(0, 5) == "NCCL_" && rest.size() > 5;
  for (size_t i = 5; ok && i < rest.size(); ++i) ok = NameChar(rest[i]);
  if (!ok) {
    return absl::StrCat("names ", Quote(name), ", not an NCCL setting (the name must match (TORCH_)?NCCL_[A-Z0-9_]+)");
  }
  for (unsigned char c : setting.substr(eq + 1)) {
    if (c < 0x20 || c > 0x7e) return absl::StrCat("has a value that is not printable ASCII: ", Quote(setting));
  }
  return "";
}

absl::Status CheckDevices(const v1::Register& r) {
  if (r.gpus_size() > kMaxGpus) {
    return Invalid("Register.gpus", absl::StrCat("lists ", r.gpus_size(), " GPUs, more than the ", kMaxGpus, " allowed"));
  }
  std::set<int> indices;
  std::set<std::string> uuids;
  for (const auto& g : r.gpus()) {
    if (g.index() < 0 || g.index() >= kMaxGpus) {
      return Invalid("Register.gpus.index", absl::StrCat("must be in [0, ", kMaxGpus, "), got ", g.index()));
    }
    if (!indices.insert(g.index()).second) {
      return Invalid("Register.gpus.index", absl::StrCat("lists GPU ", g.index(), " twice"));
    }
    if (std::string p = TextProblem(g.uuid()); !p.empty()) {
      return Invalid("Register.gpus.uuid", absl::StrCat("of GPU ", g.index(), " ", p));
    }
    if (!uuids.insert(g.uuid()).second) {
      return Invalid("Register.gpus.uuid", absl::StrCat("lists ", Quote(g.uuid()), " twice"));
    }
    if (std::string p = TextProblem(g.name()); !p.empty()) {
      return Invalid("Register.gpus.name", absl::StrCat("of GPU ", g.index(), " ", p));
    }
    if (g.memory_bytes() < 0) {
      return Invalid("Register.gpus.memory_bytes", absl::StrCat("of GPU ", g.index(), " must be >= 0, got ", g.memory_bytes()));
    }
    if (g.nvlink_domain() < 0) {
      return Invalid("Register.gpus.nvlink_domain",
                     absl::StrCat("of GPU ", g.index(), " must be >= 0 (0: no NVLink peer), got ", g.nvlink_domain()));
    }
  }
  if (r.gpus_size() > 0 && r.device() != "cuda") {
    return Invalid("Register.device", absl::StrCat("must be \"cuda\" for a worker that offers GPUs, got ", Quote(r.device())));
  }
  if (r.device() == "cuda") {
    if (r.gpus_size() == 0) return Invalid("Register.gpus", "is empty, but Register.device is \"cuda\"");
    if (r.slots() > r.gpus_size()) {
      return Invalid("Register.slots", absl::StrCat("is ", r.slots(), ", more than the ", r.gpus_size(),
                                                    " GPUs this cuda worker offers (one rank per GPU)"));
    }
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"Register.gpu_driver_version", &r.gpu_driver_version()},
        {"Register.cuda_driver_version", &r.cuda_driver_version()},
        {"Register.capabilities.libtorch_version", &r.capabilities().libtorch_version()},
        {"Register.capabilities.cuda_version", &r.capabilities().cuda_version()}}) {
    if (std::string p = VersionProblem(*value); !p.empty()) return Invalid(field, p);
  }
  if (r.nccl_env_size() > kMaxNcclEnv) {
    return Invalid("Register.nccl_env",
                   absl::StrCat("lists ", r.nccl_env_size(), " settings, more than the ", kMaxNcclEnv, " allowed"));
  }
  for (const auto& e : r.nccl_env()) {
    if (std::string p = NcclEnvProblem(e); !p.empty()) return Invalid("Register.nccl_env", p);
  }
  return absl::OkStatus();
}

}  // namespace trainyard::request_validation
