// The pure policies with plain values: admission and restart. (Queue order lives with
// the placement policy: gang_scheduler_test.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "common/spec/memory_estimate.h"
#include "common/spec_proto.h"
#include "server/policy/admission_policy.h"
#include "server/policy/restart_policy.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

v1::RestartSpec Restarts(int max_restarts) {
  v1::RestartSpec spec;
  spec.set_max_restarts(max_restarts);
  return spec;
}

TEST(RestartPolicyTest, RestartsWhileRestartsRemainNamingTheCount) {
  RestartDecision first = RestartPolicy::Decide(Restarts(2), 0, {"rank 1 on worker w1 failed: x"});
  EXPECT_TRUE(first.restart);
  EXPECT_EQ(first.reason, "rank 1 on worker w1 failed: x; restart 1 of 2");
  RestartDecision second = RestartPolicy::Decide(Restarts(2), 1, {"a", "boom"});
  EXPECT_TRUE(second.restart);
  EXPECT_EQ(second.reason, "boom; restart 2 of 2");
}

TEST(RestartPolicyTest, APermanentFailureFailsAtOnceSayingWhy) {
  RestartDecision d = RestartPolicy::Decide(Restarts(2), 0, {"rank 0 on worker w1 failed: bad .idx"}, true);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.reason,
            "rank 0 on worker w1 failed: bad .idx (permanent: the job's inputs are wrong, a restart cannot "
            "succeed; restarts left unused)");
  EXPECT_EQ(RestartPolicy::Decide(Restarts(0), 0, {"x"}, true).reason,
            "x (permanent: the job's inputs are wrong, a restart cannot succeed)");
}

TEST(RestartPolicyTest, FailsWithTheCauseOnceRestartsAreUsedUp) {
  RestartDecision d = RestartPolicy::Decide(Restarts(2), 2, {"worker w2 lost (x) running rank 0"});
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.reason, "worker w2 lost (x) running rank 0");
  EXPECT_FALSE(RestartPolicy::Decide(Restarts(0), 0, {"c"}).restart);
  EXPECT_FALSE(RestartPolicy::Decide(v1::RestartSpec(), 0, {"c"}).restart) << "unset is 0";
}

v1::JobSpec TinyJob(int dp, int tp = 1) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_parallelism()->set_dp(dp);
  spec.mutable_parallelism()->set_tp(tp);
  return spec;
}

// A fleet known only by its slot total.
FleetView Slots(int connected) {
  FleetView fleet;
  fleet.connected_slots = connected;
  return fleet;
}

TEST(AdmissionPolicyTest, AGangThatCannotBePlacedEvenOnAnIdleFleetIsRefused) {
  // Two workers of 2 slots: 4 slots in all, but a TP group of 4 never fits one worker,
  // and strict FIFO would let it hold back every job behind it forever.
  FleetView fleet = Slots(4);
  fleet.idle_workers = {{"w1", 2}, {"w2", 2}};
  v1::JobSpec spec = TinyJob(1, 4);
  spec.mutable_model()->set_n_kv_heads(4);  // so that tp=4 divides the heads
  EXPECT_TRUE(AdmissionPolicy::Admit(spec, Slots(4)).ok()) << "the slot total alone allows it";
  auto tp4 = AdmissionPolicy::Admit(spec, fleet);
  EXPECT_EQ(tp4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tp4.status().message()), HasSubstr("cannot be placed even with every connected worker idle"));
  EXPECT_TRUE(AdmissionPolicy::Admit(TinyJob(2, 2), fleet).ok()) << "a TP group of 2 per worker fits";
}

