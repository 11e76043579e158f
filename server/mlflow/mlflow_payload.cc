#include "server/mlflow/mlflow_payload.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"
#include "common/events/proto_json.h"

namespace trainyard::mlflow {
namespace {

using nlohmann::json;

// Length of the longest prefix of valid UTF-8 `s` of at most `max` bytes that ends on
// a character boundary.
std::size_t Utf8Prefix(std::string_view s, std::size_t max) {
  if (s.size() <= max) return s.size();
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

void Flatten(const json& value, const std::string& prefix, SpecParams* out) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [key, child] : value.items()) {
      Flatten(child, prefix.empty() ? key : absl::StrCat(prefix, ".", key), out);
    }
    return;
  }
  if (prefix.empty()) return;
  if (prefix.size() > kMaxKeyBytes) {
    out->notes.push_back(
        absl::StrCat("param key ", Quoted(prefix), " is longer than ", kMaxKeyBytes, " bytes; not logged"));
    return;
  }
  // A string param is its text, anything else its JSON (a number, a bool, a list).
  const std::string text =
      value.is_string() ? value.get<std::string>() : value.dump(-1, ' ', false, json::error_handler_t::replace);
  bool cut = false;
  std::string fitted = FitValue(text, kMaxParamValueBytes, &cut);
  if (cut) {
    out->notes.push_back(absl::StrCat("param ", prefix, " is ", text.size(), " bytes, past MLflow's ",
                                      kMaxParamValueBytes, "; logged cut, ending in ", kTruncatedMarker, "N bytes]"));
  }
  out->params.push_back({prefix, std::move(fitted)});
}

json Value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

