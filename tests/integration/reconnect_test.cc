// A partition that costs nothing, end to end: the real controller, worker and rank
// processes on loopback. The worker daemon is SIGSTOPped (its ranks, in their own
// process groups, train on) for longer than the controller's heartbeat timeout but
// shorter than its reconnect window, then resumed. The controller shows it UNREACHABLE
// meanwhile and keeps the attempt; after SIGCONT the attempt is re-adopted: one attempt,
// gapless seqs, every step reported once, the losses bit-identical to an undisturbed
// run's, and the job succeeds. Then the worker's TCP link to the controller is cut
// (through a proxy that drops every connection and refuses new ones) and restored: gRPC
// reconnects, the worker registers again with its live ranks and is re-adopted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";
constexpr int kSteps = 20;
constexpr int kHeartbeatTimeoutS = 3;
constexpr int kReconnectWindowS = 60;

std::vector<std::string> Job(const fs::path& checkpoint_dir) {
  return {"parallelism.dp=2",
          "parallelism.ep=2",
          "parallelism.collective_timeout_s=120",
          "training.steps=" + std::to_string(kSteps),
          "checkpoint.interval=10",  // saved, never resumed from
          "checkpoint.dir=" + checkpoint_dir.string(),
          "restart.max_restarts=2",
          "restart.backoff_s=0"};
}

// A loopback TCP proxy to the controller whose link a test can cut: Cut() shuts every
// proxied connection down (both ends see it end) and, until Restore(), closes each new
// connection at once, so the worker's reconnects fail as over a dead link.
class LinkProxy {
 public:
  LinkProxy(int port, int target) : port_(port), target_(target) {}
  ~LinkProxy() {
    if (!open_.exchange(false)) return;
    acceptor_.join();
    ::close(listen_fd_);
    Cut();
  }