// dim = 2^30 is refused by the range rule (at most 65536), but dim = 65536 passes every
// rule and then fails in every rank (tens of GiB of weights and AdamW state): with
// workers that report their memory, admission refuses it, naming the estimate and the
// worker.
TEST(AdmissionPolicyTest, AJobWhoseRankCannotFitTheLargestWorkersMemoryIsRefused) {
  FleetView fleet = Slots(4);
  fleet.largest_memory_worker = "w1";
  fleet.largest_memory_bytes = int64_t{24} << 30;
  EXPECT_TRUE(AdmissionPolicy::Admit(TinyJob(1), fleet).ok());
  v1::JobSpec huge = TinyJob(1);
  huge.mutable_model()->set_dim(65536);
  auto unrefused = AdmissionPolicy::Admit(huge, Slots(4));
  ASSERT_TRUE(unrefused.ok()) << "no memory reported: not refused; " << unrefused.status();
  auto refused = AdmissionPolicy::Admit(huge, fleet);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("model: one rank needs an estimated "));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("more than the largest worker has (w1: 24 GiB)"));
  // One rank: only activation checkpointing could change, and the weights alone are
  // too many.
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("; no layout of dp·tp=1 ranks fits"));
  EXPECT_LE(refused.status().message().size(), 500u);
  std::printf("[message] %s\n", std::string(refused.status().message()).c_str());
  // Activation checkpointing or a smaller batch is what saves a long sequence: tiny at
  // seq_len 65536 needs its n_heads·seq² attention scores per layer.
  v1::JobSpec long_seq = TinyJob(1);
  long_seq.mutable_training()->set_seq_len(65536);
  long_seq.mutable_training()->set_batch_size(8);
  EXPECT_FALSE(AdmissionPolicy::Admit(long_seq, fleet).ok());
}

// The refusal names the figure at the submitted layout, where it goes, and a layout of
// the same 8 ranks that fits: a debug model whose 64 experts of hidden 2048 (302M
// parameters) need expert parallelism.
TEST(AdmissionPolicyTest, AnOversizedJobIsRefusedWithTheFigureAndALayoutThatFits) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("debug");
  spec.mutable_model()->set_n_routed_experts(64);
  spec.mutable_model()->set_expert_hidden(2048);
  spec.mutable_training()->set_batch_size(4);
  spec.mutable_training()->set_seq_len(1024);
  spec.mutable_parallelism()->set_dp(8);
  FleetView fleet = Slots(8);
  fleet.largest_memory_worker = "w1";
  fleet.largest_memory_bytes = int64_t{3} << 30;
  auto refused = AdmissionPolicy::Admit(spec, fleet);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(refused.status().message());
  std::printf("[message] %s\n", message.c_str());
  auto core = ResolveAndValidateCore(spec);
  ASSERT_TRUE(core.ok());
  const spec::MemoryEstimate at = spec::EstimateRankMemory(*core);
  EXPECT_THAT(message, HasSubstr("model: one rank needs an estimated " + spec::FormatBytes(at.total_bytes()) +
                                 " at dp=8 dp_shard=1 tp=1 ep=1 activation_checkpoint.mode=none "
                                 "training.mixed_precision=fp32 (parameters "));
  EXPECT_THAT(message, HasSubstr(", more than the largest worker has (w1: 3 GiB); fits at ep=8: "));
  // ep=4 does not fit 3 GiB, ep=8 does; checkpointing or tp split no expert.
  core->parallelism.ep = 8;
  const double ep8 = spec::EstimateRankMemory(*core).total_bytes();
  EXPECT_LT(ep8, 3.0 * (1 << 30));
  EXPECT_THAT(message, ::testing::EndsWith("; fits at ep=8: " + spec::FormatBytes(ep8)));
  // Submitted in that layout, it is admitted.
  spec.mutable_parallelism()->set_ep(8);
  EXPECT_TRUE(AdmissionPolicy::Admit(spec, fleet).ok());
  // Sharded over all 8 data ranks with ep=1 it still does not fit (every rank gathers
  // all 64 experts for the step): the layout and the gathered copy are named.
  spec.mutable_parallelism()->set_ep(1);
  spec.mutable_parallelism()->set_dp_shard(8);
  auto sharded = AdmissionPolicy::Admit(spec, fleet);
  ASSERT_EQ(sharded.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string text(sharded.status().message());
  EXPECT_THAT(text, HasSubstr(" at dp=8 dp_shard=8 tp=1 ep=1 activation_checkpoint.mode=none "));
  EXPECT_THAT(text, HasSubstr(" of them gathered for the step), "));
}

TEST(AdmissionPolicyTest, ReturnsTheNormalisedSpec) {
  v1::JobSpec submitted = TinyJob(2);
  submitted.mutable_training()->set_steps(7);
  auto admitted = AdmissionPolicy::Admit(submitted, Slots(2));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  // The tiny preset's sizes and the documented defaults fill what was not given.
  EXPECT_EQ(admitted->model().dim(), 64);
  EXPECT_EQ(admitted->model().n_layers(), 2);
  EXPECT_EQ(admitted->training().seq_len(), 32);
  EXPECT_EQ(admitted->training().steps(), 7) << "what was set wins";
  EXPECT_EQ(admitted->job().name(), "job");
  EXPECT_EQ(admitted->compile().backend(), "eager");
  EXPECT_TRUE(admitted->restart().has_max_restarts());
  EXPECT_EQ(admitted->restart().max_restarts(), 0);
}

