// Parsing a request ourselves, so that a malformed one gets a precise INVALID_ARGUMENT.
//
// gRPC's callback API answers a request that protobuf cannot parse with UNIMPLEMENTED
// and an empty message, and the commonest such request is a proto3 string field with
// invalid UTF-8 (protobuf refuses those at parse time). JobService therefore takes its
// requests as raw bytes (the generated WithRawCallbackMethod_* mix-ins) and parses them
// here; the wire format is unchanged, so every client still uses the typed stubs.
#pragma once

#include <string>
#include <string_view>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"

namespace trainyard {

// Parses `bytes` into `message`. A string field that is not UTF-8 is an
// INVALID_ARGUMENT naming it by path ("CancelJobRequest.reason",
// "SubmitJobRequest.spec.model.preset"); any other malformed input is an
// INVALID_ARGUMENT naming the message type.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* message);

// The path of the first string field, depth first, whose bytes are not UTF-8 in the
// serialized `descriptor` message `bytes`, or "" when there is none (or the bytes are
// not a message at all). Paths start at the message's own name.
std::string FirstNonUtf8Field(const google::protobuf::Descriptor& descriptor,
                              std::string_view bytes);

// Serializes `message` into `out` (gRPC's own protobuf serializer).
absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

}  // namespace trainyard
