// The web API's sweeps (GET /api/sweeps, GET /api/sweeps/ID, POST /api/sweeps/ID/cancel)
// over the in-process controller (web_api_fixture.h), each sweep submitted through
// JobActions as the JobService does: hostile requests first (no token, another owner's
// sweep, odd and huge ids, wrong methods, a viewer's cancel, bad bodies), then what an
// accepted cancel changes, checked through the manager and the audit log, and the
// answers as the proto3 JSON of their messages.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/text.h"
#include "common/events/proto_json.h"
#include "server/web/web_json.h"
#include "tests/server/web/web_api_fixture.h"

namespace trainyard::testing {
namespace {

using google::protobuf::util::MessageDifferencer;

class WebSweepsTest : public WebActionsTest {
 protected:
  void SetUp() override {
    WebActionsTest::SetUp();
    if (HasFatalFailure()) return;
    alice_sweep_ = SubmitSweepAs("alice", {"1e-4", "3e-4"});
    bob_sweep_ = SubmitSweepAs("bob", {"1e-4", "1e-3"});
    ASSERT_FALSE(alice_sweep_.empty());
    ASSERT_FALSE(bob_sweep_.empty());
  }

  // A sweep of `owner` over training.lr, through JobActions as the JobService submits.
  std::string SubmitSweepAs(const std::string& owner, const std::vector<std::string>& lrs) {
    v1::SubmitSweepRequest request;
    v1::JobSpec* spec = request.mutable_spec();
    spec->mutable_job()->set_name("grid-" + owner);
    spec->mutable_model()->set_preset("tiny");
    spec->mutable_parallelism()->set_dp(1);
    spec->mutable_parallelism()->set_tp(1);
    v1::SweepAxis* axis = request.add_axes();
    axis->set_key("training.lr");
    for (const std::string& lr : lrs) axis->add_values(lr);
    request.set_max_concurrent(1);
    auto view = actions_->SubmitSweep(Caller{Role::kSubmitter, owner}, Via::kGrpc, request);
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? view->sweep().id() : "";
  }
  std::vector<std::string> ChildrenOf(const std::string& sweep) {
    auto view = actions_->GetSweep(Caller{Role::kAdmin, "root"}, sweep);
    EXPECT_TRUE(view.ok()) << view.status();
    std::vector<std::string> ids;
    if (view.ok()) ids.assign(view->sweep().job_ids().begin(), view->sweep().job_ids().end());
    return ids;
  }
  std::vector<std::string> ListedSweepIds(const std::string& token) const {
    WebResponse r = Call("/api/sweeps", token);
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> ids;
    const json body = Body(r);
    if (!body.contains("sweeps")) return ids;
    for (const auto& s : body["sweeps"]) ids.push_back(s["sweep"]["id"].get<std::string>());
    return ids;
  }
  int CancelledChildren(const std::string& sweep) {
    int n = 0;
    for (const std::string& id : ChildrenOf(sweep)) n += StateOf(id) == v1::Job::CANCELLED ? 1 : 0;
    return n;
  }
  std::vector<v1::AuditRecord> SweepCancelRows() {
    std::vector<v1::AuditRecord> out;
    for (v1::AuditRecord& row : Rows()) {
      if (row.action() == "cancel_sweep") out.push_back(std::move(row));
    }
    return out;
  }
  // A rank-0 Validation event of job `id` (attempt 1).
  v1::Event Validation(const std::string& id, int64_t step, double loss) {
    v1::Event e;
    e.set_job_id(id);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_);
    e.mutable_validation()->set_step(step);
    e.mutable_validation()->set_loss(loss);
    e.mutable_validation()->set_tokens(4096);
    e.mutable_validation()->set_ms(12.5);
    return e;
  }

