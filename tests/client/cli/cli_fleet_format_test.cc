// What the CLI shows of sharing a fleet (client/cli/fleet_format.h): a requested
// checkpoint, cordon and drain results, the workers table's CORDONED column, `get`'s
// preemptions line, and `explain`'s quota, usage and fair-share queue position. Every
// expected text is written out by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/cli/cli_format.h"
#include "client/cli/fleet_format.h"
#include "client/cli/gpu_format.h"
#include "client/cli/job_view.h"
#include "common/proto_time.h"

namespace trainyard::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(1796083200 + seconds);  // 2026-12-01T00:00:00Z
  return t;
}

v1::WorkerInfo Worker(const std::string& name, int slots, int free) {
  v1::WorkerInfo w;
  w.set_name(name);
  w.set_slots(slots);
  w.set_free_slots(free);
  w.set_connected(true);
  return w;
}

v1::Job Job(const std::string& id, v1::Job::State state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.set_owner("alice");
  job.set_world_size(4);
  job.mutable_spec()->mutable_job()->set_name("moe");
  job.mutable_spec()->mutable_parallelism()->set_dp(2);
  job.mutable_spec()->mutable_parallelism()->set_tp(2);
  return job;
}

TEST(FleetFormatTest, CheckpointCordonAndDrainLines) {
  v1::CheckpointRef ck;
  ck.set_step(120);
  ck.set_path("/ckpt/job-3/step-120");
  ck.set_attempt(2);
  ck.set_bytes(4096);
  EXPECT_EQ(FormatCheckpointDone("job-3", ck), "job-3: checkpoint at step 120: /ckpt/job-3/step-120 (4096 bytes)\n");

  v1::WorkerInfo w = Worker("w1", 4, 4);
  EXPECT_EQ(FormatCordonResult(w), "w1: uncordoned: takes new ranks again\n");
  EXPECT_EQ(FormatCordoned(w), "-");
  w.set_cordoned(true);
  EXPECT_EQ(FormatCordonResult(w), "w1: cordoned: takes no new ranks; what runs there keeps running\n");
  EXPECT_EQ(FormatCordoned(w), "yes");
  w.set_cordon_reason("disk swap");
  EXPECT_EQ(FormatCordonResult(w), "w1: cordoned (disk swap): takes no new ranks; what runs there keeps running\n");
  EXPECT_EQ(FormatCordoned(w), "yes (disk swap)");

  v1::DrainWorkerResponse drained;
  *drained.mutable_worker() = w;
  EXPECT_EQ(FormatDrainResult(drained), "w1: cordoned (disk swap); no job has a rank there\n");
  drained.add_job_ids("job-3");
  EXPECT_EQ(FormatDrainResult(drained),
            "w1: cordoned (disk swap); moving 1 job (each saves a checkpoint, stops and is rescheduled elsewhere):\n"
            "  job-3\n");
  drained.add_job_ids("job-5");
  drained.mutable_worker()->clear_cordon_reason();
  EXPECT_EQ(FormatDrainResult(drained),
            "w1: cordoned; moving 2 jobs (each saves a checkpoint, stops and is rescheduled elsewhere):\n"
            "  job-3\n  job-5\n");
}

