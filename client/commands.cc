#include "client/commands.h"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/spec_error.h"
#include "client/artifact_pull.h"
#include "client/cli_format.h"
#include "client/job_client.h"
#include "client/preflight_command.h"
#include "common/job_file.h"
#include "common/proto_json.h"
#include "common/tls_files.h"

namespace trainyard::cli {
namespace {

// A submit with compile.preflight=true waits while the controller runs the preflight
// (up to its --preflight-timeout, 300 s by default, plus any queue), so unless
// --timeout is given its deadline is this instead of the per-call default.
constexpr std::chrono::minutes kPreflightSubmitTimeout{15};

constexpr const char* kWatchExitCodes =
    "Exit status: 0 if the job SUCCEEDED, 1 if it FAILED, 2 if it was CANCELLED, "
    "3 on an RPC, connection or usage error.";

// Flags every subcommand takes.
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

// --controller, --timeout, --tls-ca and --token-file.
void AddConnectionOptions(CLI::App* sub, CommonOptions* options) {
  sub->add_option("--controller", options->controller,
                  "Controller address host:port (default from TRAINYARD_CONTROLLER)")
      ->capture_default_str();
  sub->add_option("--timeout", options->timeout_s, "Deadline of each call, in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--tls-ca", options->tls_ca,
                  "PEM CA of the controller's certificate: connect over TLS (default: plaintext)");
  sub->add_option("--token-file", options->token_file,
                  "File whose first line is the bearer token sent with every call (default: "
                  "the TRAINYARD_TOKEN environment variable, else none)");
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
        ") in plaintext to ", spec::Quote(options.controller),
        ", which is not a loopback address: give --tls-ca to connect over TLS"));
  }
  return JobClient::Connect(
      options.controller,
      std::chrono::milliseconds(static_cast<int64_t>(std::ceil(options.timeout_s * 1000))), credentials);
}

void AddCommonOptions(CLI::App* sub, CommonOptions* options) {
  AddConnectionOptions(sub, options);
  sub->add_option("--output,-o", options->output,
                  "text, or json: JSON Lines with .proto field names")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  sub->add_flag("--json", options->json_flag, "Same as --output json");
}

// Runs one subcommand against one controller; owns the client and the streams.
class Runner {
 public:
  Runner(const CommonOptions& options, const CliEnvironment& env, std::unique_ptr<JobClient> client)
      : options_(options), out_(*env.out), err_(*env.err), client_(std::move(client)) {}

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
    return kExitError;
  }

  void PrintJob(const v1::Job& job) {
    if (options_.Json()) {
      out_ << ToJsonLine(job) << '\n';
    } else {
      out_ << FormatJobsTable({job});
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
    return wait ? Watch(job->id(), 0) : kExitOk;
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
      out_ << FormatJobsTable(*jobs);
    }
    out_.flush();
    return kExitOk;
  }

  int Get(const std::string& id) {
    absl::StatusOr<v1::Job> job = client_->GetJob(id);
    if (!job.ok()) return Fail(job.status());
    PrintJob(*job);
    if (!options_.Json()) out_ << FormatJobDetails(*job);
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
      out_ << FormatExplain(*job, *pending, *workers, absl::Now());
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
      out_ << FormatWorkersTable(*workers);
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
      out_ << FormatArtifactsTable(*artifacts);
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
    for (const std::string& n : names) {
      absl::StatusOr<PulledArtifact> pulled = PullArtifactToDir(*client_, id, n, dir);
      if (!pulled.ok()) {
        Fail(pulled.status());
        ++failed;
        continue;
      }
      out_ << "wrote " << pulled->path << " (" << FormatBytes(pulled->info.size_bytes())
           << ", sha256 " << pulled->info.sha256().substr(0, 12) << ")" << std::endl;
    }
    if (failed > 0 && names.size() > 1) {
      err_ << "trainyard: " << failed << " of " << names.size() << " artifacts not pulled"
           << std::endl;
    }
    return failed > 0 ? kExitError : kExitOk;
  }

  // Prints events as they arrive and exits with the job's end state: from the
  // terminal job_state event, or from GetJob when the stream ends without one.
  int Watch(const std::string& id, int64_t from_seq) {
    std::optional<v1::Job::State> end_state;
    absl::Status status = client_->Watch(id, from_seq, [&](const v1::Event& event) {
      out_ << (options_.Json() ? ToJsonLine(event) : FormatEventText(event)) << std::endl;
      if (event.has_job_state() && IsTerminal(event.job_state().state())) {
        end_state = event.job_state().state();
      }
      return true;
    });
    if (!status.ok()) return Fail(status);
    if (!end_state.has_value()) {
      absl::StatusOr<v1::Job> job = client_->GetJob(id);
      if (!job.ok()) return Fail(job.status());
      if (!IsTerminal(job->state())) {
        return Fail(absl::UnavailableError(absl::StrCat(
            "event stream of job ", id, " ended while the job is ", StateName(job->state()))));
      }
      end_state = job->state();
    }
    return WatchExitCode(*end_state);
  }

 private:
  const CommonOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  std::unique_ptr<JobClient> client_;
};

}  // namespace