  std::string alice_sweep_, bob_sweep_;
};

TEST_F(WebSweepsTest, EverySweepRouteNeedsAKnownBearerToken) {
  for (const std::string& target : {std::string("/api/sweeps"), "/api/sweeps/" + alice_sweep_}) {
    WebResponse none = Call(target, "");
    EXPECT_EQ(none.status, 401) << target;
    EXPECT_EQ(Header(none, "WWW-Authenticate"), "Bearer realm=\"trainyard\"") << target;
    EXPECT_EQ(Call(target, "not-a-known-token").status, 401) << target;
  }
  EXPECT_EQ(Post("/api/sweeps/" + alice_sweep_ + "/cancel", "", "{}").status, 401);
  EXPECT_EQ(Post("/api/sweeps/" + alice_sweep_ + "/cancel", "not-a-known-token", "{}").status, 401);
  EXPECT_EQ(CancelledChildren(alice_sweep_), 0);
  // No one: not recorded.
  EXPECT_TRUE(SweepCancelRows().empty());
}

TEST_F(WebSweepsTest, ASubmitterSeesOnlyItsOwnSweepsAndAnothersReadsAsMissing) {
  EXPECT_EQ(ListedSweepIds(kAlice), std::vector<std::string>{alice_sweep_});
  EXPECT_EQ(ListedSweepIds(kBob), std::vector<std::string>{bob_sweep_});
  // Newest first for the roles that see everything.
  EXPECT_EQ(ListedSweepIds(kViewer), (std::vector<std::string>{bob_sweep_, alice_sweep_}));
  EXPECT_EQ(ListedSweepIds(kAdmin), (std::vector<std::string>{bob_sweep_, alice_sweep_}));

  const std::string missing = "sweep-999999";
  WebResponse theirs = Call("/api/sweeps/" + bob_sweep_, kAlice);
  WebResponse none = Call("/api/sweeps/" + missing, kAlice);
  EXPECT_EQ(theirs.status, 404) << theirs.body;
  EXPECT_EQ(none.status, 404) << none.body;
  // Word for word a missing sweep's message, the id aside.
  EXPECT_NE(ErrorOf(none).find(missing), std::string::npos) << ErrorOf(none);
  EXPECT_EQ(ErrorOf(theirs), absl::StrReplaceAll(ErrorOf(none), {{missing, bob_sweep_}}));
  // Nothing of bob's sweep leaks: not its name, not its children.
  EXPECT_EQ(theirs.body.find("grid-bob"), std::string::npos) << theirs.body;
  for (const std::string& child : ChildrenOf(bob_sweep_)) {
    EXPECT_EQ(theirs.body.find(child + "\""), std::string::npos) << theirs.body;
  }
  EXPECT_EQ(Call("/api/sweeps/" + bob_sweep_, kViewer).status, 200);
  EXPECT_EQ(Call("/api/sweeps/" + bob_sweep_, kBob).status, 200);

  // Cancelling it reads the same, and changes nothing.
  WebResponse cancel = Post("/api/sweeps/" + bob_sweep_ + "/cancel", kAlice, "{}");
  WebResponse cancel_none = Post("/api/sweeps/" + missing + "/cancel", kAlice, "{}");
  EXPECT_EQ(cancel.status, 404) << cancel.body;
  EXPECT_EQ(cancel_none.status, 404) << cancel_none.body;
  EXPECT_EQ(ErrorOf(cancel), absl::StrReplaceAll(ErrorOf(cancel_none), {{missing, bob_sweep_}}));
  EXPECT_EQ(CancelledChildren(bob_sweep_), 0);
}

TEST_F(WebSweepsTest, HostileSweepIdsAndQueriesArePrecise400sOr404s) {
  const std::string one = "/api/sweeps/" + alice_sweep_;
  struct Case {
    std::string target;
    int status;
    std::string error;  // "" : any
  };
  const std::vector<Case> cases = {
      {"/api/sweeps/", 400, "sweep id: is empty; give a sweep id such as sweep-1"},
      {"/api/sweeps/sweep%201", 400, "sweep id: is not a sweep id: sweep 1"},
      {"/api/sweeps/sweep-1%0A", 400, "sweep id: is not a sweep id: sweep-1\\x0a"},
      {"/api/sweeps/%FF%FEsweep", 400, "sweep id: is not a sweep id: \\xff\\xfesweep"},
      {"/api/sweeps/sweep%00", 400, "a path segment 'sweep%00' holds %00"},
      {"/api/sweeps/sweep%zz", 400, ""},
      {"/api/sweeps/" + std::string(65, 's'), 400,
       "sweep id: is 65 bytes, more than the 64 a sweep id can have: " + std::string(65, 's')},
      {"/api/sweeps/sweep-999999", 404, ""},
      {"/api/sweeps/" + alice_job_, 404, ""},  // a job's id is no sweep's
      // An escaped '/' stays inside the id: no route is reached through it.
      {one + "%2Fcancel", 404, ""},
      {one + "/children", 404, "no such page or endpoint: '" + one + "/children'"},
      {one + "/cancel/now", 404, ""},
      {"/api/sweeps?limit=0", 400, "query parameter limit: must be at least 1"},
      {"/api/sweeps?limit=1001", 400, "query parameter limit: 1001 is over the maximum 1000"},
      {"/api/sweeps?limit=-1", 400, "query parameter limit: '-1' is not a non-negative integer"},
      {"/api/sweeps?limit=1&limit=2", 400, "query parameter limit is given more than once"},
      {"/api/sweeps?state=RUNNING", 400, "unknown query parameter 'state'; this endpoint takes limit"},
      {one + "?limit=1", 400, "unknown query parameter 'limit'; this endpoint takes none"},
  };
  for (const Case& c : cases) {
    WebResponse r = Call(c.target, kAdmin);
    EXPECT_EQ(r.status, c.status) << c.target << " -> " << r.body;
    if (!c.error.empty()) {
      EXPECT_EQ(ErrorOf(r), c.error) << c.target;
    }
    EXPECT_EQ(r.content_type, "application/json; charset=utf-8") << c.target;
  }
  // A huge id: named, quoted at most ~100 characters.
  WebResponse r = Call("/api/sweeps/" + std::string(1500, 's'), kAdmin);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorOf(r).rfind("sweep id: is 1500 bytes, more than the 64", 0), 0u) << ErrorOf(r);
  EXPECT_LT(r.body.size(), 400u);
  r = Call("/api/sweeps/" + std::string(3000, 's'), kAdmin);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorOf(r), "the path is 3012 bytes, over the limit of 2048");
  EXPECT_EQ(Call("/api/sweeps?limit=1000", kAdmin).status, 200);

  // The same ids on the cancel action: refused before JobActions, each refusal a row.
  const size_t rows_before = SweepCancelRows().size();
  for (const std::string& id : {std::string("sweep%201"), std::string("%FF%FEsweep"), std::string(1500, 's')}) {
    WebResponse c = Post("/api/sweeps/" + id + "/cancel", kAlice, "{}");
    EXPECT_EQ(c.status, 400) << id << " -> " << c.body;
    EXPECT_EQ(ErrorOf(c).rfind("sweep id: is ", 0), 0u) << ErrorOf(c);
    EXPECT_LT(c.body.size(), 400u);
  }
  const auto rows = SweepCancelRows();
  ASSERT_EQ(rows.size(), rows_before + 3);
  for (const auto& row : rows) {
    EXPECT_EQ(row.outcome(), "INVALID_ARGUMENT");
    EXPECT_TRUE(IsUtf8(row.target())) << row.target();
    EXPECT_LE(row.target().size(), 2000u);
  }
  WebRequest with_query;
  with_query.method = "POST";
  with_query.path = one + "/cancel";
  with_query.query = "x=1";
  with_query.content_type = "application/json";
  with_query.authorization.push_back(std::string("Bearer ") + kAlice);
  WebResponse q = api_->Handle(with_query);
  EXPECT_EQ(q.status, 400) << q.body;
  EXPECT_EQ(ErrorOf(q), "unknown query parameter 'x'; this endpoint takes none");
  EXPECT_EQ(CancelledChildren(alice_sweep_), 0);
}

