#include "server/web/web_json.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"
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

WebResponse ProtoJsonResponse(int status, const google::protobuf::Message& message) {
  WebResponse r = JsonResponse(status, json::object());
  r.body = ToJsonLine(message);
  // A string field set in memory may hold bytes a peer never sent as UTF-8 (a label
  // built from a value); the page must still get JSON it can parse.
  if (!IsUtf8(r.body)) r.body = ToValidUtf8(r.body);
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
      // Every attempt after the first is a restart (after a failure, or a resize), except
      // those after a preemption or a drain, which are no failure.
      {"restarts", std::max(0, job.attempt() - 1 - job.preemptions())},
      {"preemptions", job.preemptions()},
      {"max_restarts", spec.restart().max_restarts()},
      {"world_size", job.world_size()},
      {"dp", spec.parallelism().dp()},
      {"tp", spec.parallelism().tp()},
      {"ep", spec.parallelism().ep()},
      // FSDP degree; a spec stored before the key existed has none: 1, every DP rank a replica.
      {"dp_shard", std::max(1, spec.parallelism().dp_shard())},
      {"preset", spec.model().preset()},
      {"steps", spec.training().steps()},
      {"device", spec.resources().device()},
      {"last_seq", job.last_seq()},
      {"create_time_ms", Millis(job.create_time())},
      {"start_time_ms", Millis(job.start_time())},
      {"end_time_ms", Millis(job.end_time())},
      {"estimated_start_time_ms", Millis(job.estimated_start_time())},
      {"sweep_id", job.sweep_id()},
      {"sweep_index", job.sweep_index()},
      {"sweep_label", job.sweep_label()},
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

json ShareJson(const v1::ShareInfo& s) {
  return {{"owner", s.owner()},
          {"group", s.group()},
          {"owner_slots_in_use", s.owner_slots_in_use()},
          {"owner_slot_limit", s.owner_slot_limit()},
          {"owner_gpus_in_use", s.owner_gpus_in_use()},
          {"owner_gpu_limit", s.owner_gpu_limit()},
          {"group_slots_in_use", s.group_slots_in_use()},
          {"group_slot_limit", s.group_slot_limit()},
          {"group_gpus_in_use", s.group_gpus_in_use()},
          {"group_gpu_limit", s.group_gpu_limit()},
          {"weight", s.weight()},
          {"usage_slot_seconds", s.usage_slot_seconds()},
          {"fair_share", s.fair_share()},
          {"queue_position", s.queue_position()},
          {"queue_length", s.queue_length()}};
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
  for (const auto& r : job.placement().ranks()) {
    placement.push_back({{"rank", r.rank()},
                         {"worker", r.worker()},
                         {"gpu", r.has_gpu() ? json(r.gpu()) : json(nullptr)},
                         {"gpu_uuid", r.gpu_uuid()}});
  }
  j["placement"] = std::move(placement);
  json worker_env = json::array();
  for (const auto& e : job.placement().worker_env()) {
    worker_env.push_back({{"worker", e.worker()}, {"nccl_env", e.nccl_env()}});
  }
  j["worker_env"] = std::move(worker_env);
  j["failure_causes"] = job.failure_causes();
  j["reserved_workers"] = job.reserved_workers();
  json preempt_times = json::array();
  for (const auto& t : job.preempt_times()) preempt_times.push_back(Millis(t));
  j["preempt_times_ms"] = std::move(preempt_times);
  j["share"] = job.has_share() ? ShareJson(job.share()) : json(nullptr);
  return j;
}

namespace {

// A reading NVML does not report is -1 (device.proto): null for the page.
json Reading(double v) { return v < 0 ? json(nullptr) : json(v); }
json Reading(int64_t v) { return v < 0 ? json(nullptr) : json(v); }

json SampleJson(const v1::GpuSample& s) {
  return {{"utilization", Reading(s.utilization())},
          {"memory_used_bytes", Reading(s.memory_used_bytes())},
          {"power_watts", Reading(s.power_watts())},
          {"temperature_celsius", Reading(s.temperature_celsius())},
          {"ecc_uncorrected", Reading(s.ecc_uncorrected())},
          {"ecc_corrected", Reading(s.ecc_corrected())},
          {"xid_errors", Reading(s.xid_errors())},
          {"last_xid", s.last_xid()},
          {"healthy", s.healthy()},
          {"unhealthy_reason", s.unhealthy_reason()}};
}

}  // namespace

json WorkerJson(const v1::WorkerInfo& w) {
  std::map<int32_t, const v1::GpuSample*> samples;
  for (const v1::GpuSample& s : w.gpu_samples()) samples[s.index()] = &s;
  const std::set<int32_t> free(w.free_gpus().begin(), w.free_gpus().end());
  const std::set<int32_t> out_of_service(w.unhealthy_gpus().begin(), w.unhealthy_gpus().end());
  std::vector<const v1::GpuDevice*> devices;
  for (const v1::GpuDevice& g : w.gpus()) devices.push_back(&g);
  std::stable_sort(devices.begin(), devices.end(), [](auto* a, auto* b) { return a->index() < b->index(); });
  json gpus = json::array();
  for (const v1::GpuDevice* g : devices) {
    auto it = samples.find(g->index());
    const v1::GpuSample* s = it == samples.end() ? nullptr : it->second;
    const bool healthy = out_of_service.count(g->index()) == 0 && (s == nullptr || s->healthy());
    std::string reason = s != nullptr ? s->unhealthy_reason() : "";
    if (!healthy && reason.empty()) reason = "taken out of service by the controller";
    gpus.push_back({{"index", g->index()},
                    {"uuid", g->uuid()},
                    {"name", g->name()},
                    {"memory_bytes", g->memory_bytes()},
                    {"nvlink_domain", g->nvlink_domain()},
                    {"free", free.count(g->index()) > 0},
                    {"healthy", healthy},
                    {"unhealthy_reason", healthy ? std::string() : reason},
                    {"sample", s != nullptr ? SampleJson(*s) : json(nullptr)}});
  }
  json capabilities = nullptr;
  if (w.has_capabilities()) {
    const v1::EngineCapabilities& c = w.capabilities();
    capabilities = {{"libtorch_version", c.libtorch_version()},
                    {"cuda", c.cuda()},
                    {"cuda_version", c.cuda_version()},
                    {"nccl", c.nccl()},
                    {"bf16", c.bf16()},
                    {"cudagraph", c.cudagraph()}};
  }
  return {{"name", w.name()},
          {"slots", w.slots()},
          {"free_slots", w.free_slots()},
          {"connected", w.connected()},
          {"address", w.address()},
          {"device", w.device()},
          {"memory_bytes", w.memory_bytes()},
          {"gpus", std::move(gpus)},
          {"free_gpus", w.free_gpus()},
          {"unhealthy_gpus", w.unhealthy_gpus()},
          {"capabilities", std::move(capabilities)},
          {"gpu_driver_version", w.gpu_driver_version()},
          {"cuda_driver_version", w.cuda_driver_version()},
          {"nvlink_topology_known", w.nvlink_topology_known()},
          {"nccl_env", w.nccl_env()},
          {"cordoned", w.cordoned()},
          {"cordon_reason", w.cordon_reason()}};
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
  if (!e.has_artifact() && !e.has_checkpoint() && !e.has_checkpoints_pruned()) return ToJsonLine(e);
  v1::Event shown = e;
  if (shown.has_artifact()) shown.mutable_artifact()->clear_uri();
  if (shown.has_checkpoint()) shown.mutable_checkpoint()->clear_path();
  if (shown.has_checkpoints_pruned()) {
    for (v1::CheckpointRef& r : *shown.mutable_checkpoints_pruned()->mutable_removed()) r.clear_path();
  }
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
  return {{"name", a.name()},       {"kind", a.kind()},
          {"attempt", a.attempt()}, {"rank", a.rank()},
          {"worker", a.worker()},   {"size_bytes", a.size_bytes()},
          {"sha256", a.sha256()},   {"create_time_ms", Millis(a.create_time())}};
}

}  // namespace trainyard::web
