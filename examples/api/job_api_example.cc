// Submits a small Mixture-of-Experts training job to a Trainyard controller through the
// generated gRPC client (trainyard/v1/job_service.grpc.pb.h), streams its events until
// the job ends, and prints its final state. It uses nothing of Trainyard but the
// generated code, so it shows everything a program of your own needs.
//
//   job_api_example [--controller HOST:PORT] [--steps N] [--tls-ca FILE] [--token-file FILE]
//
// Exit status: 0 when the job SUCCEEDED, 1 when it FAILED or was CANCELLED, 2 on a usage
// error, 3 when a call failed.
#include <grpcpp/grpcpp.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "trainyard/v1/job_service.grpc.pb.h"

namespace v1 = trainyard::v1;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// grpc::StatusCode has no name function; these are the names every gRPC client prints.
const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",          "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",     "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",     "UNIMPLEMENTED",    "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS",        "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i <= 16 ? kNames[i] : "UNKNOWN";
}

int Fail(const char* rpc, const grpc::Status& status) {
  std::cerr << rpc << ": " << CodeName(status.error_code()) << ": " << status.error_message() << "\n";
  return 3;
}

bool Terminal(v1::Job::State state) {
  return state == v1::Job::SUCCEEDED || state == v1::Job::FAILED || state == v1::Job::CANCELLED;
}

void Print(const v1::Event& e) {
  std::printf("seq %lld ", static_cast<long long>(e.seq()));
  switch (e.payload_case()) {
    case v1::Event::kStepMetrics: {
      const v1::StepMetrics& m = e.step_metrics();
      std::printf("step %lld loss %.6f tokens/s %.0f step_ms %.1f\n", static_cast<long long>(m.step()),
                  m.loss(), m.tokens_per_s(), m.step_ms());
      break;
    }
    case v1::Event::kJobState:
      std::printf("job %s %s\n", v1::Job::State_Name(e.job_state().state()).c_str(),
                  e.job_state().reason().c_str());
      break;
    case v1::Event::kRankState:
      std::printf("rank %d %s on %s\n", e.rank(), v1::RankState::State_Name(e.rank_state().state()).c_str(),
                  e.rank_state().worker().c_str());
      break;
    case v1::Event::kCompile:
      std::printf("rank %d compile %s %s\n", e.rank(),
                  v1::CompileEvent::Kind_Name(e.compile().kind()).c_str(), e.compile().region().c_str());
      break;
    case v1::Event::kLog:
      std::printf("rank %d [%s] %s\n", e.rank(), e.log().level().c_str(), e.log().message().c_str());
      break;
    default:  // artifact, stall, checkpoint: see event.proto
      std::printf("rank %d %s\n", e.rank(),
                  v1::Event::descriptor()->FindFieldByNumber(e.payload_case())->name().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string controller = "127.0.0.1:7070";
  std::string tls_ca;
  std::string token_file;
  int steps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "usage: job_api_example [--controller HOST:PORT] [--steps N] [--tls-ca FILE] "
                   "[--token-file FILE]\n";
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--controller") {
      controller = value;
    } else if (flag == "--steps") {
      steps = std::atoi(value.c_str());
    } else if (flag == "--tls-ca") {
      tls_ca = value;
    } else if (flag == "--token-file") {
      token_file = value;
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }

  // Plaintext is fine on loopback; otherwise the controller serves TLS and the client
  // verifies it against the fleet's CA.
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(tls_ca);
    if (ssl.pem_root_certs.empty()) {
      std::cerr << "--tls-ca " << tls_ca << ": cannot read it\n";
      return 2;
    }
    credentials = grpc::SslCredentials(ssl);
  }
  // A controller started with --token-file wants `authorization: Bearer TOKEN` on every
  // call. It goes into each call's metadata (gRPC refuses call credentials on a
  // plaintext channel).
  std::string token;
  if (!token_file.empty()) {
    std::getline(std::ifstream(token_file), token);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  }
  auto authorize = [&token](grpc::ClientContext* context) {
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  };
  std::unique_ptr<v1::JobService::Stub> stub =
      v1::JobService::NewStub(grpc::CreateChannel(controller, credentials));

  // The spec has the job file's TOML sections as messages. What is left unset comes from
  // the preset and the defaults; the controller validates the result and refuses a bad
  // value with INVALID_ARGUMENT naming the field.
  v1::SubmitJobRequest submit;
  v1::JobSpec* spec = submit.mutable_spec();
  spec->mutable_job()->set_name("api-example");
  spec->mutable_model()->set_preset("tiny");
  spec->mutable_training()->set_steps(steps);
  spec->mutable_training()->set_log_freq(1);
  spec->mutable_parallelism()->set_dp(1);
  spec->mutable_resources()->set_device("cpu");
  v1::Job job;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    authorize(&context);
    const grpc::Status status = stub->SubmitJob(&context, submit, &job);
    if (!status.ok()) return Fail("SubmitJob", status);
  }
  std::printf("submitted %s (%s)\n", job.id().c_str(), v1::Job::State_Name(job.state()).c_str());

  // WatchJob replays the stored events from from_seq, then follows the live ones, and
  // ends once the job has ended and all its events were sent (a cancelled job's ranks
  // report KILLED after its CANCELLED state). A stream that breaks (the controller
  // restarts) is resumed from the last seq + 1, so no event is missed or repeated.
  int64_t next_seq = 1;
  bool ended = false;
  for (int retries = 0; !ended;) {
    grpc::ClientContext context;  // no deadline: a job may run for days
    authorize(&context);
    v1::WatchJobRequest watch;
    watch.set_id(job.id());
    watch.set_from_seq(next_seq);
    std::unique_ptr<grpc::ClientReader<v1::Event>> reader = stub->WatchJob(&context, watch);
    v1::Event event;
    while (reader->Read(&event)) {
      Print(event);
      next_seq = event.seq() + 1;
      if (event.has_job_state() && Terminal(event.job_state().state())) ended = true;
    }
    const grpc::Status status = reader->Finish();
    if (status.ok() || ended) break;
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || ++retries > 10) {
      return Fail("WatchJob", status);
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  // The job's record, as stored: its state, and for a failure the reason.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    authorize(&context);
    v1::GetJobRequest get;
    get.set_id(job.id());
    const grpc::Status status = stub->GetJob(&context, get, &job);
    if (!status.ok()) return Fail("GetJob", status);
  }
  std::printf("final state: %s%s%s\n", v1::Job::State_Name(job.state()).c_str(),
              job.failure_reason().empty() ? "" : ": ", job.failure_reason().c_str());
  return job.state() == v1::Job::SUCCEEDED ? 0 : 1;
}
