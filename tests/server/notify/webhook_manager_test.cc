// WebhookManager against a real SqliteJobStore in a temp dir and in-process HTTP
// receivers: signed at-least-once delivery that survives a stop, catches up on events
// committed while it was down, keeps a slow or failing endpoint from delaying another,
// and gives up (counted) on refusals, redirects, huge answers and TLS failures.
// Nothing here asserts how long anything took; waits are for outcomes.
#include "server/notify/webhook_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/registry.h>

#include "absl/strings/ascii.h"
#include "common/base/clock.h"
#include "common/proto_time.h"
#include "server/notify/webhook_payload.h"
#include "server/store/sqlite_job_store.h"
#include "tests/fakes/fake_http_server.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::FakeHttpRequest;
using testing::FakeHttpServer;

constexpr char kSecret[] = "0123456789abcdef-secret";
constexpr auto kWait = std::chrono::seconds(30);

WebhookEndpoint Endpoint(const std::string& name, const std::string& url, uint32_t kinds = kAllWebhookKinds) {
  WebhookEndpoint e;
  e.name = name;
  e.url = url;
  e.kinds = kinds;
  e.secret = kSecret;
  return e;
}

WebhookDelivery FastRetries() {
  WebhookDelivery d;
  d.backoff_initial = absl::Milliseconds(10);
  d.backoff_max = absl::Milliseconds(50);
  d.max_attempts = 1000;
  d.timeout = absl::Seconds(5);
  return d;
}

v1::Event State(v1::Job::State state, const std::string& reason = "") {
  v1::Event e;
  e.set_rank(-1);
  *e.mutable_time() = ToProtoTime(absl::Now());
  e.mutable_job_state()->set_state(state);
  e.mutable_job_state()->set_reason(reason);
  return e;
}

v1::Event Step(int64_t step) {
  v1::Event e;
  e.set_rank(0);
  e.set_attempt(1);
  e.set_source_seq(step);
  *e.mutable_time() = ToProtoTime(absl::Now());
  e.mutable_step_metrics()->set_step(step);
  return e;
}

std::vector<std::string> Ids(const std::vector<FakeHttpRequest>& requests) {
  std::vector<std::string> ids;
  for (const auto& r : requests) ids.push_back(nlohmann::json::parse(r.body)["id"]);
  return ids;
}

std::string Header(const FakeHttpRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (absl::AsciiStrToLower(k) == absl::AsciiStrToLower(name)) return v;
  }
  return "";
}

class WebhookManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteJobStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  void TearDown() override { manager_.reset(); }

  std::string NewJob(const std::string& owner) {
    v1::Job job;
    job.set_owner(owner);
    job.set_state(v1::Job::PENDING);
    EXPECT_TRUE(store_->CreateJob(&job).ok());
    owners_[job.id()] = owner;
    return job.id();
  }

  void Start(WebhookConfig config) {
    WebhookManagerDeps deps;
    deps.events = store_.get();
    deps.owner_of = [this](const std::string& id) { return owners_.count(id) ? owners_.at(id) : std::string(); };
    deps.clock = &clock_;
    deps.metrics = &metrics_;
    auto m = WebhookManager::Start(std::move(config), "w.toml", dir_.path() + "/webhooks.db", std::move(deps));
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
    manager_->Begin();
    manager_->AwaitScanned();
  }

  // Commits `events` and tells the manager, as the controller's hub does.
  std::vector<int64_t> Commit(const std::string& job, std::vector<v1::Event> events) {
    for (auto& e : events) e.set_job_id(job);
    auto stored = store_->AppendEvents(job, std::move(events));
    EXPECT_TRUE(stored.ok()) << stored.status();
    if (manager_) manager_->OnCommitted(job);
    std::vector<int64_t> seqs;
    for (const auto& e : *stored) seqs.push_back(e.seq());
    return seqs;
  }

  v1::WebhookEndpointStatus StatusOf(const std::string& name) {
    auto status = manager_->Status();
    EXPECT_TRUE(status.ok()) << status.status();
    for (const auto& e : status->endpoints()) {
      if (e.name() == name) return e;
    }
    ADD_FAILURE() << "no endpoint " << name;
    return {};
  }

  testing::TempDir dir_;
  std::unique_ptr<SqliteJobStore> store_;
  std::map<std::string, std::string> owners_;
  // The value of `name`{endpoint, result?} on the registry; -1 when absent.
  double Metric(const std::string& name, const std::string& endpoint, const std::string& result = "") {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : m.label) labels[l.name] = l.value;
        if (labels["endpoint"] != endpoint || (!result.empty() && labels["result"] != result)) continue;
        return family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
    return -1;
  }

  RealClock clock_;
  prometheus::Registry registry_;
  WebhookMetrics metrics_{registry_};
  std::unique_ptr<WebhookManager> manager_;
};

