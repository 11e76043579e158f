#include "common/base/posix_process_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <future>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

void CloseFd(int &fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Runs in the forked child: only async-signal-safe calls from here to exec.
[[noreturn]] void ExecChild(pid_t parent, int devnull, int out_w, int err_w, int status_w,
                            const char *binary, char *const *argv, char *const *envp,
                            std::int64_t data_limit_bytes) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  // Ignored dispositions survive exec; give the rank the defaults.
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
    int err = errno;
    (void)!write(status_w, &err, sizeof(err));
    _exit(127);
  }
  if (data_limit_bytes > 0) {
    // Never above a limit this process already has: it can only be tightened.
    struct rlimit limit = {static_cast<rlim_t>(data_limit_bytes), static_cast<rlim_t>(data_limit_bytes)};
    struct rlimit inherited;
    if (getrlimit(RLIMIT_DATA, &inherited) == 0 && inherited.rlim_max != RLIM_INFINITY &&
        inherited.rlim_max < limit.rlim_max) {
      limit.rlim_cur = limit.rlim_max = inherited.rlim_max;
    }
    if (setrlimit(RLIMIT_DATA, &limit) != 0) {
      int err = errno;
      (void)!write(status_w, &err, sizeof(err));
      _exit(127);
    }
  }
  execve(binary, argv, envp);
  int err = errno;
  (void)!write(status_w, &err, sizeof(err));
  _exit(127);
}

}  // namespace

PosixProcessLauncher::PosixProcessLauncher() : fork_thread_([this] { ForkLoop(); }) {}

PosixProcessLauncher::~PosixProcessLauncher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  fork_thread_.join();
}

void PosixProcessLauncher::ForkLoop() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PosixProcessLauncher *self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->jobs_.empty();
          },
          this));
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

absl::StatusOr<LaunchedProcess> PosixProcessLauncher::Launch(const LaunchRequest &request) {
  // Build argv before forking: the child may not allocate.
  std::vector<std::string> args;
  args.push_back(request.binary);
  args.insert(args.end(), request.args.begin(), request.args.end());
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char **e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto &[n, v] : request.env) replaced = replaced || n == name;
    if (!replaced) env.emplace_back(entry);
  }
  for (size_t i = 0; i < request.env.size(); ++i) {
    bool later = false;  // a name given twice takes the later value
    for (size_t j = i + 1; j < request.env.size(); ++j) later = later || request.env[j].first == request.env[i].first;
    if (!later) env.push_back(request.env[i].first + "=" + request.env[i].second);
  }
  std::vector<char *> envp;
  for (auto &e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  auto do_launch = [&]() -> absl::StatusOr<LaunchedProcess> {
    int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    auto cleanup = [&] {
      for (int *fd : {&out[0], &out[1], &err[0], &err[1], &status[0], &status[1], &devnull}) {
        CloseFd(*fd);
      }
    };
    if (devnull < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
        pipe2(status, O_CLOEXEC) != 0) {
      int e = errno;
      cleanup();
      return absl::InternalError(absl::StrCat("cannot create pipes: ", strerror(e)));
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
      int e = errno;
      cleanup();
      return absl::ResourceExhaustedError(absl::StrCat("fork failed: ", strerror(e)));
    }
    if (pid == 0) {
      ExecChild(parent, devnull, out[1], err[1], status[1], argv[0], argv.data(), envp.data(),
                request.data_limit_bytes);
    }
    setpgid(pid,
            pid);  // also in the parent, so SignalGroup works before the child runs
    CloseFd(out[1]);
    CloseFd(err[1]);
    CloseFd(status[1]);
    CloseFd(devnull);
    int child_errno = 0;
    ssize_t n;
    do {
      n = read(status[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    CloseFd(status[0]);
    if (n == static_cast<ssize_t>(sizeof(child_errno))) {
      waitpid(pid, nullptr, 0);
      cleanup();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot execute ", request.binary, ": ", strerror(child_errno)));
    }
    LaunchedProcess p;
    p.pid = pid;
    p.stdout_fd = out[0];
    p.stderr_fd = err[0];
    return p;
  };

  std::packaged_task<absl::StatusOr<LaunchedProcess>()> task(do_launch);
  auto result = task.get_future();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("launcher is shutting down");
    jobs_.push_back([&task] { task(); });
  }
  return result.get();
}

ProcessExit PosixProcessLauncher::Wait(pid_t pid) {
  // Wait without reaping, so the pid (and so the group id) stays ours while we
  // kill whatever the rank left behind in its group.
  siginfo_t info{};
  while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL);
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  ProcessExit exit;
  exit.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  }
  return exit;
}

void PosixProcessLauncher::SignalGroup(pid_t pid, int signal) {
  if (pid > 0) kill(-pid, signal);
}

std::string ExecutableSibling(const std::string &name) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (self.parent_path() / name).string();
}

}  // namespace trainyard
