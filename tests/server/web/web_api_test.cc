// The web UI's handler (server/web/web_api.h) against an in-process controller
// (web_api_fixture.h): roles (a submitter sees only its own jobs, and another owner's
// job is 404 with the very message of a missing one), GET only outside the actions (every method but GET
// is 405), hostile inputs (precise 400s, quotes bounded), artifact downloads byte for
// byte, the fleet view, the static files, the Host rule without tokens. Events:
// web_events_test.cc; the listener and real HTTP: web_server_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/web/web_json.h"
#include "tests/server/web/web_api_fixture.h"

namespace trainyard::testing {
namespace {

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
  for (const std::string& suffix :
       {std::string(""), std::string("/events"), std::string("/artifacts"), std::string("/artifacts/trace.json")}) {
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
       "stall, job_state, checkpoint, validation, checkpoints_pruned)"},
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
  // w1 offers no GPUs: none in the fleet, an empty list on the worker.
  EXPECT_EQ(admin["gpus"].get<int>(), 0);
  EXPECT_EQ(admin["free_gpus"].get<int>(), 0);
  EXPECT_EQ(admin["workers"][0]["gpus"], json::array());
}

// The fleet page's worker JSON of a GPU worker: every GPU in index order with its
// newest sample joined, -1 readings as null, free / healthy from the controller's lists
// and the samples, capabilities and the drivers; a worker without capabilities: null.
TEST(WebJsonTest, WorkerJsonJoinsEachGpuWithItsSample) {
  v1::WorkerInfo w;
  w.set_name("g1");
  w.set_slots(3);
  w.set_free_slots(1);
  w.set_connected(true);
  w.set_address("10.0.0.7:7071");
  w.set_device("cuda");
  w.set_memory_bytes(int64_t{1} << 40);
  for (int i : {2, 0, 1}) {
    v1::GpuDevice* g = w.add_gpus();
    g->set_index(i);
    g->set_uuid("GPU-" + std::to_string(i));
    g->set_name("NVIDIA H200");
    g->set_memory_bytes(int64_t{143771} << 20);
    g->set_nvlink_domain(i < 2 ? 1 : 0);
  }
  v1::GpuSample* s0 = w.add_gpu_samples();
  s0->set_index(0);
  s0->set_utilization(0.25);
  s0->set_memory_used_bytes(int64_t{40} << 30);
  s0->set_power_watts(312);
  s0->set_temperature_celsius(55);
  s0->set_healthy(true);
  v1::GpuSample* s2 = w.add_gpu_samples();
  s2->set_index(2);
  s2->set_utilization(-1);
  s2->set_memory_used_bytes(-1);
  s2->set_power_watts(-1);
  s2->set_temperature_celsius(-1);
  s2->set_ecc_uncorrected(4);
  s2->set_xid_errors(2);
  s2->set_last_xid(48);
  s2->set_healthy(false);
  s2->set_unhealthy_reason("uncorrectable ECC error");
  w.add_free_gpus(0);
  w.add_unhealthy_gpus(1);  // out of service, its sample not come yet
  w.mutable_capabilities()->set_libtorch_version("2.4.0");
  w.mutable_capabilities()->set_cuda(true);
  w.mutable_capabilities()->set_cuda_version("12.4");
  w.mutable_capabilities()->set_nccl(true);
  w.mutable_capabilities()->set_bf16(true);
  w.set_gpu_driver_version("550.54.15");
  w.set_cuda_driver_version("12.4");
  w.set_nvlink_topology_known(true);
  w.add_nccl_env("NCCL_IB_DISABLE=1");
  w.set_cordoned(true);
  w.set_cordon_reason("ECC errors: RMA pending");

  // The expected JSON is a file the browser test (job_page_test.py) serves as a GPU
  // worker of /api/fleet, so the page is checked against this very shape.
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/tests/server/web/gpu_worker.json");
  ASSERT_TRUE(in.good());
  const json expected = json::parse(in);
  EXPECT_EQ(web::WorkerJson(w), expected) << web::WorkerJson(w).dump(2);

  v1::WorkerInfo cpu;
  cpu.set_name("c1");
  const json c = web::WorkerJson(cpu);
  EXPECT_TRUE(c["capabilities"].is_null());
  EXPECT_EQ(c["gpus"], json::array());
}

// A CUDA job's placement: each rank's GPU (null on CPU, 0 is a GPU) and the workers'
// NCCL settings.
TEST(WebJsonTest, JobDetailShowsEachRanksGpuAndTheWorkersNcclSettings) {
  v1::Job job;
  job.set_id("j");
  v1::Placement::Rank* r0 = job.mutable_placement()->add_ranks();
  r0->set_rank(0);
  r0->set_worker("g1");
  r0->set_gpu(0);
  r0->set_gpu_uuid("GPU-0");
  v1::Placement::Rank* r1 = job.mutable_placement()->add_ranks();
  r1->set_rank(1);
  r1->set_worker("c1");
  v1::Placement::WorkerEnv* e = job.mutable_placement()->add_worker_env();
  e->set_worker("g1");
  e->add_nccl_env("NCCL_SOCKET_IFNAME=eth0");
  const json j = web::JobDetailJson(job);
  EXPECT_EQ(j["placement"], json::parse(R"([{"rank": 0, "worker": "g1", "gpu": 0, "gpu_uuid": "GPU-0"},
                                             {"rank": 1, "worker": "c1", "gpu": null, "gpu_uuid": ""}])"));
  EXPECT_EQ(j["worker_env"], json::parse(R"([{"worker": "g1", "nccl_env": ["NCCL_SOCKET_IFNAME=eth0"]}])"));
}

// Sharing a fleet: a preempted job's restarts leave its preemptions out, its
// preemption times are milliseconds, and its owner's share is every ShareInfo field (null
// without one).
TEST(WebJsonTest, JobJsonShowsPreemptionsAndTheOwnersShare) {
  v1::Job job;
  job.set_id("j");
  job.set_attempt(4);  // 1 + a failure's restart + 2 preemptions
  job.set_preemptions(2);
  job.add_preempt_times()->set_seconds(1796083200);
  job.add_preempt_times()->set_seconds(1796083260);
  job.mutable_preempt_times(1)->set_nanos(250'000'000);
  json j = web::JobDetailJson(job);
  EXPECT_EQ(j["restarts"], 1);
  EXPECT_EQ(j["preemptions"], 2);
  EXPECT_EQ(j["preempt_times_ms"], json::parse("[1796083200000, 1796083260250]"));
  EXPECT_TRUE(j["share"].is_null());
  EXPECT_EQ(web::JobSummaryJson(job)["restarts"], 1);
  // The layout: a spec stored before parallelism.dp_shard existed reads as 1 (replicated).
  EXPECT_EQ(web::JobSummaryJson(job)["dp_shard"], 1);
  job.mutable_spec()->mutable_parallelism()->set_dp(8);
  job.mutable_spec()->mutable_parallelism()->set_dp_shard(4);
  EXPECT_EQ(web::JobSummaryJson(job)["dp"], 8);
  EXPECT_EQ(web::JobDetailJson(job)["dp_shard"], 4);

  v1::ShareInfo* s = job.mutable_share();
  s->set_owner("alice");
  s->set_group("research");
  s->set_owner_slots_in_use(6);
  s->set_owner_slot_limit(8);
  s->set_owner_gpus_in_use(1);
  s->set_owner_gpu_limit(0);
  s->set_group_slots_in_use(10);
  s->set_group_slot_limit(16);
  s->set_group_gpus_in_use(4);
  s->set_group_gpu_limit(8);
  s->set_weight(2);
  s->set_usage_slot_seconds(45000.5);
  s->set_fair_share(22500.25);
  s->set_queue_position(3);
  s->set_queue_length(5);
  EXPECT_EQ(web::JobDetailJson(job)["share"], json::parse(R"({
      "owner": "alice", "group": "research", "owner_slots_in_use": 6, "owner_slot_limit": 8,
      "owner_gpus_in_use": 1, "owner_gpu_limit": 0, "group_slots_in_use": 10, "group_slot_limit": 16,
      "group_gpus_in_use": 4, "group_gpu_limit": 8, "weight": 2.0, "usage_slot_seconds": 45000.5,
      "fair_share": 22500.25, "queue_position": 3, "queue_length": 5})"));
  // Every ShareInfo field is there, by its .proto name.
  const json share = web::ShareJson(*s);
  EXPECT_EQ(share.size(), static_cast<size_t>(v1::ShareInfo::descriptor()->field_count()));
  for (int i = 0; i < v1::ShareInfo::descriptor()->field_count(); ++i) {
    EXPECT_TRUE(share.contains(v1::ShareInfo::descriptor()->field(i)->name())) << i;
  }
}

TEST_F(WebApiTest, StaticFilesAreEmbedded) {
  for (const auto& [path, type] :
       std::vector<std::pair<std::string, std::string>>{{"/", "text/html; charset=utf-8"},
                                                        {"/index.html", "text/html; charset=utf-8"},
                                                        {"/app.js", "text/javascript; charset=utf-8"},
                                                        {"/gpus.js", "text/javascript; charset=utf-8"},
                                                        {"/style.css", "text/css; charset=utf-8"},
                                                        {"/favicon.svg", "image/svg+xml"}}) {
    WebResponse r = Call(path, "");
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.content_type, type) << path;
    EXPECT_GT(r.body.size(), 100u) << path;
  }
  // The embedded bytes are the source files', every ES module the page loads included.
  for (const char* name :
       {"index.html", "style.css", "favicon.svg", "app.js", "api.js", "charts.js", "dom.js", "events.js", "gpus.js",
        "job_page.js", "lists.js", "page.js", "share.js", "actions.js", "stream.js", "sweep_page.js"}) {
    std::ifstream source(std::string(TRAINYARD_SOURCE_DIR) + "/server/web/static/" + name, std::ios::binary);
    ASSERT_TRUE(source.good()) << name;
    const std::string text((std::istreambuf_iterator<char>(source)), std::istreambuf_iterator<char>());
    WebResponse r = Call(std::string("/") + name, "");
    EXPECT_EQ(r.status, 200) << name;
    EXPECT_TRUE(r.body == text) << name << " differs from its source";
    if (std::string_view(name).size() > 3 &&
        std::string_view(name).substr(std::string_view(name).size() - 3) == ".js") {
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
  for (const char* host :
       {"", "127.0.0.1:8080", "127.0.0.1", "localhost:1", "LocalHost", "[::1]:9000", "[::1]", "10.1.2.3:80"}) {
    WebResponse ok = CallOn(api, "/api/jobs/" + bob_job_, "", "GET", host);
    EXPECT_EQ(ok.status, 200) << host << " -> " << ok.body;
  }
  // The static page holds no data: served under any name.
  EXPECT_EQ(CallOn(api, "/", "", "GET", "rebind.attacker.example").status, 200);
  // With tokens a rebound page has no token, and a TLS proxy may forward its own name.
  EXPECT_EQ(Call("/api/jobs/" + bob_job_, kBob, "GET", "trainyard.example.com").status, 200);
}

}  // namespace
}  // namespace trainyard::testing