TEST_F(WebhookManagerTest, DeliversSignedStateChangesAndSkipsOtherEvents) {
  FakeHttpServer receiver;
  receiver.Handle("/hook", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 200, "ok"); });
  WebhookConfig config;
  config.endpoints.push_back(Endpoint("ops", receiver.Url("/hook?token=abc"), kWebhookStateChange));
  config.delivery = FastRetries();
  const std::string job = NewJob("alice");
  Start(config);
  const auto seqs = Commit(job, {State(v1::Job::RUNNING), Step(1), Step(2), State(v1::Job::SUCCEEDED)});
  ASSERT_TRUE(testing::WaitUntil([&] { return receiver.requests().size() >= 2; }, kWait));
  manager_->AwaitScanned();
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("ops").delivered() == 2; }, kWait));
  const auto requests = receiver.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(Ids(requests), (std::vector<std::string>{job + ":" + std::to_string(seqs[0]) + ":ops",
                                                     job + ":" + std::to_string(seqs[3]) + ":ops"}));
  for (const auto& r : requests) {
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.query, "token=abc");
    EXPECT_EQ(Header(r, "Content-Type"), "application/json");
    EXPECT_EQ(Header(r, kWebhookIdHeader), nlohmann::json::parse(r.body)["id"]);
    const std::string signature = Header(r, kWebhookSignatureHeader);
    const size_t comma = signature.find(",v1=");
    ASSERT_NE(comma, std::string::npos) << signature;
    const std::string t = signature.substr(2, comma - 2);
    const std::string v1 = signature.substr(comma + 4);
    EXPECT_EQ(v1, HmacSha256Hex(kSecret, t + "." + r.body));
    EXPECT_NE(v1, HmacSha256Hex("another-secret-0123456", t + "." + r.body));
    EXPECT_EQ(nlohmann::json::parse(r.body)["owner"], "alice");
  }
  EXPECT_EQ(nlohmann::json::parse(requests[1].body)["event"]["job_state"]["state"], "SUCCEEDED");
  const auto status = StatusOf("ops");
  EXPECT_EQ(status.url(), receiver.Url("/hook"));  // the query (a token, maybe) is not shown
  EXPECT_EQ(status.pending(), 0);
  EXPECT_EQ(status.failed(), 0);
  EXPECT_TRUE(status.has_last_success_time());
  // The series follow the store's record (just after it).
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return Metric("trainyard_webhook_deliveries_total", "ops", "delivered") == 2; }, kWait));
  EXPECT_TRUE(testing::WaitUntil([&] { return Metric("trainyard_webhook_pending", "ops") == 0; }, kWait));
  EXPECT_EQ(Metric("trainyard_webhook_deliveries_total", "ops", "failed"), 0);
  EXPECT_NEAR(Metric("trainyard_webhook_last_success_timestamp_seconds", "ops"),
              absl::ToDoubleSeconds(FromProtoTime(status.last_success_time()) - absl::UnixEpoch()), 1.0);
  ASSERT_EQ(status.events_size(), 1);
  EXPECT_EQ(status.events(0), "state_change");
}

TEST_F(WebhookManagerTest, HistoryBeforeTheFirstStartIsNotSent) {
  FakeHttpServer receiver;
  receiver.Handle("/hook", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 200, "ok"); });
  const std::string old_job = NewJob("alice");
  Commit(old_job, {State(v1::Job::RUNNING), State(v1::Job::SUCCEEDED)});
  WebhookConfig config;
  config.endpoints.push_back(Endpoint("ops", receiver.Url("/hook")));
  config.delivery = FastRetries();
  Start(config);
  const std::string job = NewJob("alice");
  const auto seqs = Commit(job, {State(v1::Job::RUNNING)});
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("ops").delivered() == 1; }, kWait));
  EXPECT_EQ(Ids(receiver.requests()), (std::vector<std::string>{job + ":" + std::to_string(seqs[0]) + ":ops"}));
}

