// The web UI's handler (server/web/web_api.h) against an in-process controller: a real
// SqliteJobStore, JobManager and ArtifactStore with one fake worker, and an Authorizer over a
// token file. Roles (a submitter sees only its own jobs, and another owner's job is 404
// with the very message of a missing one), read-only (every method but GET is 405),
// hostile inputs (precise 400s, quotes bounded), event paging against the store,
// artifact downloads byte for byte, the fleet view, the static files, the listener's
// address rule, and one real HTTP exchange through civetweb.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/base/sha256.h"
#include "common/events/proto_json.h"
#include "server/state/artifact_store.h"
#include "server/auth/authorizer.h"
#include "server/metrics/controller_metrics.h"
#include "server/controller_server.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "server/web/web_api.h"
#include "server/web/web_server.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"
#include "tests/support/temp_dir.h"

namespace trainyard::testing {
namespace {

using json = nlohmann::json;
using web::WebApi;
using web::WebRequest;
using web::WebResponse;

constexpr char kAdmin[] = "admin-token-AAAA";
constexpr char kViewer[] = "viewer-token-VVVV";
constexpr char kAlice[] = "alice-token-1111";
constexpr char kBob[] = "bob-token-2222";

std::string Header(const WebResponse& r, const std::string& name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "";
}

class WebApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokens = dir_.path() + "/tokens";
    std::ofstream(tokens) << Sha256Hex(kAdmin) << " admin root\n"
                          << Sha256Hex(kViewer) << " viewer dashboard\n"
                          << Sha256Hex(kAlice) << " submitter alice\n"
                          << Sha256Hex(kBob) << " submitter bob\n";
    auto authz = Authorizer::FromFile(tokens);
    ASSERT_TRUE(authz.ok()) << authz.status();
    authz_ = std::move(*authz);
    auto store = SqliteJobStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    manager_ = std::make_unique<JobManager>(store_.get(), &hub_, &metrics_, &clock_, JobManagerOptions{});
    ASSERT_TRUE(manager_->Recover().ok());
    auto artifacts = ArtifactStore::Open(dir_.path(), manager_.get(), &clock_);
    ASSERT_TRUE(artifacts.ok()) << artifacts.status();
    artifacts_ = std::move(*artifacts);
    v1::Register reg;
    reg.set_name("w1");
    reg.set_slots(8);
    reg.set_address("w1.local");
    reg.set_rendezvous_port_min(40000);
    reg.set_rendezvous_port_max(40009);
    ASSERT_TRUE(manager_->RegisterWorker(1, reg, worker_).ok());
    api_ = std::make_unique<WebApi>(manager_.get(), store_.get(), artifacts_.get(), authz_.get());
    alice_job_ = SubmitAs("alice");
    bob_job_ = SubmitAs("bob");
  }

  std::string SubmitAs(const std::string& owner) {
    v1::JobSpec spec;
    spec.mutable_job()->set_name("web-" + owner);
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_parallelism()->set_dp(1);
    spec.mutable_parallelism()->set_tp(1);
    auto job = manager_->Submit(spec, owner);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  // GET `target` (path and query) with `token` (none when empty).
  WebResponse Call(const std::string& target, const std::string& token, const std::string& method = "GET",
                   const std::string& host = "") const {
    return CallOn(*api_, target, token, method, host);
  }
  static WebResponse CallOn(const WebApi& api, const std::string& target, const std::string& token,
                            const std::string& method = "GET", const std::string& host = "") {
    WebRequest request;
    request.method = method;
    request.host = host;
    const size_t q = target.find('?');
    request.path = target.substr(0, q);
    if (q != std::string::npos) request.query = target.substr(q + 1);
    if (!token.empty()) request.authorization.push_back(std::string("Bearer ") + token);
    return api.Handle(request);
  }
  json Body(const WebResponse& r) const {
    json j = json::parse(r.body, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.body.substr(0, 200);
    return j;
  }
  std::string ErrorOf(const WebResponse& r) const {
    json j = Body(r);
    return j.is_object() && j.contains("error") ? j["error"].get<std::string>() : "<no error field>";
  }
  std::vector<std::string> ListedIds(const std::string& token) const {
    WebResponse r = Call("/api/jobs", token);
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> ids;
    const json body = Body(r);  // held: a range-for over a temporary's member dangles
    for (const auto& j : body["jobs"]) ids.push_back(j["id"].get<std::string>());
    return ids;
  }

  // A rank-0 StepMetrics event of job `id` (attempt 1, its own source_seq).
  v1::Event Step(const std::string& id, int64_t step, double loss, double tps) {
    v1::Event e;
    e.set_job_id(id);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_);
    auto* m = e.mutable_step_metrics();
    m->set_step(step);
    m->set_loss(loss);
    m->set_tokens_per_s(tps);
    m->set_tokens(int64_t{1} << 40);  // past 2^32: must come out exact
    for (int x : {5, 9, 1, 3}) m->add_expert_load(x);
    return e;
  }
  v1::Event Compile(const std::string& id, v1::CompileEvent::Kind kind, const std::string& region,
                    const std::string& reason) {
    v1::Event e;
    e.set_job_id(id);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_);
    e.mutable_compile()->set_kind(kind);
    e.mutable_compile()->set_region(region);
    e.mutable_compile()->set_reason(reason);
    e.mutable_compile()->set_compile_ms(12.5);
    return e;
  }
  void Append(const std::string& id, std::vector<v1::Event> events) {
    auto committed = store_->AppendEvents(id, std::move(events));
    ASSERT_TRUE(committed.ok()) << committed.status();
  }
  // Stores `content` as a complete artifact `name` of job `id` (a worker's file).
  void StoreArtifact(const std::string& id, const std::string& name, const std::string& content) {
    v1::ArtifactHeader h;
    h.set_job_id(id);
    h.set_attempt(1);
    h.set_rank(-1);
    h.set_name(name);
    h.set_kind("trace");
    h.set_size_bytes(static_cast<int64_t>(content.size()));
    h.set_sha256(Sha256Hex(content));
    h.set_worker("w1");
    auto opened = artifacts_->OpenArtifact(h);
    ASSERT_TRUE(opened.ok()) << opened.status();
    auto upload = artifacts_->BeginUpload(h);
    ASSERT_TRUE(upload.ok()) << upload.status();
    for (size_t off = 0; off < content.size(); off += kMaxArtifactChunkBytes) {
      const size_t n = std::min<size_t>(kMaxArtifactChunkBytes, content.size() - off);
      auto s = (*upload)->Append(static_cast<int64_t>(off), std::string_view(content).substr(off, n));
      ASSERT_TRUE(s.ok()) << s.status();
    }
  }

