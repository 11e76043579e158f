// The controller's artifact store: files that workers upload for a job (profiler
// traces, flight-recorder dumps), kept under DATA_DIR/artifacts/JOB_ID/NAME and indexed
// in the table `artifacts` of the controller's database (DATA_DIR/trainyard.db).
//
// An upload is resumable. OpenArtifact(header) validates the header and creates (or
// finds) the row, in state 'partial', and the file NAME.part; the bytes committed so far
// are the size of NAME.part on disk (the one source of truth: the row holds no count).
// ArtifactUpload appends chunks at exactly that offset, each written and fdatasync'd
// before the call returns. When the part holds size_bytes it is hashed: a sha256
// mismatch drops the part and the row (DATA_LOSS); a match renames the part to NAME,
// fsyncs the directory, marks the row 'complete' and, while the job is not in a terminal
// state, appends a controller ArtifactRef event (uri "artifact://JOB/NAME"). For a job
// that already ended the artifact is stored and listed but no event is written: nothing
// follows a job's terminal JobStateChange (JobManager::AppendControllerEvent).
//
// The job's artifacts (complete and partial, by size_bytes) may hold at most
// options.bytes_per_job; an Open that would pass it is RESOURCE_EXHAUSTED and, once per
// name while this store is open and the job has not ended, a LogLine warn event says
// which artifact was refused.
//
// At start-up (Open) the table and the directory are reconciled: a partial row whose
// part is missing gets an empty part (committed 0) — or, when NAME is there with the
// full size (a crash between the rename and the row update), NAME becomes the part
// again, so the worker's next Open finishes it; a complete row without its file is
// dropped; files without a row are deleted.
//
// Thread contract: thread-safe. `mu_` guards the database connection and the set of
// names being uploaded; it is never held across hashing or a JobManager call. One
// upload per (job, name) at a time: a second BeginUpload is ABORTED while the first
// ArtifactUpload lives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_db.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

inline constexpr int64_t kMaxArtifactChunkBytes = 256 << 10;  // data of one chunk
inline constexpr int64_t kDefaultArtifactBytesPerJob = int64_t{1} << 30;
inline constexpr int64_t kDefaultMaxArtifactFileBytes = int64_t{4} << 30;
inline constexpr char kArtifactPartSuffix[] = ".part";

struct ArtifactStoreOptions {
  // complete + partial bytes of one job (--artifact-bytes-per-job).
  int64_t bytes_per_job = kDefaultArtifactBytesPerJob;
  // size_bytes above this is INVALID_ARGUMENT (no event): no file is that large.
  int64_t max_file_bytes = kDefaultMaxArtifactFileBytes;
  // complete + partial artifacts of one job: beyond, OpenArtifact is RESOURCE_EXHAUSTED
  // (so empty files cannot grow the index and the event log without bound).
  int64_t files_per_job = 4096;
};

class ArtifactStore;

// One upload stream's hold on (job, name); the name is free again when it dies.
// Used by one thread at a time.
class ArtifactUpload {
 public:
  ~ArtifactUpload();
  ArtifactUpload(const ArtifactUpload&) = delete;
  ArtifactUpload& operator=(const ArtifactUpload&) = delete;

  // Appends `data` (<= 256 KiB, else INVALID_ARGUMENT) at `offset`, which must equal
  // the committed bytes (else FAILED_PRECONDITION naming the expected offset: a client
  // resumes by calling OpenArtifact again); never past size_bytes (INVALID_ARGUMENT).
  // Durable before it returns. The chunk that completes the file finishes the artifact
  // (see above: DATA_LOSS on a sha256 mismatch, after which this upload is spent).
  absl::StatusOr<v1::ArtifactStatus> Append(int64_t offset, std::string_view data);
  // Bytes committed so far (and whether the artifact is complete).
  v1::ArtifactStatus Status() const;
  const v1::ArtifactHeader& header() const { return header_; }

 private:
  friend class ArtifactStore;
  ArtifactUpload(ArtifactStore* store, v1::ArtifactHeader header, int fd, int64_t committed)
      : store_(store), header_(std::move(header)), fd_(fd), committed_(committed) {}

  ArtifactStore* const store_;
  const v1::ArtifactHeader header_;
  int fd_ = -1;  // NAME.part, write-only; -1 once finished or failed
  int64_t committed_ = 0;
  bool complete_ = false;
};

