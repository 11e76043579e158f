#pragma once

#include <string>

namespace trainyard {

// Told that a job has newly committed events (or a new job row), after the commit and
// outside every lock of the writer. Exporters (MLflow, ...) read the events themselves
// from the store from their own cursor, so an observer that falls behind or restarts
// loses nothing. OnCommitted must not block: it runs on the ingest path.
class EventObserver {
 public:
  virtual ~EventObserver() = default;
  virtual void OnCommitted(const std::string& job_id) = 0;
};

}  // namespace trainyard
