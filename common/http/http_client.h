// Outbound HTTP for the controller's integrations (MLflow's REST API, webhooks): one
// blocking request at a time per call, through Debian's libcurl. Every limit a hostile
// or broken endpoint could abuse is bounded here once: connect and total timeouts, the
// response size, redirects (none unless asked), and only http/https, so the callers'
// retry loops see a precise Status instead of a hang or an unbounded buffer.
//
// Thread-safe: Send() may run on any number of threads at once (each call has its own
// curl handle; libcurl's global init runs once, before the first call).
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainyard::http {

struct Request {
  std::string method = "POST";  // "GET" or "POST"
  std::string url;              // http:// or https:// (see ValidateEndpointUrl)
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // sent for POST
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration total_timeout = absl::Seconds(10);
  // A response body past this fails the call with RESOURCE_EXHAUSTED and drops the
  // connection, so a 10 MB answer to a webhook costs at most this much memory.
  std::size_t max_response_bytes = 1 << 20;
  // 0: a 3xx comes back as the Response. N > 0: follow up to N (http/https only); one
  // more is FAILED_PRECONDITION naming the loop.
  int max_redirects = 0;
  std::string ca_file;  // PEM bundle to verify the server with; empty: the system's
  // Polled during the transfer: when it turns true the call ends with CANCELLED, so a
  // shutting-down controller does not wait out a slow endpoint's timeout.
  const std::atomic<bool>* cancel = nullptr;
};

struct Response {
  long status = 0;  // the HTTP status code
  std::string body;
  std::string content_type;  // empty when the server sent none
};

// Sends `request`. Any HTTP status comes back as a Response (the caller decides what a
// 4xx/5xx means). Transport failures are errors that name the redacted URL and curl's
// reason: INVALID_ARGUMENT (a URL that fails ValidateEndpointUrl, a bad method),
// UNAVAILABLE (DNS, refused, reset, TLS handshake or verification), DEADLINE_EXCEEDED
// (a timeout), RESOURCE_EXHAUSTED (the response past max_response_bytes),
// FAILED_PRECONDITION (too many redirects), CANCELLED.
absl::StatusOr<Response> Send(const Request& request);

// Checks a URL a user configured for an outbound endpoint (a flag or a file field
// named by `what`): at most 2048 bytes of printable ASCII (an IDN host goes in its
// punycode form), http or https, a host, no user:password (secrets go in the
// configuration's secret fields, never in a URL that reaches logs). INVALID_ARGUMENT
// naming `what` and the problem.
absl::Status ValidateEndpointUrl(std::string_view url, std::string_view what);

// `scheme://host[:port]/path` of a URL, without user info, query or fragment, for logs
// and error messages; "<unparsable URL>" when curl cannot parse it.
std::string RedactUrl(std::string_view url);

}  // namespace trainyard::http
