// PreemptionPolicy with plain values: who is preempted for a pending job that cannot
// be placed (strictly lower priority, preemptible, under the hourly cap; cheapest and
// newest first; victims not needed spared), never counting cordoned workers.
#include "server/policy/preemption_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace trainyard {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::JobSpec PreemptionSpec(int dp, int tp, int priority, bool cuda = false) {
  v1::JobSpec spec;
  spec.mutable_parallelism()->set_dp(dp);
  spec.mutable_parallelism()->set_tp(tp);
  spec.mutable_job()->set_priority(priority);
  if (cuda) spec.mutable_resources()->set_device("cuda");
  return spec;
}

PreemptionCandidate Cand(const std::string& id, int priority, absl::Duration started_after_t0,
                         std::vector<std::string> workers, std::vector<int> gpus = {}) {
  PreemptionCandidate c;
  c.id = id;
  c.priority = priority;
  c.attempt_started = kT0 + started_after_t0;
  c.rank_workers = std::move(workers);
  c.rank_gpus = std::move(gpus);
  return c;
}

constexpr int kCap = 3;

QueuedJob Pending(const v1::JobSpec& spec) {
  QueuedJob q;
  q.id = "job";
  q.spec = &spec;
  return q;
}

TEST(PreemptionPolicyTest, LowestPriorityIsPreemptedFirst) {
  v1::JobSpec spec = PreemptionSpec(2, 1, 10);
  // w1: 4 slots, all held: "p1" (priority 1, the newest) and "p0" (priority 0).
  const std::vector<PreemptionCandidate> cands = {Cand("p1", 1, absl::Hours(5), {"w1", "w1"}),
                                                  Cand("p0", 0, absl::Hours(1), {"w1", "w1"})};
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"p0"}));
  ASSERT_TRUE(plan->placement.placed) << plan->placement.pending_reason;
  EXPECT_EQ(plan->placement.rank_workers, (std::vector<std::string>{"w1", "w1"}));
}

TEST(PreemptionPolicyTest, AmongEqualPriorityTheMostRecentlyStartedGoesFirstThenIdDescending) {
  v1::JobSpec spec = PreemptionSpec(1, 1, 10);
  const std::vector<PreemptionCandidate> cands = {Cand("old", 0, absl::Hours(1), {"w1"}),
                                                  Cand("new", 0, absl::Hours(2), {"w1"})};
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"new"}));

  const std::vector<PreemptionCandidate> tied = {Cand("j1", 0, absl::Hours(1), {"w1"}),
                                                 Cand("j2", 0, absl::Hours(1), {"w1"})};
  auto tie = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, tied, kCap);
  ASSERT_TRUE(tie.has_value());
  EXPECT_EQ(tie->victims, (std::vector<std::string>{"j2"}));
}

TEST(PreemptionPolicyTest, VictimsWhoseCapacityIsNotNeededAreSpared) {
  // TP=4 inside one worker. w1 (4 slots): "tiny" (1 rank, newest) and "three" (3 ranks,
  // oldest); w2 (4 slots): "four". Order: tiny, four, three. tiny alone frees 1 slot of
  // w1; with four, w2 is whole; then tiny is not needed.
  v1::JobSpec spec = PreemptionSpec(1, 4, 10);
  const std::vector<PreemptionCandidate> cands = {Cand("three", 0, absl::Hours(1), {"w1", "w1", "w1"}),
                                                  Cand("four", 0, absl::Hours(2), {"w2", "w2", "w2", "w2"}),
                                                  Cand("tiny", 0, absl::Hours(3), {"w1"})};
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}, {"w2", 0}}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"four"}));
  EXPECT_EQ(plan->placement.rank_workers, (std::vector<std::string>(4, "w2")));
}

