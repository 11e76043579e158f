#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/sqlite_db.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// Durable state of the controller: jobs and their event logs, in SQLite (WAL).
// Every method commits before it returns, so an event acknowledged to a worker is on
// disk. Thread-safe.
class JobStore {
 public:
  // Opens (creating if needed) DIR/trainyard.db.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& data_dir);

  // Gives `job` the next id ("job-<n>", unique for the life of the database) and
  // inserts it, in one transaction.
  absl::Status CreateJob(v1::Job* job);
  // Replaces the row of an existing job.
  absl::Status PutJob(const v1::Job& job);
  absl::StatusOr<std::vector<v1::Job>> LoadJobs();

  // Commits `events` for one job in one transaction, giving each the next per-job
  // seq. An event whose (attempt, rank, source_seq) was already committed (a worker's
  // resend) is dropped. Returns the events committed, with seq set.
  absl::StatusOr<std::vector<v1::Event>> AppendEvents(const std::string& job_id,
                                                      std::vector<v1::Event> events);
  // Events with seq >= from_seq, in order, at most `limit`.
  absl::StatusOr<std::vector<v1::Event>> ReadEvents(const std::string& job_id,
                                                    int64_t from_seq, int limit);
  int64_t LastSeq(const std::string& job_id);

 private:
  explicit JobStore(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
  absl::Status InitSchema();
  absl::StatusOr<int64_t> LoadLastSeqLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> last_seq_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
