#include "server/mlflow/mlflow_client.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "common/http/http_client.h"

namespace trainyard::mlflow {
namespace {

using nlohmann::json;

constexpr char kApi[] = "/api/2.0/mlflow/";
constexpr char kErrorCodeTag[] = "error_code ";

std::string Trimmed(std::string uri) {
  while (!uri.empty() && uri.back() == '/') uri.pop_back();
  return uri;
}

// A string field of `j` at `path` (a.b.c), or DATA_LOSS naming it.
absl::StatusOr<std::string> StringAt(const json& j, std::initializer_list<const char*> path,
                                     const std::string& what) {
  const json* at = &j;
  std::string name;
  for (const char* key : path) {
    name = name.empty() ? key : absl::StrCat(name, ".", key);
    if (!at->is_object() || !at->contains(key)) {
      return absl::DataLossError(absl::StrCat(what, ": the answer has no ", name));
    }
    at = &(*at)[key];
  }
  if (!at->is_string() || at->get<std::string>().empty()) {
    return absl::DataLossError(absl::StrCat(what, ": ", name, " is not a non-empty string"));
  }
  return at->get<std::string>();
}

}  // namespace

std::string MlflowErrorCode(const absl::Status& status) {
  const absl::string_view m = status.message();
  const std::size_t at = m.find(kErrorCodeTag);
  if (at == absl::string_view::npos) return "";
  std::size_t end = at + sizeof(kErrorCodeTag) - 1;
  const std::size_t begin = end;
  while (end < m.size() && (absl::ascii_isupper(m[end]) || m[end] == '_')) ++end;
  return std::string(m.substr(begin, end - begin));
}

MlflowClient::MlflowClient(MlflowClientOptions options) : options_(std::move(options)) {
  options_.uri = Trimmed(options_.uri);
}

absl::StatusOr<json> MlflowClient::Call(const std::string& method, const std::string& path, const std::string& body) {
  http::Request request;
  request.method = method;
  request.url = absl::StrCat(options_.uri, kApi, path);
  if (method == "POST") {
    request.headers.push_back({"Content-Type", "application/json"});
    request.body = body;
  }
  request.connect_timeout = options_.connect_timeout;
  request.total_timeout = options_.request_timeout;
  request.max_response_bytes = options_.max_response_bytes;
  request.max_redirects = 2;
  request.cancel = options_.cancel;
  const std::string what = absl::StrCat("MLflow ", method, " ", http::RedactUrl(request.url));
  absl::StatusOr<http::Response> response = http::Send(request);
  if (!response.ok()) return absl::Status(response.status().code(), absl::StrCat(what, ": ", response.status().message()));
  const json parsed = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (response->status != 200) {
    std::string detail;
    if (parsed.is_object() && parsed.contains("error_code") && parsed["error_code"].is_string()) {
      detail = absl::StrCat(kErrorCodeTag, parsed["error_code"].get<std::string>());
      if (parsed.contains("message") && parsed["message"].is_string()) {
        absl::StrAppend(&detail, ": ", Quote(parsed["message"].get<std::string>()));
      }
    } else {
      detail = absl::StrCat("a ", response->content_type.empty() ? "body" : Quote(response->content_type),
                            " body of ", response->body.size(), " bytes: ", Quote(response->body));
    }
    const std::string message = absl::StrCat(what, " answered HTTP ", response->status, " (", detail, ")");
    if (response->status == 404 || response->status == 400) return absl::FailedPreconditionError(message);
    return absl::UnavailableError(message);
  }
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::DataLossError(absl::StrCat(what, " answered HTTP 200 with ",
                                            response->content_type.empty() ? "a body" : Quote(response->content_type),
                                            " that is not a JSON object (", response->body.size(),
                                            " bytes: ", Quote(response->body), ")"));
  }
  return parsed;
}

absl::StatusOr<std::string> MlflowClient::GetOrCreateExperiment(const std::string& name) {
  std::string encoded;
  for (unsigned char c : name) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      encoded.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&encoded, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<json> got = Call("GET", absl::StrCat("experiments/get-by-name?experiment_name=", encoded), "");
    if (got.ok()) return StringAt(*got, {"experiment", "experiment_id"}, "experiments/get-by-name");
    if (MlflowErrorCode(got.status()) != "RESOURCE_DOES_NOT_EXIST") return got.status();
    absl::StatusOr<json> created = Call("POST", "experiments/create", json{{"name", name}}.dump());
    if (created.ok()) return StringAt(*created, {"experiment_id"}, "experiments/create");
    // Another client created it between the two calls: read it again.
    if (MlflowErrorCode(created.status()) != "RESOURCE_ALREADY_EXISTS") return created.status();
  }
  return absl::UnavailableError(absl::StrCat("MLflow experiment ", Quoted(name),
                                             " neither exists nor can be created"));
}

absl::StatusOr<std::optional<std::string>> MlflowClient::FindRun(const std::string& experiment_id,
                                                                  const std::string& key, const std::string& value) {
  TY_ASSIGN_OR_RETURN(json found, Call("POST", "runs/search", SearchRunBody(experiment_id, key, value)));
  if (!found.contains("runs")) return std::optional<std::string>();
  if (!found["runs"].is_array() || found["runs"].empty()) {
    if (found["runs"].is_array()) return std::optional<std::string>();
    return absl::DataLossError("runs/search: runs is not a list");
  }
  TY_ASSIGN_OR_RETURN(std::string id, StringAt(found["runs"][0], {"info", "run_id"}, "runs/search"));
  return std::optional<std::string>(std::move(id));
}

absl::StatusOr<std::string> MlflowClient::CreateRun(const std::string& experiment_id, const std::string& run_name,
                                                    int64_t start_ms, const std::vector<KeyValue>& tags) {
  TY_ASSIGN_OR_RETURN(json created, Call("POST", "runs/create", CreateRunBody(experiment_id, run_name, start_ms, tags)));
  return StringAt(created, {"run", "info", "run_id"}, "runs/create");
}

absl::Status MlflowClient::LogBatch(const std::string& run_id, const std::vector<Metric>& metrics,
                                    const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  return Call("POST", "runs/log-batch", LogBatchBody(run_id, metrics, params, tags)).status();
}

absl::Status MlflowClient::UpdateRun(const std::string& run_id, const std::string& status, int64_t end_ms) {
  return Call("POST", "runs/update", UpdateRunBody(run_id, status, end_ms)).status();
}

}  // namespace trainyard::mlflow
