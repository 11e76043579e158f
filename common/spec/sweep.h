// A sweep (job array): one job spec and a list of axes, each a job-file key with the
// values it takes; the points are the cartesian product of the axes, and each point is
// the base spec with the key of every axis set to that point's value. This file holds
// the axes, the count of points and their expansion into validated child specs; the
// readers of --sweep flags and of a job file's [sweep] table are in sweep_reader.h.
//
// Order: the first axis varies slowest (nested loops written in axis order, as
// Python's itertools.product). Point i's value on axis a is found by writing i in the
// mixed radix of the axis sizes, so a point's index names its values on its own.
//
// Names: child i of a job named N is named "N-i" (i from 0, not zero-padded), and its
// label lists its values, "lr=0.0001,top_k=2": the key alone where no other axis has a
// key of that name, else section.key. docs/sweeps.md has the syntax and the limits.
//
// Pure: no I/O, no clock. Values and functions are thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/schema.h"
#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// The most points a sweep may have unless the caller says otherwise (the controller
// may make it a flag). Every point is a stored job and a row of `get SWEEP`: a
// thousand is a large grid, and ten thousand is a mistake more often than a plan.
inline constexpr std::size_t kDefaultMaxSweepPoints = 1000;

// One swept key and its values, typed as the key's field, in the order given.
struct SweepAxis {
  const FieldInfo* field = nullptr;
  std::vector<FieldValue> values;
  // How messages name this axis: "--sweep training.lr" or "sweep.training.lr".
  std::string label;
  // Where it was given: "job.toml:9:1" for a [sweep] table, "" for a flag.
  std::string origin;

  // The origin of each point's assignment of this key: `origin`, or `label` for a
  // flag, so a point's validation error says where the value came from.
  const std::string& AssignmentOrigin() const { return origin.empty() ? label : origin; }
};

struct Sweep {
  std::vector<SweepAxis> axes;  // the first varies slowest
  int max_concurrent = 0;       // children running at once; 0: no limit
};

// The key `section.key` if it may be swept, else why not: an unknown section or key
// (with a suggestion), a section named without a key, job.name (children are named
// after it) or a sweep setting. Errors carry `origin` and start with `label`.
Result<const FieldInfo*> SweepableField(std::string_view section, std::string_view key, const std::string& label,
                                        const std::string& origin);

// Types `values` as `field` does for a job file or --set (integers in range, finite
// floats, an integer taken as a float, a string field taking an unquoted --sweep value
// literally) and appends the axis. Refused, with nothing appended: a key that may not
// be swept (as SweepableField), a key the sweep already has, no values, a value of the
// wrong kind, a value given twice (1e-4 and 0.0001 are the same value). Errors carry
// `origin` and start with `label`.
std::optional<SpecError> AddSweepAxis(Sweep& sweep, const FieldInfo& field, const std::vector<RawValue>& values,
                                      const std::string& label, const std::string& origin);

// Sets sweep.max_concurrent: at least 1 and a 32-bit integer.
std::optional<SpecError> SetSweepMaxConcurrent(Sweep& sweep, std::int64_t value, const std::string& label,
                                               const std::string& origin);

// The size of one axis before its values are typed, for CountSweepPoints.
struct SweepAxisSize {
  std::string path;  // "training.lr"
  std::size_t values = 0;
};

// The number of points (the product of the sizes), computed with overflow checks
// before anything is expanded. Error (rule "limit") past `max_points`, naming the
// total (or "more than 2^64 - 1") and each axis's size; no axis is an error too.
Result<std::size_t> CountSweepPoints(const std::vector<SweepAxisSize>& axes, std::size_t max_points);
Result<std::size_t> CountSweepPoints(const Sweep& sweep, std::size_t max_points);

// One axis as a controller receives it: the key and its values, each written as a
// TOML scalar (ToText's form: 0.0001, 2, true, "softmax").
struct SweepAxisText {
  std::string key;  // "training.lr"
  std::vector<std::string> values;
};

// A value as SweepAxisText carries it: a TOML scalar that ParseOverrideValue reads back
// as the same value (ToText's form, but a string keeps its UTF-8 as is and escapes
// only quotes, backslashes and control characters, as TOML's basic strings do).
std::string SweepValueText(const FieldValue& value);

// The sweep a controller was sent: each key checked as SweepableField does, the count
// checked against `max_points` before any value is read, each value read as --set
// reads one (ParseOverrideValue) and typed by AddSweepAxis; max_concurrent 0 is no
// limit. Messages name the axis as "axis training.lr" (or "axis 2" for a key that is
// not one); an empty value, a key without a section and no axes are refused too.
Result<Sweep> SweepFromText(const std::vector<SweepAxisText>& axes, std::int64_t max_concurrent,
                            std::size_t max_points = kDefaultMaxSweepPoints);

struct SweepPoint {
  std::size_t index = 0;
  std::string name;   // the child's job.name: "<job.name>-<index>"
  std::string label;  // "lr=0.0001,top_k=2"
  std::vector<FieldValue> values;  // one per axis, in axis order
  // The child as submitted: the base's given keys, its job.name and its values (keys
  // not given stay for the controller's preset and defaults, as for any job).
  SpecInput input;
  JobSpec spec;  // `input` resolved (preset, defaults) and validated
};

// Every point of `sweep` over `base` (the job's given keys), in order, each resolved and
// validated with the spec core's rules (ResolveAndValidate); all or nothing. Refused
// before any point is built: no axis, more than `max_points` points, a job.name too
// long for its children's names. Then every point is validated, and the first that
// fails is reported as
//   <origin>: sweep point 3 of 6 (lr=0.001,top_k=16): <the rule's message> (and 1 more point fails)
// with the origin of the offending value (the axis's, or the base key's).
Result<std::vector<SweepPoint>> ExpandSweep(const SpecInput& base, const Sweep& sweep,
                                            std::size_t max_points = kDefaultMaxSweepPoints);

}  // namespace trainyard::spec
