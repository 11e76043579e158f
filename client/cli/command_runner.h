#pragma once

// The CLI's internals shared by its command files: the global flags, the client they
// make, and Runner, whose methods (one file per command group) run one subcommand:
//   job_commands.cc       submit, list, get, cancel, resize, explain, workers
//   sweep_commands.cc     submit, get, list, cancel and watch of a sweep (sweep_client.h)
//   watch_commands.cc     watch, logs (JobWatch from client/job_watch.h)
//   artifact_commands.cc  artifacts list, artifacts pull
//   fleet_commands.cc     checkpoint, workers cordon / uncordon / drain
//   webhook_commands.cc   webhooks status
//   audit_commands.cc     audit
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/job_view.h"
#include "client/cli/sweep_client.h"
#include "client/cli/sweep_request.h"
#include "client/job_client.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// Flags every subcommand takes, given before or after it (global flags).
struct CommonOptions {
  std::string controller;
  double timeout_s = 10.0;
  std::string output = "text";
  bool json_flag = false;
  bool timeout_given = false;  // --timeout was on the command line
  std::string tls_ca;          // --tls-ca: TLS, verifying the controller against this CA
  std::string token_file;      // --token-file: the bearer token's file

  bool Json() const { return json_flag || output == "json"; }
};

// A --timeout style check: a (non-negative when `zero_allowed`, else positive) finite
// number of seconds, refused in words.
CLI::Validator SecondsCheck(bool zero_allowed);

// The global flags, on the top-level app: with fallthrough a subcommand passes the
// ones it does not know up to it, so `trainyard --controller X list` and
// `trainyard list --controller X` mean the same.
void AddGlobalOptions(CLI::App* app, CommonOptions* options);

// The channel to --controller with what every call carries: TLS with --tls-ca, the
// token of --token-file or `env`, the --timeout deadline.
struct Connection {
  std::shared_ptr<grpc::ChannelInterface> channel;
  std::chrono::milliseconds timeout{0};
  std::string bearer_token;
};
absl::StatusOr<Connection> ConnectController(const CommonOptions& options, const CliEnvironment& env);

// The client of `options`: a JobClient on ConnectController's channel.
absl::StatusOr<std::unique_ptr<JobClient>> MakeClient(const CommonOptions& options, const CliEnvironment& env);

// `trainyard submit`'s arguments.
struct SubmitOptions {
  std::string file;
  std::vector<std::string> sets;          // --set
  std::vector<std::string> after;         // --after, added to the file's job.after
  std::vector<std::string> sweeps;        // --sweep section.key=V1,V2,...
  std::optional<int64_t> max_concurrent;  // --max-concurrent
  bool wait = false;
};

struct WatchOptions {
  int64_t from_seq = 0;
  double reconnect_for_s = 300;  // 0: exit at the first broken stream
  bool plain = false;            // plain lines even on a terminal
};

// Runs one subcommand against one controller; owns the client and the streams.
class Runner {
 public:
  // `sweeps` may be null when `client` was made alone: the sweep commands then fail.
  Runner(const CommonOptions& options, const CliEnvironment& env, std::unique_ptr<JobClient> client,
         std::unique_ptr<SweepClient> sweeps = nullptr)
      : options_(options),
        env_(env),
        out_(*env.out),
        err_(*env.err),
        client_(std::move(client)),
        sweeps_(std::move(sweeps)) {}

  // Prints the error (with a hint about the controller's address and TLS for an
  // unreachable one) and returns its exit code.
  int Fail(const absl::Status& status);
  void PrintJob(const v1::Job& job);

