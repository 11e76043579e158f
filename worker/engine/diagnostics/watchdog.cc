#include "worker/engine/diagnostics/watchdog.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <vector>

#include "common/flight/artifact_file.h"
#include "common/flight/stall_analysis.h"
#include "worker/engine/diagnostics/peer_progress.h"

namespace trainyard::engine {
namespace {

constexpr std::int64_t kNsPerS = 1000000000;

std::int64_t SecondsToNs(double s) { return static_cast<std::int64_t>(s * 1e9); }

void WriteAllFd(int fd, const char* buf, std::size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, buf, n);
    if (w <= 0) return;
    buf += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

Watchdog::Watchdog(flight::FlightRing& ring, EventWriter& events, WatchdogOptions options)
    : ring_(ring), events_(events), options_(std::move(options)) {
  if (options_.period_ms < 10) options_.period_ms = 10;
  step_timeout_on_.store(options_.step_timeout_s > 0);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watch_.joinable()) watch_.join();
  if (monitor_.joinable()) monitor_.join();
  if (publisher_.joinable()) publisher_.join();
}

void Watchdog::Start() {
  ring_.Heartbeat();
  watch_ = std::thread([this] { WatchLoop(); });
  monitor_ = std::thread([this] { MonitorLoop(); });
  if (options_.master_port > 0 && options_.world_size > 1) publisher_ = std::thread([this] { PublishLoop(); });
}

void Watchdog::PublishLoop() {
  PeerProgress peers({options_.master_addr, options_.master_port, options_.world_size, options_.rank,
                      std::chrono::milliseconds(2000)});
  bool reported = false;
  std::unique_lock<std::mutex> lock(mu_);
  const auto period = std::chrono::milliseconds(static_cast<int64_t>(options_.publish_period_s * 1000));
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    const std::string error = peers.Publish(ring_.Groups());
    if (!error.empty() && !reported) {
      std::cerr << "trainyard-rank " << options_.rank << ": watchdog: cannot publish progress: " << error << std::endl;
      reported = true;
    }
    lock.lock();
  }
}

std::string Watchdog::DumpName(int attempt, int rank) {
  return "flight-a" + std::to_string(attempt) + "-r" + std::to_string(rank) + ".json";
}

std::int64_t Watchdog::Deadline() const {
  const std::int64_t start = ring_.inflight_start_ns();
  if (ring_.inflight_id() != 0 && start != 0) return start + SecondsToNs(options_.collective_timeout_s);
  if (step_timeout_on_.load() && ring_.step() >= 1) {
    return ring_.progress_mono_ns() + SecondsToNs(options_.step_timeout_s);
  }
  return 0;
}

void Watchdog::WatchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(options_.period_ms), [this] { return stop_; })) {
    ring_.Heartbeat();
    const std::int64_t now = flight::MonotonicNs();
    const std::int64_t deadline = Deadline();
    if (deadline == 0 || now < deadline) continue;
    reporting_since_ns_.store(now);
    lock.unlock();
    // The collective may have completed since Deadline() read the ring: report a step
    // stall only when the step timeout is on and itself passed.
    if (ring_.inflight_id() != 0) {
      ReportCollectiveStall(now);
    } else if (step_timeout_on_.load() && ring_.step() >= 1 &&
               now >= ring_.progress_mono_ns() + SecondsToNs(options_.step_timeout_s)) {
      ReportStepStall(now);
    }
    reporting_since_ns_.store(0);
    lock.lock();
  }
}

void Watchdog::MonitorLoop() {
  const std::int64_t stale = 2 * std::int64_t{options_.period_ms} * 1000000;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(options_.period_ms), [this] { return stop_; })) {
    const std::int64_t now = flight::MonotonicNs();
    const std::int64_t deadline = Deadline();
    if (deadline == 0 || now < deadline + stale) continue;
    if (now - ring_.heartbeat_mono_ns() <= stale) continue;
    const std::int64_t reporting = reporting_since_ns_.load();
    if (reporting != 0 && now - reporting < SecondsToNs(kReportGraceS)) continue;
    EmergencyExit(now);
  }
}