  TempDir dir_;
  FakeClock clock_;
  EventHub hub_;
  ControllerMetrics metrics_;
  std::unique_ptr<Authorizer> authz_;
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<ArtifactStore> artifacts_;
  std::shared_ptr<FakeWorkerChannel> worker_ = std::make_shared<FakeWorkerChannel>();
  std::unique_ptr<WebApi> api_;
  std::string alice_job_, bob_job_;
  int64_t source_seq_ = 0;
};

TEST_F(WebApiTest, EveryApiRouteNeedsAKnownBearerToken) {
  for (const std::string& target :
       {std::string("/api/me"), std::string("/api/jobs"), std::string("/api/fleet"), "/api/jobs/" + alice_job_,
        "/api/jobs/" + alice_job_ + "/events", "/api/jobs/" + alice_job_ + "/artifacts",
        "/api/jobs/" + alice_job_ + "/artifacts/trace.json", std::string("/api/nope")}) {
    WebResponse none = Call(target, "");
    EXPECT_EQ(none.status, 401) << target;
    EXPECT_EQ(ErrorOf(none), "no bearer token") << target;
    EXPECT_EQ(Header(none, "WWW-Authenticate"), "Bearer realm=\"trainyard\"") << target;
    WebResponse unknown = Call(target, "not-a-known-token-ZZZZ");
    EXPECT_EQ(unknown.status, 401) << target;
    EXPECT_EQ(ErrorOf(unknown), "unknown token") << target;
    // The presented token is never echoed.
    EXPECT_EQ(unknown.body.find("ZZZZ"), std::string::npos) << target;
  }
  WebRequest basic;
  basic.method = "GET";
  basic.path = "/api/jobs";
  basic.authorization = {"Basic YWxpY2U6c2VjcmV0"};
  WebResponse r = api_->Handle(basic);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(ErrorOf(r), "the Authorization header is not a bearer token");
  EXPECT_EQ(r.body.find("YWxpY2U"), std::string::npos);
  basic.authorization = {std::string("Bearer ") + kAdmin, std::string("Bearer ") + kAdmin};
  r = api_->Handle(basic);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(ErrorOf(r), "more than one Authorization header");

  // The static files hold no data: no token needed.
  WebResponse page = Call("/", "");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("id=\"token-prompt\""), std::string::npos);
  EXPECT_NE(Header(page, "Content-Security-Policy").find("frame-ancestors 'none'"), std::string::npos);

  json me = Body(Call("/api/me", kAlice));
  EXPECT_EQ(me, (json{{"auth", true}, {"role", "submitter"}, {"owner", "alice"}}));
}

