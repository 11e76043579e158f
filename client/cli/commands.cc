#include "client/cli/commands.h"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/spec_error.h"
#include "client/artifact_pull.h"
#include "client/cli/cli_format.h"
#include "client/job_client.h"
#include "client/job_watch.h"
#include "client/cli/job_view.h"
#include "client/cli/preflight_command.h"
#include "client/cli/watch_display.h"
#include "common/job_file.h"
#include "common/events/proto_json.h"
#include "common/tls_files.h"

namespace trainyard::cli {
namespace {

// A submit with compile.preflight=true waits while the controller runs the preflight
// (up to its --preflight-timeout, 300 s by default, plus any queue), so unless
// --timeout is given its deadline is this instead of the per-call default.
constexpr std::chrono::minutes kPreflightSubmitTimeout{15};

static_assert(kPreflightClean == kExitOk && kPreflightFindings == kExitJobFailed &&
                  kPreflightBadInput == kExitUsage && kPreflightRunnerFailed == kExitError,
              "preflight's exit codes are rows of the CLI's one table");

// Flags every subcommand takes, given before or after it (global flags).
struct CommonOptions {
  std::string controller;
  double timeout_s = 10.0;
  std::string output = "text";
  bool json_flag = false;
  bool timeout_given = false;  // --timeout was on the command line
  std::string tls_ca;      // --tls-ca: TLS, verifying the controller against this CA
  std::string token_file;  // --token-file: the bearer token's file

  bool Json() const { return json_flag || output == "json"; }
};

// CLI11's PositiveNumber and NonNegativeNumber name the range up to DBL_MAX written out
// in 300 digits; these say it in words (and refuse nan and inf).
CLI::Validator SecondsCheck(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& value) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != value.size() || !std::isfinite(v) || v < 0 || (v == 0 && !zero_allowed)) {
          return absl::StrCat("must be a ", zero_allowed ? "non-negative" : "positive",
                              " number of seconds, got ", Quote(value));
        }
        return "";
      },
      zero_allowed ? "SECONDS>=0" : "SECONDS>0");
}

// The global flags, on the top-level app: with fallthrough a subcommand passes the
// ones it does not know up to it, so `trainyard --controller X list` and
// `trainyard list --controller X` mean the same.
void AddGlobalOptions(CLI::App* app, CommonOptions* options) {
  app->add_option("--controller", options->controller,
                  "Controller address host:port (default from TRAINYARD_CONTROLLER)")
      ->capture_default_str()
      // `trainyard --controller list` took the subcommand as the address and then
      // said only "A subcommand is required".
      ->check(CLI::Validator(
          [app](std::string& value) -> std::string {
            const std::vector<CLI::App*> named =
                app->get_subcommands([&value](CLI::App* sub) { return sub->get_name() == value; });
            if (named.empty()) return "";
            return absl::StrCat("expected host:port, got the subcommand name ", Quote(value),
                                " (the address goes right after --controller)");
          },
          "HOST:PORT"));
  app->add_option("--timeout", options->timeout_s, "Deadline of each call, in seconds")
      ->check(SecondsCheck(/*zero_allowed=*/false))
      ->capture_default_str();
  app->add_option("--tls-ca", options->tls_ca,
                  "PEM CA of the controller's certificate: connect over TLS (default: plaintext)");
  app->add_option("--token-file", options->token_file,
                  "File whose first line is the bearer token sent with every call (default: "
                  "the TRAINYARD_TOKEN environment variable, else none)");
  app->add_option("--output,-o", options->output, "text, or json: JSON Lines with .proto field names")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app->add_flag("--json", options->json_flag, "Same as --output json");
}