TEST(AdmissionPolicyTest, TheWorldMustFitTheConnectedSlots) {
  auto too_big = AdmissionPolicy::Admit(TinyJob(2, 2), Slots(3));
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("world size"));
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("4"));
  EXPECT_EQ(too_big.status().message(),
            "world size dp·tp=4 exceeds the 3 slots of all connected workers (lower parallelism.dp=2 or "
            "parallelism.tp=2, or connect more workers)");
  EXPECT_TRUE(AdmissionPolicy::Admit(TinyJob(2, 2), Slots(4)).ok());
  EXPECT_EQ(AdmissionPolicy::Admit(TinyJob(1), Slots(0)).status().code(), absl::StatusCode::kInvalidArgument)
      << "no workers connected";
  // A degree that is already 1 is not named as one to lower, and one slot is a slot.
  EXPECT_EQ(AdmissionPolicy::Admit(TinyJob(2), Slots(1)).status().message(),
            "world size dp·tp=2 exceeds the 1 slot of all connected workers (lower parallelism.dp=2, or connect "
            "more workers)");
  EXPECT_EQ(AdmissionPolicy::Admit(TinyJob(1, 2), Slots(1)).status().message(),
            "world size dp·tp=2 exceeds the 1 slot of all connected workers (lower parallelism.tp=2, or connect "
            "more workers)");
  EXPECT_EQ(AdmissionPolicy::Admit(TinyJob(1), Slots(0)).status().message(),
            "world size dp·tp=1 exceeds the 0 slots of all connected workers (connect a worker)");
}

TEST(AdmissionPolicyTest, PassesSpecErrorsThroughUnchanged) {
  v1::JobSpec unknown = TinyJob(1);
  unknown.mutable_model()->set_preset("huge");
  auto preset = AdmissionPolicy::Admit(unknown, Slots(8));
  EXPECT_EQ(preset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(preset.status().message()), HasSubstr("model.preset"));

  auto tp = AdmissionPolicy::Admit(TinyJob(1, 3), Slots(8));
  EXPECT_EQ(tp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tp.status().message()), HasSubstr("parallelism.tp=3"));

  // A rule of the spec core across two fields.
  v1::JobSpec cudagraph = TinyJob(1);
  cudagraph.mutable_compile()->set_backend("cudagraph");
  auto cross = AdmissionPolicy::Admit(cudagraph, Slots(8));
  EXPECT_EQ(cross.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cross.status().message(),
            "compile.backend=\"cudagraph\" needs resources.device=\"cuda\" (CUDA graphs capture GPU work)");

  v1::JobSpec lr = TinyJob(1);
  lr.mutable_training()->set_lr(20);
  EXPECT_EQ(AdmissionPolicy::Admit(lr, Slots(8)).status().message(), "training.lr must be in (0, 10], got 20");
}

TEST(AdmissionPolicyTest, TheFleetRefusesWhatItsWorkersCannotRun) {
  // No worker offers GPUs (gpu_admission_test.cc has the GPU fleets).
  v1::JobSpec cuda = TinyJob(1);
  cuda.mutable_compile()->set_backend("cudagraph");
  cuda.mutable_resources()->set_device("cuda");
  auto gpu = AdmissionPolicy::Admit(cuda, Slots(8));
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu.status().message(),
            "resources.device=cuda needs a worker that offers GPUs and whose engine has the cuda capability; no "
            "worker is connected");

  v1::JobSpec text = TinyJob(1);
  text.mutable_training()->set_dataset("text");
  text.mutable_training()->set_dataset_path("/data/corpus.txt");
  // Datasets are read from a path every worker reaches (a shared filesystem), as
  // checkpoint.dir is: admitted, the ranks open and validate the files.
  auto files = AdmissionPolicy::Admit(text, Slots(8));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->training().dataset_path(), "/data/corpus.txt");
  text.mutable_training()->set_dataset_path("/data/../etc/passwd");
  EXPECT_EQ(AdmissionPolicy::Admit(text, Slots(8)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainyard
