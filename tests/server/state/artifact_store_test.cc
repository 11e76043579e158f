// The controller's artifact store (server/artifact_store) over a real JobManager and
// SqliteJobStore in a temp dir: hostile headers and chunks first (path escapes, bad kinds and
// sizes, offsets, oversized chunks, a wrong sha256), then resuming after a simulated
// controller restart, the ArtifactRef event, a terminal job (stored, no event), the
// per-job cap (RESOURCE_EXHAUSTED and one warn event), and one pass through the gRPC
// services (OpenArtifact, UploadArtifact, ListArtifacts, PullArtifact) of an in-process
// controller.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/sha256.h"
#include "server/state/artifact_store.h"
#include "tests/fakes/fake_process_launcher.h"
#include "tests/server/state/manager_fixture.h"
#include "tests/support/files.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;

class ArtifactStoreTest : public ManagerFixture {
 protected:
  void SetUp() override {
    worker_ = Connect("w1", 2);
    job_ = Submit(Spec(2));
    ASSERT_EQ(Job(job_).attempt(), 1);
    ASSERT_EQ(Job(job_).world_size(), 2);
    OpenStore();
  }
  void TearDown() override { artifacts_.reset(); }

  void OpenStore(int64_t cap = kDefaultArtifactBytesPerJob, int64_t max_file = 64 << 20, int64_t files = 4096) {
    artifacts_.reset();
    ArtifactStoreOptions options;
    options.bytes_per_job = cap;
    options.max_file_bytes = max_file;
    options.files_per_job = files;
    auto store = ArtifactStore::Open(dir_.path(), manager_.get(), &clock_, options);
    ASSERT_TRUE(store.ok()) << store.status();
    artifacts_ = std::move(*store);
  }

  v1::ArtifactHeader Header(const std::string& name, const std::string& content, int rank = 0) {
    v1::ArtifactHeader h;
    h.set_job_id(job_);
    h.set_attempt(1);
    h.set_rank(rank);
    h.set_name(name);
    h.set_kind("trace");
    h.set_size_bytes(static_cast<int64_t>(content.size()));
    h.set_sha256(Sha256Hex(content));
    h.set_worker("w1");
    return h;
  }

  absl::StatusCode OpenCode(const v1::ArtifactHeader& h) { return artifacts_->OpenArtifact(h).status().code(); }

  // Opens and sends `content` from the committed offset in 256 KiB chunks; the last
  // Append's status (or the first error).
  absl::StatusOr<v1::ArtifactStatus> Upload(const v1::ArtifactHeader& h, const std::string& content) {
    auto opened = artifacts_->OpenArtifact(h);
    if (!opened.ok() || opened->complete()) return opened;
    auto upload = artifacts_->BeginUpload(h);
    if (!upload.ok()) return upload.status();
    int64_t offset = opened->committed_bytes();
    absl::StatusOr<v1::ArtifactStatus> last = *opened;
    while (offset < static_cast<int64_t>(content.size())) {
      const size_t n = std::min<size_t>(kMaxArtifactChunkBytes, content.size() - offset);
      last = (*upload)->Append(offset, std::string_view(content).substr(offset, n));
      if (!last.ok()) return last;
      offset += static_cast<int64_t>(n);
    }
    return last;
  }

  std::vector<v1::Event> Events(v1::Event::PayloadCase payload) {
    std::vector<v1::Event> out;
    for (const auto& e : Stored(job_)) {
      if (e.payload_case() == payload) out.push_back(e);
    }
    return out;
  }

  std::string ArtifactDir() { return dir_.path() + "/artifacts/" + job_; }

  Conn worker_;
  std::string job_;
  std::unique_ptr<ArtifactStore> artifacts_;
};

