// The HTTP side of the web UI, independent of civetweb: the request and response the
// routes see (WebRequest, WebResponse with an optional FileBody), and the parsing every
// route shares: percent escapes, the query string (only the names a route takes, each
// once), counts, and the Host rule of authorization-off mode. Pure functions and plain
// values; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::web {

inline constexpr size_t kMaxPathBytes = 2048;
inline constexpr size_t kMaxQueryBytes = 2048;
// The largest request body (the actions' JSON) read; a longer one is 413.
inline constexpr size_t kMaxBodyBytes = 64 << 10;

struct WebRequest {
  std::string method;  // "GET", ...
  std::string path;    // as sent: still percent-encoded, without the query
  std::string query;   // after '?', still percent-encoded; "" when none
  std::string host;    // the Host header; "" when none (HTTP/1.0)
  // The values of every Authorization header, in order (empty: none).
  std::vector<std::string> authorization;
  std::string content_type;   // the Content-Type header; "" when none
  std::string origin;         // the Origin header; "" when none
  std::string last_event_id;  // the Last-Event-ID header (an event stream's resume)
  std::string body;           // at most kMaxBodyBytes
  bool body_too_large = false;  // the client announced or sent more than kMaxBodyBytes
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

// A response body written as it is produced (an event stream): the server calls it once
// the headers are out, with a `write` that returns false once the client is gone; it
// returns when the stream ends. No Content-Length; the connection closes after it.
using StreamBody = std::function<void(const std::function<bool(std::string_view)>& write)>;

struct WebResponse {
  int status = 200;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type/Length
  std::string body;  // ignored when `file` is open
  FileBody file;
  StreamBody stream;  // when set, `body` and `file` are ignored
};

// The HTTP status of an absl status code (INVALID_ARGUMENT 400, UNAUTHENTICATED 401,
// FAILED_PRECONDITION 409, ABORTED 409, DEADLINE_EXCEEDED 504,
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

// Decoded query parameters, in order, as sent.
using Query = std::vector<std::pair<std::string, std::string>>;

// `text` cut at every `sep` (absl's StrSplit takes absl::string_view, which Debian's
// absl does not alias to std::string_view).
std::vector<std::string_view> Split(std::string_view text, char sep, bool skip_empty = false);

// The raw query string (after '?') split at '&' and percent-decoded; INVALID_ARGUMENT
// past kMaxQueryBytes or for a bad escape.
absl::StatusOr<Query> SplitQuery(std::string_view raw);

// `query` as a map; INVALID_ARGUMENT for a name not in `allowed` (naming those it
// takes) or one given twice.
absl::StatusOr<std::map<std::string, std::string>> QueryParams(const Query& query,
                                                               std::initializer_list<const char*> allowed);

// A non-negative decimal of at most 18 digits (so it fits int64) and at most `max`;
// INVALID_ARGUMENT naming query parameter `name` otherwise.
absl::Status ParseCount(const std::string& name, const std::string& value, int64_t max, int64_t* out);

}  // namespace trainyard::web