TEST_F(WebSweepsTest, ReadsAreGetOnlyAndCancelIsPostOnly) {
  const std::string one = "/api/sweeps/" + alice_sweep_;
  for (const std::string& target : {std::string("/api/sweeps"), one}) {
    WebResponse r = Post(target, kAdmin, "{}");
    EXPECT_EQ(r.status, 405) << target;
    EXPECT_EQ(Header(r, "Allow"), "GET") << target;
    for (const char* method : {"PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}) {
      r = Call(target, kAdmin, method);
      EXPECT_EQ(r.status, 405) << method << " " << target;
      EXPECT_EQ(Header(r, "Allow"), "GET") << method << " " << target;
    }
  }
  WebResponse r = Call(one + "/cancel", kAdmin, "GET");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r, "Allow"), "POST");
  for (const char* method : {"PUT", "DELETE"}) {
    r = Call(one + "/cancel", kAdmin, method);
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(Header(r, "Allow"), "GET") << method;
  }
  // Only cancel is an action: another verb under a sweep is no route at all.
  r = Post(one + "/resubmit", kAdmin, "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r, "Allow"), "GET");
  EXPECT_EQ(Call(one + "/resubmit", kAdmin).status, 404);
  EXPECT_EQ(CancelledChildren(alice_sweep_), 0);
}

