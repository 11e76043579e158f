// The worker's artifact uploader: sends files the ranks produced (profiler traces,
// flight-recorder dumps) to the controller through WorkerService.OpenArtifact and
// UploadArtifact, one at a time in the order they were enqueued.
//
// For each queued {path, header} it hashes the file (size and sha256 go into the
// header), asks OpenArtifact how many bytes the controller already holds, and streams
// the rest in chunks from that offset (the header rides on the first chunk). Errors:
//   UNAVAILABLE, DEADLINE_EXCEEDED, a broken stream, PERMISSION_DENIED (the controller
//     says so until this worker has re-registered after a controller restart), ABORTED
//     (an old stream still holds the artifact) and other transient codes: wait with
//     capped exponential backoff (reset after progress), re-Open and resume from the
//     committed offset, until the item is older than max_age (then dropped with an
//     error log);
//   FAILED_PRECONDITION (offset mismatch): re-Open and resume the same way;
//   DATA_LOSS (sha mismatch, the controller dropped the partial): re-hash and upload
//     from 0, at most max_data_loss_retries times, then drop;
//   RESOURCE_EXHAUSTED, ALREADY_EXISTS, INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED,
//     UNIMPLEMENTED, OUT_OF_RANGE: permanent, dropped with a log line.
// The queue lives in memory only: on daemon shutdown pending items are forgotten (a
// partial upload stays on the controller, resumable by a later Open of the same name,
// but this daemon does not persist what it had not sent).
//
// Test-only environment hooks, read once by Options::FromEnvironment (the daemon's
// main applies them; nothing else reads them):
//   TRAINYARD_TEST_ARTIFACT_CHUNK_BYTES     chunk size in bytes (1 .. 256 KiB)
//   TRAINYARD_TEST_ARTIFACT_CHUNK_DELAY_MS  pause between chunks, so an integration test
//                                           can restart the controller mid-upload
//
// Thread contract: Enqueue, Stop and the accessors are thread-safe. One background
// thread (started by the constructor) does all file reading and every RPC; mu_ guards
// the queue and counters and is never held across an RPC or file read. Stop (and the
// destructor) wakes that thread, cancels the RPC in flight through the transport and
// joins it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard {

// The two RPCs the uploader needs, behind an interface so tests can fake the
// controller. Implementations must be thread-safe: CancelAll runs on another thread
// than the calls it cancels.
class ArtifactTransport {
 public:
  // One UploadArtifact call in flight.
  class Upload {
   public:
    virtual ~Upload() = default;
    // False when the stream is broken (Finish then says why).
    virtual bool Write(const trainyard::v1::ArtifactChunk &chunk) = 0;
    // Half-closes the stream and returns the controller's answer.
    virtual absl::StatusOr<trainyard::v1::ArtifactStatus> Finish() = 0;
  };

  virtual ~ArtifactTransport() = default;
  virtual absl::StatusOr<trainyard::v1::ArtifactStatus> Open(
      const trainyard::v1::ArtifactHeader &header) = 0;
  virtual std::unique_ptr<Upload> StartUpload() = 0;
  // Cancels every call in flight and every later one (shutdown).
  virtual void CancelAll() = 0;
};

// ArtifactTransport over a WorkerService channel (the one the controller link uses, so
// under TLS each upload presents the worker's certificate, whose CN the controller
// requires ArtifactHeader.worker to equal).
std::unique_ptr<ArtifactTransport> MakeGrpcArtifactTransport(
    std::shared_ptr<grpc::ChannelInterface> channel);

class ArtifactUploader {
 public:
  static constexpr int64_t kMaxChunkBytes = 256 * 1024;

  struct Options {
    int64_t chunk_bytes = kMaxChunkBytes;
    absl::Duration chunk_delay = absl::ZeroDuration();
    absl::Duration initial_backoff = absl::Milliseconds(200);
    absl::Duration max_backoff = absl::Seconds(5);
    // An item still not uploaded this long after Enqueue is dropped.
    absl::Duration max_age = absl::Hours(1);
    int max_data_loss_retries = 2;

    // These defaults with the TRAINYARD_TEST_ARTIFACT_* hooks applied (see above);
    // an unparsable or out-of-range value is ignored with a warning.
    static Options FromEnvironment();
  };

  // Counters for logs and tests.
  struct Stats {
    int completed = 0;
    int dropped = 0;
    int64_t bytes_sent = 0;
  };

  ArtifactUploader(Options options, std::unique_ptr<ArtifactTransport> transport, Clock *clock);
  ~ArtifactUploader();  // Stop()
  ArtifactUploader(const ArtifactUploader &) = delete;
  ArtifactUploader &operator=(const ArtifactUploader &) = delete;

  // Queues `path` for upload; header.size_bytes and header.sha256 are filled in by the
  // uploader thread from the file (so a large file is not hashed on the caller's
  // thread). Ignored (with a log line) after Stop.
  void Enqueue(std::string path, trainyard::v1::ArtifactHeader header);
  // Stops the thread promptly; queued items are dropped (not persisted).
  void Stop();

  Stats stats() const;
  // Blocks until the queue is empty and nothing is in progress, or `timeout` passes on
  // the clock; true when idle.
  bool WaitIdle(absl::Duration timeout);

 private:
  struct Item {
    std::string path;
    trainyard::v1::ArtifactHeader header;
    absl::Time enqueued;
    int data_loss_retries = 0;
    bool hashed = false;
  };
  enum class Outcome { kDone, kDropped, kRetry, kRetryNow, kStopped };

  void Run();
  // One Open + Upload round; kRetry* leave the item to be tried again.
  Outcome Attempt(Item &item, bool &progressed);
  // Waits `d` on the clock unless stopping; false when stopping.
  bool Pause(absl::Duration d);
  bool stopping() const;
  std::string Describe(const Item &item) const;

  const Options options_;
  const std::unique_ptr<ArtifactTransport> transport_;
  Clock *const clock_;

  absl::Mutex join_mu_;  // serialises Stop's join (Stop may race the destructor's)
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace trainyard
