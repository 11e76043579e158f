#include "worker/engine/train/event_writer.h"

#include <chrono>
#include <utility>

#include "common/events/rank_line.h"

namespace trainyard::engine {

EventWriter::EventWriter(std::ostream& out, std::function<google::protobuf::Timestamp()> now)
    : out_(out), now_(std::move(now)) {}

google::protobuf::Timestamp EventWriter::Now() {
  using namespace std::chrono;
  const int64_t ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  google::protobuf::Timestamp t;
  t.set_seconds(ms / 1000);
  t.set_nanos(static_cast<int32_t>(ms % 1000) * 1000000);
  return t;
}

void EventWriter::Log(const std::string& level, const std::string& message) {
  v1::Event e;
  e.mutable_log()->set_level(level);
  e.mutable_log()->set_message(message);
  Emit(std::move(e));
}

void EventWriter::Step(const v1::StepMetrics& metrics) {
  v1::Event e;
  *e.mutable_step_metrics() = metrics;
  Emit(std::move(e));
}

void EventWriter::Compile(const v1::CompileEvent& compile) {
  v1::Event e;
  *e.mutable_compile() = compile;
  Emit(std::move(e));
}

void EventWriter::Validation(const v1::Validation& validation) {
  v1::Event e;
  *e.mutable_validation() = validation;
  Emit(std::move(e));
}

void EventWriter::Checkpoint(const v1::CheckpointSaved& checkpoint) {
  v1::Event e;
  *e.mutable_checkpoint() = checkpoint;
  Emit(std::move(e));
}

void EventWriter::CheckpointsPruned(const v1::CheckpointsPruned& pruned) {
  v1::Event e;
  *e.mutable_checkpoints_pruned() = pruned;
  Emit(std::move(e));
}

void EventWriter::Stall(const v1::Stall& stall) {
  v1::Event e;
  *e.mutable_stall() = stall;
  Emit(std::move(e));
}

void EventWriter::Artifact(const v1::ArtifactRef& artifact) {
  v1::Event e;
  *e.mutable_artifact() = artifact;
  Emit(std::move(e));
}

void EventWriter::Emit(v1::Event event) {
  *event.mutable_time() = now_();
  // protobuf's printer writes valid UTF-8 only; a message with invalid bytes (a file
  // path in an error) has them replaced when it is set (see RankEventLine).
  const std::string line = RankEventLine(event);
  std::lock_guard<std::mutex> lock(mu_);
  out_ << line << '\n';
  out_.flush();
}

v1::ArtifactRef ArtifactRefOf(const flight::WrittenArtifact& file, const std::string& name, const std::string& kind) {
  v1::ArtifactRef ref;
  ref.set_name(name);
  ref.set_kind(kind);
  ref.set_size_bytes(file.size_bytes);
  ref.set_uri("file://" + file.path);
  ref.set_sha256(file.sha256);
  return ref;
}

}  // namespace trainyard::engine
