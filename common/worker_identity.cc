#include "common/worker_identity.h"

#include "common/spec/spec_error.h"

namespace trainyard {
namespace {

std::string PrintableProblem(std::string_view value, std::size_t max_bytes, bool allow_empty) {
  if (value.empty()) return allow_empty ? "" : "is empty";
  if (value.size() > max_bytes) {
    return "is " + std::to_string(value.size()) + " bytes, more than the " + std::to_string(max_bytes) +
           " allowed: " + Quote(value);
  }
  for (unsigned char c : value) {
    if (c == ' ') return "holds a space: " + Quote(value);
    if (c < 0x21 || c > 0x7e) return "holds a byte that is not printable ASCII: " + Quote(value);
  }
  return "";
}

}  // namespace

std::string WorkerNameProblem(std::string_view name) {
  if (std::string p = PrintableProblem(name, kMaxWorkerNameBytes, false); !p.empty()) return p;
  // Names reach file names (run folders, logs, artifact names a worker uploads): one
  // plain path component, never a way out of a folder.
  if (name.find('/') != std::string_view::npos || name.find('\\') != std::string_view::npos) {
    return "holds a path separator: " + Quote(name);
  }
  if (name == "." || name == "..") return "is a path component of its own: " + Quote(name);
  return "";
}

std::string WorkerAddressProblem(std::string_view address) {
  return PrintableProblem(address, kMaxWorkerAddressBytes, true);
}

}  // namespace trainyard
