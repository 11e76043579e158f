// The web UI's HTTP listener (--web-listen): civetweb (Debian's libcivetweb, the server
// prometheus-cpp's /metrics already runs on) feeding WebApi. Plain HTTP: beyond
// loopback it needs --insecure (CheckListenerSecurity), since the page sends a bearer
// token with every API call.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/web/web_api.h"

struct mg_context;

namespace trainyard::web {

// The civetweb listening_ports value for a --web-listen `host:port`: an IPv4 literal,
// "localhost" (127.0.0.1) or a bracketed IPv6 literal, and a port 0..65535 (0: any
// free one). INVALID_ARGUMENT naming the flag otherwise (civetweb would read a comma
// or an 's'/'r' suffix as more options).
absl::StatusOr<std::string> CivetwebListeningPorts(const std::string& host_port);

// civetweb's request threads: a browser keeps up to six connections alive, and each
// open event stream (/api/jobs/ID/stream) holds one thread for as long as it runs, so
// there are kMaxEventStreams more than the 16 plain requests need.
inline constexpr int kWebThreads = 16 + kMaxEventStreams;

class WebServer {
 public:
  // Starts listening on `host_port` with `threads` request threads (a browser keeps up
  // to six connections alive, each holding a civetweb thread while open); `api` must
  // outlive the server. UNAVAILABLE with civetweb's reason when it cannot bind.
  static absl::StatusOr<std::unique_ptr<WebServer>> Start(const std::string& host_port, const WebApi* api,
                                                          int threads = kWebThreads);
  ~WebServer();  // Stop()

  // The bound port (the chosen one when the address said port 0).
  int port() const { return port_; }
  // Stops accepting and waits for the requests in flight; idempotent.
  void Stop();

 private:
  WebServer() = default;

  mg_context* ctx_ = nullptr;
  const WebApi* api_ = nullptr;
  int port_ = 0;
};

}  // namespace trainyard::web
