#include "server/state/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/spec/rules.h"
#include "common/spec/spec_error.h"
#include "server/policy/device_validation.h"
#include "spdlog/spdlog.h"

namespace trainyard {

WorkerRegistry::WorkerRegistry(Clock* clock, absl::Duration heartbeat_interval, absl::Duration heartbeat_timeout,
                               absl::Duration reconnect_window)
    : clock_(clock),
      heartbeat_interval_(heartbeat_interval),
      heartbeat_timeout_(heartbeat_timeout),
      reconnect_window_(std::max(reconnect_window, absl::ZeroDuration())) {}

absl::Status WorkerRegistry::Register(int64_t conn, const v1::Register& reg, std::shared_ptr<WorkerChannel> channel,
                                      Effects* fx) {
  if (reg.name().empty()) return absl::InvalidArgumentError("register: name is empty");
  if (reg.slots() <= 0 || reg.slots() > spec::kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: slots must be in [1, ", spec::kMaxWorldSize, "], got ", reg.slots()));
  }
  if (reg.rendezvous_port_min() <= 0 || reg.rendezvous_port_max() > 65535 ||
      reg.rendezvous_port_min() > reg.rendezvous_port_max()) {
    return absl::InvalidArgumentError(absl::StrCat("register: bad rendezvous port range ", reg.rendezvous_port_min(),
                                                   "-", reg.rendezvous_port_max()));
  }
  // The GPU part is checked here too (the service checked it already): the accounting
  // below relies on unique indices and UUIDs.
  if (absl::Status s = request_validation::CheckDevices(reg); !s.ok()) return s;
  // Every gang whose rank 0 sits here holds one port, and each holds a slot here.
  if (reg.rendezvous_port_max() - reg.rendezvous_port_min() + 1 < reg.slots()) {
    return absl::InvalidArgumentError(absl::StrCat("register: rendezvous port range ", reg.rendezvous_port_min(), "-",
                                                   reg.rendezvous_port_max(), " holds fewer ports than the ",
                                                   reg.slots(), " slots"));
  }
  // Two streams claiming one name: the older one keeps it while its heartbeats arrive.
  // A newcomer (a forger, or the same daemon reconnecting behind a half-open connection)
  // is refused and changes nothing; it takes the name once the old stream missed three
  // heartbeats, well before the timeout that would declare the worker lost and fail its
  // gangs, so a reconnecting worker keeps its running jobs.
  auto existing = workers_.find(reg.name());
  if (existing != workers_.end() && existing->second.connected && existing->second.conn != conn) {
    const absl::Duration silent = clock_->Now() - existing->second.last_seen;
    const absl::Duration lapse = std::min(heartbeat_timeout_, 3 * heartbeat_interval_);
    if (silent <= lapse) {
      // The refused worker prints this (ControllerLink), so it names the worker that
      // holds the name: most often two machines given one --name.
      const v1::Register& holder = existing->second.reg;
      return absl::AlreadyExistsError(absl::StrCat(
          "register: the name ", Quoted(reg.name()), " is taken by a connected worker (address ",
          Quoted(holder.address()), ", ", holder.slots(), holder.slots() == 1 ? " slot" : " slots", ", registered ",
          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", existing->second.registered_at, absl::UTCTimeZone()),
          ", last heard from ", absl::ToInt64Seconds(silent),
          "s ago); each worker needs its own --name. A new "
          "connection takes the name only once that one has been silent for ",
          absl::FormatDuration(lapse), " (the same worker reconnecting behind a stale connection)"));
    }
  }
  Worker& w = workers_[reg.name()];
  if (w.connected && w.conn != conn && w.channel) {
    fx->Close(w.channel, "replaced by a newer connection of the same worker (the old one fell silent)");
  }
  AdoptGpus(w, reg);
  // What it runs is stated afresh by this registration (WorkerFaultManager::WorkerRegistered
  // sets its strays), so an earlier refusal's doubt is settled.
  w.resync = false;
  w.registered_at = clock_->Now();
  w.conn = conn;
  w.reg = reg;
  w.channel = std::move(channel);
  w.connected = true;
  HeardFrom(reg.name(), w, true);
  if (w.next_port < reg.rendezvous_port_min() || w.next_port > reg.rendezvous_port_max()) {
    w.next_port = reg.rendezvous_port_min();
  }
  v1::ControllerMessage ack;
  ack.mutable_register_ack()->set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(heartbeat_interval_)));
  fx->Send(w.channel, std::move(ack));
  spdlog::info("worker={} registered slots={} address={} gpus={} running_attempts={}", reg.name(), reg.slots(),
               reg.address(), reg.gpus_size(), reg.running_size());
  return absl::OkStatus();
}

