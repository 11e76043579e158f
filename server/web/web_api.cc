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

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/events/proto_json.h"
#include "common/spec/spec_error.h"
#include "server/policy/request_validation.h"
#include "server/web/web_assets.h"
#include "spdlog/spdlog.h"

namespace trainyard::web {
namespace {

using json = nlohmann::json;
using Query = std::vector<std::pair<std::string, std::string>>;

// The static files hold no data, but the page must not be framed or run foreign code.
constexpr char kPageSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

// `text` cut at every `sep` (absl's StrSplit takes absl::string_view, which Debian's
// absl does not alias to std::string_view).
std::vector<std::string_view> Split(std::string_view text, char sep, bool skip_empty = false) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    std::string_view part = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!(skip_empty && part.empty())) out.push_back(part);
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

WebResponse Json(int status, const json& body) {
  WebResponse r;
  r.status = status;
  r.content_type = "application/json; charset=utf-8";
  // Invalid UTF-8 (a job's name, say) is replaced rather than aborting the response.
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return r;
}

WebResponse Error(const absl::Status& status) {
  WebResponse r = Json(HttpStatusOf(status), json{{"error", std::string(status.message())}});
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"trainyard\"");
  }
  return r;
}

WebResponse NotFound(std::string_view path) {
  return Error(absl::NotFoundError(absl::StrCat("no such page or endpoint: '", Quote(path), "'")));
}

// Milliseconds since the epoch, or null when unset.
json Millis(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return nullptr;
  return t.seconds() * 1000 + t.nanos() / 1000000;
}

json JobSummary(const v1::Job& job) {
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

json JobDetail(const v1::Job& job) {
  json j = JobSummary(job);
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

// The payload's name: its oneof member's proto field name, which is also its key in
// the event's JSON and a value of ?kinds= (the oneof's case is the field's number).
std::string KindName(const v1::Event& e) {
  const google::protobuf::FieldDescriptor* field = v1::Event::descriptor()->FindFieldByNumber(e.payload_case());
  return field != nullptr ? field->name() : "none";
}
// Every payload name, in field order.
const std::vector<std::string>& KnownKinds() {
  static const auto* kinds = [] {
    auto* out = new std::vector<std::string>;
    const google::protobuf::OneofDescriptor* payload = v1::Event::descriptor()->FindOneofByName("payload");
    for (int i = 0; i < payload->field_count(); ++i) out->push_back(payload->field(i)->name());
    return out;
  }();
  return *kinds;
}

// The event as the proto3 JSON of trainyard.v1.Event that the CLI and trainyard-train
// print (common/events/proto_json.h), less what names a file on a machine: an
// artifact's uri (a path on its worker) and a checkpoint's path are blanked.
std::string EventJsonLine(const v1::Event& e) {
  if (!e.has_artifact() && !e.has_checkpoint()) return ToJsonLine(e);
  v1::Event shown = e;
  if (shown.has_artifact()) shown.mutable_artifact()->clear_uri();
  if (shown.has_checkpoint()) shown.mutable_checkpoint()->clear_path();
  return ToJsonLine(shown);
}

// `envelope` (an object) with "events" first: the events' lines as they are, so a
// page holds the very bytes of each event's proto3 JSON.
WebResponse JsonWithEvents(const std::vector<std::string>& event_lines, const json& envelope) {
  WebResponse r = Json(200, envelope);
  std::string body = "{\"events\":[";
  for (size_t i = 0; i < event_lines.size(); ++i) {
    if (i > 0) body += ',';
    body += event_lines[i];
  }
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

// A non-negative decimal of at most 18 digits (so it fits int64), nothing else.
absl::Status ParseCount(const std::string& name, const std::string& value, int64_t max, int64_t* out) {
  const bool digits = !value.empty() && value.size() <= 18 &&
                      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter ", name, ": '", Quote(value), "' is not a non-negative integer"));
  }
  int64_t v = 0;
  for (char c : value) v = v * 10 + (c - '0');
  if (v > max) {
    return absl::InvalidArgumentError(absl::StrCat("query parameter ", name, ": ", v, " is over the maximum ", max));
  }
  *out = v;
  return absl::OkStatus();
}

// `query` split into decoded name/value pairs; only names in `allowed`, each once.
absl::StatusOr<std::map<std::string, std::string>> QueryParams(const Query& query,
                                                               std::initializer_list<const char*> allowed) {
  std::map<std::string, std::string> out;
  for (const auto& param : query) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const std::string& name = param.first;
    const std::string& value = param.second;
    if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return name == a; }) == allowed.end()) {
      std::string names;
      for (const char* a : allowed) absl::StrAppend(&names, names.empty() ? "" : ", ", a);
      return absl::InvalidArgumentError(absl::StrCat("unknown query parameter '", Quote(name), "'",
                                                     allowed.size() == 0 ? "; this endpoint takes none"
                                                                         : absl::StrCat("; this endpoint takes ", names)));
    }
    if (!out.emplace(name, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("query parameter ", name, " is given more than once"));
    }
  }
  return out;
}

