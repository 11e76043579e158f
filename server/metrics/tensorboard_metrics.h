#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>

namespace trainyard {

// The --tensorboard-dir writer's series (server/tensorboard/tensorboard_exporter.h):
// trainyard_tensorboard_events_read_total (stored events read back for it),
// trainyard_tensorboard_records_written_total (TensorBoard records made durable),
// trainyard_tensorboard_write_errors_total (failed writes of a job's runs; retried from
// its last durable state), trainyard_tensorboard_queue_depth (jobs waiting for the
// writer), trainyard_tensorboard_queue_overflows_total (notifications dropped because
// the queue was full; such a job catches up at its next event or the next start).
// Thread-safe (prometheus-cpp).
class TensorBoardMetrics {
 public:
  explicit TensorBoardMetrics(prometheus::Registry& registry);

  void EventsRead(int64_t n) { events_read_.Increment(static_cast<double>(n)); }
  void RecordsWritten(int64_t n) { records_written_.Increment(static_cast<double>(n)); }
  void WriteError() { write_errors_.Increment(); }
  void SetQueueDepth(int64_t n) { queue_depth_.Set(static_cast<double>(n)); }
  void QueueOverflow() { overflows_.Increment(); }

 private:
  prometheus::Counter& events_read_;
  prometheus::Counter& records_written_;
  prometheus::Counter& write_errors_;
  prometheus::Gauge& queue_depth_;
  prometheus::Counter& overflows_;
};

}  // namespace trainyard
