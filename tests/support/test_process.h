#pragma once

#include <string>
#include <vector>

namespace trainyard::testing {

// A child process for integration tests: started with argv, stdout and stderr
// appended to `log_path`. Killed (SIGKILL, whole process group) on destruction.
class TestProcess {
 public:
  TestProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~TestProcess();
  TestProcess(const TestProcess&) = delete;
  TestProcess& operator=(const TestProcess&) = delete;

  int pid() const { return pid_; }
  // Sends SIGTERM and waits for exit; returns the exit status (or -signal).
  int Stop();
  // SIGKILLs the process (a crash, as far as it can tell) and reaps it.
  void Kill();
  // Waits for the process to exit by itself; returns the exit status (or -signal).
  int Wait();

 private:
  int pid_ = -1;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv to completion, capturing stdout and stderr separately.
CommandResult RunCommand(const std::vector<std::string>& argv);

// True while a process with this pid exists (and is not a zombie of ours).
bool ProcessAlive(int pid);

// Reads a file written atomically by the process under test, waiting until it exists.
std::string WaitForFile(const std::string& path, int timeout_ms);

}  // namespace trainyard::testing
