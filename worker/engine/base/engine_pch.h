// Precompiled header shared by every engine translation unit (and reused by the
// rank binary and the engine tests): torch/torch.h alone costs ~20 s to parse.
#pragma once

#include <torch/torch.h>

#include "worker/engine/base/torch_compat.h"
