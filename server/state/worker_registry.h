#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
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

// A worker silent past the heartbeat timeout: not lost yet, waited for until `deadline`.
struct UnreachableWorker {
  std::string name;
  std::string why;  // "no heartbeat for 11s", "disconnected for 11s"
  absl::Time since;     // when it became unreachable (last seen + heartbeat timeout)
  absl::Time deadline;  // since + the reconnect window: lost after this
};

// A worker heard from again (a heartbeat, an event batch or a new registration) while
// it was unreachable.
struct ReconnectedWorker {
  std::string name;
  absl::Duration silent;  // from its last message before the partition to this one
  bool registered = false;  // it came back on a new stream (Register), not the old one
};

// What WorkerRegistry::Tick found (and what happened since the last Tick).
struct WorkerChanges {
  std::vector<UnreachableWorker> unreachable;  // newly unreachable
  std::vector<ReconnectedWorker> reconnected;  // back since the last Tick
  std::vector<LostWorker> lost;                // removed
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

// A rank still running on a worker although no job counts it any more: its attempt was
// given up while the worker was away (unreachable, or lost and back), and the worker
// was told to stop it. A rank needs tens of milliseconds to die after its SIGTERM, and
// until the worker reports it ended it holds its slot there.
struct StrayRank {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int gpu = -1;  // the GPU (NVML index) it runs on when the controller knows it, else -1
};

// The workers the controller knows, by name: their connection (one Connect stream at a
// time), heartbeats, slot and GPU accounting, GPU health and samples, rendezvous-port
// allocation and unreachable and lost worker detection. It knows nothing of jobs: the job lifecycle reserves and releases slots
// and ports for the ranks it places. Messages to workers are recorded in Effects, never
// sent from here.
//
// Not thread-safe; owned by JobManager, which uses it only under its state mutex.
//
// A worker silent (or disconnected) for longer than the heartbeat timeout becomes
// UNREACHABLE: it stays known (its stream, if still open, is kept, so a worker that
// was only paused or partitioned resumes on it), takes no new ranks (ConnectedFree, the
// scheduler's input, leaves it out; admission still counts it, as a worker that is
// expected back), and is waited for during the
// reconnect window, counted from the moment it became unreachable. A heartbeat, an
// event batch or a registration in that time makes it reachable again (Tick reports it
// as reconnected); silent past the window, it is LOST: removed, as before.
class WorkerRegistry {
 public:
  // reconnect_window zero: a worker is lost at the heartbeat timeout (no waiting).
  WorkerRegistry(Clock* clock, absl::Duration heartbeat_interval,
                 absl::Duration heartbeat_timeout,
                 absl::Duration reconnect_window = absl::ZeroDuration());

  // Records worker `reg.name()` as connected on `conn` and queues its RegisterAck. A
  // known worker keeps its slot usage and port rotation. While another stream holds the
  // name and was heard from within three heartbeat intervals (at most the timeout),
  // ALREADY_EXISTS naming the holder (its address, slots, registration time) and nothing
  // changes (running jobs are untouched); an older stream
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
  // Marks unreachable every worker silent (or disconnected) for longer than the
  // heartbeat timeout; removes every one silent for longer than the timeout plus the
  // reconnect window, queueing a Close of its stream. Returns those, and the workers
  // heard from again since the last Tick while they were unreachable.
  WorkerChanges Tick(Effects* fx);
  // The worker is unreachable now: since when and until when it is waited for.
  std::optional<UnreachableWorker> Unreachable(const std::string& worker) const;
  bool AnyUnreachable() const;
  absl::Duration reconnect_window() const { return reconnect_window_; }

  // Slot accounting: one slot per placed rank that has not ended, and one per stray
  // rank. Unknown workers are ignored (a lost worker's ranks end after it was removed).
  void Reserve(const std::string& worker);
  void Release(const std::string& worker);
  int FreeSlots(const std::string& worker) const;  // 0 for an unknown worker

