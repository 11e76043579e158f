// Webhooks end to end: a real controller (with --webhooks), a worker and a tiny job's
// real ranks, the receivers in-process HTTP servers (tests/fakes/fake_http_server.h).
// The controller is killed with SIGKILL mid-job and restarted on its data dir: after
// deduplication by id, every state change of the job, as the API reads it back, arrives
// exactly once, each signed with the endpoint's secret; and a receiver that answers 500
// throughout holds none of it up.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/notify/webhook_payload.h"
#include "tests/fakes/fake_http_server.h"
#include "tests/support/files.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";
constexpr char kSecret[] = "integration-secret-0123456789";

bool SignedWith(const FakeHttpRequest& r, const std::string& secret) {
  for (const auto& [name, value] : r.headers) {
    if (name != "X-Trainyard-Signature") continue;
    const size_t comma = value.find(",v1=");
    if (value.rfind("t=", 0) != 0 || comma == std::string::npos) return false;
    return value.substr(comma + 4) == HmacSha256Hex(secret, value.substr(2, comma - 2) + "." + r.body);
  }
  return false;
}

TEST(WebhookTest, EveryStateChangeArrivesOnceAfterDedupAcrossAControllerKill) {
  FakeHttpServer receiver;
  // The first RUNNING delivery is held unanswered until the controller has been
  // killed: it dies with that POST in flight, so the delivery is still queued in its
  // webhooks.db and must come again after the restart.
  std::atomic<bool> holding{false}, release{false};
  receiver.Handle("/ops", [&](mg_connection* c, const FakeHttpRequest& r) {
    if (r.body.find("\"RUNNING\"") != std::string::npos && !holding.exchange(true)) {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FakeHttpServer::Reply(c, 200, "ok");
  });
  receiver.Handle("/dead", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 500, "down"); });

  TestCluster cluster(kBuiltBinaries, "webhook");
  const fs::path file = cluster.dir() / "webhooks.toml";
  std::ofstream(cluster.dir() / "ops.secret") << kSecret << "\n";
  std::ofstream(file) << "[delivery]\nbackoff_initial_s = 0.05\nbackoff_max_s = 0.2\nmax_attempts = 1000\n\n"
                      << "[[endpoint]]\nname = \"dead\"\nurl = \"" << receiver.Url("/dead") << "\"\n"
                      << "events = [\"state_change\"]\nsecret = \"another-secret-0123456789\"\n\n"
                      << "[[endpoint]]\nname = \"ops\"\nurl = \"" << receiver.Url("/ops") << "\"\n"
                      << "events = [\"state_change\", \"checkpoint\"]\nsecret_file = \"ops.secret\"\n";
  ASSERT_TRUE(cluster.StartController({"--webhooks", file.string()})) << "see " << cluster.dir();
  WorkerOptions worker;
  worker.name = "w1";
  cluster.StartWorker(worker);
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));
  const std::string id = cluster.Submit(kTinyJob, {"training.steps=400"});
  ASSERT_FALSE(id.empty());

  ASSERT_TRUE(WaitUntil([&] { return holding.load(); }, std::chrono::seconds(120)))
      << "RUNNING never arrived; see " << cluster.dir();
  cluster.KillController();
  release.store(true);
  ASSERT_TRUE(cluster.RestartController()) << ReadFileOrEmpty(cluster.dir() / "controller-2.log");
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));

  // The job's state changes, read back through the API after it ended.
  const std::vector<json> events = cluster.Follow(id, "events.jsonl")->WaitEnd();
  const std::string end = cluster.Get(id).value("state", "");
  ASSERT_EQ(end, "SUCCEEDED") << "see " << cluster.dir();
  std::set<std::string> expected;
  for (const json& e : events) {
    if (e.contains("job_state") || e.contains("checkpoint")) expected.insert(id + ":" + std::to_string(JsonInt(e.at("seq"))) + ":ops");
  }
  ASSERT_FALSE(expected.empty());
  ASSERT_TRUE(WaitUntil([&] {
    std::set<std::string> got;
    for (const auto& r : receiver.requests()) {
      if (r.path == "/ops") got.insert(json::parse(r.body)["id"]);
    }
    return got == expected;
  }, std::chrono::seconds(60))) << "see " << cluster.dir();

  std::map<std::string, int> copies;
  for (const auto& r : receiver.requests()) {
    if (r.path != "/ops") continue;
    EXPECT_TRUE(SignedWith(r, kSecret)) << r.body;
    EXPECT_FALSE(SignedWith(r, "another-secret-0123456789"));
    const json body = json::parse(r.body);
    ++copies[body["id"]];
    // The body is the stored event: its seq and state match what the API read.
    for (const json& e : events) {
      if (JsonInt(e.at("seq")) == body["seq"].get<int64_t>()) EXPECT_EQ(body["event"], e) << body.dump();
    }
  }
  int resent = 0;
  std::string running_id;
  for (const auto& [delivery, n] : copies) resent += n - 1;
  for (const json& e : events) {
    if (e.contains("job_state") && e["job_state"].value("state", "") == "RUNNING") {
      running_id = id + ":" + std::to_string(JsonInt(e.at("seq"))) + ":ops";
    }
  }
  EXPECT_GE(copies[running_id], 2) << "the delivery in flight at the kill was not sent again";
  // The endpoint that answers 500 throughout still has all of them queued.
  const CommandResult status = cluster.Cli({"webhooks", "status", "--output", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const json s = json::parse(status.out);
  std::map<std::string, json> by_name;
  for (const json& e : s["endpoints"]) by_name[e["name"]] = e;
  // Counted in webhooks.db, across the restart: each queued delivery once, however
  // many copies the receiver answered.
  EXPECT_EQ(JsonInt(by_name["ops"].value("delivered", json("0"))), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(JsonInt(by_name["ops"].value("pending", json("0"))), 0);
  EXPECT_EQ(JsonInt(by_name["dead"].value("delivered", json("0"))), 0);
  EXPECT_GT(JsonInt(by_name["dead"].value("pending", json("0"))), 0);
  EXPECT_NE(by_name["dead"].value("last_error", ""), "");
  std::printf("webhooks: %zu deliveries expected, each received once after dedup; %d resent after the kill -9\n",
              expected.size(), resent);

  // SIGHUP: a broken file keeps the endpoints in force; a good one replaces them.
  auto endpoint_names = [&] {
    const CommandResult r = cluster.Cli({"webhooks", "status", "--output", "json"});
    std::set<std::string> names;
    for (const json& e : json::parse(r.out, nullptr, false).value("endpoints", json::array())) names.insert(e["name"]);
    return names;
  };
  std::ofstream(file) << "[[endpoint]]\nname = \"ops\"\nurl = \"ftp://example.com/\"\n";
  cluster.SignalController(SIGHUP);
  const fs::path log = cluster.dir() / "controller-2.log";
  ASSERT_TRUE(WaitUntil([&] { return ReadFileOrEmpty(log).find("--webhooks not reloaded") != std::string::npos; },
                        std::chrono::seconds(30)))
      << ReadFileOrEmpty(log);
  EXPECT_NE(ReadFileOrEmpty(log).find("webhooks.toml:1: endpoint 'ops' has no events (and 2 more problems)"),
            std::string::npos);
  EXPECT_EQ(endpoint_names(), (std::set<std::string>{"dead", "ops"}));
  std::ofstream(file) << "[[endpoint]]\nname = \"ops\"\nurl = \"" << receiver.Url("/ops") << "\"\n"
                      << "events = [\"stall\"]\nsecret_file = \"ops.secret\"\n";
  cluster.SignalController(SIGHUP);
  ASSERT_TRUE(WaitUntil([&] { return ReadFileOrEmpty(log).find("reloaded: 1 endpoint(s)") != std::string::npos; },
                        std::chrono::seconds(30)))
      << ReadFileOrEmpty(log);
  EXPECT_EQ(endpoint_names(), (std::set<std::string>{"ops"}));

  // Both reloads are in the audit log, the refused one with the file's error.
  const CommandResult audit = cluster.Cli({"audit", "--output", "json"});
  ASSERT_EQ(audit.exit_code, 0) << audit.err;
  std::vector<json> reloads;
  std::istringstream lines(audit.out);
  for (std::string line; std::getline(lines, line);) {
    const json row = json::parse(line, nullptr, false);
    if (row.is_object() && row.value("action", "") == "webhooks_reload") reloads.push_back(row);
  }
  ASSERT_EQ(reloads.size(), 2u) << audit.out;
  EXPECT_EQ(reloads[0].value("outcome", ""), "OK") << reloads[0].dump();  // newest first
  EXPECT_EQ(reloads[1].value("outcome", ""), "INVALID_ARGUMENT") << reloads[1].dump();
  EXPECT_NE(reloads[1].value("message", "").find("has no events"), std::string::npos) << reloads[1].dump();
  EXPECT_EQ(reloads[0].value("identity", ""), "operator");
  EXPECT_EQ(reloads[0].value("target", ""), file.string());
}

// A --webhooks file the controller cannot use stops it with exit status 2 and the
// file's line before the data dir is made or anything is served.
TEST(WebhookTest, ABadWebhooksFileStopsTheStartBeforeTheStoreIsTouched) {
  TestCluster cluster(kBuiltBinaries, "webhook-bad");
  const fs::path data = cluster.dir() / "data";
  const fs::path bad = cluster.dir() / "webhooks.toml";
  std::ofstream(bad) << "[[endpoint]]\nname = \"ops\"\nurl = \"https://user:pw@example.com/\"\n"
                     << "events = [\"state_change\"]\nsecret_file = \"missing.secret\"\n";
  struct Case {
    std::string file;
    std::string want;
  };
  for (const Case& c : {Case{(cluster.dir() / "none.toml").string(), "webhooks file '" +
                                                                        (cluster.dir() / "none.toml").string() +
                                                                        "': no such file"},
                        Case{bad.string(), bad.string() + ":3: endpoint.url: URL 'https://example.com/' carries a "
                                                          "user name or password"}}) {
    const CommandResult r = RunCommand({"/usr/bin/timeout", "20", kBuiltBinaries.controller, "--listen", "127.0.0.1:0",
                                        "--data-dir", data.string(), "--webhooks", c.file});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("pw@"), std::string::npos) << "the password was echoed: " << r.err;
    EXPECT_FALSE(fs::exists(data)) << "the data dir was made before the file was checked";
  }
}

}  // namespace
}  // namespace trainyard::testing
