// The pure parts of fault tolerance with plain values: the restart policy (backoff,
// causes, the FAILED reason), elastic resizing, checkpoint paths and the Assign a
// restarted attempt gets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/spec/rules.h"
#include "common/base/text.h"
#include "common/spec_proto.h"
#include "server/policy/elastic_policy.h"
#include "server/policy/event_fencing.h"
#include "server/state/tracked_job.h"
#include "server/policy/restart_policy.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(RestartBackoffTest, DoublesFromBackoffSecondsAndStopsAtAnHour) {
  v1::RestartSpec r;
  r.set_backoff_s(1.5);
  EXPECT_EQ(RestartPolicy::Backoff(r, 1), absl::Milliseconds(1500));
  EXPECT_EQ(RestartPolicy::Backoff(r, 2), absl::Seconds(3));
  EXPECT_EQ(RestartPolicy::Backoff(r, 3), absl::Seconds(6));
  EXPECT_EQ(RestartPolicy::Backoff(r, 1000), absl::Hours(1)) << "no overflow at restart 1000";
  r.set_backoff_s(0);
  EXPECT_EQ(RestartPolicy::Backoff(r, 5), absl::ZeroDuration());
  EXPECT_EQ(RestartPolicy::Backoff(v1::RestartSpec(), 1), absl::ZeroDuration()) << "unset (not normalised)";
}

TEST(RestartCausesTest, ACauseIsCutOnACharacterBoundaryAndOnlyTheNewestAreKept) {
  EXPECT_EQ(RestartPolicy::TrimCause("short"), "short");
  std::string two_byte;
  for (int i = 0; i < 150; ++i) two_byte += "\xc3\xa9";  // é: the cut lands mid-character
  const std::string cut = RestartPolicy::TrimCause("x" + two_byte);
  EXPECT_LE(cut.size(), RestartPolicy::kMaxCauseBytes);
  EXPECT_TRUE(IsUtf8(cut)) << cut;
  EXPECT_THAT(cut, ::testing::EndsWith("\xc3\xa9..."));
  std::vector<std::string> causes;
  for (int i = 1; i <= 40; ++i) RestartPolicy::AppendCause("c" + std::to_string(i), &causes);
  ASSERT_EQ(causes.size(), 32u);
  EXPECT_EQ(causes.front(), "c9");
  EXPECT_EQ(causes.back(), "c40");
}

TEST(RestartCausesTest, TheFailedReasonNamesEachAttemptAndListsAtMostTheNewestTen) {
  v1::RestartSpec r;
  r.set_max_restarts(2);
  RestartDecision d = RestartPolicy::Decide(r, 2, {"a", "b", "c"});
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.reason, "failed 3 attempts (restart.max_restarts=2): attempt 1: a | attempt 2: b | attempt 3: c");
  r.set_max_restarts(40);
  std::vector<std::string> causes;
  for (int i = 1; i <= 41; ++i) RestartPolicy::AppendCause(std::string(500, 'x'), &causes);
  d = RestartPolicy::Decide(r, 40, causes);
  EXPECT_THAT(d.reason, ::testing::StartsWith("failed 41 attempts (restart.max_restarts=40): (31 earlier not "
                                              "listed) attempt 32: xxx"));
  EXPECT_THAT(d.reason, HasSubstr("| attempt 41: xxx"));
  EXPECT_LT(d.reason.size(), 2300u) << "10 causes of at most 200 bytes";
  r.set_backoff_s(1);
  d = RestartPolicy::Decide(r, 3, {"boom"});
  EXPECT_TRUE(d.restart);
  EXPECT_EQ(d.reason, "boom; restart 4 of 40");
  EXPECT_EQ(d.backoff, absl::Seconds(8));
  EXPECT_EQ(RestartPolicy::BackoffReason(absl::FromUnixMillis(1'700'000'000'500), 4, 40),
            "restarting: backing off until 2023-11-14T22:13:20.5Z (restart 4 of 40)");
}

