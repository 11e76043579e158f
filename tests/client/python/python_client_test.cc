// The Python client (client/python) against a real controller and worker: a TLS
// controller with bearer tokens (a submitter and a viewer), one worker, and the tree's
// Python (TRAINYARD_PYTHON, the venv with PyPI's grpcio and protobuf) running
// client/python/tests/test_client.py with the connection in its environment. That
// module submits, lists, gets, watches, cancels, pulls an artifact and checks the typed
// errors; this test passes when all of it ran and passed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;

// A token file line: sha256 of the token, role, owner (docs/security.md).
std::string TokenLine(const std::string& token, const std::string& role, const std::string& owner) {
  const CommandResult r = RunCommand({"/bin/sh", "-c", "printf '%s' \"$0\" | /usr/bin/sha256sum", token});
  return r.out.substr(0, 64) + " " + role + " " + owner + "\n";
}

TEST(PythonClientTest, UnittestsPassAgainstARealTlsControllerWithTokens) {
  TestCluster cluster(kBuiltBinaries, "api_python");
  ASSERT_TRUE(cluster.EnableTls({"w1"}));
  const fs::path tokens = cluster.dir() / "tokens";
  std::ofstream(tokens) << TokenLine("alice-api-secret", "submitter", "alice")
                        << TokenLine("vic-api-secret", "viewer", "vic");
  fs::permissions(tokens, fs::perms::owner_read | fs::perms::owner_write);
  const fs::path alice = cluster.dir() / "alice.token";
  const fs::path vic = cluster.dir() / "vic.token";
  std::ofstream(alice) << "alice-api-secret\n";
  std::ofstream(vic) << "vic-api-secret\n";
  ASSERT_TRUE(cluster.StartController({"--token-file", tokens.string()}))
      << "see " << cluster.dir() / "controller.log";
  cluster.SetCliTokenFile(alice.string());
  cluster.StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));

  const CommandResult r = RunCommand(
      {"/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1",
       "PYTHONPATH=" + std::string(TRAINYARD_PYTHON_SRC) + ":" + TRAINYARD_PYTHON_STUBS,
       "TRAINYARD_TEST_CONTROLLER=" + cluster.address(),
       "TRAINYARD_TEST_TLS_CA=" + (cluster.certs_dir() / "ca.pem").string(),
       "TRAINYARD_TEST_TOKEN_FILE=" + alice.string(), "TRAINYARD_TEST_VIEWER_TOKEN_FILE=" + vic.string(),
       "TRAINYARD_TEST_JOB_FILE=" TRAINYARD_EXAMPLES "/tiny.toml", TRAINYARD_PYTHON, "-m", "unittest",
       "discover", "-v", "-s", TRAINYARD_PYTHON_TESTS, "-p", "test_client.py"});  // the others: python_client_unit_test
  // unittest reports on stderr.
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::smatch ran;
  ASSERT_TRUE(std::regex_search(r.err, ran, std::regex(R"(Ran (\d+) tests?)"))) << r.err;
  // Every test method of the module ran (none was lost to an import or a typo).
  std::ifstream module(fs::path(TRAINYARD_PYTHON_TESTS) / "test_client.py");
  const std::string text((std::istreambuf_iterator<char>(module)), std::istreambuf_iterator<char>());
  const std::regex test_def(R"(\n    def test_)");
  const auto defined = std::distance(std::sregex_iterator(text.begin(), text.end(), test_def), std::sregex_iterator());
  EXPECT_GT(defined, 10);
  EXPECT_EQ(std::stoi(ran[1]), defined) << r.err;
  EXPECT_NE(r.err.find("\nOK\n"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("skipped"), std::string::npos) << r.err;
  std::cout << r.err;  // unittest -v: one line per test
  if (HasFailure()) cluster.KeepFiles();
}

}  // namespace
}  // namespace trainyard::testing