TEST_F(ArtifactStoreTest, NamesThatCouldEscapeOrCollideAreRefused) {
  const std::string content = PseudoRandomBytes(10);
  for (const std::string& name : {std::string("../x"), std::string("/abs"), std::string(""),
                                  std::string(129, 'a'), std::string("a\0b", 3), std::string(".hidden"),
                                  std::string("a/b"), std::string("x.part"), std::string("-x")}) {
    auto h = Header(name, content);
    auto s = artifacts_->OpenArtifact(h);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(std::string(s.status().message()).rfind("ArtifactHeader.name", 0), 0u) << s.status();
    EXPECT_LE(s.status().message().size(), 300u);
  }
  EXPECT_EQ(OpenCode(Header(std::string(128, 'a'), content)), absl::StatusCode::kOk);
  // Nothing was created outside the job's directory.
  EXPECT_FALSE(fs::exists(dir_.path() + "/artifacts/x"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/x.part"));
}

TEST_F(ArtifactStoreTest, BadHeaderFieldsAreInvalidArgument) {
  const std::string content = PseudoRandomBytes(10);
  auto h = Header("t", content);
  auto bad = [&](auto mutate, const std::string& field) {
    v1::ArtifactHeader x = h;
    mutate(x);
    auto s = artifacts_->OpenArtifact(x);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << field << ": " << s.status();
    EXPECT_EQ(std::string(s.status().message()).rfind("ArtifactHeader." + field, 0), 0u) << s.status();
    EXPECT_LE(s.status().message().size(), 300u) << field;
  };
  bad([](auto& x) { x.set_kind("core_dump"); }, "kind");
  bad([](auto& x) { x.set_kind(""); }, "kind");
  bad([](auto& x) { x.set_size_bytes(-1); }, "size_bytes");
  bad([](auto& x) { x.set_size_bytes((64 << 20) + 1); }, "size_bytes");  // the per-file cap
  bad([](auto& x) { x.set_sha256("abc"); }, "sha256");
  bad([](auto& x) { x.set_sha256(std::string(64, 'A')); }, "sha256");  // upper case
  bad([](auto& x) { x.set_sha256(std::string(5000, 'a')); }, "sha256");
  bad([](auto& x) { x.set_attempt(0); }, "attempt");
  bad([](auto& x) { x.set_attempt(2); }, "attempt");  // the job has run one attempt
  bad([](auto& x) { x.set_rank(-2); }, "rank");
  bad([](auto& x) { x.set_rank(2); }, "rank");  // world size 2
  bad([](auto& x) { x.set_worker(""); }, "worker");
  bad([](auto& x) { x.set_worker(std::string(129, 'w')); }, "worker");
  bad([](auto& x) { x.set_job_id("../job-1"); }, "job_id");
  bad([](auto& x) { x.set_job_id(std::string(1 << 20, 'j')); }, "job_id");

  v1::ArtifactHeader unknown = h;
  unknown.set_job_id("job-99");
  EXPECT_EQ(OpenCode(unknown), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_.path() + "/artifacts/job-99"));
  EXPECT_TRUE(artifacts_->List(job_).value().empty());
}

TEST_F(ArtifactStoreTest, ChunksAtTheWrongOffsetTooLargeOrPastTheEndAreRefused) {
  const std::string content = PseudoRandomBytes(600 << 10);
  auto h = Header("big.trace", content);
  ASSERT_EQ(artifacts_->OpenArtifact(h).value().committed_bytes(), 0);
  auto upload = artifacts_->BeginUpload(h);
  ASSERT_TRUE(upload.ok()) << upload.status();

  auto wrong = (*upload)->Append(5, content.substr(5, 10));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("expected 0"), absl::string_view::npos) << wrong.status();

  auto huge = (*upload)->Append(0, content.substr(0, kMaxArtifactChunkBytes + 1));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE((*upload)->Append(0, content.substr(0, 256 << 10)).ok());
  EXPECT_EQ((*upload)->Status().committed_bytes(), 256 << 10);
  EXPECT_EQ(fs::file_size(ArtifactDir() + "/big.trace.part"), 256u << 10);

  // A second stream on the same name while this one holds it.
  EXPECT_EQ(artifacts_->BeginUpload(h).status().code(), absl::StatusCode::kAborted);
  // A header that differs from the opened one.
  v1::ArtifactHeader other = h;
  other.set_rank(1);
  upload->reset();
  EXPECT_EQ(artifacts_->BeginUpload(other).status().code(), absl::StatusCode::kFailedPrecondition);

  // Past size_bytes: 600 KiB - 256 KiB remain, send 256 KiB twice, then one byte more.
  auto resumed = artifacts_->BeginUpload(h);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_TRUE((*resumed)->Append(256 << 10, content.substr(256 << 10, 256 << 10)).ok());
  const int64_t at = 512 << 10;
  auto past = (*resumed)->Append(at, content.substr(at) + "x");
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument) << past.status();
  EXPECT_EQ((*resumed)->Status().committed_bytes(), at);
  auto done = (*resumed)->Append(at, content.substr(at));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->complete());
  EXPECT_EQ(ReadFileOrEmpty(ArtifactDir() + "/big.trace"), content);
  EXPECT_FALSE(fs::exists(ArtifactDir() + "/big.trace.part"));
}

