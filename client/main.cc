// trainyard: the command-line client of the Trainyard controller (see commands.h).
#include <cstdlib>
#include <iostream>

#include "client/commands.h"

int main(int argc, char** argv) {
  trainyard::cli::CliEnvironment env;
  if (const char* controller = std::getenv("TRAINYARD_CONTROLLER");
      controller != nullptr && *controller != '\0') {
    env.default_controller = controller;
  }
  env.out = &std::cout;
  env.err = &std::cerr;
  return trainyard::cli::RunCli(argc, argv, env);
}
