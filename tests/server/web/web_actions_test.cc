// The web UI's actions (POST /api/jobs/ID/{cancel,checkpoint,resubmit},
// /api/workers/NAME/{cordon,uncordon,drain}), the audit rows they leave, ListAudit's
// rules, and the job page's event stream: hostile requests first, then what an accepted
// one changes, checked through the manager and the store rather than the response.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/base/text.h"
#include "google/protobuf/util/time_util.h"
#include "server/service/job_actions.h"
#include "server/web/web_server.h"
#include "tests/server/web/web_api_fixture.h"

namespace trainyard::testing {
namespace {

using google::protobuf::util::TimeUtil;

TEST_F(WebActionsTest, NoTokenOrAWrongOneIs401AndChangesNothing) {
  const std::string path = "/api/jobs/" + alice_job_ + "/cancel";
  EXPECT_EQ(Post(path, "", "{}").status, 401);
  WebResponse r = Post(path, "not-a-token", "{}");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(ErrorOf(r), "unknown token");
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
  // No one: not recorded (anyone could flood the log otherwise).
  EXPECT_TRUE(Rows().empty());
}

TEST_F(WebActionsTest, AViewerIsRefusedAndTheRefusalIsAudited) {
  WebResponse r = Post("/api/jobs/" + alice_job_ + "/cancel", kViewer, R"({"reason":"x"})");
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(ErrorOf(r).find("viewer role, which cannot cancel jobs"), std::string::npos) << r.body;
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
  auto rows = Rows(alice_job_);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].identity(), "dashboard");
  EXPECT_EQ(rows[0].role(), "viewer");
  EXPECT_EQ(rows[0].action(), "cancel");
  EXPECT_EQ(rows[0].via(), "web");
  EXPECT_EQ(rows[0].outcome(), "PERMISSION_DENIED");
  EXPECT_EQ(rows[0].reason(), "x");
  // Workers: admin only.
  r = Post("/api/workers/w1/cordon", kAlice, "{}");
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(ErrorOf(r).find("cannot cordon workers; that needs admin"), std::string::npos) << r.body;
}

TEST_F(WebActionsTest, ActionsArePostOnlyAndNothingElseIsPost) {
  // GET on an action is 405 naming POST; a method the UI never takes, 405 naming GET.
  for (const char* method : {"GET", "PUT", "DELETE", "PATCH"}) {
    WebResponse r = Call("/api/jobs/" + alice_job_ + "/cancel", kAdmin, method);
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(Header(r, "Allow"), std::string(method) == "GET" ? "POST" : "GET") << method;
  }
  // GET on an action is 405 naming POST; POST on a route that reads is 405 naming GET.
  WebResponse r = Call("/api/workers/w1/drain", kAdmin, "GET");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r, "Allow"), "POST");
  r = Post("/api/jobs", kAdmin, "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r, "Allow"), "GET");
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
}

TEST_F(WebActionsTest, BodiesAreBoundedJsonObjectsOfKnownKeys) {
  const std::string path = "/api/jobs/" + alice_job_ + "/cancel";
  WebRequest big;
  big.method = "POST";
  big.path = path;
  big.content_type = "application/json";
  big.body_too_large = true;
  big.authorization.push_back(std::string("Bearer ") + kAlice);
  EXPECT_EQ(api_->Handle(big).status, 413);

  WebResponse r = Post(path, kAlice, R"({"reason":"x"})", "text/plain");
  EXPECT_EQ(r.status, 415);
  r = Post(path, kAlice, "reason=x", "application/x-www-form-urlencoded");
  EXPECT_EQ(r.status, 415);
  r = Post(path, kAlice, "{\"reason\":");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorOf(r).rfind("the body is not JSON", 0), 0u) << r.body;
  r = Post(path, kAlice, "{\"reason\":\"\xff\xfe\"}");  // invalid UTF-8 inside a string
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(IsUtf8(r.body));
  r = Post(path, kAlice, "[1]");
  EXPECT_EQ(ErrorOf(r), "the body must be a JSON object, not array");
  r = Post(path, kAlice, R"({"reason":7})");
  EXPECT_EQ(ErrorOf(r), "body.reason: expected a string, got number");
  r = Post(path, kAlice, R"({"reason":"x","force":true})");
  EXPECT_EQ(ErrorOf(r), "body: unknown key 'force' (this action takes reason)");
  r = Post("/api/jobs/" + alice_job_ + "/resubmit", kAlice, R"({"set":["training.steps=5"],"sets":[]})");
  EXPECT_EQ(ErrorOf(r), "body: unknown key 'sets' (this action takes set)");
  r = Post("/api/jobs/" + alice_job_ + "/resubmit", kAlice, R"({"set":"training.steps=5"})");
  EXPECT_EQ(ErrorOf(r), "body.set: expected an array of strings, got string");
  r = Post("/api/jobs/" + alice_job_ + "/checkpoint", kAlice, R"({"timeout_s":"soon"})");
  EXPECT_EQ(ErrorOf(r), "body.timeout_s: expected a number, got string");
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
  EXPECT_EQ(manager_->List({}, 100, "").size(), 2u);  // no resubmit went through
  // Each refusal of a known caller is a row: 413 and 415 are refused before any body is read, and are not.
  int invalid = 0;
  for (const auto& row : Rows()) invalid += row.outcome() == "INVALID_ARGUMENT" ? 1 : 0;
  EXPECT_EQ(invalid, 8);
}

