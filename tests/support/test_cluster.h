// A controller and named workers on loopback for integration tests: the real binaries,
// each in its own process group, with logs and data under dir(). Jobs are submitted and
// followed through the real CLI (`trainyard submit/get/watch --output json`).
//
// By default everything speaks plaintext on loopback; after EnableTls() the controller
// serves TLS, workers present certificates (mutual TLS) and the CLI verifies the
// controller, with certificates made by deploy/make-certs.sh under dir()/certs.
//
// Not thread-safe: one test thread drives it. Everything it started is SIGKILLed when it
// dies; dir() is removed unless KeepFiles() was called (a failing test keeps its logs).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/test_process.h"

namespace trainyard::testing {

struct ClusterBinaries {
  std::string controller;
  std::string worker;
  std::string cli;
  std::string make_certs;  // deploy/make-certs.sh; needed only for EnableTls
};

struct WorkerOptions {
  std::string name;
  int slots = 1;
  // NAME=VALUE pairs added to the worker's environment (its ranks inherit them).
  std::vector<std::string> env;
  // With TLS: the worker presents BASE.pem/BASE.key of tls_cert_dir (defaults: the
  // cluster's certs_dir() and "worker-NAME") and verifies the controller against the
  // cluster's CA.
  std::string tls_cert_dir;
  std::string tls_cert_base;
  // Leave out --name, so the worker takes it from its certificate (TLS only).
  bool name_from_certificate = false;
  // More worker flags, appended last (--gpus, --nccl-env, --rank-binary, ...).
  std::vector<std::string> extra_args;
  // The --controller address ("": the cluster's), e.g. a proxy a test can cut.
  std::string controller;
};

#if defined(TRAINYARD_CONTROLLER) && defined(TRAINYARD_WORKER) && defined(TRAINYARD_CLI)
// This build's programs, as tests/CMakeLists.txt's trainyard_test_programs() defines
// them for a test target.
inline const ClusterBinaries kBuiltBinaries{TRAINYARD_CONTROLLER, TRAINYARD_WORKER, TRAINYARD_CLI,
                                            TRAINYARD_MAKE_CERTS};
#endif

// A worker called `name` with one slot, the rest at the defaults.
inline WorkerOptions OneSlotWorker(const std::string& name) {
  WorkerOptions w;
  w.name = name;
  return w;
}

// proto3 JSON writes 64-bit integers as strings.
int64_t JsonInt(const nlohmann::json& v);
// The JSON objects among the lines of `text` (other lines are skipped).
std::vector<nlohmann::json> JsonLines(const std::string& text);
// Whether `pred` holds within `timeout_ms`, asking every 100 ms.
bool Eventually(const std::function<bool()>& pred, int timeout_ms);
// An RFC 3339 UTC time as proto JSON prints it (0, 3, 6 or 9 fraction digits) in
// seconds since an arbitrary day, for ordering within a month; the digits as one
// string would put "…:05Z" after "…:05.5Z". -1 for text too short to be one.
double RfcSeconds(const std::string& t);
// A loopback TCP port that was free a moment ago (0 when none could be bound).
int FreeLoopbackPort();

// A running `trainyard watch JOB --output json`, read as it grows.
class EventFollower {
 public:
  // `connection_args`: --controller and the TLS/token flags (TestCluster::ConnectionArgs).
  EventFollower(const ClusterBinaries& bins, const std::vector<std::string>& connection_args, const std::string& id,
                const std::string& log_path);
  // Every event written so far.
  std::vector<nlohmann::json> Events() const;
  // Waits up to timeout_ms for an event matching `pred` and returns it.
  std::optional<nlohmann::json> WaitFor(const std::function<bool(const nlohmann::json&)>& pred, int timeout_ms) const;
  // Waits for the watch to end (the job ended) and returns every event.
  std::vector<nlohmann::json> WaitEnd();

 private:
  std::string log_path_;
  std::unique_ptr<TestProcess> process_;
};

class TestCluster {
 public:
  TestCluster(ClusterBinaries bins, const std::string& tag);
  ~TestCluster();

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& address() const { return address_; }
  void KeepFiles() { keep_ = true; }

  // Makes a CA, the controller's certificate and one per worker and client name under
  // certs_dir() with bins.make_certs; every later start (and the CLI) uses TLS. False
  // (and a test failure) when the script failed.
  bool EnableTls(const std::vector<std::string>& workers, const std::vector<std::string>& clients = {});
  // Runs bins.make_certs into `out` (e.g. a second CA); false when it failed.
  bool MakeCerts(const std::filesystem::path& out, const std::vector<std::string>& workers,
                 const std::vector<std::string>& clients) const;
  bool tls() const { return tls_; }
  std::filesystem::path certs_dir() const { return dir_ / "certs"; }
  // Every later CLI call (and EventFollower) passes --token-file `path` ("" for none).
  void SetCliTokenFile(const std::string& path) { cli_token_file_ = path; }
  // --controller ADDRESS, plus --tls-ca and --token-file when set.
  std::vector<std::string> ConnectionArgs() const;

  // Starts the controller on a free port; false when it did not write its port.
  bool StartController(const std::vector<std::string>& extra_args = {});
  // SIGKILLs the controller (a crash: nothing is flushed or closed).
  void KillController();
  // The running controller's pid, -1 when none was started.
  int controller_pid() const;
  // Sends `signal` to the controller (SIGHUP: re-read --token-file).
  void SignalController(int signal);
  // Starts the controller again on the same address and data dir, with the arguments
  // StartController was given; false when it did not come up.
  bool RestartController();
  void StartWorker(const WorkerOptions& options);
  // SIGKILLs the worker daemon (not its ranks, which run in their own groups).
  void KillWorker(const std::string& name);
  // Sends `signal` to the worker daemon only (SIGSTOP/SIGCONT: a worker that falls
  // silent while its ranks, in their own groups, train on).
  void SignalWorker(const std::string& name, int signal);
  // Waits until `trainyard workers` lists every name as connected.
  bool WaitConnected(const std::vector<std::string>& names, int timeout_ms);

  CommandResult Cli(std::vector<std::string> args) const;
  // `trainyard submit FILE --set ...`; returns the job id ("" and a test failure on error).
  std::string Submit(const std::string& job_file, const std::vector<std::string>& sets) const;
  // `trainyard get ID --output json`.
  nlohmann::json Get(const std::string& id) const;
  std::unique_ptr<EventFollower> Follow(const std::string& id, const std::string& log_name) const;

 private:
  ClusterBinaries bins_;
  std::filesystem::path dir_;
  std::string address_;
  bool keep_ = false;
  std::unique_ptr<TestProcess> controller_;
  std::vector<std::string> controller_args_;
  std::map<std::string, std::unique_ptr<TestProcess>> workers_;
  int next_port_base_ = 0;
  int workers_started_ = 0;
  bool tls_ = false;
  std::string cli_token_file_;

  // The controller's --tls-* flags (none without TLS).
  std::vector<std::string> ControllerTlsArgs() const;
};

// Of `events`, the step losses reported by `attempt` (0: any), by step.
std::map<int64_t, double> LossesByStep(const std::vector<nlohmann::json>& events, int attempt);
// The pids of the ranks of `attempt` from their RUNNING rank_state events, by rank;
// with a worker name, only that worker's ranks.
std::map<int, pid_t> RankPids(const std::vector<nlohmann::json>& events, int attempt, const std::string& worker = "");

}  // namespace trainyard::testing