TEST_F(WebApiTest, ASubmitterSeesOnlyItsOwnJobsAndOthersAreMissing) {
  EXPECT_EQ(ListedIds(kAlice), std::vector<std::string>{alice_job_});
  EXPECT_EQ(ListedIds(kBob), std::vector<std::string>{bob_job_});
  // Newest first for the roles that see everything.
  EXPECT_EQ(ListedIds(kViewer), (std::vector<std::string>{bob_job_, alice_job_}));
  EXPECT_EQ(ListedIds(kAdmin), (std::vector<std::string>{bob_job_, alice_job_}));

  StoreArtifact(bob_job_, "trace.json", "{}");
  // A job of another owner reads exactly like one that does not exist.
  const std::string missing = "job-999999";
  for (const std::string& suffix : {std::string(""), std::string("/events"), std::string("/artifacts"),
                                    std::string("/artifacts/trace.json")}) {
    WebResponse theirs = Call("/api/jobs/" + bob_job_ + suffix, kAlice);
    WebResponse none = Call("/api/jobs/" + missing + suffix, kAlice);
    EXPECT_EQ(theirs.status, 404) << suffix;
    EXPECT_EQ(none.status, 404) << suffix;
    EXPECT_EQ(ErrorOf(theirs), "job " + bob_job_ + " not found") << suffix;
    EXPECT_EQ(ErrorOf(none), "job " + missing + " not found") << suffix;
    EXPECT_EQ(Call("/api/jobs/" + bob_job_ + suffix, kViewer).status, 200) << suffix;
  }
  json mine = Body(Call("/api/jobs/" + alice_job_, kAlice));
  EXPECT_EQ(mine["id"], alice_job_);
  EXPECT_EQ(mine["owner"], "alice");
  EXPECT_EQ(mine["name"], "web-alice");
  EXPECT_EQ(mine["spec"]["model"]["preset"], "tiny");
}

TEST_F(WebApiTest, ReadOnlyEveryOtherMethodIs405AndChangesNothing) {
  const v1::Job before = manager_->Get(alice_job_).value();
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}) {
    for (const std::string& target : {"/api/jobs/" + alice_job_, std::string("/api/jobs"), std::string("/")}) {
      WebResponse r = Call(target, kAdmin, method);
      EXPECT_EQ(r.status, 405) << method << " " << target;
      EXPECT_EQ(Header(r, "Allow"), "GET") << method;
    }
  }
  const v1::Job after = manager_->Get(alice_job_).value();
  EXPECT_EQ(after.state(), before.state());
  EXPECT_EQ(after.attempt(), before.attempt());
}

TEST_F(WebApiTest, EventsArePagedFromTheStoreAndFilteredByKind) {
  Append(alice_job_, {Step(alice_job_, 1, 5.5, 1000), Step(alice_job_, 2, 5.25, 1100),
                      Compile(alice_job_, v1::CompileEvent::COMPILE, "block/moe", ""),
                      Compile(alice_job_, v1::CompileEvent::RECOMPILE, "block/moe", "input[0].size(0): expected 4, got 8"),
                      Step(alice_job_, 3, 5.0, 1200)});
  auto stored = store_->ReadEvents(alice_job_, 1, 1000);
  ASSERT_TRUE(stored.ok());
  ASSERT_GE(stored->size(), 5u);

  // Page through everything, three at a time: the same seqs as the store, in order.
  std::vector<int64_t> seqs;
  int64_t after = 0;
  for (int pages = 0; pages < 100; ++pages) {
    WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?after_seq=" + std::to_string(after) + "&limit=3", kViewer);
    ASSERT_EQ(r.status, 200) << r.body;
    json page = Body(r);
    // proto3 JSON writes a 64-bit integer as a decimal string.
    for (const auto& e : page["events"]) seqs.push_back(std::stoll(e["seq"].get<std::string>()));
    EXPECT_LE(page["events"].size(), 3u);
    after = page["next_after_seq"].get<int64_t>();
    EXPECT_EQ(page["last_seq"].get<int64_t>(), stored->back().seq());
    if (!page["more"].get<bool>()) break;
  }
  std::vector<int64_t> expected;
  for (const auto& e : *stored) expected.push_back(e.seq());
  EXPECT_EQ(seqs, expected);

  // Only step metrics, each under its payload's key; 64-bit integers exact, as strings.
  json page = Body(Call("/api/jobs/" + alice_job_ + "/events?kinds=step_metrics", kAlice));
  std::vector<std::pair<int64_t, double>> loss;
  for (const auto& e : page["events"]) {
    ASSERT_TRUE(e.contains("step_metrics")) << e;
    const json& m = e["step_metrics"];
    loss.emplace_back(std::stoll(m["step"].get<std::string>()), m["loss"].get<double>());
    EXPECT_EQ(m["tokens"], "1099511627776");  // 2^40, past 2^32
    EXPECT_EQ(m["expert_load"], (json{"5", "9", "1", "3"}));
  }
  EXPECT_EQ(loss, (std::vector<std::pair<int64_t, double>>{{1, 5.5}, {2, 5.25}, {3, 5.0}}));
  page = Body(Call("/api/jobs/" + alice_job_ + "/events?kinds=compile,stall", kAlice));
  ASSERT_EQ(page["events"].size(), 2u);
  EXPECT_EQ(page["events"][1]["compile"]["kind"], "RECOMPILE");
  EXPECT_EQ(page["events"][1]["compile"]["reason"], "input[0].size(0): expected 4, got 8");
  // Past the end: nothing, and the cursor stays.
  page = Body(Call("/api/jobs/" + alice_job_ + "/events?after_seq=" + std::to_string(stored->back().seq()), kAlice));
  EXPECT_TRUE(page["events"].empty());
  EXPECT_EQ(page["next_after_seq"].get<int64_t>(), stored->back().seq());
  EXPECT_FALSE(page["more"].get<bool>());
}