TEST_F(ArtifactStoreTest, WrongSha256IsDataLossAndDropsThePart) {
  const std::string content = PseudoRandomBytes(1000);
  auto h = Header("t.json", content);
  h.set_sha256(Sha256Hex("something else"));
  auto s = Upload(h, content);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_FALSE(fs::exists(ArtifactDir() + "/t.json.part"));
  EXPECT_FALSE(fs::exists(ArtifactDir() + "/t.json"));
  EXPECT_TRUE(artifacts_->List(job_).value().empty());
  EXPECT_TRUE(Events(v1::Event::kArtifact).empty());
  // The name is free again: the right bytes under the right header go through.
  auto good = Upload(Header("t.json", content), content);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->complete());
}

TEST_F(ArtifactStoreTest, ACompleteUploadIsListedAnnouncedAndNotReplaced) {
  const std::string content = PseudoRandomBytes(300 << 10, 7);
  auto h = Header("rank1.trace.json", content, /*rank=*/1);
  auto s = Upload(h, content);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->complete());
  EXPECT_EQ(s->committed_bytes(), static_cast<int64_t>(content.size()));

  auto listed = artifacts_->List(job_);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name(), "rank1.trace.json");
  EXPECT_EQ((*listed)[0].rank(), 1);
  EXPECT_EQ((*listed)[0].attempt(), 1);
  EXPECT_EQ((*listed)[0].worker(), "w1");
  EXPECT_EQ((*listed)[0].kind(), "trace");
  EXPECT_EQ((*listed)[0].sha256(), h.sha256());

  auto events = Events(v1::Event::kArtifact);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rank(), 1);
  EXPECT_EQ(events[0].attempt(), 1);
  EXPECT_EQ(events[0].source_seq(), 0);
  EXPECT_EQ(events[0].artifact().name(), "rank1.trace.json");
  EXPECT_EQ(events[0].artifact().kind(), "trace");
  EXPECT_EQ(events[0].artifact().size_bytes(), static_cast<int64_t>(content.size()));
  EXPECT_EQ(events[0].artifact().sha256(), h.sha256());
  EXPECT_EQ(events[0].artifact().uri(), "artifact://" + job_ + "/rank1.trace.json");
  EXPECT_EQ(Job(job_).last_seq(), events[0].seq());

  // Opening it again: complete; another file under the name: ALREADY_EXISTS.
  auto again = artifacts_->OpenArtifact(h);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->complete());
  EXPECT_EQ(again->committed_bytes(), static_cast<int64_t>(content.size()));
  const std::string other = PseudoRandomBytes(300 << 10, 8);
  EXPECT_EQ(OpenCode(Header("rank1.trace.json", other, 1)), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(artifacts_->BeginUpload(h).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Events(v1::Event::kArtifact).size(), 1u);

  // What is pulled is what was sent.
  EXPECT_EQ(Sha256File(artifacts_->PathOf(job_, "rank1.trace.json")).value(), h.sha256());
  EXPECT_EQ(artifacts_->Find(job_, "missing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ArtifactStoreTest, AnEmptyArtifactCompletesOnOpen) {
  auto s = artifacts_->OpenArtifact(Header("empty.json", ""));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->complete());
  EXPECT_EQ(artifacts_->List(job_).value().size(), 1u);
  EXPECT_EQ(fs::file_size(ArtifactDir() + "/empty.json"), 0u);
}

TEST_F(ArtifactStoreTest, EmptyFilesCannotPassTheJobsArtifactCount) {
  OpenStore(kDefaultArtifactBytesPerJob, 64 << 20, /*files=*/3);
  for (const char* name : {"a.json", "b.json", "c.json"}) {
    auto s = artifacts_->OpenArtifact(Header(name, ""));
    ASSERT_TRUE(s.ok()) << s.status();
  }
  auto refused = artifacts_->OpenArtifact(Header("d.json", ""));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(artifacts_->List(job_).value().size(), 3u);
  // A name already stored still answers complete.
  auto again = artifacts_->OpenArtifact(Header("a.json", ""));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->complete());
}

