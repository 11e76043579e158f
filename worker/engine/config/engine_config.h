// The engine's view of a job: the spec core's JobSpec itself (common/spec/), so a rank
// reads the same keys, presets, defaults and rules as the controller that admitted the
// job. The aliases keep the engine's names; there is no second schema.
#pragma once

#include <string>
#include <string_view>

#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"

namespace trainyard::engine {

using EngineConfig = spec::JobSpec;
using ModelConfig = spec::ModelSpec;
using TrainingConfig = spec::TrainingSpec;
using ParallelismConfig = spec::ParallelismSpec;
using CompileConfig = spec::CompileSpec;
using ActivationCheckpointConfig = spec::ActivationCheckpointSpec;
using ResourcesConfig = spec::ResourcesSpec;

// How a rank loads its job: the proto3 JSON of a JobSpec (what the worker writes for
// each rank; keys not given get the preset and defaults), resolved and checked by
// spec::ResolveAndValidate. `source_name` becomes the error's origin ("" for none).
// Whether this build and machine can run resources.device=cuda is asked separately
// (DevicePlacement::RequireUsable), before any rank starts.
spec::Result<EngineConfig> LoadEngineConfigJson(std::string_view json_text, std::string_view source_name);

// The same, throwing std::invalid_argument("config: <error>") for the engine's callers.
EngineConfig ParseEngineConfig(const std::string& json_text);
// A JSON (or TOML) job file, at most 1 MiB; errors name the file.
EngineConfig LoadEngineConfigFile(const std::string& path);

// The `tiny` preset as the engine's tests run it: 10 steps, lr 3e-3, warmup 2.
EngineConfig TinyEngineConfig();

}  // namespace trainyard::engine