TEST_F(WebSweepsTest, AViewerCannotCancelASweepAndTheRefusalIsAudited) {
  WebResponse r = Post("/api/sweeps/" + alice_sweep_ + "/cancel", kViewer, R"({"reason":"x"})");
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(CancelledChildren(alice_sweep_), 0);
  auto rows = SweepCancelRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].identity(), "dashboard");
  EXPECT_EQ(rows[0].role(), "viewer");
  EXPECT_EQ(rows[0].via(), "web");
  EXPECT_EQ(rows[0].target(), alice_sweep_);
  EXPECT_EQ(rows[0].outcome(), "PERMISSION_DENIED");
  // A viewer still reads it.
  EXPECT_EQ(Call("/api/sweeps/" + alice_sweep_, kViewer).status, 200);
}

TEST_F(WebSweepsTest, CancelBodiesFollowTheJobCancelsRules) {
  const std::string path = "/api/sweeps/" + alice_sweep_ + "/cancel";
  WebRequest big;
  big.method = "POST";
  big.path = path;
  big.content_type = "application/json";
  big.body_too_large = true;
  big.authorization.push_back(std::string("Bearer ") + kAlice);
  EXPECT_EQ(api_->Handle(big).status, 413);
  EXPECT_EQ(Post(path, kAlice, R"({"reason":"x"})", "text/plain").status, 415);
  EXPECT_EQ(Post(path, kAlice, "reason=x", "application/x-www-form-urlencoded").status, 415);
  WebResponse r = Post(path, kAlice, "{\"reason\":");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorOf(r).rfind("the body is not JSON", 0), 0u) << r.body;
  r = Post(path, kAlice, "[1]");
  EXPECT_EQ(ErrorOf(r), "the body must be a JSON object, not array");
  r = Post(path, kAlice, R"({"reason":7})");
  EXPECT_EQ(ErrorOf(r), "body.reason: expected a string, got number");
  r = Post(path, kAlice, R"({"reason":"x","force":true})");
  EXPECT_EQ(ErrorOf(r), "body: unknown key 'force' (this action takes reason)");
  EXPECT_EQ(CancelledChildren(alice_sweep_), 0);
  // Each refusal of a known caller is a row; 413 and 415 come before any body is read.
  const auto rows = SweepCancelRows();
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    EXPECT_EQ(row.outcome(), "INVALID_ARGUMENT");
    EXPECT_EQ(row.via(), "web");
    EXPECT_EQ(row.identity(), "alice");
    EXPECT_EQ(row.target(), alice_sweep_);
  }
}

// Without tokens every caller is the admin "local": only the controller's own page acts.
TEST_F(WebSweepsTest, WithoutTokensAForeignOriginCannotCancelASweep) {
  const auto open = Authorizer::Disabled();
  const WebApi api(manager_.get(), store_.get(), artifacts_.get(), open.get(), actions_.get());
  WebRequest request;
  request.method = "POST";
  request.path = "/api/sweeps/" + alice_sweep_ + "/cancel";
  request.content_type = "application/json";
  request.body = "{}";
  request.host = "127.0.0.1:8080";
  request.origin = "http://evil.example";
  WebResponse r = api.Handle(request);
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(CancelledChildren(alice_sweep_), 0);
  request.origin = "http://127.0.0.1:8080";
  r = api.Handle(request);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(CancelledChildren(alice_sweep_), 2);
}