absl::StatusOr<Query> SplitQuery(std::string_view raw) {
  Query out;
  if (raw.size() > kMaxQueryBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the query string is ", raw.size(), " bytes, over the limit of ", kMaxQueryBytes));
  }
  for (std::string_view part : Split(raw, '&', /*skip_empty=*/true)) {
    const size_t eq = part.find('=');
    std::string name, value;
    absl::Status s = PercentDecode(part.substr(0, eq), "a query parameter name", &name);
    if (s.ok() && eq != std::string_view::npos) s = PercentDecode(part.substr(eq + 1), "a query parameter value", &value);
    if (!s.ok()) return s;
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

}  // namespace

FileBody& FileBody::operator=(FileBody&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

FileBody::~FileBody() {
  if (fd_ >= 0) ::close(fd_);
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

absl::Status PercentDecode(std::string_view in, const char* what, std::string* out) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    const int hi = i + 2 < in.size() ? hex(in[i + 1]) : -1;
    const int lo = i + 2 < in.size() ? hex(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", Quote(in), "' has a bad percent escape at byte ", i));
    }
    const char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') return absl::InvalidArgumentError(absl::StrCat(what, " '", Quote(in), "' holds %00"));
    out->push_back(c);
    i += 2;
  }
  return absl::OkStatus();
}

bool IsIpv4Literal(std::string_view host) {
  int parts = 0;
  size_t i = 0;
  while (i <= host.size()) {
    size_t j = host.find('.', i);
    if (j == std::string_view::npos) j = host.size();
    const std::string_view part = host.substr(i, j - i);
    if (part.empty() || part.size() > 3 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    int v = 0;
    for (char c : part) v = v * 10 + (c - '0');
    if (v > 255) return false;
    ++parts;
    i = j + 1;
  }
  return parts == 4;
}

bool IsIpv6Literal(std::string_view host) {
  return !host.empty() && host.size() <= 45 &&
         std::all_of(host.begin(), host.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
         }) &&
         host.find(':') != std::string_view::npos;
}

bool HostIsAddress(std::string_view host_header) {
  std::string_view host = host_header;
  std::string_view port;
  bool has_port = false;
  if (!host_header.empty() && host_header.front() == '[') {
    const size_t close = host_header.find(']');
    if (close == std::string_view::npos) return false;
    host = host_header.substr(1, close - 1);
    const std::string_view rest = host_header.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      has_port = true;
    }
    if (!IsIpv6Literal(host)) return false;
  } else {
    // Unbracketed, the first ':' starts the port ("::1" leaves no host and is refused).
    if (const size_t colon = host_header.find(':'); colon != std::string_view::npos) {
      host = host_header.substr(0, colon);
      port = host_header.substr(colon + 1);
      has_port = true;
    }
    // Host names are case-insensitive; "localhost" is the only name that is an address.
    std::string lower(host);
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (lower != "localhost" && !IsIpv4Literal(host)) return false;
  }
  return !has_port || (!port.empty() && port.size() <= 5 &&
                       std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }));
}

WebApi::WebApi(JobManager* manager, JobStore* store, ArtifactStore* artifacts, const Authorizer* authorizer)
    : manager_(manager), store_(store), artifacts_(artifacts), authorizer_(authorizer) {}

