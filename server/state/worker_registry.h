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
#include "server/policy/gang_scheduler.h"
#include "server/state/worker_channel.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

struct LostWorker {
  std::string name;
  std::string why;  // "no heartbeat for 16s", "disconnected for 16s"
};

// The workers the controller knows, by name: their connection (one Connect stream at a
// time), heartbeats, slot accounting, rendezvous-port allocation and lost-worker
// detection. It knows nothing of jobs: the job lifecycle reserves and releases slots
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
  // silent for longer is closed and replaced, keeping the worker's jobs. INVALID_ARGUMENT for an empty name, slots <= 0 or a bad rendezvous
  // port range (nothing changes then).
  absl::Status Register(int64_t conn, const v1::Register& reg,
                        std::shared_ptr<WorkerChannel> channel, Effects* fx);
  // The worker connected on `conn`, if any.
  std::optional<std::string> NameOf(int64_t conn) const;
  // A heartbeat (or any message) on `conn`; false when no worker is connected on it.
  bool Touch(int64_t conn);
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
  // Free slots of each connected worker, by name: the scheduler's input.
  std::vector<WorkerSnapshot> ConnectedFree() const;
  // The connected workers as if idle: every slot free.
  std::vector<WorkerSnapshot> ConnectedTotal() const;

  // A rendezvous port of the worker's range not held by a live gang, rotating through
  // the range so a port just released (maybe in TIME_WAIT) is not reused at once. The
  // port is held until ReleasePort. Held ports outlive a lost worker's entry.
  int AllocatePort(const std::string& worker);
  void HoldPort(const std::string& worker, int port);  // recovery: a live gang's port
  void ReleasePort(const std::string& worker, int port);

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
  struct Worker {
    int64_t conn = 0;
    v1::Register reg;
    std::shared_ptr<WorkerChannel> channel;
    bool connected = false;
    absl::Time last_seen;
    int next_port = 0;
    int used = 0;  // slots held by ranks that have not ended
  };
  Worker* ByConn(int64_t conn);
  const Worker* ByConn(int64_t conn) const;

  Clock* const clock_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration heartbeat_timeout_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::set<int>> held_ports_;  // by worker name
};

}  // namespace trainyard