int RunCli(int argc, const char* const* argv, const CliEnvironment& env) {
  CLI::App app{"trainyard: submit and watch Mixture-of-Experts training jobs", "trainyard"};
  app.require_subcommand(1);
  app.footer(
      "Exit status: 0 on success, 3 on an RPC, connection, input or usage error; "
      "watch and submit --wait exit 1 if the job FAILED and 2 if it was CANCELLED; "
      "preflight exits 0 clean, 3 findings, 2 bad input, 1 runner failure. Commands that call "
      "the controller take --tls-ca CA.pem (TLS) and --token-file FILE (else TRAINYARD_TOKEN) "
      "for a secured controller; the token is never printed.");

  CommonOptions common;
  common.controller = env.default_controller;

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
  submit->footer(absl::StrCat(
      kWatchExitCodes,
      " With compile.preflight=true the controller runs the compile preflight before "
      "creating the job; the call then waits up to 15 minutes unless --timeout is given."));
  AddCommonOptions(submit, &common);

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
  AddCommonOptions(list, &common);

  std::string job_id;
  CLI::App* get = app.add_subcommand("get", "Show one job");
  get->add_option("job", job_id, "Job id")->required();
  AddCommonOptions(get, &common);

  CLI::App* explain = app.add_subcommand(
      "explain", "Why a job waits: the scheduler's reason, queue position, estimated start, "
                 "reserved slots and the fleet's free slots");
  explain->add_option("job", job_id, "Job id")->required();
  AddCommonOptions(explain, &common);

  CLI::App* workers = app.add_subcommand("workers", "List workers and their free slots");
  AddCommonOptions(workers, &common);

  std::string reason;
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job", job_id, "Job id")->required();
  cancel->add_option("--reason", reason, "Why (stored as the job's failure reason)");
  AddCommonOptions(cancel, &common);

  int resize_dp = 0;
  CLI::App* resize = app.add_subcommand(
      "resize", "Restart a running job from its last checkpoint at another data-parallel degree");
  resize->add_option("job", job_id, "Job id")->required();
  resize->add_option("--dp", resize_dp, "Data-parallel degree, 1 to the job's parallelism.dp")
      ->required()
      ->check(CLI::Range(1, 65536));
  resize->footer(
      "grad_accum_steps is scaled so the global batch is unchanged, so --dp must divide "
      "dp*grad_accum_steps and be >= restart.min_dp. The job needs checkpoints "
      "(checkpoint.interval > 0): its ranks are cancelled and it restarts from the newest "
      "checkpoint, without backoff and without using a restart of restart.max_restarts. It "
      "waits PENDING until --dp slots are free. The size holds for that restart only: a "
      "later failure restarts at the submitted dp (or shrinks as restart.min_dp allows). "
      "A job already at --dp is printed unchanged. Prints the job; exit status 0, or 3 on "
      "an RPC, connection or usage error.");
  AddCommonOptions(resize, &common);

  int64_t from_seq = 0;
  CLI::App* watch =
      app.add_subcommand("watch", "Stream a job's events, one line each, until the job ends");
  watch->add_option("job", job_id, "Job id")->required();
  watch->add_option("--from-seq", from_seq, "First event seq to show (default: from the start)")
      ->check(CLI::NonNegativeNumber);
  watch->footer(kWatchExitCodes);
  AddCommonOptions(watch, &common);

  CLI::App* artifacts = app.add_subcommand(
      "artifacts", "List or download a job's artifacts (profiler traces, flight-recorder dumps)");
  artifacts->require_subcommand(1);
  CLI::App* artifacts_list =
      artifacts->add_subcommand("list", "List a job's artifacts: NAME KIND ATTEMPT RANK SIZE "
                                        "SHA256 TIME (RANK - for a worker's own file)");
  artifacts_list->add_option("job", job_id, "Job id")->required();
  AddCommonOptions(artifacts_list, &common);
  std::string artifact_name;
  std::string artifact_dir = ".";
  CLI::App* artifacts_pull = artifacts->add_subcommand(
      "pull", "Download one artifact, or all of the job's when NAME is omitted, to DIR/NAME");
  artifacts_pull->add_option("job", job_id, "Job id")->required();
  artifacts_pull->add_option("name", artifact_name, "Artifact name (default: every artifact)");
  artifacts_pull->add_option("--output-dir,-o", artifact_dir, "Directory to write into")
      ->capture_default_str();
  AddConnectionOptions(artifacts_pull, &common);
  artifacts_pull->footer(
      "Each file is written to a temporary file in DIR and renamed to DIR/NAME only after its "
      "size and sha256 match the controller's; an existing DIR/NAME is replaced, DIR is "
      "created if missing. --timeout bounds the listing; each download may take up to 30 "
      "minutes. Prints one 'wrote DIR/NAME (SIZE, sha256 PREFIX)' line per file. "
      "Exit status: 0, or 3 if any artifact could not be pulled (the others are still "
      "written) or on an RPC, connection or usage error.");

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
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  preflight->footer(
      "Prints COMPILE, RECOMPILE, RECOMPILE_LIMIT, GRAPH_BREAK, UNSAFE_SIDE_EFFECT and "
      "FALLBACK events, one line each, then a verdict. The job file is checked as `submit` "
      "and the controller check it (slots aside). Exit status: 0 clean, 3 findings (an "
      "UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT event), 2 bad job file, validation or usage "
      "error, 1 the runner failed (a rank failed, it timed out or could not start).");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, *env.out, *env.err);
    if (code == 0) return kExitOk;
    const bool preflight_usage = argc > 1 && std::string(argv[1]) == "preflight";
    return preflight_usage ? kPreflightBadInput : kExitError;
  }
  if (preflight->parsed()) {
    if (env.launcher == nullptr) {
      *env.err << "trainyard: preflight: no process launcher was wired in" << std::endl;
      return kPreflightRunnerFailed;
    }
    return RunPreflightCommand(preflight_options, env.launcher, env.clock, *env.out, *env.err);
  }
  for (CLI::App* sub : {submit, list, get, explain, workers, cancel, resize, watch}) {
    if (sub->parsed()) common.timeout_given = sub->get_option("--timeout")->count() > 0;
  }

  absl::StatusOr<std::unique_ptr<JobClient>> client = MakeClient(common, env);
  if (!client.ok()) {
    *env.err << FormatError(client.status()) << std::endl;
    return kExitError;
  }
  Runner runner(common, env, std::move(*client));
  if (submit->parsed()) return runner.Submit(file, sets, wait);
  if (list->parsed()) return runner.List(states, limit);
  if (get->parsed()) return runner.Get(job_id);
  if (explain->parsed()) return runner.Explain(job_id);
  if (workers->parsed()) return runner.Workers();
  if (cancel->parsed()) return runner.Cancel(job_id, reason);
  if (resize->parsed()) return runner.Resize(job_id, resize_dp);
  if (watch->parsed()) return runner.Watch(job_id, from_seq);
  if (artifacts_list->parsed()) return runner.ListArtifacts(job_id);
  if (artifacts_pull->parsed()) return runner.PullArtifacts(job_id, artifact_name, artifact_dir);
  return kExitError;  // require_subcommand(1) makes this unreachable
}

}  // namespace trainyard::cli