class ArtifactStore {
 public:
  // Opens the table in DATA_DIR/trainyard.db (creating it), creates DATA_DIR/artifacts
  // and reconciles it with the table. `manager` and `clock` must outlive the store.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(const std::string& data_dir,
                                                             JobManager* manager, Clock* clock,
                                                             ArtifactStoreOptions options = {});

  // Begins or resumes an upload (WorkerService.OpenArtifact). INVALID_ARGUMENT for a
  // bad field (quoting at most ~100 characters), NOT_FOUND for an unknown job,
  // ALREADY_EXISTS when a complete artifact of that name has another sha256,
  // RESOURCE_EXHAUSTED over the job's cap, ABORTED when a partial of that name with
  // another header is being uploaded. A partial with another header that no stream
  // holds is replaced (its bytes dropped). Completes the artifact when its part already
  // holds every byte (size 0, or a crash before the rename).
  absl::StatusOr<v1::ArtifactStatus> OpenArtifact(const v1::ArtifactHeader& header);

  // Takes the upload of an opened artifact (the header must equal the opened one: else
  // FAILED_PRECONDITION; never opened: FAILED_PRECONDITION; complete: FAILED_PRECONDITION;
  // held by another stream: ABORTED).
  absl::StatusOr<std::unique_ptr<ArtifactUpload>> BeginUpload(const v1::ArtifactHeader& header);

  // The job's complete artifacts, oldest first (JobService.ListArtifacts).
  absl::StatusOr<std::vector<v1::ArtifactInfo>> List(const std::string& job_id);
  // One complete artifact; NOT_FOUND when there is none.
  absl::StatusOr<v1::ArtifactInfo> Find(const std::string& job_id, const std::string& name);
  // Where a complete artifact's bytes are.
  std::string PathOf(const std::string& job_id, const std::string& name) const;

  // Why `name` cannot name an artifact, or "": [A-Za-z0-9][A-Za-z0-9._-]{0,127}, not
  // ending in ".part".
  static std::string NameProblem(std::string_view name);
  // The header's own field checks (no job needed); INVALID_ARGUMENT or OK.
  absl::Status CheckHeader(const v1::ArtifactHeader& header) const;

 private:
  friend class ArtifactUpload;
  struct Row {
    v1::ArtifactHeader header;
    bool complete = false;
    int64_t create_time_us = 0;
  };
  static Row RowAt(SqliteStatement& stmt);  // artifact_index.cc
  absl::StatusOr<std::vector<Row>> AllRowsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ArtifactStore(std::string root, std::unique_ptr<SqliteDb> db, JobManager* manager, Clock* clock,
                ArtifactStoreOptions options)
      : root_(std::move(root)), manager_(manager), clock_(clock), options_(options), db_(std::move(db)) {}

  absl::Status InitSchema();
  absl::Status Reconcile();
  std::string DirOf(const std::string& job_id) const;
  std::string PartOf(const std::string& job_id, const std::string& name) const;
  // Job checks: exists, attempt <= its attempt, rank < its world size.
  absl::Status CheckAgainstJob(const v1::ArtifactHeader& header);

  absl::StatusOr<std::optional<Row>> ReadRowLocked(const std::string& job_id, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertPartialLocked(const v1::ArtifactHeader& header) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteRowLocked(const std::string& job_id, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> JobBytesLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> JobFilesLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Called by an upload whose part holds every byte: hash, rename, index, announce.
  // The caller holds the claim on (job, name) and has closed nothing yet.
  absl::StatusOr<v1::ArtifactStatus> Finish(const v1::ArtifactHeader& header);
  void Release(const std::string& key);
  // Appends a LogLine warn about a refused artifact (once per name).
  void WarnRefused(const v1::ArtifactHeader& header, int64_t used);

  const std::string root_;  // DATA_DIR/artifacts
  JobManager* const manager_;
  Clock* const clock_;
  const ArtifactStoreOptions options_;

  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> uploading_ ABSL_GUARDED_BY(mu_);  // "JOB/NAME"
  absl::flat_hash_set<std::string> warned_ ABSL_GUARDED_BY(mu_);     // likewise
};

// True when the two headers name the same upload (every field equal).
bool SameArtifactHeader(const v1::ArtifactHeader& a, const v1::ArtifactHeader& b);

}  // namespace trainyard
