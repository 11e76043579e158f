#include "worker/rank_supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/line_reader.h"
#include "common/proto_json.h"

namespace trainyard {

namespace v1 = trainyard::v1;

struct RankSupervisor::Rank {
  Rank(std::string job, int att, int r) : job_id(std::move(job)), attempt(att), rank(r) {}
  const std::string job_id;
  const int attempt;
  const int rank;

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
  std::deque<std::string> stderr_tail ABSL_GUARDED_BY(mu);
  absl::Time stderr_window_start ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int stderr_window_lines ABSL_GUARDED_BY(mu) = 0;
  int64_t stderr_dropped ABSL_GUARDED_BY(mu) = 0;
};

namespace {

google::protobuf::Timestamp ToTimestamp(absl::Time t) {
  google::protobuf::Timestamp ts;
  int64_t nanos = absl::ToUnixNanos(t);
  ts.set_seconds(nanos / 1000000000);
  ts.set_nanos(static_cast<int32_t>(nanos % 1000000000));
  return ts;
}

std::string SignalName(int sig) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return absl::StrCat("signal ", sig);
  }
}

v1::Event StateEvent(v1::RankState::State state, const std::string &worker) {
  v1::Event e;
  e.mutable_rank_state()->set_state(state);
  e.mutable_rank_state()->set_worker(worker);
  return e;
}

v1::Event LogEvent(const std::string &level, std::string message) {
  v1::Event e;
  e.mutable_log()->set_level(level);
  e.mutable_log()->set_message(std::move(message));
  return e;
}

// job_id becomes a directory name, so it must not escape work_dir.
bool SafePathComponent(const std::string &s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 200) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

}  // namespace

RankSupervisor::RankSupervisor(Options options, ProcessLauncher *launcher, Clock *clock,
                               EventSink sink)
    : options_(std::move(options)), launcher_(launcher), clock_(clock), sink_(std::move(sink)) {
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
  if (!event.has_time()) *event.mutable_time() = ToTimestamp(clock_->Now());
  sink_(std::move(event));
}

absl::StatusOr<std::string> RankSupervisor::WriteConfig(const v1::Assign &assign) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(options_.work_dir) / assign.job_id() / std::to_string(assign.attempt());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  fs::path final_path = dir / "config.json";
  fs::path tmp_path = dir / "config.json.tmp";
  {
    std::ofstream out(tmp_path, std::ios::trunc);
    out << ToJsonLine(assign.spec()) << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp_path.string()));
  }
  fs::rename(tmp_path, final_path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp_path.string(), ": ", ec.message()));
  }
  return final_path.string();
}