// A checkpoint saved on request (CheckpointSaved.requested) says so in watch's line and
// get's checkpoint list; an interval one does not.
TEST(FleetFormatTest, ARequestedCheckpointSaysSo) {
  v1::Event e;
  e.set_job_id("job-1");
  e.set_seq(9);
  e.set_rank(0);
  e.set_attempt(1);
  *e.mutable_time() = At(9);
  v1::CheckpointSaved* c = e.mutable_checkpoint();
  c->set_step(120);
  c->set_path("/ckpt/job-1/step-120");
  c->set_bytes(2048);
  c->set_write_ms(12);
  c->set_dp(1);
  c->set_tp(1);
  c->set_ep(1);
  EXPECT_EQ(FormatEventText(e), "seq=9 rank=0 checkpoint step 120 at /ckpt/job-1/step-120 (2.0 KiB, write 12 ms)");
  JobHistory interval;
  interval.Add(e);
  EXPECT_THAT(FormatJobDescription(Job("job-1", v1::Job::RUNNING), interval, {}),
              HasSubstr("\n  step 120  /ckpt/job-1/step-120  2.0 KiB  attempt 1  dp 1 tp 1 ep 1\n"));
  c->set_requested(true);
  EXPECT_EQ(FormatEventText(e),
            "seq=9 rank=0 checkpoint step 120 at /ckpt/job-1/step-120 (2.0 KiB, write 12 ms) on request");
  JobHistory requested;
  requested.Add(e);
  EXPECT_THAT(FormatJobDescription(Job("job-1", v1::Job::RUNNING), requested, {}),
              HasSubstr("\n  step 120  /ckpt/job-1/step-120  2.0 KiB  attempt 1  dp 1 tp 1 ep 1  on request\n"));
}

TEST(FleetFormatTest, OrdinalsInEnglish) {
  std::vector<std::string> got;
  for (int n : {1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112}) got.push_back(Ordinal(n));
  EXPECT_THAT(got, ::testing::ElementsAre("1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd",
                                          "101st", "111th", "112th"));
}

TEST(FleetFormatTest, WorkersTableGainsACordonedColumnOnlyWhenOneIsCordoned) {
  v1::WorkerInfo w1 = Worker("w1", 4, 2);
  v1::WorkerInfo w2 = Worker("w2", 2, 2);
  EXPECT_EQ(FormatWorkersTable({w1, w2}),
            "NAME  SLOTS  FREE  CONNECTED  ADDRESS  DEVICE  CAPABILITIES\n"
            "w1    4      2     yes        -        -       -\n"
            "w2    2      2     yes        -        -       -\n");
  w1.set_cordoned(true);
  w1.set_cordon_reason("disk swap");
  w2.set_connected(false);
  w2.set_cordoned(true);  // a cordon outlives the connection
  v1::WorkerInfo w3 = Worker("w3", 1, 1);
  EXPECT_EQ(FormatWorkersTable({w1, w2, w3}),
            "NAME  SLOTS  FREE  CONNECTED  ADDRESS  DEVICE  CAPABILITIES  CORDONED\n"
            "w1    4      2     yes        -        -       -             yes (disk swap)\n"
            "w2    2      2     no         -        -       -             yes\n"
            "w3    1      1     yes        -        -       -             -\n");
}

TEST(FleetFormatTest, AnUnreachableWorkerSaysSinceWhenAndWhenItIsLostAndItsJobWhatItWaitsFor) {
  v1::WorkerInfo w1 = Worker("w1", 2, 1);
  w1.set_unreachable(true);
  *w1.mutable_unreachable_since() = ToProtoTime(absl::FromUnixSeconds(3 * 3600 + 50 * 60 + 47));
  *w1.mutable_reconnect_deadline() = ToProtoTime(absl::FromUnixSeconds(3 * 3600 + 51 * 60 + 12));
  EXPECT_EQ(FormatWorkersTable({w1}),
            "NAME  SLOTS  FREE  CONNECTED                                       ADDRESS  DEVICE  CAPABILITIES\n"
            "w1    2      1     UNREACHABLE since 03:50:47Z, lost at 03:51:12Z  -        -       -\n");
  v1::Job job = Job("job-1", v1::Job::RUNNING);
  job.set_unreachable_reason("waiting up to 25s (until 03:51:12Z) for worker w1 to reconnect");
  EXPECT_THAT(FormatJobDescription(job, JobHistory(), {}),
              HasSubstr("\nwaiting    waiting up to 25s (until 03:51:12Z) for worker w1 to reconnect\n"));
}

