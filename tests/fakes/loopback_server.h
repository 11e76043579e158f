// A gRPC server on a loopback port the OS picks, for tests that run real calls against
// an in-process fake service.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace trainyard::testing {

// Starts at construction (check ok()); the destructor runs `before_shutdown` (a fake
// releases the calls it holds open there) and then shuts the server down, which waits
// for every handler to return. Not thread-safe.
class LoopbackServer {
 public:
  explicit LoopbackServer(grpc::Service* service, std::function<void()> before_shutdown = {})
      : before_shutdown_(std::move(before_shutdown)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~LoopbackServer() {
    if (before_shutdown_) before_shutdown_();
    if (server_ != nullptr) server_->Shutdown();
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  bool ok() const { return server_ != nullptr && port_ > 0; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<void()> before_shutdown_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace trainyard::testing
