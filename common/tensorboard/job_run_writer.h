// Writes one job's TensorBoard event files from its stored events: a run folder per
// attempt, ROOT/JOB/attempt-A/events.out.tfevents.<time>.<host>.trainyard, where <time>
// is the Unix second of the attempt's first event (so a rewrite of the same attempt
// lands on the same name). Each file starts with the file_version record and the spec
// text, then the attempt's records (event_summaries.h) in seq order.
//
// With keep_progress (the controller's --tensorboard-dir) the writer keeps
// ROOT/JOB/.trainyard-tensorboard.json: the last seq written and, per attempt, its file,
// its length and its counters. Flush appends, fsyncs the files and only then replaces
// that file (atomically), so after a crash the files may hold records past it but never
// fewer. Open truncates each file back to the length recorded and the caller resumes
// from last_seq() + 1: nothing is written twice and nothing is lost. A file shorter than
// recorded (cut by hand) is an error naming it. Without keep_progress (`trainyard
// tensorboard`), ROOT/JOB must not exist yet: an earlier export is never overwritten.
//
// Not thread-safe: one thread owns a writer. After a failed Flush the writer must be
// dropped and reopened (its memory is ahead of the files).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensorboard/event_summaries.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::tensorboard {

struct JobRunWriterOptions {
  std::string root;  // the folder holding one folder per job
  std::string host;  // in the file names, as TensorBoard's writers put it
  bool keep_progress = false;
};

// The progress file's name inside ROOT/JOB.
inline constexpr char kProgressFile[] = ".trainyard-tensorboard.json";

// Creates `dir` if missing and checks it is a folder this process can write; the error
// names `flag` and `dir` ("-o '/x': not a directory", "... permission denied").
absl::Status PrepareOutputDir(const std::string& dir, const std::string& flag);

class JobRunWriter {
 public:
  static absl::StatusOr<std::unique_ptr<JobRunWriter>> Open(const JobRunWriterOptions& options,
                                                           const std::string& job_id, const v1::JobSpec& spec);

  // The highest seq in the files (after Flush); the next Add should be past it.
  int64_t last_seq() const { return last_seq_; }
  // Buffers the records of `event`. An event at or below the seq already taken is
  // skipped (false), as are events of no attempt (before the first schedule).
  bool Add(const v1::Event& event);
  // Writes every buffered record (see the class comment).
  absl::Status Flush();

  int64_t records_written() const { return records_written_; }  // by this writer
  int64_t pending_records() const;
  // The run folders so far, by attempt.
  std::map<int, std::string> run_dirs() const;

 private:
  struct Attempt {
    std::string file;   // name inside attempt-A/
    int64_t bytes = 0;  // flushed length
    AttemptCounters counters;
    std::string pending;  // framed records not yet written
    int64_t pending_records = 0;
  };

  JobRunWriter(JobRunWriterOptions options, std::string job_id, v1::JobSpec spec)
      : options_(std::move(options)), job_id_(std::move(job_id)), spec_(std::move(spec)) {}
  absl::Status LoadProgress();
  absl::Status SaveProgress() const;
  std::string JobDir() const;
  std::string AttemptDir(int attempt) const;
  void Append(Attempt* a, const Event& record);

  JobRunWriterOptions options_;
  std::string job_id_;
  v1::JobSpec spec_;
  std::map<int, Attempt> attempts_;
  int64_t last_seq_ = 0;     // in the files
  int64_t taken_seq_ = 0;    // buffered
  int64_t records_written_ = 0;
};

}  // namespace trainyard::tensorboard
