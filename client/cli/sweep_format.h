// What the CLI prints of sweeps (docs/cli.md, "Sweeps"): the children of a submitted
// sweep, `get SWEEP`'s description and ranking, `list`'s sweeps table, the lines of
// `watch SWEEP` and `cancel SWEEP`'s summary. Pure: every function reads only its
// arguments. Text from the controller is returned as is; callers pass it through
// TerminalSafe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// Sweep ids are "sweep-N"; `get`, `watch` and `cancel` take one where they take a job.
bool IsSweepId(std::string_view id);

// Child `index`'s job name, as the controller names it: "<sweep name>-<index>".
std::string SweepChildName(const v1::Sweep& sweep, int index);

// Children per state name: the view's `states`, or counted from its children when the
// controller sent none.
std::map<std::string, int32_t> SweepStateCounts(const v1::SweepView& view);
// "2 running, 3 pending, 1 succeeded": active states first (RUNNING, RESTARTING,
// SCHEDULED, PENDING), then ended ones (SUCCEEDED, FAILED, CANCELLED), then any other
// name in name order; zero counts left out; "-" when there are none.
std::string FormatStateCounts(const std::map<std::string, int32_t>& counts);

// A child in ranking order, with its place: 1-based by last validation loss (lowest
// first, ties by index), 0 for a child without a validation or with a NaN loss. Those
// come after every ranked child, NaN losses first, each group by index.
struct RankedChild {
  int rank = 0;
  const v1::SweepChild* child = nullptr;  // points into the view
};
std::vector<RankedChild> RankSweepChildren(const v1::SweepView& view);

// The ranking table, header included:
//   RANK  JOB    STATE      STEP  VAL_LOSS  VAL_STEP  LABEL
//   1     job-4  SUCCEEDED  20    2.3412    20        lr=0.0003,top_k=4
//   -     job-6  PENDING    -     -         -         lr=0.001,top_k=4
// STEP is the child's last step ("-" before one); VAL_LOSS has four decimals.
std::string FormatSweepRanking(const v1::SweepView& view);

// `get SWEEP`: a header (id, name, owner; created; children and max_concurrent; one
// line per axis with its values; the counts by state), a blank line, the ranking, and
// the reason of each FAILED child. Ends with a newline.
std::string FormatSweepDescription(const v1::SweepView& view);

// `submit` of a sweep: the sweep id alone on the first line (what scripts read), then
//   JOB    INDEX  NAME       STATE    LABEL
//   job-4  0      lr-grid-0  PENDING  lr=0.0001,top_k=2
std::string FormatSubmittedSweep(const v1::SweepView& view);

// `list`'s second table (children are left out of ListSweeps, so CHILDREN counts
// sweep.job_ids); MAX_CONCURRENT "-" for no limit, CREATED in UTC:
//   SWEEP    NAME     OWNER  CHILDREN  MAX_CONCURRENT  CREATED               STATES
//   sweep-1  lr-grid  alice  6         2               2026-12-01T10:02:03Z  2 running, 4 pending
std::string FormatSweepsTable(const std::vector<v1::SweepView>& sweeps);

// The sweeps with a child in one of `states` (all of them when `states` is empty), by
// their counts: what `list --state` shows of sweeps.
std::vector<v1::SweepView> SweepsWithChildrenIn(const std::vector<v1::SweepView>& sweeps,
                                                const std::vector<v1::Job::State>& states);

// `watch SWEEP`: what changed from `before` (nullptr: the first look, when every child
// is new) to `now`, one line each, children by index:
//   job-12 lr-grid-3 (lr=0.0003,top_k=4) RUNNING
//   job-12 lr-grid-3 (lr=0.0003,top_k=4) FAILED: rank 0 exited 1
//   job-12 lr-grid-3 (lr=0.0003,top_k=4) val_loss 2.3412 @ step 20
// A state line when the child's state differs (with its reason when it has one), a
// val_loss line when its last validation is new (another step or loss): before the
// state line when the child has ended, after it otherwise.
std::vector<std::string> SweepChangeLines(const v1::SweepView* before, const v1::SweepView& now);

// `cancel SWEEP`, from the view before and the one CancelSweep returned:
//   sweep-3: cancelled 4 of 6 children (2 had already ended)
//   states     4 cancelled, 1 succeeded, 1 failed
// A child counts as cancelled by this call when it had not ended before and is
// CANCELLED after. A sweep that had ended: "sweep-3: nothing to cancel: every child had
// already ended".
std::string FormatSweepCancel(const v1::SweepView& before, const v1::SweepView& after);

// `watch SWEEP`'s exit status once the sweep ended: kExitOk when every child SUCCEEDED,
// kExitJobFailed when one FAILED or was CANCELLED (watch of a job's codes), kExitError
// while a child has not ended.
int SweepExitCode(const v1::SweepView& view);

}  // namespace trainyard::cli