TEST_F(ArtifactStoreTest, AnUploadResumesAfterAControllerRestart) {
  const std::string content = PseudoRandomBytes(700 << 10, 3);
  auto h = Header("fr-w1.json", content, -1);
  h.set_kind("flight_recorder");
  ASSERT_EQ(artifacts_->OpenArtifact(h).value().committed_bytes(), 0);
  {
    auto upload = artifacts_->BeginUpload(h);
    ASSERT_TRUE(upload.ok());
    ASSERT_TRUE((*upload)->Append(0, content.substr(0, 256 << 10)).ok());
    ASSERT_TRUE((*upload)->Append(256 << 10, content.substr(256 << 10, 100)).ok());
  }  // the stream breaks
  // A stray part no row names (a crash between the file and the row) is removed.
  { std::ofstream(ArtifactDir() + "/stray.part") << "junk"; }

  artifacts_.reset();
  Restart();
  OpenStore();
  EXPECT_FALSE(fs::exists(ArtifactDir() + "/stray.part"));
  EXPECT_TRUE(artifacts_->List(job_).value().empty());  // partial: not listed

  auto resumed = artifacts_->OpenArtifact(h);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_FALSE(resumed->complete());
  EXPECT_EQ(resumed->committed_bytes(), (256 << 10) + 100);
  auto s = Upload(h, content);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->complete());
  EXPECT_EQ(ReadFileOrEmpty(ArtifactDir() + "/fr-w1.json"), content);
  auto events = Events(v1::Event::kArtifact);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rank(), -1);
  EXPECT_EQ(events[0].artifact().kind(), "flight_recorder");
}

TEST_F(ArtifactStoreTest, RestartReconcilesMissingFiles) {
  const std::string a = PseudoRandomBytes(1000, 1), b = PseudoRandomBytes(2000, 2), c = PseudoRandomBytes(3000, 3);
  ASSERT_TRUE(Upload(Header("a", a), a).ok());
  ASSERT_TRUE(artifacts_->OpenArtifact(Header("b", b)).ok());  // partial, file removed below
  auto hc = Header("c", c);
  ASSERT_TRUE(artifacts_->OpenArtifact(hc).ok());
  {
    auto up = artifacts_->BeginUpload(hc);
    ASSERT_TRUE((*up)->Append(0, c).ok());
  }
  // c finished and was renamed, but (as if the controller died then) the row still
  // says partial: put it back in that state.
  artifacts_.reset();
  {
    auto db = SqliteDb::Open(dir_.path() + "/trainyard.db");
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->Exec("UPDATE artifacts SET state = 'partial' WHERE name = 'c'").ok());
  }
  fs::remove(ArtifactDir() + "/a");
  fs::remove(ArtifactDir() + "/b.part");
  const size_t events_before = Events(v1::Event::kArtifact).size();
  OpenStore();
  EXPECT_TRUE(artifacts_->List(job_).value().empty());  // a's row went with its file
  EXPECT_EQ(artifacts_->OpenArtifact(Header("b", b)).value().committed_bytes(), 0);
  // c: every byte is there; its next Open finishes it and announces it.
  auto finished = artifacts_->OpenArtifact(hc);
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_TRUE(finished->complete());
  EXPECT_EQ(Events(v1::Event::kArtifact).size(), events_before + 1);
  EXPECT_EQ(ReadFileOrEmpty(ArtifactDir() + "/c"), c);
}