v1::JobSpec Normalised(int dp, int ep, int grad_accum, int dp_shard = 1, int dp_replicate = 0) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_parallelism()->set_dp(dp);
  spec.mutable_parallelism()->set_ep(ep);
  spec.mutable_parallelism()->set_dp_shard(dp_shard);
  spec.mutable_parallelism()->set_dp_replicate(dp_replicate);
  spec.mutable_training()->set_grad_accum_steps(grad_accum);
  spec.mutable_restart()->set_min_dp(1);
  auto out = ResolveAndValidateProto(spec);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : v1::JobSpec();
}

TEST(ElasticPolicyTest, ResizeKeepsTheGlobalBatchAndCarvesEpFromTheNewWorld) {
  const v1::JobSpec spec = Normalised(4, 4, 3);  // 12 micro-batches per step
  auto two = ElasticPolicy::Resize(spec, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->spec.parallelism().dp(), 2);
  EXPECT_EQ(two->spec.parallelism().ep(), 2);
  EXPECT_EQ(two->spec.training().grad_accum_steps(), 6);
  EXPECT_EQ(two->spec.training().batch_size(), spec.training().batch_size());
  auto three = ElasticPolicy::Resize(spec, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->spec.parallelism().ep(), 1);
  EXPECT_EQ(three->grad_accum_steps, 4);
  auto five = ElasticPolicy::Resize(Normalised(5, 1, 1), 2);
  EXPECT_EQ(five.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(five.status().message()), HasSubstr("does not divide dp·grad_accum_steps=5"));
  // 1024·2 micro-batches on one rank: grad_accum_steps=2048 breaks the core's range.
  auto big = ElasticPolicy::Resize(Normalised(2, 1, 1024), 1);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("training.grad_accum_steps"));
}

TEST(ElasticPolicyTest, ResizeKeepsTheShardDegreeADivisorOfTheNewDp) {
  // FSDP over all 4 data ranks (tiny: 4 experts, ep=4 inside the one replica).
  const v1::JobSpec fsdp = Normalised(4, 4, 3, /*dp_shard=*/4);
  auto two = ElasticPolicy::Resize(fsdp, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->spec.parallelism().dp_shard(), 2) << "gcd(4, 2)";
  EXPECT_EQ(two->dp_shard, 2);
  EXPECT_EQ(two->spec.parallelism().dp_replicate(), 0);
  EXPECT_EQ(two->spec.parallelism().ep(), 2);
  auto three = ElasticPolicy::Resize(fsdp, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->spec.parallelism().dp_shard(), 1) << "gcd(4, 3): replicated";
  EXPECT_EQ(three->dp_shard, 1);
  EXPECT_EQ(three->spec.parallelism().ep(), 1);
  EXPECT_EQ(three->grad_accum_steps, 4);
  auto one = ElasticPolicy::Resize(fsdp, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->spec.parallelism().dp_shard(), 1);
  // HSDP with dp_replicate given (2 replicas of 2): at dp=2 the given 2 would no longer
  // equal dp / dp_shard, so it becomes 0 (derived: one replica of 2).
  const v1::JobSpec hsdp = Normalised(4, 1, 1, /*dp_shard=*/2, /*dp_replicate=*/2);
  auto half = ElasticPolicy::Resize(hsdp, 2);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->spec.parallelism().dp_shard(), 2);
  EXPECT_EQ(half->spec.parallelism().dp_replicate(), 0);
  EXPECT_EQ(half->grad_accum_steps, 2);
  // Shrink walks the same resize: 3 free slots of a dp=4 dp_shard=4 job take dp=2.
  v1::JobSpec shrinking = fsdp;
  shrinking.mutable_training()->set_grad_accum_steps(1);
  auto shrunk = ElasticPolicy::Shrink("job-1", shrinking, {{"w1", 3}});
  ASSERT_TRUE(shrunk.has_value());
  EXPECT_EQ(shrunk->dp, 2);
  EXPECT_EQ(shrunk->spec.parallelism().dp_shard(), 2);
}

