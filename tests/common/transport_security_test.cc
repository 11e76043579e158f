// The pure parts of the TLS transport: the TLS flag rule and PEM checks
// (common/tls_files), the worker identity taken from a peer certificate
// (server/peer_identity), the listener rule (secure by default) and the CLI's token file.
// Certificates come from deploy/make-certs.sh, run once into a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "client/job_client.h"
#include "common/tls_files.h"
#include "server/controller_server.h"
#include "server/service/peer_identity.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("trainyard_tls_unit_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    const std::string cmd = "/bin/bash " TRAINYARD_MAKE_CERTS " " + dir_.string() +
                            " --workers w1 --clients alice >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string P(const std::string& name) { return (dir_ / name).string(); }
  static void Write(const std::string& name, const std::string& text) { std::ofstream(P(name)) << text; }

  static fs::path dir_;
};
fs::path TlsFilesTest::dir_;

TEST(TlsFlags, AllOrNoneAndTheMissingOnesAreNamed) {
  EXPECT_TRUE(CheckTlsFlags({}).ok());
  EXPECT_TRUE(CheckTlsFlags({"c", "k", "a"}).ok());
  absl::Status s = CheckTlsFlags({"c", "", ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-key and --tls-ca are missing"), absl::string_view::npos) << s;
  s = CheckTlsFlags({"", "k", "a"});
  EXPECT_NE(s.message().find("--tls-cert is missing"), absl::string_view::npos) << s;
}

TEST_F(TlsFilesTest, LoadsAMatchingSetAndNamesTheFlagOfABadFile) {
  absl::StatusOr<TlsMaterial> m = LoadTlsMaterial({P("worker-w1.pem"), P("worker-w1.key"), P("ca.pem")});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NE(m->key_pem.find("PRIVATE KEY"), std::string::npos);

  m = LoadTlsMaterial({P("worker-w1.pem"), P("client-alice.key"), P("ca.pem")});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("is not the key of the certificate"), absl::string_view::npos) << m.status();

  m = LoadTlsMaterial({P("worker-w1.key"), P("worker-w1.key"), P("ca.pem")});
  EXPECT_NE(m.status().message().find("--tls-cert"), absl::string_view::npos) << m.status();
  EXPECT_NE(m.status().message().find("not a PEM certificate"), absl::string_view::npos) << m.status();

  m = LoadTlsMaterial({P("worker-w1.pem"), P("worker-w1.pem"), P("ca.pem")});
  EXPECT_NE(m.status().message().find("--tls-key"), absl::string_view::npos) << m.status();

  m = LoadTlsMaterial({P("worker-w1.pem"), P("worker-w1.key"), P("missing.pem")});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("--tls-ca"), absl::string_view::npos) << m.status();
}

TEST_F(TlsFilesTest, RefusesEmptyAndOversizedFiles) {
  Write("empty.pem", "");
  EXPECT_NE(ReadPemFile("--tls-ca", P("empty.pem")).status().message().find("is empty"), absl::string_view::npos);
  Write("big.pem", std::string(kMaxPemFileBytes + 1, 'A'));
  absl::StatusOr<std::string> big = ReadPemFile("--tls-ca", P("big.pem"));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("larger than"), absl::string_view::npos) << big.status();
  EXPECT_FALSE(LoadCaPem(P("worker-w1.key")).ok());
  EXPECT_TRUE(LoadCaPem(P("ca.pem")).ok());
}

TEST_F(TlsFilesTest, CommonNameIsTheWorkerName) {
  absl::StatusOr<std::string> pem = ReadPemFile("--tls-cert", P("worker-w1.pem"));
  ASSERT_TRUE(pem.ok());
  absl::StatusOr<std::string> cn = CertificateCommonName(*pem);
  ASSERT_TRUE(cn.ok()) << cn.status();
  EXPECT_EQ(*cn, "w1");
  EXPECT_FALSE(CertificateCommonName("not pem").ok());
}

TEST(PeerIdentity, SubjectPartsKeepEscapedSeparatorsInsideValues) {
  EXPECT_EQ(SubjectParts("CN=w1,OU=trainyard-worker,O=trainyard"),
            (std::vector<std::string>{"CN=w1", "OU=trainyard-worker", "O=trainyard"}));
  EXPECT_EQ(SubjectParts("CN=a\\,OU=trainyard-worker,O=x+OU=y"),
            (std::vector<std::string>{"CN=a\\,OU=trainyard-worker", "O=x", "OU=y"}));
}