WorkerRegistry::Worker* WorkerRegistry::ByConn(int64_t conn) {
  for (auto& [name, w] : workers_) {
    if (w.conn == conn && w.connected) return &w;
  }
  return nullptr;
}

const WorkerRegistry::Worker* WorkerRegistry::ByConn(int64_t conn) const {
  return const_cast<WorkerRegistry*>(this)->ByConn(conn);
}

std::optional<std::string> WorkerRegistry::NameOf(int64_t conn) const {
  const Worker* w = ByConn(conn);
  if (w == nullptr) return std::nullopt;
  return w->reg.name();
}

bool WorkerRegistry::Touch(int64_t conn) {
  Worker* w = ByConn(conn);
  if (w == nullptr) return false;
  HeardFrom(w->reg.name(), *w, false);
  return true;
}

void WorkerRegistry::HeardFrom(const std::string& name, Worker& w, bool registered) {
  const absl::Time now = clock_->Now();
  if (w.unreachable_since.has_value()) {
    const absl::Duration silent = now - w.last_seen;
    spdlog::warn("worker={} reachable again after {:.1f}s of silence ({})", name, absl::ToDoubleSeconds(silent),
                 registered ? "registered on a new stream" : "on its open stream");
    reconnected_.push_back({name, silent, registered});
    w.unreachable_since.reset();
  }
  w.last_seen = now;
}

bool WorkerRegistry::Disconnect(int64_t conn) {
  Worker* w = ByConn(conn);
  if (w == nullptr) return false;
  spdlog::warn("worker={} disconnected; unreachable unless it reconnects within {}s, lost {}s after that",
               w->reg.name(), absl::ToInt64Seconds(heartbeat_timeout_), absl::ToInt64Seconds(reconnect_window_));
  w->connected = false;
  w->channel.reset();
  w->last_seen = clock_->Now();
  return true;
}

void WorkerRegistry::ExpectReconnect(const std::string& name) {
  Worker& w = workers_[name];
  if (!w.reg.name().empty()) return;
  w.reg.set_name(name);
  w.connected = false;
  w.last_seen = clock_->Now();
}

WorkerChanges WorkerRegistry::Tick(Effects* fx) {
  const absl::Time now = clock_->Now();
  WorkerChanges out;
  out.reconnected = std::move(reconnected_);
  reconnected_.clear();
  for (auto& [name, w] : workers_) {
    const absl::Duration silent = now - w.last_seen;
    if (silent <= heartbeat_timeout_) continue;
    const std::string why =
        absl::StrCat(w.connected ? "no heartbeat for " : "disconnected for ", absl::ToInt64Seconds(silent), "s");
    if (silent > heartbeat_timeout_ + reconnect_window_) {
      out.lost.push_back({name, reconnect_window_ > absl::ZeroDuration()
                                    ? absl::StrCat(why, ", not back within the ",
                                                   absl::ToInt64Seconds(reconnect_window_), "s reconnect window")
                                    : why});
      continue;
    }
    if (w.unreachable_since.has_value()) continue;
    w.unreachable_since = w.last_seen + heartbeat_timeout_;
    out.unreachable.push_back({name, why, *w.unreachable_since, *w.unreachable_since + reconnect_window_});
    spdlog::warn("worker={} unreachable: {}; its ranks are waited for until it is {}s past the heartbeat timeout", name,
                 why, absl::ToInt64Seconds(reconnect_window_));
  }
  for (const auto& l : out.lost) {
    spdlog::error("worker={} lost: {}", l.name, l.why);
    auto it = workers_.find(l.name);
    fx->Close(it->second.channel, absl::StrCat("worker lost: ", l.why));
    workers_.erase(it);
  }
  return out;
}

