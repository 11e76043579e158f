#include "server/web/web_json.h"

#include <algorithm>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/events/proto_json.h"
#include "common/spec/spec_error.h"

namespace trainyard::web {

WebResponse JsonResponse(int status, const json& body) {
  WebResponse r;
  r.status = status;
  r.content_type = "application/json; charset=utf-8";
  // Invalid UTF-8 (a job's name, say) is replaced rather than aborting the response.
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return r;
}

WebResponse ErrorResponse(const absl::Status& status) {
  WebResponse r = JsonResponse(HttpStatusOf(status), json{{"error", std::string(status.message())}});
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"trainyard\"");
  }
  return r;
}

WebResponse NotFoundResponse(std::string_view path) {
  return ErrorResponse(absl::NotFoundError(absl::StrCat("no such page or endpoint: '", Quote(path), "'")));
}

namespace {

// Milliseconds since the epoch, or null when unset.
json Millis(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return nullptr;
  return t.seconds() * 1000 + t.nanos() / 1000000;
}

}  // namespace

json JobSummaryJson(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  json j = {
      {"id", job.id()},
      {"name", spec.job().name()},
      {"owner", job.owner()},
      {"state", v1::Job::State_Name(job.state())},
      {"pending_reason", job.pending_reason()},
      {"failure_reason", job.failure_reason()},
      {"attempt", job.attempt()},
      // Every attempt after the first is a restart (after a failure, or a resize).
      {"restarts", std::max(0, job.attempt() - 1)},
      {"max_restarts", spec.restart().max_restarts()},
      {"world_size", job.world_size()},
      {"dp", spec.parallelism().dp()},
      {"tp", spec.parallelism().tp()},
      {"ep", spec.parallelism().ep()},
      {"preset", spec.model().preset()},
      {"steps", spec.training().steps()},
      {"device", spec.resources().device()},
      {"last_seq", job.last_seq()},
      {"create_time_ms", Millis(job.create_time())},
      {"start_time_ms", Millis(job.start_time())},
      {"end_time_ms", Millis(job.end_time())},
      {"estimated_start_time_ms", Millis(job.estimated_start_time())},
  };
  if (job.has_last_checkpoint()) {
    j["last_checkpoint"] = {{"step", job.last_checkpoint().step()},
                            {"attempt", job.last_checkpoint().attempt()},
                            {"bytes", job.last_checkpoint().bytes()}};
  } else {
    j["last_checkpoint"] = nullptr;
  }
  return j;
}

json JobDetailJson(const v1::Job& job) {
  json j = JobSummaryJson(job);
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (google::protobuf::util::MessageToJsonString(job.spec(), &spec_json, options).ok()) {
    j["spec"] = json::parse(spec_json, nullptr, /*allow_exceptions=*/false);
    // A discarded value would dump as "<discarded>", which is not JSON.
    if (j["spec"].is_discarded()) j["spec"] = nullptr;
  } else {
    j["spec"] = nullptr;
  }
  json placement = json::array();
  for (const auto& r : job.placement().ranks()) placement.push_back({{"rank", r.rank()}, {"worker", r.worker()}});
  j["placement"] = std::move(placement);
  j["failure_causes"] = job.failure_causes();
  j["reserved_workers"] = job.reserved_workers();
  return j;
}

// The oneof's case is its field's number.
std::string EventKindName(const v1::Event& e) {
  const google::protobuf::FieldDescriptor* field = v1::Event::descriptor()->FindFieldByNumber(e.payload_case());
  return field != nullptr ? field->name() : "none";
}
const std::vector<std::string>& EventKinds() {
  static const auto* kinds = [] {
    auto* out = new std::vector<std::string>;
    const google::protobuf::OneofDescriptor* payload = v1::Event::descriptor()->FindOneofByName("payload");
    for (int i = 0; i < payload->field_count(); ++i) out->push_back(payload->field(i)->name());
    return out;
  }();
  return *kinds;
}

std::string EventJsonLine(const v1::Event& e) {
  if (!e.has_artifact() && !e.has_checkpoint()) return ToJsonLine(e);
  v1::Event shown = e;
  if (shown.has_artifact()) shown.mutable_artifact()->clear_uri();
  if (shown.has_checkpoint()) shown.mutable_checkpoint()->clear_path();
  return ToJsonLine(shown);
}

WebResponse EventsPageResponse(const std::vector<std::string>& event_lines, const json& envelope) {
  WebResponse r = JsonResponse(200, envelope);
  std::string body = "{\"events\":[";
  for (size_t i = 0; i < event_lines.size(); ++i) {
    if (i > 0) body += ',';
    body += event_lines[i];
  }
  // The lines as they are: a page holds the very bytes proto_json prints.
  body += ']';
  // r.body is "{...}" of a non-empty object: its members follow the array.
  body += ',';
  body.append(r.body, 1, std::string::npos);
  r.body = std::move(body);
  return r;
}

json ArtifactJson(const v1::ArtifactInfo& a) {
  return {{"name", a.name()},       {"kind", a.kind()},         {"attempt", a.attempt()},
          {"rank", a.rank()},       {"worker", a.worker()},     {"size_bytes", a.size_bytes()},
          {"sha256", a.sha256()},   {"create_time_ms", Millis(a.create_time())}};
}

}  // namespace trainyard::web