// One JSON dialect of an Event: a page's events are the proto3 JSON of trainyard.v1.Event
// with the .proto field names, every field present, the very bytes the CLI and
// trainyard-train print (common/events/proto_json.h), and they read back strictly. Only
// what names a file on a machine is blanked: an artifact's uri, a checkpoint's path.
TEST_F(WebApiTest, AnEventIsTheProto3JsonOfTrainyardV1Event) {
  v1::Event step = Step(alice_job_, 7, 2.25, 1536.5);  // source_seq 1
  step.mutable_time()->set_seconds(1700000000);      // 2023-11-14T22:13:20Z
  step.mutable_time()->set_nanos(250000000);
  step.mutable_step_metrics()->set_grad_norm(0.5);
  step.mutable_step_metrics()->set_mfu(0.125);
  step.mutable_step_metrics()->set_step_ms(40.5);
  v1::Event artifact;
  artifact.set_job_id(alice_job_);
  artifact.set_rank(1);
  artifact.set_attempt(2);
  artifact.set_source_seq(9);
  artifact.mutable_artifact()->set_name("rank1.trace.json");
  artifact.mutable_artifact()->set_kind("trace");
  artifact.mutable_artifact()->set_size_bytes(2048);
  artifact.mutable_artifact()->set_uri("file:///var/lib/secret-w1/attempt-2/rank1.trace.json");
  artifact.mutable_artifact()->set_sha256(std::string(64, 'a'));
  v1::Event checkpoint;
  checkpoint.set_job_id(alice_job_);
  checkpoint.set_attempt(2);
  checkpoint.mutable_checkpoint()->set_step(100);
  checkpoint.mutable_checkpoint()->set_path("/mnt/secret-ckpt/job/step-100");
  checkpoint.mutable_checkpoint()->set_bytes(int64_t{5} << 32);
  checkpoint.mutable_checkpoint()->set_blocked_ms(1.5);
  checkpoint.mutable_checkpoint()->set_write_ms(20);
  checkpoint.mutable_checkpoint()->set_dp(2);
  checkpoint.mutable_checkpoint()->set_tp(1);
  checkpoint.mutable_checkpoint()->set_ep(1);
  const int64_t first = store_->LastSeq(alice_job_) + 1;
  Append(alice_job_, {step, artifact, checkpoint});

  WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=step_metrics,artifact,checkpoint", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["events"].size(), 3u) << r.body;
  const json expected_step = {
      {"job_id", alice_job_}, {"seq", std::to_string(first)}, {"time", "2023-11-14T22:13:20.250Z"},
      {"rank", 0},            {"attempt", 1},                 {"source_seq", "1"},
      {"step_metrics",
       {{"step", "7"}, {"loss", 2.25}, {"grad_norm", 0.5}, {"lr", 0}, {"tokens_per_s", 1536.5},
        {"model_tflops", 0}, {"mfu", 0.125}, {"step_ms", 40.5}, {"data_ms", 0}, {"peak_rss_mb", 0},
        {"expert_load", {"5", "9", "1", "3"}}, {"imbalance", 0}, {"tokens", "1099511627776"}}}};
  EXPECT_EQ(body["events"][0], expected_step);
  const json expected_artifact = {
      {"job_id", alice_job_}, {"seq", std::to_string(first + 1)}, {"rank", 1}, {"attempt", 2}, {"source_seq", "9"},
      {"artifact",
       {{"name", "rank1.trace.json"}, {"kind", "trace"}, {"size_bytes", "2048"}, {"uri", ""},
        {"sha256", std::string(64, 'a')}}}};
  EXPECT_EQ(body["events"][1], expected_artifact);
  const json expected_checkpoint = {
      {"job_id", alice_job_}, {"seq", std::to_string(first + 2)}, {"rank", 0}, {"attempt", 2}, {"source_seq", "0"},
      {"checkpoint",
       {{"step", "100"}, {"path", ""}, {"bytes", "21474836480"}, {"blocked_ms", 1.5}, {"write_ms", 20},
        {"dp", 2}, {"tp", 1}, {"ep", 1}}}};
  EXPECT_EQ(body["events"][2], expected_checkpoint);
  EXPECT_EQ(r.body.find("secret"), std::string::npos) << r.body;

  // The step's bytes are what proto_json prints for the stored event.
  auto stored = store_->ReadEvents(alice_job_, first, 3);
  ASSERT_TRUE(stored.ok() && stored->size() == 3u);
  EXPECT_NE(r.body.find(ToJsonLine((*stored)[0])), std::string::npos) << r.body;
  // And each reads back strictly into the generated message (unknown fields refused).
  for (size_t i = 0; i < 3; ++i) {
    v1::Event parsed;
    ASSERT_TRUE(FromJson(body["events"][i].dump(), &parsed).ok()) << body["events"][i];
    v1::Event shown = (*stored)[i];
    if (shown.has_artifact()) shown.mutable_artifact()->clear_uri();
    if (shown.has_checkpoint()) shown.mutable_checkpoint()->clear_path();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, shown)) << parsed.DebugString();
  }
}