TEST_F(WebhookManagerTest, SlowAndFailingEndpointsDelayNothingElse) {
  FakeHttpServer receiver;
  std::atomic<bool> release{false};
  receiver.Handle("/slow", [&](mg_connection* c, const FakeHttpRequest&) {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    FakeHttpServer::Reply(c, 200, "ok");
  });
  receiver.Handle("/broken", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 500, "down"); });
  receiver.Handle("/good", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 200, "ok"); });
  WebhookConfig config;
  config.delivery = FastRetries();
  config.delivery.timeout = absl::Seconds(60);
  config.endpoints.push_back(Endpoint("slow", receiver.Url("/slow")));
  config.endpoints.push_back(Endpoint("broken", receiver.Url("/broken")));
  config.endpoints.push_back(Endpoint("good", receiver.Url("/good")));
  Start(config);
  const std::string job = NewJob("alice");
  std::vector<std::string> expected;
  for (int i = 0; i < 20; ++i) {
    for (int64_t seq : Commit(job, {State(i % 2 == 0 ? v1::Job::RUNNING : v1::Job::RESTARTING, "restart")})) {
      expected.push_back(job + ":" + std::to_string(seq) + ":");
    }
  }
  auto path_ids = [&](const std::string& path) {
    std::vector<std::string> ids;
    for (const auto& r : receiver.requests()) {
      if (r.path == path) ids.push_back(nlohmann::json::parse(r.body)["id"]);
    }
    return ids;
  };
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("good").delivered() == 20; }, kWait));
  // Every one of good's, in commit order, while slow still holds its first and broken
  // still retries its first: neither held good back, nor the commits.
  std::vector<std::string> good = path_ids("/good");
  ASSERT_EQ(good.size(), 20u);
  for (size_t i = 0; i < good.size(); ++i) EXPECT_EQ(good[i], expected[i] + "good");
  EXPECT_EQ(path_ids("/slow").size(), 1u);
  EXPECT_EQ(StatusOf("slow").delivered(), 0);
  EXPECT_EQ(StatusOf("broken").delivered(), 0);
  EXPECT_EQ(StatusOf("broken").pending(), 20);
  EXPECT_THAT(StatusOf("broken").last_error(), HasSubstr("HTTP 500: 'down'"));
  for (const std::string& id : path_ids("/broken")) EXPECT_EQ(id, expected[0] + "broken");  // retries of the head
  // Commits go on while slow holds its POST: stored, scanned and sent to good.
  for (int i = 0; i < 5; ++i) {
    for (int64_t seq : Commit(job, {State(v1::Job::RUNNING)})) expected.push_back(job + ":" + std::to_string(seq) + ":");
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("good").delivered() == 25; }, kWait));
  EXPECT_EQ(path_ids("/slow").size(), 1u);
  EXPECT_EQ(StatusOf("slow").pending(), 25);
  release.store(true);
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("slow").delivered() == 25; }, kWait));
  std::vector<std::string> slow = path_ids("/slow");
  ASSERT_EQ(slow.size(), 25u);
  for (size_t i = 0; i < slow.size(); ++i) EXPECT_EQ(slow[i], expected[i] + "slow");
}

TEST_F(WebhookManagerTest, QueuedDeliveriesSurviveAStopAndCatchUpOnEventsCommittedMeanwhile) {
  FakeHttpServer receiver;
  std::atomic<bool> up{false};
  receiver.Handle("/hook", [&](mg_connection* c, const FakeHttpRequest&) {
    FakeHttpServer::Reply(c, up.load() ? 200 : 503, up.load() ? "ok" : "later");
  });
  WebhookConfig config;
  config.endpoints.push_back(Endpoint("ops", receiver.Url("/hook"), kWebhookStateChange));
  config.delivery = FastRetries();
  Start(config);
  const std::string job = NewJob("bob");
  std::set<std::string> expected;
  for (int64_t seq : Commit(job, {State(v1::Job::SCHEDULED), State(v1::Job::RUNNING)})) {
    expected.insert(job + ":" + std::to_string(seq) + ":ops");
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return !receiver.requests().empty(); }, kWait));
  manager_.reset();  // as a controller stopping (or killed: nothing below needs the stop)
  // Committed while no manager ran: the hook never saw them.
  for (int64_t seq : Commit(job, {Step(1), State(v1::Job::SUCCEEDED)})) {
    if (seq == store_->LastSeq(job)) expected.insert(job + ":" + std::to_string(seq) + ":ops");
  }
  up.store(true);
  Start(config);
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("ops").delivered() == 3; }, kWait));
  std::set<std::string> received;
  for (const std::string& id : Ids(receiver.requests())) received.insert(id);
  EXPECT_EQ(received, expected);  // after deduplication by id: each exactly once
  EXPECT_EQ(StatusOf("ops").pending(), 0);
}