TEST(PreemptionPolicyTest, SeveralVictimsWhenOneIsNotEnough) {
  v1::JobSpec spec = PreemptionSpec(3, 1, 10);
  const std::vector<PreemptionCandidate> cands = {Cand("a", 0, absl::Hours(1), {"w1", "w1"}),
                                                  Cand("b", 0, absl::Hours(2), {"w2"}),
                                                  Cand("c", 1, absl::Hours(3), {"w2", "w2"})};
  // 1 slot free on w2; b (newest at priority 0) frees 1 more, then a 2: 4 >= 3, then b
  // is spared (w1's 2 + w2's 1 free place 3).
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}, {"w2", 1}}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"a"}));
  EXPECT_EQ(plan->placement.rank_workers, (std::vector<std::string>{"w1", "w1", "w2"}));

  v1::JobSpec five = PreemptionSpec(5, 1, 10);
  auto more = PreemptionPolicy::Plan(Pending(five), {{"w1", 0}, {"w2", 1}}, cands, kCap);
  ASSERT_TRUE(more.has_value());
  // 1 free + b 1 + a 2 = 4 < 5; + c 2 = 6: then b is spared (5 without it).
  EXPECT_EQ(more->victims, (std::vector<std::string>{"a", "c"}));
}

TEST(PreemptionPolicyTest, EqualOrHigherPriorityIsNeverPreempted) {
  v1::JobSpec spec = PreemptionSpec(1, 1, 5);
  const std::vector<PreemptionCandidate> cands = {Cand("same", 5, absl::Hours(1), {"w1"}),
                                                  Cand("higher", 6, absl::Hours(1), {"w1"})};
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, cands, kCap).has_value());
}

TEST(PreemptionPolicyTest, ANonPreemptibleJobIsNeverPreempted) {
  v1::JobSpec spec = PreemptionSpec(1, 1, 5);
  PreemptionCandidate c = Cand("keep", 0, absl::Hours(1), {"w1"});
  c.preemptible = false;
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, {c}, kCap).has_value());
}

TEST(PreemptionPolicyTest, AJobPreemptedMoreThanTheHourlyCapIsNeverPreempted) {
  v1::JobSpec spec = PreemptionSpec(1, 1, 5);
  PreemptionCandidate over = Cand("over", 0, absl::Hours(2), {"w1"});
  over.preemptions_last_hour = kCap + 1;
  PreemptionCandidate at_cap = Cand("at_cap", 1, absl::Hours(1), {"w1"});
  at_cap.preemptions_last_hour = kCap;  // "more than N times" only stops the next one
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, {over, at_cap}, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"at_cap"})) << "over has the lower priority";
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, {over}, kCap).has_value());
  PreemptionCandidate never = Cand("never", 0, absl::Hours(1), {"w1"});
  EXPECT_TRUE(PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, {never}, 0).has_value()) << "a cap of 0: once an hour";
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}}, {never}, -1).has_value())
      << "a negative cap preempts nothing";
}

TEST(PreemptionPolicyTest, OneVictimThatMakesRoomAloneIsPreferredToSeveral) {
  // TP=2 inside one worker. w1 (2 slots): "a" and "b", one rank each, the newest; w2
  // (2 slots): "c", older. Adding in order would take a and b; c alone is fewer.
  v1::JobSpec spec = PreemptionSpec(1, 2, 10);
  const std::vector<PreemptionCandidate> cands = {Cand("a", 0, absl::Hours(3), {"w1"}),
                                                  Cand("b", 0, absl::Hours(2), {"w1"}),
                                                  Cand("c", 0, absl::Hours(1), {"w2", "w2"})};
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 0}, {"w2", 0}}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"c"}));
  EXPECT_EQ(plan->placement.rank_workers, (std::vector<std::string>{"w2", "w2"}));
}