TEST_F(WebSweepsTest, CancelThroughTheWebCancelsEveryChildWithItsAuditRow) {
  WebResponse r = Post("/api/sweeps/" + alice_sweep_ + "/cancel", kAlice, R"({"reason":"bad grid"})");
  ASSERT_EQ(r.status, 200) << r.body;
  // The answer is the sweep after the cancel.
  v1::SweepView answered;
  ASSERT_TRUE(FromJson(r.body, &answered).ok()) << r.body;
  EXPECT_EQ(answered.sweep().id(), alice_sweep_);
  EXPECT_TRUE(answered.ended());
  EXPECT_EQ(answered.states().at("CANCELLED"), 2);
  for (const auto& child : answered.children()) EXPECT_EQ(child.state(), v1::Job::CANCELLED) << child.job_id();
  // Checked through the manager, not only the response.
  EXPECT_EQ(CancelledChildren(alice_sweep_), 2);
  for (const std::string& id : ChildrenOf(alice_sweep_)) {
    auto job = manager_->Get(id);
    ASSERT_TRUE(job.ok());
    EXPECT_NE(job->failure_reason().find("bad grid"), std::string::npos) << job->failure_reason();
  }
  EXPECT_EQ(CancelledChildren(bob_sweep_), 0);
  EXPECT_NE(StateOf(alice_job_), v1::Job::CANCELLED);
  auto rows = SweepCancelRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].outcome(), "OK");
  EXPECT_EQ(rows[0].identity(), "alice");
  EXPECT_EQ(rows[0].role(), "submitter");
  EXPECT_EQ(rows[0].via(), "web");
  EXPECT_EQ(rows[0].target(), alice_sweep_);
  EXPECT_EQ(rows[0].reason(), "bad grid");
  // Cancelling an ended sweep is no error and changes nothing more.
  r = Post("/api/sweeps/" + alice_sweep_ + "/cancel", kAdmin, "{}");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(CancelledChildren(alice_sweep_), 2);
  WebResponse read = Call("/api/sweeps/" + alice_sweep_, kAlice);
  ASSERT_EQ(read.status, 200);
  EXPECT_EQ(Body(read)["ended"], true);
}

