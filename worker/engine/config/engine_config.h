// The engine's view of a job: the spec core's JobSpec itself (common/spec/), so a rank
// reads the same keys, presets, defaults and rules as the controller that admitted the
// job, and trainyard-train and trainyard-bench read job files the same way. The aliases
// keep the engine's names; there is no second schema. No torch; without toml++ (an
// accelerator box with only LibTorch) job files must be JSON.
#pragma once

#include <string>
#include <string_view>
#include <vector>

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

// For trainyard-train: reads a job file (TOML, or the proto3 JSON of a JobSpec for
// `.json` files and text starting with '{'), applies `overrides` ("section.key=value",
// later wins), then the preset and defaults, and checks every rule. Throws
// std::invalid_argument with the place and the field ("job.toml:3:1: unknown key
// model.dimm (did you mean model.dim?)", "--set training.steps: expected integer, got
// string").
EngineConfig LoadLocalJob(const std::string& path, const std::vector<std::string>& overrides);

// Same, starting from an empty job that names only `preset` (the benchmark's input).
EngineConfig PresetJob(const std::string& preset, const std::vector<std::string>& overrides);

// Checks a spec the runner changed after loading it (the preflight's 3 steps, --shrink,
// the benchmark's --nproc); throws as LoadLocalJob.
void RequireValid(const EngineConfig& spec);

}  // namespace trainyard::engine
