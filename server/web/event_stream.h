// The job page's live events: GET /api/jobs/ID/stream, a server-sent event stream
// (text/event-stream). Each event is
//   id: <seq>
//   event: event
//   data: <the event's proto3 JSON, as /events serves it>
// and the stream ends with `event: end` once the job is settled and every stored event
// was sent (or `event: error` when its events cannot be read, e.g. compacted). A
// `: keep-alive` comment goes out after kKeepAlive without events, so a dead client is
// noticed. A client resumes after a dropped connection from the last id it saw
// (Last-Event-ID header, or ?after=).
//
// civetweb runs one thread per connection, and a stream holds its thread while open:
// at most `max_streams` run at once (the server has that many threads more than plain
// requests need); one more is refused with 503 and Retry-After, and the page then
// polls /events instead. Back-pressure is the gRPC watch's (watch_reactor.h): the
// hub's wake-up only flags the stream, and the stream copies committed events out of
// the hub's watch cache (or reads the store when behind it) on its own thread, so a
// slow browser blocks its own write and nothing else; ingestion never waits for it.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/state/event_hub.h"
#include "server/store/job_store.h"
#include "server/web/web_http.h"

namespace trainyard::web {

inline constexpr int kMaxEventStreams = 8;
inline constexpr absl::Duration kKeepAlive = absl::Seconds(15);

class EventStreams {
 public:
  // `store` and `hub` must outlive every stream (Stop, then wait for the server).
  EventStreams(JobStore* store, EventHub* hub, int max_streams = kMaxEventStreams);

  // The body of a stream of job `job_id`'s events with seq > `after` (the caller has
  // checked that the job exists and may be seen); RESOURCE_EXHAUSTED past the bound.
  absl::StatusOr<StreamBody> Open(const std::string& job_id, int64_t after);
  // Ends every stream at its next wake-up (with `event: end`) and refuses new ones.
  void Stop();
  int open_streams();

  // The state streams share with the registry (event_stream.cc), locked inside.
  struct Shared;

 private:
  JobStore* const store_;
  EventHub* const hub_;
  const int max_streams_;
  std::shared_ptr<Shared> shared_;
};

// One SSE frame of an event: "id: SEQ\nevent: event\ndata: JSON\n\n".
std::string EventFrame(const v1::Event& event);

}  // namespace trainyard::web
