// MLflow's tracking REST API (/api/2.0/mlflow/...) over common/http: the five calls the
// exporter makes, each answered with a value or a Status that names the endpoint, the
// HTTP status and MLflow's error_code (or what was wrong with the answer: not JSON, a
// field missing), so a retry loop can log it as it is.
//
// Thread-compatible: one exporter thread uses it.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/mlflow/mlflow_payload.h"

namespace trainyard::mlflow {

struct MlflowClientOptions {
  std::string uri;  // the tracking server, e.g. http://mlflow:5000 (checked by ValidateEndpointUrl)
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(15);
  std::size_t max_response_bytes = 4 << 20;
  const std::atomic<bool>* cancel = nullptr;  // ends a request in flight (shutdown)
};

class MlflowClient {
 public:
  explicit MlflowClient(MlflowClientOptions options);

  // The experiment's id, created when there is none (a create that races another
  // creator reads it again).
  absl::StatusOr<std::string> GetOrCreateExperiment(const std::string& name);
  // The active run of `experiment_id` whose tag `key` is `value`, if any.
  absl::StatusOr<std::optional<std::string>> FindRun(const std::string& experiment_id, const std::string& key,
                                                     const std::string& value);
  absl::StatusOr<std::string> CreateRun(const std::string& experiment_id, const std::string& run_name,
                                        int64_t start_ms, const std::vector<KeyValue>& tags);
  absl::Status LogBatch(const std::string& run_id, const std::vector<Metric>& metrics,
                        const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags);
  absl::Status UpdateRun(const std::string& run_id, const std::string& status, int64_t end_ms);

 private:
  // One call; an HTTP status other than 200 is an error carrying MLflow's error_code
  // (FAILED_PRECONDITION with "error_code RESOURCE_DOES_NOT_EXIST" in it, ...); 200
  // with a body that is not a JSON object is DATA_LOSS.
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path, const std::string& body);

  MlflowClientOptions options_;
};

// MLflow's error_code of a failed call ("RESOURCE_DOES_NOT_EXIST", ...); "" when the
// failure was not an MLflow error answer.
std::string MlflowErrorCode(const absl::Status& status);

}  // namespace trainyard::mlflow
