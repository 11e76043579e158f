// The line protocol between a rank and whoever reads its stdout (the worker's
// RankSupervisor, the controller's preflight runner, trainyard-train): each line is one
// trainyard.v1.Event in proto3 JSON with .proto field names, written by protobuf's own
// printer (RankEventLine) and read back strictly (ParseRankLine), so the engine, the
// worker and every other reader share the generated message and nothing else.
//
// A rank sets `time` and exactly one payload a rank may report: step_metrics, compile,
// log, artifact, stall, checkpoint or validation. It never sets job_id, seq, rank, attempt or
// source_seq: the reader stamps those (it knows which process wrote the line), so
// ParseRankLine clears whatever a line says of them. Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard {

// One stdout line: proto3 JSON (field names as in the .proto), fields at their default
// left out, non-finite doubles as "NaN"/"Infinity", no newline.
std::string RankEventLine(const v1::Event& event);

// Whether `line` is meant as an event (its first non-blank byte is '{'). Anything else
// a rank prints (a library's banner, a stray printf) is plain text, for a log line.
bool LooksLikeEvent(std::string_view line);

// The event of one line, strictly: INVALID_ARGUMENT naming the problem when the JSON
// does not parse, names a field Event does not have (a misspelled key anywhere in the
// payload), has no payload, or carries a payload a rank may not send (job_state). The
// fields the reader stamps come back cleared.
absl::StatusOr<v1::Event> ParseRankLine(std::string_view line);

}  // namespace trainyard
