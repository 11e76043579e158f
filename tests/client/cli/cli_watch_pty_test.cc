// `trainyard watch` in a real pseudo-terminal: a tmux pane (on a private tmux server)
// runs the CLI against a real controller and worker training a short debug job. The
// pane is captured over and over: the status line must be redrawn in place (one status
// line on screen, whose step value changes on the same row, no scrolled copies) and
// end with the final state. Nothing here depends on timing: it polls with generous
// deadlines and only asks for what any speed of machine shows.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

constexpr int kSteps = 40;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class WatchPtyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "cli_pty");
    ASSERT_TRUE(cluster_->StartController()) << "controller did not start; see " << cluster_->dir();
    WorkerOptions worker;
    worker.name = "w1";
    worker.slots = 1;
    cluster_->StartWorker(worker);
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 30000)) << "worker never registered; see " << cluster_->dir();
  }
  void TearDown() override {
    Tmux({"kill-server"});  // our private server (-L), nobody else's
    if (HasFailure()) cluster_->KeepFiles();
  }

  CommandResult Tmux(std::vector<std::string> args) const {
    args.insert(args.begin(), {TRAINYARD_TMUX, "-L", socket_, "-f", "/dev/null"});
    return RunCommand(args);
  }
  // A command that starts the tmux server. The server daemonizes and would keep every
  // fd it inherited (RunCommand's pipes among them) open, so it is started with stdin
  // on /dev/null, output in a file and nothing else open. Returns the exit status and
  // the file's text.
  std::pair<int, std::string> TmuxStartingServer(const std::vector<std::string>& args) const {
    const std::string log = (cluster_->dir() / "tmux.log").string();
    std::vector<std::string> argv = {TRAINYARD_TMUX, "-L", socket_, "-f", "/dev/null"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      const int in = open("/dev/null", O_RDONLY);
      const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (in < 0 || out < 0) _exit(126);
      dup2(in, 0);
      dup2(out, 1);
      dup2(out, 2);
      for (int fd = 3; fd < 1024; ++fd) close(fd);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), ReadFileOrEmpty(log)};
  }

  const std::string socket_ = "trainyard-cli-test-" + std::to_string(getpid());
  std::unique_ptr<TestCluster> cluster_;
};

struct StatusOnScreen {
  int row = -1;
  int64_t step = -1;
  std::string line;
};

TEST_F(WatchPtyTest, StatusLineIsRedrawnInPlaceAndEndsWithTheFinalState) {
  // A long job takes the only slot first, so the watched job waits PENDING until watch
  // shows it and the blocker is cancelled: every step then happens while watch is
  // attached. (Run at once, on a fast machine the job could end before watch starts,
  // and its steps would arrive as one burst, never seen changing in place.)
  const std::string blocker = cluster_->Submit(TRAINYARD_EXAMPLES "/debug.toml", {"training.steps=1000000"});
  ASSERT_FALSE(blocker.empty());
  // The debug model on 2 sequences of 64 tokens (the preset's are 8 of 256): what is
  // checked is how watch draws the steps, not training, and 40 full-size CPU steps were
  // most of this test's minute. A step still takes long enough to be seen changing.
  const std::string id =
      cluster_->Submit(TRAINYARD_EXAMPLES "/debug.toml",
                       {"training.steps=" + std::to_string(kSteps), "training.batch_size=2", "training.seq_len=64"});
  ASSERT_FALSE(id.empty());

  std::string command = std::string(TRAINYARD_CLI) + " watch " + id;
  for (const std::string& a : cluster_->ConnectionArgs()) command += " '" + a + "'";
  command += "; echo WATCH-EXIT=$?; sleep 600";
  const auto [started, tmux_log] =
      TmuxStartingServer({"new-session", "-d", "-x", "160", "-y", "20", "-s", "watch", "/bin/bash", "-c", command});
  ASSERT_EQ(started, 0) << tmux_log;

  const std::regex status_re("^" + id + " [A-Z]+.*?  step ([0-9]+)/" + std::to_string(kSteps) + "\\b");
  std::vector<StatusOnScreen> seen;  // one per capture that showed a status line
  std::string final_screen;
  std::string mid_screen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(4);
  bool blocker_cancelled = false;
  while (std::chrono::steady_clock::now() < deadline) {
    const CommandResult cap = Tmux({"capture-pane", "-p", "-t", "watch"});
    if (!blocker_cancelled && cap.out.find(id + " PENDING") != std::string::npos) {
      const CommandResult cancel = cluster_->Cli({"cancel", blocker});
      ASSERT_EQ(cancel.exit_code, 0) << cancel.out << cancel.err;
      blocker_cancelled = true;
    }
    ASSERT_EQ(cap.exit_code, 0) << cap.err;
    const std::vector<std::string> lines = Lines(cap.out);
    int status_lines = 0;
    StatusOnScreen s;
    for (size_t row = 0; row < lines.size(); ++row) {
      std::smatch m;
      if (std::regex_search(lines[row], m, status_re)) {
        ++status_lines;
        s = {static_cast<int>(row), std::stoll(m[1]), lines[row]};
      }
    }
    ASSERT_LE(status_lines, 1) << "the status line scrolled instead of being redrawn:\n" << cap.out;
    if (status_lines == 1) {
      if (seen.empty() || seen.back().step != s.step || seen.back().row != s.row) seen.push_back(s);
      if (s.step > 0 && s.step < kSteps && mid_screen.empty()) mid_screen = cap.out;
    }
    if (cap.out.find("WATCH-EXIT=") != std::string::npos) {
      final_screen = cap.out;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  ASSERT_TRUE(blocker_cancelled) << "watch never showed the job PENDING";
  ASSERT_FALSE(final_screen.empty()) << "watch did not end; last states seen: " << seen.size();
  auto trimmed = [](std::string text) { return text.erase(text.find_last_not_of('\n') + 1); };
  std::printf("--- a mid-run capture\n%s\n--- the final capture\n%s\n--- %zu distinct status lines seen\n",
              trimmed(mid_screen).c_str(), trimmed(final_screen).c_str(), seen.size());

  // The final screen: the status line with the final state and the last step, the
  // terminal state's own line above it, exit status 0, and far fewer lines than steps.
  const std::vector<std::string> lines = Lines(final_screen);
  ASSERT_FALSE(seen.empty());
  const StatusOnScreen& last = seen.back();
  EXPECT_EQ(last.step, kSteps) << last.line;
  EXPECT_NE(last.line.find(id + " SUCCEEDED"), std::string::npos) << last.line;
  ASSERT_GT(last.row, 0);
  EXPECT_NE(lines[last.row - 1].find("job SUCCEEDED"), std::string::npos) << final_screen;
  EXPECT_NE(final_screen.find("WATCH-EXIT=0"), std::string::npos) << final_screen;
  int non_empty = 0;
  for (const std::string& l : lines) non_empty += l.empty() ? 0 : 1;
  EXPECT_LT(non_empty, kSteps / 2) << "steps were printed as lines:\n" << final_screen;

  // In place: some row showed one step value and, in a later capture, a larger one.
  bool updated_in_place = false;
  for (size_t i = 1; i < seen.size(); ++i) {
    if (seen[i].row == seen[i - 1].row && seen[i].step > seen[i - 1].step) updated_in_place = true;
  }
  EXPECT_TRUE(updated_in_place) << "no capture showed the status line's step change on the same row (" << seen.size()
                                << " distinct status lines seen)";
}

}  // namespace
}  // namespace trainyard::testing
