// Every rule a resolved JobSpec must satisfy before anything runs it: ranges (with
// NaN/inf refused), enumerations, the model's shape, the parallel layout, datasets, and
// settings that no part of this release implements. Pure: no I/O, no clock.
//
// Rules that depend on the fleet (world size against connected slots, which devices
// workers have) are the controller's (server/admission_policy); rules that depend on
// the build (a CUDA LibTorch, a bf16 path) are the engine's (DevicePlacement, and
// worker/engine/launch/engine_capabilities.h, which refuses what
// `trainyard-rank --capabilities` reports false). Everything else is
// here, once, so the controller never admits a job that every rank refuses.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"

namespace trainyard::spec {

// Allowed values of the enumerated keys.
const std::vector<std::string>& Architectures();       // trainyard, deepseek_v3, qwen3_moe
const std::vector<std::string>& ScoreFuncs();          // sigmoid, softmax
const std::vector<std::string>& Datasets();            // synthetic, text, tokens
const std::vector<std::string>& MixedPrecisions();     // fp32, bf16
const std::vector<std::string>& Backends();            // eager, jit, cudagraph
const std::vector<std::string>& RegionModes();         // per_layer, model
const std::vector<std::string>& SideEffectPolicies();  // error, fallback
const std::vector<std::string>& CheckpointModes();     // none, full, selective
const std::vector<std::string>& Devices();             // cpu, cuda
const std::vector<std::string>& BestMetrics();         // val_loss, train_loss (lower is better)
const std::vector<std::string>& PipelineSchedules();   // 1f1b, interleaved_1f1b

// Upper bounds shared with callers (a world larger than this is refused).
inline constexpr int kMaxWorldSize = 65536;
inline constexpr int kMaxLayers = 1024;  // model.n_layers
inline constexpr std::size_t kMaxNameLength = 128;
inline constexpr std::size_t kMaxPathLength = 4096;
// Entries of a comma-separated dataset_path (a longer list is a glob's job).
inline constexpr int kMaxDatasetEntries = 256;

// The first broken rule, in the order of the sections, or nullopt. Kind kInvalid, except
// for settings this release cannot run, which are kUnimplemented: parallelism.pp > 1 (no
// pipeline runtime yet; checked after every other rule, so an invalid value is named
// first) and parallelism.pp_schedule="zbv" (checked where the schedule is).
std::optional<SpecError> Validate(const JobSpec& spec);

}  // namespace trainyard::spec
