// The controller's JobService against hostile and careless requests, over real gRPC on
// loopback (ControllerServer in-process, a stub built from the protos): oversized
// strings, huge ids, negative and unknown values. Each answers INVALID_ARGUMENT naming
// the field, with a short message, stores nothing, and the service keeps answering
// every other caller. Health checking answers per service.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/policy/request_validation.h"
#include "server/service/wire_codec.h"
#include "tests/server/service/loopback_controller.h"
#include "trainyard/v1/job_service.grpc.pb.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard::testing {
namespace {

// A default client's limit for status messages is far above this; the point is that
// nothing of a megabyte input comes back.
constexpr size_t kMaxMessage = 300;

class JobServiceRequestsTest : public LoopbackControllerTest {
 protected:
  // Expects INVALID_ARGUMENT whose message starts with `field` and is short.
  static void ExpectRefused(const grpc::Status& status, const std::string& field) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message().substr(0, 200);
    EXPECT_EQ(status.error_message().rfind(field, 0), 0u) << status.error_message().substr(0, 200);
    EXPECT_LE(status.error_message().size(), kMaxMessage);
  }

  // ListJobs still answers OK with `n` jobs (a stored 5 MiB reason once broke it).
  void ExpectListStillWorks() {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    const grpc::Status s = jobs_->ListJobs(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message().substr(0, 200);
    EXPECT_EQ(resp.jobs_size(), 0);
  }
};

TEST_F(JobServiceRequestsTest, AFiveMebibyteCancelReasonIsRefusedWithAShortMessage) {
  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_id("job-1");
  req.set_reason(std::string(5 << 20, 'r'));
  v1::Job resp;
  ExpectRefused(jobs_->CancelJob(&ctx, req, &resp), "CancelJobRequest.reason");
  ExpectListStillWorks();
}

TEST_F(JobServiceRequestsTest, CancelReasonsWithControlCharactersAreRefused) {
  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_id("job-1");
  req.set_reason(std::string("stop\x1b[2Jnow", 11));
  v1::Job resp;
  ExpectRefused(jobs_->CancelJob(&ctx, req, &resp), "CancelJobRequest.reason");
}

TEST_F(JobServiceRequestsTest, AMebibyteJobIdIsNotEchoed) {
  for (const std::string& id : {std::string(1 << 20, 'x'), std::string(16 << 10, 'y')}) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job resp;
    ExpectRefused(jobs_->GetJob(&ctx, req, &resp), "GetJobRequest.id");
  }
  // A well-formed id that does not exist is NOT_FOUND, naming it.
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_id("job-404");
  v1::Job resp;
  const grpc::Status s = jobs_->GetJob(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("job-404"), std::string::npos);
}

TEST_F(JobServiceRequestsTest, EmptyAndNonPrintableIdsAreRefused) {
  for (const std::string& id : {std::string(), std::string("job 1"), std::string("job-\x01", 5)}) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::Job resp;
    ExpectRefused(jobs_->CancelJob(&ctx, req, &resp), "CancelJobRequest.id");
  }
}

TEST_F(JobServiceRequestsTest, WatchFromANegativeSeqIsRefused) {
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_id("job-1");
  req.set_from_seq(-5);
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::Event e;
  EXPECT_FALSE(reader->Read(&e));
  ExpectRefused(reader->Finish(), "WatchJobRequest.from_seq");
}

// ResizeJob: the id and dp are checked before the manager sees them; a valid request
// for a job that does not exist is NOT_FOUND naming it.
TEST_F(JobServiceRequestsTest, ResizeRefusesHostileIdsAndDpsAndUnknownJobs) {
  auto resize = [&](const std::string& id, int dp) {
    grpc::ClientContext ctx;
    v1::ResizeJobRequest req;
    req.set_job_id(id);
    req.set_dp(dp);
    v1::ResizeJobResponse resp;
    return jobs_->ResizeJob(&ctx, req, &resp);
  };
  ExpectRefused(resize(std::string(1 << 20, 'x'), 1), "ResizeJobRequest.job_id: is 1048576 bytes");
  ExpectRefused(resize("", 1), "ResizeJobRequest.job_id: is empty");
  ExpectRefused(resize("job-\xc3\x28", 1), "ResizeJobRequest.job_id is not valid UTF-8");
  ExpectRefused(resize("job-1", 0), "ResizeJobRequest.dp: must be in [1, 65536]");
  ExpectRefused(resize("job-1", -3), "ResizeJobRequest.dp");
  ExpectRefused(resize("job-1", 1 << 30), "ResizeJobRequest.dp");
  const grpc::Status unknown = resize("job-404", 1);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown.error_message(), "job job-404 not found");
  ExpectListStillWorks();
}

