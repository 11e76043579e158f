// What `trainyard submit FILE --sweep ... --max-concurrent N` sends: the job file read
// with its --set, [sweep] table and flags (spec::LoadSweepJobFile), every point expanded
// and validated here first (spec::ExpandSweep) so a bad point is reported before any
// call, and the SubmitSweepRequest built from it. Pure apart from reading the file.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec/sweep.h"
#include "common/spec/sweep_reader.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// A job file read for submit: an ordinary job when `points` is 0, else a sweep whose
// every point passed the spec core's validation.
struct SweepSubmission {
  spec::SweepJob job;
  std::size_t points = 0;
};

// Reads `file` with `sets` (--set) and `flags` (--sweep, --max-concurrent) and, when it
// sweeps, expands every point. Errors as the spec core words them (INVALID_ARGUMENT,
// NOT_FOUND for a file that cannot be read), e.g.
//   --sweep training.lr: sweep point 2 of 6 (lr=-1,top_k=2): training.lr must be in (0, 10], got -1
absl::StatusOr<SweepSubmission> LoadSweepSubmission(const std::string& file, const std::vector<std::string>& sets,
                                                    const spec::SweepFlags& flags,
                                                    std::size_t max_points = spec::kDefaultMaxSweepPoints);

// The axes of `sweep` in order: the key ("training.lr") and each value as
// spec::SweepValueText writes it, which the controller reads back as the same value
// (not spec::ToText: for messages, it cuts a string after 100 bytes and writes other
// bytes as \xNN, which TOML does not read).
std::vector<v1::SweepAxis> WireAxes(const spec::Sweep& sweep);

// spec: the base's given keys (ProtoFromInput); axes: WireAxes; max_concurrent: the
// sweep's (0: no limit).
v1::SubmitSweepRequest BuildSubmitSweepRequest(const spec::SweepJob& job);

}  // namespace trainyard::cli
