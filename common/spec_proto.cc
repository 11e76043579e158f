#include "common/spec_proto.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdlib>
#include <string>

#include "common/spec/presets.h"
#include "common/spec/schema.h"

namespace trainyard {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The scalar field section.key of `proto`'s section message. Both key sets are equal
// (tested), so a miss is a programming error.
std::pair<Message*, const FieldDescriptor*> Locate(v1::JobSpec& proto, const spec::FieldInfo& f) {
  const FieldDescriptor* section = v1::JobSpec::descriptor()->FindFieldByName(f.section);
  if (section == nullptr) std::abort();
  Message* msg = proto.GetReflection()->MutableMessage(&proto, section);
  const FieldDescriptor* field = msg->GetDescriptor()->FindFieldByName(f.key);
  if (field == nullptr) std::abort();
  return {msg, field};
}

void SetProto(v1::JobSpec& proto, const spec::FieldInfo& f, const spec::FieldValue& value) {
  auto [msg, field] = Locate(proto, f);
  const Reflection* refl = msg->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      refl->SetInt32(msg, field, std::get<int>(value));
      return;
    case FieldDescriptor::CPPTYPE_UINT64:
      refl->SetUInt64(msg, field, std::get<std::uint64_t>(value));
      return;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      refl->SetDouble(msg, field, std::get<double>(value));
      return;
    case FieldDescriptor::CPPTYPE_BOOL:
      refl->SetBool(msg, field, std::get<bool>(value));
      return;
    case FieldDescriptor::CPPTYPE_STRING:
      refl->SetString(msg, field, std::get<std::string>(value));
      return;
    default:
      std::abort();  // spec.proto sections hold only these scalar kinds (tested)
  }
}

}  // namespace

spec::Result<spec::SpecInput> InputFromProto(const v1::JobSpec& proto) {
  // In the spec core's key order, as every reader reports the first bad value.
  spec::SpecInput input;
  for (const spec::FieldInfo& info : spec::Fields()) {
    const FieldDescriptor* section_field = v1::JobSpec::descriptor()->FindFieldByName(info.section);
    if (section_field == nullptr) std::abort();  // both key sets are equal (tested)
    if (!proto.GetReflection()->HasField(proto, section_field)) continue;
    const Message& section = proto.GetReflection()->GetMessage(proto, section_field);
    const Reflection* refl = section.GetReflection();
    const FieldDescriptor* f = section.GetDescriptor()->FindFieldByName(info.key);
    if (f == nullptr) std::abort();
    if (!refl->HasField(section, f)) continue;
    spec::FieldValue value;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        value = static_cast<int>(refl->GetInt32(section, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        value = static_cast<std::uint64_t>(refl->GetUInt64(section, f));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        value = refl->GetDouble(section, f);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        value = refl->GetBool(section, f);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        value = refl->GetString(section, f);
        break;
      default:
        std::abort();
    }
    if (auto e = input.SetTyped(info.section, info.key, value, "")) return *e;
  }
  return input;
}

v1::JobSpec ProtoFromInput(const spec::SpecInput& input) {
  v1::JobSpec proto;
  for (const spec::Assignment& a : input.assignments()) SetProto(proto, *a.field, a.value);
  return proto;
}

v1::JobSpec ProtoFromSpec(const spec::JobSpec& s) {
  v1::JobSpec proto;
  for (const spec::FieldInfo& f : spec::Fields()) SetProto(proto, f, spec::GetField(s, f.section, f.key));
  return proto;
}

absl::Status SpecErrorToStatus(const spec::SpecError& error) {
  switch (error.kind) {
    case spec::SpecError::Kind::kUnimplemented:
      return absl::UnimplementedError(error.ToString());
    case spec::SpecError::Kind::kNotFound:
      return absl::NotFoundError(error.ToString());
    case spec::SpecError::Kind::kInvalid:
      break;
  }
  return absl::InvalidArgumentError(error.ToString());
}

absl::StatusOr<spec::JobSpec> ResolveAndValidateCore(const v1::JobSpec& submitted) {
  spec::Result<spec::SpecInput> input = InputFromProto(submitted);
  if (!input.ok()) return SpecErrorToStatus(input.error());
  spec::Result<spec::JobSpec> resolved = spec::ResolveAndValidate(input.value());
  if (!resolved.ok()) return SpecErrorToStatus(resolved.error());
  return resolved.value();
}

absl::StatusOr<v1::JobSpec> ResolveAndValidateProto(const v1::JobSpec& submitted) {
  absl::StatusOr<spec::JobSpec> core = ResolveAndValidateCore(submitted);
  if (!core.ok()) return core.status();
  return ProtoFromSpec(*core);
}

}  // namespace trainyard