TEST_F(WebApiTest, HostileInputsArePrecise400sOr404s) {
  const std::string events = "/api/jobs/" + alice_job_ + "/events";
  struct Case {
    std::string target;
    int status;
    std::string error;
  };
  const std::vector<Case> cases = {
      {events + "?after_seq=-1", 400, "query parameter after_seq: '-1' is not a non-negative integer"},
      {events + "?after_seq=abc", 400, "query parameter after_seq: 'abc' is not a non-negative integer"},
      {events + "?after_seq=", 400, "query parameter after_seq: '' is not a non-negative integer"},
      {events + "?after_seq=99999999999999999999", 400,
       "query parameter after_seq: '99999999999999999999' is not a non-negative integer"},
      {events + "?limit=0", 400, "query parameter limit: must be at least 1"},
      {events + "?limit=2001", 400, "query parameter limit: 2001 is over the maximum 2000"},
      {events + "?kinds=step_metrics,bogus", 400,
       "query parameter kinds: 'bogus' is not an event kind (step_metrics, compile, rank_state, log, artifact, "
       "stall, job_state, checkpoint)"},
      {events + "?after_seq=1&after_seq=2", 400, "query parameter after_seq is given more than once"},
      {events + "?token=x", 400, "unknown query parameter 'token'; this endpoint takes after_seq, limit, kinds"},
      {events + "?after_seq=%zz", 400, "a query parameter value '%zz' has a bad percent escape at byte 0"},
      {events + "?after_seq=1%0", 400, "a query parameter value '1%0' has a bad percent escape at byte 1"},
      {"/api/jobs?state=BOGUS", 400,
       "query parameter state: 'BOGUS' is not a job state (PENDING, SCHEDULED, RUNNING, RESTARTING, SUCCEEDED, "
       "FAILED, CANCELLED)"},
      {"/api/jobs?limit=1001", 400, "query parameter limit: 1001 is over the maximum 1000"},
      {"/api/fleet?x=1", 400, "unknown query parameter 'x'; this endpoint takes none"},
      {"/api/jobs/job%00x", 400, "a path segment 'job%00x' holds %00"},
      {"/api/jobs/" + alice_job_ + "/artifacts/%2E%2E%2Fetc%2Fpasswd", 400,
       "artifact name: " + ArtifactStore::NameProblem("../etc/passwd")},
      {"/api/jobs/" + alice_job_ + "/artifacts/trace.json.part", 400,
       "artifact name: " + ArtifactStore::NameProblem("trace.json.part")},
      {"/api/jobs/" + alice_job_ + "/artifacts/nothing.json", 404, ""},
      {"/api/jobs/" + alice_job_ + "/bogus", 404, "no such page or endpoint: '/api/jobs/" + alice_job_ + "/bogus'"},
      {"/api/jobs/" + alice_job_ + "/events/1", 404, ""},
      {"/api/nope", 404, "no such page or endpoint: '/api/nope'"},
      // An escaped '/' stays inside the id: no route is reached through it.
      {"/api/jobs/" + alice_job_ + "%2Fevents", 404, "job " + alice_job_ + "/events not found"},
      {"/nope.js", 404, "no such page or endpoint: '/nope.js'"},
      {"/static/../app.js", 404, ""},
  };
  for (const Case& c : cases) {
    WebResponse r = Call(c.target, kAdmin);
    EXPECT_EQ(r.status, c.status) << c.target << " -> " << r.body;
    if (!c.error.empty()) {
      EXPECT_EQ(ErrorOf(r), c.error) << c.target;
    }
    EXPECT_EQ(r.content_type, "application/json; charset=utf-8") << c.target;
  }
  // A job id past the checks' limit: named, and quoted at most ~100 characters.
  const std::string long_id(1500, 'j');
  WebResponse r = Call("/api/jobs/" + long_id, kAdmin);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(ErrorOf(r).find("job id"), std::string::npos) << ErrorOf(r);
  EXPECT_LT(r.body.size(), 400u);
  // Past the path limit: refused before anything is parsed.
  r = Call("/api/jobs/" + std::string(3000, 'x'), kAdmin);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorOf(r), "the path is 3010 bytes, over the limit of 2048");
  r = Call("/api/jobs?" + std::string(3000, 'x'), kAdmin);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorOf(r), "the query string is 3000 bytes, over the limit of 2048");
}

