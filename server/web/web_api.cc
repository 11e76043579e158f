#include "server/web/web_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/spec/spec_error.h"
#include "server/policy/request_validation.h"
#include "server/web/web_assets.h"
#include "server/web/web_json.h"
#include "spdlog/spdlog.h"

namespace trainyard::web {
namespace {

using json = nlohmann::json;

// The static files hold no data, but the page must not be framed or run foreign code.
constexpr char kPageSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

}  // namespace

bool IsActionRoute(const std::vector<std::string>& segments) {
  if (segments.size() != 4 || segments[0] != "api") return false;
  const std::string& action = segments[3];
  if (segments[1] == "jobs") return action == "cancel" || action == "checkpoint" || action == "resubmit";
  if (segments[1] == "workers") return action == "cordon" || action == "uncordon" || action == "drain";
  if (segments[1] == "sweeps") return action == "cancel";
  return false;
}

absl::Status CheckSweepId(std::string_view id) { return request_validation::CheckSweepId("sweep id", id); }

WebApi::WebApi(JobManager* manager, JobStore* store, ArtifactStore* artifacts, const Authorizer* authorizer,
               JobActions* actions, EventHub* hub)
    : manager_(manager),
      store_(store),
      artifacts_(artifacts),
      authorizer_(authorizer),
      actions_(actions),
      hub_(hub),
      streams_(hub != nullptr ? std::make_unique<EventStreams>(store, hub) : nullptr) {}

void WebApi::Stop() {
  if (streams_) streams_->Stop();
}

namespace {

WebResponse MethodNotAllowed(const std::string& method, const char* allow, const char* why) {
  WebResponse r = ErrorResponse(absl::InvalidArgumentError(
      absl::StrCat("method ", Quote(method), " is not allowed here: ", why, " (", allow, " only)")));
  r.status = 405;
  r.headers.emplace_back("Allow", allow);
  return r;
}

}  // namespace

WebResponse WebApi::Handle(const WebRequest& request) const {
  if (request.method != "GET" && request.method != "POST") {
    return MethodNotAllowed(request.method, "GET", "the web UI reads with GET and acts with POST");
  }
  if (request.path.size() > kMaxPathBytes) {
    return ErrorResponse(absl::InvalidArgumentError(
        absl::StrCat("the path is ", request.path.size(), " bytes, over the limit of ", kMaxPathBytes)));
  }
  if (request.path.empty() || request.path[0] != '/') {
    return ErrorResponse(
        absl::InvalidArgumentError(absl::StrCat("the path '", Quote(request.path), "' is not absolute")));
  }
  // Segments are split before decoding, so an escaped '/' stays inside its segment.
  std::vector<std::string> segments;
  for (std::string_view raw : Split(std::string_view(request.path).substr(1), '/')) {
    std::string decoded;
    if (auto s = PercentDecode(raw, "a path segment", &decoded); !s.ok()) return ErrorResponse(s);
    segments.push_back(std::move(decoded));
  }
  // An action takes POST only, and nothing else takes POST.
  const bool action = IsActionRoute(segments);
  if (action && request.method != "POST") {
    return MethodNotAllowed(request.method, "POST", "an action changes something");
  }
  if (!action && request.method != "GET") {
    return MethodNotAllowed(request.method, "GET", "this route only reads");
  }
  auto query = SplitQuery(request.query);
  if (!query.ok()) return ErrorResponse(query.status());

  if (!segments.empty() && segments[0] == "api") return Api(request, segments, *query);

  // A static file. The page's routes live after '#', so every page is "/".
  std::string name = segments.size() == 1 ? segments[0] : "";
  if (name.empty() && segments.size() == 1) name = "index.html";
  const WebAsset* asset = segments.size() == 1 ? FindWebAsset(name) : nullptr;
  if (asset == nullptr) return NotFoundResponse(request.path);
  WebResponse r;
  r.content_type = std::string(asset->content_type);
  r.body = std::string(asset->data);
  // The binary is the only source of these files: revalidate, never serve a stale app.
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Content-Security-Policy", kPageSecurityPolicy);
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  return r;
}

WebResponse WebApi::Api(const WebRequest& request, const std::vector<std::string>& segments, const Query& query) const {
  // Without tokens every caller is an admin, so the only guard left against another
  // site's page reading this API through a name rebound to loopback is the name itself.
  if (!authorizer_->enabled() && !request.host.empty() && !HostIsAddress(request.host)) {
    return ErrorResponse(absl::PermissionDeniedError(
        absl::StrCat("Host '", Quote(request.host),
                     "' is not an IP address or localhost: with authorization off the web API answers only requests "
                     "addressed to an IP or localhost (a guard against DNS rebinding); use the address, or give the "
                     "controller a --token-file")));
  }
  std::vector<std::string_view> values(request.authorization.begin(), request.authorization.end());
  auto caller_or = authorizer_->AuthenticateValues(values);
  if (!caller_or.ok()) {
    // Same words as the gRPC API, but this is a header here, not metadata.
    std::string message(caller_or.status().message());
    for (auto [from, to] :
         {std::pair<std::string_view, std::string_view>{"authorization metadata entry", "Authorization header"},
          {"authorization metadata", "Authorization header"}}) {
      if (size_t at = message.find(from); at != std::string::npos) message.replace(at, from.size(), to);
    }
    return ErrorResponse(absl::UnauthenticatedError(message));
  }
  const Caller caller = std::move(*caller_or);
  const size_t n = segments.size();
  // A submitter sees only its own jobs.
  const std::string owner_filter = caller.role == Role::kSubmitter ? caller.owner : "";

  if (n == 2 && segments[1] == "me") {
    auto params = QueryParams(query, {});
    if (!params.ok()) return ErrorResponse(params.status());
    return JsonResponse(200,
                        {{"auth", authorizer_->enabled()}, {"role", RoleName(caller.role)}, {"owner", caller.owner}});
  }

  if (n == 2 && segments[1] == "fleet") return Fleet(query, caller, owner_filter);

  if (IsActionRoute(segments)) {
    if (actions_ == nullptr) return MethodNotAllowed(request.method, "GET", "this controller's web UI is read-only");
    if (auto params = QueryParams(query, {}); !params.ok()) return ErrorResponse(params.status());
    if (WebResponse r = CheckActionRequest(request); r.status != 200) return r;
    if (segments[1] == "jobs") return JobAction(request, caller, segments[2], segments[3]);
    if (segments[1] == "sweeps") return SweepAction(request, caller, segments[2], segments[3]);
    return WorkerAction(request, caller, segments[2], segments[3]);
  }

  if (n >= 2 && segments[1] == "sweeps") {
    if (actions_ == nullptr || n > 3) return NotFoundResponse(request.path);
    return Sweeps(query, caller, n == 3 ? &segments[2] : nullptr);
  }

  if (n < 2 || segments[1] != "jobs" || n > 5) return NotFoundResponse(request.path);

  if (n == 2) return Jobs(query, owner_filter);

  const std::string& id = segments[2];
  if (auto s = request_validation::CheckJobId("job id", id); !s.ok()) return ErrorResponse(s);
  auto job = manager_->Get(id);
  if (job.ok() && !Authorizer::CanSee(caller, job->owner())) {
    // Word for word what JobManager::Get says of a job that does not exist.
    job = absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  }
  if (!job.ok()) return ErrorResponse(job.status());

  if (n == 3) {
    auto params = QueryParams(query, {});
    if (!params.ok()) return ErrorResponse(params.status());
    return JsonResponse(200, JobDetailJson(*job));
  }

  if (segments[3] == "events" && n == 4) return Events(query, id, *job);
  if (segments[3] == "stream" && n == 4 && streams_ != nullptr) return Stream(request, query, id);
  if (segments[3] == "artifacts") return Artifacts(query, id, n == 5 ? &segments[4] : nullptr);
  return NotFoundResponse(request.path);
}

WebResponse WebApi::Fleet(const Query& query, const Caller& caller, const std::string& owner_filter) const {
  auto params = QueryParams(query, {});
  if (!params.ok()) return ErrorResponse(params.status());
  if (!Authorizer::CanSeeFleet(caller)) {
    return ErrorResponse(absl::PermissionDeniedError("this role cannot see the fleet"));
  }
  json workers = json::array();
  int64_t slots = 0, free_slots = 0, connected = 0, gpus = 0, free_gpus = 0, unhealthy_gpus = 0;
  std::map<std::string, json> jobs_on;  // worker -> visible running job ids
  const std::vector<v1::Job> jobs = manager_->List({}, std::numeric_limits<int>::max(), owner_filter);
  std::map<std::string, int> by_state;
  for (int s = v1::Job::State_MIN; s <= v1::Job::State_MAX; ++s) {
    if (s != v1::Job::STATE_UNSPECIFIED && v1::Job::State_IsValid(s)) {
      by_state[v1::Job::State_Name(static_cast<v1::Job::State>(s))] = 0;
    }
  }
  std::vector<const v1::Job*> pending;
  for (const v1::Job& job : jobs) {
    ++by_state[v1::Job::State_Name(job.state())];
    if (job.state() == v1::Job::PENDING) pending.push_back(&job);
    if (job.state() == v1::Job::RUNNING || job.state() == v1::Job::SCHEDULED) {
      std::set<std::string> seen;
      for (const auto& r : job.placement().ranks()) {
        if (seen.insert(r.worker()).second) jobs_on[r.worker()].push_back(job.id());
      }
    }
  }
  for (const auto& w : manager_->Workers()) {
    slots += w.slots();
    free_slots += w.free_slots();
    connected += w.connected() ? 1 : 0;
    json running = jobs_on.count(w.name()) ? jobs_on[w.name()] : json::array();
    json worker = WorkerJson(w);
    // The totals count what the page shows of each GPU (WorkerJson's free and healthy).
    for (const json& g : worker["gpus"]) {
      ++gpus;
      free_gpus += g["free"].get<bool>() ? 1 : 0;
      unhealthy_gpus += g["healthy"].get<bool>() ? 0 : 1;
    }
    worker["jobs"] = std::move(running);
    workers.push_back(std::move(worker));
  }
  // The scheduler's order of its last pass (priority, fair share, FIFO); jobs it did not
  // queue (held by a quota or a restart backoff) after them, by priority, then the oldest.
  std::map<std::string, size_t> position;
  for (const std::string& id : manager_->QueueOrder()) position.emplace(id, position.size());
  std::stable_sort(pending.begin(), pending.end(), [&](const v1::Job* a, const v1::Job* b) {
    auto pa = position.find(a->id()), pb = position.find(b->id());
    if ((pa != position.end()) != (pb != position.end())) return pa != position.end();
    if (pa != position.end()) return pa->second < pb->second;
    if (a->spec().job().priority() != b->spec().job().priority()) {
      return a->spec().job().priority() > b->spec().job().priority();
    }
    const auto& ta = a->create_time();
    const auto& tb = b->create_time();
    return ta.seconds() != tb.seconds() ? ta.seconds() < tb.seconds() : ta.nanos() < tb.nanos();
  });
  json queue = json::array();
  for (size_t i = 0; i < pending.size() && i < static_cast<size_t>(kMaxQueueRows); ++i) {
    json row = JobSummaryJson(*pending[i]);
    row["priority"] = pending[i]->spec().job().priority();
    queue.push_back(std::move(row));
  }
  return JsonResponse(200, {{"workers", std::move(workers)},
                            {"slots", slots},
                            {"free_slots", free_slots},
                            {"gpus", gpus},
                            {"free_gpus", free_gpus},
                            {"unhealthy_gpus", unhealthy_gpus},
                            {"connected_workers", connected},
                            {"jobs_by_state", by_state},
                            {"queue", std::move(queue)},
                            {"queue_length", pending.size()}});
}

WebResponse WebApi::Jobs(const Query& query, const std::string& owner_filter) const {
  auto params = QueryParams(query, {"state", "limit"});
  if (!params.ok()) return ErrorResponse(params.status());
  int64_t limit = kDefaultJobsLimit;
  if (auto it = params->find("limit"); it != params->end()) {
    if (auto s = ParseCount("limit", it->second, kMaxJobsLimit, &limit); !s.ok()) return ErrorResponse(s);
    if (limit == 0) return ErrorResponse(absl::InvalidArgumentError("query parameter limit: must be at least 1"));
  }
  std::vector<v1::Job::State> states;
  if (auto it = params->find("state"); it != params->end()) {
    for (std::string_view name : Split(it->second, ',')) {
      v1::Job::State state;
      if (!v1::Job::State_Parse(std::string(name), &state) || state == v1::Job::STATE_UNSPECIFIED) {
        return ErrorResponse(absl::InvalidArgumentError(absl::StrCat(
            "query parameter state: '", Quote(name),
            "' is not a job state (PENDING, SCHEDULED, RUNNING, RESTARTING, SUCCEEDED, FAILED, CANCELLED)")));
      }
      states.push_back(state);
    }
  }
  json jobs = json::array();
  for (const v1::Job& job : manager_->List(states, static_cast<int>(limit), owner_filter)) {
    jobs.push_back(JobSummaryJson(job));
  }
  return JsonResponse(200, {{"jobs", std::move(jobs)}, {"limit", limit}});
}

WebResponse WebApi::Sweeps(const Query& query, const Caller& caller, const std::string* id) const {
  if (id != nullptr) {
    auto params = QueryParams(query, {});
    if (!params.ok()) return ErrorResponse(params.status());
    if (auto s = CheckSweepId(*id); !s.ok()) return ErrorResponse(s);
    // Another owner's sweep is NOT_FOUND with the words of a missing one (JobActions).
    auto view = actions_->GetSweep(caller, *id);
    if (!view.ok()) return ErrorResponse(view.status());
    return ProtoJsonResponse(200, *view);
  }
  auto params = QueryParams(query, {"limit"});
  if (!params.ok()) return ErrorResponse(params.status());
  int64_t limit = kDefaultSweepsLimit;
  if (auto it = params->find("limit"); it != params->end()) {
    if (auto s = ParseCount("limit", it->second, kMaxSweepsLimit, &limit); !s.ok()) return ErrorResponse(s);
    if (limit == 0) return ErrorResponse(absl::InvalidArgumentError("query parameter limit: must be at least 1"));
  }
  v1::ListSweepsResponse list;
  for (v1::SweepView& view : actions_->ListSweeps(caller, static_cast<int>(limit))) {
    *list.add_sweeps() = std::move(view);
  }
  return ProtoJsonResponse(200, list);
}

WebResponse WebApi::Events(const Query& query, const std::string& id, const v1::Job& job) const {
  auto params = QueryParams(query, {"after_seq", "limit", "kinds"});
  if (!params.ok()) return ErrorResponse(params.status());
  int64_t after_seq = 0;
  int64_t limit = kDefaultEventsLimit;
  if (auto it = params->find("after_seq"); it != params->end()) {
    if (auto s = ParseCount("after_seq", it->second, std::numeric_limits<int64_t>::max() - 1, &after_seq); !s.ok()) {
      return ErrorResponse(s);
    }
  }
  if (auto it = params->find("limit"); it != params->end()) {
    if (auto s = ParseCount("limit", it->second, kMaxEventsLimit, &limit); !s.ok()) return ErrorResponse(s);
    if (limit == 0) return ErrorResponse(absl::InvalidArgumentError("query parameter limit: must be at least 1"));
  }
  std::set<std::string> kinds;  // empty: every kind
  if (auto it = params->find("kinds"); it != params->end()) {
    for (std::string_view k : Split(it->second, ',')) {
      const std::vector<std::string>& known = EventKinds();
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        std::string names;
        for (const std::string& name : known) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
        return ErrorResponse(absl::InvalidArgumentError(
            absl::StrCat("query parameter kinds: '", Quote(k), "' is not an event kind (", names, ")")));
      }
      kinds.insert(std::string(k));
    }
  }
  // Read in chunks and stop past a byte budget: one stored event may be up to
  // request_validation::kMaxEventBytes, so `limit` alone bounds neither this response nor
  // the memory it takes to build it.
  std::vector<std::string> out;
  int64_t next = after_seq;
  int64_t consumed = 0;  // read and passed, kept or filtered out
  size_t bytes = 0;      // of the kept events, as stored
  bool more = false;
  while (consumed < limit && !more) {
    const int chunk = static_cast<int>(std::min<int64_t>(kEventsReadChunk, limit - consumed));
    auto events = store_->ReadEvents(id, next + 1, chunk);
    if (!events.ok()) return ErrorResponse(events.status());
    for (const v1::Event& e : *events) {
      if (bytes >= kMaxEventsPageBytes) {
        more = true;  // the rest comes from next_after_seq
        break;
      }
      ++consumed;
      next = std::max(next, e.seq());
      if (!kinds.empty() && kinds.count(EventKindName(e)) == 0) continue;
      bytes += e.ByteSizeLong();
      out.push_back(EventJsonLine(e));
    }
    if (static_cast<int>(events->size()) < chunk) break;  // all that is stored
  }
  // A full page means there may be more; the client asks again from `next_after_seq`
  // (filtered-out events count towards the page, so a page may hold none at all).
  if (consumed == limit) more = true;
  return EventsPageResponse(out, {{"next_after_seq", next},
                                  {"more", more},
                                  {"last_seq", store_->LastSeq(id)},
                                  {"state", v1::Job::State_Name(job.state())}});
}

