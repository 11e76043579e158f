#include "worker/engine/launch/local_launcher.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/base/file_io.h"
#include "common/base/free_port.h"
#include "common/base/line_reader.h"
#include "common/base/posix_process_launcher.h"
#include "common/base/text.h"
#include "common/events/rank_line.h"
#include "worker/launch/rank_launch.h"

namespace trainyard::engine {
namespace {

volatile sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) { g_stop_signal = sig; }

std::string ExitText(int code) {
  if (code > 128) return "was killed by signal " + std::to_string(code - 128);
  return "exited with code " + std::to_string(code);
}

// What the per-rank threads hand the supervising thread, in order per rank: each stdout
// line, then (after both pipes closed) the exit.
struct Message {
  int rank = 0;
  bool exited = false;
  std::string line;
  ProcessExit exit;
};

class Mailbox {
 public:
  void Post(Message m) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(m));
    }
    cv_.notify_one();
  }
  // Everything posted so far, after waiting up to `timeout` for the first.
  std::deque<Message> Take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return !queue_.empty(); });
    std::deque<Message> out;
    out.swap(queue_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> queue_;
};

// The config travels as a file (argv has size limits and shows in `ps`), removed when
// the run ends.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& text) {
    const char* tmpdir = std::getenv("TMPDIR");
    path_ = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/trainyard-train-" + std::to_string(::getpid()) +
            "-" + std::to_string(++counter_) + ".json";
    if (absl::Status s = WriteFileAtomically(path_, text); !s.ok()) {
      throw std::runtime_error("cannot write the ranks' config: " + std::string(s.message()));
    }
  }
  ~ConfigFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

}  // namespace

void LocalLauncher::InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = &OnStopSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

std::string LocalLauncher::RankBinaryNextToSelf() { return ExecutableSibling("trainyard-rank"); }

LaunchResult LocalLauncher::Run(const LaunchOptions& options, const EventHandler& on_event) {
  if (options.nproc < 1) throw std::runtime_error("nproc must be at least 1");
  if (::access(options.rank_binary.c_str(), X_OK) != 0) {
    throw std::runtime_error("rank binary " + options.rank_binary + " is not executable: " + std::strerror(errno));
  }
  const ConfigFile config(options.config_json);
  absl::StatusOr<int> port = FreeLoopbackPort();
  if (!port.ok()) throw std::runtime_error(std::string(port.status().message()));

  LaunchResult result;
  const EnvLookup parent = ProcessEnvironment();
  result.rank_env = RankThreadEnv(options.threads, PassiveThreadWait(options.device), parent);

  PosixProcessLauncher launcher;
  Mailbox mailbox;
  std::vector<pid_t> pids(static_cast<std::size_t>(options.nproc), -1);
  std::vector<std::thread> threads;
  std::vector<bool> exited(pids.size(), false);
  result.ranks.resize(pids.size());
  auto signal_all = [&](int sig) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] > 0 && !exited[i]) launcher.SignalGroup(pids[i], sig);
    }
  };
  auto join_all = [&] {
    for (std::thread& t : threads) t.join();
  };
  for (int i = 0; i < options.nproc; ++i) {
    RankProcess p;
    p.rank_binary = options.rank_binary;
    p.config_path = config.path();
    p.rank = i;
    p.local_rank = i;
    p.world_size = options.nproc;
    p.master_port = *port;
    p.attempt = options.attempt;
    p.threads = options.threads;
    p.run_dir = options.run_dir;
    p.resume_path = options.resume_path;
    p.extra_args = options.rank_args;
    p.env = result.rank_env;
    absl::StatusOr<LaunchedProcess> child = launcher.Launch(RankLaunchRequest(p));
    if (!child.ok()) {
      signal_all(SIGKILL);
      join_all();
      throw std::runtime_error("cannot start rank " + std::to_string(i) + ": " + std::string(child.status().message()));
    }
    pids[i] = child->pid;
    threads.emplace_back([&mailbox, &launcher, i, c = *child] {
      std::thread out([&mailbox, i, fd = c.stdout_fd] {
        ReadLines(fd, [&](std::string line) { mailbox.Post({i, false, std::move(line), {}}); });
      });
      // Rank stderr is this process's stderr, line by line.
      std::thread err([fd = c.stderr_fd] {
        ReadLines(fd, [](std::string line) {
          line.push_back('\n');
          [[maybe_unused]] ssize_t w = ::write(2, line.data(), line.size());  // one write: lines stay whole
        });
      });
      ProcessExit exit = launcher.Wait(c.pid);
      out.join();
      err.join();
      mailbox.Post({i, true, "", exit});
    });
  }

  using Clock = std::chrono::steady_clock;
  bool stopping = false;
  Clock::time_point kill_at;
  int alive = options.nproc;
  while (alive > 0) {
    for (Message& m : mailbox.Take(std::chrono::milliseconds(100))) {
      RankOutcome& outcome = result.ranks[m.rank];
      if (m.exited) {
        exited[m.rank] = true;
        --alive;
        outcome.exit_code = m.exit.signal != 0 ? 128 + m.exit.signal : m.exit.exit_code;
        outcome.peak_rss_mb = m.exit.peak_rss_mb;
        if (outcome.exit_code != 0 && result.failed_rank < 0 && !result.interrupted && !stopping) {
          result.failed_rank = m.rank;
        }
        continue;
      }
      if (m.line.empty()) continue;
      if (!LooksLikeEvent(m.line)) {
        std::cerr << "rank " << m.rank << ": " << m.line << '\n';
        continue;
      }
      absl::StatusOr<v1::Event> event = ParseRankLine(m.line);
      if (!event.ok()) {
        std::cerr << "rank " << m.rank << ": invalid event line (" << event.status().message()
                  << "): " << Quote(m.line) << '\n';
        continue;
      }
      event->set_rank(m.rank);
      event->set_attempt(options.attempt);
      if (event->has_log() && event->log().level() == "error") outcome.error = event->log().message();
      on_event(*event);
    }
    if (g_stop_signal != 0 && !result.interrupted) {
      result.interrupted = true;
      result.exit_code = 128 + g_stop_signal;
      result.error = std::string("interrupted by ") + (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    }
    if ((result.failed_rank >= 0 || result.interrupted) && !stopping && alive > 0) {
      stopping = true;
      signal_all(SIGTERM);
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options.kill_grace_s));
    }
    if (stopping && alive > 0 && Clock::now() >= kill_at) signal_all(SIGKILL);
  }
  join_all();
  if (result.failed_rank >= 0) {
    const RankOutcome& f = result.ranks[result.failed_rank];
    result.exit_code = f.exit_code != 0 ? f.exit_code : 1;
    result.error = "rank " + std::to_string(result.failed_rank) + " " + ExitText(f.exit_code) +
                   (f.error.empty() ? "" : ": " + f.error);
  }
  g_stop_signal = 0;
  return result;
}

}  // namespace trainyard::engine
