#include "worker/daemon/controller_link.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "common/base/posix_process_launcher.h"
#include "tests/fakes/fake_controller.h"
#include "tests/worker/daemon/test_util.h"
#include "worker/daemon/rank_supervisor.h"

namespace trainyard {
namespace {

using testing::FakeController;
using testing::Plan;
using testing::TempDir;

class ControllerLinkTest : public ::testing::Test {
 protected:
  // The rank is `script_body` (default: one step event, exit 0); `checkpoint` is sent
  // right after the Assign on stream 0.
  void StartAll(bool drop_first_stream, const std::string &script_body = R"(
echo '{"step_metrics":{"step":1,"loss":1.5}}'
exit 0
)",
                std::optional<v1::CheckpointRequest> checkpoint = std::nullopt) {
    std::string script = dir_.WriteScript("rank.sh", script_body);
    v1::Assign assign;
    assign.set_job_id("job7");
    assign.set_attempt(2);
    assign.set_world_size(1);
    assign.add_ranks(0);
    assign.set_master_addr("127.0.0.1");
    assign.set_master_port(29500);
    // The worker registers; stream 0 gets the Assign, and with drop_first_stream it
    // closes, unacked, as soon as the first EventBatch arrives.
    controller_ = std::make_unique<FakeController>(&clock_, [assign, drop_first_stream, checkpoint](int stream) {
      Plan plan;
      plan.heartbeat_interval_ms = 50;
      if (stream == 0) {
        plan.assign = assign;
        plan.close_on_first_batch = drop_first_stream;
        plan.checkpoint = checkpoint;
      }
      return plan;
    });

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(controller_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);

    RankSupervisor::Options so;
    so.worker_name = "w1";
    so.rank_binary = script;
    so.work_dir = dir_.path() + "/work";
    so.slots = 2;
    supervisor_ = std::make_unique<RankSupervisor>(
        so, &launcher_, &clock_, [this](v1::Event e) { outbox_.Add(std::move(e), clock_.Now()); });

    ControllerLink::Options lo;
    lo.registration.set_name("w1");
    lo.registration.set_slots(2);
    lo.registration.set_address("127.0.0.1");
    lo.registration.set_rendezvous_port_min(29500);
    lo.registration.set_rendezvous_port_max(29999);
    lo.registration.set_device("cpu");
    lo.initial_backoff = absl::Milliseconds(10);
    link_ = std::make_unique<ControllerLink>(
        lo, ControllerLink::MakeChannel("127.0.0.1:" + std::to_string(port)), supervisor_.get(),
        &outbox_, &clock_);
    link_->Start();
  }

  void TearDown() override {
    if (link_) link_->Stop();
    link_.reset();
    supervisor_.reset();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // Events the controller received, in arrival order, from the given stream
  // (-1: all).
  std::vector<v1::Event> Received(int stream_index = -1) {
    absl::MutexLock lock(&controller_->mu_);
    std::vector<v1::Event> out;
    for (auto &[index, batch] : controller_->batches_) {
      if (stream_index >= 0 && index != stream_index) continue;
      for (auto &e : batch.events()) out.push_back(e);
    }
    return out;
  }

  TempDir dir_;
  RealClock clock_;
  PosixProcessLauncher launcher_;
  EventOutbox outbox_{{}};
  std::unique_ptr<FakeController> controller_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<RankSupervisor> supervisor_;
  std::unique_ptr<ControllerLink> link_;
};

TEST_F(ControllerLinkTest, RegistersRunsAssignAndRelaysEvents) {
  StartAll(/*drop_first_stream=*/false);
  FakeController *c = controller_.get();
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto &[i, b] : c->batches_) {
      for (auto &e : b.events()) {
        if (e.rank_state().state() == v1::RankState::EXITED) return true;
      }
    }
    return false;
  }));
  {
    absl::MutexLock lock(&c->mu_);
    ASSERT_GE(c->registers_.size(), 1u);
    const v1::Register &reg = c->registers_[0];
    EXPECT_EQ(reg.name(), "w1");
    EXPECT_EQ(reg.slots(), 2);
    EXPECT_EQ(reg.device(), "cpu");
    EXPECT_EQ(reg.rendezvous_port_min(), 29500);
    EXPECT_EQ(reg.rendezvous_port_max(), 29999);
  }
  auto ev = Received();
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].rank_state().state(), v1::RankState::STARTING);
  EXPECT_EQ(ev[1].rank_state().state(), v1::RankState::RUNNING);
  EXPECT_EQ(ev[2].step_metrics().step(), 1);
  EXPECT_EQ(ev[3].rank_state().state(), v1::RankState::EXITED);
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].job_id(), "job7");
    EXPECT_EQ(ev[i].attempt(), 2);
    EXPECT_EQ(ev[i].source_seq(), static_cast<int64_t>(i + 1));
  }
  // Every batch was acked, so nothing is held.
  EXPECT_TRUE(link_->Drain(absl::Seconds(30)));
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->heartbeats_.size() >= 2; }));
}

TEST_F(ControllerLinkTest, ResendsUnackedBatchAfterReconnect) {
  StartAll(/*drop_first_stream=*/true);
  FakeController *c = controller_.get();
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto &[i, b] : c->batches_) {
      for (auto &e : b.events()) {
        if (i == 1 && e.rank_state().state() == v1::RankState::EXITED) return true;
      }
    }
    return false;
  }));
  absl::MutexLock lock(&c->mu_);
  EXPECT_GE(c->registers_.size(), 2u);
  // The unacked batch from stream 0 comes again, first and unchanged, on
  // stream 1.
  ASSERT_GE(c->batches_.size(), 2u);
  EXPECT_EQ(c->batches_[0].first, 0);
  EXPECT_EQ(c->batches_[1].first, 1);
  EXPECT_EQ(c->batches_[1].second.SerializeAsString(), c->batches_[0].second.SerializeAsString());
  EXPECT_EQ(c->batches_[0].second.events(0).source_seq(), 1);
}

// The link hands a CheckpointRequest to the runner: the supervisor creates the request
// file in the rank's run dir, which the rank (a script that waits for it) then sees.
TEST_F(ControllerLinkTest, CheckpointRequestReachesTheRanksRunDir) {
  v1::CheckpointRequest request;
  request.set_job_id("job7");
  request.set_attempt(2);
  StartAll(/*drop_first_stream=*/false, R"(
run_dir=
while [ $# -gt 0 ]; do
  if [ "$1" = --run-dir ]; then run_dir=$2; fi
  shift
done
i=0
while [ ! -e "$run_dir/checkpoint.request" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
if [ -e "$run_dir/checkpoint.request" ]; then echo "saw $run_dir/checkpoint.request"; fi
exit 0
)",
           request);
  FakeController *c = controller_.get();
  ASSERT_TRUE(c->WaitFor([c]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (auto &[i, b] : c->batches_) {
      for (auto &e : b.events()) {
        if (e.rank_state().state() == v1::RankState::EXITED) return true;
      }
    }
    return false;
  }));
  const std::string want = "saw " + dir_.path() + "/work/job7/2/checkpoint.request";
  bool saw = false;
  for (const v1::Event &e : Received()) saw = saw || (e.has_log() && e.log().message() == want);
  EXPECT_TRUE(saw) << "the rank never saw its request file";
}

}  // namespace
}  // namespace trainyard
