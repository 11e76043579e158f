// The pure parts of webhook delivery: which kinds a stored event is, what an answer
// means, the backoff, the payload, and the signature, checked by the Python receiver
// snippet that docs/webhooks.md gives (run as it is printed there).
#include "server/notify/webhook_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "common/proto_time.h"
#include "server/notify/webhook_payload.h"
#include "tests/support/temp_dir.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

v1::Event StateChange(v1::Job::State state, const std::string& reason) {
  v1::Event e;
  e.set_job_id("job-7");
  e.set_seq(12);
  e.set_attempt(2);
  e.set_rank(-1);
  *e.mutable_time() = ToProtoTime(absl::FromUnixMillis(1700000000123));
  e.mutable_job_state()->set_state(state);
  e.mutable_job_state()->set_reason(reason);
  return e;
}

TEST(WebhookPolicyTest, KindsOfStoredEvents) {
  EXPECT_EQ(WebhookKindsOf(StateChange(v1::Job::RUNNING, "")), kWebhookStateChange);
  EXPECT_EQ(WebhookKindsOf(StateChange(v1::Job::SUCCEEDED, "")), kWebhookStateChange);
  EXPECT_EQ(WebhookKindsOf(StateChange(v1::Job::RESTARTING, "preempted by job-9 (priority 10)")),
            kWebhookStateChange | kWebhookPreemption);
  EXPECT_EQ(WebhookKindsOf(StateChange(v1::Job::RESTARTING, "drained from w1: maintenance")),
            kWebhookStateChange | kWebhookPreemption);
  EXPECT_EQ(WebhookKindsOf(StateChange(v1::Job::RESTARTING, "restart 1 of 3: rank 0 exited with code 1")),
            kWebhookStateChange | kWebhookRestart);
  // A PENDING after an eviction names it, but only the RESTARTING is the preemption.
  EXPECT_EQ(WebhookKindsOf(StateChange(v1::Job::PENDING, "preempted by job-9 (priority 10); needs 2 slots")),
            kWebhookStateChange);
  v1::Event stall;
  stall.mutable_stall()->set_collective("dp0:allreduce");
  EXPECT_EQ(WebhookKindsOf(stall), kWebhookStall);
  v1::Event checkpoint;
  checkpoint.mutable_checkpoint()->set_step(100);
  EXPECT_EQ(WebhookKindsOf(checkpoint), kWebhookCheckpoint);
  v1::Event step;
  step.mutable_step_metrics()->set_step(3);
  EXPECT_EQ(WebhookKindsOf(step), 0u);
  v1::Event rank;
  rank.mutable_rank_state()->set_state(v1::RankState::FAILED);
  EXPECT_EQ(WebhookKindsOf(rank), 0u);
  EXPECT_EQ(WebhookKindsOf(v1::Event()), 0u);
}

