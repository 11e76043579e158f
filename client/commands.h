#pragma once

#include <ostream>
#include <string>

#include "common/clock.h"
#include "common/process_launcher.h"

namespace trainyard::cli {

// What the CLI takes from its process: main.cc reads the environment, tests pass
// their own values and streams.
struct CliEnvironment {
  std::string default_controller = "127.0.0.1:7070";  // TRAINYARD_CONTROLLER overrides
  // TRAINYARD_TOKEN: the bearer token when no --token-file is given ("" for none).
  std::string default_token;
  // `preflight`: trainyard-train next to this executable, and a directory for the
  // runner's JobSpec file (the system's temporary directory).
  std::string default_train_binary = "trainyard-train";
  std::string temp_dir = "/tmp";
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // `preflight` starts the runner through this launcher and times it on this clock
  // (main.cc passes the POSIX launcher and the system clock).
  ProcessLauncher* launcher = nullptr;
  Clock* clock = SystemClock();
};

// Parses the command line, runs the chosen subcommand and returns the process exit
// code (see cli_format.h: 0, 1/2 for watched jobs that FAILED/were CANCELLED, 3 for
// errors; `preflight` has its own, see preflight_command.h). Not thread-safe with
// respect to the streams in `env`.
int RunCli(int argc, const char* const* argv, const CliEnvironment& env);

}  // namespace trainyard::cli
