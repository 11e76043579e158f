// WebApi's actions: cancel, checkpoint and resubmit a job; cordon, uncordon and drain a
// worker. Each parses its JSON body, builds the very request the gRPC JobService takes
// and hands it to JobActions, so the rules (request checks, roles, the audit row) are
// the JobService's.
#include <strings.h>

#include <initializer_list>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/base/text.h"
#include "server/web/web_api.h"
#include "server/web/web_json.h"

namespace trainyard::web {
namespace {

// The body as a JSON object holding only `allowed` keys; an empty body is {}.
absl::StatusOr<json> ParseBody(const std::string& body, std::initializer_list<const char*> allowed) {
  if (body.empty()) return json::object();
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::parse_error& e) {
    // nlohmann names the byte and what it expected; it quotes at most a few bytes.
    return absl::InvalidArgumentError(absl::StrCat("the body is not JSON: ", Clip(Quote(e.what()))));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("the body must be a JSON object, not ", parsed.type_name()));
  }
  for (const auto& [key, value] : parsed.items()) {
    bool known = false;
    for (const char* name : allowed) known = known || key == name;
    if (!known) {
      std::vector<std::string> names(allowed.begin(), allowed.end());
      return absl::InvalidArgumentError(absl::StrCat("body: unknown key '", Quote(key), "' (this action takes ",
                                                     names.empty() ? "no keys" : absl::StrJoin(names, ", "), ")"));
    }
  }
  return parsed;
}

