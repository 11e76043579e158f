#include "server/mlflow/mlflow_metrics.h"

namespace trainyard::mlflow {
namespace {

prometheus::Family<prometheus::Counter>& Requests(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("trainyard_mlflow_requests_total")
      .Help("Requests to MLflow's REST API by outcome (failed: transport error, timeout, or an answer "
            "other than HTTP 200 with a JSON object; each is retried)")
      .Register(registry);
}

}  // namespace

MlflowMetrics::MlflowMetrics(prometheus::Registry& registry)
    : outbox_events_(prometheus::BuildGauge()
                         .Name("trainyard_mlflow_outbox_events")
                         .Help("Committed events of tracked jobs that MLflow has not acknowledged yet (read "
                               "back from the store when sent)")
                         .Register(registry)
                         .Add({})),
      outbox_jobs_(prometheus::BuildGauge()
                       .Name("trainyard_mlflow_outbox_jobs")
                       .Help("Jobs with events or a run status still to send to MLflow")
                       .Register(registry)
                       .Add({})),
      requests_(Requests(registry)),
      requests_ok_(requests_.Add({{"outcome", "ok"}})),
      requests_failed_(requests_.Add({{"outcome", "failed"}})),
      events_sent_(prometheus::BuildCounter()
                       .Name("trainyard_mlflow_events_sent_total")
                       .Help("Events MLflow acknowledged (their metrics logged)")
                       .Register(registry)
                       .Add({})) {}

}  // namespace trainyard::mlflow