  // A job, or with --sweep flags or a [sweep] table a sweep (every point validated
  // here first); with `wait`, then watches it.
  int Submit(const SubmitOptions& submit);
  // Jobs (sweep children left out unless `with_sweep_children`), then the sweeps table
  // when there are sweeps. JSON: every job, children included, and no sweeps.
  int List(const std::vector<std::string>& state_names, int limit, bool with_sweep_children = false);
  // The job, then (text) its description from its stored events and artifacts; a sweep
  // id: the sweep and its ranking.
  int Get(const std::string& id);
  // A job, or a sweep's every child that has not ended.
  int Cancel(const std::string& id, const std::string& reason);
  int Resize(const std::string& id, int dp);
  int Explain(const std::string& id);
  int Workers();
  // Waits until the job's requested checkpoint is complete (or the controller's
  // deadline, --timeout when given); prints where it is.
  int Checkpoint(const std::string& id);
  // `cordon` false: uncordon.
  int Cordon(const std::string& name, bool cordon, const std::string& reason);
  int Drain(const std::string& name, const std::string& reason);
  // Each --webhooks endpoint: URL, kinds, owners, queue, counts, last success and error.
  int WebhookStatus();
  // The audit log (admin only), newest first; `since` as ParseSince takes it.
  int Audit(const std::string& job_id, const std::string& since, int limit);

  int ListArtifacts(const std::string& id);
  // One artifact, or every one of the job when `name` is empty; goes on past a failed
  // one and then exits with an error.
  int PullArtifacts(const std::string& id, const std::string& name, const std::string& dir);

  // Shows events as they arrive (a live status line per job on a terminal, plain lines
  // when piped, JSON Lines with --output json) until every job ended, each job's stream
  // on its own thread. Exits 0 when all SUCCEEDED, 1 when one FAILED or was CANCELLED,
  // or with the first job's error that is not that.
  // A sweep id (alone) is followed by WatchSweep.
  int Watch(const std::vector<std::string>& ids, const WatchOptions& watch);
  // Polls GetSweep every kSweepPollInterval on env.clock, printing SweepChangeLines
  // (JSON: the SweepView when something changed), until the sweep ended; then the
  // ranking. Exits as SweepExitCode. An outage after the first answer is retried for
  // --reconnect-for seconds.
  int WatchSweep(const std::string& id, const WatchOptions& watch);
  static constexpr absl::Duration kSweepPollInterval = absl::Seconds(1);
  // A job's log lines (rank output the worker forwards, and the controller's own):
  // those stored so far, or with `follow` until the job ends, then one stderr line with
  // its end state and reason. A `rank` the job does not have is INVALID_ARGUMENT naming
  // the job's ranks.
  int Logs(const std::string& id, std::optional<int> rank, bool follow, double reconnect_for_s);

 private:
  struct StreamResult {
    absl::Status status;                      // OK: end_state is set
    std::optional<v1::Job::State> end_state;  // the job's terminal state
  };

  int SubmitSweep(const SweepSubmission& submission, const v1::JobSpec& spec, bool wait);
  int GetSweep(const std::string& id);
  int CancelSweep(const std::string& id, const std::string& reason);
  // The sweep client, or FAILED_PRECONDITION when there is none.
  absl::StatusOr<SweepClient*> Sweeps();
  // Fail, saying for UNIMPLEMENTED that the controller has no sweep RPCs.
  int FailSweepCall(const absl::Status& status);

  // JobWatch from `from_seq` to the job's terminal state, reconnecting for at most
  // `reconnect_for_s` seconds of outage. An outage gets one `warn` line when it starts
  // and one when it ends; in between `note` (may be empty) says how the retries go, and
  // is cleared with "".
  StreamResult Stream(const std::string& id, int64_t from_seq, double reconnect_for_s,
                      const std::function<void(const v1::Event&)>& on_event,
                      const std::function<void(const std::string&)>& warn,
                      const std::function<void(const std::string&)>& note = {});
  // Passes the job's stored events (seq 1 to job.last_seq) to `on_event`: the stream
  // replays them and is then cut rather than followed.
  absl::Status Replay(const v1::Job& job, const std::function<void(const v1::Event&)>& on_event);
  absl::StatusOr<JobHistory> History(const v1::Job& job);
  // One log event as `logs` prints it (nothing for another kind, or another rank than
  // `rank`); `flush` after it.
  void PrintLog(const v1::Event& e, std::optional<int> rank, bool flush);

  const CommonOptions& options_;
  const CliEnvironment& env_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<JobClient> client_;
  std::unique_ptr<SweepClient> sweeps_;
};

}  // namespace trainyard::cli
