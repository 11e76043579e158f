// An in-process HTTP server for tests of outbound HTTP (the client, MLflow, webhooks):
// civetweb on a loopback port 0, where each test installs a handler per path that sees
// the request (method, headers, body) and writes whatever answer the case needs, from a
// plain 200 to a redirect loop or ten megabytes. Every request is recorded.
//
// Thread-safe: civetweb calls handlers on its own threads; the record is locked.
#pragma once

#include <civetweb.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace trainyard::testing {

struct FakeHttpRequest {
  std::string method;
  std::string path;   // without the query
  std::string query;  // after '?', empty when none
  std::map<std::string, std::string> headers;  // names as sent
  std::string body;
};

class FakeHttpServer {
 public:
  // Writes the whole answer on `conn` (use Reply for the common case).
  using Handler = std::function<void(mg_connection* conn, const FakeHttpRequest& request)>;

  FakeHttpServer() {
    const char* options[] = {"listening_ports", "127.0.0.1:0", "num_threads", "8", nullptr};
    mg_callbacks callbacks;
    std::memset(&callbacks, 0, sizeof(callbacks));
    ctx_ = mg_start(&callbacks, nullptr, options);
    mg_set_request_handler(ctx_, "/", &FakeHttpServer::Dispatch, this);
    mg_server_port ports[1];
    if (mg_get_server_ports(ctx_, 1, ports) >= 1) port_ = ports[0].port;
  }
  ~FakeHttpServer() {
    if (ctx_ != nullptr) mg_stop(ctx_);
  }
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const { return port_; }
  std::string Url(const std::string& path) const { return absl::StrCat("http://127.0.0.1:", port_, path); }

  void Handle(const std::string& path, Handler handler) {
    absl::MutexLock lock(&mu_);
    handlers_[path] = std::move(handler);
  }

  std::vector<FakeHttpRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

  static void Reply(mg_connection* conn, int status, const std::string& body,
                    const std::string& extra_headers = "", const std::string& type = "application/json") {
    mg_printf(conn, "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n", status,
              type.c_str(), body.size(), extra_headers.c_str());
    mg_write(conn, body.data(), body.size());
  }

 private:
  static int Dispatch(mg_connection* conn, void* self_ptr) {
    auto* self = static_cast<FakeHttpServer*>(self_ptr);
    const mg_request_info* info = mg_get_request_info(conn);
    FakeHttpRequest request;
    request.method = info->request_method;
    request.path = info->local_uri != nullptr ? info->local_uri : "";
    request.query = info->query_string != nullptr ? info->query_string : "";
    for (int i = 0; i < info->num_headers; ++i) request.headers[info->http_headers[i].name] = info->http_headers[i].value;
    char buffer[8192];
    for (int n; (n = mg_read(conn, buffer, sizeof(buffer))) > 0;) request.body.append(buffer, n);
    Handler handler;
    {
      absl::MutexLock lock(&self->mu_);
      self->requests_.push_back(request);
      auto it = self->handlers_.find(request.path);
      if (it != self->handlers_.end()) handler = it->second;
    }
    if (handler) {
      handler(conn, request);
    } else {
      Reply(conn, 404, "no handler");
    }
    return 1;
  }

  mg_context* ctx_ = nullptr;
  int port_ = 0;
  mutable absl::Mutex mu_;
  std::map<std::string, Handler> handlers_ ABSL_GUARDED_BY(mu_);
  std::vector<FakeHttpRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard::testing