// gRPC's callback API answers an unparseable request with UNIMPLEMENTED and no message;
// the controller parses requests itself and names the field that is not UTF-8.
TEST_F(JobServiceRequestsTest, InvalidUtf8InAStringFieldIsRefusedNamingTheField) {
  const std::string bad("job-\xc3\x28", 6);  // a lead byte followed by a non-continuation
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_id("job-1");
    req.set_reason("over \xff\xfe");
    v1::Job resp;
    ExpectRefused(jobs_->CancelJob(&ctx, req, &resp), "CancelJobRequest.reason is not valid UTF-8");
  }
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(bad);
    v1::Job resp;
    ExpectRefused(jobs_->GetJob(&ctx, req, &resp), "GetJobRequest.id is not valid UTF-8");
  }
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_model()->set_preset("debug\xed\xa0\x80");  // a surrogate
    v1::Job resp;
    ExpectRefused(jobs_->SubmitJob(&ctx, req, &resp),
                  "SubmitJobRequest.spec.model.preset is not valid UTF-8");
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_id(bad);
    auto reader = jobs_->WatchJob(&ctx, req);
    v1::Event e;
    EXPECT_FALSE(reader->Read(&e));
    ExpectRefused(reader->Finish(), "WatchJobRequest.id is not valid UTF-8");
  }
  ExpectListStillWorks();
}

TEST(RequestParseTest, FindsTheFirstNonUtf8FieldAndNothingInValidMessages) {
  v1::SubmitJobRequest ok;
  ok.mutable_spec()->mutable_model()->set_preset("débug");
  ok.mutable_spec()->mutable_job()->set_name("ünïcode");
  EXPECT_EQ(FirstNonUtf8Field(*ok.GetDescriptor(), ok.SerializeAsString()), "");

  v1::SubmitJobRequest bad = ok;
  bad.mutable_spec()->mutable_training()->set_dataset_path(std::string("/data/\xc0\xaf", 8));  // overlong '/'
  EXPECT_EQ(FirstNonUtf8Field(*bad.GetDescriptor(), bad.SerializeAsString()),
            "SubmitJobRequest.spec.training.dataset_path");
  // Bytes that are not a message at all: no field to name, and the parse error says so.
  EXPECT_EQ(FirstNonUtf8Field(*bad.GetDescriptor(), std::string("\xff\xff\xff", 3)), "");
  grpc::Slice slice(std::string("\x0a\xff\xff\xff", 4));
  grpc::ByteBuffer buffer(&slice, 1);
  v1::SubmitJobRequest out;
  const absl::Status s = ParseRequest(buffer, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "the request is not a valid trainyard.v1.SubmitJobRequest message");
}

TEST_F(JobServiceRequestsTest, ListRefusesUnknownOrRepeatedStatesAndLimitsOutOfRange) {
  auto list = [&](const std::vector<int>& states, int limit) {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    for (int s : states) req.add_states(static_cast<v1::Job::State>(s));
    req.set_limit(limit);
    v1::ListJobsResponse resp;
    return jobs_->ListJobs(&ctx, req, &resp);
  };
  ExpectRefused(list({99}, 0), "ListJobsRequest.states");
  ExpectRefused(list({v1::Job::STATE_UNSPECIFIED}, 0), "ListJobsRequest.states");
  ExpectRefused(list({v1::Job::PENDING, v1::Job::PENDING}, 0), "ListJobsRequest.states");
  ExpectRefused(list({}, -1), "ListJobsRequest.limit");
  ExpectRefused(list({}, 1001), "ListJobsRequest.limit");
  EXPECT_TRUE(list({v1::Job::PENDING, v1::Job::RUNNING}, 1000).ok());
  EXPECT_TRUE(list({}, 0).ok());
}

TEST_F(JobServiceRequestsTest, HealthAnswersForEachServiceAndForTheServer) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  auto check = [&](const std::string& service) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    const grpc::Status s = health->Check(&ctx, req, &resp);
    return std::make_pair(s.error_code(), resp.status());
  };
  using Serving = grpc::health::v1::HealthCheckResponse;
  for (const std::string service : {"", "trainyard.v1.JobService", "trainyard.v1.WorkerService"}) {
    const auto [code, status] = check(service);
    EXPECT_EQ(code, grpc::StatusCode::OK) << service;
    EXPECT_EQ(status, Serving::SERVING) << service;
  }
  EXPECT_EQ(check("trainyard.v1.NoSuchService").first, grpc::StatusCode::NOT_FOUND);
}