  bool Open() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = Loopback(port_);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) {
      ::close(fd);
      return false;
    }
    listen_fd_ = fd;
    open_ = true;
    acceptor_ = std::thread([this] { AcceptLoop(); });
    return true;
  }
  void Cut() {
    cut_ = true;
    std::vector<std::thread> pumps;
    std::vector<int> fds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pumps.swap(pumps_);
      fds.swap(fds_);
    }
    for (int fd : fds) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : pumps) t.join();
    for (int fd : fds) ::close(fd);
  }
  void Restore() { cut_ = false; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void AcceptLoop() {
    while (open_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      if (cut_) {
        ::close(client);
        continue;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Loopback(target_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([client, server] { Pump(client, server); });
    }
  }
  // Copies bytes both ways until either side ends (or Cut shuts both down).
  static void Pump(int a, int b) {
    char buf[64 * 1024];
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    while (::poll(p, 2, -1) > 0) {
      for (int i = 0; i < 2; ++i) {
        if (p[i].revents == 0) continue;
        const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          ::shutdown(a, SHUT_RDWR);
          ::shutdown(b, SHUT_RDWR);
          return;
        }
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = ::write(p[1 - i].fd, buf + sent, static_cast<size_t>(n - sent));
          if (w <= 0) return;
          sent += w;
        }
      }
    }
  }

  const int port_;
  const int target_;
  int listen_fd_ = -1;
  std::atomic<bool> open_{false};
  std::atomic<bool> cut_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

class ReconnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "reconnect");
    ASSERT_TRUE(cluster_->StartController({"--heartbeat-timeout", std::to_string(kHeartbeatTimeoutS),
                                           "--reconnect-window", std::to_string(kReconnectWindowS)}))
        << "controller did not start; see " << cluster_->dir() / "controller.log";
  }
  // w1 with 2 slots, connected to `controller` ("": directly).
  void StartW1(const std::string& controller = "") {
    WorkerOptions w1;
    w1.name = "w1";
    w1.slots = 2;
    w1.controller = controller;
    cluster_->StartWorker(w1);
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000)) << "worker never registered; see " << cluster_->dir();
  }
  // Waits until the controller lists w1 as unreachable; returns its WorkerInfo.
  json WaitUnreachable() const {
    json w1;
    for (int i = 0; i < 200; ++i) {
      w1 = WorkerW1();
      if (w1.value("unreachable", false)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return w1;
  }
  // The checks after the partition: SUCCEEDED on attempt 1, gapless seqs, each (rank,
  // step) once and every step there, nothing after the terminal state, and the
  // re-adoption (`how`: "" on the open stream, " (registered again)") in the stream.
  void ExpectReAdopted(const std::string& id, const std::vector<json>& events, const std::string& how) {
    const json job = cluster_->Get(id);
    EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
    EXPECT_EQ(job.value("attempt", 0), 1) << "re-adopted, not restarted";
    EXPECT_TRUE(job.value("failure_causes", json::array()).empty()) << job.dump();
    EXPECT_EQ(job.value("unreachable_reason", ""), "");
    int64_t seq = 0;
    std::map<std::pair<int, int64_t>, int> reported;
    bool readopted = false;
    bool terminal = false;
    for (const json& e : events) {
      EXPECT_EQ(JsonInt(e.at("seq")), ++seq);
      EXPECT_FALSE(terminal) << "after the terminal state: " << e.dump();
      if (e.contains("step_metrics")) ++reported[{e.value("rank", 0), JsonInt(e.at("step_metrics").at("step"))}];
      if (e.contains("log")) {
        const std::string msg = e.at("log").value("message", "");
        if (msg.rfind("worker w1 reconnected after ", 0) == 0 &&
            msg.find(how + "; attempt 1 re-adopted") != std::string::npos) {
          readopted = true;
        }
      }
      if (e.contains("job_state") && e.at("job_state").value("state", "") == "SUCCEEDED") terminal = true;
    }
    for (const auto& [rank_step, n] : reported) {
      EXPECT_EQ(n, 1) << "rank " << rank_step.first << " step " << rank_step.second << " reported " << n << " times";
    }
    EXPECT_TRUE(readopted) << "no 'reconnected after ...s" << how << "; attempt 1 re-adopted' event";
    EXPECT_EQ(LossesByStep(events, 1).size(), static_cast<size_t>(kSteps));
  }
  void TearDown() override {
    if (cluster_) cluster_->SignalWorker("w1", SIGCONT);  // never leave it stopped
    if (HasFailure() && cluster_) cluster_->KeepFiles();
  }

  // w1 as `trainyard workers --output json` lists it.
  json WorkerW1() const {
    for (const json& w : JsonLines(cluster_->Cli({"workers", "--output", "json"}).out)) {
      if (w.value("name", "") == "w1") return w;
    }
    return json::object();
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(ReconnectTest, AWorkerStoppedPastTheHeartbeatTimeoutIsReAdoptedWithoutARestart) {
  StartW1();
  // The undisturbed run.
  const std::string ref = cluster_->Submit(kDebugJob, Job(cluster_->dir() / "ck-ref"));
  ASSERT_FALSE(ref.empty());
  const std::vector<json> reference = cluster_->Follow(ref, "reference.jsonl")->WaitEnd();
  ASSERT_EQ(cluster_->Get(ref).value("state", ""), "SUCCEEDED");
  const std::map<int64_t, double> want = LossesByStep(reference, 1);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  const std::string id = cluster_->Submit(kDebugJob, Job(cluster_->dir() / "ck"));
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "partitioned.jsonl");
  ASSERT_TRUE(follow->WaitFor(
      [](const json& e) { return e.contains("step_metrics") && JsonInt(e.at("step_metrics").at("step")) >= 3; },
      300000));

  cluster_->SignalWorker("w1", SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  // The controller marks it unreachable after the heartbeat timeout and waits.
  const json w1 = WaitUnreachable();
  ASSERT_TRUE(w1.value("unreachable", false)) << w1.dump();
  EXPECT_TRUE(w1.contains("reconnect_deadline")) << w1.dump();
  const json during = cluster_->Get(id);
  EXPECT_EQ(during.value("state", ""), "RUNNING") << during.dump();
  EXPECT_EQ(during.value("attempt", 0), 1);
  EXPECT_NE(during.value("unreachable_reason", "").find("for worker w1 to reconnect"), std::string::npos)
      << during.dump();
  const CommandResult table = cluster_->Cli({"workers"});
  EXPECT_NE(table.out.find("UNREACHABLE since "), std::string::npos) << table.out;
  // Its ranks train on meanwhile; their events wait in the stopped worker.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  cluster_->SignalWorker("w1", SIGCONT);
  const double stopped_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();

  const std::vector<json> events = follow->WaitEnd();
  ExpectReAdopted(id, events, "");
  const std::map<int64_t, double> got = LossesByStep(events, 1);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
  std::printf("reconnect: worker stopped %.1f s (heartbeat timeout %d s), attempt 1 re-adopted\n", stopped_s,
              kHeartbeatTimeoutS);
}

TEST_F(ReconnectTest, AWorkerWhoseLinkIsCutAndRestoredRegistersAgainAndIsReAdopted) {
  const std::string address = cluster_->address();
  const int controller_port = std::stoi(address.substr(address.rfind(':') + 1));
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  LinkProxy link(port, controller_port);
  ASSERT_TRUE(link.Open());
  StartW1("127.0.0.1:" + std::to_string(port));
  const std::string id = cluster_->Submit(kDebugJob, Job(cluster_->dir() / "ck"));
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "cut.jsonl");
  ASSERT_TRUE(follow->WaitFor(
      [](const json& e) { return e.contains("step_metrics") && JsonInt(e.at("step_metrics").at("step")) >= 3; },
      300000));

  link.Cut();
  const json w1 = WaitUnreachable();
  ASSERT_TRUE(w1.value("unreachable", false)) << w1.dump();
  EXPECT_FALSE(w1.value("connected", true)) << "its stream ended with the link";
  EXPECT_EQ(cluster_->Get(id).value("attempt", 0), 1);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  link.Restore();

  const std::vector<json> events = follow->WaitEnd();
  ExpectReAdopted(id, events, " (registered again)");
}

}  // namespace
}  // namespace trainyard::testing
