// The controller's read-only web UI: the HTTP routes, independent of the HTTP server
// (WebServer in web_server.h feeds it requests from civetweb; tests call Handle
// directly). Request parsing is web_http.h's, every answer's JSON web_json.h's.
//
// Routes (GET and HEAD; any other method is 405 with `Allow: GET`), then the actions
// (POST only: any other method is 405 with `Allow: POST`), below:
//   /, /index.html, /app.js, /style.css   the embedded static files (web_assets.h);
//                                         no token needed: they hold no data
//   /api/me                               who the token is (role, owner), auth on/off
//   /api/jobs?state=S&limit=N             jobs, newest first
//   /api/jobs/ID                          one job: summary, spec, placement, attempts
//   /api/jobs/ID/events?after_seq=N&limit=M&kinds=K,K
//                                         stored events with seq > N, oldest first
//   /api/jobs/ID/artifacts                the job's complete artifacts
//   /api/jobs/ID/artifacts/NAME           one artifact's bytes (attachment)
//   /api/fleet                            workers, slots, jobs by state, the queue
//   /api/sweeps?limit=N                   sweeps, newest first, children left out
//                                         (trainyard.v1.ListSweepsResponse)
//   /api/sweeps/ID                        one sweep with its ranked children
//                                         (trainyard.v1.SweepView)
//   /api/jobs/ID/stream?after=N           the job's events as server-sent events
//   POST /api/jobs/ID/cancel              {"reason": "..."}
//   POST /api/jobs/ID/checkpoint          {"timeout_s": N}
//   POST /api/jobs/ID/resubmit            {"set": ["section.key=value", ...]}
//   POST /api/sweeps/ID/cancel            {"reason": "..."}: every child not ended
//   POST /api/workers/NAME/cordon|uncordon|drain   {"reason": "..."}
//
// The actions go through JobActions, as the gRPC JobService's calls do: the same
// request checks, roles and audit rows. Their bodies are JSON objects of at most
// kMaxBodyBytes with only the keys named (an unknown key is 400 naming it), sent
// with Content-Type: application/json (415 otherwise), and the token in the
// Authorization header: a cookie is never read, so another site's page cannot act.
//
// Authorization is the JobService's (server/auth/authorizer.h): every /api/ route
// needs `Authorization: Bearer TOKEN` when the controller has a token file (401 with
// `WWW-Authenticate: Bearer` otherwise); a submitter sees only its own jobs, and
// another owner's job is 404 with the very message of a missing one; viewer and admin
// see everything.
//
// With authorization off (the loopback development mode), /api/ answers only requests
// whose Host header is an IP literal or localhost (else 403): a web page elsewhere could
// otherwise point a name of its own at 127.0.0.1 (DNS rebinding) and read the API as a
// same-origin page. With tokens the page of a rebound name has no token, so any Host is
// served (a TLS reverse proxy may forward its own name).
//
// The sweep routes answer the proto3 JSON of their message, as the events do; they go
// through JobActions (GetSweep, ListSweeps, CancelSweep), so without `actions` there are
// none (404).
//
// Every input is checked: a bad id, seq, limit, state, kind or artifact name is a 400
// naming the parameter (quoting at most ~100 characters of it); an unknown route, job
// or artifact is 404. Every response is bounded: lists by `limit` (capped), events by
// `limit` and kMaxEventsPageBytes, artifacts streamed from the file.
//
// Thread-safe: its only state is the event streams' registry (thread-safe); the objects it
// reads and calls are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/auth/authorizer.h"
#include "server/service/job_actions.h"
#include "server/state/artifact_store.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/job_store.h"
#include "server/web/event_stream.h"
#include "server/web/web_http.h"