json Pairs(const std::vector<KeyValue>& kvs) {
  json out = json::array();
  for (const KeyValue& kv : kvs) out.push_back({{"key", kv.key}, {"value", kv.value}});
  return out;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string FitValue(std::string_view value, std::size_t max_bytes, bool* cut) {
  std::string valid = IsUtf8(value) ? std::string(value) : ToValidUtf8(value);
  if (cut != nullptr) *cut = valid.size() > max_bytes;
  if (valid.size() <= max_bytes) return valid;
  // The marker's length depends on the count it names; 20 digits bound any size_t.
  const std::size_t reserve = sizeof(kTruncatedMarker) - 1 + 20 + sizeof(" bytes]") - 1;
  const std::size_t keep = Utf8Prefix(valid, max_bytes > reserve ? max_bytes - reserve : 0);
  return absl::StrCat(valid.substr(0, keep), kTruncatedMarker, valid.size() - keep, " bytes]");
}

SpecParams FlattenSpec(const v1::JobSpec& spec) {
  SpecParams out;
  const json j = json::parse(ToJsonLine(spec), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    out.notes.push_back("the spec could not be printed as JSON; no params logged");
    return out;
  }
  Flatten(j, "", &out);
  std::sort(out.params.begin(), out.params.end(), [](const KeyValue& a, const KeyValue& b) { return a.key < b.key; });
  return out;
}

int64_t ToUnixMs(const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; }

std::string RunStatusFor(v1::Job::State state) {
  switch (state) {
    case v1::Job::SUCCEEDED:
      return "FINISHED";
    case v1::Job::FAILED:
      return "FAILED";
    case v1::Job::CANCELLED:
      return "KILLED";
    default:
      return "";
  }
}

std::string AppendEventMetrics(const v1::Event& event, Totals* totals, std::vector<Metric>* out) {
  const int64_t ts = ToUnixMs(event.time());
  auto add = [&](const char* key, double value, int64_t step) { out->push_back({key, value, ts, step}); };
  if (event.attempt() > totals->attempt) {
    totals->attempt = event.attempt();
    add("job/attempt", event.attempt(), totals->last_step);
  }
  switch (event.payload_case()) {
    case v1::Event::kStepMetrics: {
      const v1::StepMetrics& m = event.step_metrics();
      const int64_t step = m.step();
      totals->last_step = step;
      add("train/loss", m.loss(), step);
      add("train/lr", m.lr(), step);
      add("train/grad_norm", m.grad_norm(), step);
      add("train/tokens_per_s", m.tokens_per_s(), step);
      add("train/model_tflops", m.model_tflops(), step);
      add("train/mfu", m.mfu(), step);
      add("train/step_ms", m.step_ms(), step);
      add("train/data_ms", m.data_ms(), step);
      add("train/tokens", static_cast<double>(m.tokens()), step);
      add("memory/peak_rss_mb", m.peak_rss_mb(), step);
      add("memory/peak_tensor_bytes", static_cast<double>(m.peak_tensor_bytes()), step);
      if (m.epoch() > 0) add("train/epoch", static_cast<double>(m.epoch()), step);
      if (m.expert_load_size() > 0) {
        add("moe/expert_imbalance", m.imbalance(), step);
        add("moe/dropped_tokens", static_cast<double>(m.dropped_tokens()), step);
        const int n = std::min(m.expert_load_size(), kMaxExpertMetrics);
        for (int i = 0; i < n; ++i) {
          out->push_back({absl::StrCat("moe/expert_load/", i), static_cast<double>(m.expert_load(i)), ts, step});
        }
      }
      break;
    }
    case v1::Event::kValidation: {
      const v1::Validation& v = event.validation();
      add("val/loss", v.loss(), v.step());
      add("val/tokens", static_cast<double>(v.tokens()), v.step());
      add("val/ms", v.ms(), v.step());
      break;
    }
    case v1::Event::kCompile:
      if (event.compile().kind() == v1::CompileEvent::RECOMPILE) {
        add("compile/recompiles", static_cast<double>(++totals->recompiles), totals->last_step);
      }
      break;
    case v1::Event::kStall:
      add("job/stalls", static_cast<double>(++totals->stalls),
          event.stall().step() > 0 ? event.stall().step() : totals->last_step);
      break;
    case v1::Event::kJobState:
      return RunStatusFor(event.job_state().state());
    default:
      break;
  }
  return "";
}

std::vector<KeyValue> RunTags(const v1::Job& job, int32_t attempt) {
  return {{"trainyard.job_id", FitValue(job.id(), kMaxTagValueBytes)},
          {"trainyard.owner", FitValue(job.owner(), kMaxTagValueBytes)},
          {"trainyard.attempt", absl::StrCat(attempt)},
          {"mlflow.user", FitValue(job.owner(), kMaxTagValueBytes)}};
}

std::string LogBatchBody(const std::string& run_id, const std::vector<Metric>& metrics,
                         const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  json m = json::array();
  for (const Metric& x : metrics) {
    m.push_back({{"key", x.key}, {"value", Value(x.value)}, {"timestamp", x.timestamp_ms}, {"step", x.step}});
  }
  return Dump({{"run_id", run_id}, {"metrics", m}, {"params", Pairs(params)}, {"tags", Pairs(tags)}});
}

std::string CreateRunBody(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                          const std::vector<KeyValue>& tags) {
  return Dump({{"experiment_id", experiment_id},
               {"run_name", FitValue(run_name, kMaxTagValueBytes)},
               {"start_time", start_ms},
               {"tags", Pairs(tags)}});
}

std::string UpdateRunBody(const std::string& run_id, const std::string& status, int64_t end_ms) {
  return Dump({{"run_id", run_id}, {"status", status}, {"end_time", end_ms}});
}

std::string SearchRunBody(const std::string& experiment_id, const std::string& tag_key, const std::string& tag_value) {
  // Job ids are [a-z0-9-]; quotes are escaped anyway so the filter cannot be broken out of.
  std::string quoted;
  for (char c : tag_value) {
    if (c == '\'' || c == '\\') quoted.push_back('\\');
    quoted.push_back(c);
  }
  return Dump({{"experiment_ids", json::array({experiment_id})},
               {"filter", absl::StrCat("tags.`", tag_key, "` = '", quoted, "'")},
               {"max_results", 2}});
}

}  // namespace trainyard::mlflow
