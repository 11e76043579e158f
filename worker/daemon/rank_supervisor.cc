#include "worker/daemon/rank_supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/line_reader.h"
#include "common/base/text.h"
#include "common/events/rank_exit.h"
#include "common/events/rank_line.h"
#include "worker/daemon/artifact_ref_check.h"
#include "worker/daemon/job_inputs.h"
#include "worker/daemon/rank_events.h"
#include "worker/daemon/stderr_limiter.h"

namespace trainyard {

struct RankSupervisor::Rank {
  Rank(std::string job, int att, int r, const Options &options)
      : job_id(std::move(job)),
        attempt(att),
        rank(r),
        stderr_limiter(options.stderr_lines_per_second, options.stderr_tail_lines) {}
  const std::string job_id;
  const int attempt;
  const int rank;
  // attempt_dir/artifacts; set before the rank's threads start, then read-only.
  std::string artifacts_dir;
  // attempt_dir, the rank's --run-dir; set with artifacts_dir, then read-only.
  std::string run_dir;

  // Guarded by the supervisor's mu_.
  pid_t pid = -1;
  bool killed = false;
  std::string kill_reason;
  absl::Time kill_deadline = absl::InfiniteFuture();
  bool sigkill_sent = false;
  std::thread stdout_reader;
  std::thread stderr_reader;
  std::thread waiter;

