// An in-process controller behind a token file: the set-up the JobService's auth tests
// (tests/server/service/job_service_auth_test.cc) and the web API's tests
// (tests/server/web/) share. A real Authorizer over a token file of four identities
// (an admin, a viewer, submitters alice and bob), a real SqliteJobStore, JobManager and
// ArtifactStore in a temp dir, and one fake worker w1 with 8 slots. Fixtures derive
// from it and call AuthFixture::SetUp() first in their own SetUp.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "common/base/sha256.h"
#include "server/auth/authorizer.h"
#include "server/metrics/controller_metrics.h"
#include "server/state/artifact_store.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"
#include "tests/support/temp_dir.h"

namespace trainyard::testing {

// The tokens of the fixture's token file (it stores only their sha256).
inline constexpr char kAdmin[] = "admin-token-AAAA";    // admin root
inline constexpr char kViewer[] = "viewer-token-VVVV";  // viewer dashboard
inline constexpr char kAlice[] = "alice-token-1111";    // submitter alice
inline constexpr char kBob[] = "bob-token-2222";        // submitter bob

class AuthFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokens = dir_.path() + "/tokens";
    std::ofstream(tokens) << "# test fleet\n"
                          << Sha256Hex(kAdmin) << " admin root\n"
                          << Sha256Hex(kViewer) << " viewer dashboard\n"
                          << Sha256Hex(kAlice) << " submitter alice\n"
                          << Sha256Hex(kBob) << " submitter bob\n";
    auto authz = Authorizer::FromFile(tokens);
    ASSERT_TRUE(authz.ok()) << authz.status();
    authz_ = std::move(*authz);
    auto store = SqliteJobStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    manager_ = std::make_unique<JobManager>(store_.get(), &hub_, &metrics_, &clock_, JobManagerOptions{});
    ASSERT_TRUE(manager_->Recover().ok());
    auto artifacts = ArtifactStore::Open(dir_.path(), manager_.get(), &clock_);
    ASSERT_TRUE(artifacts.ok()) << artifacts.status();
    artifacts_ = std::move(*artifacts);
    v1::Register reg;
    reg.set_name("w1");
    reg.set_slots(8);
    reg.set_address("w1.local");
    reg.set_rendezvous_port_min(40000);
    reg.set_rendezvous_port_max(40009);
    ASSERT_TRUE(manager_->RegisterWorker(1, reg, worker_).ok());
  }

  TempDir dir_;
  FakeClock clock_;
  EventHub hub_;
  ControllerMetrics metrics_;
  std::unique_ptr<Authorizer> authz_;
  std::unique_ptr<SqliteJobStore> store_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<ArtifactStore> artifacts_;
  std::shared_ptr<FakeWorkerChannel> worker_ = std::make_shared<FakeWorkerChannel>();
};

}  // namespace trainyard::testing