WebResponse WebApi::Handle(const WebRequest& request) const {
  if (request.method != "GET") {
    WebResponse r = Error(absl::InvalidArgumentError(absl::StrCat(
        "method ", Quote(request.method), " is not allowed: the web UI is read-only (GET only)")));
    r.status = 405;
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  if (request.path.size() > kMaxPathBytes) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("the path is ", request.path.size(), " bytes, over the limit of ", kMaxPathBytes)));
  }
  if (request.path.empty() || request.path[0] != '/') {
    return Error(absl::InvalidArgumentError(absl::StrCat("the path '", Quote(request.path), "' is not absolute")));
  }
  // Segments are split before decoding, so an escaped '/' stays inside its segment.
  std::vector<std::string> segments;
  for (std::string_view raw : Split(std::string_view(request.path).substr(1), '/')) {
    std::string decoded;
    if (auto s = PercentDecode(raw, "a path segment", &decoded); !s.ok()) return Error(s);
    segments.push_back(std::move(decoded));
  }
  auto query = SplitQuery(request.query);
  if (!query.ok()) return Error(query.status());

  if (!segments.empty() && segments[0] == "api") return Api(request, segments, *query);

  // A static file. The page's routes live after '#', so every page is "/".
  std::string name = segments.size() == 1 ? segments[0] : "";
  if (name.empty() && segments.size() == 1) name = "index.html";
  const WebAsset* asset = segments.size() == 1 ? FindWebAsset(name) : nullptr;
  if (asset == nullptr) return NotFound(request.path);
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
    return Error(absl::PermissionDeniedError(absl::StrCat(
        "Host '", Quote(request.host),
        "' is not an IP address or localhost: with authorization off the web API answers only requests "
        "addressed to an IP or localhost (a guard against DNS rebinding); use the address, or give the "
        "controller a --token-file")));
  }
  std::vector<std::string_view> values(request.authorization.begin(), request.authorization.end());
  auto caller_or = authorizer_->AuthenticateValues(values);
  if (!caller_or.ok()) {
    // Same words as the gRPC API, but this is a header here, not metadata.
    std::string message(caller_or.status().message());
    for (auto [from, to] : {std::pair<std::string_view, std::string_view>{"authorization metadata entry",
                                                                        "Authorization header"},
                           {"authorization metadata", "Authorization header"}}) {
      if (size_t at = message.find(from); at != std::string::npos) message.replace(at, from.size(), to);
    }
    return Error(absl::UnauthenticatedError(message));
  }
  const Caller caller = std::move(*caller_or);
  const size_t n = segments.size();
  // A submitter sees only its own jobs.
  const std::string owner_filter = caller.role == Role::kSubmitter ? caller.owner : "";

  if (n == 2 && segments[1] == "me") {
    auto params = QueryParams(query, {});
    if (!params.ok()) return Error(params.status());
    return Json(200, {{"auth", authorizer_->enabled()}, {"role", RoleName(caller.role)}, {"owner", caller.owner}});
  }

  if (n == 2 && segments[1] == "fleet") {
    auto params = QueryParams(query, {});
    if (!params.ok()) return Error(params.status());
    if (!Authorizer::CanSeeFleet(caller)) {
      return Error(absl::PermissionDeniedError("this role cannot see the fleet"));
    }
    json workers = json::array();
    int64_t slots = 0, free_slots = 0, connected = 0;
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
      workers.push_back({{"name", w.name()},
                         {"slots", w.slots()},
                         {"free_slots", w.free_slots()},
                         {"connected", w.connected()},
                         {"address", w.address()},
                         {"jobs", std::move(running)}});
    }
    // The scheduler's order: priority first, then the oldest.
    std::stable_sort(pending.begin(), pending.end(), [](const v1::Job* a, const v1::Job* b) {
      if (a->spec().job().priority() != b->spec().job().priority()) {
        return a->spec().job().priority() > b->spec().job().priority();
      }
      const auto& ta = a->create_time();
      const auto& tb = b->create_time();
      return ta.seconds() != tb.seconds() ? ta.seconds() < tb.seconds() : ta.nanos() < tb.nanos();
    });
    json queue = json::array();
    for (size_t i = 0; i < pending.size() && i < static_cast<size_t>(kMaxQueueRows); ++i) {
      json row = JobSummary(*pending[i]);
      row["priority"] = pending[i]->spec().job().priority();
      queue.push_back(std::move(row));
    }
    return Json(200, {{"workers", std::move(workers)},
                      {"slots", slots},
                      {"free_slots", free_slots},
                      {"connected_workers", connected},
                      {"jobs_by_state", by_state},
                      {"queue", std::move(queue)},
                      {"queue_length", pending.size()}});
  }

  if (n < 2 || segments[1] != "jobs" || n > 5) return NotFound(request.path);

  if (n == 2) {  // /api/jobs
    auto params = QueryParams(query, {"state", "limit"});
    if (!params.ok()) return Error(params.status());
    int64_t limit = kDefaultJobsLimit;
    if (auto it = params->find("limit"); it != params->end()) {
      if (auto s = ParseCount("limit", it->second, kMaxJobsLimit, &limit); !s.ok()) return Error(s);
      if (limit == 0) return Error(absl::InvalidArgumentError("query parameter limit: must be at least 1"));
    }
    std::vector<v1::Job::State> states;
    if (auto it = params->find("state"); it != params->end()) {
      for (std::string_view name : Split(it->second, ',')) {
        v1::Job::State state;
        if (!v1::Job::State_Parse(std::string(name), &state) || state == v1::Job::STATE_UNSPECIFIED) {
          return Error(absl::InvalidArgumentError(absl::StrCat(
              "query parameter state: '", Quote(name),
              "' is not a job state (PENDING, SCHEDULED, RUNNING, RESTARTING, SUCCEEDED, FAILED, CANCELLED)")));
        }
        states.push_back(state);
      }
    }
    json jobs = json::array();
    for (const v1::Job& job : manager_->List(states, static_cast<int>(limit), owner_filter)) {
      jobs.push_back(JobSummary(job));
    }
    return Json(200, {{"jobs", std::move(jobs)}, {"limit", limit}});
  }

  const std::string& id = segments[2];
  if (auto s = request_validation::CheckJobId("job id", id); !s.ok()) return Error(s);
  auto job = manager_->Get(id);
  if (job.ok() && !Authorizer::CanSee(caller, job->owner())) {
    // Word for word what JobManager::Get says of a job that does not exist.
    job = absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  }
  if (!job.ok()) return Error(job.status());

  if (n == 3) {
    auto params = QueryParams(query, {});
    if (!params.ok()) return Error(params.status());
    return Json(200, JobDetail(*job));
  }

  if (segments[3] == "events" && n == 4) {
    auto params = QueryParams(query, {"after_seq", "limit", "kinds"});
    if (!params.ok()) return Error(params.status());
    int64_t after_seq = 0;
    int64_t limit = kDefaultEventsLimit;
    if (auto it = params->find("after_seq"); it != params->end()) {
      if (auto s = ParseCount("after_seq", it->second, std::numeric_limits<int64_t>::max() - 1, &after_seq); !s.ok()) {
        return Error(s);
      }
    }
    if (auto it = params->find("limit"); it != params->end()) {
      if (auto s = ParseCount("limit", it->second, kMaxEventsLimit, &limit); !s.ok()) return Error(s);
      if (limit == 0) return Error(absl::InvalidArgumentError("query parameter limit: must be at least 1"));
    }
    std::set<std::string> kinds;  // empty: every kind
    if (auto it = params->find("kinds"); it != params->end()) {
      for (std::string_view k : Split(it->second, ',')) {
        const std::vector<std::string>& known = KnownKinds();
        if (std::find(known.begin(), known.end(), k) == known.end()) {
          std::string names;
          for (const std::string& name : known) absl::StrAppend(&names, names.empty() ? "" : ", ", name);
          return Error(absl::InvalidArgumentError(
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
      if (!events.ok()) return Error(events.status());
      for (const v1::Event& e : *events) {
        if (bytes >= kMaxEventsPageBytes) {
          more = true;  // the rest comes from next_after_seq
          break;
        }
        ++consumed;
        next = std::max(next, e.seq());
        if (!kinds.empty() && kinds.count(KindName(e)) == 0) continue;
        bytes += e.ByteSizeLong();
        out.push_back(EventJsonLine(e));
      }
      if (static_cast<int>(events->size()) < chunk) break;  // all that is stored
    }
    // A full page means there may be more; the client asks again from `next_after_seq`
    // (filtered-out events count towards the page, so a page may hold none at all).
    if (consumed == limit) more = true;
    return JsonWithEvents(out, {{"next_after_seq", next},
                      {"more", more},
                      {"last_seq", store_->LastSeq(id)},
                      {"state", v1::Job::State_Name(job->state())}});
  }

  if (segments[3] == "artifacts") {
    auto params = QueryParams(query, {});
    if (!params.ok()) return Error(params.status());
    if (n == 4) {
      auto list = artifacts_->List(id);
      if (!list.ok()) return Error(list.status());
      json out = json::array();
      for (const auto& a : *list) out.push_back(ArtifactJson(a));
      return Json(200, {{"artifacts", std::move(out)}});
    }
    const std::string& name = segments[4];
    // The store's own rule for names: the name goes into a path and a header below.
    if (std::string p = ArtifactStore::NameProblem(name); !p.empty()) {
      return Error(absl::InvalidArgumentError(absl::StrCat("artifact name: ", p)));
    }
    auto info = artifacts_->Find(id, name);
    if (!info.ok()) return Error(info.status());
    const std::string path = artifacts_->PathOf(id, name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size != info->size_bytes()) {
      // The controller's path goes to its log, not to the client.
      spdlog::error("web: artifact {}/{}: {} cannot be read whole: {}", id, name, path,
                    fd < 0 ? std::strerror(errno) : "size differs from the index");
      if (fd >= 0) ::close(fd);
      return Error(absl::DataLossError(
          absl::StrCat("artifact ", name, " is indexed but its file cannot be read at the controller")));
    }
    WebResponse r;
    r.content_type = "application/octet-stream";
    r.file = FileBody(fd, st.st_size);
    r.headers.emplace_back("Content-Disposition", absl::StrCat("attachment; filename=\"", name, "\""));
    r.headers.emplace_back("Cache-Control", "no-store");
    r.headers.emplace_back("X-Content-Type-Options", "nosniff");
    return r;
  }
  return NotFound(request.path);
}

}  // namespace trainyard::web
