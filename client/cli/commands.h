#pragma once

#include <ostream>
#include <string>

#include "common/base/clock.h"
#include "common/base/process_launcher.h"

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
  // `watch` draws a live status line when `out` is a terminal (main.cc: isatty(1) and
  // TERM is not "dumb"), `terminal_columns` wide (0: unknown).
  bool out_is_terminal = false;
  int terminal_columns = 0;
};

// Parses the command line (global flags before or after the subcommand), runs the
// chosen subcommand and returns the process exit code, one table for every command
// (cli_format.h: kExitOk ... kExitError). Not thread-safe with respect to the streams in
// `env`.
int RunCli(int argc, const char* const* argv, const CliEnvironment& env);

}  // namespace trainyard::cli
