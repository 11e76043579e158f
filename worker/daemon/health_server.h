// The worker's gRPC health endpoint (--health-listen): grpc.health.v1.Health, gRPC's
// default health checking service, answering SERVING while the worker is registered with
// the controller and NOT_SERVING otherwise, for Kubernetes' gRPC probes and
// grpc_health_probe. The worker is otherwise only a gRPC client; this is its one listener.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainyard {

class HealthServer {
 public:
  // The address --health-listen VALUE binds: a bare port means 127.0.0.1:PORT. Beyond
  // loopback it needs `insecure` (--insecure), as the controller's --metrics-listen does:
  // the endpoint is plaintext and unauthenticated (Kubernetes' gRPC probes speak no TLS),
  // although all it tells is SERVING or NOT_SERVING. INVALID_ARGUMENT names the flag.
  static absl::StatusOr<std::string> ResolveAddress(const std::string& value, bool insecure);

  // The service a liveness probe asks for: SERVING from Start to Shutdown whatever the
  // controller link does, so a controller outage (which the worker rides out with its
  // ranks running) never gets the worker restarted.
  static constexpr char kLivenessService[] = "liveness";

  // Binds `address` (host:port, port 0 picks one; never shared with another process: a
  // port in use is UNAVAILABLE "address already in use", listen_probe.h) and serves
  // health; `serving` is asked
  // every `poll` and its answer becomes the status of the server ("") and of
  // `service_name` (readiness: registered with the controller).
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(
      const std::string& address, std::function<bool()> serving,
      absl::Duration poll = absl::Milliseconds(200),
      const std::string& service_name = "trainyard.worker");
  ~HealthServer();  // Shutdown()
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  int port() const { return port_; }
  // NOT_SERVING for everything, then stops the listener (idempotent).
  void Shutdown();

 private:
  HealthServer(std::function<bool()> serving, absl::Duration poll, std::string service_name);
  void Poll();

  const std::function<bool()> serving_;
  const absl::Duration poll_;
  const std::string service_name_;
  // gRPC (1.51) builds no server whose only service is the default health service ("At
  // least one of the completion queues must be frequently polled"): the health service
  // is added after that check. This service (every call UNIMPLEMENTED, as an unknown
  // method would be anyway) gives the server the callback queue it needs.
  grpc::CallbackGenericService unimplemented_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace trainyard
