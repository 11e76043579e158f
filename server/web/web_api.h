// The controller's read-only web UI: the HTTP routes, independent of the HTTP server
// (WebServer in web_server.h feeds it requests from civetweb; tests call Handle
// directly).
//
// Routes (GET only; any other method is 405 with `Allow: GET`):
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
//
// Authorization is the JobService's (server/auth/authorizer.h): every /api/ route
// needs `Authorization: Bearer TOKEN` when the controller has a token file (401 with
// `WWW-Authenticate: Bearer` otherwise); a submitter sees only its own jobs, and
// another owner's job is 404 with the very message of a missing one; viewer and admin
// see everything. Nothing here changes anything.
//
// With authorization off (the loopback development mode), /api/ answers only requests
// whose Host header is an IP literal or localhost (else 403): a web page elsewhere could
// otherwise point a name of its own at 127.0.0.1 (DNS rebinding) and read the API as a
// same-origin page. With tokens the page of a rebound name has no token, so any Host is
// served (a TLS reverse proxy may forward its own name).
//
// Every input is checked: a bad id, seq, limit, state, kind or artifact name is a 400
// naming the parameter (quoting at most ~100 characters of it); an unknown route, job
// or artifact is 404. Every response is bounded: lists by `limit` (capped), events by
// `limit` and kMaxEventsPageBytes, artifacts streamed from the file.
//
// Thread-safe: it holds no state of its own; the objects it reads are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/state/artifact_store.h"
#include "server/auth/authorizer.h"
#include "server/state/job_manager.h"
#include "server/store/job_store.h"

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
inline constexpr size_t kMaxPathBytes = 2048;
inline constexpr size_t kMaxQueryBytes = 2048;

struct WebRequest {
  std::string method;  // "GET", ...
  std::string path;    // as sent: still percent-encoded, without the query
  std::string query;   // after '?', still percent-encoded; "" when none
  std::string host;    // the Host header; "" when none (HTTP/1.0)
  // The values of every Authorization header, in order (empty: none).
  std::vector<std::string> authorization;
};

// A file to send as the body: an open descriptor (closed by the response) of
// `size` bytes. Artifacts never change once stored, so the size is final.
class FileBody {
 public:
  FileBody() = default;
  FileBody(int fd, int64_t size) : fd_(fd), size_(size) {}
  FileBody(FileBody&& other) noexcept : fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}
  FileBody& operator=(FileBody&& other) noexcept;
  FileBody(const FileBody&) = delete;
  FileBody& operator=(const FileBody&) = delete;
  ~FileBody();

  bool open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int64_t size() const { return size_; }

 private:
  int fd_ = -1;
  int64_t size_ = 0;
};

struct WebResponse {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type/Length
  std::string body;  // ignored when `file` is open
  FileBody file;
};

class WebApi {
 public:
  // Every pointer must outlive the api. `authorizer` is never null (use
  // Authorizer::Disabled() for authorization off).
  WebApi(JobManager* manager, JobStore* store, ArtifactStore* artifacts, const Authorizer* authorizer);

  WebResponse Handle(const WebRequest& request) const;

 private:
  WebResponse Api(const WebRequest& request, const std::vector<std::string>& segments,
                  const std::vector<std::pair<std::string, std::string>>& query) const;

  JobManager* const manager_;
  JobStore* const store_;
  ArtifactStore* const artifacts_;
  const Authorizer* const authorizer_;
};

// The HTTP status of an absl status code (INVALID_ARGUMENT 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503,
// anything else 500).
int HttpStatusOf(const absl::Status& status);

// Decodes %XX escapes (and nothing else: '+' stays '+'); INVALID_ARGUMENT naming
// `what` for a truncated or non-hex escape, or a decoded NUL.
absl::Status PercentDecode(std::string_view in, const char* what, std::string* out);

// A dotted-quad IPv4 literal (each part 0..255, at most 3 digits).
bool IsIpv4Literal(std::string_view host);
// Hex digits, ':' and '.' with at least one ':' (an IPv6 literal without brackets).
bool IsIpv6Literal(std::string_view host);
// Whether a Host header value names an address rather than a name: an IPv4 literal,
// a bracketed IPv6 literal or localhost, each with an optional :PORT.
bool HostIsAddress(std::string_view host_header);

}  // namespace trainyard::web
