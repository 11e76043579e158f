#include "client/cli/fleet_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/job_view.h"

namespace trainyard::cli {
namespace {

// "6 of 8 slots", "6 slots (no limit)"; `unit` plural.
std::string InUseOf(int in_use, int limit, absl::string_view unit) {
  if (limit > 0) return absl::StrCat(in_use, " of ", limit, " ", unit);
  return absl::StrCat(in_use, " ", unit, " (no limit)");
}

// "w1: cordoned (disk swap)" or "w1: cordoned".
std::string CordonedHead(const v1::WorkerInfo& w) {
  std::string out = absl::StrCat(w.name(), ": cordoned");
  if (!w.cordon_reason().empty()) absl::StrAppend(&out, " (", w.cordon_reason(), ")");
  return out;
}

}  // namespace

std::string Ordinal(int n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1) suffix = "st";
    if (n % 10 == 2) suffix = "nd";
    if (n % 10 == 3) suffix = "rd";
  }
  return absl::StrCat(n, suffix);
}

std::string FormatCheckpointDone(absl::string_view job_id, const v1::CheckpointRef& checkpoint) {
  return absl::StrCat(job_id, ": checkpoint at step ", checkpoint.step(), ": ", checkpoint.path(), " (",
                      checkpoint.bytes(), " bytes)\n");
}

std::string FormatCordonResult(const v1::WorkerInfo& worker) {
  if (!worker.cordoned()) return absl::StrCat(worker.name(), ": uncordoned: takes new ranks again\n");
  return absl::StrCat(CordonedHead(worker), ": takes no new ranks; what runs there keeps running\n");
}

std::string FormatDrainResult(const v1::DrainWorkerResponse& drained) {
  std::string out = CordonedHead(drained.worker());
  if (drained.job_ids().empty()) return out + "; no job has a rank there\n";
  absl::StrAppend(&out, "; moving ", drained.job_ids_size(), drained.job_ids_size() == 1 ? " job" : " jobs",
                  " (each saves a checkpoint, stops and is rescheduled elsewhere):\n");
  for (const std::string& id : drained.job_ids()) absl::StrAppend(&out, "  ", id, "\n");
  return out;
}

std::string FormatCordoned(const v1::WorkerInfo& worker) {
  if (!worker.cordoned()) return "-";
  return worker.cordon_reason().empty() ? "yes" : absl::StrCat("yes (", worker.cordon_reason(), ")");
}

std::string FormatPreemptedLine(const v1::Job& job) {
  if (job.preemptions() <= 0) return "";
  std::string out = absl::StrCat("preempted  ", job.preemptions(), job.preemptions() == 1 ? " time" : " times");
  if (job.preempt_times_size() > 0) {
    // The newest, whatever order the controller keeps them in.
    const auto newest = std::max_element(
        job.preempt_times().begin(), job.preempt_times().end(), [](const auto& a, const auto& b) {
          return std::make_pair(a.seconds(), a.nanos()) < std::make_pair(b.seconds(), b.nanos());
        });
    absl::StrAppend(&out, ", last ", FormatUtc(ToTime(*newest)));
  }
  return out + " (not failures: no restart used)\n";
}

std::string FormatShare(const v1::Job& job) {
  if (!job.has_share()) return "";
  const v1::ShareInfo& s = job.share();
  std::string out = absl::StrCat("quota:      owner ", s.owner().empty() ? job.owner() : s.owner(), " ",
                                 InUseOf(s.owner_slots_in_use(), s.owner_slot_limit(), "slots"), ", ",
                                 InUseOf(s.owner_gpus_in_use(), s.owner_gpu_limit(), "GPUs"), "\n");
  if (!s.group().empty()) {
    absl::StrAppend(&out, "            group ", s.group(), " ",
                    InUseOf(s.group_slots_in_use(), s.group_slot_limit(), "slots"), ", ",
                    InUseOf(s.group_gpus_in_use(), s.group_gpu_limit(), "GPUs"), "\n");
  }
  absl::StrAppend(&out,
                  absl::StrFormat("usage:      %.2f slot-hours (decayed), weight %g, fair share %.2f", s.usage_slot_seconds() / 3600,
                                  s.weight(), s.fair_share() / 3600),
                  " (usage / weight: the lower goes first among jobs of equal priority)\n");
  return out;
}

}  // namespace trainyard::cli
