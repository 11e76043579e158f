#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>

namespace trainyard {

// The store's series (server/state/event_compaction.h sets them after each retention pass):
// trainyard_store_size_bytes and trainyard_store_free_pages (trainyard.db's pages and
// its freelist), trainyard_store_compacted_jobs_total and
// trainyard_store_compacted_events_total, trainyard_store_vacuumed_pages_total,
// trainyard_store_retention_passes_total and
// trainyard_store_last_compaction_timestamp_seconds. Thread-safe (prometheus-cpp).
class StoreMetrics {
 public:
  explicit StoreMetrics(prometheus::Registry& registry);

  void SetFile(int64_t size_bytes, int64_t free_pages);
  // One retention pass ended at `unix_seconds`, having compacted `jobs` jobs, removed
  // `events` events and given `pages` free pages back to the file system.
  void PassDone(double unix_seconds, int jobs, int64_t events, int64_t pages);

 private:
  prometheus::Gauge& size_bytes_;
  prometheus::Gauge& free_pages_;
  prometheus::Counter& compacted_jobs_;
  prometheus::Counter& compacted_events_;
  prometheus::Counter& vacuumed_pages_;
  prometheus::Counter& passes_;
  prometheus::Gauge& last_pass_;
};

}  // namespace trainyard