TEST(PreemptionPolicyTest, CordonedWorkersGainNoCapacity) {
  v1::JobSpec spec = PreemptionSpec(2, 1, 10);
  WorkerSnapshot cordoned("w1", 4);  // free slots, but cordoned
  cordoned.cordoned = true;
  // "low" holds w1 (cordoned) and has the lowest priority; only "mid" on w2 helps.
  const std::vector<PreemptionCandidate> cands = {Cand("low", 0, absl::Hours(1), {"w1", "w1"}),
                                                  Cand("mid", 1, absl::Hours(1), {"w2", "w2"})};
  auto plan = PreemptionPolicy::Plan(Pending(spec), {cordoned, {"w2", 0}}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"mid"}));
  EXPECT_EQ(plan->placement.rank_workers, (std::vector<std::string>{"w2", "w2"}));
  // Without mid nothing helps: w1's free and freed slots never count.
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {cordoned, {"w2", 0}}, {cands[0]}, kCap).has_value());
  // Ranks on a disconnected worker free nothing either.
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {{"w2", 0}}, {Cand("gone", 0, absl::Hours(1), {"w9", "w9"})}, kCap)
                   .has_value());
}

// A CUDA worker with `slots` free slots and `n` GPUs, those in `held` held.
WorkerSnapshot GpuWorkerHolding(const std::string& name, int slots, int n, std::vector<int> held) {
  WorkerSnapshot w(name, slots);
  w.engine_cuda = true;
  for (int i = 0; i < n; ++i) w.gpus.push_back({i, 0, true, false});
  for (int i : held) w.gpus[i].held = true;
  return w;
}

TEST(PreemptionPolicyTest, AGpuVictimGivesBackItsGpusAndACpuVictimOnlySlots) {
  // g1: 5 slots, 4 GPUs, all held: "a" GPUs 0,1 (oldest), "b" GPUs 2,3, "cpu" one CPU
  // rank (newest). A TP=2 CUDA job: cpu frees a slot but no GPU; b frees 2 GPUs and
  // places; cpu is then spared.
  v1::JobSpec spec = PreemptionSpec(1, 2, 10, true);
  const std::vector<PreemptionCandidate> cands = {Cand("a", 0, absl::Hours(1), {"g1", "g1"}, {0, 1}),
                                                  Cand("b", 0, absl::Hours(2), {"g1", "g1"}, {2, 3}),
                                                  Cand("cpu", 0, absl::Hours(3), {"g1"})};
  auto plan = PreemptionPolicy::Plan(Pending(spec), {GpuWorkerHolding("g1", 0, 4, {0, 1, 2, 3})}, cands, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims, (std::vector<std::string>{"b"}));
  EXPECT_EQ(plan->placement.rank_gpus, (std::vector<int>{2, 3}));

  // GPU 3 is unhealthy: freeing b gives back only GPU 2, so a is needed, and then
  // neither b nor cpu is.
  WorkerSnapshot sick = GpuWorkerHolding("g1", 0, 4, {0, 1, 2, 3});
  sick.gpus[3].healthy = false;
  auto other = PreemptionPolicy::Plan(Pending(spec), {sick}, cands, kCap);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->victims, (std::vector<std::string>{"a"}));
  EXPECT_EQ(other->placement.rank_gpus, (std::vector<int>{0, 1}));
}

TEST(PreemptionPolicyTest, NoPlanWhenEvenEveryCandidateIsNotEnough) {
  v1::JobSpec spec = PreemptionSpec(8, 1, 10);
  const std::vector<PreemptionCandidate> cands = {Cand("a", 0, absl::Hours(1), {"w1", "w1"}),
                                                  Cand("b", 0, absl::Hours(2), {"w1"})};
  EXPECT_FALSE(PreemptionPolicy::Plan(Pending(spec), {{"w1", 1}}, cands, kCap).has_value());
}

TEST(PreemptionPolicyTest, AJobThatAlreadyPlacesNeedsNoVictims) {
  v1::JobSpec spec = PreemptionSpec(2, 1, 10);
  auto plan = PreemptionPolicy::Plan(Pending(spec), {{"w1", 2}}, {Cand("a", 0, absl::Hours(1), {"w1"})}, kCap);
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(plan->victims.empty());
  EXPECT_TRUE(plan->placement.placed);
}

}  // namespace
}  // namespace trainyard
