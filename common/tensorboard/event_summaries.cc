#include "common/tensorboard/event_summaries.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"
#include "common/events/proto_json.h"

namespace trainyard::tensorboard {

namespace {

double WallTime(const v1::Event& e) { return static_cast<double>(e.time().seconds()) + e.time().nanos() / 1e9; }

class Records {
 public:
  Records(double wall_time, int64_t step) : wall_time_(wall_time), step_(step) {}
  void Scalar(const std::string& tag, double value) {
    Event& e = out_.emplace_back();
    e.set_wall_time(wall_time_);
    e.set_step(step_);
    Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  std::vector<Event> Take() { return std::move(out_); }

 private:
  double wall_time_;
  int64_t step_;
  std::vector<Event> out_;
};

}  // namespace

std::vector<Event> Summarize(const v1::Event& event, AttemptCounters* counters) {
  const double wall = WallTime(event);
  switch (event.payload_case()) {
    case v1::Event::kStepMetrics: {
      const v1::StepMetrics& m = event.step_metrics();
      counters->last_step = std::max(counters->last_step, m.step());
      Records r(wall, m.step());
      r.Scalar("train/loss", m.loss());
      r.Scalar("train/grad_norm", m.grad_norm());
      r.Scalar("train/lr", m.lr());
      r.Scalar("train/tokens", static_cast<double>(m.tokens()));
      // 0 means "not known" for these: the synthetic dataset has no epochs, a device
      // without a known peak has no MFU, a rank without tracking has no tensor peak.
      if (m.epoch() > 0) r.Scalar("train/epoch", static_cast<double>(m.epoch()));
      r.Scalar("perf/tokens_per_s", m.tokens_per_s());
      r.Scalar("perf/model_tflops", m.model_tflops());
      if (m.mfu() != 0) r.Scalar("perf/mfu", m.mfu());
      r.Scalar("perf/step_ms", m.step_ms());
      r.Scalar("perf/data_ms", m.data_ms());
      r.Scalar("memory/peak_rss_mb", m.peak_rss_mb());
      if (m.peak_tensor_bytes() > 0) r.Scalar("memory/peak_tensor_bytes", static_cast<double>(m.peak_tensor_bytes()));
      if (m.expert_load_size() > 0) {
        r.Scalar("experts/imbalance", m.imbalance());
        r.Scalar("experts/dropped_tokens", static_cast<double>(m.dropped_tokens()));
        for (int i = 0; i < m.expert_load_size(); ++i) {
          r.Scalar(absl::StrCat("experts/load/expert", i), static_cast<double>(m.expert_load(i)));
        }
      }
      return r.Take();
    }
    case v1::Event::kValidation: {
      const v1::Validation& v = event.validation();
      Records r(wall, v.step());
      r.Scalar("val/loss", v.loss());
      r.Scalar("val/tokens", static_cast<double>(v.tokens()));
      r.Scalar("val/ms", v.ms());
      return r.Take();
    }
    case v1::Event::kCompile: {
      const v1::CompileEvent& c = event.compile();
      // A compile event has no step of its own: the attempt's latest, so the file's
      // steps never go back (TensorBoard would drop the later points of a tag).
      Records r(wall, counters->last_step);
      switch (c.kind()) {
        case v1::CompileEvent::COMPILE:
          r.Scalar("compile/compiles", static_cast<double>(++counters->compiles));
          break;
        case v1::CompileEvent::RECOMPILE:
          r.Scalar("compile/recompiles", static_cast<double>(++counters->recompiles));
          break;
        case v1::CompileEvent::GRAPH_BREAK:
          r.Scalar("compile/graph_breaks", static_cast<double>(++counters->graph_breaks));
          break;
        default:
          break;
      }
      if ((c.kind() == v1::CompileEvent::COMPILE || c.kind() == v1::CompileEvent::RECOMPILE) && c.compile_ms() > 0) {
        r.Scalar("compile/compile_ms", c.compile_ms());
      }
      return r.Take();
    }
    case v1::Event::kStall: {
      const v1::Stall& s = event.stall();
      Records r(wall, s.step());
      r.Scalar("faults/stalls", static_cast<double>(++counters->stalls));
      r.Scalar("faults/stall_waited_s", s.waited_s());
      return r.Take();
    }
    case v1::Event::kCheckpoint: {
      const v1::CheckpointSaved& c = event.checkpoint();
      Records r(wall, c.step());
      r.Scalar("checkpoint/bytes", static_cast<double>(c.bytes()));
      r.Scalar("checkpoint/blocked_ms", c.blocked_ms());
      r.Scalar("checkpoint/write_ms", c.write_ms());
      if (!c.metric_name().empty()) r.Scalar("checkpoint/metric", c.metric());
      return r.Take();
    }
    case v1::Event::kCheckpointsPruned: {
      const v1::CheckpointsPruned& p = event.checkpoints_pruned();
      Records r(wall, p.step());
      r.Scalar("checkpoint/bytes_freed", static_cast<double>(p.bytes_freed()));
      r.Scalar("checkpoint/bytes_kept", static_cast<double>(p.bytes_kept()));
      r.Scalar("checkpoint/kept", static_cast<double>(p.kept()));
      return r.Take();
    }
    default:
      return {};
  }
}

Event FileVersionEvent(double wall_time) {
  Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  return e;
}

std::string SpecText(const v1::JobSpec& spec) {
  // proto3 JSON is one line; indented, it reads as the spec's sections.
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(ToJsonLine(spec), nullptr, false);
  const std::string text =
      json.is_discarded() ? ToJsonLine(spec) : json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  return ToValidUtf8(text);
}

Event SpecTextEvent(const v1::JobSpec& spec, double wall_time) {
  Event e;
  e.set_wall_time(wall_time);
  e.set_step(0);
  Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(kSpecTag);
  SummaryMetadata* meta = v->mutable_metadata();
  meta->mutable_plugin_data()->set_plugin_name("text");
  meta->set_data_class(DATA_CLASS_TENSOR);
  TensorProto* t = v->mutable_tensor();
  t->set_dtype(DT_STRING);
  t->mutable_tensor_shape();  // a scalar string
  t->add_string_val(absl::StrCat("```json\n", SpecText(spec), "\n```"));
  return e;
}

}  // namespace trainyard::tensorboard
