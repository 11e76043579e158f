#include "server/web/web_server.h"

#include <civetweb.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/listen_probe.h"
#include "common/spec/spec_error.h"
#include "spdlog/spdlog.h"

namespace trainyard::web {
namespace {

constexpr size_t kChunkBytes = 256 << 10;

// Writes all of `data`; false when the client went away.
bool WriteAll(mg_connection* conn, const char* data, size_t size) {
  while (size > 0) {
    const int n = mg_write(conn, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

int Handle(mg_connection* conn, void* cbdata) {
  const auto* api = static_cast<const WebApi*>(cbdata);
  const mg_request_info* info = mg_get_request_info(conn);
  WebRequest request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  // The raw path: WebApi decodes each segment itself, after splitting.
  request.path = info->local_uri_raw != nullptr ? info->local_uri_raw : "";
  request.query = info->query_string != nullptr ? info->query_string : "";
  for (int i = 0; i < info->num_headers; ++i) {
    const char* value = info->http_headers[i].value != nullptr ? info->http_headers[i].value : "";
    if (strcasecmp(info->http_headers[i].name, "Authorization") == 0) {
      request.authorization.emplace_back(value);
    } else if (strcasecmp(info->http_headers[i].name, "Host") == 0) {
      request.host = value;
    } else if (strcasecmp(info->http_headers[i].name, "Content-Type") == 0) {
      request.content_type = value;
    } else if (strcasecmp(info->http_headers[i].name, "Origin") == 0) {
      request.origin = value;
    } else if (strcasecmp(info->http_headers[i].name, "Last-Event-ID") == 0) {
      request.last_event_id = value;
    }
  }
  // The body, bounded: an announced length past the bound is not read at all.
  if (info->content_length > static_cast<long long>(kMaxBodyBytes)) {
    request.body_too_large = true;
  } else if (info->content_length != 0) {
    char buffer[8192];
    while (true) {
      const int n = mg_read(conn, buffer, sizeof(buffer));
      if (n <= 0) break;
      if (request.body.size() + static_cast<size_t>(n) > kMaxBodyBytes) {
        request.body_too_large = true;
        break;
      }
      request.body.append(buffer, static_cast<size_t>(n));
    }
  }
  // What was left unread cannot be skipped safely: no keep-alive after it.
  if (request.body_too_large) mg_disable_keep_alive(conn);
  WebResponse response = api->Handle(request);
  if (response.stream) {
    // An event stream: no length, the connection closes when it ends.
    mg_disable_keep_alive(conn);
    mg_response_header_start(conn, response.status);
    mg_response_header_add(conn, "Content-Type", response.content_type.c_str(), -1);
    for (const auto& [name, value] : response.headers) {
      mg_response_header_add(conn, name.c_str(), value.c_str(), -1);
    }
    mg_response_header_send(conn);
    if (request.method == "HEAD") return response.status;
    response.stream([conn](std::string_view data) { return WriteAll(conn, data.data(), data.size()); });
    return response.status;
  }
  const int64_t length = response.file.open() ? response.file.size() : static_cast<int64_t>(response.body.size());
  mg_response_header_start(conn, response.status);
  mg_response_header_add(conn, "Content-Type", response.content_type.c_str(), -1);
  const std::string length_text = std::to_string(length);
  mg_response_header_add(conn, "Content-Length", length_text.c_str(), -1);
  for (const auto& [name, value] : response.headers) {
    mg_response_header_add(conn, name.c_str(), value.c_str(), -1);
  }
  mg_response_header_send(conn);
  // A response to HEAD is its headers only (civetweb leaves that to the handler): a
  // body would be read as the start of the next response on a kept-alive connection.
  if (request.method == "HEAD") return response.status;
  if (!response.file.open()) {
    WriteAll(conn, response.body.data(), response.body.size());
    return response.status;
  }
  // Streamed: an artifact may be large, and memory must not grow with it.
  std::vector<char> buffer(kChunkBytes);
  int64_t sent = 0;
  while (sent < length) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(kChunkBytes, length - sent));
    const ssize_t n = ::pread(response.file.fd(), buffer.data(), want, sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Headers are out: all that is left is to cut the connection short.
      spdlog::error("web: an artifact's file ended at {} of {} bytes", sent, length);
      mg_disable_keep_alive(conn);
      return response.status;
    }
    if (!WriteAll(conn, buffer.data(), static_cast<size_t>(n))) break;  // the client went away
    sent += n;
  }
  return response.status;
}

int LogMessage(const mg_connection*, const char* message) {
  // civetweb's own errors (bad requests, socket errors); they hold no header values.
  spdlog::debug("web: {}", message);
  return 1;
}

}  // namespace

absl::StatusOr<std::string> CivetwebListeningPorts(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--web-listen '", Quote(host_port), "': ", why));
  };
  if (colon == std::string::npos) return bad("expected HOST:PORT");
  std::string host = host_port.substr(0, colon);
  const std::string port_text = host_port.substr(colon + 1);
  int port = -1;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return bad("the port must be a number 0..65535 (0: any free one)");
  }
  if (host == "localhost") return absl::StrCat("127.0.0.1:", port);
  if (IsIpv4Literal(host)) return absl::StrCat(host, ":", port);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']' && IsIpv6Literal(host.substr(1, host.size() - 2))) {
    return absl::StrCat(host, ":", port);
  }
  return bad("the host must be an IPv4 literal, [IPv6] literal or localhost (no names: the web UI binds one address)");
}

absl::StatusOr<std::unique_ptr<WebServer>> WebServer::Start(const std::string& host_port, const WebApi* api,
                                                            int threads) {
  auto ports = CivetwebListeningPorts(host_port);
  if (!ports.ok()) return ports.status();
  const std::string thread_text = std::to_string(std::max(1, threads));
  const char* options[] = {
      "listening_ports", ports->c_str(),
      "num_threads", thread_text.c_str(),
      // The raw path goes to WebApi (it splits, then decodes); no directory is served.
      "decode_url", "no",
      "request_timeout_ms", "30000",
      "enable_keep_alive", "yes",
      "keep_alive_timeout_ms", "3000",
      nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = &LogMessage;
  mg_init_data init{&callbacks, nullptr, options};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{&error_code, error_text, sizeof(error_text)};
  std::unique_ptr<WebServer> server(new WebServer());
  server->api_ = api;
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    // civetweb's text ("Cannot bind to 127.0.0.1:8080: 98 (Address already in use)") is
    // kept only when a bind of our own finds nothing wrong with the address.
    if (absl::Status why = ProbeListen("--web-listen", host_port); !why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("--web-listen ", host_port, ": cannot listen: ",
                                               error_text[0] != '\0' ? error_text : "civetweb failed to start"));
  }
  mg_set_request_handler(server->ctx_, "/", &Handle, const_cast<WebApi*>(api));
  mg_server_port bound[4];
  const int n = mg_get_server_ports(server->ctx_, 4, bound);
  if (n < 1) return absl::UnavailableError(absl::StrCat("--web-listen ", host_port, ": no port was bound"));
  server->port_ = bound[0].port;
  return server;
}

void WebServer::Stop() {
  if (ctx_ != nullptr) {
    mg_stop(ctx_);
    ctx_ = nullptr;
  }
}

WebServer::~WebServer() { Stop(); }

}  // namespace trainyard::web
