#include "server/metrics/store_metrics.h"

namespace trainyard {

StoreMetrics::StoreMetrics(prometheus::Registry& registry)
    : size_bytes_(prometheus::BuildGauge()
                      .Name("trainyard_store_size_bytes")
                      .Help("Size of trainyard.db (pages times page size; the WAL not included)")
                      .Register(registry)
                      .Add({})),
      free_pages_(prometheus::BuildGauge()
                      .Name("trainyard_store_free_pages")
                      .Help("Pages of trainyard.db on its freelist: reused by new rows, or given back "
                            "by incremental vacuum")
                      .Register(registry)
                      .Add({})),
      compacted_jobs_(prometheus::BuildCounter()
                          .Name("trainyard_store_compacted_jobs_total")
                          .Help("Finished jobs whose events retention (--retain-finished) compacted")
                          .Register(registry)
                          .Add({})),
      compacted_events_(prometheus::BuildCounter()
                            .Name("trainyard_store_compacted_events_total")
                            .Help("Events removed by retention")
                            .Register(registry)
                            .Add({})),
      vacuumed_pages_(prometheus::BuildCounter()
                          .Name("trainyard_store_vacuumed_pages_total")
                          .Help("Free pages incremental vacuum gave back to the file system")
                          .Register(registry)
                          .Add({})),
      passes_(prometheus::BuildCounter()
                  .Name("trainyard_store_retention_passes_total")
                  .Help("Retention passes (compaction, then incremental vacuum) completed")
                  .Register(registry)
                  .Add({})),
      last_pass_(prometheus::BuildGauge()
                     .Name("trainyard_store_last_compaction_timestamp_seconds")
                     .Help("Unix time the last retention pass completed")
                     .Register(registry)
                     .Add({})) {}

void StoreMetrics::SetFile(int64_t size_bytes, int64_t free_pages) {
  size_bytes_.Set(static_cast<double>(size_bytes));
  free_pages_.Set(static_cast<double>(free_pages));
}

void StoreMetrics::PassDone(double unix_seconds, int jobs, int64_t events, int64_t pages) {
  compacted_jobs_.Increment(jobs);
  compacted_events_.Increment(static_cast<double>(events));
  vacuumed_pages_.Increment(static_cast<double>(pages));
  passes_.Increment();
  last_pass_.Set(unix_seconds);
}

}  // namespace trainyard