TEST_F(WebActionsTest, AnotherOwnersJobIsNotFoundAndAnInvalidIdIsStoredSafely) {
  WebResponse r = Post("/api/jobs/" + bob_job_ + "/cancel", kAlice, "{}");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorOf(r), "job " + bob_job_ + " not found");
  EXPECT_NE(StateOf(bob_job_), v1::Job::CANCELLED);
  r = Post("/api/jobs/%FF%FEjob/cancel", kAlice, "{}");
  EXPECT_EQ(r.status, 400);
  auto rows = Rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].outcome(), "INVALID_ARGUMENT");
  EXPECT_EQ(rows[0].target(), "\xEF\xBF\xBD\xEF\xBF\xBDjob");  // two U+FFFD
  EXPECT_EQ(rows[0].job_id(), "");                             // not an id: names no job
  EXPECT_EQ(rows[1].outcome(), "NOT_FOUND");
}

TEST_F(WebActionsTest, CancelThroughTheWebIsTheJobServicesCancelWithItsAuditRow) {
  clock_.Advance(absl::Seconds(5));
  WebResponse r = Post("/api/jobs/" + alice_job_ + "/cancel", kAlice, R"({"reason":"wrong data"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["job"]["state"], "CANCELLED");
  EXPECT_EQ(StateOf(alice_job_), v1::Job::CANCELLED);
  auto job = manager_->Get(alice_job_);
  EXPECT_EQ(job->failure_reason().find("wrong data") != std::string::npos, true) << job->failure_reason();
  auto rows = Rows(alice_job_);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].outcome(), "OK");
  EXPECT_EQ(rows[0].identity(), "alice");
  EXPECT_EQ(rows[0].role(), "submitter");
  EXPECT_EQ(TimeUtil::TimestampToMilliseconds(rows[0].time()), absl::ToUnixMillis(clock_.Now()));
  auto stopped = actions_->StoppedBy(alice_job_);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].identity(), "alice");
  EXPECT_TRUE(actions_->StoppedBy(bob_job_).empty());
}

TEST_F(WebActionsTest, ResubmitAppliesSetEditsThroughTheCliRules) {
  WebResponse r = Post("/api/jobs/" + alice_job_ + "/resubmit", kAlice, R"({"set":["training.stepz=7"]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(ErrorOf(r).find("training.stepz"), std::string::npos) << r.body;
  r = Post("/api/jobs/" + alice_job_ + "/resubmit", kAlice, R"({"set":["training.steps=banana"]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(ErrorOf(r).find("--set training.steps"), std::string::npos) << r.body;
  r = Post("/api/jobs/" + alice_job_ + "/resubmit", kViewer, R"({"set":["training.steps=7"]})");
  EXPECT_EQ(r.status, 403);
  r = Post("/api/jobs/" + bob_job_ + "/resubmit", kAlice, R"({"set":["training.steps=7"]})");
  EXPECT_EQ(r.status, 404);
  ASSERT_EQ(manager_->List({}, 100, "").size(), 2u);

  r = Post("/api/jobs/" + alice_job_ + "/resubmit", kAdmin, R"({"set":["training.steps=7","job.name=again"]})");
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = Body(r)["job"]["id"];
  auto job = manager_->Get(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->owner(), "root");  // the caller's, not the old job's
  EXPECT_EQ(job->spec().training().steps(), 7);
  EXPECT_EQ(job->spec().job().name(), "again");
  auto old = manager_->Get(alice_job_);
  EXPECT_EQ(job->spec().model().preset(), old->spec().model().preset());
  auto rows = Rows(id);  // the new job is named by its row
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].action(), "resubmit");
  EXPECT_EQ(rows[0].outcome(), "OK");
  EXPECT_EQ(rows[0].job_id(), alice_job_);
}

