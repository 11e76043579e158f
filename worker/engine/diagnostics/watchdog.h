// Hang detection for one rank. A watchdog thread wakes every period_ms and checks this
// rank's flight ring (common/flight/flight_ring.h): a collective in flight for longer
// than parallelism.collective_timeout_s, or, when none is in flight, no step progress
// for training.step_timeout_s (0 = off; checked only from step 1 on, and until
// DisableStepTimeout). On a timeout it
//   1. reads every ring in the ring's folder (RUN_DIR/flight: the ranks of this host;
//      a SIGSTOPped or hung rank's ring is still readable) and names the lagging rank
//      with flight::AnalyzeCollectiveStall, or for a send/recv in flight with
//      flight::AnalyzeP2PStall (the peer; for a step timeout: this rank);
//   2. writes the flight dump (flight::DumpFlightDirJson, last kDumpEntries entries
//      per ring) to RUN_DIR/artifacts/flight-aATTEMPT-rRANK.json (temp, fsync, rename);
//   3. emits a Stall event and an ArtifactRef {name "flight-aA-rR.json", kind
//      "flight_recorder", size_bytes, uri "file://ABSPATH", sha256}, flushes stdout;
//   4. ends the process with _exit(kStallExitCode).
// A second, monitor thread reads only atomics (the watchdog's heartbeat and the ring's
// in-flight start and progress times). If a timeout has passed and the watchdog has
// not beaten for more than 2 periods (and is not within kReportGraceS of a report it
// started), it writes a minimal Stall line from a stack buffer (no allocation, no
// lock) straight to fd 1 and _exit(kStallExitCode)s too.
//
// Peers on other hosts: with master_port set and more than one rank, a third,
// publisher thread puts this rank's per-group seqs into rank 0's TCPStore about once
// a second when they changed (peer_progress.h). When a group's laggard has no ring in
// the folder, the watchdog reads the other ranks' published seqs from the store
// (short timeout) and decides over both; when the store cannot be reached it names
// rank 0, the store's host.
//
// Thread contract: construct, Start and destroy from one thread (main); the ring and
// the event writer must outlive the Watchdog. DisableStepTimeout is thread-safe. The
// destructor stops both threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/events/rank_exit.h"
#include "common/flight/flight_ring.h"
#include "worker/engine/train/event_writer.h"

namespace trainyard::engine {

// The exit code of a rank that reported a Stall (distinct from 1, a plain error).
inline constexpr int kStallExitCode = kRankExitStall;  // common/events/rank_exit.h

struct WatchdogOptions {
  std::string artifacts_dir;  // RUN_DIR/artifacts
  int attempt = 1;
  int rank = 0;
  int world_size = 1;  // rings of another world size in the folder are stale: ignored
  double collective_timeout_s = 300;
  double step_timeout_s = 0;  // 0: off
  int period_ms = 200;
  std::string master_addr;  // rank 0's TCPStore, for peers on other hosts
  int master_port = 0;      // 0: no store (single host only)
  double publish_period_s = 1.0;
};

class Watchdog {
 public:
  static constexpr std::size_t kDumpEntries = 64;
  static constexpr double kReportGraceS = 10;

  Watchdog(flight::FlightRing& ring, EventWriter& events, WatchdogOptions options);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Start();
  // After the last step (final saves are not steps): only collectives are watched.
  void DisableStepTimeout() { step_timeout_on_.store(false); }

  // "flight-a2-r1.json"
  static std::string DumpName(int attempt, int rank);

  // The monitor's last-resort Stall line (an Event of the rank line protocol, newline
  // first and last) into `out`, from a stack buffer with no allocation: `collective`
  // "GROUP:OP" or "" for a step timeout, `seq` its 1-based seq, `when` RFC 3339.
  // Returns the length written (at most `cap` - 1).
  static std::size_t EmergencyStallLine(char* out, std::size_t cap, const char* when, const char* collective,
                                        std::uint64_t seq, int rank, double waited_s, std::int64_t step);

 private:
  void WatchLoop();
  void MonitorLoop();
  void PublishLoop();
  // Both never return.
  [[noreturn]] void ReportCollectiveStall(std::int64_t now_ns);
  [[noreturn]] void ReportP2PStall(std::int64_t now_ns);
  [[noreturn]] void ReportStepStall(std::int64_t now_ns);
  [[noreturn]] void Finish(v1::Stall stall);
  [[noreturn]] void EmergencyExit(std::int64_t now_ns);
  // The deadline (CLOCK_MONOTONIC ns) of the timeout now running, or 0 when none.
  std::int64_t Deadline() const;

  flight::FlightRing& ring_;
  EventWriter& events_;
  WatchdogOptions options_;
  std::atomic<bool> step_timeout_on_{true};
  std::atomic<std::int64_t> reporting_since_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread watch_, monitor_, publisher_;
};

}  // namespace trainyard::engine