TEST(FleetFormatTest, AJobThatWaitsForAnotherShowsItsListAndTheReason) {
  v1::Job job = Job("job-8", v1::Job::PENDING);
  job.mutable_spec()->mutable_job()->set_after("job-3,job-4:failed");
  job.set_pending_reason("waiting for job-3 to succeed (job-3 is RUNNING) and 1 more job");
  EXPECT_THAT(FormatJobDescription(job, JobHistory(), {}),
              HasSubstr("\npending    waiting for job-3 to succeed (job-3 is RUNNING) and 1 more job  (see `trainyard "
                        "explain job-8`)\nafter      job-3,job-4:failed\n"));
}

TEST(FleetFormatTest, ExplainOfAPendingJobShowsTheControllersQueuePlaceQuotaAndUsage) {
  v1::Job job = Job("job-7", v1::Job::PENDING);
  job.set_pending_reason("quota: alice uses 6 of 8 slots; needs 4");
  v1::ShareInfo* s = job.mutable_share();
  s->set_owner("alice");
  s->set_group("research");
  s->set_owner_slots_in_use(6);
  s->set_owner_slot_limit(8);
  s->set_group_slots_in_use(10);
  s->set_group_slot_limit(16);
  s->set_group_gpus_in_use(4);
  s->set_group_gpu_limit(8);
  s->set_weight(2);
  s->set_usage_slot_seconds(45000);  // 12.5 slot-hours
  s->set_fair_share(22500);
  s->set_queue_position(3);
  s->set_queue_length(5);
  v1::WorkerInfo w1 = Worker("w1", 4, 1);
  w1.set_cordoned(true);
  // The client's own count (1st of the one pending job it was given) yields to the
  // controller's place, which orders equal priorities by fair share.
  EXPECT_EQ(FormatExplain(job, {job}, {w1, Worker("w2", 2, 2)}, absl::UnixEpoch()),
            "job-7  PENDING  priority 0  world 4 (dp 2 × tp 2)\n"
            "why:        quota: alice uses 6 of 8 slots; needs 4\n"
            "queue:      3rd of 5 pending (higher priority first, then fair share, then submission order)\n"
            "estimated:  no estimate yet\n"
            "fleet free: w1 1/4 cordoned, w2 2/2\n"
            "quota:      owner alice 6 of 8 slots, 0 GPUs (no limit)\n"
            "            group research 10 of 16 slots, 4 of 8 GPUs\n"
            "usage:      12.50 slot-hours (decayed), weight 2, fair share 6.25 (usage / weight: the lower goes "
            "first among jobs of equal priority)\n");
}

TEST(FleetFormatTest, ExplainOfARunningJobShowsTheOwnersShareWithoutAGroup) {
  v1::Job job = Job("job-1", v1::Job::RUNNING);
  job.set_attempt(1);
  job.mutable_placement()->add_ranks()->set_worker("w1");
  // Without a share (an older controller) nothing is added.
  EXPECT_EQ(FormatExplain(job, {}, {}, absl::UnixEpoch()),
            "job-1  RUNNING  priority 0  world 4 (dp 2 × tp 2)\nplaced:     attempt 1 on w1×1\n");
  v1::ShareInfo* s = job.mutable_share();
  s->set_owner_slots_in_use(4);
  s->set_owner_gpus_in_use(2);
  s->set_owner_gpu_limit(2);
  s->set_weight(1);
  s->set_usage_slot_seconds(108);  // 0.03 slot-hours
  s->set_fair_share(108);
  EXPECT_EQ(FormatExplain(job, {}, {}, absl::UnixEpoch()),
            "job-1  RUNNING  priority 0  world 4 (dp 2 × tp 2)\n"
            "placed:     attempt 1 on w1×1\n"
            "quota:      owner alice 4 slots (no limit), 2 of 2 GPUs\n"
            "usage:      0.03 slot-hours (decayed), weight 1, fair share 0.03 (usage / weight: the lower goes "
            "first among jobs of equal priority)\n");
}

