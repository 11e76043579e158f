// ArtifactUploader through MakeGrpcArtifactTransport against an in-process WorkerService
// that implements only OpenArtifact and UploadArtifact on a loopback port: real
// streams, a stream the controller breaks mid-upload, and Stop cancelling a call in
// flight.
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/base/sha256.h"
#include "tests/fakes/loopback_server.h"
#include "tests/worker/daemon/test_util.h"
#include "worker/daemon/artifact_uploader.h"

namespace trainyard {
namespace {

using testing::TempDir;

class FakeWorkerService final : public v1::WorkerService::Service {
 public:
  grpc::Status OpenArtifact(grpc::ServerContext*, const v1::ArtifactHeader* header,
                            v1::ArtifactStatus* status) override {
    absl::MutexLock lock(&mu_);
    Stored& s = stored_[header->name()];
    if (s.header.sha256() != header->sha256()) s = Stored{*header, "", false};
    status->set_committed_bytes(static_cast<int64_t>(s.bytes.size()));
    status->set_complete(s.complete);
    return grpc::Status::OK;
  }

  grpc::Status UploadArtifact(grpc::ServerContext*,
                              grpc::ServerReader<v1::ArtifactChunk>* reader,
                              v1::ArtifactStatus* status) override {
    v1::ArtifactChunk chunk;
    std::string name;
    int chunks = 0;
    while (reader->Read(&chunk)) {
      bool hang;
      {
        absl::MutexLock lock(&mu_);
        hang = hang_;
        hung_ += hang ? 1 : 0;
      }
      if (hang) {
        // Holds the stream (the client's cancel ends the call on its side) until the
        // test releases it before shutting the server down.
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(&released_));
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      absl::MutexLock lock(&mu_);
      if (chunk.has_header()) name = chunk.header().name();
      Stored& s = stored_[name];
      if (chunk.offset() != static_cast<int64_t>(s.bytes.size())) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "offset mismatch");
      }
      s.bytes += chunk.data();
      ++chunks_;
      if (++chunks == break_after_ && !broken_) {
        broken_ = true;  // once: the next stream resumes
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "controller restarting");
      }
    }
    absl::MutexLock lock(&mu_);
    Stored& s = stored_[name];
    if (static_cast<int64_t>(s.bytes.size()) == s.header.size_bytes()) {
      if (Sha256Hex(s.bytes) != s.header.sha256()) {
        s.bytes.clear();
        return grpc::Status(grpc::StatusCode::DATA_LOSS, "sha256 mismatch");
      }
      s.complete = true;
    }
    status->set_committed_bytes(static_cast<int64_t>(s.bytes.size()));
    status->set_complete(s.complete);
    return grpc::Status::OK;
  }

  struct Stored {
    v1::ArtifactHeader header;
    std::string bytes;
    bool complete = false;
  };
  absl::Mutex mu_;
  std::map<std::string, Stored> stored_ ABSL_GUARDED_BY(mu_);
  int break_after_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool hang_ ABSL_GUARDED_BY(mu_) = false;
  int hung_ ABSL_GUARDED_BY(mu_) = 0;
  int chunks_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

class ArtifactUploaderGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::LoopbackServer>(&service_, [this] {
      absl::MutexLock lock(&service_.mu_);
      service_.released_ = true;
    });
    ASSERT_TRUE(server_->ok());
    ArtifactUploader::Options options;
    options.chunk_bytes = 1000;
    options.initial_backoff = absl::Milliseconds(1);
    options.max_backoff = absl::Milliseconds(10);
    uploader_ = std::make_unique<ArtifactUploader>(
        options,
        MakeGrpcArtifactTransport(grpc::CreateChannel(server_->address(),
                                                      grpc::InsecureChannelCredentials())),
        &clock_);
  }
  void TearDown() override {
    uploader_.reset();
    server_.reset();  // releases a held stream, then shuts down
  }

  std::string WriteFile(const std::string& name, size_t size) {
    std::string bytes;
    for (size_t i = 0; i < size; ++i) bytes.push_back(static_cast<char>(i * 31 % 251));
    std::ofstream(dir_.path() + "/" + name, std::ios::binary) << bytes;
    contents_[name] = bytes;
    return dir_.path() + "/" + name;
  }
  static v1::ArtifactHeader Header(const std::string& name) { return testing::TraceHeader(name, 1, 0); }

  TempDir dir_;
  RealClock clock_;
  FakeWorkerService service_;
  std::unique_ptr<testing::LoopbackServer> server_;
  std::unique_ptr<ArtifactUploader> uploader_;
  std::map<std::string, std::string> contents_;
};

TEST_F(ArtifactUploaderGrpcTest, UploadsOverARealStream) {
  uploader_->Enqueue(WriteFile("t.json", 3500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(60)));
  absl::MutexLock lock(&service_.mu_);
  const FakeWorkerService::Stored& s = service_.stored_["t.json"];
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(s.bytes, contents_["t.json"]);
  EXPECT_EQ(s.header.worker(), "w1");
  EXPECT_EQ(s.header.size_bytes(), 3500);
  EXPECT_EQ(service_.chunks_, 4);
}

TEST_F(ArtifactUploaderGrpcTest, ResumesAfterTheControllerBreaksTheStream) {
  {
    absl::MutexLock lock(&service_.mu_);
    service_.break_after_ = 2;
  }
  uploader_->Enqueue(WriteFile("t.json", 5500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(60)));
  EXPECT_EQ(uploader_->stats().completed, 1);
  absl::MutexLock lock(&service_.mu_);
  EXPECT_TRUE(service_.stored_["t.json"].complete);
  EXPECT_EQ(service_.stored_["t.json"].bytes, contents_["t.json"]);
  // Chunks that reached the controller before the break are not resent (gRPC may
  // have had more in flight, which were lost with the stream, not committed).
  EXPECT_EQ(service_.chunks_, 6);
}

TEST_F(ArtifactUploaderGrpcTest, StopCancelsAnUploadInFlight) {
  {
    absl::MutexLock lock(&service_.mu_);
    service_.hang_ = true;
  }
  uploader_->Enqueue(WriteFile("t.json", 3000), Header("t.json"));
  {
    absl::MutexLock lock(&service_.mu_);
    service_.mu_.Await(absl::Condition(
        +[](int* hung) { return *hung > 0; }, &service_.hung_));
  }
  uploader_->Stop();  // returns only once the stream is cancelled and the thread joined
  EXPECT_EQ(uploader_->stats().completed, 0);
  absl::MutexLock lock(&service_.mu_);
  EXPECT_FALSE(service_.stored_["t.json"].complete);
}

}  // namespace
}  // namespace trainyard