// The client of `options`: TLS with --tls-ca, the token of --token-file or `env`.
absl::StatusOr<std::unique_ptr<JobClient>> MakeClient(const CommonOptions& options,
                                                      const CliEnvironment& env) {
  JobClient::Credentials credentials;
  if (!options.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = LoadCaPem(options.tls_ca);
    if (!ca.ok()) return ca.status();
    credentials.tls_ca_pem = std::move(*ca);
  }
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = JobClient::ReadTokenFile(options.token_file);
    if (!token.ok()) return token.status();
    credentials.bearer_token = std::move(*token);
  } else if (!env.default_token.empty()) {
    if (absl::Status s = JobClient::CheckBearerToken(env.default_token, "TRAINYARD_TOKEN"); !s.ok()) return s;
    credentials.bearer_token = env.default_token;
  }
  if (!credentials.bearer_token.empty() && credentials.tls_ca_pem.empty() &&
      !IsLoopbackAddress(options.controller)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to send the bearer token (", options.token_file.empty() ? "TRAINYARD_TOKEN" : "--token-file",
        ") in plaintext to ", Quote(options.controller),
        ", which is not a loopback address: give --tls-ca to connect over TLS"));
  }
  return JobClient::Connect(
      options.controller,
      std::chrono::milliseconds(static_cast<int64_t>(std::ceil(options.timeout_s * 1000))), credentials);
}

struct WatchOptions {
  int64_t from_seq = 0;
  double reconnect_for_s = 300;  // 0: exit at the first broken stream
  bool plain = false;            // plain lines even on a terminal
};

// Runs one subcommand against one controller; owns the client and the streams.
class Runner {
 public:
  Runner(const CommonOptions& options, const CliEnvironment& env, std::unique_ptr<JobClient> client)
      : options_(options), env_(env), out_(*env.out), err_(*env.err), client_(std::move(client)) {}

  int Fail(const absl::Status& status) {
    std::string message = FormatError(status);
    if (status.code() == absl::StatusCode::kUnavailable ||
        status.code() == absl::StatusCode::kDeadlineExceeded) {
      absl::StrAppend(&message, " (controller at ", options_.controller,
                      options_.tls_ca.empty()
                          ? "; plaintext: a controller that serves TLS needs --tls-ca)"
                          : "; TLS with --tls-ca)");
    }
    err_ << message << std::endl;
    return ExitCodeForStatus(status);
  }

  void PrintJob(const v1::Job& job) {
    if (options_.Json()) {
      out_ << ToJsonLine(job) << '\n';
    } else {
      out_ << TerminalSafe(FormatJobsTable({job}), /*keep_newlines=*/true);
    }
  }

  int Submit(const std::string& file, const std::vector<std::string>& sets, bool wait) {
    absl::StatusOr<v1::JobSpec> spec = LoadJobFile(file, sets);
    if (!spec.ok()) return Fail(spec.status());
    std::optional<std::chrono::milliseconds> timeout;
    if (spec->compile().preflight() && !options_.timeout_given) timeout = kPreflightSubmitTimeout;
    absl::StatusOr<v1::Job> job = client_->SubmitJob(*spec, timeout);
    if (!job.ok()) return Fail(job.status());
    if (options_.Json()) {
      out_ << ToJsonLine(*job) << std::endl;
    } else {
      out_ << job->id() << std::endl;
    }
    return wait ? Watch({job->id()}, WatchOptions{}) : kExitOk;
  }

  int List(const std::vector<std::string>& state_names, int limit) {
    std::vector<v1::Job::State> states;
    for (const std::string& name : state_names) {
      absl::StatusOr<v1::Job::State> state = ParseJobState(name);
      if (!state.ok()) return Fail(state.status());
      // `--state RUNNING,RUNNING` means RUNNING; the controller refuses repeats.
      if (std::find(states.begin(), states.end(), *state) == states.end()) states.push_back(*state);
    }
    absl::StatusOr<std::vector<v1::Job>> jobs = client_->ListJobs(states, limit);
    if (!jobs.ok()) return Fail(jobs.status());
    if (options_.Json()) {
      for (const v1::Job& job : *jobs) out_ << ToJsonLine(job) << '\n';
    } else {
      out_ << TerminalSafe(FormatJobsTable(*jobs), /*keep_newlines=*/true);
    }
    out_.flush();
    return kExitOk;
  }

