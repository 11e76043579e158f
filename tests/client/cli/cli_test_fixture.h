// A fixture that runs the `trainyard` CLI's RunCli against the shared fake JobService
// (tests/fakes/fake_job_service.h) on a loopback port, capturing stdout and stderr.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "tests/fakes/fake_job_service.h"
#include "tests/fakes/loopback_server.h"

namespace trainyard::testing {

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.ok()); }

  // Runs `trainyard ARGS...` exactly as given (no flags added).
  int RunRaw(std::vector<std::string> args, bool terminal = false) {
    args.insert(args.begin(), "trainyard");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    out_.str("");
    err_.str("");
    cli::CliEnvironment env;
    env.out = &out_;
    env.err = &err_;
    env.out_is_terminal = terminal;
    env.terminal_columns = 100;
    return cli::RunCli(static_cast<int>(argv.size()), argv.data(), env);
  }

  std::vector<std::string> OutLines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  FakeJobService service_;
  // Destroyed first: releases the calls the fake holds open, then shuts down.
  LoopbackServer server_{&service_, [this] { service_.ReleaseHeldCalls(); }};
  const std::string address_ = server_.address();
  std::ostringstream out_;
  std::ostringstream err_;
};

}  // namespace trainyard::testing
