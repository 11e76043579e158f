// Job specs as JSON: the proto3 JSON mapping of trainyard.v1.JobSpec with the .proto
// field names (what the worker writes for each rank, and what `trainyard-train` reads
// as a JSON job file).
#pragma once

#include <string>
#include <string_view>

#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// Parses a JSON object of sections. proto3 JSON spellings are accepted: 64-bit (and
// other) integers as decimal strings, floats as numbers or as "NaN"/"Infinity"/
// "-Infinity"/numeric strings, null for "not set". Unknown sections or keys and wrong
// types are errors naming the field; `source_name` is the error origin.
Result<SpecInput> ParseJson(std::string_view text, std::string_view source_name);

// Every field of a resolved spec, sections in schema order; seed is a decimal string,
// as protobuf's JSON printer writes uint64. ParseJson reads it back exactly.
std::string ToJson(const JobSpec& spec);

}  // namespace trainyard::spec