  // The job, then (text) its description from its stored events and artifacts.
  int Get(const std::string& id) {
    absl::StatusOr<v1::Job> job = client_->GetJob(id);
    if (!job.ok()) return Fail(job.status());
    if (options_.Json()) {
      PrintJob(*job);
      out_.flush();
      return kExitOk;
    }
    absl::StatusOr<JobHistory> history = History(*job);
    if (!history.ok()) return Fail(history.status());
    // The description stands without the artifacts (a controller without them, or a
    // role that may not list them).
    absl::StatusOr<std::vector<v1::ArtifactInfo>> artifacts = client_->ListArtifacts(id);
    // Reasons, failure messages, worker names and paths come from ranks and workers.
    out_ << TerminalSafe(FormatJobDescription(*job, *history,
                                              artifacts.ok() ? *artifacts : std::vector<v1::ArtifactInfo>{},
                                              artifacts.ok() ? "" : FormatError(artifacts.status())),
                         /*keep_newlines=*/true);
    out_.flush();
    return kExitOk;
  }

  int Cancel(const std::string& id, const std::string& reason) {
    absl::StatusOr<v1::Job> job = client_->CancelJob(id, reason);
    if (!job.ok()) return Fail(job.status());
    PrintJob(*job);
    out_.flush();
    return kExitOk;
  }

  int Resize(const std::string& id, int dp) {
    absl::StatusOr<v1::Job> job = client_->ResizeJob(id, dp);
    if (!job.ok()) return Fail(job.status());
    PrintJob(*job);
    out_.flush();
    return kExitOk;
  }

  int Explain(const std::string& id) {
    absl::StatusOr<v1::Job> job = client_->GetJob(id);
    if (!job.ok()) return Fail(job.status());
    absl::StatusOr<std::vector<v1::Job>> pending = client_->ListJobs({v1::Job::PENDING}, 1000);
    if (!pending.ok()) return Fail(pending.status());
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client_->ListWorkers();
    if (!workers.ok()) return Fail(workers.status());
    if (options_.Json()) {
      out_ << ToJsonLine(*job) << '\n';
    } else {
      absl::StatusOr<JobHistory> history = History(*job);
      if (!history.ok()) return Fail(history.status());
      out_ << TerminalSafe(FormatExplain(*job, *pending, *workers, env_.clock->Now()) +
                               FormatExplainHistory(*job, *history),
                           /*keep_newlines=*/true);
    }
    out_.flush();
    return kExitOk;
  }

  int Workers() {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client_->ListWorkers();
    if (!workers.ok()) return Fail(workers.status());
    if (options_.Json()) {
      for (const v1::WorkerInfo& w : *workers) out_ << ToJsonLine(w) << '\n';
    } else {
      out_ << TerminalSafe(FormatWorkersTable(*workers), /*keep_newlines=*/true);
    }
    out_.flush();
    return kExitOk;
  }

  int ListArtifacts(const std::string& id) {
    absl::StatusOr<std::vector<v1::ArtifactInfo>> artifacts = client_->ListArtifacts(id);
    if (!artifacts.ok()) return Fail(artifacts.status());
    if (options_.Json()) {
      for (const v1::ArtifactInfo& a : *artifacts) out_ << ToJsonLine(a) << '\n';
    } else {
      out_ << TerminalSafe(FormatArtifactsTable(*artifacts), /*keep_newlines=*/true);
    }
    out_.flush();
    return kExitOk;
  }