TEST_F(ArtifactStoreTest, AnArtifactOfAnEndedJobIsStoredWithoutAnEvent) {
  ASSERT_TRUE(manager_->Cancel(job_, "done").ok());
  ASSERT_EQ(Job(job_).state(), v1::Job::CANCELLED);
  const int64_t last = Job(job_).last_seq();
  const std::string content = PseudoRandomBytes(5000);
  auto s = Upload(Header("late.json", content), content);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->complete());
  EXPECT_EQ(artifacts_->List(job_).value().size(), 1u);
  EXPECT_EQ(db_->LastSeq(job_), last);
  EXPECT_TRUE(Events(v1::Event::kArtifact).empty());
  // The job's terminal JobStateChange stays its last event.
  EXPECT_TRUE(Stored(job_).back().has_job_state());
}

TEST_F(ArtifactStoreTest, TheJobCapRefusesWithOneWarnEvent) {
  OpenStore(/*cap=*/10000);
  const std::string a = PseudoRandomBytes(6000, 1), b = PseudoRandomBytes(5000, 2), c = PseudoRandomBytes(4000, 3);
  ASSERT_TRUE(Upload(Header("a", a), a).ok());
  for (int i = 0; i < 3; ++i) {
    auto s = artifacts_->OpenArtifact(Header("b", b));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
  }
  auto warns = Events(v1::Event::kLog);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_EQ(warns[0].log().level(), "warn");
  EXPECT_NE(warns[0].log().message().find("artifact b (5000 bytes"), std::string::npos) << warns[0].log().message();
  EXPECT_FALSE(fs::exists(ArtifactDir() + "/b.part"));
  // A partial counts too: c fits (6000 + 4000), then nothing more does.
  ASSERT_TRUE(artifacts_->OpenArtifact(Header("c", c)).ok());
  EXPECT_EQ(OpenCode(Header("d", "x")), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Events(v1::Event::kLog).size(), 2u);
  // After the job ended: still refused, no event.
  ASSERT_TRUE(manager_->Cancel(job_, "").ok());
  EXPECT_EQ(OpenCode(Header("e", "y")), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Events(v1::Event::kLog).size(), 2u);
}

TEST_F(ArtifactStoreTest, AWorkerCannotReportAnArtifactRef) {
  v1::EventBatch batch = RankStates(worker_, job_, 1, {0}, v1::RankState::RUNNING);
  v1::Event forged = batch.events(0);
  forged.set_source_seq(forged.source_seq() + 1);
  forged.mutable_artifact()->set_name("x");
  forged.mutable_artifact()->set_uri("artifact://" + job_ + "/x");
  *batch.add_events() = forged;
  v1::Event stall = batch.events(0);
  stall.set_source_seq(forged.source_seq() + 1);
  stall.mutable_stall()->set_collective("dp:allreduce");
  *batch.add_events() = stall;
  ASSERT_TRUE(manager_->IngestEvents(worker_.id, batch).ok());
  EXPECT_TRUE(Events(v1::Event::kArtifact).empty());
  EXPECT_EQ(Events(v1::Event::kStall).size(), 1u);
  EXPECT_EQ(Dropped("forged"), 1);
}

// ---------------------------------------------------------------------------------------
// Through gRPC: the handlers are thin over the store.

}  // namespace
}  // namespace trainyard::testing
