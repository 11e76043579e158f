#include "common/events/rank_line.h"

#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard {
namespace {

namespace pb = google::protobuf;

// Replaces invalid UTF-8 in every string field of `m` (proto3 strings must be valid; a
// log message may carry a file name's raw bytes). Returns whether anything changed.
bool MakeStringsUtf8(pb::Message* m) {
  const pb::Reflection* r = m->GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  r->ListFields(*m, &fields);
  bool changed = false;
  for (const pb::FieldDescriptor* f : fields) {
    if (f->type() == pb::FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*m, f); ++i) {
          const std::string v = r->GetRepeatedString(*m, f, i);
          if (!IsUtf8(v)) {
            r->SetRepeatedString(m, f, i, ToValidUtf8(v));
            changed = true;
          }
        }
      } else if (const std::string v = r->GetString(*m, f); !IsUtf8(v)) {
        r->SetString(m, f, ToValidUtf8(v));
        changed = true;
      }
    } else if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*m, f); ++i) changed |= MakeStringsUtf8(r->MutableRepeatedMessage(m, f, i));
      } else {
        changed |= MakeStringsUtf8(r->MutableMessage(m, f));
      }
    }
  }
  return changed;
}

}  // namespace

std::string RankEventLine(const v1::Event& event) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = false;
  v1::Event copy = event;
  const v1::Event& valid = MakeStringsUtf8(&copy) ? copy : event;
  std::string out;
  // A message of this build with valid strings always serialises; a failure is a
  // broken invariant.
  if (!pb::util::MessageToJsonString(valid, &out, options).ok()) {
    out = R"({"log":{"level":"error","message":"event serialisation failed"}})";
  }
  return out;
}

bool LooksLikeEvent(std::string_view line) {
  const std::size_t first = line.find_first_not_of(" \t\r");
  return first != std::string_view::npos && line[first] == '{';
}

absl::StatusOr<v1::Event> ParseRankLine(std::string_view line) {
  v1::Event event;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(line.data(), line.size()), &event, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a trainyard.v1.Event: ", Quote(parsed.message().as_string())));
  }
  if (event.payload_case() == v1::Event::PAYLOAD_NOT_SET) {
    return absl::InvalidArgumentError("the event has no payload");
  }
  if (event.has_job_state()) {
    return absl::InvalidArgumentError("job_state is the controller's payload, not a rank's");
  }
  event.clear_job_id();
  event.clear_seq();
  event.clear_rank();
  event.clear_attempt();
  event.clear_source_seq();
  return event;
}

}  // namespace trainyard
