#include "worker/daemon/artifact_uploader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/base/sha256.h"

namespace trainyard {

namespace {

constexpr auto kOpenTimeout = std::chrono::seconds(10);
// A stream is bounded too, so a controller that accepts it and never answers cannot
// hold the uploader forever; the keepalive of the channel catches a dead peer sooner.
constexpr auto kUploadTimeout = std::chrono::minutes(10);

// Calls register their context so CancelAll can reach them.
class GrpcArtifactTransport : public ArtifactTransport {
 public:
  explicit GrpcArtifactTransport(std::shared_ptr<grpc::ChannelInterface> channel)
      : stub_(v1::WorkerService::NewStub(channel)) {}

  absl::StatusOr<v1::ArtifactStatus> Open(const v1::ArtifactHeader &header) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kOpenTimeout);
    if (!Register(&context)) return absl::CancelledError("uploader stopped");
    v1::ArtifactStatus status;
    grpc::Status s = stub_->OpenArtifact(&context, header, &status);
    Unregister(&context);
    if (!s.ok()) return FromGrpcStatus(s);
    return status;
  }

  std::unique_ptr<Upload> StartUpload() override {
    return std::make_unique<GrpcUpload>(this);
  }

  void CancelAll() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    for (grpc::ClientContext *c : contexts_) c->TryCancel();
  }

 private:
  class GrpcUpload : public Upload {
   public:
    explicit GrpcUpload(GrpcArtifactTransport *transport) : transport_(transport) {
      context_.set_deadline(std::chrono::system_clock::now() + kUploadTimeout);
      registered_ = transport_->Register(&context_);
      if (registered_) writer_ = transport_->stub_->UploadArtifact(&context_, &status_);
    }
    ~GrpcUpload() override {
      if (registered_) {
        if (writer_ != nullptr && !finished_) {
          context_.TryCancel();
          writer_->Finish();
        }
        transport_->Unregister(&context_);
      }
    }
    bool Write(const v1::ArtifactChunk &chunk) override {
      return writer_ != nullptr && writer_->Write(chunk);
    }
    absl::StatusOr<v1::ArtifactStatus> Finish() override {
      if (writer_ == nullptr) return absl::CancelledError("uploader stopped");
      writer_->WritesDone();
      finished_ = true;
      grpc::Status s = writer_->Finish();
      if (!s.ok()) return FromGrpcStatus(s);
      return status_;
    }

   private:
    GrpcArtifactTransport *const transport_;
    grpc::ClientContext context_;
    v1::ArtifactStatus status_;
    std::unique_ptr<grpc::ClientWriter<v1::ArtifactChunk>> writer_;
    bool registered_ = false;
    bool finished_ = false;
  };

  bool Register(grpc::ClientContext *context) {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    contexts_.insert(context);
    return true;
  }
  void Unregister(grpc::ClientContext *context) {
    absl::MutexLock lock(&mu_);
    contexts_.erase(context);
  }

  const std::unique_ptr<v1::WorkerService::Stub> stub_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext *> contexts_ ABSL_GUARDED_BY(mu_);
};

// PERMISSION_DENIED is not here: the controller answers it while this worker is not
// (yet) registered, e.g. just after a controller restart, before the link reconnects.
bool Permanent(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kOutOfRange:
      return true;
    default:
      return false;
  }
}