// The answers are the proto3 JSON of trainyard.v1.SweepView and ListSweepsResponse
// (.proto names, every primitive field, 64-bit integers as strings), exactly what
// JobActions returns; the children ranked by their newest validation loss.
TEST_F(WebSweepsTest, ASweepIsTheProto3JsonOfSweepViewRankedByValidationLoss) {
  const std::string sweep = SubmitSweepAs("alice", {"1e-4", "3e-4", "1e-3"});
  const std::vector<std::string> children = ChildrenOf(sweep);
  ASSERT_EQ(children.size(), 3u);
  Append(children[0], {Validation(children[0], 5, 3.5), Validation(children[0], 10, 3.0)});
  Append(children[1], {Validation(children[1], 10, 2.0)});
  // children[2] has no validation: rank 0, no last_validation.

  WebResponse r = Call("/api/sweeps/" + sweep, kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json; charset=utf-8");
  v1::SweepView served;
  ASSERT_TRUE(FromJson(r.body, &served).ok()) << r.body;
  auto direct = actions_->GetSweep(Caller{Role::kSubmitter, "alice"}, sweep);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(MessageDifferencer::Equals(served, *direct)) << r.body << "\n" << direct->DebugString();

  const json j = Body(r);
  EXPECT_EQ(j["sweep"]["id"], sweep);
  EXPECT_EQ(j["sweep"]["owner"], "alice");
  EXPECT_EQ(j["sweep"]["name"], "grid-alice");
  EXPECT_EQ(j["sweep"]["max_concurrent"], 1);
  EXPECT_EQ(j["sweep"]["axes"], json::parse(R"([{"key": "training.lr", "values": ["0.0001", "0.0003", "0.001"]}])"));
  EXPECT_EQ(j["sweep"]["job_ids"], json(children));
  EXPECT_TRUE(j["sweep"]["create_time"].is_string());
  EXPECT_EQ(j["ended"], false);
  int counted = 0;
  for (const auto& [state, n] : j["states"].items()) counted += n.get<int>();
  EXPECT_EQ(counted, 3);
  ASSERT_EQ(j["children"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const json& c = j["children"][i];
    EXPECT_EQ(c["job_id"], children[i]) << i;
    EXPECT_EQ(c["index"], i) << i;
    EXPECT_TRUE(c["label"].is_string()) << i;
    EXPECT_TRUE(c["state"].is_string()) << i;
    EXPECT_TRUE(c["last_step"].is_string()) << i;  // int64: a decimal string
  }
  EXPECT_EQ(j["children"][0]["rank"], 2);
  EXPECT_EQ(j["children"][1]["rank"], 1);
  EXPECT_EQ(j["children"][2]["rank"], 0);
  EXPECT_EQ(j["children"][0]["last_validation"], json::parse(R"({"step": "10", "loss": 3.0, "tokens": "4096",
                                                                  "ms": 12.5})"));
  EXPECT_EQ(j["children"][1]["last_validation"]["loss"], 2.0);
  EXPECT_FALSE(j["children"][2].contains("last_validation")) << j["children"][2];

  // The list: ListSweepsResponse, children left out, the counts kept.
  WebResponse list = Call("/api/sweeps?limit=1", kAlice);
  ASSERT_EQ(list.status, 200) << list.body;
  v1::ListSweepsResponse listed;
  ASSERT_TRUE(FromJson(list.body, &listed).ok()) << list.body;
  ASSERT_EQ(listed.sweeps_size(), 1);
  EXPECT_EQ(listed.sweeps(0).sweep().id(), sweep);
  EXPECT_EQ(listed.sweeps(0).children_size(), 0);
  EXPECT_EQ(Body(list)["sweeps"][0]["children"], json::array());
  EXPECT_EQ(Body(Call("/api/sweeps?limit=1", kViewer))["sweeps"][0]["sweep"]["id"], sweep);
}

// The jobs list keeps its query flags; a sweep's children are marked with their sweep.
TEST_F(WebSweepsTest, TheJobsListMarksEachChildWithItsSweep) {
  WebResponse r = Call("/api/jobs", kAlice);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = Body(r);
  const std::vector<std::string> children = ChildrenOf(alice_sweep_);
  int marked = 0;
  for (const json& job : body["jobs"]) {
    const std::string id = job["id"];
    if (id == alice_job_) {
      EXPECT_EQ(job["sweep_id"], "");
      EXPECT_EQ(job["sweep_index"], 0);
      EXPECT_EQ(job["sweep_label"], "");
      continue;
    }
    ASSERT_NE(std::find(children.begin(), children.end(), id), children.end()) << id;
    EXPECT_EQ(job["sweep_id"], alice_sweep_) << id;
    const int index = job["sweep_index"];
    EXPECT_EQ(children[index], id);
    EXPECT_EQ(job["sweep_label"], index == 0 ? "lr=0.0001" : "lr=0.0003") << id;
    ++marked;
  }
  EXPECT_EQ(marked, 2);
  // The job page's JSON carries them too (a crumb back to the sweep).
  EXPECT_EQ(Body(Call("/api/jobs/" + children[1], kAlice))["sweep_id"], alice_sweep_);
}

// A read-only web UI (no JobActions) has no sweep routes.
TEST_F(WebApiTest, WithoutActionsThereAreNoSweepRoutes) {
  EXPECT_EQ(Call("/api/sweeps", kAdmin).status, 404);
  EXPECT_EQ(Call("/api/sweeps/sweep-1", kAdmin).status, 404);
  WebRequest cancel;
  cancel.method = "POST";
  cancel.path = "/api/sweeps/sweep-1/cancel";
  cancel.content_type = "application/json";
  cancel.authorization.push_back(std::string("Bearer ") + kAdmin);
  WebResponse r = api_->Handle(cancel);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r, "Allow"), "GET");
}