WebResponse WebApi::Stream(const WebRequest& request, const Query& query, const std::string& id) const {
  auto params = QueryParams(query, {"after"});
  if (!params.ok()) return ErrorResponse(params.status());
  // Where to resume: the browser's Last-Event-ID (the last id it saw) wins over ?after=.
  int64_t after = 0;
  if (!request.last_event_id.empty()) {
    if (auto s = ParseCount("Last-Event-ID", request.last_event_id, std::numeric_limits<int64_t>::max() - 1, &after);
        !s.ok()) {
      return ErrorResponse(absl::InvalidArgumentError(
          absl::StrCat("header Last-Event-ID: '", Quote(request.last_event_id), "' is not an event seq")));
    }
  } else if (auto it = params->find("after"); it != params->end()) {
    if (auto s = ParseCount("after", it->second, std::numeric_limits<int64_t>::max() - 1, &after); !s.ok()) {
      return ErrorResponse(s);
    }
  }
  auto body = streams_->Open(id, after);
  if (!body.ok()) {
    WebResponse r = ErrorResponse(body.status());
    if (body.status().code() == absl::StatusCode::kResourceExhausted) {
      r.status = 503;  // the page falls back to polling, or retries after this
      r.headers.emplace_back("Retry-After", "10");
    }
    return r;
  }
  WebResponse r;
  r.content_type = "text/event-stream; charset=utf-8";
  r.stream = std::move(*body);
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  // A reverse proxy must pass each event on as it comes (nginx buffers otherwise).
  r.headers.emplace_back("X-Accel-Buffering", "no");
  return r;
}

