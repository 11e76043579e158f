#include "worker/daemon/health_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/listen_probe.h"
#include "common/spec/spec_error.h"
#include "common/tls_files.h"

namespace trainyard {

absl::StatusOr<std::string> HealthServer::ResolveAddress(const std::string& value, bool insecure) {
  int port = 0;
  const bool bare_port = !value.empty() && absl::c_all_of(value, absl::ascii_isdigit);
  if (bare_port && (!absl::SimpleAtoi(value, &port) || port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health-listen: port must be in 0-65535, got ", Quote(value)));
  }
  const std::string address = bare_port ? absl::StrCat("127.0.0.1:", port) : value;
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health-listen: expected PORT or HOST:PORT, got ", Quote(value)));
  }
  if (!IsLoopbackAddress(address) && !insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--health-listen ", Quote(value),
        " is beyond loopback: the health endpoint is plaintext without authentication; "
        "pass --insecure to allow it"));
  }
  return address;
}

HealthServer::HealthServer(std::function<bool()> serving, absl::Duration poll,
                           std::string service_name)
    : serving_(std::move(serving)), poll_(poll), service_name_(std::move(service_name)) {}

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(
    const std::string& address, std::function<bool()> serving, absl::Duration poll,
    const std::string& service_name) {
  // Process-wide, read when a server is built: gRPC then adds grpc.health.v1.Health.
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<HealthServer> h(new HealthServer(std::move(serving), poll, service_name));
  grpc::ServerBuilder builder;
  // gRPC's default SO_REUSEPORT would let a second worker on this host share the port:
  // the kubelet's probes would then reach either worker at random.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &h->port_);
  builder.RegisterCallbackGenericService(&h->unimplemented_);
  h->server_ = builder.BuildAndStart();
  if (h->server_ == nullptr || h->port_ == 0) {
    if (absl::Status why = ProbeListen("--health-listen", address); !why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("--health-listen ", Quoted(address), ": gRPC could not listen there"));
  }
  // NOT_SERVING until the first poll says otherwise: a worker that never reached its
  // controller must not look ready.
  h->server_->GetHealthCheckService()->SetServingStatus("", false);
  h->server_->GetHealthCheckService()->SetServingStatus(h->service_name_, false);
  h->server_->GetHealthCheckService()->SetServingStatus(kLivenessService, true);
  h->poller_ = std::thread([raw = h.get()] { raw->Poll(); });
  return h;
}

void HealthServer::Poll() {
  bool last = false;
  while (true) {
    const bool now = serving_();
    if (now != last) {
      spdlog::info("health: {}", now ? "SERVING (registered with the controller)"
                                     : "NOT_SERVING (not registered with the controller)");
      server_->GetHealthCheckService()->SetServingStatus("", now);
      server_->GetHealthCheckService()->SetServingStatus(service_name_, now);
      last = now;
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), poll_)) return;
  }
}

void HealthServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (poller_.joinable()) poller_.join();
  if (server_ != nullptr) {
    // Shutdown() itself also marks every service NOT_SERVING; say it first so a probe
    // that races the stop sees the worker going away rather than an error.
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
}

HealthServer::~HealthServer() { Shutdown(); }

}  // namespace trainyard