void Watchdog::ReportCollectiveStall(std::int64_t now_ns) {
  if (ring_.inflight_peer() >= 0) ReportP2PStall(now_ns);
  const int group = ring_.inflight_group();
  const std::string name = ring_.group_name(group);
  const std::string op = ring_.inflight_op();
  const std::uint64_t seq = ring_.group_entered(group);
  const double waited = static_cast<double>(now_ns - ring_.inflight_start_ns()) / kNsPerS;
  std::vector<std::string> bad;
  std::string error;
  std::vector<flight::RingSnapshot> rings;
  for (flight::RingSnapshot& r : flight::ReadRingDir(ring_.dir(), 0, &bad, &error)) {
    if (r.world_size == options_.world_size && r.rank < options_.world_size) rings.push_back(std::move(r));
  }
  const std::int64_t group_size = ring_.group_size(group);
  // A ring whose watchdog has not beaten for 5 periods (at least 2 s) belongs to a
  // frozen process (SIGSTOP): named when every member seen is inside the collective.
  const std::int64_t stale = std::max<std::int64_t>(2 * kNsPerS, 5 * std::int64_t{options_.period_ms} * 1000000);
  flight::StallVerdict v = flight::AnalyzeCollectiveStall(rings, name, seq, group_size, now_ns, stale);
  if (v.lagging_rank < 0 && v.members_seen < group_size && options_.master_port > 0) {
    // The laggard is on another host: ask the store for the ranks without a ring here.
    std::vector<int> others;
    for (int r = 0; r < options_.world_size; ++r) {
      bool local = false;
      for (const auto& ring : rings) local = local || ring.rank == r;
      if (!local) others.push_back(r);
    }
    PeerProgress peers({options_.master_addr, options_.master_port, options_.world_size, options_.rank,
                        std::chrono::milliseconds(2000)});
    std::string store_error;
    if (peers.ReadPeers(others, &rings, &store_error)) {
      v = flight::AnalyzeCollectiveStall(rings, name, seq, group_size);
      v.summary += " (peers off this host read from the TCPStore)";
    } else {
      v.lagging_rank = 0;
      v.summary += "; the TCPStore is unreachable (" + store_error + "): naming rank 0, its host";
    }
  }
  std::vector<int> waiting = v.waiting_ranks;
  if (waiting.empty()) waiting.push_back(options_.rank);
  char waited_s[32];
  std::snprintf(waited_s, sizeof(waited_s), "%.1f", waited);
  std::string message = "rank " + std::to_string(options_.rank) + " waited " + waited_s + " s in " + name + ":" + op +
                        " #" + std::to_string(seq) +
                        " (parallelism.collective_timeout_s=" + std::to_string(options_.collective_timeout_s) + "); " +
                        v.summary;
  if (!error.empty()) message += "; " + error;
  v1::Stall stall;
  stall.set_collective(name + ":" + op);
  stall.set_collective_seq(static_cast<int64_t>(seq));
  stall.set_lagging_rank(v.lagging_rank);
  stall.set_waited_s(waited);
  stall.set_message(message);
  for (int r : waiting) stall.add_waiting_ranks(r);
  stall.set_step(ring_.step());
  Finish(std::move(stall));
}

void Watchdog::ReportP2PStall(std::int64_t now_ns) {
  flight::EntrySnapshot stuck;
  stuck.id = ring_.inflight_id();
  stuck.group_name = ring_.group_name(ring_.inflight_group());
  stuck.op = ring_.inflight_op();
  stuck.peer = ring_.inflight_peer();
  stuck.microbatch = ring_.inflight_microbatch();
  stuck.p2p_seq = ring_.inflight_p2p_seq();
  const double waited = static_cast<double>(now_ns - ring_.inflight_start_ns()) / kNsPerS;
  std::vector<std::string> bad;
  std::string error;
  std::vector<flight::RingSnapshot> rings;
  // Every entry: the peer's last op with this rank may be far back.
  for (flight::RingSnapshot& r : flight::ReadRingDir(ring_.dir(), flight::kMaxEntries, &bad, &error)) {
    if (r.world_size == options_.world_size && r.rank < options_.world_size) rings.push_back(std::move(r));
  }
  const std::int64_t stale = std::max<std::int64_t>(2 * kNsPerS, 5 * std::int64_t{options_.period_ms} * 1000000);
  const flight::StallVerdict v = flight::AnalyzeP2PStall(rings, options_.rank, stuck, now_ns, stale);
  char waited_s[32];
  std::snprintf(waited_s, sizeof(waited_s), "%.1f", waited);
  std::string message = "rank " + std::to_string(options_.rank) + " waited " + waited_s + " s in " + stuck.group_name +
                        ":" + stuck.op + " #" + std::to_string(stuck.p2p_seq) +
                        " (parallelism.collective_timeout_s=" + std::to_string(options_.collective_timeout_s) + "); " +
                        v.summary;
  if (!error.empty()) message += "; " + error;
  v1::Stall stall;
  stall.set_collective(stuck.group_name + ":" + stuck.op);
  stall.set_collective_seq(static_cast<int64_t>(stuck.p2p_seq));
  stall.set_lagging_rank(v.lagging_rank);
  stall.set_waited_s(waited);
  stall.set_message(message);
  for (int r : v.waiting_ranks) stall.add_waiting_ranks(r);
  stall.set_step(ring_.step());
  Finish(std::move(stall));
}