TEST_F(WebActionsTest, AdminsCordonUncordonAndDrainWorkers) {
  WebResponse r = Post("/api/workers/w1/cordon", kAdmin, R"({"reason":"disk swap"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["worker"]["cordoned"], true);
  auto cordons = store_->LoadCordons();
  ASSERT_TRUE(cordons.ok());
  EXPECT_EQ((*cordons)["w1"], "disk swap");
  r = Post("/api/workers/w1/uncordon", kAdmin, R"({"reason":"x"})");
  EXPECT_EQ(ErrorOf(r), "body: unknown key 'reason' (this action takes no keys)");
  r = Post("/api/workers/w1/uncordon", kAdmin, "");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(store_->LoadCordons()->count("w1"), 0u);
  r = Post("/api/workers/nope/drain", kAdmin, R"({"reason":"k"})");
  EXPECT_EQ(r.status, 404);
  r = Post("/api/workers/w1/drain", kAdmin, R"({"reason":"kernel"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["worker"]["cordoned"], true);
  std::vector<std::string> actions;
  for (const auto& row : Rows()) actions.push_back(row.action() + ":" + row.outcome());
  EXPECT_EQ(actions, (std::vector<std::string>{"drain:OK", "drain:NOT_FOUND", "uncordon:OK",
                                               "uncordon:INVALID_ARGUMENT", "cordon:OK"}));
}

TEST_F(WebActionsTest, WithoutTokensAForeignOriginCannotAct) {
  auto off = Authorizer::Disabled();
  WebApi open(manager_.get(), store_.get(), artifacts_.get(), off.get(), actions_.get(), &hub_);
  WebRequest request;
  request.method = "POST";
  request.path = "/api/jobs/" + alice_job_ + "/cancel";
  request.host = "127.0.0.1:8080";
  request.content_type = "application/json";
  request.origin = "http://evil.example";
  WebResponse r = open.Handle(request);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
  request.content_type = "text/plain";  // what a cross-site form can send
  request.origin = "";
  EXPECT_EQ(open.Handle(request).status, 415);
  request.content_type = "application/json";
  request.origin = "http://127.0.0.1:8080";
  EXPECT_EQ(open.Handle(request).status, 200);
  EXPECT_EQ(StateOf(alice_job_), v1::Job::CANCELLED);
  open.Stop();
}

TEST_F(WebActionsTest, ListAuditIsForAdminsWithCheckedArguments) {
  Caller admin{Role::kAdmin, "root"};
  Caller alice{Role::kSubmitter, "alice"};
  Post("/api/jobs/" + alice_job_ + "/cancel", kAlice, "{}");
  v1::ListAuditRequest request;
  EXPECT_EQ(actions_->ListAudit(alice, request).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(actions_->ListAudit(admin, request)->size(), 1u);
  request.set_limit(1000000);
  EXPECT_EQ(actions_->ListAudit(admin, request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_limit(-1);
  EXPECT_EQ(actions_->ListAudit(admin, request).status().code(), absl::StatusCode::kInvalidArgument);
  request.set_limit(0);
  request.mutable_since()->set_seconds(absl::ToUnixSeconds(clock_.Now()) + 3600);
  auto future = actions_->ListAudit(admin, request);
  EXPECT_EQ(future.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(future.status().message().find("in the future"), std::string::npos) << future.status();
  request.mutable_since()->set_seconds(-5);
  EXPECT_EQ(actions_->ListAudit(admin, request).status().code(), absl::StatusCode::kInvalidArgument);
  request.clear_since();
  request.set_job_id("job-999");
  auto none = actions_->ListAudit(admin, request);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  request.set_job_id("job-\xff");
  EXPECT_EQ(actions_->ListAudit(admin, request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(WebActionsTest, AuditRowsSurviveAReopenAndRetentionKeepsThoseNamingJobs) {
  Post("/api/jobs/" + alice_job_ + "/cancel", kAlice, "{}");
  Post("/api/workers/w1/cordon", kAdmin, "{}");
  const int64_t later = absl::ToUnixMillis(clock_.Now() + absl::Hours(24 * 400));
  manager_.reset();
  artifacts_.reset();
  api_.reset();
  actions_.reset();
  store_.reset();
  auto store = SqliteJobStore::Open(dir_.path());
  ASSERT_TRUE(store.ok()) << store.status();
  store_ = std::move(*store);
  EXPECT_EQ(Rows().size(), 2u);
  // A year on, the worker's row goes; the job's stays with the job.
  auto pruned = store_->PruneAudit(later);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(*pruned, 1);
  auto rows = Rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].job_id(), alice_job_);
}

// The job page's stream: frames are the stored events, in order, and a resume skips
// what was seen. The job runs on the fake worker (it never settles): the reader leaves
// once it has what it expects, as a browser that closes the page.
TEST_F(WebActionsTest, EventStreamSendsStoredEventsAndResumes) {
  Append(alice_job_, {Step(alice_job_, 1, 2.5, 100), Step(alice_job_, 2, 2.25, 110)});
  hub_.Flush();
  auto events = store_->ReadEvents(alice_job_, 1, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_GE(events->size(), 3u);

  auto run = [&](WebRequest request, size_t frames) {
    WebResponse r = api_->Handle(request);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.content_type, "text/event-stream; charset=utf-8");
    std::string out;
    size_t seen = 0;
    if (r.stream)
      r.stream([&](std::string_view data) {
        out.append(data);
        return ++seen < frames;
      });
    return out;
  };
  WebRequest request;
  request.method = "GET";
  request.path = "/api/jobs/" + alice_job_ + "/stream";
  request.authorization.push_back(std::string("Bearer ") + kViewer);
  std::string expected;
  for (const auto& e : *events) expected += web::EventFrame(e);
  EXPECT_EQ(run(request, events->size()), expected);
  EXPECT_EQ(api_->open_streams(), 0);  // the reader left: its place is free

  request.last_event_id = "2";  // resume: only what came after seq 2
  std::string tail;
  for (const auto& e : *events) {
    if (e.seq() > 2) tail += web::EventFrame(e);
  }
  EXPECT_EQ(run(request, events->size() - 2), tail);
  request.last_event_id = "";
  request.query = "after=" + std::to_string(events->size() - 1);
  EXPECT_EQ(run(request, 1), web::EventFrame(events->back()));

  request.query = "after=-1";
  EXPECT_EQ(api_->Handle(request).status, 400);
  request.query = "";
  request.last_event_id = "abc";
  WebResponse bad = api_->Handle(request);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(ErrorOf(bad).find("Last-Event-ID"), std::string::npos);
  // Another owner's job is a missing one here too.
  request.last_event_id = "";
  request.authorization = {std::string("Bearer ") + kBob};
  EXPECT_EQ(api_->Handle(request).status, 404);
}

TEST_F(WebActionsTest, EventStreamsAreBoundedAndAWaitingOneEndsOnStop) {
  WebRequest request;
  request.method = "GET";
  request.path = "/api/jobs/" + alice_job_ + "/stream";
  request.authorization.push_back(std::string("Bearer ") + kViewer);
  std::vector<WebResponse> held;
  for (int i = 0; i < web::kMaxEventStreams; ++i) {
    held.push_back(api_->Handle(request));
    ASSERT_EQ(held.back().status, 200) << held.back().body;
  }
  WebResponse over = api_->Handle(request);
  EXPECT_EQ(over.status, 503);
  EXPECT_EQ(Header(over, "Retry-After"), "10");
  EXPECT_EQ(api_->open_streams(), web::kMaxEventStreams);
  held.pop_back();  // a body never run (a HEAD) gives its place back
  EXPECT_EQ(api_->open_streams(), web::kMaxEventStreams - 1);
  // A running job's stream waits for events; Stop ends it.
  std::string out;
  std::thread reader([&] {
    held.back().stream([&](std::string_view d) {
      out.append(d);
      return true;
    });
  });
  api_->Stop();
  reader.join();
  EXPECT_EQ(out, "event: end\ndata: {\"reason\":\"the controller is stopping\"}\n\n");
  EXPECT_EQ(api_->Handle(request).status, 503);  // no new ones
}

// Real HTTP: a cookie is never a credential, and an over-long body is refused unread.
TEST_F(WebActionsTest, OverHttpACookieIsNoTokenAndABigBodyIs413) {
  auto server = web::WebServer::Start("127.0.0.1:0", api_.get(), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  auto exchange = [port = (*server)->port()](const std::string& raw) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      ::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
      char buffer[65536];
      ssize_t n;
      while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) out.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  };
  const std::string path = "/api/jobs/" + alice_job_ + "/cancel";
  std::string r =
      exchange("POST " + path + " HTTP/1.1\r\nHost: x\r\nCookie: token=" + kAlice + "; Authorization=Bearer%20" +
               kAlice + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(r.rfind("HTTP/1.1 401", 0), 0u) << r.substr(0, 200);
  r = exchange("POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kAlice +
               "\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\nConnection: close\r\n\r\n{}");
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r.substr(0, 200);
  r = exchange("GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kAlice +
               "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("Allow: POST"), std::string::npos) << r.substr(0, 300);
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
  r = exchange(
      "POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kAlice +
      "\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{\"reason\":\"http\"}");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r.substr(0, 200);
  EXPECT_EQ(StateOf(alice_job_), v1::Job::CANCELLED);
  (*server)->Stop();
}

}  // namespace
}  // namespace trainyard::testing