// ProtoJsonResponse keeps the JSON valid whatever a message holds: a diverged child's
// NaN loss is proto3 JSON's "NaN", and bytes that are not UTF-8 are replaced.
TEST(WebJsonTest, ASweepViewWithANanLossAndBadBytesIsValidJson) {
  v1::SweepView view;
  view.mutable_sweep()->set_id("sweep-1");
  view.mutable_sweep()->set_name("grid");
  v1::SweepChild* c = view.add_children();
  c->set_job_id("job-1");
  c->set_label("lr=\xff");
  c->mutable_last_validation()->set_step(int64_t{1} << 40);
  c->mutable_last_validation()->set_loss(std::numeric_limits<double>::quiet_NaN());
  (*view.mutable_states())["RUNNING"] = 1;
  const WebResponse r = web::ProtoJsonResponse(200, view);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json; charset=utf-8");
  EXPECT_EQ(Header(r, "Cache-Control"), "no-store");
  EXPECT_TRUE(IsUtf8(r.body));
  const json j = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.body;
  EXPECT_EQ(j["children"][0]["last_validation"]["loss"], "NaN");
  EXPECT_EQ(j["children"][0]["last_validation"]["step"], "1099511627776");
  EXPECT_EQ(j["states"]["RUNNING"], 1);
  EXPECT_EQ(j["children"][0]["rank"], 0);  // every primitive field, defaults included
}

}  // namespace
}  // namespace trainyard::testing

namespace trainyard::testing {
namespace {

// Each child meets the rules a job submitted alone meets, whatever the base says: a
// swept job.priority above 0 of a non-preemptible job is an admin's, a swept
// compile.preflight is refused, and a swept job.after may name only jobs the submitter
// sees. Nothing is stored, and the audit row records the refusal.
TEST_F(WebSweepsTest, EveryChildMeetsTheRulesOfAJobSubmittedAlone) {
  auto sweep = [](const std::string& key, std::vector<std::string> values) {
    v1::SubmitSweepRequest request;
    v1::JobSpec* spec = request.mutable_spec();
    spec->mutable_job()->set_name("rights");
    spec->mutable_job()->set_preemptible(false);
    spec->mutable_model()->set_preset("tiny");
    spec->mutable_parallelism()->set_dp(1);
    v1::SweepAxis* axis = request.add_axes();
    axis->set_key(key);
    for (auto& v : values) axis->add_values(v);
    return request;
  };
  const Caller alice{Role::kSubmitter, "alice"};
  const size_t jobs_before = manager_->List({}, 1000).size();

  auto priority = actions_->SubmitSweep(alice, Via::kGrpc, sweep("job.priority", {"0", "10"}));
  EXPECT_EQ(priority.status().code(), absl::StatusCode::kPermissionDenied) << priority.status();
  EXPECT_NE(priority.status().message().find("sweep point 1 of 2 (priority=10)"), std::string::npos)
      << priority.status();
  EXPECT_TRUE(actions_->SubmitSweep(Caller{Role::kAdmin, "root"}, Via::kGrpc, sweep("job.priority", {"0", "10"})).ok())
      << "an admin may";
  const size_t jobs_admin = manager_->List({}, 1000).size();
  EXPECT_EQ(jobs_admin, jobs_before + 2);

  auto preflight = actions_->SubmitSweep(alice, Via::kGrpc, sweep("compile.preflight", {"false", "true"}));
  EXPECT_EQ(preflight.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(preflight.status().message().find("compile.preflight is not run for sweeps"), std::string::npos);

  // bob's job, named by the second point only: "not found", as for one job.
  auto after =
      actions_->SubmitSweep(alice, Via::kGrpc, sweep("job.after", {"\"" + alice_job_ + "\"", "\"" + bob_job_ + "\""}));
  EXPECT_EQ(after.status().code(), absl::StatusCode::kNotFound) << after.status();
  EXPECT_NE(after.status().message().find("job " + bob_job_ + " not found"), std::string::npos) << after.status();
  EXPECT_EQ(manager_->List({}, 1000).size(), jobs_admin) << "nothing stored";
}

}  // namespace
}  // namespace trainyard::testing