absl::Status RankSupervisor::Assign(const v1::Assign &assign) {
  const std::string &job = assign.job_id();
  absl::Status invalid;
  std::set<int> seen;
  if (!SafePathComponent(job)) {
    invalid = absl::InvalidArgumentError(
        absl::StrCat("job_id '", job, "' must be 1-200 of [A-Za-z0-9._-]"));
  } else if (assign.ranks().empty() || assign.world_size() <= 0) {
    invalid = absl::InvalidArgumentError("assign has no ranks or world_size <= 0");
  } else {
    for (int r : assign.ranks()) {
      if (r < 0 || r >= assign.world_size() || !seen.insert(r).second) {
        invalid = absl::InvalidArgumentError(absl::StrCat(
            "rank ", r, " is duplicated or outside [0, world_size=", assign.world_size(), ")"));
        break;
      }
    }
  }

  std::vector<Rank *> reserved;
  std::vector<std::unique_ptr<Rank>> untracked;  // rejected: only gives their events a seq
  absl::Status rejected = invalid;
  {
    absl::MutexLock lock(&mu_);
    if (rejected.ok()) {
      for (int r : assign.ranks()) {
        if (alive_.count(Key{job, assign.attempt(), r})) {
          spdlog::warn(
              "job={} attempt={} rank={} already running; duplicate "
              "assign ignored",
              job, assign.attempt(), r);
          return absl::AlreadyExistsError(
              absl::StrCat("job ", job, " attempt ", assign.attempt(), " is already running"));
        }
      }
      int free_slots = options_.slots - static_cast<int>(alive_.size());
      if (stopping_) {
        rejected = absl::UnavailableError("worker is shutting down");
      } else if (assign.ranks_size() > free_slots) {
        rejected = absl::ResourceExhaustedError(
            absl::StrCat("assign needs ", assign.ranks_size(), " slots but worker ",
                         options_.worker_name, " has ", free_slots, " free of ", options_.slots));
      }
    }
    for (int r : assign.ranks()) {
      Key key{job, assign.attempt(), r};
      auto rank = std::make_unique<Rank>(job, assign.attempt(), r);
      {
        absl::MutexLock rank_lock(&rank->mu);
        rank->next_seq = last_seq_[key] + 1;
      }
      reserved.push_back(rank.get());
      if (rejected.ok()) {
        alive_[key] = std::move(rank);
      } else {
        untracked.push_back(std::move(rank));
      }
    }
  }

  auto fail = [&](Rank *rank, const std::string &message, bool tracked) {
    v1::Event e = StateEvent(v1::RankState::FAILED, options_.worker_name);
    e.mutable_rank_state()->set_message(message);
    Emit(rank, std::move(e));
    spdlog::error("job={} attempt={} rank={} FAILED: {}", rank->job_id, rank->attempt, rank->rank,
                  message);
    absl::MutexLock lock(&mu_);
    {
      absl::MutexLock rank_lock(&rank->mu);
      last_seq_[Key{rank->job_id, rank->attempt, rank->rank}] = rank->next_seq - 1;
    }
    if (tracked) {
      auto it = alive_.find(Key{rank->job_id, rank->attempt, rank->rank});
      finished_.push_back(std::move(it->second));
      alive_.erase(it);
    }
  };

  if (!rejected.ok()) {
    for (Rank *rank : reserved) fail(rank, std::string(rejected.message()), false);
    return rejected;
  }

  absl::StatusOr<std::string> config = WriteConfig(assign);
  if (!config.ok()) {
    for (Rank *rank : reserved) fail(rank, std::string(config.status().message()), true);
    return config.status();
  }
  spdlog::info("job={} attempt={} assigned ranks [{}] of {}; config {}", job, assign.attempt(),
               absl::StrJoin(assign.ranks(), ","), assign.world_size(), *config);

  absl::Status first_error;
  for (Rank *rank : reserved) {
    Emit(rank, StateEvent(v1::RankState::STARTING, options_.worker_name));
    LaunchRequest request;
    request.binary = options_.rank_binary;
    request.args = {"--config",      *config,
                    "--rank",        std::to_string(rank->rank),
                    "--world-size",  std::to_string(assign.world_size()),
                    "--master-addr", assign.master_addr(),
                    "--master-port", std::to_string(assign.master_port()),
                    "--gloo-host",   options_.gloo_host,
                    "--attempt",     std::to_string(assign.attempt()),
                    "--threads",     std::to_string(options_.threads_per_rank)};
    absl::StatusOr<LaunchedProcess> launched = launcher_->Launch(request);
    if (!launched.ok()) {
      fail(rank, std::string(launched.status().message()), true);
      if (first_error.ok()) first_error = launched.status();
      continue;
    }
    v1::Event running = StateEvent(v1::RankState::RUNNING, options_.worker_name);
    running.mutable_rank_state()->set_pid(launched->pid);
    Emit(rank, std::move(running));
    spdlog::info("job={} attempt={} rank={} RUNNING pid={}", rank->job_id, rank->attempt,
                 rank->rank, launched->pid);

    absl::MutexLock lock(&mu_);
    rank->pid = launched->pid;
    if (rank->killed) KillLocked(rank, rank->kill_reason);  // a Cancel raced the launch
    // Created under mu_ so that the waiter cannot retire the rank before all
    // three thread objects are in place.
    int out_fd = launched->stdout_fd, err_fd = launched->stderr_fd;
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
  return first_error;
}

void RankSupervisor::OnStdout(Rank *rank, std::string line) {
  if (line.empty()) return;
  v1::Event event;
  if (line.front() == '{' && FromJson(line, &event).ok() &&
      event.payload_case() != v1::Event::PAYLOAD_NOT_SET) {
    spdlog::debug("job={} attempt={} rank={} event {}", rank->job_id, rank->attempt, rank->rank,
                  line);
    Emit(rank, std::move(event));
  } else {
    Emit(rank, LogEvent("info", std::move(line)));
  }
}

void RankSupervisor::OnStderr(Rank *rank, std::string line) {
  std::vector<v1::Event> out;
  {
    absl::MutexLock lock(&rank->mu);  // Emit re-locks; so decide here, emit after.
    rank->stderr_tail.push_back(line);
    while (static_cast<int>(rank->stderr_tail.size()) > options_.stderr_tail_lines) {
      rank->stderr_tail.pop_front();
    }
    absl::Time now = clock_->Now();
    if (now - rank->stderr_window_start >= absl::Seconds(1)) {
      if (rank->stderr_dropped > 0) {
        out.push_back(LogEvent("warn", absl::StrCat(rank->stderr_dropped, " lines dropped")));
      }
      rank->stderr_window_start = now;
      rank->stderr_window_lines = 0;
      rank->stderr_dropped = 0;
    }
    if (++rank->stderr_window_lines <= options_.stderr_lines_per_second) {
      spdlog::warn("job={} attempt={} rank={} stderr: {}", rank->job_id, rank->attempt, rank->rank,
                   line);
      out.push_back(LogEvent("warn", std::move(line)));
    } else {
      ++rank->stderr_dropped;
    }
  }
  for (auto &e : out) Emit(rank, std::move(e));
}

void RankSupervisor::FlushDroppedStderr(Rank *rank) {
  int64_t dropped;
  {
    absl::MutexLock lock(&rank->mu);
    dropped = rank->stderr_dropped;
    rank->stderr_dropped = 0;
  }
  if (dropped > 0) Emit(rank, LogEvent("warn", absl::StrCat(dropped, " lines dropped")));
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
    tail = absl::StrJoin(rank->stderr_tail, "\n");
  }
  v1::Event event;
  v1::RankState *state = event.mutable_rank_state();
  state->set_worker(options_.worker_name);
  state->set_pid(pid);
  state->set_exit_code(exit.exit_code);
  state->set_signal(exit.signal);
  std::string how = exit.signal != 0 ? absl::StrCat("killed by signal ", exit.signal, " (",
                                                    SignalName(exit.signal), ")")
                                     : absl::StrCat("exit code ", exit.exit_code);
  if (killed) {
    state->set_state(v1::RankState::KILLED);
    state->set_message(absl::StrCat(kill_reason, " (", how, ")"));
  } else if (exit.signal == 0 && exit.exit_code == 0) {
    state->set_state(v1::RankState::EXITED);
  } else {
    state->set_state(v1::RankState::FAILED);
    state->set_message(exit.signal == 0 && !tail.empty() ? absl::StrCat(how, ": ", tail) : how);
  }
  spdlog::info("job={} attempt={} rank={} {} pid={} {}", rank->job_id, rank->attempt, rank->rank,
               v1::RankState::State_Name(state->state()), pid, state->message());
  Emit(rank, std::move(event));

  absl::MutexLock lock(&mu_);
  Key key{rank->job_id, rank->attempt, rank->rank};
  {
    absl::MutexLock rank_lock(&rank->mu);
    last_seq_[key] = rank->next_seq - 1;
  }
  auto it = alive_.find(key);
  finished_.push_back(std::move(it->second));
  alive_.erase(it);
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

void RankSupervisor::KillAll(const std::string &reason) {
  absl::MutexLock lock(&mu_);
  for (auto &[key, rank] : alive_) KillLocked(rank.get(), reason);
  mu_.Await(absl::Condition(
      +[](std::map<Key, std::unique_ptr<Rank>> *alive) { return alive->empty(); }, &alive_));
}

bool RankSupervisor::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](std::map<Key, std::unique_ptr<Rank>> *alive) { return alive->empty(); }, &alive_),
      timeout);
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
  while (true) {
    std::vector<std::unique_ptr<Rank>> done;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](RankSupervisor *self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                                 return self->stopping_ || !self->finished_.empty();
                               },
                               this),
                           absl::Milliseconds(100));
      absl::Time now = clock_->Now();
      for (auto &[key, rank] : alive_) {
        if (rank->pid > 0 && !rank->sigkill_sent && now >= rank->kill_deadline) {
          spdlog::warn(
              "job={} attempt={} rank={} still alive after grace; "
              "SIGKILL pid={}",
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
