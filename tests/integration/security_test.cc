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

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include "tests/support/test_cluster.h"
#include "tests/support/files.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";

// Waits up to timeout_ms for `needle` to appear in the file at `path`.
bool WaitForLog(const fs::path& path, const std::string& needle, int timeout_ms) {
  return WaitUntil([&] { return ReadFileOrEmpty(path).find(needle) != std::string::npos; },
                   std::chrono::milliseconds(timeout_ms), std::chrono::milliseconds(50));
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "security");
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
      RunCommand({kBuiltBinaries.cli, "workers", "--controller", cluster_->address(), "--timeout", "60"});
  EXPECT_EQ(r.exit_code, 5);  // UNAVAILABLE
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
  const CommandResult r = RunCommand({kBuiltBinaries.cli, "workers", "--controller", cluster_->address(), "--tls-ca",
                                      (other / "ca.pem").string(), "--timeout", "60"});
  EXPECT_EQ(r.exit_code, 5);  // UNAVAILABLE
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("its certificate is not signed by that CA"), std::string::npos) << r.err;
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

// ---- Tokens and roles, on the same TLS listener ----

// The token file line of `token`: sha256 hex, role, owner.
std::string TokenLine(const std::string& token, const std::string& role, const std::string& owner) {
  const CommandResult r = RunCommand({"/bin/sh", "-c", "printf '%s' \"$0\" | /usr/bin/sha256sum", token});
  return r.out.substr(0, 64) + " " + role + " " + owner + "\n";
}

class SecurityTokensTest : public SecurityTest {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "security-tokens");
    ASSERT_TRUE(cluster_->EnableTls({"w1", "w2"}, {}));
    tokens_ = cluster_->dir() / "tokens";
    {
      std::ofstream out(tokens_);
      out << "# test fleet\n"
          << TokenLine("alice-secret-1", "submitter", "alice") << TokenLine("bob-secret-2", "submitter", "bob")
          << TokenLine("vic-secret-3", "viewer", "vic");
    }
    fs::permissions(tokens_, fs::perms::owner_read | fs::perms::owner_write);
    for (const auto& [who, token] : {std::pair<std::string, std::string>{"alice", "alice-secret-1"},
                                     {"bob", "bob-secret-2"}, {"vic", "vic-secret-3"}, {"root", "root-secret-4"}}) {
      std::ofstream(cluster_->dir() / (who + ".token")) << token << "\n";
    }
    ASSERT_TRUE(cluster_->StartController({"--token-file", tokens_.string()}))
        << "see " << cluster_->dir() / "controller.log";
  }
  // Runs the CLI as `who` ("" for no token).
  CommandResult As(const std::string& who, std::vector<std::string> args) {
    cluster_->SetCliTokenFile(who.empty() ? "" : (cluster_->dir() / (who + ".token")).string());
    return cluster_->Cli(std::move(args));
  }
  fs::path tokens_;
};

// No token: UNAUTHENTICATED; a viewer's cancel: PERMISSION_DENIED; a submitter cannot
// see another owner's job in list, get or watch; a token added to the file works after
// SIGHUP; no token is ever echoed.
TEST_F(SecurityTokensTest, RolesDecideWhoSeesAndChangesWhat) {
  const CommandResult none = As("", {"list"});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("UNAUTHENTICATED: no bearer token"), std::string::npos) << none.err;
  const CommandResult wrong = As("root", {"list"});  // not in the file yet
  EXPECT_NE(wrong.err.find("UNAUTHENTICATED: unknown token"), std::string::npos) << wrong.err;
  EXPECT_EQ(wrong.err.find("root-secret-4"), std::string::npos) << "a token is never echoed";

  cluster_->SetCliTokenFile((cluster_->dir() / "alice.token").string());  // TestCluster's own CLI calls
  cluster_->StartWorker({.name = "w1", .slots = 1, .name_from_certificate = true});
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000));
  const std::string id = cluster_->Submit(kDebugJob, {"parallelism.dp=1", "training.steps=400"});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(cluster_->Get(id).value("owner", ""), "alice");

  // bob (another submitter) sees nothing of alice's job.
  const CommandResult bob_list = As("bob", {"list", "--output", "json"});
  EXPECT_EQ(bob_list.exit_code, 0) << bob_list.err;
  EXPECT_EQ(bob_list.out.find(id), std::string::npos) << bob_list.out;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get", id}, {"watch", id, "--output", "json"}, {"cancel", id}}) {
    const CommandResult r = As("bob", args);
    EXPECT_NE(r.exit_code, 0) << args[0];
    EXPECT_NE(r.err.find("NOT_FOUND: job " + id + " not found"), std::string::npos) << args[0] << ": " << r.err;
  }
  // vic (viewer) sees it and cannot cancel it.
  const CommandResult vic_list = As("vic", {"list", "--output", "json"});
  EXPECT_NE(vic_list.out.find(id), std::string::npos) << vic_list.out;
  const CommandResult vic_cancel = As("vic", {"cancel", id});
  EXPECT_NE(vic_cancel.exit_code, 0);
  EXPECT_NE(vic_cancel.err.find("PERMISSION_DENIED"), std::string::npos) << vic_cancel.err;
  const CommandResult vic_submit = As("vic", {"submit", kDebugJob});
  EXPECT_NE(vic_submit.err.find("PERMISSION_DENIED"), std::string::npos) << vic_submit.err;

  // An admin added to the file is accepted after SIGHUP, and may cancel alice's job.
  { std::ofstream(tokens_, std::ios::app) << TokenLine("root-secret-4", "admin", "root"); }
  cluster_->SignalController(SIGHUP);
  CommandResult root_list;
  for (int waited = 0; waited < 20000; waited += 200) {
    root_list = As("root", {"list", "--output", "json"});
    if (root_list.exit_code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_EQ(root_list.exit_code, 0) << root_list.err;
  EXPECT_NE(root_list.out.find(id), std::string::npos);
  const CommandResult root_cancel = As("root", {"cancel", id});
  EXPECT_EQ(root_cancel.exit_code, 0) << root_cancel.err;
  cluster_->SetCliTokenFile((cluster_->dir() / "alice.token").string());
  cluster_->Follow(id, "events.jsonl")->WaitEnd();
  EXPECT_EQ(cluster_->Get(id).value("state", ""), "CANCELLED");
  EXPECT_EQ(ReadFileOrEmpty(ControllerLog()).find("secret"), std::string::npos) << "no token in the log";
}

// ---- A hostile worker with a valid certificate ----

std::shared_ptr<grpc::Channel> WorkerChannel(const TestCluster& cluster, const std::string& name) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFileOrEmpty(cluster.certs_dir() / "ca.pem");
  ssl.pem_cert_chain = ReadFileOrEmpty(cluster.certs_dir() / ("worker-" + name + ".pem"));
  ssl.pem_private_key = ReadFileOrEmpty(cluster.certs_dir() / ("worker-" + name + ".key"));
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  return grpc::CreateCustomChannel(cluster.address(), grpc::SslCredentials(ssl), args);
}

