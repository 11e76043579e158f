#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

// proto3 JSON with .proto field names preserved (README.md: machine-readable output).
// One line, no trailing newline.
std::string ToJsonLine(const google::protobuf::Message& message);

// Parses proto3 JSON (either field-name style) into `message`; unknown fields are errors.
absl::Status FromJson(const std::string& json, google::protobuf::Message* message);

}  // namespace trainyard