  // One artifact, or every one of the job when `name` is empty; goes on past a failed
  // one and then exits with an error.
  int PullArtifacts(const std::string& id, const std::string& name, const std::string& dir) {
    std::vector<std::string> names;
    if (!name.empty()) {
      names.push_back(name);
    } else {
      absl::StatusOr<std::vector<v1::ArtifactInfo>> artifacts = client_->ListArtifacts(id);
      if (!artifacts.ok()) return Fail(artifacts.status());
      if (artifacts->empty()) {
        err_ << "trainyard: job " << id << " has no artifacts" << std::endl;
        return kExitOk;
      }
      for (const v1::ArtifactInfo& a : *artifacts) names.push_back(a.name());
    }
    int failed = 0;
    int last_error = kExitError;
    for (const std::string& n : names) {
      absl::StatusOr<PulledArtifact> pulled = PullArtifactToDir(*client_, id, n, dir);
      if (!pulled.ok()) {
        last_error = Fail(pulled.status());
        ++failed;
        continue;
      }
      out_ << "wrote " << TerminalSafe(pulled->path) << " (" << FormatBytes(pulled->info.size_bytes())
           << ", sha256 " << pulled->info.sha256().substr(0, 12) << ")" << std::endl;
    }
    if (failed > 0 && names.size() > 1) {
      err_ << "trainyard: " << failed << " of " << names.size() << " artifacts not pulled"
           << std::endl;
    }
    return failed > 0 ? last_error : kExitOk;
  }

