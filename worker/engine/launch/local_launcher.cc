#include "worker/engine/launch/local_launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace trainyard::engine {
namespace {

using nlohmann::json;

int g_stop_pipe[2] = {-1, -1};
volatile sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) {
  g_stop_signal = sig;
  if (g_stop_pipe[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] ssize_t w = ::write(g_stop_pipe[1], &b, 1);
  }
}

void EnsureStopPipe() {
  if (g_stop_pipe[0] >= 0) return;
  if (::pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
}

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;  // read end of the rank's stdout
  std::string partial;
  bool exited = false;
  RankOutcome outcome;
};

pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, int stdout_write_fd) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Async-signal-safe calls only between fork and exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphaned ranks if the launcher dies
    if (::getppid() != parent) ::_exit(127);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(stdout_write_fd, 1);
    ::execve(argv[0], argv.data(), envp.data());
    const char msg[] = "trainyard-train: exec of trainyard-rank failed\n";
    [[maybe_unused]] ssize_t w = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  return pid;
}

std::string ErrorFromLine(const std::string& line) {
  json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (event.is_object() && event.contains("log") && event["log"].value("level", "") == "error") {
    return event["log"].value("message", "");
  }
  return "";
}

std::string ExitText(int code) {
  if (code > 128) return "was killed by signal " + std::to_string(code - 128);
  return "exited with code " + std::to_string(code);
}

}  // namespace

void LocalLauncher::InstallSignalHandlers() {
  EnsureStopPipe();
  struct sigaction sa {};
  sa.sa_handler = &OnStopSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

std::string LocalLauncher::RankBinaryNextToSelf() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  std::string self(buf, static_cast<std::size_t>(n));
  const std::size_t slash = self.find_last_of('/');
  return self.substr(0, slash + 1) + "trainyard-rank";
}

