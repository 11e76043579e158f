#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "client/cli/sweep_format.h"
#include "client/cli/watch_display.h"
#include "client/job_watch.h"
#include "common/events/proto_json.h"

namespace trainyard::cli {

int Runner::Watch(const std::vector<std::string>& ids, const WatchOptions& watch) {
  for (const std::string& id : ids) {
    if (!IsSweepId(id)) continue;
    // A sweep is polled as a whole, not streamed: it has no events, so no seq.
    if (ids.size() > 1) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("watch takes a sweep id alone (", id, " was given with ",
                                                          ids.size() - 1, ids.size() == 2 ? " other id" : " other ids",
                                                          "): watch the sweep, or jobs by their ids")));
    }
    if (watch.from_seq > 0) {
      return Fail(absl::InvalidArgumentError("--from-seq is for a job's events; a sweep has none"));
    }
    return WatchSweep(id, watch);
  }
  if (ids.size() > 1 && watch.from_seq > 0) {
    return Fail(absl::InvalidArgumentError("--from-seq needs exactly one JOB"));
  }
  WatchDisplay::Mode mode = WatchDisplay::Mode::kPlain;
  if (options_.Json()) {
    mode = WatchDisplay::Mode::kJson;
  } else if (env_.out_is_terminal && !watch.plain) {
    mode = WatchDisplay::Mode::kTerminal;
  }
  std::vector<WatchDisplay::Job> jobs;
  for (const std::string& id : ids) {
    WatchDisplay::Job job{id, 0};
    if (mode == WatchDisplay::Mode::kTerminal) {
      // The step total for "step 12/20" and the ETA; the events do not carry it.
      absl::StatusOr<v1::Job> got = client_->GetJob(id);
      if (!got.ok()) return Fail(got.status());
      job.total_steps = got->spec().training().steps();
    }
    jobs.push_back(job);
  }
  WatchDisplay display(mode, out_, err_, jobs, env_.terminal_columns);
  std::vector<StreamResult> results(ids.size());
  auto follow = [&](size_t i) {
    const std::string& id = ids[i];
    const std::string who = ids.size() > 1 ? absl::StrCat(" [", id, "]") : "";
    results[i] = Stream(
        id, watch.from_seq, watch.reconnect_for_s, [&](const v1::Event& e) { display.OnEvent(e); },
        [&](const std::string& line) { display.Warn(line + who); },
        [&](const std::string& note) { display.SetNote(id, note); });
  };
  if (ids.size() == 1) {
    follow(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ids.size(); ++i) threads.emplace_back(follow, i);
    for (std::thread& t : threads) t.join();
  }
  display.Finish();
  int code = kExitOk;
  for (const StreamResult& r : results) {
    if (!r.status.ok()) {
      const int error = Fail(r.status);
      if (code == kExitOk || code == kExitJobFailed) code = error;
    } else if (WatchExitCode(*r.end_state) != kExitOk && code == kExitOk) {
      code = WatchExitCode(*r.end_state);
    }
  }
  return code;
}

namespace {

// OK when `rank` is one of the job's ranks; else why not, naming them. A resized or
// elastic job may have had more ranks than it has now: the larger of its world size and
// its spec's dp·tp counts.
absl::Status CheckRank(const v1::Job& job, int rank) {
  const int64_t world = std::max<int64_t>(
      job.world_size(), int64_t{job.spec().parallelism().dp()} * std::max(1, job.spec().parallelism().tp()));
  if (rank < world) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--rank ", rank, ": ", job.id(), world <= 1 ? " has only rank 0" : absl::StrCat(" has ranks 0 to ", world - 1),
      " (world size ", world, ")"));
}

}  // namespace