TEST_F(WebApiTest, ArtifactsAreListedAndDownloadedByteForByte) {
  std::string content;
  for (int i = 0; i < 300000; ++i) content.push_back(static_cast<char>('a' + i % 26));
  StoreArtifact(alice_job_, "rank0.trace.json", content);
  json list = Body(Call("/api/jobs/" + alice_job_ + "/artifacts", kAlice));
  ASSERT_EQ(list["artifacts"].size(), 1u);
  EXPECT_EQ(list["artifacts"][0]["name"], "rank0.trace.json");
  EXPECT_EQ(list["artifacts"][0]["size_bytes"].get<int64_t>(), static_cast<int64_t>(content.size()));
  EXPECT_EQ(list["artifacts"][0]["sha256"], Sha256Hex(content));

  WebResponse r = Call("/api/jobs/" + alice_job_ + "/artifacts/rank0.trace.json", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.file.open());
  EXPECT_EQ(r.file.size(), static_cast<int64_t>(content.size()));
  EXPECT_EQ(r.content_type, "application/octet-stream");
  EXPECT_EQ(Header(r, "Content-Disposition"), "attachment; filename=\"rank0.trace.json\"");
  std::string read(content.size(), '\0');
  ASSERT_EQ(::pread(r.file.fd(), read.data(), read.size(), 0), static_cast<ssize_t>(read.size()));
  EXPECT_TRUE(read == content);
}

TEST_F(WebApiTest, FleetCountsWorkersSlotsAndOnlyVisibleJobs) {
  json admin = Body(Call("/api/fleet", kAdmin));
  ASSERT_EQ(admin["workers"].size(), 1u);
  EXPECT_EQ(admin["workers"][0]["name"], "w1");
  EXPECT_EQ(admin["slots"].get<int>(), 8);
  int total = 0;
  for (const auto& [state, n] : admin["jobs_by_state"].items()) total += n.get<int>();
  EXPECT_EQ(total, 2);
  // The slots the two one-rank jobs hold (if placed) are the only busy ones.
  int placed = 0;
  for (const std::string& id : {alice_job_, bob_job_}) {
    const v1::Job j = manager_->Get(id).value();
    if (j.state() == v1::Job::SCHEDULED || j.state() == v1::Job::RUNNING) ++placed;
  }
  EXPECT_EQ(admin["free_slots"].get<int>(), 8 - placed);
  json alice = Body(Call("/api/fleet", kAlice));
  total = 0;
  for (const auto& [state, n] : alice["jobs_by_state"].items()) total += n.get<int>();
  EXPECT_EQ(total, 1);
  EXPECT_EQ(alice["workers"].size(), 1u);
}

TEST_F(WebApiTest, StaticFilesAreEmbedded) {
  for (const auto& [path, type] : std::vector<std::pair<std::string, std::string>>{
           {"/", "text/html; charset=utf-8"},
           {"/index.html", "text/html; charset=utf-8"},
           {"/app.js", "text/javascript; charset=utf-8"},
           {"/style.css", "text/css; charset=utf-8"},
           {"/favicon.svg", "image/svg+xml"}}) {
    WebResponse r = Call(path, "");
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.content_type, type) << path;
    EXPECT_GT(r.body.size(), 100u) << path;
  }
  // The embedded bytes are the source files', every ES module the page loads included.
  for (const char* name : {"index.html", "style.css", "favicon.svg", "app.js", "api.js", "charts.js", "dom.js",
                           "events.js", "job_page.js", "lists.js", "page.js"}) {
    std::ifstream source(std::string(TRAINYARD_SOURCE_DIR) + "/server/web/static/" + name, std::ios::binary);
    ASSERT_TRUE(source.good()) << name;
    const std::string text((std::istreambuf_iterator<char>(source)), std::istreambuf_iterator<char>());
    WebResponse r = Call(std::string("/") + name, "");
    EXPECT_EQ(r.status, 200) << name;
    EXPECT_TRUE(r.body == text) << name << " differs from its source";
    if (std::string_view(name).size() > 3 && std::string_view(name).substr(std::string_view(name).size() - 3) == ".js") {
      EXPECT_EQ(r.content_type, "text/javascript; charset=utf-8") << name;
    }
  }
}