TEST_F(WebhookManagerTest, OwnerFilterAndKinds) {
  FakeHttpServer receiver;
  receiver.Handle("/hook", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 200, "ok"); });
  WebhookConfig config;
  WebhookEndpoint e = Endpoint("alice-preemptions", receiver.Url("/hook"), kWebhookPreemption | kWebhookStall);
  e.owners = {"alice"};
  config.endpoints.push_back(e);
  config.delivery = FastRetries();
  Start(config);
  const std::string alice = NewJob("alice");
  const std::string bob = NewJob("bob");
  v1::Event stall;
  stall.set_rank(1);
  stall.set_attempt(1);
  stall.set_source_seq(1);
  *stall.mutable_time() = ToProtoTime(absl::Now());
  stall.mutable_stall()->set_collective("dp0:allreduce");
  Commit(bob, {State(v1::Job::RESTARTING, "preempted by job-9 (priority 10)")});
  const auto seqs = Commit(alice, {State(v1::Job::RUNNING), State(v1::Job::RESTARTING, "restart 1 of 3: boom"),
                                   State(v1::Job::RESTARTING, "preempted by job-9 (priority 10)"), stall});
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("alice-preemptions").delivered() == 2; }, kWait));
  const auto requests = receiver.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(Ids(requests)[0], alice + ":" + std::to_string(seqs[2]) + ":alice-preemptions");
  EXPECT_EQ(nlohmann::json::parse(requests[0].body)["kinds"], nlohmann::json({"preemption"}));
  EXPECT_EQ(Ids(requests)[1], alice + ":" + std::to_string(seqs[3]) + ":alice-preemptions");
  EXPECT_EQ(nlohmann::json::parse(requests[1].body)["kinds"], nlohmann::json({"stall"}));
}

// One endpoint per hostile receiver; each must end given up (failed, nothing pending)
// after the number of requests the documented rules give.
TEST_F(WebhookManagerTest, RefusalsRedirectsHugeAnswersAndTlsFailuresAreCountedNotLooped) {
  FakeHttpServer receiver;
  receiver.Handle("/refuse", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 400, "bad"); });
  receiver.Handle("/redirect", [&](mg_connection* c, const FakeHttpRequest&) {
    FakeHttpServer::Reply(c, 302, "", "Location: " + receiver.Url("/redirect") + "\r\n");
  });
  receiver.Handle("/huge", [](mg_connection* c, const FakeHttpRequest&) {
    FakeHttpServer::Reply(c, 200, std::string(10 << 20, 'x'));
  });
  receiver.Handle("/throttle", [](mg_connection* c, const FakeHttpRequest&) {
    FakeHttpServer::Reply(c, 429, "slow down");
  });
  WebhookConfig config;
  config.delivery = FastRetries();
  config.delivery.max_attempts = 3;
  config.endpoints.push_back(Endpoint("refuse", receiver.Url("/refuse")));
  config.endpoints.push_back(Endpoint("redirect", receiver.Url("/redirect")));
  config.endpoints.push_back(Endpoint("huge", receiver.Url("/huge")));
  config.endpoints.push_back(Endpoint("throttle", receiver.Url("/throttle")));
  // A plain-HTTP port spoken to over TLS: the handshake fails.
  config.endpoints.push_back(Endpoint("tls", "https://127.0.0.1:" + std::to_string(receiver.port()) + "/tls"));
  Start(config);
  const std::string job = NewJob("alice");
  Commit(job, {State(v1::Job::RUNNING)});
  for (const char* name : {"refuse", "redirect", "huge", "throttle", "tls"}) {
    ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf(name).failed() == 1; }, kWait)) << name;
    EXPECT_EQ(StatusOf(name).pending(), 0) << name;
    EXPECT_EQ(StatusOf(name).delivered(), 0) << name;
  }
  std::map<std::string, int> count;
  for (const auto& r : receiver.requests()) ++count[r.path];
  EXPECT_EQ(count["/refuse"], 1);    // a 4xx other than 408/429 is not retried
  EXPECT_EQ(count["/redirect"], 1);  // nor followed
  EXPECT_EQ(count["/huge"], 3);      // an answer past the cap fails the attempt: retried
  EXPECT_EQ(count["/throttle"], 3);
  EXPECT_THAT(StatusOf("refuse").last_error(), HasSubstr("HTTP 400: 'bad' (refused; not retried)"));
  EXPECT_THAT(StatusOf("redirect").last_error(), HasSubstr("a redirect is not followed"));
  EXPECT_THAT(StatusOf("huge").last_error(), HasSubstr("gave up after 3 attempts"));
  EXPECT_THAT(StatusOf("throttle").last_error(), HasSubstr("HTTP 429"));
  EXPECT_FALSE(StatusOf("tls").last_error().empty());
  for (const char* name : {"refuse", "redirect", "huge", "throttle", "tls"}) {
    EXPECT_TRUE(testing::WaitUntil(
        [&] { return Metric("trainyard_webhook_deliveries_total", name, "failed") == 1; }, kWait))
        << name;
    EXPECT_EQ(Metric("trainyard_webhook_deliveries_total", name, "delivered"), 0) << name;
    EXPECT_EQ(Metric("trainyard_webhook_last_success_timestamp_seconds", name), 0) << name;
  }
  EXPECT_EQ(Metric("trainyard_webhook_deliveries_total", "huge", "retried"), 2);
}