  // Orders this rank's events; guards what follows.
  absl::Mutex mu;
  int64_t next_seq ABSL_GUARDED_BY(mu) = 1;
  StderrLimiter stderr_limiter ABSL_GUARDED_BY(mu);
};

RankSupervisor::RankSupervisor(Options options, ProcessLauncher *launcher, Clock *clock,
                               EventSink sink)
    : options_(std::move(options)),
      builder_(LaunchSpecBuilder::Options{options_.rank_binary, options_.work_dir,
                                          options_.gloo_host, options_.threads_per_rank,
                                          ProcessEnvironment(), options_.gpus, options_.nccl_env}),
      launcher_(launcher),
      clock_(clock),
      sink_(std::move(sink)) {
  housekeeper_ = std::thread([this] { Housekeep(); });
}

RankSupervisor::~RankSupervisor() {
  KillAll("worker shutting down");
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  housekeeper_.join();
}

void RankSupervisor::Emit(Rank *rank, v1::Event event) {
  absl::MutexLock lock(&rank->mu);
  event.set_job_id(rank->job_id);
  event.set_attempt(rank->attempt);
  event.set_rank(rank->rank);
  event.set_seq(0);  // assigned by the controller
  event.set_source_seq(rank->next_seq++);
  if (!event.has_time()) *event.mutable_time() = RankEvents::Timestamp(clock_->Now());
  sink_(std::move(event));
}

void RankSupervisor::Fail(Rank *rank, const std::string &message, bool tracked, int exit_code) {
  v1::Event e = RankEvents::State(v1::RankState::FAILED, options_.worker_name);
  e.mutable_rank_state()->set_message(message);
  e.mutable_rank_state()->set_exit_code(exit_code);
  Emit(rank, std::move(e));
  spdlog::error("job={} attempt={} rank={} FAILED: {}", rank->job_id, rank->attempt, rank->rank,
                message);
  absl::MutexLock lock(&mu_);
  const Key key{rank->job_id, rank->attempt, rank->rank};
  {
    absl::MutexLock rank_lock(&rank->mu);
    last_seq_[key] = rank->next_seq - 1;
  }
  if (tracked) {
    auto it = alive_.find(key);
    finished_.push_back(std::move(it->second));
    alive_.erase(it);
  }
}

absl::Status RankSupervisor::Assign(const v1::Assign &assign) {
  const std::string &job = assign.job_id();
  absl::StatusOr<AttemptLaunch> launch = builder_.Build(assign);
  // The files the ranks will open, checked here (outside mu_: it reads the file system)
  // so that a missing one fails the attempt at once, in one message.
  const absl::Status inputs =
      launch.ok() ? CheckJobInputs(assign.spec(), !assign.resume_path().empty()) : absl::OkStatus();
  bool inputs_wrong = false;
  std::vector<Rank *> reserved;
  std::vector<std::unique_ptr<Rank>> untracked;  // rejected: only gives their events a seq
  absl::Status rejected = launch.status();
  {
    absl::MutexLock lock(&mu_);
    if (rejected.ok()) {
      for (int r : assign.ranks()) {
        if (alive_.count(Key{job, assign.attempt(), r})) {
          spdlog::warn("job={} attempt={} rank={} already running; duplicate assign ignored", job,
                       assign.attempt(), r);
          return absl::AlreadyExistsError(
              absl::StrCat("job ", job, " attempt ", assign.attempt(), " is already running"));
        }
      }
      int free_slots = options_.slots - static_cast<int>(alive_.size());
      if (stopping_) {
        rejected = absl::UnavailableError("worker is shutting down");
      } else if (assign.ranks_size() > free_slots) {
        rejected = absl::ResourceExhaustedError(
            absl::StrCat("assign needs ", Counted(assign.ranks_size(), "slot"), " but worker ",
                         options_.worker_name, " has ", free_slots, " free of ", options_.slots));
      } else {
        inputs_wrong = !inputs.ok();
      }
    }
    for (int r : assign.ranks()) {
      Key key{job, assign.attempt(), r};
      auto rank = std::make_unique<Rank>(job, assign.attempt(), r, options_);
      {
        absl::MutexLock rank_lock(&rank->mu);
        rank->next_seq = last_seq_[key] + 1;
      }
      if (launch.ok()) {
        rank->artifacts_dir = launch->artifacts_dir;
        rank->run_dir = launch->attempt_dir;
      }
      reserved.push_back(rank.get());
      if (rejected.ok() && !inputs_wrong) {
        alive_[key] = std::move(rank);
      } else {
        untracked.push_back(std::move(rank));
      }
    }
  }

  if (!rejected.ok()) {
    // Slots still held by ranks the controller stopped counting: its bookkeeping, not the
    // job or this worker, so the controller places the attempt again (rank_exit.h).
    const int exit_code = rejected.code() == absl::StatusCode::kResourceExhausted ? kRankExitRefused : 0;
    for (Rank *rank : reserved) Fail(rank, std::string(rejected.message()), false, exit_code);
    return rejected;
  }
  if (inputs_wrong) {
    // Once: the message on the first rank, the others point at it (the controller
    // quotes the first failure it gets in the job's reason).
    spdlog::error("job={} attempt={} not started: {}", job, assign.attempt(), std::string(inputs.message()));
    for (size_t i = 0; i < reserved.size(); ++i) {
      Fail(reserved[i],
           i == 0 ? absl::StrCat(inputs.message(), " (checked before starting any rank)")
                  : absl::StrCat("not started: the job's inputs are wrong (see rank ", reserved[0]->rank, ")"),
           false, kRankExitInputError);
    }
    return inputs;
  }
  if (absl::Status written = LaunchSpecBuilder::WriteConfig(*launch); !written.ok()) {
    for (Rank *rank : reserved) Fail(rank, std::string(written.message()), true);
    return written;
  }
  spdlog::info("job={} attempt={} assigned ranks [{}] of {}; config {}", job, assign.attempt(),
               absl::StrJoin(assign.ranks(), ","), assign.world_size(), launch->config_path);

  absl::Status first_error;
  for (size_t i = 0; i < reserved.size(); ++i) {
    Rank *rank = reserved[i];
    Emit(rank, RankEvents::State(v1::RankState::STARTING, options_.worker_name));
    absl::StatusOr<LaunchedProcess> launched = launcher_->Launch(launch->ranks[i].request);
    if (!launched.ok()) {
      Fail(rank, std::string(launched.status().message()), true);
      if (first_error.ok()) first_error = launched.status();
      continue;
    }
    v1::Event running = RankEvents::State(v1::RankState::RUNNING, options_.worker_name);
    running.mutable_rank_state()->set_pid(launched->pid);
    Emit(rank, std::move(running));
    spdlog::info("job={} attempt={} rank={} RUNNING pid={}", rank->job_id, rank->attempt,
                 rank->rank, launched->pid);

    absl::MutexLock lock(&mu_);
    rank->pid = launched->pid;
    if (rank->killed) KillLocked(rank, rank->kill_reason);  // a Cancel raced the launch
    StartThreads(rank, *launched);
  }
  return first_error;
}

void RankSupervisor::StartThreads(Rank *rank, const LaunchedProcess &launched) {
  // Created under mu_ so that the waiter cannot retire the rank before all three
  // thread objects are in place.
  const int out_fd = launched.stdout_fd, err_fd = launched.stderr_fd;
  rank->stdout_reader = std::thread([this, rank, out_fd] {
    ReadLines(out_fd, [&](std::string l) { OnStdout(rank, std::move(l)); });
  });
  rank->stderr_reader = std::thread([this, rank, err_fd] {
    ReadLines(
        err_fd, [&](std::string l) { OnStderr(rank, std::move(l)); }, 64 * 1024);
    FlushDroppedStderr(rank);
  });
  rank->waiter = std::thread([this, rank] { WaitRank(rank); });
}

void RankSupervisor::OnStdout(Rank *rank, std::string line) {
  if (line.empty()) return;
  if (!LooksLikeEvent(line)) {
    Emit(rank, RankEvents::Log("info", std::move(line)));
    return;
  }
  absl::StatusOr<v1::Event> event = ParseRankLine(line);
  if (!event.ok()) {
    // Loud, not lost: the line is kept (quoted) with the reason it is not an event.
    std::string message =
        absl::StrCat("invalid event line from the rank (", event.status().message(), "): ", Quote(line));
    spdlog::warn("job={} attempt={} rank={} {}", rank->job_id, rank->attempt, rank->rank, message);
    Emit(rank, RankEvents::Log("error", std::move(message)));
    return;
  }
  spdlog::debug("job={} attempt={} rank={} event {}", rank->job_id, rank->attempt, rank->rank, line);
  if (event->has_artifact()) {
    OnArtifact(rank, event->artifact());
    return;
  }
  Emit(rank, std::move(*event));
}

void RankSupervisor::OnArtifact(Rank *rank, const v1::ArtifactRef &ref) {
  absl::StatusOr<std::string> path =
      options_.artifact_sink ? CheckArtifactRef(ref, rank->artifacts_dir)
                             : absl::StatusOr<std::string>(absl::FailedPreconditionError(
                                   "this worker does not upload artifacts"));
  if (!path.ok()) {
    std::string message = absl::StrCat("artifact refused: ", path.status().message());
    spdlog::warn("job={} attempt={} rank={} {}", rank->job_id, rank->attempt, rank->rank,
                 message);
    Emit(rank, RankEvents::Log("warn", std::move(message)));
    return;
  }
  v1::ArtifactHeader header;
  header.set_job_id(rank->job_id);
  header.set_attempt(rank->attempt);
  header.set_rank(rank->rank);
  header.set_name(ref.name());
  header.set_kind(ref.kind());
  header.set_worker(options_.worker_name);
  spdlog::info("job={} attempt={} rank={} artifact {} ({}) queued for upload: {}", rank->job_id,
               rank->attempt, rank->rank, ref.name(), ref.kind(), *path);
  options_.artifact_sink(std::move(*path), std::move(header));
}

void RankSupervisor::OnStderr(Rank *rank, std::string line) {
  std::vector<std::string> relay;
  {
    absl::MutexLock lock(&rank->mu);  // Emit re-locks; so decide here, emit after.
    relay = rank->stderr_limiter.Offer(std::move(line), clock_->Now());
  }
  for (std::string &message : relay) {
    spdlog::warn("job={} attempt={} rank={} stderr: {}", rank->job_id, rank->attempt, rank->rank,
                 message);
    Emit(rank, RankEvents::Log("warn", std::move(message)));
  }
}

void RankSupervisor::FlushDroppedStderr(Rank *rank) {
  std::optional<std::string> notice;
  {
    absl::MutexLock lock(&rank->mu);
    notice = rank->stderr_limiter.Flush();
  }
  if (notice) Emit(rank, RankEvents::Log("warn", std::move(*notice)));
}

void RankSupervisor::WaitRank(Rank *rank) {
  pid_t pid;
  {
    absl::MutexLock lock(&mu_);
    pid = rank->pid;
  }
  ProcessExit exit = launcher_->Wait(pid);
  // All output is relayed before the exit state.
  rank->stdout_reader.join();
  rank->stderr_reader.join();

  bool killed;
  std::string kill_reason;
  {
    absl::MutexLock lock(&mu_);
    killed = rank->killed;
    kill_reason = rank->kill_reason;
  }
  std::string tail;
  {
    absl::MutexLock lock(&rank->mu);
    tail = rank->stderr_limiter.Tail();
  }
  v1::Event event = RankEvents::Exit(options_.worker_name, pid, exit, killed, kill_reason, tail);
  spdlog::info("job={} attempt={} rank={} {} pid={} {}", rank->job_id, rank->attempt, rank->rank,
               v1::RankState::State_Name(event.rank_state().state()), pid,
               event.rank_state().message());
  // The slot is free before the controller hears the rank ended: it may place the next
  // gang here as soon as it does. The rank object lives on in finished_ until the
  // housekeeper joins this thread, after Emit; the final event's seq is reserved first.
  {
    absl::MutexLock lock(&mu_);
    Key key{rank->job_id, rank->attempt, rank->rank};
    {
      absl::MutexLock rank_lock(&rank->mu);
      last_seq_[key] = rank->next_seq;
    }
    auto it = alive_.find(key);
    finished_.push_back(std::move(it->second));
    alive_.erase(it);
    ++unreported_;
  }
  Emit(rank, std::move(event));
  absl::MutexLock lock(&mu_);
  --unreported_;
}

void RankSupervisor::KillLocked(Rank *rank, const std::string &reason) {
  if (!rank->killed) {
    rank->killed = true;
    rank->kill_reason = reason;
  }
  if (rank->pid > 0 && rank->kill_deadline == absl::InfiniteFuture()) {
    spdlog::info("job={} attempt={} rank={} SIGTERM pid={} ({})", rank->job_id, rank->attempt,
                 rank->rank, rank->pid, reason);
    launcher_->SignalGroup(rank->pid, SIGTERM);
    rank->kill_deadline = clock_->Now() + options_.kill_grace;
    ++kill_deadlines_set_;
  }
}

void RankSupervisor::Cancel(const v1::Cancel &cancel) {
  std::string reason =
      cancel.reason().empty() ? "cancelled" : absl::StrCat("cancelled: ", cancel.reason());
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (auto &[key, rank] : alive_) {
    if (std::get<0>(key) != cancel.job_id()) continue;
    if (cancel.attempt() != 0 && std::get<1>(key) != cancel.attempt()) continue;
    KillLocked(rank.get(), reason);
    ++n;
  }
  if (n == 0) {
    spdlog::info("job={} attempt={} cancel ignored: no ranks of it run here", cancel.job_id(),
                 cancel.attempt());
  }
}

void RankSupervisor::RequestCheckpoint(const v1::CheckpointRequest &request) {
  std::set<std::string> run_dirs;  // an attempt's ranks here share one
  {
    absl::MutexLock lock(&mu_);
    for (auto &[key, rank] : alive_) {
      if (std::get<0>(key) != request.job_id() || std::get<1>(key) != request.attempt()) continue;
      // Live: started (its run dir and config exist) and not being killed.
      if (rank->pid > 0 && !rank->killed) run_dirs.insert(rank->run_dir);
    }
  }
  if (run_dirs.empty()) {
    spdlog::info("job={} attempt={} checkpoint request ignored: no live rank of it here",
                 request.job_id(), request.attempt());
    return;
  }
  // Written outside mu_ (file I/O); a rank that exits meanwhile leaves a file that only
  // a later run in the same folder could see, and that run removes it as stale.
  for (const std::string &dir : run_dirs) {
    const std::string path = absl::StrCat(dir, "/", kCheckpointRequestFile);
    absl::Status written = WriteFileAtomically(
        path, absl::StrCat("job=", request.job_id(), " attempt=", request.attempt(), "\n"));
    if (written.ok()) {
      spdlog::info("job={} attempt={} checkpoint request written: {}", request.job_id(),
                   request.attempt(), path);
    } else {
      spdlog::warn("job={} attempt={} checkpoint request not written: {}", request.job_id(),
                   request.attempt(), written.ToString());
    }
  }
}

void RankSupervisor::KillAll(const std::string &reason) {
  absl::MutexLock lock(&mu_);
  for (auto &[key, rank] : alive_) KillLocked(rank.get(), reason);
  mu_.Await(absl::Condition(
      +[](RankSupervisor *self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->alive_.empty() && self->unreported_ == 0;
      },
      this));
}

bool RankSupervisor::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return clock_->AwaitWithDeadline(
      &mu_,
      absl::Condition(
          +[](std::map<Key, std::unique_ptr<Rank>> *alive) { return alive->empty(); }, &alive_),
      clock_->Now() + timeout);
}

