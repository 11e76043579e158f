#include "server/service/wire_codec.h"
#include "common/base/text.h"

#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <vector>

#include "common/spec/rules.h"

namespace trainyard {
namespace {

namespace pb = google::protobuf;

// Nested messages deeper than this are not searched (protobuf's own default recursion
// limit is 100; our messages nest at most four levels).
constexpr int kMaxDepth = 32;

std::string Find(const pb::Descriptor& descriptor, std::string_view bytes,
                 const std::string& path, int depth) {
  pb::UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return "";
  for (int i = 0; i < fields.field_count(); ++i) {
    const pb::UnknownField& field = fields.field(i);
    if (field.type() != pb::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const pb::FieldDescriptor* fd = descriptor.FindFieldByNumber(field.number());
    if (fd == nullptr) continue;
    const std::string here = path + "." + fd->name();
    if (fd->type() == pb::FieldDescriptor::TYPE_STRING) {
      if (!IsUtf8(field.length_delimited())) return here;
    } else if (fd->type() == pb::FieldDescriptor::TYPE_MESSAGE && depth < kMaxDepth) {
      std::string inner = Find(*fd->message_type(), field.length_delimited(), here, depth + 1);
      if (!inner.empty()) return inner;
    }
  }
  return "";
}

}  // namespace

std::string FirstNonUtf8Field(const pb::Descriptor& descriptor, std::string_view bytes) {
  return Find(descriptor, bytes, descriptor.name(), 0);
}

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, pb::Message* message) {
  {
    grpc::ByteBuffer view(bytes);  // shares the slices (reference counts), no copy
    grpc::ProtoBufferReader reader(&view);
    if (reader.status().ok() && message->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  }
  // Only a malformed request pays for a flat copy, to find the field to name.
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) {
    return absl::InvalidArgumentError("the request's bytes could not be read");
  }
  std::string flat;
  flat.reserve(bytes.Length());
  for (const grpc::Slice& s : slices) flat.append(reinterpret_cast<const char*>(s.begin()), s.size());
  const std::string field = FirstNonUtf8Field(*message->GetDescriptor(), flat);
  if (!field.empty()) {
    return absl::InvalidArgumentError(field + " is not valid UTF-8 (proto3 strings must be)");
  }
  return absl::InvalidArgumentError("the request is not a valid " + message->GetTypeName() +
                                    " message");
}

absl::Status SerializeResponse(const pb::Message& message, grpc::ByteBuffer* out) {
  out->Clear();  // gRPC's writer fills only an empty buffer (a watch reuses one)
  bool own = false;
  grpc::Status s = grpc::SerializationTraits<pb::Message>::Serialize(message, out, &own);
  if (!s.ok()) return absl::InternalError("could not serialize the " + message.GetTypeName() + " response");
  return absl::OkStatus();
}

}  // namespace trainyard