TEST_F(WebhookManagerTest, AFullOutboxDropsAndCounts) {
  FakeHttpServer receiver;
  receiver.Handle("/hook", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 503, "no"); });
  WebhookConfig config;
  config.delivery = FastRetries();
  config.delivery.max_pending = 2;
  config.endpoints.push_back(Endpoint("ops", receiver.Url("/hook")));
  Start(config);
  const std::string job = NewJob("alice");
  Commit(job, {State(v1::Job::SCHEDULED), State(v1::Job::RUNNING), State(v1::Job::RESTARTING, "x"),
               State(v1::Job::PENDING), State(v1::Job::CANCELLED)});
  manager_->AwaitScanned();
  EXPECT_EQ(StatusOf("ops").dropped(), 3);
  EXPECT_EQ(StatusOf("ops").pending(), 2);
  EXPECT_EQ(Metric("trainyard_webhook_deliveries_total", "ops", "dropped"), 3);
  EXPECT_EQ(Metric("trainyard_webhook_pending", "ops"), 2);
}

TEST_F(WebhookManagerTest, AReloadDropsARemovedEndpointsQueue) {
  FakeHttpServer receiver;
  receiver.Handle("/down", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 503, "no"); });
  receiver.Handle("/up", [](mg_connection* c, const FakeHttpRequest&) { FakeHttpServer::Reply(c, 200, "ok"); });
  WebhookConfig config;
  config.delivery = FastRetries();
  config.endpoints.push_back(Endpoint("down", receiver.Url("/down")));
  Start(config);
  const std::string job = NewJob("alice");
  Commit(job, {State(v1::Job::RUNNING)});
  manager_->AwaitScanned();
  EXPECT_EQ(StatusOf("down").pending(), 1);
  WebhookConfig next;
  next.delivery = FastRetries();
  next.endpoints.push_back(Endpoint("up", receiver.Url("/up")));
  ASSERT_TRUE(manager_->Reload(next).ok());
  auto status = manager_->Status();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->endpoints_size(), 1);
  EXPECT_EQ(status->endpoints(0).name(), "up");
  EXPECT_EQ(Metric("trainyard_webhook_pending", "down"), -1);  // its series went with it
  const auto seqs = Commit(job, {State(v1::Job::SUCCEEDED)});
  ASSERT_TRUE(testing::WaitUntil([&] { return StatusOf("up").delivered() == 1; }, kWait));
  std::vector<std::string> up;
  for (const auto& r : receiver.requests()) {
    if (r.path == "/up") up.push_back(nlohmann::json::parse(r.body)["id"]);
  }
  EXPECT_EQ(up, (std::vector<std::string>{job + ":" + std::to_string(seqs[0]) + ":up"}));
}

}  // namespace
}  // namespace trainyard
