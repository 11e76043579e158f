#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/store/sqlite_db.h"
#include "server/store/job_store.h"
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
class SqliteJobStore final : public JobStore {
 public:
  // Opens (creating if needed) DIR/trainyard.db.
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& data_dir);

  absl::Status CreateJob(v1::Job* job, std::vector<v1::Event>* events) override;
  absl::Status CreateJob(v1::Job* job) { return CreateJob(job, nullptr); }
  absl::Status PutJob(const v1::Job& job) override;
  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override;
  absl::StatusOr<std::vector<v1::Event>> AppendEvents(const std::string& job_id,
                                                      std::vector<v1::Event> events) override;
  absl::StatusOr<std::vector<v1::Event>> ReadEvents(const std::string& job_id,
                                                    int64_t from_seq, int limit) override;
  int64_t LastSeq(const std::string& job_id) override;
  absl::Status PutCordon(const std::string& worker, bool cordoned, const std::string& reason) override;
  absl::StatusOr<std::map<std::string, std::string>> LoadCordons() override;
  absl::Status SaveUsage(const std::map<std::string, StoredUsage>& usage) override;
  absl::StatusOr<std::map<std::string, StoredUsage>> LoadUsage() override;

 private:
  explicit SqliteJobStore(std::unique_ptr<SqliteDb> writer) : writer_(std::move(writer)) {}
  absl::Status InitSchema();
  // The job's last committed seq, from the cache or the writer connection.
  absl::StatusOr<int64_t> LastSeqForWriteLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Inside an open transaction: inserts `events` after seq `last`, skipping resends.
  // Returns the inserted ones; *last becomes the new last seq.
  absl::StatusOr<std::vector<v1::Event>> InsertEventsLocked(const std::string& job_id,
                                                            std::vector<v1::Event> events,
                                                            int64_t* last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void SetCommittedSeq(const std::string& job_id, int64_t seq) ABSL_LOCKS_EXCLUDED(seq_mu_);

  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(seq_mu_);
  std::unique_ptr<SqliteDb> writer_ ABSL_GUARDED_BY(write_mu_);
  absl::Mutex read_mu_;
  std::unique_ptr<SqliteDb> reader_ ABSL_GUARDED_BY(read_mu_);
  absl::Mutex seq_mu_;
  // Last committed seq per job; written only after a COMMIT returned.
  absl::flat_hash_map<std::string, int64_t> last_seq_ ABSL_GUARDED_BY(seq_mu_);
};

}  // namespace trainyard
