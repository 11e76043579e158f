#include "tests/multihost/multihost_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/base/sha256.h"
#include "tests/support/files.h"

namespace trainyard::testing {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

void WriteFile(const fs::path& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

}  // namespace

MultihostCluster::MultihostCluster(const std::string& tag, const std::vector<std::string>& workers)
    : fabric_(std::make_unique<NetnsFabric>()), workers_(workers) {
  dir_ = fs::temp_directory_path() / ("trainyard_multihost_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dir_);
  fs::create_directories(shared_dir());
  bins_ = kBuiltBinaries;
  if (!fabric_->ok()) {
    ADD_FAILURE() << "network namespaces: " << fabric_->error();
    return;
  }
  bool made = fabric_->AddHost(kControllerHost, kControllerIp);
  for (size_t i = 0; made && i < workers.size(); ++i) {
    made = fabric_->AddHost(workers[i], "198.18.0." + std::to_string(11 + i));
  }
  if (!made) {
    ADD_FAILURE() << "network namespaces: " << fabric_->error();
    return;
  }
  // Certificates as an operator makes them; the controller's names its fabric address.
  std::string names;
  for (const std::string& w : workers) names += (names.empty() ? "" : ",") + w;
  const CommandResult certs = RunCommand({"/bin/bash", bins_.make_certs, (dir_ / "certs").string(), "--workers",
                                          names, "--clients", "ops", "--controller-san",
                                          std::string("IP:") + kControllerIp, "--days", "2"});
  if (certs.exit_code != 0) {
    ADD_FAILURE() << "make-certs.sh: " << certs.out << certs.err;
    return;
  }
  // An admin token: the hash in the controller's file, the token in the CLI's.
  const std::string token = RandomHex(32);
  WriteFile(dir_ / "tokens", "# multihost test\n" + Sha256Hex(token) + " admin ops\n", 0644);
  WriteFile(dir_ / "cli-token", token + "\n", 0600);
  // The CLI (and every `watch`) runs in the controller's host.
  const fs::path cli = dir_ / "cli-in-ctl.sh";
  WriteFile(cli,
            "#!/bin/sh\nexec " + NetnsFabric::IpBinary() + " netns exec " + fabric_->Namespace(kControllerHost) +
                " " + kBuiltBinaries.cli + " \"$@\"\n",
            0755);
  bins_.cli = cli.string();
  ok_ = true;
}

MultihostCluster::~MultihostCluster() {
  worker_processes_.clear();
  controller_.reset();
  fabric_.reset();  // SIGKILLs whatever is left in the namespaces (ranks), deletes them
  if (!::testing::Test::HasFailure()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  } else {
    std::fprintf(stderr, "multihost: logs kept in %s\n", dir_.c_str());
  }
}

bool MultihostCluster::StartController(const std::vector<std::string>& extra_args) {
  controller_args_ = extra_args;
  return RestartController();
}

void MultihostCluster::KillController() {
  if (controller_) controller_->Kill();
}

bool MultihostCluster::RestartController() {
  const fs::path certs = dir_ / "certs";
  fs::remove(dir_ / "port");
  std::vector<std::string> argv = {bins_.controller, "--listen",      address(),
                                   "--data-dir",     (dir_ / "data").string(),
                                   "--port-file",    (dir_ / "port").string(),
                                   "--tls-cert",     (certs / "controller.pem").string(),
                                   "--tls-key",      (certs / "controller.key").string(),
                                   "--tls-ca",       (certs / "ca.pem").string(),
                                   "--token-file",   (dir_ / "tokens").string()};
  argv.insert(argv.end(), controller_args_.begin(), controller_args_.end());
  const std::string log = controller_starts_ == 0 ? "controller.log"
                                                  : "controller-" + std::to_string(controller_starts_ + 1) + ".log";
  ++controller_starts_;
  controller_ = std::make_unique<TestProcess>(fabric_->InHost(kControllerHost, argv), (dir_ / log).string());
  return !WaitForFile((dir_ / "port").string(), 20000).empty();
}

void MultihostCluster::StartWorker(const std::string& name) {
  size_t index = 0;
  while (index < workers_.size() && workers_[index] != name) ++index;
  ASSERT_LT(index, workers_.size()) << "no host for worker " << name;
  const fs::path certs = dir_ / "certs";
  const std::vector<std::string> argv = {
      bins_.worker,      "--controller",  address(),
      "--name",          name,
      "--address",       "198.18.0." + std::to_string(11 + index),
      "--slots",         "1",
      "--threads-per-rank", "1",
      "--gpus",          "none",
      "--rendezvous-ports", "29500-29509",
      "--work-dir",      (dir_ / ("worker-" + name)).string(),
      "--tls-cert",      (certs / ("worker-" + name + ".pem")).string(),
      "--tls-key",       (certs / ("worker-" + name + ".key")).string(),
      "--tls-ca",        (certs / "ca.pem").string()};
  worker_processes_[name] =
      std::make_unique<TestProcess>(fabric_->InHost(name, argv), (dir_ / ("worker-" + name + ".log")).string());
}

bool MultihostCluster::WaitConnected(const std::vector<std::string>& names, int timeout_ms) {
  return WaitUntil(
      [&] {
        const CommandResult r = Cli({"workers", "--output", "json"});
        size_t connected = 0;
        for (const json& w : JsonLines(r.out)) {
          for (const std::string& n : names) {
            if (w.value("name", "") == n && w.value("connected", false)) ++connected;
          }
        }
        return r.exit_code == 0 && connected == names.size();
      },
      std::chrono::milliseconds(timeout_ms), std::chrono::milliseconds(200));
}

std::vector<std::string> MultihostCluster::ConnectionArgs() const {
  return {"--controller", address(), "--tls-ca", (dir_ / "certs" / "ca.pem").string(), "--token-file",
          (dir_ / "cli-token").string()};
}

CommandResult MultihostCluster::Cli(std::vector<std::string> args) const {
  args.insert(args.begin(), bins_.cli);
  const std::vector<std::string> connection = ConnectionArgs();
  args.insert(args.end(), connection.begin(), connection.end());
  return RunCommand(args);
}

std::string MultihostCluster::Submit(const std::string& job_file, const std::vector<std::string>& sets) const {
  std::vector<std::string> args = {"submit", job_file, "--output", "json"};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  const CommandResult r = Cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> lines = JsonLines(r.out);
  return r.exit_code != 0 || lines.empty() ? "" : lines[0].value("id", "");
}

json MultihostCluster::Get(const std::string& id) const {
  const CommandResult r = Cli({"get", id, "--output", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> lines = JsonLines(r.out);
  return lines.empty() ? json::object() : lines[0];
}

std::unique_ptr<EventFollower> MultihostCluster::Follow(const std::string& id, const std::string& log_name) const {
  return std::make_unique<EventFollower>(bins_, ConnectionArgs(), id, (dir_ / log_name).string());
}

std::vector<json> MultihostCluster::AllEvents(const std::string& id) const {
  const CommandResult r = Cli({"watch", id, "--output", "json", "--from-seq", "1"});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << "watch " << id << ": " << r.err;
  return JsonLines(r.out);
}

std::map<std::string, std::vector<pid_t>> MultihostCluster::RankProcesses() const {
  std::map<std::string, std::vector<pid_t>> out;
  for (const std::string& w : workers_) {
    std::vector<pid_t> pids = fabric_->PidsNamed(w, "trainyard-rank");
    if (!pids.empty()) out[w] = std::move(pids);
  }
  return out;
}

}  // namespace trainyard::testing
