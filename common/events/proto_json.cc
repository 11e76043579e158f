#include "common/events/proto_json.h"

#include <google/protobuf/util/json_util.h>

namespace trainyard {

std::string ToJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = false;
  // Consumers read every field of an Event (rank 0, attempt 0) without knowing proto3
  // elides defaults.
  options.always_print_primitive_fields = true;
  std::string out;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  // Serialising a well-formed message cannot fail; a failure is a broken invariant.
  if (!status.ok()) {
    out = "{\"error\":\"json serialisation failed\"}";
  }
  return out;
}

absl::Status FromJson(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        std::string("invalid ") + message->GetTypeName() + " JSON: " +
        std::string(status.message()));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
