// trainyard: the command-line client of the Trainyard controller (see commands.h).
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "client/cli/commands.h"
#include "common/base/posix_process_launcher.h"

int main(int argc, char** argv) {
  trainyard::cli::CliEnvironment env;
  if (const char* controller = std::getenv("TRAINYARD_CONTROLLER");
      controller != nullptr && *controller != '\0') {
    env.default_controller = controller;
  }
  if (const char* token = std::getenv("TRAINYARD_TOKEN"); token != nullptr) env.default_token = token;
  env.default_train_binary = trainyard::ExecutableSibling("trainyard-train");
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);  // TMPDIR
  if (!ec) env.temp_dir = tmp.string();
  // A live status line needs a terminal that understands carriage return and "erase line".
  const char* term = std::getenv("TERM");
  env.out_is_terminal = isatty(STDOUT_FILENO) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
  if (winsize ws{}; env.out_is_terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
    env.terminal_columns = ws.ws_col;
  }
  env.out = &std::cout;
  env.err = &std::cerr;
  trainyard::PosixProcessLauncher launcher;
  env.launcher = &launcher;
  env.clock = trainyard::SystemClock();
  return trainyard::cli::RunCli(argc, argv, env);
}
