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
#include "common/base/clock.h"
#include "common/base/process_launcher.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/worker_service.pb.h"
#include "worker/daemon/job_runner.h"
#include "worker/daemon/launch_spec.h"

namespace trainyard {

// Owns the rank processes of every attempt on this worker: checks each Assign and
// reserves its slots, has the LaunchSpecBuilder write the attempt's config and build
// each rank's arguments, spawns one process per rank through the injected
// ProcessLauncher, relays their stdout/stderr as Events (stderr rate-limited by a
// StderrLimiter), reports their RankState (STARTING, RUNNING, then EXITED / FAILED /
// KILLED, built by RankEvents) and kills them on Cancel or shutdown: SIGTERM to the rank's process group,
// then SIGKILL once `kill_grace` has passed on the injected Clock. Every time it reads
// or waits for (event times, the stderr window, kill grace, WaitIdle) comes from that
// Clock.
//
// An ArtifactRef a rank prints (uri "file://ABS_PATH") is not relayed: when
// CheckArtifactRef accepts it (a valid name and kind, a regular file inside that
// attempt's attempt_dir/artifacts after resolving symlinks) the file goes to the
// artifact sink with a header {job, attempt, rank, name, kind, worker} (the controller
// announces the stored artifact itself); otherwise the rank gets a warn LogLine saying
// why. Without an artifact sink every ArtifactRef is refused that way.
//
// RequestCheckpoint ("checkpoint now") creates the file `checkpoint.request`
// (kCheckpointRequestFile) in the run dir (--run-dir, the attempt's folder, which all
// of an attempt's ranks here share) of the attempt's live ranks, atomically; the ranks
// remove it at their next step and agree among themselves on the step to save after.
//
// Before it starts an attempt's ranks, Assign checks the files they will read
// (CheckJobInputs: the datasets, the initial weights) once for all of them: when one is
// missing or unreadable no rank starts, the first of them reports FAILED with exit code
// kRankExitInputError (permanent: the controller does not restart the job) and the
// message, the others FAILED with the same code and a pointer to it.
//
// Every event of one (job, attempt, rank) goes to the sink in source_seq order,
// from one of that rank's threads at a time; the sink must be thread-safe and
// must not call back into the supervisor. A rank's exit state is emitted after
// all of its output.
//
// Thread contract: public methods are thread-safe. Each rank uses three threads
// (stdout, stderr, waiter); one more thread (the housekeeper) enforces kill grace
// periods and joins finished ranks. mu_ guards the rank tables and each rank's
// process fields; a rank's own mutex orders its events and guards its stderr state.
// Lock order: mu_ before a rank's mutex; the sink is called with only the rank's
// mutex held.
class RankSupervisor : public JobRunner {
 public:
  using EventSink = std::function<void(trainyard::v1::Event)>;
  // The file in a rank's run dir that asks it for a checkpoint (trainyard-rank reads it).
  static constexpr const char *kCheckpointRequestFile = "checkpoint.request";
  // Takes a checked rank file to upload (the ArtifactUploader's Enqueue); called on a
  // rank's stdout thread; must be thread-safe and must not call back into the supervisor.
  using ArtifactSink =
      std::function<void(std::string path, trainyard::v1::ArtifactHeader header)>;

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
    ArtifactSink artifact_sink;  // empty: ArtifactRef events are refused
    // The GPUs this worker offers and its --nccl-env settings, for each rank's
    // environment (LaunchSpecBuilder: CUDA_VISIBLE_DEVICES, LOCAL_RANK, ...).
    std::vector<trainyard::v1::GpuDevice> gpus = {};
    std::vector<std::pair<std::string, std::string>> nccl_env = {};
  };

  RankSupervisor(Options options, ProcessLauncher *launcher, Clock *clock, EventSink sink);
  // Kills every rank and waits for them (KillAll).
  ~RankSupervisor() override;
  RankSupervisor(const RankSupervisor &) = delete;
  RankSupervisor &operator=(const RankSupervisor &) = delete;

  absl::Status Assign(const trainyard::v1::Assign &assign) override;
  void Cancel(const trainyard::v1::Cancel &cancel) override;
  void RequestCheckpoint(const trainyard::v1::CheckpointRequest &request) override;
  int FreeSlots() const override;
  std::vector<trainyard::v1::RunningAttempt> Running() const override;

  // Kills every rank as on Cancel and blocks until all are reaped and reported.
  void KillAll(const std::string &reason);
  // Blocks until no rank is alive or `timeout` passes on the clock; true when none
  // is alive.
  bool WaitIdle(absl::Duration timeout);

 private:
  struct Rank;
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank

  // Emits FAILED (with `exit_code`) for a rank that never ran and retires it (tracked:
  // it is in alive_).
  void Fail(Rank *rank, const std::string &message, bool tracked, int exit_code = 0);
  void StartThreads(Rank *rank, const LaunchedProcess &launched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KillLocked(Rank *rank, const std::string &reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(Rank *rank, trainyard::v1::Event event);
  void OnStdout(Rank *rank, std::string line);
  void OnArtifact(Rank *rank, const trainyard::v1::ArtifactRef &ref);
  void OnStderr(Rank *rank, std::string line);
  void FlushDroppedStderr(Rank *rank);
  void WaitRank(Rank *rank);
  void Housekeep();

  const Options options_;
  const LaunchSpecBuilder builder_;
  ProcessLauncher *const launcher_;
  Clock *const clock_;
  const EventSink sink_;

  mutable absl::Mutex mu_;
  std::map<Key, std::unique_ptr<Rank>> alive_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Rank>> finished_ ABSL_GUARDED_BY(mu_);
  // Ranks whose slot is free but whose final state is not yet emitted: KillAll waits
  // for them too, so a worker that exits right after it still reports every end.
  int unreported_ ABSL_GUARDED_BY(mu_) = 0;
  // Last source_seq used per key, so a re-assigned (job, attempt, rank) never
  // repeats one.
  std::map<Key, int64_t> last_seq_ ABSL_GUARDED_BY(mu_);
  // Bumped whenever a kill deadline is set, so the housekeeper rereads them.
  int64_t kill_deadlines_set_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread housekeeper_;
};

}  // namespace trainyard