absl::Status StringField(const json& body, const char* key, std::string* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("body.", key, ": expected a string, got ", it->type_name()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

json CheckpointJson(const v1::CheckpointRef& ref) {
  // Its path names a directory on a worker: left out, as in events.
  return {{"step", ref.step()}, {"attempt", ref.attempt()}, {"bytes", ref.bytes()}};
}

// Waits for an action that answers through a callback (a checkpoint, a preflight).
template <class T>
class Answer {
 public:
  std::function<void(absl::StatusOr<T>)> Callback() {
    return [state = state_](absl::StatusOr<T> result) {
      state->result = std::move(result);
      state->done.Notify();
    };
  }
  absl::StatusOr<T> Wait() {
    state_->done.WaitForNotification();
    return std::move(state_->result);
  }

 private:
  struct State {
    absl::Notification done;
    absl::StatusOr<T> result = absl::UnknownError("not answered");
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

WebResponse WebApi::CheckActionRequest(const WebRequest& request) const {
  if (request.body_too_large) {
    WebResponse r = ErrorResponse(
        absl::InvalidArgumentError(absl::StrCat("the request body is over the limit of ", kMaxBodyBytes, " bytes")));
    r.status = 413;
    return r;
  }
  // application/json, so that a cross-site HTML form (which can send only
  // form-encoded or text/plain bodies) cannot reach an action, and a cross-site fetch
  // must ask first (a CORS preflight this server never grants).
  std::string_view type = request.content_type;
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
  if (type.size() != 16 || strncasecmp(type.data(), "application/json", 16) != 0) {
    WebResponse r = ErrorResponse(absl::InvalidArgumentError(
        absl::StrCat("Content-Type '", Quote(request.content_type), "': an action's body must be application/json")));
    r.status = 415;
    return r;
  }
  // Without tokens every caller is the admin "local": a browser's Origin must then be
  // this very server. With tokens, the bearer header (which no other site can send) is
  // the guard, and a reverse proxy may present another name.
  if (!authorizer_->enabled() && !request.origin.empty() && request.origin != absl::StrCat("http://", request.host)) {
    return ErrorResponse(absl::PermissionDeniedError(
        absl::StrCat("Origin '", Quote(request.origin), "' is not this server ('http://", Quote(request.host),
                     "'): with authorization off, actions are taken only from the controller's own page")));
  }
  return WebResponse{};
}

WebResponse WebApi::JobAction(const WebRequest& request, const Caller& caller, const std::string& id,
                              const std::string& action) const {
  if (action == "cancel") {
    auto body = ParseBody(request.body, {"reason"});
    v1::CancelJobRequest cancel;
    cancel.set_id(id);
    absl::Status s = body.status();
    if (s.ok()) s = StringField(*body, "reason", cancel.mutable_reason());
    if (!s.ok()) {
      actions_->RecordRefusal(caller, Via::kWeb, "cancel", id, s);
      return ErrorResponse(s);
    }
    if (!IsUtf8(cancel.reason())) cancel.set_reason(ToValidUtf8(cancel.reason()));  // nlohmann checked; belt
    auto job = actions_->Cancel(caller, Via::kWeb, cancel);
    if (!job.ok()) return ErrorResponse(job.status());
    return JsonResponse(200, {{"job", JobSummaryJson(*job)}});
  }
  if (action == "checkpoint") {
    auto body = ParseBody(request.body, {"timeout_s"});
    v1::CheckpointJobRequest checkpoint;
    checkpoint.set_job_id(id);
    absl::Status s = body.status();
    if (s.ok()) {
      if (auto it = body->find("timeout_s"); it != body->end() && !it->is_null()) {
        if (!it->is_number()) {
          s = absl::InvalidArgumentError(absl::StrCat("body.timeout_s: expected a number, got ", it->type_name()));
        } else {
          checkpoint.set_timeout_s(it->get<double>());  // the range is request_validation's
        }
      }
    }
    if (!s.ok()) {
      actions_->RecordRefusal(caller, Via::kWeb, "checkpoint", id, s);
      return ErrorResponse(s);
    }
    Answer<v1::CheckpointRef> answer;
    actions_->Checkpoint(caller, Via::kWeb, checkpoint, nullptr, answer.Callback());
    auto ref = answer.Wait();
    if (!ref.ok()) return ErrorResponse(ref.status());
    return JsonResponse(200, {{"checkpoint", CheckpointJson(*ref)}});
  }
  // resubmit
  auto body = ParseBody(request.body, {"set"});
  std::vector<std::string> sets;
  absl::Status s = body.status();
  if (s.ok()) {
    if (auto it = body->find("set"); it != body->end() && !it->is_null()) {
      if (!it->is_array()) {
        s = absl::InvalidArgumentError(absl::StrCat("body.set: expected an array of strings, got ", it->type_name()));
      } else if (it->size() > kMaxResubmitSets) {
        s = absl::InvalidArgumentError(
            absl::StrCat("body.set: ", it->size(), " edits, over the limit of ", kMaxResubmitSets));
      } else {
        for (size_t i = 0; i < it->size() && s.ok(); ++i) {
          if (!(*it)[i].is_string()) {
            s = absl::InvalidArgumentError(
                absl::StrCat("body.set[", i, "]: expected a string, got ", (*it)[i].type_name()));
          } else {
            sets.push_back((*it)[i].get<std::string>());
          }
        }
      }
    }
  }
  if (!s.ok()) {
    actions_->RecordRefusal(caller, Via::kWeb, "resubmit", id, s);
    return ErrorResponse(s);
  }
  Answer<v1::Job> answer;
  actions_->Resubmit(caller, Via::kWeb, id, sets, nullptr, answer.Callback());
  auto job = answer.Wait();
  if (!job.ok()) return ErrorResponse(job.status());
  return JsonResponse(201, {{"job", JobSummaryJson(*job)}});
}

WebResponse WebApi::SweepAction(const WebRequest& request, const Caller& caller, const std::string& id,
                                const std::string& action) const {
  // The only sweep action is cancel (IsActionRoute); `action` names its audit row.
  const std::string audited = absl::StrCat(action, "_sweep");
  auto body = ParseBody(request.body, {"reason"});
  v1::CancelSweepRequest cancel;
  cancel.set_id(id);
  absl::Status s = CheckSweepId(id);
  if (s.ok()) s = body.status();
  if (s.ok()) s = StringField(*body, "reason", cancel.mutable_reason());
  if (!s.ok()) {
    actions_->RecordRefusal(caller, Via::kWeb, audited.c_str(), id, s);
    return ErrorResponse(s);
  }
  if (!IsUtf8(cancel.reason())) cancel.set_reason(ToValidUtf8(cancel.reason()));  // as a job's cancel
  auto view = actions_->CancelSweep(caller, Via::kWeb, cancel);
  if (!view.ok()) return ErrorResponse(view.status());
  return ProtoJsonResponse(200, *view);
}

WebResponse WebApi::WorkerAction(const WebRequest& request, const Caller& caller, const std::string& name,
                                 const std::string& action) const {
  auto body = action == "uncordon" ? ParseBody(request.body, {}) : ParseBody(request.body, {"reason"});
  std::string reason;
  absl::Status s = body.status();
  if (s.ok()) s = StringField(*body, "reason", &reason);
  if (!s.ok()) {
    actions_->RecordRefusal(caller, Via::kWeb, action.c_str(), name, s);
    return ErrorResponse(s);
  }
  if (action == "drain") {
    v1::DrainWorkerRequest drain;
    drain.set_name(name);
    drain.set_reason(reason);
    auto drained = actions_->Drain(caller, Via::kWeb, drain);
    if (!drained.ok()) return ErrorResponse(drained.status());
    json ids = json::array();
    for (const auto& j : drained->job_ids()) ids.push_back(j);
    return JsonResponse(200, {{"worker", WorkerJson(drained->worker())}, {"job_ids", std::move(ids)}});
  }
  v1::CordonWorkerRequest cordon;
  cordon.set_name(name);
  cordon.set_cordon(action == "cordon");
  cordon.set_reason(reason);
  auto worker = actions_->Cordon(caller, Via::kWeb, cordon);
  if (!worker.ok()) return ErrorResponse(worker.status());
  return JsonResponse(200, {{"worker", WorkerJson(*worker)}});
}

}  // namespace trainyard::web
