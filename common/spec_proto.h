// The one mapping between the spec core (common/spec/, plain C++) and the wire form
// trainyard.v1.JobSpec. It goes through the proto descriptors and spec::Fields() by
// name, so every field of every section maps both ways (tests/common/spec_proto_test.cc
// checks the two key sets are equal).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// The fields set in `proto` (proto3 `optional` presence) as given keys. Errors only
// for values no reader would accept either (a non-finite float), naming the field.
spec::Result<spec::SpecInput> InputFromProto(const v1::JobSpec& proto);

// The given keys of `input` as a proto; unset keys stay unset.
v1::JobSpec ProtoFromInput(const spec::SpecInput& input);

// Every field of a resolved spec, all set.
v1::JobSpec ProtoFromSpec(const spec::JobSpec& spec);

// INVALID_ARGUMENT, UNIMPLEMENTED or NOT_FOUND with error.ToString().
absl::Status SpecErrorToStatus(const spec::SpecError& error);

// What the controller and `trainyard preflight` do with a submitted spec: the preset
// and defaults, then every rule of the core (spec::ResolveAndValidate). Fleet checks
// (slots, devices) are the controller's, on top (server/admission_policy).
absl::StatusOr<v1::JobSpec> ResolveAndValidateProto(const v1::JobSpec& submitted);
// The same, as the core's struct.
absl::StatusOr<spec::JobSpec> ResolveAndValidateCore(const v1::JobSpec& submitted);

}  // namespace trainyard
