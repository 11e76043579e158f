// --set section.key=value, the command-line override of one job-file key.
#pragma once

#include <optional>
#include <string_view>

#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// Parses "section.key=value" and sets the key in `input` (later overrides win). The
// value is read as a TOML scalar (20, 1e-3, false, "softmax"; with JSON's literal
// syntax on a build without toml++); text that is not one scalar is a string, and a
// string field takes any unquoted value literally (--set job.name=123 means "123").
// Errors carry no origin and start with "--set section.key: ..."; a value that is set
// gets the origin "--set section.key=value" for errors found after resolving.
std::optional<SpecError> ApplyOverride(std::string_view text, SpecInput& input);

// The value text of one override as ApplyOverride reads it: a TOML scalar when it is
// exactly one, else the text as a string; `literal` is the text (trimmed), so a string
// field takes it as typed. --sweep reads each of its values this way.
RawValue ParseOverrideValue(std::string_view value);

}  // namespace trainyard::spec