int LocalLauncher::FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("cannot find a free loopback port: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

LaunchResult LocalLauncher::Run(const LaunchOptions& options, const LineHandler& on_line) {
  EnsureStopPipe();
  if (options.nproc < 1) throw std::runtime_error("nproc must be at least 1");
  if (::access(options.rank_binary.c_str(), X_OK) != 0) {
    throw std::runtime_error("rank binary " + options.rank_binary + " is not executable: " + std::strerror(errno));
  }
  // The config travels as a file: argv has size limits and shows up in `ps`.
  const char* tmpdir = std::getenv("TMPDIR");
  std::string config_path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/trainyard-train-XXXXXX.json";
  const int cfd = ::mkstemps(config_path.data(), 5);
  if (cfd < 0) throw std::runtime_error("cannot create a config file in " + config_path + ": " + std::strerror(errno));
  const std::string& config_text = options.config_json;
  const bool wrote = ::write(cfd, config_text.data(), config_text.size()) == static_cast<ssize_t>(config_text.size());
  ::close(cfd);
  struct ConfigFileRemover {
    std::string path;
    ~ConfigFileRemover() { ::unlink(path.c_str()); }
  } remover{config_path};
  if (!wrote) throw std::runtime_error("cannot write " + config_path);

  const int port = FreeLoopbackPort();
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& [name, value] : options.rank_env) {
    const std::string prefix = name + "=";
    env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }),
              env.end());
    env.push_back(prefix + value);
  }
  std::vector<Rank> ranks(static_cast<std::size_t>(options.nproc));
  LaunchResult result;
  auto terminate_all = [&](int sig) {
    for (const Rank& r : ranks) {
      if (r.pid > 0 && !r.exited) ::kill(r.pid, sig);
    }
  };
  for (int i = 0; i < options.nproc; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      terminate_all(SIGKILL);
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    }
    std::vector<std::string> args = {options.rank_binary, "--config", config_path,
                                     "--rank", std::to_string(i),
                                     "--local-rank", std::to_string(i),
                                     "--world-size", std::to_string(options.nproc),
                                     "--master-addr", "127.0.0.1",
                                     "--master-port", std::to_string(port),
                                     "--threads", std::to_string(options.threads)};
    args.insert(args.end(), options.rank_args.begin(), options.rank_args.end());
    try {
      ranks[i].pid = Spawn(args, env, fds[1]);
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      terminate_all(SIGKILL);
      throw;
    }
    ::close(fds[1]);
    ranks[i].out_fd = fds[0];
  }

  using Clock = std::chrono::steady_clock;
  bool stopping = false;
  Clock::time_point kill_at;
  int alive = options.nproc;
  while (alive > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> owner;
    for (int i = 0; i < options.nproc; ++i) {
      if (ranks[i].out_fd >= 0) {
        pfds.push_back({ranks[i].out_fd, POLLIN, 0});
        owner.push_back(i);
      }
    }
    pfds.push_back({g_stop_pipe[0], POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 100);

    for (std::size_t p = 0; p + 1 < pfds.size(); ++p) {
      if (!(pfds[p].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& r = ranks[owner[p]];
      char buf[65536];
      const ssize_t n = ::read(r.out_fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!r.partial.empty()) {
          if (std::string e = ErrorFromLine(r.partial); !e.empty()) r.outcome.error = e;
          on_line(owner[p], r.partial);
          r.partial.clear();
        }
        ::close(r.out_fd);
        r.out_fd = -1;
        continue;
      }
      r.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0, nl;
      while ((nl = r.partial.find('\n', start)) != std::string::npos) {
        const std::string line = r.partial.substr(start, nl - start);
        start = nl + 1;
        if (std::string e = ErrorFromLine(line); !e.empty()) r.outcome.error = e;
        on_line(owner[p], line);
      }
      r.partial.erase(0, start);
    }
    if (pfds.back().revents & POLLIN) {
      char drain[64];
      while (::read(g_stop_pipe[0], drain, sizeof(drain)) > 0) {
      }
    }
    if (g_stop_signal != 0 && !result.interrupted) {
      result.interrupted = true;
      result.exit_code = 128 + g_stop_signal;
      result.error = std::string("interrupted by ") + (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    }

    // Reap. A rank's stdout may still hold its last lines; those are read above on
    // the next turns, and the error message is composed after the loop.
    for (int i = 0; i < options.nproc; ++i) {
      Rank& r = ranks[i];
      if (r.exited) continue;
      int status = 0;
      rusage usage{};
      const pid_t w = ::wait4(r.pid, &status, WNOHANG, &usage);
      if (w != r.pid) continue;
      r.exited = true;
      --alive;
      r.outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.outcome.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
      if (r.outcome.exit_code != 0 && result.failed_rank < 0 && !result.interrupted && !stopping) {
        result.failed_rank = i;
      }
    }
    if ((result.failed_rank >= 0 || result.interrupted) && !stopping && alive > 0) {
      stopping = true;
      terminate_all(SIGTERM);
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options.kill_grace_s));
    }
    if (stopping && alive > 0 && Clock::now() >= kill_at) terminate_all(SIGKILL);
  }
  // Drain what the ranks wrote before exiting.
  for (int i = 0; i < options.nproc; ++i) {
    Rank& r = ranks[i];
    if (r.out_fd < 0) continue;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(r.out_fd, buf, sizeof(buf))) > 0) r.partial.append(buf, static_cast<std::size_t>(n));
    ::close(r.out_fd);
    r.out_fd = -1;
    std::istringstream lines(r.partial);
    std::string line;
    while (std::getline(lines, line)) {
      if (std::string e = ErrorFromLine(line); !e.empty()) r.outcome.error = e;
      on_line(i, line);
    }
  }
  for (const Rank& r : ranks) result.ranks.push_back(r.outcome);
  if (result.failed_rank >= 0) {
    const RankOutcome& f = result.ranks[result.failed_rank];
    result.exit_code = f.exit_code != 0 ? f.exit_code : 1;
    result.error = "rank " + std::to_string(result.failed_rank) + " " + ExitText(f.exit_code) +
                   (f.error.empty() ? "" : ": " + f.error);
  }
  if (result.exit_code == 0) {
    for (std::size_t i = 0; i < result.ranks.size(); ++i) {
      if (result.ranks[i].exit_code != 0) {  // cannot happen without failed_rank; be safe
        result.exit_code = result.ranks[i].exit_code;
        result.error = "rank " + std::to_string(i) + " " + ExitText(result.exit_code);
        break;
      }
    }
  }
  g_stop_signal = 0;
  return result;
}

}  // namespace trainyard::engine
