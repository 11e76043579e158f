// Writes a rank's events to one stream (the rank's stdout), one line each, through the
// rank line protocol (common/events/rank_line.h): each is a trainyard.v1.Event with
// `time` and one payload, printed by protobuf's own JSON printer. The rank stamps
// nothing else: the worker (or trainyard-train) that reads the stream knows the job,
// attempt and rank, and numbers the lines.
//
// Thread-safe: the checkpoint writer's background thread reports through it while the
// training loop does; each line is written whole. The watchdog's last-resort line
// (diagnostics/watchdog.h), written when another thread may hold the lock forever,
// comes from RankEventLine and a raw write instead.
#pragma once

#include <functional>
#include <mutex>
#include <ostream>
#include <string>

#include "common/flight/artifact_file.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard::engine {

class EventWriter {
 public:
  // `now` is injectable so tests get stable timestamps.
  explicit EventWriter(std::ostream& out,
                       std::function<google::protobuf::Timestamp()> now = &EventWriter::Now);

  void Log(const std::string& level, const std::string& message);
  void Step(const v1::StepMetrics& metrics);
  void Compile(const v1::CompileEvent& compile);
  void Checkpoint(const v1::CheckpointSaved& checkpoint);
  void CheckpointsPruned(const v1::CheckpointsPruned& pruned);
  void Validation(const v1::Validation& validation);
  void Stall(const v1::Stall& stall);
  void Artifact(const v1::ArtifactRef& artifact);

  // The wall clock as a protobuf Timestamp (millisecond resolution).
  static google::protobuf::Timestamp Now();

 private:
  void Emit(v1::Event event);

  std::mutex mu_;  // guards out_
  std::ostream& out_;
  std::function<google::protobuf::Timestamp()> now_;
};

// The ArtifactRef a rank sends for a file it wrote (uri file://PATH): the worker
// checks and uploads it.
v1::ArtifactRef ArtifactRefOf(const flight::WrittenArtifact& file, const std::string& name, const std::string& kind);

}  // namespace trainyard::engine
