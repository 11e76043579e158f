// The web API's test fixture: WebApi over the in-process controller of AuthFixture
// (tests/fakes/auth_fixture.h), with a job of alice and one of bob, and the helpers the
// web tests share: calls as a token, response bodies, events and artifacts to store.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/base/sha256.h"
#include "server/service/job_actions.h"
#include "server/store/audit_store.h"
#include "server/web/web_api.h"
#include "tests/fakes/auth_fixture.h"

namespace trainyard::testing {

using json = nlohmann::json;
using web::WebApi;
using web::WebRequest;
using web::WebResponse;

inline std::string Header(const WebResponse& r, const std::string& name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "";
}

class WebApiTest : public AuthFixture {
 protected:
  void SetUp() override {
    AuthFixture::SetUp();
    if (HasFatalFailure()) return;
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

  std::unique_ptr<WebApi> api_;
  std::string alice_job_, bob_job_;
  int64_t source_seq_ = 0;
};

// WebApiTest with the actions on (JobActions over the store's audit log) and the event
// stream: what the controller serves. Post sends an action as the page does.
class WebActionsTest : public WebApiTest {
 protected:
  void SetUp() override {
    WebApiTest::SetUp();
    if (HasFatalFailure()) return;
    actions_ = std::make_unique<JobActions>(manager_.get(), nullptr, store_.get(), &clock_);
    api_ =
        std::make_unique<WebApi>(manager_.get(), store_.get(), artifacts_.get(), authz_.get(), actions_.get(), &hub_);
  }
  void TearDown() override {
    if (api_) api_->Stop();
  }

  WebResponse Post(const std::string& target, const std::string& token, const std::string& body,
                   const std::string& content_type = "application/json") const {
    WebRequest request;
    request.method = "POST";
    request.path = target;
    request.content_type = content_type;
    request.body = body;
    if (!token.empty()) request.authorization.push_back(std::string("Bearer ") + token);
    return api_->Handle(request);
  }
  v1::Job::State StateOf(const std::string& id) {
    auto job = manager_->Get(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->state() : v1::Job::STATE_UNSPECIFIED;
  }
  std::vector<v1::AuditRecord> Rows(const std::string& job_id = "") {
    AuditQuery q;
    q.job_id = job_id;
    q.limit = 1000;
    auto rows = store_->ReadAudit(q);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<v1::AuditRecord>{};
  }

  std::unique_ptr<JobActions> actions_;
};

}  // namespace trainyard::testing