// A raw worker stream: sends `msgs`, half-closes, reads to the end; the status the
// controller ends it with, and the batch ids it acknowledged.
grpc::Status SendAsWorker(const std::shared_ptr<grpc::Channel>& channel, const std::vector<v1::WorkerMessage>& msgs,
                          std::vector<int64_t>* acked = nullptr) {
  auto stub = v1::WorkerService::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->Connect(&ctx);
  for (const auto& m : msgs) stream->Write(m);
  stream->WritesDone();
  v1::ControllerMessage in;
  while (stream->Read(&in)) {
    if (in.has_event_ack() && acked != nullptr) acked->push_back(in.event_ack().batch_id());
  }
  return stream->Finish();
}

v1::WorkerMessage RegisterMsg(const std::string& name) {
  v1::WorkerMessage m;
  auto* r = m.mutable_register_();
  r->set_name(name);
  r->set_slots(1);
  r->set_address("127.0.0.1");
  r->set_rendezvous_port_min(41000);
  r->set_rendezvous_port_max(41001);
  return m;
}

TEST_F(JobServiceRequestsTest, AWorkerRegisteringWithAMebibyteNameIsRefusedShortly) {
  ExpectRefused(SendAsWorker(channel_, {RegisterMsg(std::string(1 << 20, 'w'))}), "Register.name");
  ExpectRefused(SendAsWorker(channel_, {RegisterMsg("w 1")}), "Register.name");
  v1::WorkerMessage bad_device = RegisterMsg("w1");
  bad_device.mutable_register_()->set_device("tpu");
  ExpectRefused(SendAsWorker(channel_, {bad_device}), "Register.device");
  // Invalid UTF-8 ends the stream naming the field, not with gRPC's empty error.
  ExpectRefused(SendAsWorker(channel_, {RegisterMsg("w\xff")}),
                "WorkerMessage.register.name is not valid UTF-8");
  // Nothing was registered.
  grpc::ClientContext ctx;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &workers).ok());
  EXPECT_EQ(workers.workers_size(), 0);
}

// Events no worker may send (a forged JobStateChange, a 2 MiB event, a negative rank)
// are dropped and counted, and their batch is still acknowledged: refusing the batch
// would make a real worker resend it forever and hold back everything behind it.
TEST_F(JobServiceRequestsTest, EventsNoWorkerMaySendAreDroppedAndTheirBatchAcknowledged) {
  v1::WorkerMessage batch;
  batch.mutable_events()->set_batch_id(7);
  v1::Event* forged = batch.mutable_events()->add_events();
  forged->set_job_id("job-1");
  forged->set_attempt(1);
  forged->set_rank(0);
  forged->mutable_job_state()->set_state(v1::Job::SUCCEEDED);
  v1::Event* big = batch.mutable_events()->add_events();
  *big = *forged;
  big->mutable_log()->set_message(std::string(2 << 20, 'x'));
  v1::Event* negative = batch.mutable_events()->add_events();
  *negative = *forged;
  negative->mutable_log()->set_message("hi");
  negative->set_rank(-1);
  std::vector<int64_t> acked;
  const grpc::Status s = SendAsWorker(channel_, {RegisterMsg("w1"), batch}, &acked);
  EXPECT_TRUE(s.ok()) << s.error_message().substr(0, 200);
  EXPECT_EQ(acked, std::vector<int64_t>{7});
  ExpectListStillWorks();

  // A batch of more events than any worker sends ends the stream.
  v1::WorkerMessage flood;
  for (int i = 0; i < request_validation::kMaxBatchEvents + 1; ++i) *flood.mutable_events()->add_events() = *negative;
  ExpectRefused(SendAsWorker(channel_, {RegisterMsg("w1"), flood}), "EventBatch.events");
}