// Writes `msgs` on one Connect stream and returns how it ended.
grpc::Status Stream(const std::shared_ptr<grpc::Channel>& channel, const std::vector<v1::WorkerMessage>& msgs) {
  auto stub = v1::WorkerService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->Connect(&ctx);
  for (const auto& m : msgs) {
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  v1::ControllerMessage in;
  while (stream->Read(&in)) {
  }
  return stream->Finish();
}

v1::WorkerMessage Register(const std::string& name) {
  v1::WorkerMessage m;
  m.mutable_register_()->set_name(name);
  m.mutable_register_()->set_slots(1);
  m.mutable_register_()->set_address("127.0.0.1");
  m.mutable_register_()->set_rendezvous_port_min(42000);
  m.mutable_register_()->set_rendezvous_port_max(42001);
  return m;
}

// A worker with a CA-signed certificate sends an oversized batch, a batch of more events
// than any worker sends, and forged events for the rank another worker runs: the first
// two end its stream with a precise status, the forgeries are dropped, and the job on
// the real worker trains on to SUCCEEDED while list keeps working.
TEST_F(SecurityTest, MalformedOrOversizedBatchesFromAWorkerLeaveEveryOtherJobServed) {
  cluster_->StartWorker({.name = "w1", .slots = 1, .name_from_certificate = true});
  ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000));
  const std::string id = cluster_->Submit(kDebugJob, {"parallelism.dp=1", "training.steps=30"});
  ASSERT_FALSE(id.empty());
  auto follower = cluster_->Follow(id, "events.jsonl");
  ASSERT_TRUE(follower->WaitFor([](const json& e) { return e.contains("step_metrics"); }, 120000));

  auto channel = WorkerChannel(*cluster_, "w2");
  v1::WorkerMessage huge;
  huge.mutable_events()->set_batch_id(1);
  v1::Event* big = huge.mutable_events()->add_events();
  big->set_job_id(id);
  big->set_attempt(1);
  big->mutable_log()->set_message(std::string(9 << 20, 'x'));  // past the 8 MiB request cap
  const grpc::Status s1 = Stream(channel, {Register("w2"), huge});
  EXPECT_EQ(s1.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s1.error_message().substr(0, 200);
  EXPECT_LT(s1.error_message().size(), 300u);

  v1::WorkerMessage flood;
  flood.mutable_events()->set_batch_id(2);
  for (int i = 0; i < 10001; ++i) {
    v1::Event* e = flood.mutable_events()->add_events();
    e->set_job_id(id);
    e->set_attempt(1);
    e->set_rank(0);
    e->set_source_seq(i + 1);
    e->mutable_log()->set_message("x");
  }
  const grpc::Status s2 = Stream(channel, {Register("w2"), flood});
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s2.error_message().substr(0, 200);
  EXPECT_NE(s2.error_message().find("EventBatch.events"), std::string::npos) << s2.error_message().substr(0, 200);

  v1::WorkerMessage forged;
  forged.mutable_events()->set_batch_id(3);
  v1::Event* exited = forged.mutable_events()->add_events();
  exited->set_job_id(id);
  exited->set_attempt(1);
  exited->set_rank(0);
  exited->set_source_seq(1000000);
  exited->mutable_rank_state()->set_state(v1::RankState::EXITED);
  EXPECT_TRUE(Stream(channel, {Register("w2"), forged}).ok());

  const CommandResult list = cluster_->Cli({"list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  const std::vector<json> events = follower->WaitEnd();
  EXPECT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED");
  int64_t last_step = 0;
  for (const json& e : events) {
    if (e.contains("step_metrics")) last_step = std::max(last_step, JsonInt(e["step_metrics"]["step"]));
  }
  EXPECT_EQ(last_step, 30) << "the job trained to its end, not cut short by a forged EXITED";
}

}  // namespace
}  // namespace trainyard::testing
