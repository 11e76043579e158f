// Real trainyard-rank processes for the engine tests that need a gang (TRAINYARD_RANK
// comes from tests/CMakeLists.txt): the tiny spec they run, spawning through the base
// library's process launcher with the rank's stdout copied to a file, and reading that
// file back through the rank line protocol (common/events/rank_line.h), strictly.
// Header-only: one copy in the one binary (engine_ranks_test) that includes it.
#pragma once

#include <signal.h>

#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/base/free_port.h"
#include "common/base/line_reader.h"
#include "common/base/posix_process_launcher.h"
#include "common/events/rank_line.h"
#include "common/spec/json_io.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine::testing {

// The tiny preset as the engine's tests run it (TinyEngineConfig: 10 steps, lr 3e-3,
// warmup 2) with a 60 s collective timeout; callers set the rest by field.
inline EngineConfig TinySpec() {
  EngineConfig c = TinyEngineConfig();
  c.parallelism.collective_timeout_s = 60;
  return c;
}

// Checks `spec` (every rule a rank applies) and writes it to `path` as the proto3 JSON a
// rank reads; returns `path`.
inline std::string WriteSpec(const std::string& path, const EngineConfig& spec) {
  RequireValid(spec);
  std::ofstream(path) << spec::ToJson(spec);
  return path;
}

// A loopback port that was free a moment ago (the rank binds it soon after).
inline int FreePort() {
  absl::StatusOr<int> port = FreeLoopbackPort();
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? *port : 0;
}

// Ranks started here, by pid: their stdout is copied line by line to a file.
class RankSpawner {
 public:
  static RankSpawner& Get() {
    static RankSpawner* spawner = new RankSpawner();  // lives as long as its ranks
    return *spawner;
  }

  pid_t Spawn(std::vector<std::string> args, const std::string& out) {
    LaunchRequest request;
    request.binary = args.front();
    request.args.assign(args.begin() + 1, args.end());
    absl::StatusOr<LaunchedProcess> child = launcher_.Launch(request);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return -1;
    std::thread copier([out, c = *child] {
      std::ofstream file(out, std::ios::trunc);
      ReadLines(c.stdout_fd, [&](std::string line) { file << line << '\n' << std::flush; });
    });
    std::thread relay([fd = child->stderr_fd] { ReadLines(fd, [](std::string line) { std::cerr << line << '\n'; }); });
    std::lock_guard<std::mutex> lock(mu_);
    copiers_[child->pid] = {std::move(copier), std::move(relay)};
    return child->pid;
  }

  // Exit code, or 128 + signal, once the rank's output is all in its file.
  int Wait(pid_t pid) {
    const ProcessExit exit = launcher_.Wait(pid);
    std::pair<std::thread, std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads = std::move(copiers_[pid]);
      copiers_.erase(pid);
    }
    if (threads.first.joinable()) threads.first.join();
    if (threads.second.joinable()) threads.second.join();
    return exit.signal != 0 ? 128 + exit.signal : exit.exit_code;
  }

 private:
  PosixProcessLauncher launcher_;
  std::mutex mu_;
  std::map<pid_t, std::pair<std::thread, std::thread>> copiers_;
};

// Starts one rank with 1 thread on 127.0.0.1:port; its stdout (the event lines) goes
// to `out`. `extra` flags are appended.
inline pid_t SpawnRank(const std::string& config, int rank, int world, int port, const std::string& out,
                       const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {TRAINYARD_RANK, "--config", config,
                                   "--rank", std::to_string(rank),
                                   "--world-size", std::to_string(world),
                                   "--master-addr", "127.0.0.1",
                                   "--master-port", std::to_string(port),
                                   "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return RankSpawner::Get().Spawn(std::move(args), out);
}

// Exit code, or 128 + signal.
inline int WaitExit(pid_t pid) { return RankSpawner::Get().Wait(pid); }

// Every event line of a rank's stdout file, read strictly; a line that looks like an
// event but is not one fails the test. Plain text lines are skipped.
inline std::vector<v1::Event> ReadRankEvents(const std::string& path) {
  std::vector<v1::Event> events;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!LooksLikeEvent(line)) continue;
    absl::StatusOr<v1::Event> e = ParseRankLine(line);
    EXPECT_TRUE(e.ok()) << e.status() << "\n" << line;
    if (e.ok()) events.push_back(std::move(*e));
  }
  return events;
}

// The losses of the step_metrics events, in order.
inline std::vector<double> Losses(const std::vector<v1::Event>& events) {
  std::vector<double> losses;
  for (const v1::Event& e : events) {
    if (e.has_step_metrics()) losses.push_back(e.step_metrics().loss());
  }
  return losses;
}

// step -> loss of the step_metrics events (a resumed run's start at its first step).
inline std::map<int, double> LossesByStep(const std::vector<v1::Event>& events) {
  std::map<int, double> losses;
  for (const v1::Event& e : events) {
    if (e.has_step_metrics()) losses[static_cast<int>(e.step_metrics().step())] = e.step_metrics().loss();
  }
  return losses;
}

// The message of the last error log event, or "".
inline std::string LastError(const std::vector<v1::Event>& events) {
  std::string message;
  for (const v1::Event& e : events) {
    if (e.has_log() && e.log().level() == "error") message = e.log().message();
  }
  return message;
}

}  // namespace trainyard::engine::testing
