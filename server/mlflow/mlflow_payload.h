// What the controller sends MLflow, as pure functions of a job and its stored events:
// the spec as params, each event's metrics, the run status a job's end maps to, and
// the JSON bodies of the REST calls. No I/O, so every limit is tested with values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard::mlflow {

// MLflow's documented limits (REST API, runs/log-batch): what every backend accepts.
inline constexpr std::size_t kMaxKeyBytes = 250;
inline constexpr std::size_t kMaxParamValueBytes = 6000;
inline constexpr std::size_t kMaxTagValueBytes = 5000;
inline constexpr int kMaxParamsPerBatch = 100;
inline constexpr int kMaxTagsPerBatch = 100;
inline constexpr int kMaxMetricsPerBatch = 1000;
// Per-expert load series per step; an event's metrics must fit one batch.
inline constexpr int kMaxExpertMetrics = 256;
// What a cut value ends with, followed by how many bytes were cut.
inline constexpr char kTruncatedMarker[] = "...[truncated ";

struct Metric {
  std::string key;
  double value = 0;  // NaN and +-inf are sent as proto3 JSON's "NaN"/"Infinity"
  int64_t timestamp_ms = 0;
  int64_t step = 0;
};

struct KeyValue {
  std::string key;
  std::string value;
};

// `value` as valid UTF-8 (invalid bytes become U+FFFD) of at most `max_bytes`; a longer
// one is cut at a character boundary and ends with "...[truncated N bytes]". *cut
// (when not null) says whether it was cut.
std::string FitValue(std::string_view value, std::size_t max_bytes, bool* cut = nullptr);

struct SpecParams {
  std::vector<KeyValue> params;  // sorted by key
  // One line per value cut or key dropped (a key past kMaxKeyBytes), for the log.
  std::vector<std::string> notes;
};
// The resolved spec flattened to dotted keys (`model.dim`, `training.lr`); a list is
// one param holding its JSON.
SpecParams FlattenSpec(const v1::JobSpec& spec);

// The running values a job's metrics are computed from, carried from one batch to the
// next (and persisted with the job's cursor, so a restart resumes them).
struct Totals {
  int64_t recompiles = 0;
  int64_t stalls = 0;
  int64_t last_step = 0;  // of the latest step report: where compile counts are logged
  int32_t attempt = 0;    // the latest attempt seen
};

// Appends the metrics of `event` (step metrics, validation, recompiles, stalls, a new
// attempt) and moves `totals` on. Returns the MLflow run status when the event ends
// the job ("FINISHED", "FAILED", "KILLED"), else "".
std::string AppendEventMetrics(const v1::Event& event, Totals* totals, std::vector<Metric>* out);

// "FINISHED" for SUCCEEDED, "FAILED", "KILLED" for CANCELLED; "" for the rest.
std::string RunStatusFor(v1::Job::State state);

// Tags every run carries (MLflow's own mlflow.runName / mlflow.user too).
std::vector<KeyValue> RunTags(const v1::Job& job, int32_t attempt);

int64_t ToUnixMs(const google::protobuf::Timestamp& t);

// Request bodies.
std::string LogBatchBody(const std::string& run_id, const std::vector<Metric>& metrics,
                         const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags);
std::string CreateRunBody(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                          const std::vector<KeyValue>& tags);
std::string UpdateRunBody(const std::string& run_id, const std::string& status, int64_t end_ms);
std::string SearchRunBody(const std::string& experiment_id, const std::string& tag_key, const std::string& tag_value);

}  // namespace trainyard::mlflow
