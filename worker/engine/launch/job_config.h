// Job files for the engine's standalone runner (trainyard-train, trainyard-bench): the
// spec core's reader, presets, defaults and rules (common/spec/), the same the
// controller applies to a submitted job. No torch and no protobuf; without toml++ (an
// accelerator box with only LibTorch) job files must be JSON.
#pragma once

#include <string>
#include <vector>

#include "common/spec/job_spec.h"

namespace trainyard::engine {

// Reads a job file (TOML, or the proto3 JSON of a JobSpec for `.json` files and text
// starting with '{'), applies `overrides` ("section.key=value", later wins), then the
// preset and defaults, and checks every rule. Throws std::invalid_argument with the
// place and the field ("job.toml:3:1: unknown key model.dimm (did you mean
// model.dim?)", "--set training.steps: expected integer, got string").
spec::JobSpec LoadLocalJob(const std::string& path, const std::vector<std::string>& overrides);

// Same, starting from an empty job that names only `preset` (the benchmark's input).
spec::JobSpec PresetJob(const std::string& preset, const std::vector<std::string>& overrides);

// Checks a spec the runner changed after loading it (the preflight's 3 steps, --shrink,
// the benchmark's --nproc); throws as LoadLocalJob.
void RequireValid(const spec::JobSpec& spec);

}  // namespace trainyard::engine
