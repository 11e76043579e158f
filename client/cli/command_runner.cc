#include "client/cli/command_runner.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <cmath>
#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cli/cli_format.h"
#include "common/base/text.h"
#include "common/events/proto_json.h"
#include "common/tls_files.h"

namespace trainyard::cli {

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
          return absl::StrCat("must be a ", zero_allowed ? "non-negative" : "positive", " number of seconds, got ",
                              Quote(value));
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
  app->add_option("--timeout", options->timeout_s,
                  "Deadline of each call, in seconds (checkpoint: how long the controller waits for the "
                  "checkpoint, default 300)")
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

absl::StatusOr<Connection> ConnectController(const CommonOptions& options, const CliEnvironment& env) {
  std::string ca_pem;
  if (!options.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = LoadCaPem(options.tls_ca);
    if (!ca.ok()) return ca.status();
    ca_pem = std::move(*ca);
  }
  Connection connection;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = JobClient::ReadTokenFile(options.token_file);
    if (!token.ok()) return token.status();
    connection.bearer_token = std::move(*token);
  } else if (!env.default_token.empty()) {
    if (absl::Status s = JobClient::CheckBearerToken(env.default_token, "TRAINYARD_TOKEN"); !s.ok()) return s;
    connection.bearer_token = env.default_token;
  }
  if (!connection.bearer_token.empty() && ca_pem.empty() && !IsLoopbackAddress(options.controller)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to send the bearer token (", options.token_file.empty() ? "TRAINYARD_TOKEN" : "--token-file",
        ") in plaintext to ", Quote(options.controller),
        ", which is not a loopback address: give --tls-ca to connect over TLS"));
  }
  connection.channel = grpc::CreateChannel(
      options.controller, ca_pem.empty() ? grpc::InsecureChannelCredentials() : MakeChannelCredentials(ca_pem));
  connection.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(options.timeout_s * 1000)));
  return connection;
}

absl::StatusOr<std::unique_ptr<JobClient>> MakeClient(const CommonOptions& options, const CliEnvironment& env) {
  absl::StatusOr<Connection> connection = ConnectController(options, env);
  if (!connection.ok()) return connection.status();
  return std::make_unique<JobClient>(connection->channel, connection->timeout, connection->bearer_token);
}

int Runner::Fail(const absl::Status& status) {
  std::string message = FormatError(status);
  if (status.code() == absl::StatusCode::kUnavailable || status.code() == absl::StatusCode::kDeadlineExceeded) {
    absl::StrAppend(&message, UnreachableHint(status, options_.controller, !options_.tls_ca.empty()));
  }
  err_ << message << std::endl;
  return ExitCodeForStatus(status);
}

void Runner::PrintJob(const v1::Job& job) {
  if (options_.Json()) {
    out_ << ToJsonLine(job) << '\n';
  } else {
    out_ << TerminalSafe(FormatJobsTable({job}), /*keep_newlines=*/true);
  }
}

}  // namespace trainyard::cli
