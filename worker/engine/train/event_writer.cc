#include "worker/engine/train/event_writer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <utility>

namespace trainyard::engine {
namespace {

// proto3 JSON has no literal for non-finite doubles; it spells them as strings.
nlohmann::json Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

EventWriter::EventWriter(std::ostream& out, int rank, int attempt,
                         std::function<std::string()> now_rfc3339)
    : out_(out), rank_(rank), attempt_(attempt), now_(std::move(now_rfc3339)) {}

std::string EventWriter::NowRfc3339() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t secs = system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(ms));
  return buf;
}

void EventWriter::Log(const std::string& level, const std::string& message) {
  Emit("log", {{"level", level}, {"message", message}});
}

void EventWriter::Step(const StepMetrics& m) {
  Emit("step_metrics", {{"step", m.step},
                        {"loss", Number(m.loss)},
                        {"grad_norm", Number(m.grad_norm)},
                        {"lr", Number(m.lr)},
                        {"tokens_per_s", Number(m.tokens_per_s)},
                        {"model_tflops", Number(m.model_tflops)},
                        {"mfu", Number(m.mfu)},
                        {"step_ms", Number(m.step_ms)},
                        {"data_ms", Number(m.data_ms)},
                        {"peak_rss_mb", Number(m.peak_rss_mb)},
                        {"expert_load", m.expert_load},
                        {"imbalance", Number(m.imbalance)},
                        {"tokens", m.tokens}});
}

void EventWriter::Compile(nlohmann::json payload) { Emit("compile", std::move(payload)); }

void EventWriter::Checkpoint(nlohmann::json payload) { Emit("checkpoint", std::move(payload)); }

void EventWriter::Stall(nlohmann::json payload) { Emit("stall", std::move(payload)); }

void EventWriter::Artifact(nlohmann::json payload) { Emit("artifact", std::move(payload)); }

void EventWriter::Emit(const char* payload_name, nlohmann::json payload) {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json event = {{"rank", rank_},
                          {"attempt", attempt_},
                          {"source_seq", ++source_seq_},
                          {"time", now_()}};
  event[payload_name] = std::move(payload);
  // Replace invalid UTF-8 (e.g. from a file path in an error) rather than throw.
  out_ << event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  out_.flush();
}

}  // namespace trainyard::engine
