// The controller's job managers wired as JobManager wires them (state machine, fair
// share, evictions, worker faults, the scheduling cycle and its gates) over a real
// WorkerRegistry, with a fake clock and fake worker channels, and no store: each test
// drives them directly and reads what they decided from the recorded Effects.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/metrics/controller_metrics.h"
#include "server/state/dependency_gate.h"
#include "server/state/effects.h"
#include "server/state/eviction_manager.h"
#include "server/state/fair_share_manager.h"
#include "server/state/job_state_machine.h"
#include "server/state/quota_gate.h"
#include "server/state/restart_backoff_gate.h"
#include "server/state/scheduling_cycle.h"
#include "server/state/sweep_gate.h"
#include "server/state/worker_fault_manager.h"
#include "server/state/worker_registry.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"

namespace trainyard::testing {

class CycleFixture : public ::testing::Test {
 protected:
  CycleFixture() {
    auto dependencies = std::make_unique<DependencyGate>(&jobs_);
    dependencies_ = dependencies.get();
    cycle_.AddGate(std::move(dependencies));
    cycle_.AddGate(std::make_unique<RestartBackoffGate>());
    cycle_.AddGate(std::make_unique<QuotaGate>(&fair_share_));
    auto sweeps = std::make_unique<SweepGate>(&jobs_);
    sweeps_ = sweeps.get();
    cycle_.AddGate(std::move(sweeps));
  }

  // Registers worker `name` with `slots` CPU slots; its channel records what it is sent.
  std::shared_ptr<FakeWorkerChannel> Connect(const std::string& name, int slots) {
    v1::Register reg;
    reg.set_name(name);
    reg.set_slots(slots);
    reg.set_address(name + ".local");
    reg.set_rendezvous_port_min(40000);
    reg.set_rendezvous_port_max(40009);
    auto channel = std::make_shared<FakeWorkerChannel>();
    Effects fx;
    EXPECT_TRUE(registry_.Register(next_conn_++, reg, channel, &fx).ok());
    channels_[name] = channel;
    return channel;
  }

  static v1::JobSpec Spec(int dp, int max_restarts = 0, int priority = 0) {
    v1::JobSpec spec;
    spec.mutable_job()->set_name("t");
    spec.mutable_job()->set_priority(priority);
    spec.mutable_parallelism()->set_dp(dp);
    spec.mutable_parallelism()->set_tp(1);
    spec.mutable_restart()->set_max_restarts(max_restarts);
    spec.mutable_restart()->set_backoff_s(10);
    spec.mutable_resources()->set_device("cpu");
    return spec;
  }

  // A PENDING job `id` of `owner`, as JobManager adopts a submitted one.
  void Add(const std::string& id, const v1::JobSpec& spec, const std::string& owner = "alice") {
    v1::Event first;
    v1::Job job = JobStateMachine::NewJob(spec, owner, clock_.Now(), &first);
    job.set_id(id);
    jobs_.Add(std::move(job));
  }

  // The state machine's view of job `id`.
  const v1::Job& Job(const std::string& id) { return jobs_.Find(id)->job; }

  // Each rank of the current attempt of `id` reports `state`, committed as one batch.
  void Ranks(const std::string& id, v1::RankState::State state, Effects* fx, const std::string& message = "") {
    const v1::Job& job = Job(id);
    std::vector<v1::Event> events;
    for (const auto& r : job.placement().ranks()) {
      v1::Event e;
      e.set_job_id(id);
      e.set_attempt(job.attempt());
      e.set_rank(r.rank());
      e.mutable_rank_state()->set_state(state);
      e.mutable_rank_state()->set_worker(r.worker());
      e.mutable_rank_state()->set_message(message);
      events.push_back(e);
    }
    jobs_.ApplyEvents(id, events, fx);
  }

  // The states recorded for `id` in `fx`'s job_state events, in order.
  static std::vector<v1::Job::State> States(Effects& fx, const std::string& id) {
    std::vector<v1::Job::State> out;
    for (const auto& w : fx.writes()) {
      if (w.job_id != id) continue;
      for (const auto& e : w.events) {
        if (e.has_job_state()) out.push_back(e.job_state().state());
      }
    }
    return out;
  }
  // The reason of the last job_state event recorded for `id` in `fx` ("" when none).
  static std::string LastReason(Effects& fx, const std::string& id) {
    std::string out;
    for (const auto& w : fx.writes()) {
      if (w.job_id != id) continue;
      for (const auto& e : w.events) {
        if (e.has_job_state()) out = e.job_state().reason();
      }
    }
    return out;
  }
  // The messages of one kind `fx` sends to worker `name`.
  std::vector<v1::ControllerMessage> Sent(Effects& fx, const std::string& name, v1::ControllerMessage::MsgCase kind) {
    std::vector<v1::ControllerMessage> out;
    for (const auto& o : fx.outbound()) {
      if (o.channel == channels_[name] && o.message && o.message->msg_case() == kind) out.push_back(*o.message);
    }
    return out;
  }

  FakeClock clock_;
  ControllerMetrics metrics_;
  WorkerRegistry registry_{&clock_, absl::Seconds(2), absl::Seconds(10)};
  JobStateMachine jobs_{&registry_, &metrics_, &clock_};
  FairShareManager fair_share_{&metrics_, &clock_};
  EvictionManager evictions_{&jobs_, &registry_, &metrics_, &clock_, SharingOptions{}};
  WorkerFaultManager faults_{&jobs_, &registry_, &clock_};
  SchedulingCycle cycle_{&jobs_, &fair_share_, &evictions_, &registry_, &clock_};
  SweepGate* sweeps_ = nullptr;
  DependencyGate* dependencies_ = nullptr;  // the first of cycle_'s gates
  std::map<std::string, std::shared_ptr<FakeWorkerChannel>> channels_;
  int64_t next_conn_ = 1;
};

}  // namespace trainyard::testing