http::Response Answer(long status, std::string body = "") {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

TEST(WebhookPolicyTest, AnswersAndFailures) {
  EXPECT_EQ(ClassifyDelivery(Answer(200)).outcome, DeliveryOutcome::kDelivered);
  EXPECT_EQ(ClassifyDelivery(Answer(204)).outcome, DeliveryOutcome::kDelivered);
  EXPECT_EQ(ClassifyDelivery(Answer(500, "boom")).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(Answer(500, "boom")).error, "HTTP 500: 'boom'");
  EXPECT_EQ(ClassifyDelivery(Answer(503)).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(Answer(408)).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(Answer(429)).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(Answer(400)).outcome, DeliveryOutcome::kGiveUp);
  EXPECT_EQ(ClassifyDelivery(Answer(401)).outcome, DeliveryOutcome::kGiveUp);
  EXPECT_EQ(ClassifyDelivery(Answer(404)).outcome, DeliveryOutcome::kGiveUp);
  EXPECT_THAT(ClassifyDelivery(Answer(302)).error, HasSubstr("a redirect is not followed"));
  EXPECT_EQ(ClassifyDelivery(Answer(302)).outcome, DeliveryOutcome::kGiveUp);
  EXPECT_EQ(ClassifyDelivery(Answer(100)).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(absl::UnavailableError("refused")).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(absl::DeadlineExceededError("slow")).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(absl::ResourceExhaustedError("10 MB")).outcome, DeliveryOutcome::kRetry);
  EXPECT_EQ(ClassifyDelivery(absl::InvalidArgumentError("bad url")).outcome, DeliveryOutcome::kGiveUp);
  EXPECT_EQ(ClassifyDelivery(absl::CancelledError("stop")).outcome, DeliveryOutcome::kStopped);
  // A hostile answer body is quoted and cut, never echoed raw into status or logs.
  const std::string error = ClassifyDelivery(Answer(500, std::string(5000, 'x') + "\x01")).error;
  EXPECT_LT(error.size(), 200u);
}

TEST(WebhookPolicyTest, BackoffDoublesToTheCap) {
  WebhookDelivery d;
  d.backoff_initial = absl::Seconds(1);
  d.backoff_max = absl::Seconds(10);
  EXPECT_EQ(WebhookBackoff(d, 1), absl::Seconds(1));
  EXPECT_EQ(WebhookBackoff(d, 2), absl::Seconds(2));
  EXPECT_EQ(WebhookBackoff(d, 4), absl::Seconds(8));
  EXPECT_EQ(WebhookBackoff(d, 5), absl::Seconds(10));
  EXPECT_EQ(WebhookBackoff(d, 1000), absl::Seconds(10));
}

TEST(WebhookPolicyTest, GivesUpByAttemptsOrAge) {
  WebhookDelivery d;
  d.max_attempts = 3;
  d.max_age = absl::Hours(1);
  const absl::Time t0 = absl::FromUnixSeconds(1000000);
  EXPECT_EQ(WebhookGiveUpReason(d, 2, t0, t0 + absl::Minutes(59)), "");
  EXPECT_EQ(WebhookGiveUpReason(d, 3, t0, t0), "gave up after 3 attempts");
  EXPECT_THAT(WebhookGiveUpReason(d, 0, t0, t0 + absl::Minutes(61)), HasSubstr("older than max_age_hours (1)"));
}

TEST(WebhookPolicyTest, PayloadCarriesIdKindsOwnerAndTheEvent) {
  const v1::Event e = StateChange(v1::Job::RESTARTING, "preempted by job-9 (priority 10)");
  const std::string body = WebhookBody(e, "alice", "ops", kWebhookStateChange | kWebhookPreemption);
  const nlohmann::json j = nlohmann::json::parse(body);
  EXPECT_EQ(j["id"], "job-7:12:ops");
  EXPECT_EQ(j["id"], WebhookDeliveryId("job-7", 12, "ops"));
  EXPECT_EQ(j["endpoint"], "ops");
  EXPECT_EQ(j["kinds"], nlohmann::json({"state_change", "preemption"}));
  EXPECT_EQ(j["job_id"], "job-7");
  EXPECT_EQ(j["owner"], "alice");
  EXPECT_EQ(j["seq"], 12);
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["time"], "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(j["event"]["job_state"]["state"], "RESTARTING");
  EXPECT_EQ(j["event"]["job_state"]["reason"], "preempted by job-9 (priority 10)");
  // The same event always makes the same bytes: a retry resends exactly them.
  EXPECT_EQ(body, WebhookBody(e, "alice", "ops", kWebhookStateChange | kWebhookPreemption));
}

TEST(WebhookPolicyTest, HmacMatchesRfc4231) {
  // RFC 4231 test case 2.
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(WebhookSignature("Jefe", 42, "nothing?"), "t=42,v1=" + HmacSha256Hex("Jefe", "42.nothing?"));
}

// The ```python block of docs/webhooks.md that defines verify().
std::string DocsVerifySnippet() {
  std::ifstream in(std::string(TRAINYARD_SOURCE_DIR) + "/docs/webhooks.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t start = doc.find("```python\n");
  if (start == std::string::npos) return "";
  const size_t end = doc.find("```", start + 10);
  return doc.substr(start + 10, end - start - 10);
}

// Runs the docs' verify() on (secret, header, body); its exit status says whether it
// accepted.
bool PythonVerifies(const std::string& secret, const std::string& header, const std::string& body) {
  testing::TempDir dir;
  std::ofstream(dir.path() + "/secret", std::ios::binary) << secret;
  std::ofstream(dir.path() + "/header", std::ios::binary) << header;
  std::ofstream(dir.path() + "/body", std::ios::binary) << body;
  std::ofstream(dir.path() + "/check.py")
      << DocsVerifySnippet() << "\nimport sys\n"
      << "d = sys.argv[1]\n"
      << "ok = verify(open(d + '/secret', 'rb').read(), open(d + '/header').read(), open(d + '/body', 'rb').read())\n"
      << "sys.exit(0 if ok else 3)\n";
  const int rc = std::system(("python3 " + dir.path() + "/check.py " + dir.path()).c_str());
  EXPECT_TRUE(WIFEXITED(rc)) << rc;
  EXPECT_TRUE(WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 3) << "the snippet failed to run: " << rc;
  return WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

TEST(WebhookPolicyTest, TheDocumentedPythonCheckAcceptsOurSignatureOnly) {
  ASSERT_NE(DocsVerifySnippet(), "");
  const std::string secret = "0123456789abcdef-secret";
  const std::string body = WebhookBody(StateChange(v1::Job::SUCCEEDED, ""), "alice", "ops", kWebhookStateChange);
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  EXPECT_TRUE(PythonVerifies(secret, WebhookSignature(secret, now, body), body));
  EXPECT_FALSE(PythonVerifies("another-secret-0123456", WebhookSignature(secret, now, body), body));
  EXPECT_FALSE(PythonVerifies(secret, WebhookSignature(secret, now, body), body + " "));
  // A replay of an old delivery: outside the snippet's five-minute tolerance.
  EXPECT_FALSE(PythonVerifies(secret, WebhookSignature(secret, now - 3600, body), body));
}

}  // namespace
}  // namespace trainyard
