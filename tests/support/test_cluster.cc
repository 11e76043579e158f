#include "tests/support/test_cluster.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/files.h"
#include "tests/support/ports.h"

namespace trainyard::testing {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {}  // namespace

int64_t JsonInt(const json& v) { return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>(); }

std::vector<json> JsonLines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) out.push_back(std::move(j));  // a line still being written
  }
  return out;
}

bool Eventually(const std::function<bool()>& pred, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 100) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

double RfcSeconds(const std::string& t) {
  if (t.size() < 20) return -1;
  const int day = std::stoi(t.substr(8, 2)), h = std::stoi(t.substr(11, 2)), m = std::stoi(t.substr(14, 2));
  const double s = std::stod(t.substr(17, t.size() - 18));  // "05.5" of "05.5Z"
  return ((day * 24.0 + h) * 60 + m) * 60 + s;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// ---- EventFollower ----

namespace {
std::vector<std::string> WatchArgv(const ClusterBinaries& bins, const std::vector<std::string>& connection_args,
                                   const std::string& id) {
  std::vector<std::string> argv = {bins.cli, "watch", id, "--output", "json"};
  argv.insert(argv.end(), connection_args.begin(), connection_args.end());
  return argv;
}
}  // namespace

EventFollower::EventFollower(const ClusterBinaries& bins, const std::vector<std::string>& connection_args,
                             const std::string& id, const std::string& log_path)
    : log_path_(log_path), process_(std::make_unique<TestProcess>(WatchArgv(bins, connection_args, id), log_path)) {}

std::vector<json> EventFollower::Events() const { return JsonLines(ReadFileOrEmpty(log_path_)); }

std::optional<json> EventFollower::WaitFor(const std::function<bool(const json&)>& pred, int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const json& e : Events()) {
      if (pred(e)) return e;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

std::vector<json> EventFollower::WaitEnd() {
  process_->Wait();
  return Events();
}

// ---- TestCluster ----

TestCluster::TestCluster(ClusterBinaries bins, const std::string& tag) : bins_(std::move(bins)) {
  dir_ = fs::temp_directory_path() / ("trainyard_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  // Four workers' rendezvous ranges of 10, below the ephemeral ports (ports.h).
  next_port_base_ = RendezvousPortBase(40);
}

TestCluster::~TestCluster() {
  workers_.clear();
  controller_.reset();
  if (!keep_ && !::testing::Test::HasFailure()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

bool TestCluster::MakeCerts(const fs::path& out, const std::vector<std::string>& workers,
                            const std::vector<std::string>& clients) const {
  auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
    return s;
  };
  std::vector<std::string> argv = {"/bin/bash", bins_.make_certs, out.string()};
  if (!workers.empty()) argv.insert(argv.end(), {"--workers", join(workers)});
  if (!clients.empty()) argv.insert(argv.end(), {"--clients", join(clients)});
  const CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return r.exit_code == 0;
}

bool TestCluster::EnableTls(const std::vector<std::string>& workers, const std::vector<std::string>& clients) {
  tls_ = MakeCerts(certs_dir(), workers, clients);
  return tls_;
}

std::vector<std::string> TestCluster::ControllerTlsArgs() const {
  if (!tls_) return {};
  return {"--tls-cert", (certs_dir() / "controller.pem").string(),
          "--tls-key",  (certs_dir() / "controller.key").string(),
          "--tls-ca",   (certs_dir() / "ca.pem").string()};
}

std::vector<std::string> TestCluster::ConnectionArgs() const {
  std::vector<std::string> args = {"--controller", address_};
  if (tls_) args.insert(args.end(), {"--tls-ca", (certs_dir() / "ca.pem").string()});
  if (!cli_token_file_.empty()) args.insert(args.end(), {"--token-file", cli_token_file_});
  return args;
}

bool TestCluster::StartController(const std::vector<std::string>& extra_args) {
  fs::remove(dir_ / "port");
  std::vector<std::string> argv = {bins_.controller,         "--listen",    "127.0.0.1:0",           "--data-dir",
                                   (dir_ / "data").string(), "--port-file", (dir_ / "port").string()};
  const std::vector<std::string> tls = ControllerTlsArgs();
  argv.insert(argv.end(), tls.begin(), tls.end());
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  controller_args_ = extra_args;
  controller_ = std::make_unique<TestProcess>(argv, (dir_ / "controller.log").string());
  const std::string port = WaitForFile((dir_ / "port").string(), 20000);
  address_ = port.empty() ? "" : "127.0.0.1:" + std::to_string(std::stoi(port));
  return !address_.empty();
}

void TestCluster::KillController() {
  if (controller_) controller_->Kill();
}

int TestCluster::controller_pid() const { return controller_ ? controller_->pid() : -1; }

void TestCluster::SignalController(int signal) {
  if (controller_ && controller_->pid() > 0) ::kill(controller_->pid(), signal);
}

bool TestCluster::RestartController() {
  if (address_.empty()) return false;
  fs::remove(dir_ / "port");
  std::vector<std::string> argv = {
      bins_.controller,        "--listen", address_, "--data-dir", (dir_ / "data").string(), "--port-file",
      (dir_ / "port").string()};
  const std::vector<std::string> tls = ControllerTlsArgs();
  argv.insert(argv.end(), tls.begin(), tls.end());
  argv.insert(argv.end(), controller_args_.begin(), controller_args_.end());
  // The log continues in a second file, so the first run's stays readable.
  controller_ = std::make_unique<TestProcess>(argv, (dir_ / "controller-2.log").string());
  return !WaitForFile((dir_ / "port").string(), 20000).empty();
}

void TestCluster::StartWorker(const WorkerOptions& options) {
  std::vector<std::string> argv;
  if (!options.env.empty()) {
    argv.push_back("/usr/bin/env");
    argv.insert(argv.end(), options.env.begin(), options.env.end());
  }
  // Each worker its own 10 of the cluster's 40 ports; a fifth shares the first's.
  const int base = next_port_base_ + (workers_started_++ % 4) * 10;
  const std::vector<std::string> worker = {bins_.worker,
                                           "--controller",
                                           options.controller.empty() ? address_ : options.controller,
                                           "--slots",
                                           std::to_string(options.slots),
                                           "--rendezvous-ports",
                                           std::to_string(base) + "-" + std::to_string(base + 9),
                                           "--work-dir",
                                           (dir_ / ("worker-" + options.name)).string()};
  argv.insert(argv.end(), worker.begin(), worker.end());
  if (!options.name_from_certificate) argv.insert(argv.end(), {"--name", options.name});
  if (tls_) {
    const fs::path cert_dir = options.tls_cert_dir.empty() ? certs_dir() : fs::path(options.tls_cert_dir);
    const std::string base_name = options.tls_cert_base.empty() ? "worker-" + options.name : options.tls_cert_base;
    argv.insert(argv.end(),
                {"--tls-cert", (cert_dir / (base_name + ".pem")).string(), "--tls-key",
                 (cert_dir / (base_name + ".key")).string(), "--tls-ca", (certs_dir() / "ca.pem").string()});
  }
  // A test asks for GPUs (the fake NVML) explicitly; others run CPU workers even on a
  // host whose NVML would offer its GPUs (and then cap --slots at their number).
  const bool gpus_asked = std::find_if(options.extra_args.begin(), options.extra_args.end(), [](const std::string& a) {
                            return a == "--gpus" || a == "--nvml-library";
                          }) != options.extra_args.end();
  if (!gpus_asked) argv.insert(argv.end(), {"--gpus", "none"});
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  workers_[options.name] = std::make_unique<TestProcess>(argv, (dir_ / ("worker-" + options.name + ".log")).string());
}

void TestCluster::KillWorker(const std::string& name) {
  auto it = workers_.find(name);
  if (it != workers_.end()) it->second->Kill();
}

void TestCluster::SignalWorker(const std::string& name, int signal) {
  auto it = workers_.find(name);
  if (it != workers_.end() && it->second->pid() > 0) ::kill(it->second->pid(), signal);
}

bool TestCluster::WaitConnected(const std::vector<std::string>& names, int timeout_ms) {
  for (int waited = 0; waited < timeout_ms; waited += 100) {
    const CommandResult r = Cli({"workers", "--output", "json"});
    size_t connected = 0;
    for (const json& w : JsonLines(r.out)) {
      for (const std::string& n : names) {
        if (w.value("name", "") == n && w.value("connected", false)) ++connected;
      }
    }
    if (r.exit_code == 0 && connected == names.size()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

CommandResult TestCluster::Cli(std::vector<std::string> args) const {
  args.insert(args.begin(), bins_.cli);
  const std::vector<std::string> connection = ConnectionArgs();
  args.insert(args.end(), connection.begin(), connection.end());
  return RunCommand(args);
}

std::string TestCluster::Submit(const std::string& job_file, const std::vector<std::string>& sets) const {
  std::vector<std::string> args = {"submit", job_file, "--output", "json"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  const CommandResult r = Cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> lines = JsonLines(r.out);
  if (r.exit_code != 0 || lines.empty()) return "";
  return lines[0].value("id", "");
}

json TestCluster::Get(const std::string& id) const {
  const CommandResult r = Cli({"get", id, "--output", "json"});
  const std::vector<json> lines = JsonLines(r.out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return lines.empty() ? json::object() : lines[0];
}

std::unique_ptr<EventFollower> TestCluster::Follow(const std::string& id, const std::string& log_name) const {
  return std::make_unique<EventFollower>(bins_, ConnectionArgs(), id, (dir_ / log_name).string());
}

std::map<int64_t, double> LossesByStep(const std::vector<json>& events, int attempt) {
  std::map<int64_t, double> out;
  for (const json& e : events) {
    if (!e.contains("step_metrics")) continue;
    if (attempt != 0 && e.value("attempt", 0) != attempt) continue;
    const json& m = e.at("step_metrics");
    out[JsonInt(m.at("step"))] = m.value("loss", 0.0);
  }
  return out;
}

std::map<int, pid_t> RankPids(const std::vector<json>& events, int attempt, const std::string& worker) {
  std::map<int, pid_t> out;
  for (const json& e : events) {
    if (!e.contains("rank_state") || e.value("attempt", 0) != attempt) continue;
    const json& rs = e.at("rank_state");
    if (rs.value("state", "") != "RUNNING" || rs.value("pid", 0) <= 0) continue;
    if (!worker.empty() && rs.value("worker", "") != worker) continue;
    out[e.value("rank", 0)] = rs.value("pid", 0);
  }
  return out;
}

}  // namespace trainyard::testing