void Watchdog::ReportStepStall(std::int64_t now_ns) {
  const double waited = static_cast<double>(now_ns - ring_.progress_mono_ns()) / kNsPerS;
  char waited_s[32];
  std::snprintf(waited_s, sizeof(waited_s), "%.1f", waited);
  const std::string message =
      "rank " + std::to_string(options_.rank) + ": no step progress for " + waited_s + " s at step " +
      std::to_string(ring_.step()) +
      " outside any collective (training.step_timeout_s=" + std::to_string(options_.step_timeout_s) + ")";
  v1::Stall stall;
  stall.set_lagging_rank(options_.rank);
  stall.set_waited_s(waited);
  stall.set_message(message);
  stall.set_step(ring_.step());
  Finish(std::move(stall));
}

void Watchdog::Finish(v1::Stall stall) {
  std::string dump, error;
  const std::string name = DumpName(options_.attempt, options_.rank);
  absl::StatusOr<flight::WrittenArtifact> artifact = absl::UnknownError("");
  if (flight::DumpFlightDirJson(ring_.dir(), kDumpEntries, &dump, &error)) {
    artifact = flight::WriteArtifactFile(options_.artifacts_dir, name, dump);
    if (!artifact.ok()) error = std::string(artifact.status().message());
  }
  const bool written = artifact.ok();
  if (!written) stall.set_message(stall.message() + "; flight dump not written: " + error);
  events_.Stall(stall);
  if (written) events_.Artifact(ArtifactRefOf(*artifact, name, "flight_recorder"));
  std::cout.flush();
  std::fflush(stdout);
  std::cerr << "trainyard-rank " << options_.rank << ": stall reported, exiting with " << kStallExitCode << std::endl;
  _exit(kStallExitCode);
}

void Watchdog::EmergencyExit(std::int64_t now_ns) {
  char group[flight::kMaxName + 1];
  char op[flight::kMaxName + 1];
  const bool inflight = ring_.inflight_id() != 0;
  const int g = ring_.inflight_group();
  if (inflight) {
    ring_.CopyGroupName(g, group);
    ring_.CopyInflightOp(op);
  } else {
    group[0] = op[0] = '\0';
  }
  const std::int64_t since = inflight ? ring_.inflight_start_ns() : ring_.progress_mono_ns();
  const double waited = static_cast<double>(now_ns - since) / kNsPerS;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char when[40];
  const std::size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(when + n, sizeof(when) - n, ".%03dZ", static_cast<int>(ts.tv_nsec / 1000000));
  char collective[2 * flight::kMaxName + 2];
  std::snprintf(collective, sizeof(collective), "%s%s%s", group, inflight ? ":" : "", op);
  char line[1024];
  // A send/recv's seq is its p2p seq; a collective's the group's.
  const std::uint64_t seq = !inflight                    ? std::uint64_t{0}
                            : ring_.inflight_peer() >= 0 ? ring_.inflight_p2p_seq()
                                                         : ring_.group_entered(g);
  const std::size_t len =
      EmergencyStallLine(line, sizeof(line), when, collective, seq, options_.rank, waited, ring_.step());
  WriteAllFd(1, line, len);
  _exit(kStallExitCode);
}

std::size_t Watchdog::EmergencyStallLine(char* out, std::size_t cap, const char* when, const char* collective,
                                         std::uint64_t seq, int rank, double waited_s, std::int64_t step) {
  const bool inflight = collective[0] != '\0';
  const int len = std::snprintf(
      out, cap,
      "\n{\"time\":\"%s\",\"stall\":{\"collective\":\"%s\",\"collective_seq\":%" PRIu64
      ",\"lagging_rank\":%d,\"waited_s\":%.3f,\"message\":\"rank %d: %s past its timeout and the watchdog thread "
      "is unresponsive (no flight dump)\",\"waiting_ranks\":[%d],\"step\":%" PRId64 "}}\n",
      when, collective, seq, inflight ? -1 : rank, waited_s, rank, inflight ? "collective" : "no step progress", rank,
      step);
  if (len <= 0) return 0;
  return std::min<std::size_t>(static_cast<std::size_t>(len), cap - 1);
}

}  // namespace trainyard::engine
