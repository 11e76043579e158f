#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/process_launcher.h"
#include "trainyard/v1/event.pb.h"
#include "worker/job_runner.h"

namespace trainyard {

// Owns the rank processes of every attempt on this worker: writes the attempt's
// config, spawns one process per rank, relays their stdout/stderr as Events,
// reports their RankState (STARTING, RUNNING, then EXITED / FAILED / KILLED)
// and kills them on Cancel or shutdown.
//
// Every event of one (job, attempt, rank) goes to the sink in source_seq order,
// from one of that rank's threads at a time; the sink must be thread-safe and
// must not call back into the supervisor. A rank's exit state is emitted after
// all of its output.
//
// Thread-safe. Each rank uses three threads (stdout, stderr, waiter); one more
// thread enforces kill grace periods and joins finished ranks.
class RankSupervisor : public JobRunner {
 public:
  struct Options {
    std::string worker_name;
    std::string gloo_host = "127.0.0.1";
    std::string rank_binary;
    std::string work_dir;
    int slots = 1;
    int threads_per_rank = 1;
    absl::Duration kill_grace = absl::Seconds(3);
    int stderr_lines_per_second = 50;
    int stderr_tail_lines = 20;
  };
  using EventSink = std::function<void(trainyard::v1::Event)>;

  RankSupervisor(Options options, ProcessLauncher *launcher, Clock *clock, EventSink sink);
  // Kills every rank and waits for them (KillAll).
  ~RankSupervisor() override;
  RankSupervisor(const RankSupervisor &) = delete;
  RankSupervisor &operator=(const RankSupervisor &) = delete;

  absl::Status Assign(const trainyard::v1::Assign &assign) override;
  void Cancel(const trainyard::v1::Cancel &cancel) override;
  int FreeSlots() const override;
  std::vector<trainyard::v1::RunningAttempt> Running() const override;

  // Kills every rank as on Cancel and blocks until all are reaped and reported.
  void KillAll(const std::string &reason);
  // Blocks until no rank is alive or `timeout` passes; true when none is alive.
  bool WaitIdle(absl::Duration timeout);

 private:
  struct Rank;
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank

  absl::StatusOr<std::string> WriteConfig(const trainyard::v1::Assign &assign);
  void StartRank(Rank *rank, const trainyard::v1::Assign &assign, const std::string &config_path);
  void KillLocked(Rank *rank, const std::string &reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(Rank *rank, trainyard::v1::Event event);
  void OnStdout(Rank *rank, std::string line);
  void OnStderr(Rank *rank, std::string line);
  void FlushDroppedStderr(Rank *rank);
  void WaitRank(Rank *rank);
  void Housekeep();

  const Options options_;
  ProcessLauncher *const launcher_;
  Clock *const clock_;
  const EventSink sink_;

  mutable absl::Mutex mu_;
  std::map<Key, std::unique_ptr<Rank>> alive_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Rank>> finished_ ABSL_GUARDED_BY(mu_);
  // Last source_seq used per key, so a re-assigned (job, attempt, rank) never
  // repeats one.
  std::map<Key, int64_t> last_seq_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread housekeeper_;
};

}  // namespace trainyard
