// The artifact RPCs of an in-process controller over real gRPC on loopback: one worker
// opens and uploads an artifact in chunks (OpenArtifact, UploadArtifact), a client lists
// and pulls it (ListArtifacts, PullArtifact) and gets the same bytes and digest. The
// store under them: tests/server/state/artifact_store_test.cc.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/base/sha256.h"
#include "tests/server/service/loopback_controller.h"
#include "tests/support/files.h"

namespace trainyard::testing {
namespace {

class ArtifactRpcTest : public LoopbackControllerTest {
 protected:
  void TearDown() override {
    if (stream_) {
      stream_->WritesDone();
      connect_ctx_.TryCancel();
      stream_->Finish().IgnoreError();
    }
    LoopbackControllerTest::TearDown();
  }

  // Registers worker w1 (2 slots) on a Connect stream and waits until it is listed.
  void ConnectWorker() {
    stream_ = workers_->Connect(&connect_ctx_);
    v1::WorkerMessage msg;
    v1::Register* reg = msg.mutable_register_();
    reg->set_name("w1");
    reg->set_slots(2);
    reg->set_address("127.0.0.1");
    reg->set_rendezvous_port_min(40000);
    reg->set_rendezvous_port_max(40009);
    ASSERT_TRUE(stream_->Write(msg));
    v1::ControllerMessage ack;
    ASSERT_TRUE(stream_->Read(&ack));  // the registration's answer
    grpc::ClientContext ctx;
    v1::ListWorkersResponse workers;
    ASSERT_TRUE(jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &workers).ok());
    ASSERT_EQ(workers.workers_size(), 1);
  }

  std::string SubmitJob() {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_job()->set_name("t");
    req.mutable_spec()->mutable_model()->set_preset("tiny");
    req.mutable_spec()->mutable_parallelism()->set_dp(2);
    v1::Job job;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(job.attempt(), 1);
    return job.id();
  }

  grpc::ClientContext connect_ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::ControllerMessage>> stream_;
};

TEST_F(ArtifactRpcTest, OpenUploadListAndPullOverGrpc) {
  ConnectWorker();
  const std::string job = SubmitJob();
  const std::string content = PseudoRandomBytes((600 << 10) + 17, 5);
  v1::ArtifactHeader h;
  h.set_job_id(job);
  h.set_attempt(1);
  h.set_rank(0);
  h.set_name("rank0.trace.json");
  h.set_kind("trace");
  h.set_size_bytes(static_cast<int64_t>(content.size()));
  h.set_sha256(Sha256Hex(content));
  h.set_worker("w1");

  {  // A name that is not a connected worker's.
    v1::ArtifactHeader stranger = h;
    stranger.set_worker("w9");
    grpc::ClientContext ctx;
    v1::ArtifactStatus st;
    EXPECT_EQ(workers_->OpenArtifact(&ctx, stranger, &st).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {  // A connected worker that holds no rank of the job's current attempt.
    grpc::ClientContext connect;
    auto other = workers_->Connect(&connect);
    v1::WorkerMessage msg;
    v1::Register* reg = msg.mutable_register_();
    reg->set_name("w2");
    reg->set_slots(1);
    reg->set_address("127.0.0.1");
    reg->set_rendezvous_port_min(40010);
    reg->set_rendezvous_port_max(40019);
    ASSERT_TRUE(other->Write(msg));
    v1::ControllerMessage ack;
    ASSERT_TRUE(other->Read(&ack));
    v1::ArtifactHeader forged = h;
    forged.set_worker("w2");
    grpc::ClientContext ctx;
    v1::ArtifactStatus st;
    const grpc::Status s = workers_->OpenArtifact(&ctx, forged, &st);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_NE(s.error_message().find("holds no rank 0"), std::string::npos) << s.error_message();
    other->WritesDone();
    connect.TryCancel();
  }
  {
    grpc::ClientContext ctx;
    v1::ArtifactStatus st;
    grpc::Status s = workers_->OpenArtifact(&ctx, h, &st);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(st.committed_bytes(), 0);
  }
  {  // A chunk above 256 KiB ends the stream.
    grpc::ClientContext ctx;
    v1::ArtifactStatus st;
    auto writer = workers_->UploadArtifact(&ctx, &st);
    v1::ArtifactChunk chunk;
    *chunk.mutable_header() = h;
    chunk.set_offset(0);
    chunk.set_data(content.substr(0, (256 << 10) + 1));
    writer->Write(chunk);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::ArtifactStatus st;
    auto writer = workers_->UploadArtifact(&ctx, &st);
    for (int64_t off = 0; off < static_cast<int64_t>(content.size()); off += 256 << 10) {
      v1::ArtifactChunk chunk;
      if (off == 0) *chunk.mutable_header() = h;
      chunk.set_offset(off);
      chunk.set_data(content.substr(off, 256 << 10));
      ASSERT_TRUE(writer->Write(chunk));
    }
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(st.complete());
    EXPECT_EQ(st.committed_bytes(), static_cast<int64_t>(content.size()));
  }
  {
    grpc::ClientContext ctx;
    v1::ListArtifactsRequest req;
    req.set_job_id(job);
    v1::ListArtifactsResponse resp;
    ASSERT_TRUE(jobs_->ListArtifacts(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.artifacts_size(), 1);
    EXPECT_EQ(resp.artifacts(0).name(), "rank0.trace.json");
    EXPECT_EQ(resp.artifacts(0).size_bytes(), static_cast<int64_t>(content.size()));
  }
  {
    grpc::ClientContext ctx;
    v1::PullArtifactRequest req;
    req.set_job_id(job);
    req.set_name("rank0.trace.json");
    auto reader = jobs_->PullArtifact(&ctx, req);
    v1::ArtifactData msg;
    ASSERT_TRUE(reader->Read(&msg));
    ASSERT_TRUE(msg.has_info());
    EXPECT_EQ(msg.info().sha256(), h.sha256());
    std::string got;
    while (reader->Read(&msg)) {
      EXPECT_LE(msg.data().size(), 256u << 10);
      got += msg.data();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(Sha256Hex(got), h.sha256());
    EXPECT_EQ(got, content);
  }
  for (const auto& [job_id, name, code] :
       {std::tuple<std::string, std::string, grpc::StatusCode>{job, "missing", grpc::StatusCode::NOT_FOUND},
        {"job-99", "rank0.trace.json", grpc::StatusCode::NOT_FOUND},
        {job, "../trainyard.db", grpc::StatusCode::INVALID_ARGUMENT},
        {std::string(100, 'j'), "x", grpc::StatusCode::INVALID_ARGUMENT}}) {
    grpc::ClientContext ctx;
    v1::PullArtifactRequest req;
    req.set_job_id(job_id);
    req.set_name(name);
    auto reader = jobs_->PullArtifact(&ctx, req);
    v1::ArtifactData msg;
    EXPECT_FALSE(reader->Read(&msg));
    EXPECT_EQ(reader->Finish().error_code(), code) << name;
  }
  {
    grpc::ClientContext ctx;
    v1::ListArtifactsRequest req;
    req.set_job_id("job-99");
    v1::ListArtifactsResponse resp;
    EXPECT_EQ(jobs_->ListArtifacts(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

}  // namespace
}  // namespace trainyard::testing
