// Spawning real trainyard-rank processes from engine tests (TRAINYARD_RANK_BIN is set
// by tests/engine/CMakeLists.txt). Header-only: each test binary is one TU.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace trainyard::engine::testing {

// A loopback port that was free a moment ago (the rank binds it soon after).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Starts one rank with 1 thread on 127.0.0.1:port; its stdout (the event lines) goes
// to `out`. `extra` flags are appended.
inline pid_t SpawnRank(const std::string& config, int rank, int world, int port,
                       const std::string& out, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {TRAINYARD_RANK_BIN, "--config", config,
                                   "--rank", std::to_string(rank),
                                   "--world-size", std::to_string(world),
                                   "--master-addr", "127.0.0.1",
                                   "--master-port", std::to_string(port),
                                   "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, TRAINYARD_RANK_BIN, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// Exit code, or 128 + signal.
inline int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace trainyard::engine::testing
