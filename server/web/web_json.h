// What the web API answers, as JSON: the responses (JSON bodies, errors with their HTTP
// status), the job, artifact and fleet views (nlohmann::json, milliseconds and numbers
// a page plots as they come), and events as the proto3 JSON of trainyard.v1.Event, the
// one dialect the CLI and trainyard-train print too (common/events/proto_json.h,
// docs/web.md). Pure functions; thread-safe.
#pragma once

#include <google/protobuf/message.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "server/web/web_http.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::web {

using json = nlohmann::json;

// `body` as an application/json response, never cached; invalid UTF-8 is replaced.
WebResponse JsonResponse(int status, const json& body);
// `message` as its proto3 JSON (ToJsonLine: .proto names, every primitive field, 64-bit
// integers as strings), with the headers of JsonResponse; invalid UTF-8 is replaced.
WebResponse ProtoJsonResponse(int status, const google::protobuf::Message& message);
// {"error": message} with HttpStatusOf(status); a 401 carries WWW-Authenticate: Bearer.
WebResponse ErrorResponse(const absl::Status& status);
// 404 naming `path` (quoted, bounded).
WebResponse NotFoundResponse(std::string_view path);

// A job as the jobs list shows it: identity, state and reasons, attempt, restarts
// (attempts after the first that no preemption started) and preemptions, shape, times
// (ms since the epoch, null when unset), the last checkpoint, and for a child of a sweep
// its sweep_id, sweep_index and sweep_label ("" and 0 for a job submitted alone).
json JobSummaryJson(const v1::Job& job);
// The summary plus the normalised spec, placement (each rank's worker, and on a CUDA
// job its gpu index and gpu_uuid, null on CPU), the workers' NCCL settings
// (worker_env: [{worker, nccl_env}]), failure causes, reserved workers, preempt_times_ms
// and share (ShareJson; null when the job carries none).
json JobDetailJson(const v1::Job& job);
// The owner's quota and fair-share standing (trainyard.v1.ShareInfo), every field by its
// .proto name: limits 0 mean none, usage_slot_seconds is decayed, queue_position 0 when
// the job is not PENDING.
json ShareJson(const v1::ShareInfo& share);
// A worker as the fleet page shows it: name, slots, link, address, device, host memory,
// capabilities (null when it sent none), driver versions, NCCL settings, free_gpus and
// unhealthy_gpus, and its gpus in index order, each with its newest sample joined in
// ("sample": null when none came; a reading NVML does not report is null), "free"
// and "healthy" (false when the controller took it out of service or its sample says
// so) with "unhealthy_reason"; cordoned and cordon_reason.
json WorkerJson(const v1::WorkerInfo& worker);
// A complete artifact's index entry.
json ArtifactJson(const v1::ArtifactInfo& artifact);

// The payload's name: its oneof member's .proto field name, which is also its key in
// the event's JSON and a value of ?kinds= ("none" when unset).
std::string EventKindName(const v1::Event& event);
// Every payload name of trainyard.v1.Event, in field order (from its descriptor).
const std::vector<std::string>& EventKinds();
// The event's proto3 JSON (proto_json's ToJsonLine: .proto names, every field), with
// what names a file on a machine blanked: an artifact's uri, a checkpoint's path, the
// paths of the checkpoints a prune removed.
std::string EventJsonLine(const v1::Event& event);
// 200 with {"events": [the lines, as they are], ...envelope's members}; `envelope` is a
// non-empty object.
WebResponse EventsPageResponse(const std::vector<std::string>& event_lines, const json& envelope);

}  // namespace trainyard::web