bool WorkerRegistry::AnyUnreachable() const {
  for (const auto& [name, w] : workers_) {
    if (w.unreachable_since.has_value()) return true;
  }
  return false;
}

std::optional<UnreachableWorker> WorkerRegistry::Unreachable(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.unreachable_since.has_value()) return std::nullopt;
  const Worker& w = it->second;
  return UnreachableWorker{worker,
                           absl::StrCat(w.connected ? "no heartbeat for " : "disconnected for ",
                                        absl::ToInt64Seconds(clock_->Now() - w.last_seen), "s"),
                           *w.unreachable_since, *w.unreachable_since + reconnect_window_};
}

void WorkerRegistry::Reserve(const std::string& worker) {
  auto it = workers_.find(worker);
  if (it != workers_.end()) ++it->second.used;
}

void WorkerRegistry::Release(const std::string& worker) {
  auto it = workers_.find(worker);
  if (it != workers_.end() && it->second.used > 0) --it->second.used;
}

int WorkerRegistry::FreeSlots(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return 0;
  const Worker& w = it->second;
  return std::max(0, w.reg.slots() - w.used - static_cast<int>(w.strays.size()));
}

int WorkerRegistry::ConnectedSlots() const {
  int total = 0;
  for (const auto& [name, w] : workers_) {
    if (w.connected) total += w.reg.slots();
  }
  return total;
}

std::pair<std::string, int64_t> WorkerRegistry::LargestMemory() const {
  std::pair<std::string, int64_t> out{"", 0};
  for (const auto& [name, w] : workers_) {
    if (w.connected && w.reg.memory_bytes() > out.second) out = {name, w.reg.memory_bytes()};
  }
  return out;
}

std::vector<WorkerSnapshot> WorkerRegistry::ConnectedFree() const {
  std::vector<WorkerSnapshot> out;
  for (const auto& [name, w] : workers_) {
    if (Usable(w)) out.push_back(SnapshotOf(name, w, false));
  }
  return out;
}

std::vector<WorkerSnapshot> WorkerRegistry::ConnectedTotal() const {
  std::vector<WorkerSnapshot> out;
  for (const auto& [name, w] : workers_) {
    if (w.connected) out.push_back(SnapshotOf(name, w, true));
  }
  return out;
}

int WorkerRegistry::AllocatePort(const std::string& worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return 0;
  Worker& w = it->second;
  std::set<int>& held = held_ports_[worker];
  const int lo = w.reg.rendezvous_port_min();
  const int span = w.reg.rendezvous_port_max() - lo + 1;
  for (int i = 0; i < span; ++i) {
    const int port = lo + (w.next_port - lo + i) % span;
    if (!held.count(port)) {
      w.next_port = lo + (port - lo + 1) % span;
      held.insert(port);
      return port;
    }
  }
  // Validation caps gangs by slots and every live gang holds at least one slot, so a
  // range at least as large as the slots cannot run out.
  return lo;
}

void WorkerRegistry::HoldPort(const std::string& worker, int port) { held_ports_[worker].insert(port); }

void WorkerRegistry::ReleasePort(const std::string& worker, int port) {
  auto it = held_ports_.find(worker);
  if (it == held_ports_.end()) return;
  it->second.erase(port);
  if (it->second.empty()) held_ports_.erase(it);
}