WebResponse WebApi::Artifacts(const Query& query, const std::string& id, const std::string* name) const {
  auto params = QueryParams(query, {});
  if (!params.ok()) return ErrorResponse(params.status());
  if (name == nullptr) {
    auto list = artifacts_->List(id);
    if (!list.ok()) return ErrorResponse(list.status());
    json out = json::array();
    for (const auto& a : *list) out.push_back(ArtifactJson(a));
    return JsonResponse(200, {{"artifacts", std::move(out)}});
  }
  // The store's own rule for names: the name goes into a path and a header below.
  if (std::string p = ArtifactStore::NameProblem(*name); !p.empty()) {
    return ErrorResponse(absl::InvalidArgumentError(absl::StrCat("artifact name: ", p)));
  }
  auto info = artifacts_->Find(id, *name);
  if (!info.ok()) return ErrorResponse(info.status());
  const std::string path = artifacts_->PathOf(id, *name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size != info->size_bytes()) {
    // The controller's path goes to its log, not to the client.
    spdlog::error("web: artifact {}/{}: {} cannot be read whole: {}", id, *name, path,
                  fd < 0 ? std::strerror(errno) : "size differs from the index");
    if (fd >= 0) ::close(fd);
    return ErrorResponse(absl::DataLossError(
        absl::StrCat("artifact ", *name, " is indexed but its file cannot be read at the controller")));
  }
  WebResponse r;
  r.content_type = "application/octet-stream";
  r.file = FileBody(fd, st.st_size);
  r.headers.emplace_back("Content-Disposition", absl::StrCat("attachment; filename=\"", *name, "\""));
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return r;
}

}  // namespace trainyard::web
