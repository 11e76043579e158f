// A fleet on a NetnsFabric with the production set-up: the controller in host "ctl" at
// 198.18.0.1:7070 serving mutual TLS with deploy/make-certs.sh's certificates (its
// certificate carries IP:198.18.0.1) and a --token-file; each worker in its own host
// (w1 at 198.18.0.11, w2 at .12, ...) with its certificate, --address its own address
// (its ranks' Gloo binds there and other hosts' ranks reach it there); the CLI, run in
// the controller's host (an operator on that machine), with --tls-ca and --token-file
// (an admin token). Checkpoints go to shared_dir(), one folder every namespace sees.
//
// Files (certificates, logs, data, checkpoints) live under dir(), kept when a test
// failed. Not thread-safe: one test thread drives it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/multihost/netns_fabric.h"
#include "tests/support/test_cluster.h"
#include "tests/support/test_process.h"

namespace trainyard::testing {

class MultihostCluster {
 public:
  static constexpr const char* kControllerHost = "ctl";
  static constexpr const char* kControllerIp = "198.18.0.1";

  // Makes the fabric, the controller's host and one host per worker name (w1 → .11,
  // w2 → .12, ...), the certificates and tokens. Check ok() (a test failure says why).
  MultihostCluster(const std::string& tag, const std::vector<std::string>& workers);
  ~MultihostCluster();

  bool ok() const { return ok_; }
  NetnsFabric& fabric() { return *fabric_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path shared_dir() const { return dir_ / "shared"; }
  std::string address() const { return std::string(kControllerIp) + ":7070"; }
  const std::vector<std::string>& workers() const { return workers_; }

  // The controller in its host, with `extra_args` (kept for RestartController); false
  // when it did not write its port file.
  bool StartController(const std::vector<std::string>& extra_args);
  void KillController();
  // The same address and data dir again; its log goes on in controller-N.log.
  bool RestartController();
  void StartWorker(const std::string& name);
  bool WaitConnected(const std::vector<std::string>& names, int timeout_ms);

  // The CLI in the controller's host, with --controller, --tls-ca and --token-file.
  CommandResult Cli(std::vector<std::string> args) const;
  std::string Submit(const std::string& job_file, const std::vector<std::string>& sets) const;
  nlohmann::json Get(const std::string& id) const;
  std::unique_ptr<EventFollower> Follow(const std::string& id, const std::string& log_name) const;
  // Every event of a job, replayed from the store by a fresh `watch` (it ends at once
  // for a job that has ended).
  std::vector<nlohmann::json> AllEvents(const std::string& id) const;
  // The trainyard-rank processes in the workers' hosts, by host.
  std::map<std::string, std::vector<pid_t>> RankProcesses() const;

 private:
  std::vector<std::string> ConnectionArgs() const;

  std::unique_ptr<NetnsFabric> fabric_;
  std::filesystem::path dir_;
  std::vector<std::string> workers_;
  bool ok_ = false;
  ClusterBinaries bins_;  // .cli is a script that runs the CLI in the controller's host
  std::vector<std::string> controller_args_;
  int controller_starts_ = 0;
  std::unique_ptr<TestProcess> controller_;
  std::map<std::string, std::unique_ptr<TestProcess>> worker_processes_;
};

}  // namespace trainyard::testing