bool WorkerRegistry::IsConnected(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it != workers_.end() && it->second.connected;
}

std::string WorkerRegistry::Address(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? std::string() : it->second.reg.address();
}

std::shared_ptr<WorkerChannel> WorkerRegistry::Channel(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.connected) return nullptr;
  return it->second.channel;
}

std::vector<v1::WorkerInfo> WorkerRegistry::List() const {
  std::vector<v1::WorkerInfo> out;
  for (const auto& [name, w] : workers_) {
    v1::WorkerInfo info;
    info.set_name(name);
    info.set_slots(w.reg.slots());
    info.set_free_slots(FreeSlots(name));
    info.set_connected(w.connected);
    info.set_address(w.reg.address());
    info.set_device(!w.reg.device().empty() ? w.reg.device() : (w.reg.gpus_size() > 0 ? "cuda" : "cpu"));
    info.set_memory_bytes(w.reg.memory_bytes());
    *info.mutable_gpus() = w.reg.gpus();
    for (const auto& g : w.reg.gpus()) {
      if (auto s = w.samples.find(g.index()); s != w.samples.end()) *info.add_gpu_samples() = s->second;
      if (w.faults.count(g.index())) {
        info.add_unhealthy_gpus(g.index());
      } else if (!w.gpu_holds.count(g.index())) {
        info.add_free_gpus(g.index());
      }
    }
    if (w.reg.has_capabilities()) *info.mutable_capabilities() = w.reg.capabilities();
    info.set_gpu_driver_version(w.reg.gpu_driver_version());
    info.set_cuda_driver_version(w.reg.cuda_driver_version());
    info.set_nvlink_topology_known(w.reg.nvlink_topology_known());
    *info.mutable_nccl_env() = w.reg.nccl_env();
    if (auto c = cordons_.find(name); c != cordons_.end()) {
      info.set_cordoned(true);
      info.set_cordon_reason(c->second);
    }
    if (w.last_seen != absl::Time()) *info.mutable_last_seen() = ToProtoTime(w.last_seen);
    if (w.unreachable_since.has_value()) {
      info.set_unreachable(true);
      *info.mutable_unreachable_since() = ToProtoTime(*w.unreachable_since);
      *info.mutable_reconnect_deadline() = ToProtoTime(*w.unreachable_since + reconnect_window_);
    }
    out.push_back(std::move(info));
  }
  // Cordoned workers that are gone (lost, or not back since a controller restart): the
  // cordon still holds for when they return.
  for (const auto& [name, reason] : cordons_) {
    if (workers_.count(name)) continue;
    v1::WorkerInfo info;
    info.set_name(name);
    info.set_cordoned(true);
    info.set_cordon_reason(reason);
    out.push_back(std::move(info));
  }
  return out;
}

WorkerRegistry::Totals WorkerRegistry::Count() const {
  Totals t;
  for (const auto& [name, w] : workers_) {
    if (!w.connected) continue;
    ++t.connected;
    t.slots += w.reg.slots();
    t.free += FreeSlots(name);
  }
  return t;
}

void WorkerRegistry::RestoreCordons(std::map<std::string, std::string> cordons) { cordons_ = std::move(cordons); }

absl::Status WorkerRegistry::Cordon(const std::string& name, bool cordoned, const std::string& reason) {
  if (!workers_.count(name) && !cordons_.count(name)) {
    return absl::NotFoundError(absl::StrCat("worker ", Quoted(name), " is not known to this controller"));
  }
  if (cordoned) {
    cordons_[name] = reason;
  } else {
    cordons_.erase(name);
  }
  return absl::OkStatus();
}

bool WorkerRegistry::Cordoned(const std::string& name) const { return cordons_.count(name) > 0; }

std::optional<v1::WorkerInfo> WorkerRegistry::Info(const std::string& name) const {
  for (auto& info : List()) {
    if (info.name() == name) return info;
  }
  return std::nullopt;
}

}  // namespace trainyard