  // Stray ranks (worker_registry_strays.cc). Slots come back when the worker reports
  // the ranks gone, not when the controller stops counting them: a stray holds its slot,
  // and its GPU when known, until RankGone or a registration that no longer lists it, so
  // no new rank is placed on a slot (or GPU) a dying one still holds.
  // HoldStray: one more, on a known worker (a rank of an ending attempt counted as ended
  // while its worker is unreachable). SetStrays: exactly these (a registration: what the
  // worker runs that no job counts). RankGone: the worker reported the rank ended; true
  // when that freed a stray.
  void HoldStray(const std::string& worker, const StrayRank& rank);
  void SetStrays(const std::string& worker, const std::vector<StrayRank>& ranks);
  bool RankGone(const std::string& worker, const std::string& job_id, int attempt, int rank);
  int StrayCount(const std::string& worker) const;  // 0 for an unknown worker
  // The worker refused an Assign for want of slots: it runs ranks this controller does
  // not account for (a bookkeeping error, never the rank's or the worker's fault). It
  // takes no new ranks until a heartbeat reports at least as many free slots as the
  // controller counts (Heartbeat.free_slots), so a refusal cannot repeat in a loop.
  void AssignRefused(const std::string& worker);
  // Held back by AssignRefused and not yet resynchronised by a heartbeat.
  bool Resyncing(const std::string& worker) const;
  int ConnectedSlots() const;  // all slots of the connected workers
  // The connected worker that reported the most memory (Register.memory_bytes) and how
  // much; {"", 0} when none reported any.
  std::pair<std::string, int64_t> LargestMemory() const;
  // Free slots and GPUs of each connected worker, by name: the scheduler's input.
  // Unreachable workers are left out: they take no new ranks.
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
    absl::Time registered_at;  // of the current registration
    absl::Time last_seen;
    int next_port = 0;
    int used = 0;  // slots held by ranks that have not ended
    std::map<int, GpuHolder> gpu_holds;  // NVML index -> the rank holding it
    std::map<int, Fault> faults;         // NVML index -> why it is out of service
    std::map<int, v1::GpuSample> samples;  // NVML index -> newest valid sample
    bool warned_bad_sample = false;      // one log line per registration
    std::optional<absl::Time> unreachable_since;  // set by Tick, cleared when heard from
    // (job, attempt, rank) -> GPU index or -1: ranks it runs that no job counts.
    std::map<std::tuple<std::string, int, int>, int> strays;
    bool resync = false;  // an Assign was refused; cleared by an agreeing heartbeat
  };
  Worker* ByConn(int64_t conn);
  const Worker* ByConn(int64_t conn) const;
  const v1::GpuDevice* Device(const Worker& w, int index) const;
  // Register's GPU part: keeps the faults of GPUs still offered with the same UUID
  // (as carried), drops the samples of the previous registration.
  void AdoptGpus(Worker& w, const v1::Register& reg);
  WorkerSnapshot SnapshotOf(const std::string& name, const Worker& w, bool idle) const;
  // Connected, not unreachable and not resynchronising after a refusal: may take new ranks.
  static bool Usable(const Worker& w) { return w.connected && !w.unreachable_since.has_value() && !w.resync; }
  // The heartbeat part of slot accounting: a worker held back after a refusal is usable
  // again once it reports at least the free slots the controller counts.
  void Resync(Worker& w, const v1::Heartbeat& heartbeat);
  // Frees the GPU holds of `w`'s strays.
  void ReleaseStrayGpus(Worker& w);
  // `w` was heard from now: clears its unreachable mark, noting the reconnection.
  void HeardFrom(const std::string& name, Worker& w, bool registered);

  Clock* const clock_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration heartbeat_timeout_;
  const absl::Duration reconnect_window_;
  std::vector<ReconnectedWorker> reconnected_;  // since the last Tick
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::set<int>> held_ports_;  // by worker name
  std::map<std::string, std::string> cordons_;  // cordoned worker -> reason
};

}  // namespace trainyard
