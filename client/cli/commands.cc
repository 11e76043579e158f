#include "client/cli/commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "client/cli/export_command.h"
#include "client/cli/preflight_command.h"
#include "client/cli/tensorboard_command.h"

namespace trainyard::cli {

static_assert(kPreflightClean == kExitOk && kPreflightFindings == kExitJobFailed && kPreflightBadInput == kExitUsage &&
                  kPreflightRunnerFailed == kExitError,
              "preflight's exit codes are rows of the CLI's one table");

int RunCli(int argc, const char* const* argv, const CliEnvironment& env) {
  CLI::App app{"trainyard: submit, watch and explain Mixture-of-Experts training jobs", "trainyard"};
  app.require_subcommand(1);
  // Before any add_subcommand: subcommands inherit it, and pass the global flags they do
  // not know up to `app`.
  app.fallthrough();
  app.set_version_flag("--version", std::string("trainyard ") + TRAINYARD_VERSION);
  app.footer(
      absl::StrCat("Global flags (--controller, --timeout, --tls-ca, --token-file, --output/-o, --json) go "
                   "before or after the subcommand. A secured controller needs --tls-ca CA.pem (TLS) and "
                   "--token-file FILE (else TRAINYARD_TOKEN); the token is never printed.\n\n"
                   "Examples:\n"
                   "  trainyard submit examples/debug.toml --set training.steps=50 --wait\n"
                   "  trainyard submit examples/debug.toml --sweep training.lr=1e-4,3e-4 --max-concurrent 2\n"
                   "  trainyard --controller 10.0.0.5:7070 list --state running\n"
                   "  trainyard watch job-3\n"
                   "  trainyard explain job-3\n"
                   "  trainyard workers drain w1 --reason 'kernel update'\n"
                   "  trainyard audit --job job-3\n\n"
                   "Exit status (every command):\n",
                   ExitCodeTable()));

  CommonOptions common;
  common.controller = env.default_controller;
  AddGlobalOptions(&app, &common);

  // Each subcommand's help ends with an example and points at the global flags.
  auto example = [](CLI::App* sub, const std::string& text) {
    sub->footer(absl::StrCat(text, "\nGlobal flags and exit status: trainyard --help"));
  };

  SubmitOptions submit_options;
  int64_t max_concurrent = 0;
  CLI::App* submit = app.add_subcommand(
      "submit", "Submit a TOML job file; prints the job id (a sweep: the sweep id, then its children)");
  submit->add_option("file", submit_options.file, "Job file (TOML)")->required();
  submit
      ->add_option("--set", submit_options.sets, "Override a key: section.key=value, value in TOML syntax (repeatable)")
      ->allow_extra_args(false);
  submit
      ->add_option("--after", submit_options.after,
                   "Start only once job J has succeeded; J:failed, J:ended or J:started for another condition "
                   "(repeatable; adds to the file's job.after)")
      ->allow_extra_args(false);
  submit
      ->add_option("--sweep", submit_options.sweeps,
                   "Sweep a key: section.key=V1,V2,... (repeatable); one child job per combination of the "
                   "values of every swept key (with the file's [sweep] table)")
      ->allow_extra_args(false);
  CLI::Option* max_concurrent_option = submit->add_option(
      "--max-concurrent", max_concurrent, "With a sweep: at most N children running at once (default: no limit)");
  submit->add_flag("--wait", submit_options.wait, "Then watch the job (or the sweep) and exit like `watch`");
  example(submit,
          "With compile.preflight=true the controller runs the compile preflight before creating the "
          "job; the call then waits up to 15 minutes unless --timeout is given.\n"
          "A job with --after waits PENDING, out of the queue, until each job it names did what its condition "
          "asks, and fails when a condition can no longer hold.\n"
          "A sweep (--sweep, or a [sweep] table in the file; docs/sweeps.md) is expanded and every child "
          "validated here before anything is sent; the first line printed is the sweep id. --after applies "
          "to every child.\n"
          "Example: trainyard submit examples/debug.toml --set training.steps=50 --wait\n"
          "Example: trainyard submit eval.toml --after job-3\n"
          "Example: trainyard submit examples/debug.toml --sweep training.lr=1e-4,3e-4,1e-3 --sweep "
          "model.top_k=2,4 --max-concurrent 2");

  std::vector<std::string> states;
  int limit = 0;
  bool with_sweep_children = false;
  CLI::App* list = app.add_subcommand("list", "List jobs, then sweeps");
  list->add_option("--state", states, "Only jobs in this state (repeatable, or comma-separated): PENDING, RUNNING, ...")
      ->allow_extra_args(false)
      ->delimiter(',');
  list->add_option("--limit", limit, "At most this many jobs, 0 to 1000 (0: the controller's default, 100)")
      ->check(CLI::Range(0, 1000));
  list->add_flag("--with-sweep-children", with_sweep_children,
                 "List the children of sweeps as jobs too (default: only in the SWEEP table's counts)");
  example(list,
          "Jobs: ID NAME STATE WORLD OWNER REASON. When there are sweeps, a second table follows: SWEEP NAME "
          "OWNER CHILDREN MAX_CONCURRENT CREATED STATES (with --state, the sweeps with a child in one of those "
          "states). --output json: every job, sweep children included, one Job per line.\n"
          "Example: trainyard list --state pending,running");

  std::string job_id;
  CLI::App* get = app.add_subcommand(
      "get",
      "Describe one job: spec, state history, attempts and their causes, workers, last "
      "metrics (and epoch), last validation, checkpoints, artifacts (--output json: the Job message); "
      "or one sweep: its axes, counts by state and children ranked by validation loss");
  get->add_option("job", job_id, "Job id, or sweep id (sweep-N)")->required();
  example(get,
          "A sweep's children are ranked by their last validation loss, lowest first (ties by index); "
          "children without a validation come last, by index (--output json: the SweepView).\n"
          "Example: trainyard get job-3\n"
          "Example: trainyard get sweep-1");

  CLI::App* explain =
      app.add_subcommand("explain",
                         "Why a job is where it is: the scheduler's reason, queue position, estimated "
                         "start and reserved slots while PENDING; the memory one rank needs at its peak, by "
                         "part (estimated from its spec); its compile summary per region with hints, restarts "
                         "and stalls");
  explain->add_option("job", job_id, "Job id")->required();
  example(explain, "Example: trainyard explain job-3");

  std::string reason;
  CLI::App* workers =
      app.add_subcommand("workers",
                         "List workers and their free slots (and cordoned ones with the reason); cordon, uncordon or "
                         "drain one (admin)");
  workers->require_subcommand(0, 1);
  example(workers,
          "Without a subcommand: the table; a CORDONED column appears when a worker is cordoned.\n"
          "Example: trainyard workers");
  std::string worker_name;
  CLI::App* cordon = workers->add_subcommand(
      "cordon", "Admin: the worker takes no new ranks; what runs there keeps running. Survives a controller restart");
  cordon->add_option("name", worker_name, "Worker name")->required();
  cordon->add_option("--reason", reason, "Why (shown by `trainyard workers` and the web fleet page)");
  example(cordon,
          "Prints the worker's new state (--output json: its WorkerInfo).\n"
          "Example: trainyard workers cordon w1 --reason 'disk swap'");
  CLI::App* uncordon = workers->add_subcommand("uncordon", "Admin: the worker takes new ranks again");
  uncordon->add_option("name", worker_name, "Worker name")->required();
  example(uncordon, "Example: trainyard workers uncordon w1");
  CLI::App* drain = workers->add_subcommand(
      "drain",
      "Admin: cordon the worker, then move every job with a rank there: each saves a checkpoint, "
      "stops and is rescheduled elsewhere");
  drain->add_option("name", worker_name, "Worker name")->required();
  drain->add_option("--reason", reason, "Why (the moved jobs' reason reads `drained from W: REASON`)");
  example(drain,
          "A drained job is stopped as a preemption is: it uses no restart of restart.max_restarts and blames "
          "no worker; a job without checkpoint.dir restarts from its start. Prints the jobs it moves, one per "
          "line (--output json: the DrainWorkerResponse). The worker stays cordoned until `workers uncordon`.\n"
          "Example: trainyard workers drain w1 --reason 'kernel update'");

  std::string audit_job;
  std::string audit_since;
  int audit_limit = 100;
  CLI::App* audit =
      app.add_subcommand("audit",
                         "Admin: who did what: every submit, cancel, checkpoint, resubmit, cordon, uncordon, drain and "
                         "policy and webhook reload, accepted or refused, newest first (gRPC and web alike)");
  audit->add_option("--job", audit_job, "Only the rows naming this job (and the drains that moved it)");
  audit->add_option("--since", audit_since,
                    "Only rows from this time on: RFC 3339 (2026-12-06T10:00:00Z) or an age (90m, 12h, 7d)");
  audit->add_option("--limit", audit_limit, "At most this many rows")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  example(audit,
          "Each row: time, identity (role), action, target, via (grpc, web, signal) and outcome (OK, PENDING while "
          "it ran, or the refusal's code: PERMISSION_DENIED, INVALID_ARGUMENT, NOT_FOUND, ...), then the reason "
          "and what it did or why it was refused. Text a caller sent is printed escaped. --output json: one "
          "AuditRecord per line. See docs/security.md, \"Audit log\".\n"
          "Example: trainyard audit --job job-3 --since 7d");

  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "Save a checkpoint of a running job now, at its next step boundary, and print where it is");
  checkpoint->add_option("job", job_id, "Job id")->required();
  example(checkpoint,
          "The job needs checkpoint.dir (checkpoint.interval may be 0). Waits until the checkpoint is complete: "
          "--timeout (the global flag) is how long the controller waits, at most 3600 seconds (default 300); "
          "the call's own deadline is 30 s more. Prints 'JOB: checkpoint at step N: PATH (BYTES bytes)' "
          "(--output json: the CheckpointJobResponse). FAILED_PRECONDITION for a job that is not RUNNING or "
          "has no checkpoint.dir, DEADLINE_EXCEEDED when the ranks did not save in time, ABORTED when the "
          "attempt ended first.\n"
          "Example: trainyard checkpoint job-3 --timeout 600");

  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job, or every child of a sweep that has not ended");
  cancel->add_option("job", job_id, "Job id, or sweep id (sweep-N)")->required();
  cancel->add_option("--reason", reason, "Why (stored as the job's failure reason)");
  example(cancel,
          "A sweep: prints how many children this cancelled and the counts by state after it (--output "
          "json: the SweepView).\n"
          "Example: trainyard cancel job-3 --reason 'wrong lr'\n"
          "Example: trainyard cancel sweep-1");