// The integer value of environment variable `name` within [min, max], if set.
std::optional<int64_t> EnvInt(const char *name, int64_t min, int64_t max) {
  const char *text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    spdlog::warn("{}='{}' ignored: expected an integer in [{}, {}]", name,
                 std::string(text).substr(0, 100), min, max);
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::unique_ptr<ArtifactTransport> MakeGrpcArtifactTransport(
    std::shared_ptr<grpc::ChannelInterface> channel) {
  return std::make_unique<GrpcArtifactTransport>(std::move(channel));
}

ArtifactUploader::Options ArtifactUploader::Options::FromEnvironment() {
  Options options;
  if (auto v = EnvInt("TRAINYARD_TEST_ARTIFACT_CHUNK_BYTES", 1, kMaxChunkBytes)) {
    options.chunk_bytes = *v;
  }
  if (auto v = EnvInt("TRAINYARD_TEST_ARTIFACT_CHUNK_DELAY_MS", 0, 60'000)) {
    options.chunk_delay = absl::Milliseconds(*v);
  }
  return options;
}

ArtifactUploader::ArtifactUploader(Options options, std::unique_ptr<ArtifactTransport> transport,
                                   Clock *clock)
    : options_(std::move(options)), transport_(std::move(transport)), clock_(clock) {
  thread_ = std::thread([this] { Run(); });
}

ArtifactUploader::~ArtifactUploader() { Stop(); }

void ArtifactUploader::Enqueue(std::string path, v1::ArtifactHeader header) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    spdlog::warn("artifact {} of job={} not uploaded: the worker is stopping", header.name(),
                 header.job_id());
    return;
  }
  queue_.push_back(Item{std::move(path), std::move(header), clock_->Now()});
}

void ArtifactUploader::Stop() {
  {
    absl::MutexLock lock(&mu_);
    const size_t pending = queue_.size() + (busy_ ? 1 : 0);
    if (!stopping_ && pending > 0) {
      spdlog::warn("artifact uploader stopping with {} artifact(s) not uploaded", pending);
    }
    stopping_ = true;
  }
  transport_->CancelAll();
  absl::MutexLock join_lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

ArtifactUploader::Stats ArtifactUploader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool ArtifactUploader::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; };
  return clock_->AwaitWithDeadline(&mu_, absl::Condition(&idle), clock_->Now() + timeout);
}

bool ArtifactUploader::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool ArtifactUploader::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  return !clock_->AwaitWithDeadline(&mu_, absl::Condition(&stop), clock_->Now() + d);
}

std::string ArtifactUploader::Describe(const Item &item) const {
  const v1::ArtifactHeader &h = item.header;
  return absl::StrCat("artifact ", h.name(), " (job=", h.job_id(), " attempt=", h.attempt(),
                      " rank=", h.rank(), " ", item.path, ")");
}

void ArtifactUploader::Run() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) {
        busy_ = false;
        return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    absl::Duration backoff = options_.initial_backoff;
    Outcome outcome;
    int quick_retries = 0;  // immediate retries without progress since the last pause
    while (true) {
      bool progressed = false;
      outcome = Attempt(item, progressed);
      if (progressed) quick_retries = 0;
      // An offset mismatch or checksum failure is retried at once, but not in a tight
      // loop against a controller that keeps answering so.
      if (outcome == Outcome::kRetryNow && ++quick_retries > 3) outcome = Outcome::kRetry;
      if (outcome == Outcome::kDone || outcome == Outcome::kDropped ||
          outcome == Outcome::kStopped) {
        break;
      }
      if (clock_->Now() - item.enqueued > options_.max_age) {
        spdlog::error("{} dropped: not uploaded within {}", Describe(item),
                      absl::FormatDuration(options_.max_age));
        outcome = Outcome::kDropped;
        break;
      }
      if (progressed) backoff = options_.initial_backoff;
      if (outcome == Outcome::kRetry) {
        if (!Pause(backoff)) {
          outcome = Outcome::kStopped;
          break;
        }
        backoff = std::min(backoff * 2, options_.max_backoff);
        quick_retries = 0;
      }
    }
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (outcome == Outcome::kDone) ++stats_.completed;
    if (outcome == Outcome::kDropped) ++stats_.dropped;
  }
}

