// Compat shim for the TorchScript CPU fuser switch. These functions are exported by
// libtorch_cpu in 1.13 and 2.x, but their header
// (torch/csrc/jit/codegen/fuser/interface.h) is not in Debian's libtorch-dev. Repeating
// the declaration is harmless where the header does exist.
#pragma once

#include <torch/csrc/Export.h>

namespace torch {
namespace jit {
TORCH_API bool canFuseOnCPU();
TORCH_API void overrideCanFuseOnCPU(bool value);
}  // namespace jit
}  // namespace torch