  int resize_dp = 0;
  CLI::App* resize =
      app.add_subcommand("resize", "Restart a running job from its last checkpoint at another data-parallel degree");
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
      "watch",
      "Follow jobs until they end: a live status line per job on a terminal (step, epoch, "
      "loss sparkline, validation loss, tokens/s, MFU, ETA, recompiles), one line per event when piped");
  watch->add_option("job", watch_ids, "Job id(s), or one sweep id (sweep-N)")->required();
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
          "A sweep (alone) is polled every second: one line per child state change and per new validation "
          "of a child, then, once every child ended, the ranking as `get` prints it; exits 0 if every child "
          "SUCCEEDED, else 1 (--output json: the SweepView after each change).\n"
          "Example: trainyard watch job-3 job-4\n"
          "Example: trainyard watch sweep-1");

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

  CLI::App* artifacts =
      app.add_subcommand("artifacts", "List or download a job's artifacts (profiler traces, flight-recorder dumps)");
  artifacts->require_subcommand(1);
  example(artifacts, "Example: trainyard artifacts list job-3");
  CLI::App* artifacts_list = artifacts->add_subcommand("list",
                                                       "List a job's artifacts: NAME KIND ATTEMPT RANK SIZE "
                                                       "SHA256 TIME (RANK - for a worker's own file)");
  artifacts_list->add_option("job", job_id, "Job id")->required();
  example(artifacts_list, "Example: trainyard artifacts list job-3");
  std::string artifact_name;
  std::string artifact_dir = ".";
  CLI::App* artifacts_pull =
      artifacts->add_subcommand("pull", "Download one artifact, or all of the job's when NAME is omitted, to DIR/NAME");
  artifacts_pull->add_option("job", job_id, "Job id")->required();
  artifacts_pull->add_option("name", artifact_name, "Artifact name (default: every artifact)");
  artifacts_pull->add_option("--output-dir,-o", artifact_dir, "Directory to write into")->capture_default_str();
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
  CLI::App* preflight =
      app.add_subcommand("preflight",
                         "Print the memory one rank of the job needs at its peak, by part (estimated from the "
                         "spec: docs/memory.md), then run its compile preflight locally (3 steps of its exact "
                         "structure on local CPU ranks, jit in place of cudagraph) and print its compile events "
                         "and a verdict");
  preflight->add_option("file", preflight_options.job_file, "Job file (TOML)")->required();
  preflight
      ->add_option("--set", preflight_options.sets,
                   "Override a key: section.key=value, value in TOML syntax (repeatable)")
      ->allow_extra_args(false);
  preflight->add_flag("--shrink", preflight_options.shrink,
                      "Let the runner shrink the model's sizes (same structure, faster, fits a small machine); "
                      "the full model is then held against the fleet's largest worker (--controller)");
  preflight->add_flag("--json", preflight_options.json,
                      "Print the runner's Event JSON lines (the memory estimate, one "
                      "{\"memory_estimate\":...} line, and the verdict go to stderr)");
  preflight
      ->add_option("--train-binary", preflight_options.train_binary,
                   "The preflight runner (default: trainyard-train next to this executable)")
      ->capture_default_str();
  preflight->add_option("--timeout", preflight_options.timeout_s, "Seconds before the runner's process group is killed")
      ->check(SecondsCheck(/*zero_allowed=*/false))
      ->capture_default_str();
  example(preflight,
          "Prints the estimated memory per rank (parameters, gradients, optimizer state, weight "
          "copies, activations, communication buffers), then COMPILE, RECOMPILE, RECOMPILE_LIMIT, "
          "GRAPH_BREAK, UNSAFE_SIDE_EFFECT and FALLBACK events, one line each, then a verdict. The job file is checked "
          "as `submit` "
          "and the controller check it (slots aside). A runner whose ranks would need more memory than this "
          "machine can give (MemAvailable, or its memory cgroup's limit) is refused before it starts, with "
          "the figures and a layout that fits; any other runs with each process capped at its share "
          "(RLIMIT_DATA). Needs no controller; with --shrink it asks --controller for its workers, "
          "to say whether the full model fits one. Exit status: 0 clean, "
          "1 findings (an UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT event; with --shrink, a full model that fits "
          "no worker), 2 bad job file, validation or usage error, or a runner too big for this machine, "
          "6 the runner failed (a rank failed, it timed out or could not start).\n"
          "Example: trainyard preflight examples/debug.toml --shrink");

  CLI::App* webhooks =
      app.add_subcommand("webhooks", "Admin: the controller's --webhooks endpoints (docs/webhooks.md)");
  webhooks->require_subcommand(1);
  example(webhooks, "Example: trainyard webhooks status");
  CLI::App* webhooks_status = webhooks->add_subcommand(
      "status",
      "Admin: per endpoint, its URL (without the query), event kinds and owners, deliveries pending, "
      "delivered, failed (given up) and dropped (queue full), the last success and the last error");
  example(webhooks_status,
          "The counts are kept in the controller's DATA_DIR/webhooks.db and outlive restarts. Says so when the "
          "controller runs without --webhooks (exit status 0). --output json: the GetWebhookStatusResponse.\n"
          "Example: trainyard webhooks status");

  ExportCommandOptions export_options;
  int64_t export_step = -1;
  CLI::App* export_cmd = app.add_subcommand(
      "export",
      "Write a job's trained model (every parameter and buffer of its newest complete checkpoint, or "
      "of --step) to ONE safetensors file, or with --names hf to a Hugging Face model folder");
  export_cmd->add_option("job", export_options.job_id,
                         "Job id: its checkpoints are read from spec.checkpoint.dir/JOB/ on this machine");
  export_cmd->add_option("--checkpoint", export_options.checkpoint,
                         "Read this checkpoint directory (holding manifest.json) or folder of them instead; "
                         "needs no controller when no job id is given");
  CLI::Option* export_step_option =
      export_cmd
          ->add_option("--step", export_step, "Export the checkpoint of this step (default: the newest complete one)")
          ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  export_cmd
      ->add_flag("--best", export_options.best,
                 "Export the kept checkpoint with the lowest checkpoint.best_metric (recorded in each manifest when "
                 "checkpoint.keep_best > 0; a NaN is never best)")
      ->excludes(export_step_option);
  export_cmd
      ->add_option("-o,--output-file", export_options.output,
                   "The .safetensors file to write; with --names hf any other name is a Hugging Face model folder "
                   "(config.json, model-0000i-of-0000N.safetensors, model.safetensors.index.json)")
      ->required();
  export_cmd->add_option("--job-file", export_options.job_file,
                         "With --checkpoint and no job id: the job file (TOML) whose model keys the folder's "
                         "config.json states");
  export_cmd
      ->add_option("--names", export_options.names,
                   "Tensor names: torchtitan (the checkpoint's own, loadable as checkpoint.initial_load_path) or "
                   "hf (Hugging Face DeepseekV3ForCausalLM / Qwen3MoeForCausalLM layout, experts split)")
      ->check(CLI::IsMember({"torchtitan", "hf"}))
      ->capture_default_str();
  export_cmd->add_flag("--force", export_options.force, "Replace the output file if it exists (else refused)");
  example(export_cmd,
          "Runs where the checkpoint folder is readable. The file holds the model's tensors only (no optimizer "
          "moments, no RNG states), in fp32 as trained, and __metadata__ with format=pt, trainyard.step, "
          "trainyard.source (the checkpoint directory), trainyard.names and, given a job id, trainyard.job_id and "
          "trainyard.spec (the job's spec as JSON). It is written to a hidden temporary file next to it and renamed "
          "into place when complete. --output json prints one JSON object. Memory stays bounded (a 4 MiB copy "
          "buffer) whatever the model's size. See docs/checkpoints.md, \"Export\".\n"
          "Examples: trainyard export job-3 -o model.safetensors\n"
          "          trainyard export job-3 --best -o best.safetensors\n"
          "          trainyard export job-3 --names hf -o qwen3-finetuned   (a folder from_pretrained loads)\n"
          "          trainyard export --checkpoint /ck/job-3 --job-file job.toml --names hf -o hf-model");

  TensorBoardCommandOptions tensorboard_options;
  CLI::App* tensorboard_cmd =
      app.add_subcommand("tensorboard",
                         "Write TensorBoard event files of stored jobs: one run folder per job attempt, "
                         "DIR/JOB/attempt-A/ (scalars, and the resolved spec as text)");
  tensorboard_cmd->add_option("job", tensorboard_options.job_ids, "Job ids")->required();
  tensorboard_cmd
      ->add_option("-o,--output-dir", tensorboard_options.output_dir,
                   "Folder to write into (created if missing); DIR/JOB must not exist yet")
      ->required();
  example(tensorboard_cmd,
          "Reads each job's events from the controller as stored up to now (a running job: what it has "
          "reported so far; the controller's --tensorboard-dir keeps live jobs current instead). Tags: "
          "train/loss, val/loss, perf/tokens_per_s, experts/load/expertN, compile/recompiles, faults/stalls, "
          "... (docs/tracking.md); NaN and infinite values are written as stored. A job's folder appears "
          "complete or not at all; an existing DIR/JOB is refused, never overwritten. A job that never ran "
          "writes nothing. --output json prints one JSON object per job.\n"
          "Example: trainyard tensorboard job-3 job-4 -o runs/ && tensorboard --logdir runs/");

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
    // --shrink holds the full model against the fleet: --controller's workers, if it answers.
    preflight_options.list_workers = [&common, &env]() -> absl::StatusOr<std::vector<v1::WorkerInfo>> {
      absl::StatusOr<std::unique_ptr<JobClient>> client = MakeClient(common, env);
      if (!client.ok()) return client.status();
      absl::StatusOr<std::vector<v1::WorkerInfo>> workers = (*client)->ListWorkers();
      if (!workers.ok()) {
        return absl::Status(workers.status().code(),
                            absl::StrCat("the controller at ", common.controller, " did not answer (",
                                         absl::StatusCodeToString(workers.status().code()), ")"));
      }
      return workers;
    };
    return RunPreflightCommand(preflight_options, env.launcher, env.clock, *env.out, *env.err);
  }
  common.timeout_given = app.get_option("--timeout")->count() > 0;
  if (export_cmd->parsed()) {
    export_options.json = common.Json();
    if (export_step > 0) export_options.step = export_step;
    if (export_options.job_id.empty()) return RunExportCommand(export_options, nullptr, *env.out, *env.err);
  }

  absl::StatusOr<Connection> connection = ConnectController(common, env);
  if (!connection.ok()) {
    *env.err << FormatError(connection.status()) << std::endl;
    return ExitCodeForStatus(connection.status());
  }
  auto client = std::make_unique<JobClient>(connection->channel, connection->timeout, connection->bearer_token);
  if (export_cmd->parsed()) return RunExportCommand(export_options, client.get(), *env.out, *env.err);
  if (tensorboard_cmd->parsed()) {
    tensorboard_options.json = common.Json();
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) tensorboard_options.host = host;
    return RunTensorBoardCommand(tensorboard_options, client.get(), *env.out, *env.err);
  }
  Runner runner(common, env, std::move(client),
                std::make_unique<SweepClient>(connection->channel, connection->timeout, connection->bearer_token));
  if (submit->parsed()) {
    if (max_concurrent_option->count() > 0) submit_options.max_concurrent = max_concurrent;
    return runner.Submit(submit_options);
  }
  if (list->parsed()) return runner.List(states, limit, with_sweep_children);
  if (get->parsed()) return runner.Get(job_id);
  if (explain->parsed()) return runner.Explain(job_id);
  if (cordon->parsed()) return runner.Cordon(worker_name, /*cordon=*/true, reason);
  if (uncordon->parsed()) return runner.Cordon(worker_name, /*cordon=*/false, "");
  if (drain->parsed()) return runner.Drain(worker_name, reason);
  if (audit->parsed()) return runner.Audit(audit_job, audit_since, audit_limit);
  if (workers->parsed()) return runner.Workers();
  if (checkpoint->parsed()) return runner.Checkpoint(job_id);
  if (webhooks_status->parsed()) return runner.WebhookStatus();
  if (cancel->parsed()) return runner.Cancel(job_id, reason);
  if (resize->parsed()) return runner.Resize(job_id, resize_dp);
  if (watch->parsed()) return runner.Watch(watch_ids, watch_options);
  if (logs->parsed())
    return runner.Logs(job_id, logs_rank >= 0 ? std::optional<int>(logs_rank) : std::nullopt, logs_follow,
                       logs_reconnect_for);
  if (artifacts_list->parsed()) return runner.ListArtifacts(job_id);
  if (artifacts_pull->parsed()) return runner.PullArtifacts(job_id, artifact_name, artifact_dir);
  return kExitUsage;  // require_subcommand(1) makes this unreachable
}

}  // namespace trainyard::cli
