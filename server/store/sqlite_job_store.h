#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/store/audit_store.h"
#include "server/store/job_store.h"
#include "server/store/sqlite_db.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// Durable state of the controller: jobs and their event logs, in SQLite (WAL,
// synchronous=FULL). Every write commits (fsync included) before it returns, so an
// event acknowledged to a worker is on disk.
//
// Thread-safe. Writes run one at a time on a writer connection under `write_mu_`;
// reads (ReadEvents, LastSeq) use a second connection under `read_mu_` and the
// committed-seq cache under `seq_mu_`, so a watcher never waits for a writer's fsync:
// WAL lets a reader see the last committed state while a write is in flight.
class SqliteJobStore final : public JobStore, public AuditStore {
 public:
  // Opens (creating if needed) DIR/trainyard.db.
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& data_dir);

  absl::Status CreateJob(v1::Job* job, std::vector<v1::Event>* events) override;
  absl::Status CreateJob(v1::Job* job) { return CreateJob(job, nullptr); }
  absl::Status PutJob(const v1::Job& job) override;
  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override;
  // Sweeps (sqlite_sweeps.cc).
  absl::Status CreateSweep(v1::Sweep* sweep, std::vector<v1::Job>* jobs,
                           std::vector<std::vector<v1::Event>>* events) override;
  absl::StatusOr<std::vector<v1::Sweep>> LoadSweeps() override;
  absl::StatusOr<std::optional<v1::Event>> LastEventOfKind(const std::string& job_id, int kind) override;
  absl::StatusOr<std::vector<v1::Event>> AppendEvents(const std::string& job_id,
                                                      std::vector<v1::Event> events) override;
  absl::StatusOr<std::vector<v1::Event>> ReadEvents(const std::string& job_id, int64_t from_seq, int limit) override;
  int64_t LastSeq(const std::string& job_id) override;
  absl::Status PutCordon(const std::string& worker, bool cordoned, const std::string& reason) override;
  absl::StatusOr<std::map<std::string, std::string>> LoadCordons() override;
  absl::Status SaveUsage(const std::map<std::string, StoredUsage>& usage) override;
  absl::StatusOr<std::map<std::string, StoredUsage>> LoadUsage() override;
  absl::StatusOr<std::vector<v1::Event>> ReadRecoveryEvents(const std::string& job_id, int attempt,
                                                            int step_tail) override;

  // The audit log (server/store/audit_store.h, sqlite_audit.cc).
  absl::StatusOr<int64_t> AppendAudit(const v1::AuditRecord& record) override;
  absl::Status FinishAudit(int64_t id, const std::string& outcome, const std::string& message,
                           const std::vector<std::string>& job_ids) override;
  absl::StatusOr<std::vector<v1::AuditRecord>> ReadAudit(const AuditQuery& query) override;
  absl::StatusOr<int64_t> PruneAudit(int64_t before_ms) override;

  // Retention (server/state/event_compaction.h). A job whose row was put with Job.compacted
  // reads as compacted from then on (ReadEvents: FAILED_PRECONDITION), so its events
  // may go in several transactions: DeleteCompactedEvents removes up to `max_rows` of
  // them (refusing a job that is not compacted) and returns how many it removed.
  absl::StatusOr<int64_t> DeleteCompactedEvents(const std::string& job_id, int max_rows);
  // Compacted jobs that still have events (a compaction cut off by a stop or crash).
  absl::StatusOr<std::vector<std::string>> CompactedWithEvents();
  struct Stats {
    int64_t size_bytes = 0;  // page_count * page_size of the main file
    int64_t free_pages = 0;  // freelist_count
    int64_t page_size = 0;
    bool incremental_vacuum = false;  // auto_vacuum = INCREMENTAL (stores created since v2)
  };
  absl::StatusOr<Stats> GetStats();
  // PRAGMA incremental_vacuum(max_pages) where the store has incremental auto-vacuum;
  // returns the free pages given back to the file system (0 without it).
  absl::StatusOr<int64_t> IncrementalVacuum(int max_pages);

 private:
  explicit SqliteJobStore(std::unique_ptr<SqliteDb> writer) : writer_(std::move(writer)) {}
  absl::Status InitSchema(const std::string& path);
  absl::Status LoadCompactedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void NoteCompacted(const v1::Job& job) ABSL_LOCKS_EXCLUDED(seq_mu_);
  // FAILED_PRECONDITION naming when and why, for a compacted job; OK otherwise.
  absl::Status CompactedError(const std::string& job_id) ABSL_LOCKS_EXCLUDED(seq_mu_);
  // The job's last committed seq, from the cache or the writer connection.
  absl::StatusOr<int64_t> LastSeqForWriteLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Inside an open transaction: inserts `events` after seq `last`, skipping resends.
  // Returns the inserted ones; *last becomes the new last seq.
  absl::StatusOr<std::vector<v1::Event>> InsertEventsLocked(const std::string& job_id, std::vector<v1::Event> events,
                                                            int64_t* last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void SetCommittedSeq(const std::string& job_id, int64_t seq) ABSL_LOCKS_EXCLUDED(seq_mu_);
  // Inside an open transaction: gives `job` the next id and inserts its row and
  // `events` (may be null); returns the inserted events, *last their last seq.
  absl::StatusOr<std::vector<v1::Event>> InsertJobLocked(v1::Job* job, std::vector<v1::Event>* events, int64_t* last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(seq_mu_);
  std::unique_ptr<SqliteDb> writer_ ABSL_GUARDED_BY(write_mu_);
  absl::Mutex read_mu_;
  std::unique_ptr<SqliteDb> reader_ ABSL_GUARDED_BY(read_mu_);
  absl::Mutex seq_mu_;
  // Last committed seq per job; written only after a COMMIT returned.
  absl::flat_hash_map<std::string, int64_t> last_seq_ ABSL_GUARDED_BY(seq_mu_);
  // Compacted jobs (Job.compacted of their committed rows).
  absl::flat_hash_map<std::string, v1::Compaction> compacted_ ABSL_GUARDED_BY(seq_mu_);
};

}  // namespace trainyard
