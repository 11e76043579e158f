// What a user writes to ask for a sweep: `--sweep section.key=V1,V2,...` flags,
// `--max-concurrent N`, and a [sweep] table in a TOML job file:
//
//   [sweep]
//   max_concurrent = 2                # optional; --max-concurrent wins over it
//   training.lr = [1e-4, 3e-4, 1e-3]  # a dotted key: section.key = [values]
//   model.top_k = [2, 4]
//
// (`[sweep.training]` with `lr = [...]` is the same table in TOML.) Axes come in file
// order, then in flag order; sweep.h says what the order of points and names follow.
//
// Everything is checked before any value is typed or any point is built: the syntax,
// each key (known, a leaf, sweepable, swept once, not also given by --set), the
// number of points against the limit. Pure apart from LoadSweepJobFile's read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"
#include "common/spec/sweep.h"

namespace trainyard::spec {

// The command line's part of a sweep.
struct SweepFlags {
  // "section.key=V1,V2,...": each value is read as --set reads one (a TOML scalar, or
  // else the text as a string); commas inside a quoted TOML string ("a,b") do not split.
  // An empty value ("1e-4,,3e-4"; use "" for an empty string) is an error.
  std::vector<std::string> sweeps;
  // --max-concurrent N: at least 1; wins over the table's max_concurrent.
  std::optional<std::int64_t> max_concurrent;
};

// A job file with its sweep.
struct SweepJob {
  // The job's given keys: the file's, without its [sweep] table, then --set's.
  SpecInput base;
  // No axes: the file and flags ask for no sweep, and `base` is an ordinary job.
  Sweep sweep;
};

// Reads a job file (TOML or JSON, as ParseJobText; only TOML has a [sweep] table),
// applies `overrides` (--set), then the [sweep] table and `flags`. Errors: the file's
// and --set's first, as ParseJobText's; then the sweep's, naming where (file:line:col
// of the key, or the flag) and the key. Refused besides the checks of sweep.h: a key
// both swept and --set, --max-concurrent or a max_concurrent with nothing swept, a
// [sweep] table that sweeps no key, more than `max_points` points (checked from the
// number of values, before any is read). Call ExpandSweep on the result for the points.
Result<SweepJob> ParseSweepJobText(std::string_view text, std::string_view source_name,
                                   const std::vector<std::string>& overrides, const SweepFlags& flags,
                                   std::size_t max_points = kDefaultMaxSweepPoints);

// ReadJobFile, then ParseSweepJobText with the path as the source name.
Result<SweepJob> LoadSweepJobFile(const std::string& path, const std::vector<std::string>& overrides,
                                  const SweepFlags& flags, std::size_t max_points = kDefaultMaxSweepPoints);

}  // namespace trainyard::spec