// Authorization off: every caller is an admin, so another site's page that points a
// name of its own at 127.0.0.1 (DNS rebinding) could read the whole API as its own
// origin. Only an IP or localhost in Host is served then.
TEST_F(WebApiTest, WithoutTokensOnlyAnAddressInHostReachesTheApi) {
  const auto open = Authorizer::Disabled();
  const WebApi api(manager_.get(), store_.get(), artifacts_.get(), open.get());
  for (const char* host : {"rebind.attacker.example:8080", "rebind.attacker.example", "127.0.0.1.nip.io:80",
                           "localhost.attacker.example", "[::1", "[::1]x", "127.0.0.1:80x", "::1", "0x7f.0.0.1"}) {
    WebResponse r = CallOn(api, "/api/jobs/" + bob_job_, "", "GET", host);
    EXPECT_EQ(r.status, 403) << host << " -> " << r.body.substr(0, 200);
    EXPECT_EQ(ErrorOf(r), absl::StrCat("Host '", host,
                                       "' is not an IP address or localhost: with authorization off the web API "
                                       "answers only requests addressed to an IP or localhost (a guard against DNS "
                                       "rebinding); use the address, or give the controller a --token-file"))
        << host;
    EXPECT_EQ(r.body.find(bob_job_ + "\""), std::string::npos) << r.body;
  }
  // A long Host is quoted at most ~100 characters.
  WebResponse r = CallOn(api, "/api/me", "", "GET", std::string(5000, 'h'));
  EXPECT_EQ(r.status, 403);
  EXPECT_LT(r.body.size(), 500u);
  for (const char* host : {"", "127.0.0.1:8080", "127.0.0.1", "localhost:1", "LocalHost", "[::1]:9000", "[::1]",
                           "10.1.2.3:80"}) {
    WebResponse ok = CallOn(api, "/api/jobs/" + bob_job_, "", "GET", host);
    EXPECT_EQ(ok.status, 200) << host << " -> " << ok.body;
  }
  // The static page holds no data: served under any name.
  EXPECT_EQ(CallOn(api, "/", "", "GET", "rebind.attacker.example").status, 200);
  // With tokens a rebound page has no token, and a TLS proxy may forward its own name.
  EXPECT_EQ(Call("/api/jobs/" + bob_job_, kBob, "GET", "trainyard.example.com").status, 200);
}

// One stored event may be up to 1 MiB, so a page of `limit` events could be gigabytes:
// a page also ends past kMaxEventsPageBytes, and the rest follows from next_after_seq.
TEST_F(WebApiTest, AnEventsPageIsBoundedInBytes) {
  const std::string filler(900 * 1024, 'x');
  std::vector<v1::Event> big;
  for (int i = 0; i < 10; ++i) {
    v1::Event e;
    e.set_job_id(alice_job_);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_);
    e.mutable_log()->set_level("info");
    e.mutable_log()->set_message(std::to_string(i) + filler);
    big.push_back(std::move(e));
  }
  Append(alice_job_, std::move(big));
  std::string order;
  int64_t after = 0;
  int pages = 0;
  while (true) {
    WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=log&after_seq=" + std::to_string(after), kAlice);
    ASSERT_EQ(r.status, 200) << r.body.substr(0, 200);
    // The budget, plus at most the one event that passed it.
    EXPECT_LT(r.body.size(), web::kMaxEventsPageBytes + filler.size() + 4096) << "page " << pages;
    const json body = Body(r);
    EXPECT_LT(body["events"].size(), 10u) << "page " << pages;
    for (const auto& e : body["events"]) order += e["log"]["message"].get<std::string>().substr(0, 1);
    EXPECT_GT(body["next_after_seq"].get<int64_t>(), after);
    after = body["next_after_seq"].get<int64_t>();
    ++pages;
    if (!body["more"].get<bool>()) break;
    ASSERT_LT(pages, 20);
  }
  EXPECT_EQ(order, "0123456789");
  EXPECT_EQ(after, store_->LastSeq(alice_job_));
}