TEST(ElasticPolicyTest, ShrinkTakesTheLargestDpThatFitsAndDividesTheBatch) {
  const v1::JobSpec spec = Normalised(4, 1, 1);
  auto three_free = ElasticPolicy::Shrink("job-1", spec, {{"w1", 3}});
  ASSERT_TRUE(three_free.has_value());
  EXPECT_EQ(three_free->dp, 2) << "3 does not divide 4 micro-batches";
  v1::JobSpec floor = spec;
  floor.mutable_restart()->set_min_dp(3);
  EXPECT_FALSE(ElasticPolicy::Shrink("job-1", floor, {{"w1", 3}}).has_value());
  floor.mutable_restart()->set_min_dp(0);
  EXPECT_FALSE(ElasticPolicy::Shrink("job-1", floor, {{"w1", 3}}).has_value()) << "min_dp=0: off";
}

TEST(CheckpointPathTest, TheJobsOwnDirectoryOnly) {
  v1::Job job;
  job.set_id("job-3");
  job.mutable_spec()->mutable_training()->set_steps(100);
  v1::CheckpointSaved ck;
  ck.set_step(10);
  job.set_attempt(2);
  ck.set_path("/c/job-3/step-00000010-attempt-2");
  EXPECT_THAT(CheckpointJobProblem(job, ck, 0), HasSubstr("no checkpoint.dir"));
  job.mutable_spec()->mutable_checkpoint()->set_dir("/c//");
  EXPECT_EQ(CheckpointDirOf(job.spec(), job.id()), "/c/job-3");
  EXPECT_EQ(CheckpointJobProblem(job, ck, 0), "");
  EXPECT_THAT(CheckpointJobProblem(job, ck, 10), HasSubstr("not past the last recorded checkpoint (step 10)"));
  for (const char* other : {"/c/job-3/./step-00000010-attempt-2", "/c/job-3/step-00000010-attempt-1",
                            "/c/job-3/step-00000011-attempt-2", "/c/job-3/step-10", "/c/job-3/step-00000010-attempt-2/x"}) {
    ck.set_path(other);
    EXPECT_THAT(CheckpointJobProblem(job, ck, 0), HasSubstr("must be /c/job-3/step-00000010-attempt-2 for step 10"))
        << other;
  }
  ck.set_path(std::string(300, 'z'));
  const std::string long_path = CheckpointJobProblem(job, ck, 0);
  EXPECT_THAT(long_path, HasSubstr("must be under /c/job-3/, got zzz"));
  EXPECT_LT(long_path.size(), 250u) << "quotes at most ~100 characters: " << long_path;
  job.mutable_spec()->mutable_checkpoint()->set_dir("/");
  EXPECT_EQ(CheckpointDirOf(job.spec(), job.id()), "/job-3");
}

TEST(AssignTest, CarriesTheCheckpointDirWhenSetAndTheResumePointWhenRecorded) {
  TrackedJob rt;
  rt.job.set_id("job-8");
  rt.job.set_attempt(2);
  rt.job.set_world_size(1);
  v1::ControllerMessage none = AssignFor(rt, {0});
  EXPECT_EQ(none.assign().checkpoint_dir(), "") << "no checkpoint.dir: nowhere to write";
  rt.job.mutable_spec()->mutable_checkpoint()->set_dir("/shared/ckpt");
  v1::ControllerMessage off = AssignFor(rt, {0});
  EXPECT_EQ(off.assign().checkpoint_dir(), "/shared/ckpt/job-8")
      << "interval 0: no interval checkpoints, but the ranks can checkpoint on request";
  EXPECT_EQ(off.assign().resume_path(), "");
  rt.job.mutable_spec()->mutable_checkpoint()->set_interval(50);
  rt.job.mutable_last_checkpoint()->set_step(150);
  rt.job.mutable_last_checkpoint()->set_path("/shared/ckpt/job-8/step-150");
  v1::ControllerMessage on = AssignFor(rt, {0});
  EXPECT_EQ(on.assign().checkpoint_dir(), "/shared/ckpt/job-8");
  EXPECT_EQ(on.assign().resume_path(), "/shared/ckpt/job-8/step-150");
  EXPECT_EQ(on.assign().attempt(), 2);
}

}  // namespace
}  // namespace trainyard