TEST(FleetFormatTest, WithoutAQueuePositionExplainCountsThePendingJobsItself) {
  v1::Job job = Job("job-7", v1::Job::PENDING);
  job.set_pending_reason("needs 4 slots");
  job.mutable_share()->set_weight(1);  // a share, but no place in it (queue_position 0)
  EXPECT_THAT(FormatExplain(job, {job}, {}, absl::UnixEpoch()),
              HasSubstr("\nqueue:      1st of 1 pending (higher priority first, then submission order)\n"));
}

TEST(FleetFormatTest, GetAndExplainShowThePreemptions) {
  v1::Job job = Job("job-1", v1::Job::RUNNING);
  job.set_attempt(4);
  JobHistory history;
  auto state = [&](int64_t seq, v1::Job::State st, const std::string& reason, int attempt) {
    v1::Event e;
    e.set_job_id("job-1");
    e.set_seq(seq);
    e.set_rank(-1);
    e.set_attempt(attempt);
    *e.mutable_time() = At(seq);
    e.mutable_job_state()->set_state(st);
    e.mutable_job_state()->set_reason(reason);
    history.Add(e);
  };
  state(1, v1::Job::PENDING, "waiting for the scheduler", 0);
  state(2, v1::Job::RUNNING, "all ranks running", 1);
  EXPECT_EQ(FormatPreemptedLine(job), "");
  EXPECT_THAT(FormatExplainHistory(job, history), Not(HasSubstr("preemptions")));
  EXPECT_THAT(FormatJobDescription(job, history, {}), Not(HasSubstr("preempted")));

  // As the controller writes them: a RESTARTING change with the reason, then PENDING ones
  // repeating it with the scheduler's words after it; a preemption of a job not yet
  // running goes straight to PENDING. A failure's restart stays a restart.
  state(3, v1::Job::RESTARTING, "preempted by job-9 (priority 5)", 1);
  state(4, v1::Job::PENDING, "preempted by job-9 (priority 5); waiting for slots", 1);
  state(5, v1::Job::PENDING, "preempted by job-9 (priority 5); needs 1 slot; 0 free", 1);
  state(6, v1::Job::RUNNING, "all ranks running", 2);
  state(7, v1::Job::RESTARTING, "rank 0 on worker w2 failed: exit code 1", 2);
  state(8, v1::Job::PENDING, "restarting: backing off", 2);
  state(9, v1::Job::RUNNING, "all ranks running", 3);
  state(50, v1::Job::PENDING, "drained from w1: disk swap", 3);
  state(51, v1::Job::RUNNING, "all ranks running", 4);
  EXPECT_EQ(history.restarts(), 1);
  job.set_preemptions(2);
  *job.add_preempt_times() = At(50);  // newest first: the line takes the newest anyway
  *job.add_preempt_times() = At(3);
  EXPECT_EQ(FormatPreemptedLine(job),
            "preempted  2 times, last 2026-12-01 00:00:50Z (not failures: no restart used)\n");
  EXPECT_THAT(FormatJobDescription(job, history, {}),
              HasSubstr("\npreempted  2 times, last 2026-12-01 00:00:50Z (not failures: no restart used)\nmodel "));
  EXPECT_EQ(FormatExplainHistory(job, history),
            "\nrestarts: 1 (restart.max_restarts 0)\n"
            "  00:00:07  after attempt 2: rank 0 on worker w2 failed: exit code 1\n"
            "\npreemptions: 2 (not failures: none used a restart of restart.max_restarts)\n"
            "  00:00:03  after attempt 1: preempted by job-9 (priority 5)\n"
            "  00:00:50  after attempt 3: drained from w1: disk swap\n");
  job.set_preemptions(1);
  job.clear_preempt_times();
  EXPECT_EQ(FormatPreemptedLine(job), "preempted  1 time (not failures: no restart used)\n");
}

}  // namespace
}  // namespace trainyard::cli
