// Transport security end to end: the real controller serving TLS on loopback, real
// workers with certificates from deploy/make-certs.sh (mutual TLS), the real CLI. Who may
// be a worker is decided by the certificate: one from another CA fails the handshake, a
// client certificate is not a worker's, and a worker cannot register under a name other
// than its certificate's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const ClusterBinaries kBins{TRAINYARD_CONTROLLER, TRAINYARD_WORKER, TRAINYARD_CLI, TRAINYARD_MAKE_CERTS};
const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits up to timeout_ms for `needle` to appear in the file at `path`.
bool WaitForLog(const fs::path& path, const std::string& needle, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ReadAll(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBins, "security");
    ASSERT_TRUE(cluster_->EnableTls({"w1", "w2"}, {"alice"}));
    ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir() / "controller.log";
  }
  void TearDown() override {
    if (HasFailure()) cluster_->KeepFiles();
  }

  // The names `trainyard workers` lists (over TLS).
  std::vector<std::string> WorkerNames() const {
    const CommandResult r = cluster_->Cli({"workers", "--output", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> names;
    for (const json& w : JsonLines(r.out)) names.push_back(w.value("name", ""));
    return names;
  }

  fs::path ControllerLog() const { return cluster_->dir() / "controller.log"; }

  std::unique_ptr<TestCluster> cluster_;
};

// (a) A certificate signed by another CA fails the TLS handshake: the worker never gets
// to send Register, so it is not listed, while a worker of the fleet's CA is.
TEST_F(SecurityTest, WorkerWithCertificateOfAnotherCaCannotConnect) {
  const fs::path other = cluster_->dir() / "other-ca";
  ASSERT_TRUE(cluster_->MakeCerts(other, {"rogue"}, {}));
  cluster_->StartWorker({.name = "rogue", .tls_cert_dir = other.string()});
  ASSERT_TRUE(WaitForLog(ControllerLog(), "certificate verify failed", 20000))
      << "the controller never refused the rogue worker's handshake";
  cluster_->StartWorker({.name = "w1"});
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000));
  EXPECT_EQ(WorkerNames(), std::vector<std::string>{"w1"});
}

// (b) A plaintext client against the TLS port fails at once with a clear message (the
// call's deadline is long, so a hang would show as a timeout here).
TEST_F(SecurityTest, PlaintextClientAgainstTlsPortFailsCleanly) {
  const CommandResult r =
      RunCommand({kBins.cli, "workers", "--controller", cluster_->address(), "--timeout", "60"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a controller that serves TLS needs --tls-ca"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("DEADLINE_EXCEEDED"), std::string::npos) << r.err;
  // The same command with the CA works.
  const CommandResult ok = cluster_->Cli({"workers"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// A CLI that trusts another CA refuses the controller's certificate.
TEST_F(SecurityTest, ClientWithAnotherCaRefusesTheController) {
  const fs::path other = cluster_->dir() / "other-ca";
  ASSERT_TRUE(cluster_->MakeCerts(other, {}, {}));
  const CommandResult r = RunCommand({kBins.cli, "workers", "--controller", cluster_->address(), "--tls-ca",
                                      (other / "ca.pem").string(), "--timeout", "60"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

// (c) A client certificate of the fleet's CA (OU=trainyard-client) is not a worker's.
TEST_F(SecurityTest, WorkerWithClientCertificateIsRefused) {
  cluster_->StartWorker({.name = "alice", .tls_cert_base = "client-alice", .name_from_certificate = true});
  ASSERT_TRUE(WaitForLog(ControllerLog(),
                         "the client certificate 'CN=alice,OU=trainyard-client,O=trainyard' is not a "
                         "worker certificate (its subject has no OU=trainyard-worker)",
                         20000));
  cluster_->StartWorker({.name = "w1"});
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000));
  EXPECT_EQ(WorkerNames(), std::vector<std::string>{"w1"});
}

// (e) Register.name must be the certificate's CN: w2's certificate cannot register w1.
TEST_F(SecurityTest, RegisterUnderAnotherNameThanTheCertificateIsRefused) {
  cluster_->StartWorker({.name = "w1", .tls_cert_base = "worker-w2"});
  ASSERT_TRUE(WaitForLog(ControllerLog(),
                         "Register.name 'w1' differs from the name in the worker's certificate 'w2'", 20000));
  EXPECT_TRUE(WorkerNames().empty());
}

// (d) A job runs to SUCCEEDED on a TLS fleet, its profiler trace uploaded over the
// worker's mutual-TLS channel (ArtifactHeader.worker checked against the certificate).
// The worker takes its name from its certificate.
TEST_F(SecurityTest, JobSucceedsOnTlsFleetAndItsTraceIsUploaded) {
  cluster_->StartWorker({.name = "w1", .slots = 1, .name_from_certificate = true});
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000));
  const std::string id = cluster_->Submit(
      kDebugJob, {"parallelism.dp=1", "training.steps=6", "restart.max_restarts=0", "profiling.enable=true",
                  "profiling.freq=5", "profiling.warmup=1", "profiling.active=2"});
  ASSERT_FALSE(id.empty());
  const std::vector<json> events = cluster_->Follow(id, "events.jsonl")->WaitEnd();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED");
  bool uploaded = false;
  for (int waited = 0; waited < 60000 && !uploaded; waited += 200) {
    const CommandResult r = cluster_->Cli({"artifacts", "list", id, "--output", "json"});
    for (const json& a : JsonLines(r.out)) uploaded = uploaded || a.value("kind", "") == "trace";
    if (!uploaded) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(uploaded) << "no trace artifact arrived; see " << cluster_->dir();
}

// ---- Tokens and roles ----
// The acceptance tests of bearer tokens (no token -> UNAUTHENTICATED, a viewer's cancel
// -> PERMISSION_DENIED, a submitter sees only its own jobs) go here once the controller
// checks --token-file: start the controller with {"--token-file", PATH} and give each CLI
// call its token with cluster_->SetCliTokenFile(FILE) (TestCluster passes --token-file).

}  // namespace
}  // namespace trainyard::testing
