#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "server/state/effects.h"
#include "server/policy/admission_policy.h"
#include "server/policy/gang_scheduler.h"
#include "server/state/worker_channel.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

struct LostWorker {
  std::string name;
  std::string why;  // "no heartbeat for 16s", "disconnected for 16s"
};

// A GPU a heartbeat took out of service (GpuSample.healthy = false).
struct GpuFault {
  std::string worker;
  int index = 0;
  std::string uuid;
  std::string reason;  // GpuSample.unhealthy_reason, "" when the worker gave none
};

// The rank holding a GPU.
struct GpuHolder {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
};

// The workers the controller knows, by name: their connection (one Connect stream at a
// time), heartbeats, slot and GPU accounting, GPU health and samples, rendezvous-port
// allocation and lost-worker detection. It knows nothing of jobs: the job lifecycle reserves and releases slots
// and ports for the ranks it places. Messages to workers are recorded in Effects, never
// sent from here.
//
// Not thread-safe; owned by JobManager, which uses it only under its state mutex.
class WorkerRegistry {
 public:
  WorkerRegistry(Clock* clock, absl::Duration heartbeat_interval,
                 absl::Duration heartbeat_timeout);

  // Records worker `reg.name()` as connected on `conn` and queues its RegisterAck. A
  // known worker keeps its slot usage and port rotation. While another stream holds the
  // name and was heard from within three heartbeat intervals (at most the timeout),
  // ALREADY_EXISTS and nothing changes (running jobs are untouched); an older stream
  // silent for longer is closed and replaced, keeping the worker's jobs. INVALID_ARGUMENT for an empty name, slots <= 0, a bad rendezvous
  // port range or GPUs request_validation::CheckDevices refuses (nothing changes then).
  absl::Status Register(int64_t conn, const v1::Register& reg,
                        std::shared_ptr<WorkerChannel> channel, Effects* fx);
  // The worker connected on `conn`, if any.
  std::optional<std::string> NameOf(int64_t conn) const;
  // A heartbeat (or any message) on `conn`; false when no worker is connected on it.
  bool Touch(int64_t conn);
  // A heartbeat on `conn`: Touch, then its GPU samples (worker_registry_gpus.cc). A
  // sample for an index the worker did not register, or a second one for an index, is
  // dropped; non-finite or out-of-range values in a sample are dropped (stored as -1,
  // "not reported"), its health still counts. A sample with healthy = false takes the
  // GPU out of service for the rest of the registration; returns the GPUs this
  // heartbeat took out (not those already out).
  std::vector<GpuFault> Heartbeat(int64_t conn, const v1::Heartbeat& heartbeat);
  // The stream `conn` ended: its worker stays known, disconnected, until it reconnects
  // or Tick declares it lost. False when no worker was connected on it.
  bool Disconnect(int64_t conn);
  // After a controller restart: a worker named in a recovered placement, expected to
  // reconnect within the heartbeat timeout (known, not connected, last seen now).
  void ExpectReconnect(const std::string& name);
  // Removes every worker silent (or disconnected) for longer than the heartbeat
  // timeout, queueing a Close of its stream, and returns them.
  std::vector<LostWorker> Tick(Effects* fx);

  // Slot accounting: one slot per placed rank that has not ended. Unknown workers are
  // ignored (a lost worker's ranks end after it was removed).
  void Reserve(const std::string& worker);
  void Release(const std::string& worker);
  int FreeSlots(const std::string& worker) const;  // 0 for an unknown worker
  int ConnectedSlots() const;  // all slots of the connected workers
  // The connected worker that reported the most memory (Register.memory_bytes) and how
  // much; {"", 0} when none reported any.
  std::pair<std::string, int64_t> LargestMemory() const;
  // Free slots and GPUs of each connected worker, by name: the scheduler's input.
  std::vector<WorkerSnapshot> ConnectedFree() const;
  // The connected workers as if idle: every slot and every healthy GPU free.
  std::vector<WorkerSnapshot> ConnectedTotal() const;
  // Each connected worker's engine and GPUs, for admission.
  std::vector<FleetWorker> ConnectedFleet() const;

