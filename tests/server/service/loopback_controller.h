// The server tests' in-process controller: ControllerServer on 127.0.0.1:0 over a temp
// data dir and a fake process launcher, with a plaintext channel (8 MiB sends, for the
// hostile-size cases) and JobService / WorkerService stubs on it.
#pragma once

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/base/clock.h"
#include "server/controller_server.h"
#include "tests/fakes/fake_process_launcher.h"
#include "tests/support/temp_dir.h"
#include "trainyard/v1/job_service.grpc.pb.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard::testing {

class LoopbackControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControllerOptions options;
    options.listen = "127.0.0.1:0";
    options.data_dir = dir_.path();
    auto server = ControllerServer::Start(options, &launcher_, SystemClock());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(8 << 20);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    jobs_ = v1::JobService::NewStub(channel_);
    workers_ = v1::WorkerService::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  TempDir dir_;
  FakeProcessLauncher launcher_{SystemClock()};
  std::unique_ptr<ControllerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
};

}  // namespace trainyard::testing
