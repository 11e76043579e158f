#pragma once

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/gpu_metrics.h"
#include "server/metrics/sharing_metrics.h"
#include "server/metrics/store_metrics.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// The controller's Prometheus series. Families and the fixed-label series are built
// once; per-job series are created when a job's first step arrives and removed a
// grace period after it ends. Thread-safe.
class ControllerMetrics {
 public:
  ControllerMetrics();

  // Serves /metrics on `address` (host:port; port 0 picks one). The port is the
  // process's own (civetweb never shares one). A failed bind names --metrics-listen, the
  // address and the reason (listen_probe.h): "address already in use", ...
  absl::Status Listen(const std::string& address);
  // The port /metrics is served on (the chosen one for port 0); 0 before Listen.
  int listening_port() const { return listening_port_; }
  std::shared_ptr<prometheus::Registry> registry() { return registry_; }

  void JobSubmitted() { submitted_.Increment(); }
  void JobRejected() { rejected_.Increment(); }
  void JobEntered(v1::Job::State state);
  // Moves one job between the trainyard_jobs{state} gauges (and trainyard_queue_depth,
  // the PENDING count). `from` is STATE_UNSPECIFIED for a new or recovered job.
  void JobMoved(v1::Job::State from, v1::Job::State to);
  // A job was placed, `waited` after it (re-)entered the queue.
  void JobPlaced(absl::Duration waited);
  void JobRestarted(const std::string& job_id);
  void StallReported(const std::string& job_id);
  // A job entered `state` at `now`. From SCHEDULED on, the job's counters exist (at 0),
  // so Prometheus's increase() sees their first increment; trainyard_job_running follows
  // RUNNING, and entering RUNNING counts as progress for
  // trainyard_job_last_progress_timestamp_seconds (a new attempt is not stalled by the
  // time its predecessor last stepped).
  void JobStateChanged(const std::string& job_id, v1::Job::State state, absl::Time now);
  // Workers the registry declared lost (silent or disconnected past the heartbeat timeout).
  void WorkersLost(int n) { workers_lost_.Increment(n); }
  void EventsIngested(int n) { events_.Increment(n); }
  // The wall time of committing one worker batch to the store.
  void IngestBatch(absl::Duration elapsed) { ingest_seconds_.Observe(absl::ToDoubleSeconds(elapsed)); }
  // gRPC server calls by service, method and final status code (a registered method of
  // ours, or "unknown"); `elapsed` is observed for unary calls only (a stream's life is
  // not a latency).
  void GrpcStarted(const std::string& full_method);
  void GrpcHandled(const std::string& full_method, int code, bool unary, absl::Duration elapsed);
  // Events not appended: for a job whose stream is closed (reason "job_ended"), or
  // that no worker may send (reason "invalid", request_validation::InvalidEvent).
  void EventsDropped(const std::string& reason, int n);
  void SetWorkersConnected(int n) { workers_connected_.Set(n); }
  void SetSlots(int total, int free) {
    slots_total_.Set(total);
    slots_free_.Set(free);
  }
  // A step report committed at `now` (the controller's clock: the time it arrived, not the
  // rank's, so a worker's replay after an outage counts as progress when it lands).
  // Its expert_load (tokens per routed expert, summed over the MoE layers) sets
  // trainyard_job_expert_tokens{expert} and trainyard_job_expert_load_imbalance_ratio
  // (max/mean), and its dropped_tokens trainyard_job_expert_dropped_tokens (0 when
  // dropless); a report without a load, or with a negative count, leaves them as they were.
  // Its epoch sets trainyard_job_epoch (0 for the synthetic dataset, which has none).
  void StepReported(const std::string& job_id, const v1::StepMetrics& step, absl::Time now = absl::Now());
  // A committed Validation: trainyard_job_validation_loss (the last one's, NaN included:
  // a diverged model's loss is what the gauge should say) and one more
  // trainyard_job_validations_total.
  void ValidationReported(const std::string& job_id, const v1::Validation& validation);
  // Checkpoint retention after a save (rank 0's CheckpointsPruned): the bytes it freed
  // add to trainyard_job_checkpoint_bytes_freed_total; the bytes and the count of
  // checkpoints left on disk become trainyard_job_checkpoint_bytes_kept and
  // trainyard_job_checkpoints_kept.
  void CheckpointsPruned(const std::string& job_id, const v1::CheckpointsPruned& pruned);
  void CompileReported(const std::string& job_id, const v1::CompileEvent& compile);
  // One finished preflight; `outcome` is a PreflightVerdictName() or "refused" (queue
  // full, runner binary missing, controller stopping). Other values are dropped.
  void PreflightFinished(const std::string& outcome, absl::Duration elapsed);
  void JobEnded(const std::string& job_id, absl::Time now);
  // Drops the series of jobs that ended more than `grace` ago.
  void Sweep(absl::Time now, absl::Duration grace);
  // The trainyard_worker_gpu_* gauges (gpu_metrics.h).
  GpuMetrics& gpus() { return gpus_; }
  // Preemptions, drains and the owners' slots and usage (sharing_metrics.h).
  SharingMetrics& sharing() { return sharing_; }
  // trainyard_store_* (retention, file size, vacuum).
  StoreMetrics& store() { return store_; }

