// What the worker's rank binary can run: `<rank binary> --capabilities` prints one
// v1::EngineCapabilities as proto3 JSON (device.proto's field names) on stdout and exits
// 0. The worker runs it once at start and sends the result in Register; the controller
// admits CUDA, bf16 and cudagraph jobs by it.
//
// A probe that cannot run, exits non-zero, is killed, runs past its deadline (it is then
// killed with SIGKILL) or prints anything but that JSON is an error naming the cause;
// the worker logs it and registers with empty capabilities (cuda = false: no CUDA job is
// placed on it), and keeps running its CPU jobs. Unknown JSON fields are ignored, so a
// newer rank binary's extra capabilities do not break an older worker.
//
// Thread-safe (runs on the caller's thread plus three of its own while it lasts).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/process_launcher.h"
#include "trainyard/v1/device.pb.h"

namespace trainyard {

inline constexpr absl::Duration kCapabilitiesDeadline = absl::Seconds(30);

absl::StatusOr<v1::EngineCapabilities> ProbeEngineCapabilities(ProcessLauncher* launcher,
                                                                const std::string& rank_binary,
                                                                absl::Duration deadline, Clock* clock);

// Parses what the probe printed (surrounding whitespace ignored).
absl::StatusOr<v1::EngineCapabilities> ParseEngineCapabilities(const std::string& printed);

}  // namespace trainyard