  // GPU accounting: which rank holds each GPU (NVML index) of a worker. HoldGpu is
  // false (nothing changes) when another rank holds it. A worker known only from a
  // recovered placement takes holds before it re-registers. ReleaseGpu frees it only
  // when `job_id` holds it; unknown workers are ignored.
  bool HoldGpu(const std::string& worker, int index, const GpuHolder& holder);
  void ReleaseGpu(const std::string& worker, int index, const std::string& job_id);
  std::optional<GpuHolder> GpuHeldBy(const std::string& worker, int index) const;
  // The registered UUID of a worker's GPU, "" when unknown.
  std::string GpuUuid(const std::string& worker, int index) const;
  bool GpuHealthy(const std::string& worker, int index) const;
  // The worker's --nccl-env settings (Register.nccl_env).
  std::vector<std::string> NcclEnv(const std::string& worker) const;
  // For the gauges: each offered GPU of a connected worker, its health as the
  // controller sees it and its newest sample (if any).
  struct GpuState {
    v1::GpuDevice device;
    bool healthy = true;
    std::optional<v1::GpuSample> sample;
  };
  std::vector<GpuState> GpuStates(const std::string& worker) const;

  // A rendezvous port of the worker's range not held by a live gang, rotating through
  // the range so a port just released (maybe in TIME_WAIT) is not reused at once. The
  // port is held until ReleasePort. Held ports outlive a lost worker's entry.
  int AllocatePort(const std::string& worker);
  void HoldPort(const std::string& worker, int port);  // recovery: a live gang's port
  void ReleasePort(const std::string& worker, int port);

  // Cordons (CordonWorker, DrainWorker): a cordoned worker takes no new ranks
  // (WorkerSnapshot.cordoned); its running ranks are left alone. Kept by name, apart
  // from the worker's entry, so a cordon outlives the worker being lost and returning.
  // Cordon: NOT_FOUND for a name neither registered nor cordoned.
  void RestoreCordons(std::map<std::string, std::string> cordons);
  absl::Status Cordon(const std::string& name, bool cordoned, const std::string& reason);
  bool Cordoned(const std::string& name) const;
  // The worker as List shows it (which includes cordoned workers that are gone, with
  // only their name and cordon).
  std::optional<v1::WorkerInfo> Info(const std::string& name) const;

  bool IsConnected(const std::string& worker) const;
  std::string Address(const std::string& worker) const;
  // The worker's stream while connected, else null.
  std::shared_ptr<WorkerChannel> Channel(const std::string& worker) const;
  std::vector<v1::WorkerInfo> List() const;
  // For the gauges: connected workers, their slots, their free slots.
  struct Totals {
    int connected = 0;
    int slots = 0;
    int free = 0;
  };
  Totals Count() const;

 private:
  // A GPU out of service. `carried`: set by a registration before this one; the first
  // heartbeat of the new registration that reports the GPU healthy clears it (the
  // worker re-read NVML), while one set in this registration is sticky.
  struct Fault {
    std::string reason;
    bool carried = false;
  };
  struct Worker {
    int64_t conn = 0;
    v1::Register reg;
    std::shared_ptr<WorkerChannel> channel;
    bool connected = false;
    absl::Time last_seen;
    int next_port = 0;
    int used = 0;  // slots held by ranks that have not ended
    std::map<int, GpuHolder> gpu_holds;  // NVML index -> the rank holding it
    std::map<int, Fault> faults;         // NVML index -> why it is out of service
    std::map<int, v1::GpuSample> samples;  // NVML index -> newest valid sample
    bool warned_bad_sample = false;      // one log line per registration
  };
  Worker* ByConn(int64_t conn);
  const Worker* ByConn(int64_t conn) const;
  const v1::GpuDevice* Device(const Worker& w, int index) const;
  // Register's GPU part: keeps the faults of GPUs still offered with the same UUID
  // (as carried), drops the samples of the previous registration.
  void AdoptGpus(Worker& w, const v1::Register& reg);
  WorkerSnapshot SnapshotOf(const std::string& name, const Worker& w, bool idle) const;

  Clock* const clock_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration heartbeat_timeout_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::set<int>> held_ports_;  // by worker name
  std::map<std::string, std::string> cordons_;  // cordoned worker -> reason
};

}  // namespace trainyard
