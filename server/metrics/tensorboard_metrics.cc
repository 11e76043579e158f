#include "server/metrics/tensorboard_metrics.h"

namespace trainyard {

TensorBoardMetrics::TensorBoardMetrics(prometheus::Registry& registry)
    : events_read_(prometheus::BuildCounter()
                       .Name("trainyard_tensorboard_events_read_total")
                       .Help("Stored job events read by the --tensorboard-dir writer")
                       .Register(registry)
                       .Add({})),
      records_written_(prometheus::BuildCounter()
                           .Name("trainyard_tensorboard_records_written_total")
                           .Help("TensorBoard records written and fsynced under --tensorboard-dir")
                           .Register(registry)
                           .Add({})),
      write_errors_(prometheus::BuildCounter()
                        .Name("trainyard_tensorboard_write_errors_total")
                        .Help("Failed writes of a job's TensorBoard runs (retried from the last durable state)")
                        .Register(registry)
                        .Add({})),
      queue_depth_(prometheus::BuildGauge()
                       .Name("trainyard_tensorboard_queue_depth")
                       .Help("Jobs with new events waiting for the TensorBoard writer")
                       .Register(registry)
                       .Add({})),
      overflows_(prometheus::BuildCounter()
                     .Name("trainyard_tensorboard_queue_overflows_total")
                     .Help("Jobs not queued for the TensorBoard writer because its queue was full")
                     .Register(registry)
                     .Add({})) {}

}  // namespace trainyard
