#include "server/web/web_http.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/spec/spec_error.h"

namespace trainyard::web {

std::vector<std::string_view> Split(std::string_view text, char sep, bool skip_empty) {
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
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kCancelled: return 499;
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

}  // namespace trainyard::web