int Runner::Logs(const std::string& id, std::optional<int> rank, bool follow, double reconnect_for_s) {
  // A rank the job never had would print nothing and look like a quiet rank.
  if (rank.has_value() || !follow) {
    absl::StatusOr<v1::Job> job = client_->GetJob(id);
    if (!job.ok()) return Fail(job.status());
    if (rank.has_value()) {
      if (absl::Status bad = CheckRank(*job, *rank); !bad.ok()) return Fail(bad);
    }
    if (!follow) {
      absl::Status status = Replay(*job, [&](const v1::Event& e) { PrintLog(e, rank, follow); });
      out_.flush();
      return status.ok() ? kExitOk : Fail(status);
    }
  }
  std::optional<v1::JobStateChange> ended;  // the terminal state change, with its reason
  StreamResult result = Stream(
      id, 0, reconnect_for_s,
      [&](const v1::Event& e) {
        if (e.has_job_state()) ended = e.job_state();
        PrintLog(e, rank, follow);
      },
      [&](const std::string& line) { err_ << TerminalSafe(line) << std::endl; });
  out_.flush();
  if (!result.status.ok()) return Fail(result.status);
  // Say why the lines stopped: a cancel or a failure elsewhere ends them as quietly as
  // success would. On stderr, so stdout stays the log lines (or JSON Lines).
  const std::string reason = ended.has_value() && ended->state() == *result.end_state ? ended->reason() : std::string();
  err_ << "trainyard: " << id << " ended " << v1::Job::State_Name(*result.end_state) << (reason.empty() ? "" : ": ")
       << TerminalSafe(reason) << std::endl;
  return WatchExitCode(*result.end_state);
}

void Runner::PrintLog(const v1::Event& e, std::optional<int> rank, bool flush) {
  if (!e.has_log()) return;
  if (rank.has_value() && e.rank() != *rank) return;
  if (options_.Json()) {
    out_ << ToJsonLine(e) << '\n';
  } else {
    out_ << absl::FormatTime("%H:%M:%S", ToTime(e.time()), absl::UTCTimeZone()) << ' '
         << (e.rank() < 0 ? std::string("job") : absl::StrCat("rank ", e.rank()));
    if (e.attempt() > 1) out_ << " attempt " << e.attempt();
    // A rank's output may hold escape sequences (colours, cursor moves, titles).
    out_ << " [" << (e.log().level().empty() ? "info" : TerminalSafe(e.log().level())) << "] "
         << TerminalSafe(e.log().message()) << '\n';
  }
  if (flush) out_.flush();
}

Runner::StreamResult Runner::Stream(const std::string& id, int64_t from_seq, double reconnect_for_s,
                                    const std::function<void(const v1::Event&)>& on_event,
                                    const std::function<void(const std::string&)>& warn,
                                    const std::function<void(const std::string&)>& note) {
  JobWatch::Options options;
  options.from_seq = from_seq;
  options.reconnect_for = absl::Seconds(reconnect_for_s);
  options.clock = env_.clock;
  JobWatch::Callbacks callbacks;
  callbacks.on_event = on_event;
  callbacks.on_outage = [&](const absl::Status& status, int64_t resume_seq) {
    // gRPC's connect errors run to hundreds of characters: the first line's worth.
    std::string why(status.message().substr(0, 80));
    if (status.message().size() > 80) why += "...";
    warn(absl::StrCat("trainyard: connection to the controller lost (", absl::StatusCodeToString(status.code()), ": ",
                      why, "); reconnecting from seq ", resume_seq, " for up to ",
                      HumanDuration(absl::Seconds(reconnect_for_s))));
  };
  callbacks.on_retry = [&](int retry, absl::Duration backoff) {
    if (note) note(absl::StrCat("reconnecting: try ", retry, ", next in ", absl::FormatDuration(backoff)));
  };
  callbacks.on_reconnected = [&](absl::Duration outage, int64_t resume_seq) {
    warn(absl::StrCat("trainyard: reconnected after ", HumanDuration(outage), "; resuming at seq ", resume_seq));
    if (note) note("");
  };
  JobWatch::Result result = JobWatch(client_.get(), options).Run(id, callbacks);
  if (result.gave_up_after.has_value()) {
    if (note) note("");
    return {
        absl::Status(result.status.code(), absl::StrCat(result.status.message(), " (gave up reconnecting after ",
                                                        HumanDuration(*result.gave_up_after), ", --reconnect-for)")),
        std::nullopt};
  }
  return {result.status, result.end_state};
}

absl::Status Runner::Replay(const v1::Job& job, const std::function<void(const v1::Event&)>& on_event) {
  if (job.last_seq() <= 0) return absl::OkStatus();
  return client_->Watch(job.id(), 1, [&](const v1::Event& event) {
    on_event(event);
    return event.seq() < job.last_seq();
  });
}

absl::StatusOr<JobHistory> Runner::History(const v1::Job& job) {
  JobHistory history;
  if (job.has_compacted()) return history;  // retention removed its events; the row is the summary
  absl::Status status = Replay(job, [&](const v1::Event& e) { history.Add(e); });
  if (!status.ok()) return status;
  return history;
}

}  // namespace trainyard::cli