namespace trainyard::web {

inline constexpr int kDefaultJobsLimit = 100;
inline constexpr int kMaxJobsLimit = 1000;
inline constexpr int kDefaultEventsLimit = 500;
inline constexpr int kMaxEventsLimit = 2000;
// An events page also ends once its events (as stored) pass this many bytes, and the
// store is read this many events at a time: a stored event may be up to 1 MiB.
inline constexpr size_t kMaxEventsPageBytes = 4 << 20;
inline constexpr int kEventsReadChunk = 64;
inline constexpr int kMaxQueueRows = 100;
// A sweep in a list carries its children's ids (up to the sweep points limit, 1000 by
// default): a list of kMaxSweepsLimit sweeps stays within ~10 MB.
inline constexpr int kDefaultSweepsLimit = 100;
inline constexpr int kMaxSweepsLimit = 1000;

class WebApi {
 public:
  // Every pointer must outlive the api. `authorizer` is never null (use
  // Authorizer::Disabled() for authorization off). Without `actions` the API is
  // read-only (every action is 405); without `hub` there is no event stream (404).
  WebApi(JobManager* manager, JobStore* store, ArtifactStore* artifacts, const Authorizer* authorizer,
         JobActions* actions = nullptr, EventHub* hub = nullptr);

  WebResponse Handle(const WebRequest& request) const;
  // Ends the open event streams and refuses new ones (the controller is stopping).
  void Stop();
  int open_streams() const { return streams_ ? streams_->open_streams() : 0; }

 private:
  // Authenticates, then routes /api/... to the handlers below.
  WebResponse Api(const WebRequest& request, const std::vector<std::string>& segments, const Query& query) const;
  // /api/fleet: workers, slots, jobs by state and the queue, of the jobs `owner_filter`
  // sees ("" for all).
  WebResponse Fleet(const Query& query, const Caller& caller, const std::string& owner_filter) const;
  // /api/jobs: newest first.
  WebResponse Jobs(const Query& query, const std::string& owner_filter) const;
  // /api/sweeps (id null) or /api/sweeps/ID, through JobActions.
  WebResponse Sweeps(const Query& query, const Caller& caller, const std::string* id) const;
  // /api/jobs/ID/events of a job the caller may see: one page from the store.
  WebResponse Events(const Query& query, const std::string& id, const v1::Job& job) const;
  // /api/jobs/ID/artifacts (name null) or /api/jobs/ID/artifacts/NAME.
  WebResponse Artifacts(const Query& query, const std::string& id, const std::string* name) const;
  // /api/jobs/ID/stream: the job's events as server-sent events (event_stream.h).
  WebResponse Stream(const WebRequest& request, const Query& query, const std::string& id) const;

  // The actions (web_actions.cc): POST with a JSON object body, through JobActions.
  // /api/jobs/ID/{cancel,checkpoint,resubmit} and /api/workers/NAME/{cordon,uncordon,drain}.
  WebResponse JobAction(const WebRequest& request, const Caller& caller, const std::string& id,
                        const std::string& action) const;
  WebResponse WorkerAction(const WebRequest& request, const Caller& caller, const std::string& name,
                           const std::string& action) const;
  // /api/sweeps/ID/cancel.
  WebResponse SweepAction(const WebRequest& request, const Caller& caller, const std::string& id,
                          const std::string& action) const;
  // 415 unless the body is JSON, 403 for a foreign Origin: the CSRF guard with
  // authorization off (docs/security.md).
  WebResponse CheckActionRequest(const WebRequest& request) const;

  JobManager* const manager_;
  JobStore* const store_;
  ArtifactStore* const artifacts_;
  const Authorizer* const authorizer_;
  JobActions* const actions_;
  EventHub* const hub_;
  std::unique_ptr<EventStreams> streams_;  // set with a hub
};

// Whether `segments` (of /api/...) name an action, which takes POST only.
bool IsActionRoute(const std::vector<std::string>& segments);
// OK for a sweep id the API will look up (request_validation::CheckSweepId's rule:
// 1..64 printable ASCII bytes); INVALID_ARGUMENT naming "sweep id" otherwise.
absl::Status CheckSweepId(std::string_view id);

}  // namespace trainyard::web
