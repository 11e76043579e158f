// The capability probe through the real process launcher, with shell scripts standing in
// for `trainyard-rank --capabilities`.
#include "worker/daemon/engine_capabilities.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/base/posix_process_launcher.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

class EngineCapabilitiesTest : public ::testing::Test {
 protected:
  absl::StatusOr<v1::EngineCapabilities> Probe(const std::string &body,
                                               absl::Duration deadline = absl::Seconds(30)) {
    const std::string script = dir_.WriteScript("rank.sh", body);
    return ProbeEngineCapabilities(&launcher_, script, deadline, SystemClock());
  }
  TempDir dir_;
  PosixProcessLauncher launcher_;
};

TEST_F(EngineCapabilitiesTest, ReadsTheJsonTheBinaryPrints) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe(R"(
[ "$1" = "--capabilities" ] || exit 3
echo 'loading' >&2
echo '{"libtorch_version":"2.5.1","cuda":true,"cuda_version":"12.4","nccl":true,"bf16":true,"cudagraph":false,"future_field":1}'
)");
  ASSERT_TRUE(caps.ok()) << caps.status();
  EXPECT_EQ(caps->libtorch_version(), "2.5.1");
  EXPECT_TRUE(caps->cuda());
  EXPECT_EQ(caps->cuda_version(), "12.4");
  EXPECT_TRUE(caps->nccl());
  EXPECT_TRUE(caps->bf16());
  EXPECT_FALSE(caps->cudagraph());
}

TEST_F(EngineCapabilitiesTest, CamelCaseNamesAreProto3JsonToo) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe("echo '{\"libtorchVersion\":\"1.13.0\"}'\n");
  ASSERT_TRUE(caps.ok()) << caps.status();
  EXPECT_EQ(caps->libtorch_version(), "1.13.0");
  EXPECT_FALSE(caps->cuda());
}

TEST_F(EngineCapabilitiesTest, GarbageIsAPreciseError) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe("echo 'usage: trainyard-rank --config FILE'\n");
  ASSERT_FALSE(caps.ok());
  EXPECT_THAT(caps.status().message(), HasSubstr("--capabilities printed no EngineCapabilities JSON"));
  EXPECT_THAT(caps.status().message(), HasSubstr("'usage: trainyard-rank --config FILE"));
}

TEST_F(EngineCapabilitiesTest, WrongTypeIsAnError) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe("echo '{\"cuda\":\"yes please\"}'\n");
  ASSERT_FALSE(caps.ok());
  EXPECT_THAT(caps.status().message(), HasSubstr("printed no EngineCapabilities JSON"));
}

TEST_F(EngineCapabilitiesTest, NothingPrintedIsAnError) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe("exit 0\n");
  ASSERT_FALSE(caps.ok());
  EXPECT_THAT(caps.status().message(), HasSubstr("--capabilities printed nothing on stdout"));
}

TEST_F(EngineCapabilitiesTest, NonZeroExitNamesStatusAndStderr) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe("echo 'unknown flag --capabilities' >&2\nexit 64\n");
  ASSERT_FALSE(caps.ok());
  EXPECT_EQ(caps.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(caps.status().message(), HasSubstr("--capabilities exited with status 64"));
  EXPECT_THAT(caps.status().message(), HasSubstr("stderr: 'unknown flag --capabilities'"));
}

TEST_F(EngineCapabilitiesTest, MissingBinaryIsAnError) {
  absl::StatusOr<v1::EngineCapabilities> caps =
      ProbeEngineCapabilities(&launcher_, dir_.path() + "/absent", absl::Seconds(30), SystemClock());
  ASSERT_FALSE(caps.ok());
  EXPECT_THAT(caps.status().message(), HasSubstr("absent' --capabilities: cannot execute"));
}

TEST_F(EngineCapabilitiesTest, HangPastTheDeadlineIsKilled) {
  absl::StatusOr<v1::EngineCapabilities> caps = Probe("echo '{}'\nexec sleep 600\n", absl::Milliseconds(300));
  ASSERT_FALSE(caps.ok());
  EXPECT_EQ(caps.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(caps.status().message(), HasSubstr("--capabilities did not finish within 300ms; killed"));
}

}  // namespace
}  // namespace trainyard
