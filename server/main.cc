// trainyard-controller: accepts jobs, schedules them onto workers, stores events.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <CLI/CLI.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/posix_process_launcher.h"
#include "common/base/file_io.h"
#include "common/base/text.h"
#include "server/controller_server.h"
#include "spdlog/spdlog.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_reload = 0;
void OnSignal(int) { g_stop = 1; }
void OnHangup(int) { g_reload = 1; }
}  // namespace

int main(int argc, char** argv) {
  // Debian's absl keeps Mutex deadlock detection on: a lock-order graph updated on every
  // acquisition, about 3 % of the controller's CPU under watch fan-out (perf, see the
  // load benchmark in bench/). The tests, which run the controller in-process, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  trainyard::ControllerOptions options;
  double heartbeat_timeout_s = absl::ToDoubleSeconds(trainyard::JobManagerOptions().heartbeat_timeout);
  double reconnect_window_s = absl::ToDoubleSeconds(trainyard::JobManagerOptions().reconnect_window);
  double preflight_timeout_s = 300;
  options.preflight_binary = trainyard::ExecutableSibling("trainyard-train");
  std::string port_file;
  CLI::App app{"trainyard-controller: the Trainyard job controller (gRPC JobService and "
               "WorkerService, SQLite state, Prometheus /metrics)"};
  app.add_option("--listen", options.listen,
                 "gRPC address host:port (port 0 picks one); beyond loopback it needs TLS and "
                 "--token-file, or --insecure. Never shared: a port in use (another controller) "
                 "fails the start")
      ->capture_default_str();
  app.add_option("--data-dir", options.data_dir,
                 "Directory for trainyard.db (SQLite, WAL) and artifacts, created if missing. "
                 "Held for the controller's life (a lock on DATA_DIR/trainyard-controller.lock, "
                 "released when the process dies, kill -9 included): a second controller on it "
                 "refuses to start, naming the holder's pid, host and start time")
      ->required();
  app.add_option("--metrics-listen", options.metrics_listen,
                 "Prometheus /metrics address host:port (empty: off). Plain HTTP without "
                 "authentication (it names jobs and workers): beyond loopback only with --insecure");
  app.add_option("--web-listen", options.web_listen,
                 "Web UI address host:port (empty: off; port 0 picks one): jobs, live "
                 "charts (server-sent events), compile tables, artifacts, the fleet, and actions by role (cancel, "
                 "checkpoint, resubmit; cordon, uncordon, drain for admins) (docs/web.md). Plain HTTP; the same "
                 "--token-file and roles as the gRPC API, every action audited. Beyond loopback only with --insecure");
  app.add_option("--tls-cert", options.tls.cert, "PEM certificate the gRPC port serves (with --tls-key, --tls-ca)");
  app.add_option("--tls-key", options.tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", options.tls.ca,
                 "PEM CA: a worker must present a certificate it signed with OU=trainyard-worker "
                 "(its name is the CN); a client may present one it signed, or none");
  app.add_option("--token-file", options.token_file,
                 "Bearer tokens of JobService clients, one line each: `SHA256HEX ROLE OWNER` "
                 "(sha256 of the token in lowercase hex; ROLE viewer|submitter|admin). Re-read on "
                 "SIGHUP (a bad file keeps the tokens in force). Without it every caller is an "
                 "admin named 'local'");
  app.add_option("--max-watchers-per-owner", options.max_watchers_per_owner,
                 "Concurrent `watch` streams one identity (token owner) may hold; beyond it a "
                 "watch is refused with RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  options.manager.max_events_per_s_per_rank = 100;
  app.add_option("--max-events-per-s-per-rank", options.manager.max_events_per_s_per_rank,
                 "Log lines and compile events a second one job may store per rank (a job of N "
                 "ranks: N times that, with a burst of ten seconds' worth); the excess is dropped and counted in "
                 "trainyard_events_dropped_total{reason=\"rate_limited\"}; step metrics, rank "
                 "states, checkpoints and stalls always pass. 0: no cap")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7));
  app.add_flag("--insecure", options.insecure,
               "Allow a --listen beyond loopback without TLS or --token-file, and a "
               "--metrics-listen or --web-listen beyond loopback; logs a warning at every start");
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s,
                 "Seconds without a heartbeat (or connection) before a worker is unreachable: "
                 "its slots take no new ranks, its running attempts wait for it")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--reconnect-window", reconnect_window_s,
                 "Seconds an unreachable worker is waited for, counted from the heartbeat "
                 "timeout, before it is lost and its gangs are torn down (restart policy); a "
                 "worker back in time (heartbeat or re-register with its ranks alive) has its "
                 "attempts re-adopted, no restart. 0: lost at the heartbeat timeout")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--port-file", port_file, "Write the bound gRPC port to this file");
  app.add_option("--policy-file", options.policy_file,
                 "Quotas (running slots and GPUs per owner and per group) and fair-share weights, "
                 "TOML (docs/sharing.md). Re-read on SIGHUP (a bad file keeps the policy in force). "
                 "Without it: no quotas, every owner weight 1");
  app.add_option("--webhooks", options.webhooks_file,
                 "Endpoints that get job events as signed JSON POSTs (state changes, stalls, "
                 "preemptions, checkpoints, restarts), TOML (docs/webhooks.md). Delivered at least "
                 "once from a queue in DATA_DIR/webhooks.db that survives restarts; `trainyard "
                 "webhooks status` shows each endpoint. Re-read on SIGHUP (a bad file keeps the "
                 "endpoints in force). Without it: no webhooks");
  double grace_s = absl::ToDoubleSeconds(options.manager.sharing.preemption_grace);
  app.add_option("--preemption-grace", grace_s,
                 "Seconds a preempted (or drained) job gets to save its checkpoint before it is "
                 "stopped anyway and resumes from its previous one")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--max-preemptions-per-job", options.manager.sharing.max_preemptions_per_hour,
                 "A job preempted more than this many times in the last hour is not preempted "
                 "again until the oldest of them is an hour old (job.preemptible = false opts a "
                 "job out altogether)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app.add_option("--preflight-binary", options.preflight_binary,
                 "Runner of the compile preflight that jobs with compile.preflight=true must "
                 "pass before they are created (trainyard-train; run as `BINARY SPEC.json "
                 "--preflight --json`). Checked when such a job is submitted")
      ->capture_default_str();
  app.add_option("--preflight-timeout", preflight_timeout_s,
                 "Seconds a preflight may run before its process group is killed and the "
                 "submit fails")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--artifact-bytes-per-job", options.artifacts.bytes_per_job,
                 "Bytes of uploaded artifacts (profiler traces, flight-recorder dumps) one job "
                 "may hold under DATA_DIR/artifacts, complete and partial together; an upload "
                 "that would pass it is refused (RESOURCE_EXHAUSTED) and the job gets a warn "
                 "log event naming the artifact")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::string retain_finished = "30d";
  app.add_option("--retain-finished", retain_finished,
                 "How long a finished job keeps its events after it ended: 30d, 12h, 90m, 3600s, or "
                 "forever (or 0: never compacted). Older ones are compacted: the events go, the job's "
                 "row (states, failure causes, checkpoint, placement) stays and `trainyard get` says "
                 "so; watch and the web's event reads answer FAILED_PRECONDITION naming when")
      ->capture_default_str()
      ->check([](const std::string& text) {
        auto parsed = trainyard::ParseRetainFinished(text);
        return parsed.ok() ? std::string() : std::string(parsed.status().message());
      });
  double tensorboard_flush_s = absl::ToDoubleSeconds(options.tensorboard.flush_period);
  app.add_option("--tensorboard-dir", options.tensorboard.dir,
                 "Write every job's TensorBoard event files here, one run folder per job attempt "
                 "(DIR/JOB/attempt-A/: scalars such as train/loss, val/loss, perf/tokens_per_s, "
                 "experts/load/expertN, and the resolved spec as text; docs/tracking.md), kept "
                 "current from the events the controller stores, by one writer thread off the "
                 "ingestion path. Created if missing; one that cannot be written fails the start. "
                 "A restart continues each job's files where they end (DIR/JOB/"
                 ".trainyard-tensorboard.json), writing no record twice. Empty: off");
  app.add_option("--tensorboard-flush", tensorboard_flush_s,
                 "Seconds between the TensorBoard writer's rounds (each appends and fsyncs what "
                 "was stored since the last)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--mlflow-uri", options.mlflow.uri,
                 "MLflow tracking server, http(s)://HOST[:PORT][/PATH] (no user:password; left out: off). "
                 "Each job gets one run: params are its resolved spec (model.dim, ...), tags its owner, "
                 "id and attempt, metrics its step reports, validations, recompiles and stalls, and "
                 "the run ends FINISHED, FAILED or KILLED with the job. Sent from the store by a "
                 "per-job cursor kept in trainyard.db: an MLflow that is down or slow never holds "
                 "up ingestion and loses nothing (docs/mlflow.md)");
  app.add_option("--mlflow-experiment", options.mlflow.experiment,
                 "MLflow experiment the runs go in, created when missing")
      ->capture_default_str();
  double mlflow_backoff_s = absl::ToDoubleSeconds(options.mlflow.backoff_max);
  app.add_option("--mlflow-max-backoff", mlflow_backoff_s,
                 "Seconds a job's failing MLflow requests wait at most between retries (the wait "
                 "doubles from 1 s up to this)")
      ->capture_default_str()
      ->check([](const std::string& text) {
        double v = 0;  // CLI::Range lets NaN through
        return absl::SimpleAtod(text, &v) && std::isfinite(v) && v >= 1 && v <= 3600
                   ? std::string()
                   : std::string("must be a number of seconds from 1 to 3600");
      });
  app.footer(
      "Preflight: a SubmitJob whose spec sets compile.preflight=true is validated, then "
      "the controller runs the preflight binary on 3 steps of the job on local CPU ranks "
      "(one preflight at a time, off the gRPC threads) before creating the job or taking a "
      "slot. Findings (UNSAFE_SIDE_EFFECT, RECOMPILE_LIMIT) or a runner failure make the "
      "submit fail with FAILED_PRECONDITION and no job is stored.\n\n"
      "Exit status: 0 after SIGINT or SIGTERM; 2 when it cannot start (a port in use, a data "
      "dir another controller holds or that cannot be written, a --tensorboard-dir that cannot be "
      "written, bad TLS, policy or webhooks files, a bad --mlflow-uri or --mlflow-experiment), "
      "before anything is served; 70 when the store lost a write; CLI11's codes for a "
      "malformed command line.\n\n"
      "Example (loopback, with /metrics and the web UI):\n"
      "  trainyard-controller --listen 127.0.0.1:7070 --data-dir /var/lib/trainyard \\\n"
      "      --metrics-listen 127.0.0.1:9464 --web-listen 127.0.0.1:8080");
  CLI11_PARSE(app, argc, argv);
  if (app.count("--mlflow-uri") > 0 && options.mlflow.uri.empty()) {
    std::fprintf(stderr, "trainyard-controller: --mlflow-uri is empty; leave the flag out to turn MLflow off\n");
    return 2;
  }
  if (app.count("--mlflow-experiment") > 0 && options.mlflow.uri.empty()) {
    std::fprintf(stderr, "trainyard-controller: --mlflow-experiment needs --mlflow-uri\n");
    return 2;
  }
  options.manager.heartbeat_timeout = absl::Seconds(heartbeat_timeout_s);
  options.manager.reconnect_window = absl::Seconds(reconnect_window_s);
  options.manager.sharing.preemption_grace = absl::Seconds(grace_s);
  options.preflight_timeout = absl::Seconds(preflight_timeout_s);
  options.mlflow.backoff_max = absl::Seconds(mlflow_backoff_s);
  options.retention.retain = *trainyard::ParseRetainFinished(retain_finished);  // checked above
  options.tensorboard.flush_period = absl::Seconds(tensorboard_flush_s);
  {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) options.tensorboard.host = host;
  }
  // Fail-stop: memory ahead of the store must not act further; a restart recovers.
  options.manager.on_lost_write = [](const absl::Status& status) {
    spdlog::critical("stopping: the store lost a write ({}); restart to recover from it",
                     std::string(status.message()));
    std::_Exit(70);  // EX_SOFTWARE
  };

  // Before any thread starts: SIGHUP (re-read --token-file) must never kill the process.
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGHUP, OnHangup);
  // Its folder must take the file before anything is served: a --port-file that cannot
  // be written would otherwise stop a controller that had already started serving.
  if (!port_file.empty()) {
    const std::string folder = trainyard::DirectoryOf(port_file);
    if (access(folder.c_str(), W_OK | X_OK) != 0) {
      std::fprintf(stderr, "trainyard-controller: --port-file %s: cannot write in %s: %s\n",
                   trainyard::Quoted(port_file).c_str(), trainyard::Quoted(folder).c_str(), std::strerror(errno));
      return 2;
    }
  }
  // The only real launcher and clock of the controller; everything else takes them.
  trainyard::PosixProcessLauncher launcher;
  trainyard::RealClock clock;
  auto server = trainyard::ControllerServer::Start(options, &launcher, &clock);
  if (!server.ok()) {
    std::fprintf(stderr, "trainyard-controller: %s\n",
                 std::string(server.status().message()).c_str());
    return 2;
  }
  spdlog::info("trainyard-controller listening on port {} ({}, data {})", (*server)->port(),
               options.tls.any() ? "TLS" : "plaintext", options.data_dir);
  if (!port_file.empty()) {
    const absl::Status written = trainyard::WriteFileAtomically(port_file, absl::StrCat((*server)->port(), "\n"));
    if (!written.ok()) {
      std::fprintf(stderr, "trainyard-controller: --port-file: %s\n", std::string(written.message()).c_str());
      (*server)->Shutdown();
      return 2;
    }
  }
  while (!g_stop) {
    clock.SleepFor(absl::Milliseconds(200));
    if (g_reload) {
      g_reload = 0;
      (*server)->ReloadTokens().IgnoreError();  // logged by the authorizer, either way
      (*server)->ReloadPolicy().IgnoreError();  // logged, either way
      (*server)->ReloadWebhooks().IgnoreError();  // logged, either way
    }
  }
  spdlog::info("trainyard-controller shutting down");
  (*server)->Shutdown();
  return 0;
}
