// ArtifactUploader against a fake controller (FakeArtifactServer) that keeps the bytes
// it committed per artifact name and fails calls as each test scripts.
#include "worker/daemon/artifact_uploader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <fstream>
#include <map>
#include <string>

#include "common/base/sha256.h"
#include "tests/worker/daemon/test_util.h"

namespace trainyard {
namespace {

using testing::TempDir;

// What the controller holds, with scripted failures. Thread-safe.
class FakeArtifactServer : public ArtifactTransport {
 public:
  struct Stored {
    v1::ArtifactHeader header;
    std::string bytes;
    bool complete = false;
  };

  class FakeUpload : public Upload {
   public:
    explicit FakeUpload(FakeArtifactServer *server) : server_(server) {}
    bool Write(const v1::ArtifactChunk &chunk) override {
      absl::MutexLock lock(&server_->mu_);
      if (!error_.ok()) return false;
      if (server_->cancelled_) {
        error_ = absl::CancelledError("cancelled");
        return false;
      }
      if (chunk.has_header()) name_ = chunk.header().name();
      ++server_->chunks_written_;
      if (server_->break_after_chunks_ > 0 && --server_->break_after_chunks_ == 0) {
        error_ = absl::UnavailableError("controller went away");
        return false;
      }
      Stored &s = server_->stored_[name_];
      if (chunk.offset() != static_cast<int64_t>(s.bytes.size())) {
        error_ = absl::FailedPreconditionError("offset mismatch");
        return false;
      }
      s.bytes += chunk.data();
      return true;
    }
    absl::StatusOr<v1::ArtifactStatus> Finish() override {
      absl::MutexLock lock(&server_->mu_);
      if (!error_.ok()) return error_;
      Stored &s = server_->stored_[name_];
      v1::ArtifactStatus status;
      if (static_cast<int64_t>(s.bytes.size()) == s.header.size_bytes()) {
        if (server_->data_loss_left_ > 0 || Sha256Hex(s.bytes) != s.header.sha256()) {
          if (server_->data_loss_left_ > 0) --server_->data_loss_left_;
          s.bytes.clear();
          return absl::DataLossError("sha256 mismatch");
        }
        s.complete = true;
      }
      status.set_committed_bytes(static_cast<int64_t>(s.bytes.size()));
      status.set_complete(s.complete);
      return status;
    }

   private:
    FakeArtifactServer *const server_;
    std::string name_;
    absl::Status error_;
  };