TEST(PeerIdentity, OnlyAWorkerCertificateNamesAWorker) {
  EXPECT_EQ(WorkerNameFromCertificate({}).status().code(), absl::StatusCode::kUnauthenticated);
  absl::StatusOr<std::string> name =
      WorkerNameFromCertificate({true, "w1", "CN=w1,OU=trainyard-worker,O=trainyard"});
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "w1");
  absl::StatusOr<std::string> client =
      WorkerNameFromCertificate({true, "alice", "CN=alice,OU=trainyard-client,O=trainyard"});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(client.status().message().find("not a worker certificate"), absl::string_view::npos);
  // An OU smuggled into the CN is escaped by RFC 2253 and does not count.
  EXPECT_EQ(WorkerNameFromCertificate({true, "a,OU=trainyard-worker", "CN=a\\,OU=trainyard-worker,O=t"})
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  // A CN that is no valid worker name.
  EXPECT_EQ(WorkerNameFromCertificate({true, "a b", "CN=a b,OU=trainyard-worker"}).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(PeerIdentity, AClaimedNameMustBeTheCertificates) {
  EXPECT_TRUE(CheckClaimedWorkerName("Register.name", "w1", "w1").ok());
  absl::Status s = CheckClaimedWorkerName("Register.name", "w2", "w1");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "Register.name 'w2' differs from the name in the worker's certificate 'w1'");
}

TEST(ListenerSecurity, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:7070", "127.1.2.3:0", "localhost:7070", "[::1]:7070"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:7070", "[::]:7070", "10.0.0.1:7070", "127.example.com:80", ":7070", "127.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(ListenerSecurity, BeyondLoopbackNeedsTlsAndTokensOrInsecure) {
  ControllerOptions o;
  std::vector<std::string> warnings;
  EXPECT_TRUE(CheckListenerSecurity(o, &warnings).ok());  // the defaults: loopback
  EXPECT_TRUE(warnings.empty());

  o.listen = "0.0.0.0:7070";
  absl::Status s = CheckListenerSecurity(o, &warnings);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("TLS and --token-file are missing"), absl::string_view::npos) << s;
  o.tls = {"c", "k", "a"};
  s = CheckListenerSecurity(o, &warnings);
  EXPECT_NE(s.message().find("--token-file is missing"), absl::string_view::npos) << s;
  o.token_file = "tokens";
  EXPECT_TRUE(CheckListenerSecurity(o, &warnings).ok());
  EXPECT_TRUE(warnings.empty());

  o.metrics_listen = "0.0.0.0:9464";
  s = CheckListenerSecurity(o, &warnings);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--metrics-listen"), absl::string_view::npos) << s;

  o.insecure = true;
  o.tls = {};
  ASSERT_TRUE(CheckListenerSecurity(o, &warnings).ok());
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("without TLS"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("/metrics"), std::string::npos) << warnings[1];

  ControllerOptions loopback;
  loopback.insecure = true;
  warnings.clear();
  ASSERT_TRUE(CheckListenerSecurity(loopback, &warnings).ok());
  EXPECT_EQ(warnings.size(), 1u);  // every start with --insecure warns
}

TEST_F(TlsFilesTest, TokenFileFirstLineWithoutTrailingWhitespace) {
  Write("token", "s3cr3t-token \t\r\nsecond line\n");
  absl::StatusOr<std::string> token = JobClient::ReadTokenFile(P("token"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cr3t-token");

  Write("spaced", "s3cr3t token\n");
  absl::StatusOr<std::string> spaced = JobClient::ReadTokenFile(P("spaced"));
  EXPECT_EQ(spaced.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spaced.status().message().find("s3cr3t"), absl::string_view::npos) << "the token leaked";
  Write("blank", "\n");
  EXPECT_FALSE(JobClient::ReadTokenFile(P("blank")).ok());
  EXPECT_EQ(JobClient::ReadTokenFile(P("nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(JobClient::CheckBearerToken("tok\x01", "TRAINYARD_TOKEN").ok());
}

}  // namespace
}  // namespace trainyard
