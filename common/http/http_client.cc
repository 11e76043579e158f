#include "common/http/http_client.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard::http {
namespace {

constexpr std::size_t kMaxUrlBytes = 2048;

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlUrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
struct CurlStringDeleter {
  void operator()(char* p) const { curl_free(p); }
};
using CurlString = std::unique_ptr<char, CurlStringDeleter>;

// A URL part, or empty when the URL has none.
std::string Part(CURLU* u, CURLUPart part) {
  char* out = nullptr;
  if (curl_url_get(u, part, &out, 0) != CURLUE_OK || out == nullptr) return "";
  CurlString owned(out);
  return owned.get();
}

struct Transfer {
  std::string body;
  std::size_t limit = 0;
  bool overflow = false;
  const std::atomic<bool>* cancel = nullptr;
};

size_t OnData(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->body.size() + bytes > t->limit) {
    t->overflow = true;
    return 0;  // curl ends the transfer with CURLE_WRITE_ERROR
  }
  t->body.append(data, bytes);
  return bytes;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return (t->cancel != nullptr && t->cancel->load()) ? 1 : 0;
}

long Millis(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(d);
  return ms < 1 ? 1 : static_cast<long>(ms);
}

}  // namespace

absl::Status ValidateEndpointUrl(std::string_view url, std::string_view what_view) {
  // Debian's Abseil has its own string_view, which StrCat takes; std's does not convert.
  const std::string what(what_view);
  if (url.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty URL"));
  if (url.size() > kMaxUrlBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": URL of ", url.size(), " bytes, more than the ", kMaxUrlBytes, " allowed"));
  }
  for (unsigned char c : url) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": URL ", Quoted(url),
          " has a space, control or non-ASCII byte (percent-encode it; an international host name goes in "
          "its punycode form)"));
    }
  }
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
  const std::string s(url);
  const CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, s.c_str(), 0);
  if (rc != CURLUE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": URL ", Quoted(url), " does not parse: ", curl_url_strerror(rc)));
  }
  const std::string scheme = absl::AsciiStrToLower(Part(u.get(), CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": URL ", Quoted(url), " has scheme ", Quoted(scheme), "; only http and https are allowed"));
  }
  if (Part(u.get(), CURLUPART_HOST).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": URL ", Quoted(url), " has no host"));
  }
  if (!Part(u.get(), CURLUPART_USER).empty() || !Part(u.get(), CURLUPART_PASSWORD).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": URL ", Quoted(RedactUrl(url)),
        " carries a user name or password; URLs reach logs, so credentials never go in one"));
  }
  return absl::OkStatus();
}

std::string RedactUrl(std::string_view url) {
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
  const std::string s(url);
  if (curl_url_set(u.get(), CURLUPART_URL, s.c_str(), 0) != CURLUE_OK) return "<unparsable URL>";
  std::string out = absl::StrCat(Part(u.get(), CURLUPART_SCHEME), "://", Part(u.get(), CURLUPART_HOST));
  const std::string port = Part(u.get(), CURLUPART_PORT);
  if (!port.empty()) absl::StrAppend(&out, ":", port);
  absl::StrAppend(&out, Part(u.get(), CURLUPART_PATH));
  return out;
}

absl::StatusOr<Response> Send(const Request& request) {
  if (request.method != "POST" && request.method != "GET") {
    return absl::InvalidArgumentError(absl::StrCat("http: method ", Quoted(request.method), " is not GET or POST"));
  }
  if (absl::Status s = ValidateEndpointUrl(request.url, "http"); !s.ok()) return s;
  GlobalInitOnce();
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return absl::ResourceExhaustedError("http: curl_easy_init failed");
  CURL* c = curl.get();
  const std::string where = RedactUrl(request.url);

  Transfer t;
  t.limit = request.max_response_bytes;
  t.cancel = request.cancel;
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM, safe on threads
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, Millis(request.connect_timeout));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, Millis(request.total_timeout));
  curl_easy_setopt(c, CURLOPT_USERAGENT, "trainyard");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnData);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(request.max_response_bytes));
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  if (request.max_redirects > 0) {
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, static_cast<long>(request.max_redirects));
  }
  if (!request.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());

  curl_slist* list = nullptr;
  for (const auto& [name, value] : request.headers) {
    list = curl_slist_append(list, absl::StrCat(name, ": ", value).c_str());
  }
  // curl would otherwise send "Expect: 100-continue" for a large body and wait a second
  // for an answer many servers never give.
  list = curl_slist_append(list, "Expect:");
  std::unique_ptr<curl_slist, SlistDeleter> headers(list);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (request.method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }

  const CURLcode rc = curl_easy_perform(c);
  const std::string reason = error[0] != '\0' ? std::string(error) : std::string(curl_easy_strerror(rc));
  if (t.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
    return absl::ResourceExhaustedError(absl::StrCat("http: ", where, " answered with more than ",
                                                     request.max_response_bytes, " bytes; the response was dropped"));
  }
  switch (rc) {
    case CURLE_OK:
      break;
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(absl::StrCat("http: ", where, ": ", reason));
    case CURLE_TOO_MANY_REDIRECTS:
      return absl::FailedPreconditionError(
          absl::StrCat("http: ", where, ": more than ", request.max_redirects, " redirects (", reason, ")"));
    case CURLE_ABORTED_BY_CALLBACK:
      return absl::CancelledError(absl::StrCat("http: ", where, ": cancelled (shutting down)"));
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
      return absl::UnavailableError(absl::StrCat("http: ", where, ": TLS: ", reason));
    default:
      return absl::UnavailableError(absl::StrCat("http: ", where, ": ", reason));
  }
  Response response;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  char* type = nullptr;
  if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type != nullptr) response.content_type = type;
  response.body = std::move(t.body);
  return response;
}

}  // namespace trainyard::http