TEST(RequestChecksTest, RegisterAndEventBatchLimits) {
  v1::Register reg = RegisterMsg("w1").register_();
  EXPECT_TRUE(request_validation::Check(reg).ok());
  reg.set_address(std::string(256, 'a'));
  EXPECT_FALSE(request_validation::Check(reg).ok());
  reg.set_address("w1.example");
  for (int i = 0; i < 4097; ++i) {
    auto* a = reg.add_running();
    a->set_job_id("job-" + std::to_string(i));
    a->set_attempt(1);
  }
  EXPECT_EQ(request_validation::Check(reg).message().substr(0, 16), "Register.running");
  reg.clear_running();
  auto* a = reg.add_running();
  a->set_job_id("job-1");
  a->set_attempt(0);
  EXPECT_EQ(request_validation::Check(reg).message().substr(0, 24), "Register.running.attempt");

  v1::EventBatch batch;
  for (int i = 0; i < 10001; ++i) {
    v1::Event* e = batch.add_events();
    e->set_job_id("job-1");
    e->set_attempt(1);
    e->mutable_log()->set_message("m");
  }
  EXPECT_EQ(request_validation::Check(batch).message().substr(0, 17), "EventBatch.events");
  batch.mutable_events()->DeleteSubrange(1, 10000);
  EXPECT_TRUE(request_validation::Check(batch).ok());
  v1::Event e = batch.events(0);
  EXPECT_EQ(request_validation::InvalidEvent(e), "");
  e.set_attempt(0);
  EXPECT_NE(request_validation::InvalidEvent(e).find("attempt"), std::string::npos);
  e.set_attempt(1);
  e.clear_log();
  EXPECT_EQ(request_validation::InvalidEvent(e), "no payload");
  e.mutable_log()->set_message(std::string((1 << 20) + 1, 'x'));
  EXPECT_NE(request_validation::InvalidEvent(e).find("bytes, more than"), std::string::npos);
  e.mutable_log()->set_message("m");
  e.set_job_id(std::string(65, 'j'));
  EXPECT_NE(request_validation::InvalidEvent(e).find("more than the 64"), std::string::npos);
}

// A Validation's ranges name the field and the value; its loss may be anything (a
// diverged model's NaN is an outcome, not a broken rank).
TEST(RequestChecksTest, AValidationNeedsNonNegativeCountsAndAFiniteDuration) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_attempt(1);
  v1::Validation* v = e.mutable_validation();
  v->set_loss(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(request_validation::InvalidEvent(e), "") << "step 0 (before the first), NaN loss, 0 tokens, 0 ms";
  v->set_loss(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(request_validation::InvalidEvent(e), "");
  v->set_step(-3);
  EXPECT_EQ(request_validation::InvalidEvent(e), "validation.step must be >= 0, got -3");
  v->set_step(10);
  v->set_tokens(-4096);
  EXPECT_EQ(request_validation::InvalidEvent(e), "validation.tokens must be >= 0, got -4096");
  v->set_tokens(4096);
  v->set_ms(-1.5);
  EXPECT_EQ(request_validation::InvalidEvent(e), "validation.ms must be a finite number >= 0, got -1.5");
  v->set_ms(std::numeric_limits<double>::infinity());
  EXPECT_EQ(request_validation::InvalidEvent(e), "validation.ms must be a finite number >= 0, got inf");
  v->set_ms(812.5);
  EXPECT_EQ(request_validation::ValidationProblem(*v), "");
}

// What rank 0 reports after pruning: counts and paths are checked like a checkpoint's;
// a NaN metric on a CheckpointSaved is an outcome (a diverged run), not a broken rank.
TEST(RequestChecksTest, CheckpointsPrunedAndCheckpointMetricsAreChecked) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_attempt(1);
  v1::CheckpointsPruned* p = e.mutable_checkpoints_pruned();
  p->set_step(10);
  v1::CheckpointRef* r = p->add_removed();
  r->set_step(5);
  r->set_path("/ck/job-1/step-00000005-attempt-1");
  r->set_bytes(4096);
  p->set_bytes_freed(4096);
  p->set_bytes_kept(8192);
  p->set_kept(2);
  EXPECT_EQ(request_validation::InvalidEvent(e), "");
  p->set_bytes_kept(-1);
  EXPECT_EQ(request_validation::InvalidEvent(e), "checkpoints_pruned.bytes_kept must be >= 0, got -1");
  p->set_bytes_kept(0);
  r->set_path("/ck/\x1b[2J");
  EXPECT_EQ(request_validation::InvalidEvent(e),
            "checkpoints_pruned.removed.path holds a control character: /ck/\\x1b[2J");
  r->set_path("");
  EXPECT_EQ(request_validation::InvalidEvent(e), "checkpoints_pruned.removed.path is empty");
  p->set_step(0);
  EXPECT_EQ(request_validation::InvalidEvent(e), "checkpoints_pruned.step must be >= 1, got 0");

  v1::CheckpointSaved ck;
  ck.set_step(10);
  ck.set_path("/ck/job-1/step-00000010-attempt-1");
  ck.set_dp(1);
  ck.set_tp(1);
  ck.set_ep(1);
  ck.set_metric_name("val_loss");
  ck.set_metric(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(request_validation::CheckpointProblem(ck), "");
  ck.set_metric_name(std::string(65, 'm'));
  EXPECT_NE(request_validation::CheckpointProblem(ck).find("checkpoint.metric_name must be UTF-8 of at most 64 bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard::testing
