// trainyard: the command-line client of the Trainyard controller (see commands.h).
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "client/commands.h"
#include "common/posix_process_launcher.h"

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
  env.out = &std::cout;
  env.err = &std::cerr;
  trainyard::PosixProcessLauncher launcher;
  env.launcher = &launcher;
  env.clock = trainyard::SystemClock();
  return trainyard::cli::RunCli(argc, argv, env);
}
