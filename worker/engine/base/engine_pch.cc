// The base target's one translation unit. CMake builds a precompiled header only for a
// target with sources; this one makes engine_pch.h, which every torch target of the
// engine (and its tests and benchmarks) reuses.
#include "worker/engine/base/engine_pch.h"