  // Shows events as they arrive (a live status line per job on a terminal, plain lines
  // when piped, JSON Lines with --output json) until every job ended, each job's stream
  // on its own thread. Exits 0 when all SUCCEEDED, 1 when one FAILED or was CANCELLED,
  // or with the first job's error that is not that.
  int Watch(const std::vector<std::string>& ids, const WatchOptions& watch) {
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

  // A job's log lines (rank output the worker forwards, and the controller's own):
  // those stored so far, or with `follow` until the job ends.
  int Logs(const std::string& id, std::optional<int> rank, bool follow, double reconnect_for_s) {
    auto print = [&](const v1::Event& e) {
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
      if (follow) out_.flush();
    };
    if (follow) {
      StreamResult result = Stream(id, 0, reconnect_for_s, print,
                                   [&](const std::string& line) { err_ << TerminalSafe(line) << std::endl; });
      out_.flush();
      if (!result.status.ok()) return Fail(result.status);
      return WatchExitCode(*result.end_state);
    }
    absl::StatusOr<v1::Job> job = client_->GetJob(id);
    if (!job.ok()) return Fail(job.status());
    absl::Status status = Replay(*job, print);
    out_.flush();
    return status.ok() ? kExitOk : Fail(status);
  }

 private:
  struct StreamResult {
    absl::Status status;                      // OK: end_state is set
    std::optional<v1::Job::State> end_state;  // the job's terminal state
  };

  // JobWatch from `from_seq` to the job's terminal state, reconnecting for at most
  // `reconnect_for_s` seconds of outage. An outage gets one `warn` line when it starts
  // and one when it ends; in between `note` (may be empty) says how the retries go, and
  // is cleared with "".
  StreamResult Stream(const std::string& id, int64_t from_seq, double reconnect_for_s,
                      const std::function<void(const v1::Event&)>& on_event,
                      const std::function<void(const std::string&)>& warn,
                      const std::function<void(const std::string&)>& note = {}) {
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
      warn(absl::StrCat("trainyard: connection to the controller lost (", absl::StatusCodeToString(status.code()),
                        ": ", why, "); reconnecting from seq ", resume_seq, " for up to ",
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
      return {absl::Status(result.status.code(),
                           absl::StrCat(result.status.message(), " (gave up reconnecting after ",
                                        HumanDuration(*result.gave_up_after), ", --reconnect-for)")),
              std::nullopt};
    }
    return {result.status, result.end_state};
  }

  // Passes the job's stored events (seq 1 to job.last_seq) to `on_event`: the stream
  // replays them and is then cut rather than followed.
  absl::Status Replay(const v1::Job& job, const std::function<void(const v1::Event&)>& on_event) {
    if (job.last_seq() <= 0) return absl::OkStatus();
    return client_->Watch(job.id(), 1, [&](const v1::Event& event) {
      on_event(event);
      return event.seq() < job.last_seq();
    });
  }

  absl::StatusOr<JobHistory> History(const v1::Job& job) {
    JobHistory history;
    absl::Status status = Replay(job, [&](const v1::Event& e) { history.Add(e); });
    if (!status.ok()) return status;
    return history;
  }

  const CommonOptions& options_;
  const CliEnvironment& env_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<JobClient> client_;
};

}  // namespace

int RunCli(int argc, const char* const* argv, const CliEnvironment& env) {
  CLI::App app{"trainyard: submit, watch and explain Mixture-of-Experts training jobs", "trainyard"};
  app.require_subcommand(1);
  // Before any add_subcommand: subcommands inherit it, and pass the global flags they do
  // not know up to `app`.
  app.fallthrough();
  app.set_version_flag("--version", std::string("trainyard ") + TRAINYARD_VERSION);
  app.footer(absl::StrCat(
      "Global flags (--controller, --timeout, --tls-ca, --token-file, --output/-o, --json) go "
      "before or after the subcommand. A secured controller needs --tls-ca CA.pem (TLS) and "
      "--token-file FILE (else TRAINYARD_TOKEN); the token is never printed.\n\n"
      "Examples:\n"
      "  trainyard submit examples/debug.toml --set training.steps=50 --wait\n"
      "  trainyard --controller 10.0.0.5:7070 list --state running\n"
      "  trainyard watch job-3\n"
      "  trainyard explain job-3\n\n"
      "Exit status (every command):\n",
      ExitCodeTable()));

  CommonOptions common;
  common.controller = env.default_controller;
  AddGlobalOptions(&app, &common);

  // Each subcommand's help ends with an example and points at the global flags.
  auto example = [](CLI::App* sub, const std::string& text) {
    sub->footer(absl::StrCat(text, "\nGlobal flags and exit status: trainyard --help"));
  };

  std::string file;
  std::vector<std::string> sets;
  bool wait = false;
  CLI::App* submit = app.add_subcommand("submit", "Submit a TOML job file; prints the job id");
  submit->add_option("file", file, "Job file (TOML)")->required();
  submit
      ->add_option("--set", sets,
                   "Override a key: section.key=value, value in TOML syntax (repeatable)")
      ->allow_extra_args(false);
  submit->add_flag("--wait", wait, "Then watch the job and exit like `watch`");
  example(submit,
          "With compile.preflight=true the controller runs the compile preflight before creating the "
          "job; the call then waits up to 15 minutes unless --timeout is given.\n"
          "Example: trainyard submit examples/debug.toml --set training.steps=50 --wait");

  std::vector<std::string> states;
  int limit = 0;
  CLI::App* list = app.add_subcommand("list", "List jobs");
  list->add_option(
          "--state", states,
          "Only jobs in this state (repeatable, or comma-separated): PENDING, RUNNING, ...")
      ->allow_extra_args(false)
      ->delimiter(',');
  list->add_option("--limit", limit, "At most this many jobs, 0 to 1000 (0: the controller's default, 100)")
      ->check(CLI::Range(0, 1000));
  example(list, "Example: trainyard list --state pending,running");

  std::string job_id;
  CLI::App* get = app.add_subcommand(
      "get", "Describe one job: spec, state history, attempts and their causes, workers, last "
             "metrics, checkpoints, artifacts (--output json: the Job message)");
  get->add_option("job", job_id, "Job id")->required();
  example(get, "Example: trainyard get job-3");

  CLI::App* explain = app.add_subcommand(
      "explain", "Why a job is where it is: the scheduler's reason, queue position, estimated "
                 "start and reserved slots while PENDING; its compile summary per region with "
                 "hints, restarts and stalls");
  explain->add_option("job", job_id, "Job id")->required();
  example(explain, "Example: trainyard explain job-3");

  CLI::App* workers = app.add_subcommand("workers", "List workers and their free slots");
  example(workers, "Example: trainyard workers");

  std::string reason;
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job", job_id, "Job id")->required();
  cancel->add_option("--reason", reason, "Why (stored as the job's failure reason)");
  example(cancel, "Example: trainyard cancel job-3 --reason 'wrong lr'");

  int resize_dp = 0;
  CLI::App* resize = app.add_subcommand(
      "resize", "Restart a running job from its last checkpoint at another data-parallel degree");
  resize->add_option("job", job_id, "Job id")->required();
  resize->add_option("--dp", resize_dp, "Data-parallel degree, 1 to the job's parallelism.dp")
      ->required()
      ->check(CLI::Range(1, 65536));
  example(resize,
          "grad_accum_steps is scaled so the global batch is unchanged, so --dp must divide "
          "dp*grad_accum_steps and be >= restart.min_dp. The job needs checkpoints "
          "(checkpoint.interval > 0): its ranks are cancelled and it restarts from the newest "
          "checkpoint, without backoff and without using a restart of restart.max_restarts. It "
          "waits PENDING until --dp slots are free. The size holds for that restart only: a "
          "later failure restarts at the submitted dp (or shrinks as restart.min_dp allows). "
          "A job already at --dp is printed unchanged. Prints the job.\n"
          "Example: trainyard resize job-3 --dp 2");

  WatchOptions watch_options;
  std::vector<std::string> watch_ids;
  CLI::App* watch = app.add_subcommand(
      "watch", "Follow jobs until they end: a live status line per job on a terminal (step, "
               "loss sparkline, tokens/s, MFU, ETA, recompiles), one line per event when piped");
  watch->add_option("job", watch_ids, "Job id(s)")->required();
  watch->add_option("--from-seq", watch_options.from_seq, "First event seq to show (default: from the start)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  watch
      ->add_option("--reconnect-for", watch_options.reconnect_for_s,
                   "Seconds to keep reconnecting after the stream breaks (0: give up at once)")
      ->check(SecondsCheck(/*zero_allowed=*/true))
      ->capture_default_str();
  watch->add_flag("--plain", watch_options.plain, "One line per event even on a terminal");
  example(watch,
          "Exits 0 if every job SUCCEEDED, 1 if one FAILED or was CANCELLED. A broken stream "
          "(the controller restarted) is resumed from the next seq with a warning; no event is "
          "shown twice. --output json: one Event JSON object per line. With several jobs, plain "
          "lines start with [JOB].\n"
          "Example: trainyard watch job-3 job-4");

  int logs_rank = -1;
  bool logs_follow = false;
  double logs_reconnect_for = 300;
  CLI::App* logs = app.add_subcommand("logs", "Print a job's log lines (rank output and the controller's)");
  logs->add_option("job", job_id, "Job id")->required();
  logs->add_option("--rank", logs_rank, "Only this rank's lines (default: every rank and the controller's)")
      ->check(CLI::Range(0, 65535));
  logs->add_flag("--follow,-f", logs_follow, "Keep printing new lines until the job ends (exits like watch)");
  logs->add_option("--reconnect-for", logs_reconnect_for,
                   "With --follow: seconds to keep reconnecting after the stream breaks")
      ->check(SecondsCheck(/*zero_allowed=*/true))
      ->capture_default_str();
  example(logs, "Example: trainyard logs job-3 --rank 0 --follow");

  CLI::App* artifacts = app.add_subcommand(
      "artifacts", "List or download a job's artifacts (profiler traces, flight-recorder dumps)");
  artifacts->require_subcommand(1);
  example(artifacts, "Example: trainyard artifacts list job-3");
  CLI::App* artifacts_list =
      artifacts->add_subcommand("list", "List a job's artifacts: NAME KIND ATTEMPT RANK SIZE "
                                        "SHA256 TIME (RANK - for a worker's own file)");
  artifacts_list->add_option("job", job_id, "Job id")->required();
  example(artifacts_list, "Example: trainyard artifacts list job-3");
  std::string artifact_name;
  std::string artifact_dir = ".";
  CLI::App* artifacts_pull = artifacts->add_subcommand(
      "pull", "Download one artifact, or all of the job's when NAME is omitted, to DIR/NAME");
  artifacts_pull->add_option("job", job_id, "Job id")->required();
  artifacts_pull->add_option("name", artifact_name, "Artifact name (default: every artifact)");
  artifacts_pull->add_option("--output-dir,-o", artifact_dir, "Directory to write into")
      ->capture_default_str();
  example(artifacts_pull,
          "Each file is written to a temporary file in DIR and renamed to DIR/NAME only after its "
          "size and sha256 match the controller's; an existing DIR/NAME is replaced, DIR is "
          "created if missing. --timeout bounds the listing; each download may take up to 30 "
          "minutes. Prints one 'wrote DIR/NAME (SIZE, sha256 PREFIX)' line per file; goes on past "
          "an artifact that fails and then exits with its error's code.\n"
          "Example: trainyard artifacts pull job-3 -o traces/");

  PreflightCommandOptions preflight_options;
  preflight_options.train_binary = env.default_train_binary;
  preflight_options.spec_dir = env.temp_dir;
  CLI::App* preflight = app.add_subcommand(
      "preflight",
      "Run the job's compile preflight locally (3 steps of its exact structure on local CPU "
      "ranks, jit in place of cudagraph) and print its compile events and a verdict");
  preflight->add_option("file", preflight_options.job_file, "Job file (TOML)")->required();
  preflight
      ->add_option("--set", preflight_options.sets,
                   "Override a key: section.key=value, value in TOML syntax (repeatable)")
      ->allow_extra_args(false);
  preflight->add_flag("--shrink", preflight_options.shrink,
                      "Let the runner shrink the model's sizes (same structure, faster)");
  preflight->add_flag("--json", preflight_options.json,
                      "Print the runner's Event JSON lines (the verdict goes to stderr)");
  preflight
      ->add_option("--train-binary", preflight_options.train_binary,
                   "The preflight runner (default: trainyard-train next to this executable)")
      ->capture_default_str();
  preflight
      ->add_option("--timeout", preflight_options.timeout_s,
                   "Seconds before the runner's process group is killed")
      ->check(SecondsCheck(/*zero_allowed=*/false))
      ->capture_default_str();
  example(preflight,
          "Prints COMPILE, RECOMPILE, RECOMPILE_LIMIT, GRAPH_BREAK, UNSAFE_SIDE_EFFECT and "
          "FALLBACK events, one line each, then a verdict. The job file is checked as `submit` "
          "and the controller check it (slots aside). Needs no controller. Exit status: 0 clean, "
          "1 findings (an UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT event), 2 bad job file, "
          "validation or usage error, 6 the runner failed (a rank failed, it timed out or could "
          "not start).\n"
          "Example: trainyard preflight examples/debug.toml --shrink");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every other is a usage error.
    return app.exit(e, *env.out, *env.err) == 0 ? kExitOk : kExitUsage;
  }
  if (preflight->parsed()) {
    if (env.launcher == nullptr) {
      *env.err << "trainyard: preflight: no process launcher was wired in" << std::endl;
      return kPreflightRunnerFailed;
    }
    return RunPreflightCommand(preflight_options, env.launcher, env.clock, *env.out, *env.err);
  }
  common.timeout_given = app.get_option("--timeout")->count() > 0;

  absl::StatusOr<std::unique_ptr<JobClient>> client = MakeClient(common, env);
  if (!client.ok()) {
    *env.err << FormatError(client.status()) << std::endl;
    return ExitCodeForStatus(client.status());
  }
  Runner runner(common, env, std::move(*client));
  if (submit->parsed()) return runner.Submit(file, sets, wait);
  if (list->parsed()) return runner.List(states, limit);
  if (get->parsed()) return runner.Get(job_id);
  if (explain->parsed()) return runner.Explain(job_id);
  if (workers->parsed()) return runner.Workers();
  if (cancel->parsed()) return runner.Cancel(job_id, reason);
  if (resize->parsed()) return runner.Resize(job_id, resize_dp);
  if (watch->parsed()) return runner.Watch(watch_ids, watch_options);
  if (logs->parsed()) return runner.Logs(job_id, logs_rank >= 0 ? std::optional<int>(logs_rank) : std::nullopt, logs_follow, logs_reconnect_for);
  if (artifacts_list->parsed()) return runner.ListArtifacts(job_id);
  if (artifacts_pull->parsed()) return runner.PullArtifacts(job_id, artifact_name, artifact_dir);
  return kExitUsage;  // require_subcommand(1) makes this unreachable
}

}  // namespace trainyard::cli