 private:
  // Counters (and trainyard_job_running) exist from the job's first placement; the
  // step gauges from its first step report, so a job that never stepped shows no loss
  // or MFU of 0.
  struct JobSeries {
    prometheus::Gauge* running = nullptr;
    prometheus::Gauge* last_progress = nullptr;
    prometheus::Gauge* step = nullptr;
    prometheus::Gauge* loss = nullptr;
    prometheus::Gauge* tokens_per_s = nullptr;
    prometheus::Gauge* mfu = nullptr;
    prometheus::Gauge* step_seconds = nullptr;
    prometheus::Gauge* epoch = nullptr;
    prometheus::Gauge* validation_loss = nullptr;  // from the first Validation
    // From the first CheckpointsPruned.
    prometheus::Counter* checkpoint_bytes_freed = nullptr;
    prometheus::Gauge* checkpoint_bytes_kept = nullptr;
    prometheus::Gauge* checkpoints_kept = nullptr;
    // From the first step report that carries a usable expert_load.
    prometheus::Gauge* expert_imbalance = nullptr;
    prometheus::Gauge* expert_dropped = nullptr;
    std::vector<prometheus::Gauge*> expert_tokens;  // by routed expert index
    prometheus::Counter* tokens = nullptr;
    prometheus::Counter* restarts = nullptr;
    prometheus::Counter* stalls = nullptr;
    prometheus::Counter* validations = nullptr;
    absl::flat_hash_map<int, prometheus::Counter*> compile;
    absl::flat_hash_map<std::string, prometheus::Counter*> recompiles;  // by region
    absl::Time ended = absl::InfiniteFuture();
  };
  JobSeries& SeriesLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpertLoadLocked(const std::string& job_id, JobSeries& s, const v1::StepMetrics& step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The (service, method) labels of a full gRPC method name, bounded to our services.
  static std::pair<std::string, std::string> GrpcLabels(const std::string& full_method);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int listening_port_ = 0;
  prometheus::Counter& submitted_;
  prometheus::Counter& rejected_;
  prometheus::Counter& events_;
  prometheus::Family<prometheus::Counter>& dropped_family_;
  prometheus::Gauge& workers_connected_;
  prometheus::Gauge& slots_total_;
  prometheus::Gauge& slots_free_;
  prometheus::Counter& workers_lost_;
  prometheus::Family<prometheus::Counter>& transitions_family_;
  prometheus::Family<prometheus::Gauge>& step_family_;
  prometheus::Family<prometheus::Gauge>& loss_family_;
  prometheus::Family<prometheus::Gauge>& tokens_family_;
  prometheus::Family<prometheus::Gauge>& mfu_family_;
  prometheus::Family<prometheus::Counter>& compile_family_;
  prometheus::Family<prometheus::Gauge>& step_seconds_family_;
  prometheus::Family<prometheus::Gauge>& epoch_family_;
  prometheus::Family<prometheus::Gauge>& validation_loss_family_;
  prometheus::Family<prometheus::Counter>& validations_family_;
  prometheus::Family<prometheus::Counter>& checkpoint_bytes_freed_family_;
  prometheus::Family<prometheus::Gauge>& checkpoint_bytes_kept_family_;
  prometheus::Family<prometheus::Gauge>& checkpoints_kept_family_;
  prometheus::Family<prometheus::Gauge>& expert_imbalance_family_;
  prometheus::Family<prometheus::Gauge>& expert_tokens_family_;
  prometheus::Family<prometheus::Gauge>& expert_dropped_family_;
  prometheus::Family<prometheus::Counter>& tokens_total_family_;
  prometheus::Family<prometheus::Counter>& restarts_family_;
  prometheus::Family<prometheus::Counter>& stalls_family_;
  prometheus::Family<prometheus::Counter>& recompiles_family_;
  prometheus::Family<prometheus::Gauge>& running_family_;
  prometheus::Family<prometheus::Gauge>& last_progress_family_;
  prometheus::Family<prometheus::Gauge>& jobs_family_;
  absl::flat_hash_map<int, prometheus::Gauge*> jobs_by_state_;
  prometheus::Gauge& queue_depth_;
  prometheus::Histogram& scheduling_seconds_;
  prometheus::Histogram& ingest_seconds_;
  prometheus::Family<prometheus::Counter>& grpc_started_family_;
  prometheus::Family<prometheus::Counter>& grpc_handled_family_;
  prometheus::Family<prometheus::Histogram>& grpc_seconds_family_;
  absl::flat_hash_map<int, prometheus::Counter*> transitions_;
  prometheus::Family<prometheus::Counter>& preflights_family_;
  absl::flat_hash_map<std::string, prometheus::Counter*> preflights_;  // by outcome
  prometheus::Histogram& preflight_seconds_;

  GpuMetrics gpus_{*registry_};
  SharingMetrics sharing_{*registry_};
  StoreMetrics store_{*registry_};

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobSeries> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
