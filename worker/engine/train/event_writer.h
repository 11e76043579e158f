// Writes trainyard.v1.Event messages as JSON lines (proto3 JSON mapping, proto field
// names) to one stream, flushing each line: this is the only thing a rank writes to
// stdout, and the worker daemon parses it line by line. int64 fields are written as
// JSON numbers, which proto3 JSON parsers accept. Thread-safe: the checkpoint writer's
// background thread reports through it while the training loop does; each line is
// written whole. ReserveSourceSeq is lock-free, for the watchdog's last-resort line
// (diagnostics/watchdog.h) when another thread may hold the lock forever.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainyard::engine {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double tokens_per_s = 0;
  double model_tflops = 0;
  double mfu = 0;
  double step_ms = 0;
  double data_ms = 0;
  double peak_rss_mb = 0;
  std::vector<int64_t> expert_load;
  double imbalance = 0;
  int64_t tokens = 0;  // all DP ranks, since the previous report
};

class EventWriter {
 public:
  // `now_rfc3339` is injectable so tests get stable timestamps.
  EventWriter(std::ostream& out, int rank, int attempt,
              std::function<std::string()> now_rfc3339 = &EventWriter::NowRfc3339);

  void Log(const std::string& level, const std::string& message);
  void Step(const StepMetrics& m);
  // A CompileEvent payload (proto JSON field names; see compile/events/compile_event.h).
  void Compile(nlohmann::json payload);
  // A CheckpointSaved payload {step, path, bytes, blocked_ms, write_ms, dp, tp, ep}.
  void Checkpoint(nlohmann::json payload);
  // A Stall payload {collective, collective_seq, lagging_rank, waited_s, message,
  // waiting_ranks, step} (event.proto).
  void Stall(nlohmann::json payload);
  // An ArtifactRef payload {name, kind, size_bytes, uri, sha256}.
  void Artifact(nlohmann::json payload);

  // The next source_seq, taken without the lock (for a line written by other means).
  int64_t ReserveSourceSeq() { return ++source_seq_; }
  int rank() const { return rank_; }
  int attempt() const { return attempt_; }

  static std::string NowRfc3339();

 private:
  void Emit(const char* payload_name, nlohmann::json payload);

  std::mutex mu_;  // guards out_
  std::ostream& out_;
  int rank_;
  int attempt_;
  std::atomic<int64_t> source_seq_{0};
  std::function<std::string()> now_;
};

}  // namespace trainyard::engine