// A diverging run reports a NaN or infinite loss; JSON has no such numbers, so they
// come out as proto3 JSON spells them ("NaN", "Infinity", "-Infinity") and the page
// still parses.
TEST_F(WebApiTest, NonFiniteMetricsAreProto3JsonStringsInValidJson) {
  v1::Event nan_step = Step(alice_job_, 1, std::numeric_limits<double>::quiet_NaN(), 10.0);
  nan_step.mutable_step_metrics()->set_grad_norm(std::numeric_limits<double>::infinity());
  nan_step.mutable_step_metrics()->set_lr(-std::numeric_limits<double>::infinity());
  Append(alice_job_, {nan_step, Step(alice_job_, 2, 2.5, 11.0)});
  WebResponse r = Call("/api/jobs/" + alice_job_ + "/events?kinds=step_metrics", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  ASSERT_EQ(body["events"].size(), 2u) << r.body;
  const json& d = body["events"][0]["step_metrics"];
  EXPECT_EQ(d["loss"], "NaN") << d;
  EXPECT_EQ(d["grad_norm"], "Infinity") << d;
  EXPECT_EQ(d["lr"], "-Infinity") << d;
  EXPECT_EQ(d["step"], "1");
  EXPECT_EQ(body["events"][1]["step_metrics"]["loss"], 2.5);
}

TEST(WebListenerTest, HostHeadersThatNameAnAddress) {
  for (const char* yes : {"127.0.0.1", "127.0.0.1:1", "localhost", "LOCALHOST:8080", "[::1]", "[::1]:65535",
                          "[fe80::1]:80", "192.168.0.10:8080"}) {
    EXPECT_TRUE(web::HostIsAddress(yes)) << yes;
  }
  for (const char* no : {"example.com", "example.com:80", "127.0.0.1.example.com", "127.1", "256.0.0.1",
                         "127.0.0.1:", "127.0.0.1:123456", "127.0.0.1:8a", "[::1", "[::1]:", "[::1]80", "[]",
                         "[example.com]", "::1", "localhost.", "sub.localhost", ""}) {
    EXPECT_FALSE(web::HostIsAddress(no)) << no;
  }
}

TEST(WebListenerTest, AddressesAndTheSecureByDefaultRule) {
  EXPECT_EQ(web::CivetwebListeningPorts("127.0.0.1:8080").value(), "127.0.0.1:8080");
  EXPECT_EQ(web::CivetwebListeningPorts("localhost:0").value(), "127.0.0.1:0");
  EXPECT_EQ(web::CivetwebListeningPorts("[::1]:9000").value(), "[::1]:9000");
  EXPECT_EQ(web::CivetwebListeningPorts("0.0.0.0:80").value(), "0.0.0.0:80");
  for (const char* bad : {"127.0.0.1", "127.0.0.1:8080,8081", "127.0.0.1:80s", "127.0.0.1:65536", "web.example:80",
                          "256.0.0.1:80", "[zz]:80", ":80", "127.0.0.1:"}) {
    auto r = web::CivetwebListeningPorts(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--web-listen"), std::string::npos) << bad;
  }

  ControllerOptions options;
  options.web_listen = "0.0.0.0:8080";
  absl::Status s = CheckListenerSecurity(options, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--web-listen '0.0.0.0:8080' is not a loopback address"), std::string::npos) << s;
  options.insecure = true;
  std::vector<std::string> warnings;
  EXPECT_TRUE(CheckListenerSecurity(options, &warnings).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--web-listen 0.0.0.0:8080 serves the web UI beyond this machine"), std::string::npos)
      << warnings[0];
  options.insecure = false;
  options.web_listen = "127.0.0.1:0";
  EXPECT_TRUE(CheckListenerSecurity(options, nullptr).ok());
}

// One HTTP/1.1 exchange on loopback; the whole response (headers and body).
std::string HttpGet(int port, const std::string& raw_request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  size_t sent = 0;
  while (sent < raw_request.size()) {
    const ssize_t n = ::send(fd, raw_request.data() + sent, raw_request.size() - sent, 0);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string out;
  char buffer[65536];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) out.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST_F(WebApiTest, ServedOverHttpByCivetweb) {
  std::string content(600000, 'z');
  content[0] = 'A';
  content.back() = 'Z';
  StoreArtifact(alice_job_, "big.trace", content);
  auto server = web::WebServer::Start("127.0.0.1:0", api_.get(), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  std::string r = HttpGet(port, "GET /api/me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 401", 0), 0u) << r.substr(0, 200);
  r = HttpGet(port, std::string("GET /api/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kViewer +
                        "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("\"owner\":\"dashboard\""), std::string::npos) << r;
  // The raw path reaches the api: %2F is not a separator.
  r = HttpGet(port, "GET /api/jobs/" + alice_job_ + "%2Fevents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                        kAdmin + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("job " + alice_job_ + "/events not found"), std::string::npos) << r;
  r = HttpGet(port, "POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r.substr(0, 200);
  // HEAD: the headers alone. A body would be read as the next response on a kept-alive
  // connection, so two requests on one connection must give two whole responses.
  r = HttpGet(port, "HEAD /api/jobs HTTP/1.1\r\nHost: x\r\n\r\nGET /style.css HTTP/1.1\r\nHost: x\r\n"
                    "Connection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r.substr(0, 200);
  const size_t head_end = r.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << r.substr(0, 300);
  EXPECT_EQ(r.compare(head_end + 4, 17, "HTTP/1.1 200 OK\r\n"), 0) << r.substr(0, 600);
  EXPECT_NE(r.find("text/css"), std::string::npos) << r.substr(0, 600);
  // The artifact streamed whole, after its headers.
  r = HttpGet(port, "GET /api/jobs/" + alice_job_ + "/artifacts/big.trace HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                        kAlice + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
  const size_t body = r.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_NE(r.substr(0, body).find("Content-Length: 600000"), std::string::npos) << r.substr(0, body);
  // Compared as a bool: a mismatch must not print 600 kB.
  EXPECT_EQ(r.size() - body - 4, content.size());
  EXPECT_TRUE(r.compare(body + 4, std::string::npos, content) == 0);
  (*server)->Stop();
}

}  // namespace
}  // namespace trainyard::testing