ArtifactUploader::Outcome ArtifactUploader::Attempt(Item &item, bool &progressed) {
  if (stopping()) return Outcome::kStopped;
  v1::ArtifactHeader &header = item.header;
  if (!item.hashed) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(item.path, ec);
    absl::StatusOr<std::string> sha = Sha256File(item.path);
    if (ec || !sha.ok()) {
      spdlog::error("{} dropped: cannot read it: {}", Describe(item),
                    ec ? ec.message() : std::string(sha.status().message()));
      return Outcome::kDropped;
    }
    header.set_size_bytes(static_cast<int64_t>(size));
    header.set_sha256(*sha);
    item.hashed = true;
  }

  // Classifies a failed call; kDone never comes from here.
  auto on_error = [&](const absl::Status &status, const char *call) {
    if (stopping()) return Outcome::kStopped;
    if (Permanent(status.code())) {
      spdlog::error("{} dropped: {} refused it: {}", Describe(item), call, status.ToString());
      return Outcome::kDropped;
    }
    if (status.code() == absl::StatusCode::kDataLoss) {
      if (item.data_loss_retries >= options_.max_data_loss_retries) {
        spdlog::error("{} dropped: the controller's checksum failed {} times: {}",
                      Describe(item), item.data_loss_retries + 1, status.ToString());
        return Outcome::kDropped;
      }
      ++item.data_loss_retries;
      item.hashed = false;  // the file may have changed: hash it again, upload from 0
      spdlog::warn("{}: {} (checksum mismatch); uploading again from 0", Describe(item),
                   status.ToString());
      return Outcome::kRetryNow;
    }
    if (status.code() == absl::StatusCode::kFailedPrecondition) {
      spdlog::warn("{}: {}; resuming from the controller's offset", Describe(item),
                   status.ToString());
      return Outcome::kRetryNow;
    }
    spdlog::warn("{}: {} failed, will retry: {}", Describe(item), call, status.ToString());
    return Outcome::kRetry;
  };

  absl::StatusOr<v1::ArtifactStatus> opened = transport_->Open(header);
  if (!opened.ok()) return on_error(opened.status(), "OpenArtifact");
  if (opened->complete()) {
    spdlog::info("{} uploaded ({} bytes)", Describe(item), header.size_bytes());
    return Outcome::kDone;
  }
  int64_t offset = opened->committed_bytes();
  if (offset < 0 || offset > header.size_bytes()) {
    spdlog::error("{} dropped: the controller holds {} of {} bytes", Describe(item), offset,
                  header.size_bytes());
    return Outcome::kDropped;
  }

  if (offset > 0) {
    spdlog::info("{}: the controller holds {} of {} bytes; resuming there", Describe(item), offset,
                 header.size_bytes());
  }
  std::ifstream in(item.path, std::ios::binary);
  if (!in || !in.seekg(offset)) {
    spdlog::error("{} dropped: cannot read it from offset {}", Describe(item), offset);
    return Outcome::kDropped;
  }
  std::unique_ptr<ArtifactTransport::Upload> upload = transport_->StartUpload();
  std::string buffer;
  bool first = true;
  bool broken = false;
  while (first || offset < header.size_bytes()) {
    if (!first && options_.chunk_delay > absl::ZeroDuration() && !Pause(options_.chunk_delay)) {
      return Outcome::kStopped;
    }
    if (stopping()) return Outcome::kStopped;
    const int64_t want = std::min(options_.chunk_bytes, header.size_bytes() - offset);
    buffer.resize(static_cast<size_t>(want));
    if (want > 0 && !in.read(buffer.data(), want)) {
      spdlog::error("{} dropped: it shrank while uploading (at offset {})", Describe(item),
                    offset);
      return Outcome::kDropped;
    }
    v1::ArtifactChunk chunk;
    if (first) *chunk.mutable_header() = header;
    chunk.set_offset(offset);
    chunk.set_data(buffer);
    first = false;
    if (!upload->Write(chunk)) {
      broken = true;
      break;
    }
    offset += want;
    progressed = progressed || want > 0;
    absl::MutexLock lock(&mu_);
    stats_.bytes_sent += want;
  }
  absl::StatusOr<v1::ArtifactStatus> finished = upload->Finish();
  if (!finished.ok()) return on_error(finished.status(), "UploadArtifact");
  if (broken || !finished->complete()) {
    spdlog::warn("{}: upload ended at {} of {} bytes; resuming", Describe(item),
                 finished->committed_bytes(), header.size_bytes());
    return Outcome::kRetry;
  }
  spdlog::info("{} uploaded ({} bytes)", Describe(item), header.size_bytes());
  return Outcome::kDone;
}

}  // namespace trainyard