  absl::StatusOr<v1::ArtifactStatus> Open(const v1::ArtifactHeader &header) override {
    absl::MutexLock lock(&mu_);
    ++opens_;
    if (!open_errors_.empty()) {
      absl::Status error = open_errors_.front();
      open_errors_.pop_front();
      return error;
    }
    Stored &s = stored_[header.name()];
    if (s.header.sha256() != header.sha256()) {
      s = Stored{header, "", false};  // a new file under this name
    }
    v1::ArtifactStatus status;
    status.set_committed_bytes(static_cast<int64_t>(s.bytes.size()));
    status.set_complete(s.complete);
    return status;
  }
  std::unique_ptr<Upload> StartUpload() override { return std::make_unique<FakeUpload>(this); }
  void CancelAll() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void FailOpens(std::vector<absl::Status> errors) {
    absl::MutexLock lock(&mu_);
    open_errors_.insert(open_errors_.end(), errors.begin(), errors.end());
  }
  void BreakStreamAtChunk(int n) {
    absl::MutexLock lock(&mu_);
    break_after_chunks_ = n;
  }
  void FailChecksums(int n) {
    absl::MutexLock lock(&mu_);
    data_loss_left_ = n;
  }
  Stored Get(const std::string &name) {
    absl::MutexLock lock(&mu_);
    return stored_[name];
  }
  int opens() {
    absl::MutexLock lock(&mu_);
    return opens_;
  }
  int chunks_written() {
    absl::MutexLock lock(&mu_);
    return chunks_written_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, Stored> stored_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::Status> open_errors_ ABSL_GUARDED_BY(mu_);
  int break_after_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  int data_loss_left_ ABSL_GUARDED_BY(mu_) = 0;
  int opens_ ABSL_GUARDED_BY(mu_) = 0;
  int chunks_written_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class ArtifactUploaderTest : public ::testing::Test {
 protected:
  ArtifactUploaderTest() {
    auto server = std::make_unique<FakeArtifactServer>();
    server_ = server.get();
    ArtifactUploader::Options options;
    options.chunk_bytes = 1000;
    options.initial_backoff = absl::Milliseconds(1);
    options.max_backoff = absl::Milliseconds(4);
    uploader_ = std::make_unique<ArtifactUploader>(options, std::move(server), &clock_);
  }

  // A file of `size` bytes that differ from chunk to chunk.
  std::string WriteFile(const std::string &name, size_t size) {
    std::string bytes;
    for (size_t i = 0; i < size; ++i) bytes.push_back(static_cast<char>('a' + (i * 7 + i / 13) % 26));
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    contents_[name] = bytes;
    return path;
  }

  static v1::ArtifactHeader Header(const std::string& name) { return testing::TraceHeader(name, 2, 1); }

  TempDir dir_;
  RealClock clock_;
  FakeArtifactServer *server_ = nullptr;
  std::unique_ptr<ArtifactUploader> uploader_;
  std::map<std::string, std::string> contents_;
};

TEST_F(ArtifactUploaderTest, UploadsAWholeFileInChunksWithTheHeaderFirst) {
  uploader_->Enqueue(WriteFile("t.json", 3500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  FakeArtifactServer::Stored stored = server_->Get("t.json");
  EXPECT_TRUE(stored.complete);
  EXPECT_EQ(stored.bytes, contents_["t.json"]);
  EXPECT_EQ(stored.header.size_bytes(), 3500);
  EXPECT_EQ(stored.header.sha256(), Sha256Hex(contents_["t.json"]));
  EXPECT_EQ(stored.header.job_id(), "job1");
  EXPECT_EQ(stored.header.worker(), "w1");
  EXPECT_EQ(server_->chunks_written(), 4);  // 1000 + 1000 + 1000 + 500
  EXPECT_EQ(uploader_->stats().completed, 1);
  EXPECT_EQ(uploader_->stats().dropped, 0);
}

TEST_F(ArtifactUploaderTest, UploadsAnEmptyFileWithOneHeaderChunk) {
  uploader_->Enqueue(WriteFile("empty", 0), Header("empty"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(server_->Get("empty").complete);
  EXPECT_EQ(server_->chunks_written(), 1);
}

TEST_F(ArtifactUploaderTest, ResumesFromTheCommittedOffsetAfterABrokenStream) {
  server_->BreakStreamAtChunk(3);  // two chunks land, the third breaks the stream
  server_->FailOpens({absl::UnavailableError("restarting")});
  uploader_->Enqueue(WriteFile("t.json", 4500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  FakeArtifactServer::Stored stored = server_->Get("t.json");
  EXPECT_TRUE(stored.complete);
  EXPECT_EQ(stored.bytes, contents_["t.json"]);
  // 1 failed open, 1 open, 3 writes (last broken), 1 open, then 3 more writes from 2000:
  // nothing was sent twice.
  EXPECT_EQ(server_->opens(), 3);
  EXPECT_EQ(server_->chunks_written(), 6);
  EXPECT_EQ(uploader_->stats().completed, 1);
}

// A restarted controller refuses a worker that has not re-registered yet, and an old
// stream may still hold the artifact: both pass.
TEST_F(ArtifactUploaderTest, RetriesWhileTheWorkerIsNotRegisteredOrAnOldStreamHoldsIt) {
  server_->FailOpens({absl::PermissionDeniedError("not a connected worker"),
                      absl::AbortedError("being uploaded by another stream"),
                      absl::DeadlineExceededError("slow")});
  uploader_->Enqueue(WriteFile("t.json", 1500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(server_->Get("t.json").complete);
  EXPECT_EQ(server_->opens(), 4);
  EXPECT_EQ(uploader_->stats().completed, 1);
}

TEST_F(ArtifactUploaderTest, SkipsAnArtifactTheControllerAlreadyHas) {
  uploader_->Enqueue(WriteFile("t.json", 1500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  const int chunks = server_->chunks_written();
  uploader_->Enqueue(dir_.path() + "/t.json", Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(server_->chunks_written(), chunks);
  EXPECT_EQ(uploader_->stats().completed, 2);
}

TEST_F(ArtifactUploaderTest, DropsOnPermanentErrorsAndGoesOnWithTheNext) {
  server_->FailOpens({absl::ResourceExhaustedError("job artifact cap"),
                      absl::AlreadyExistsError("name holds another file"),
                      absl::InvalidArgumentError("bad name"), absl::NotFoundError("no job")});
  for (const char *name : {"a", "b", "c", "d", "e"}) {
    uploader_->Enqueue(WriteFile(name, 10), Header(name));
  }
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(uploader_->stats().dropped, 4);
  EXPECT_EQ(uploader_->stats().completed, 1);
  EXPECT_FALSE(server_->Get("a").complete);
  EXPECT_TRUE(server_->Get("e").complete);
  EXPECT_EQ(server_->opens(), 5);  // one each: no retry of a permanent error
}

TEST_F(ArtifactUploaderTest, DropsAFileThatCannotBeRead) {
  uploader_->Enqueue(dir_.path() + "/missing", Header("missing"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(uploader_->stats().dropped, 1);
  EXPECT_EQ(server_->opens(), 0);
}

TEST_F(ArtifactUploaderTest, RetriesAChecksumFailureFromZeroAtMostTwice) {
  server_->FailChecksums(2);
  uploader_->Enqueue(WriteFile("t.json", 2500), Header("t.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(server_->Get("t.json").complete);
  EXPECT_EQ(server_->Get("t.json").bytes, contents_["t.json"]);
  EXPECT_EQ(server_->chunks_written(), 9);  // three full uploads of 3 chunks
  EXPECT_EQ(uploader_->stats().completed, 1);

  server_->FailChecksums(3);
  uploader_->Enqueue(WriteFile("u.json", 500), Header("u.json"));
  ASSERT_TRUE(uploader_->WaitIdle(absl::Seconds(30)));
  EXPECT_FALSE(server_->Get("u.json").complete);
  EXPECT_EQ(uploader_->stats().dropped, 1);
}

TEST_F(ArtifactUploaderTest, DropsAnItemOlderThanMaxAge) {
  auto server = std::make_unique<FakeArtifactServer>();
  FakeArtifactServer *fake = server.get();
  ArtifactUploader::Options options;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(1);
  options.max_age = absl::ZeroDuration();
  ArtifactUploader uploader(options, std::move(server), &clock_);
  fake->FailOpens({absl::UnavailableError("down")});
  uploader.Enqueue(WriteFile("t.json", 10), Header("t.json"));
  ASSERT_TRUE(uploader.WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(uploader.stats().dropped, 1);
}

TEST_F(ArtifactUploaderTest, StopEndsARetryingUploadPromptly) {
  auto server = std::make_unique<FakeArtifactServer>();
  FakeArtifactServer *fake = server.get();
  ArtifactUploader::Options options;
  options.initial_backoff = absl::Hours(1);  // only Stop can end this wait
  options.max_backoff = absl::Hours(1);
  ArtifactUploader uploader(options, std::move(server), &clock_);
  fake->FailOpens({absl::UnavailableError("down")});
  uploader.Enqueue(WriteFile("t.json", 10), Header("t.json"));
  uploader.Enqueue(WriteFile("u.json", 10), Header("u.json"));
  while (fake->opens() == 0) absl::SleepFor(absl::Milliseconds(1));
  uploader.Stop();
  EXPECT_FALSE(fake->Get("t.json").complete);
  EXPECT_EQ(uploader.stats().completed, 0);
  uploader.Enqueue(WriteFile("v.json", 10), Header("v.json"));  // ignored after Stop
  EXPECT_EQ(fake->opens(), 1);
}

TEST(ArtifactUploaderOptionsTest, TestHooksComeFromTheEnvironment) {
  setenv("TRAINYARD_TEST_ARTIFACT_CHUNK_BYTES", "4096", 1);
  setenv("TRAINYARD_TEST_ARTIFACT_CHUNK_DELAY_MS", "250", 1);
  ArtifactUploader::Options options = ArtifactUploader::Options::FromEnvironment();
  EXPECT_EQ(options.chunk_bytes, 4096);
  EXPECT_EQ(options.chunk_delay, absl::Milliseconds(250));
  setenv("TRAINYARD_TEST_ARTIFACT_CHUNK_BYTES", "999999999", 1);  // over 256 KiB: ignored
  setenv("TRAINYARD_TEST_ARTIFACT_CHUNK_DELAY_MS", "soon", 1);
  options = ArtifactUploader::Options::FromEnvironment();
  EXPECT_EQ(options.chunk_bytes, ArtifactUploader::kMaxChunkBytes);
  EXPECT_EQ(options.chunk_delay, absl::ZeroDuration());
  unsetenv("TRAINYARD_TEST_ARTIFACT_CHUNK_BYTES");
  unsetenv("TRAINYARD_TEST_ARTIFACT_CHUNK_DELAY_MS");
}

}  // namespace
}  // namespace trainyard