int RankSupervisor::FreeSlots() const {
  absl::MutexLock lock(&mu_);
  return options_.slots - static_cast<int>(alive_.size());
}

std::vector<v1::RunningAttempt> RankSupervisor::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::RunningAttempt> out;
  for (const auto &[key, rank] : alive_) {
    if (out.empty() || out.back().job_id() != std::get<0>(key) ||
        out.back().attempt() != std::get<1>(key)) {
      out.emplace_back();
      out.back().set_job_id(std::get<0>(key));
      out.back().set_attempt(std::get<1>(key));
    }
    out.back().add_ranks(std::get<2>(key));
  }
  return out;
}

void RankSupervisor::Housekeep() {
  struct Wake {
    RankSupervisor *self;
    int64_t deadlines_seen;
  };
  while (true) {
    std::vector<std::unique_ptr<Rank>> done;
    {
      absl::MutexLock lock(&mu_);
      // Sleep until a rank finishes, shutdown, a new kill deadline, or the earliest
      // pending one passes on the clock.
      absl::Time next_kill = absl::InfiniteFuture();
      for (auto &[key, rank] : alive_) {
        if (rank->pid > 0 && !rank->sigkill_sent) {
          next_kill = std::min(next_kill, rank->kill_deadline);
        }
      }
      Wake wake{this, kill_deadlines_set_};
      clock_->AwaitWithDeadline(
          &mu_,
          absl::Condition(
              +[](Wake *w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->self->mu_) {
                return w->self->stopping_ || !w->self->finished_.empty() ||
                       w->self->kill_deadlines_set_ != w->deadlines_seen;
              },
              &wake),
          next_kill);
      const absl::Time now = clock_->Now();
      for (auto &[key, rank] : alive_) {
        if (rank->pid > 0 && !rank->sigkill_sent && now >= rank->kill_deadline) {
          spdlog::warn("job={} attempt={} rank={} still alive after grace; SIGKILL pid={}",
                       rank->job_id, rank->attempt, rank->rank, rank->pid);
          launcher_->SignalGroup(rank->pid, SIGKILL);
          rank->sigkill_sent = true;
        }
      }
      done.swap(finished_);
      if (done.empty() && stopping_ && alive_.empty()) return;
    }
    for (auto &rank : done) {
      if (rank->waiter.joinable()) rank->waiter.join();
    }
  }
}

}  // namespace trainyard
