// The --webhooks reader: the documented format, and every hostile input refused with
// its FILE:LINE before the controller serves.
#include "server/notify/webhook_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kSecret[] = "0123456789abcdef-secret";

std::string Endpoint(const std::string& extra, const std::string& name = "ops") {
  return "[[endpoint]]\nname = \"" + name + "\"\nurl = \"https://hooks.example.com/ty\"\nevents = [\"state_change\"]\n" +
         "secret = \"" + kSecret + "\"\n" + extra;
}

std::string Error(const std::string& text, const std::string& file = "w.toml") {
  absl::StatusOr<WebhookConfig> c = ParseWebhookFile(text, file);
  EXPECT_FALSE(c.ok()) << text;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

TEST(WebhookFileTest, ReadsTheDocumentedFormat) {
  testing::TempDir dir;
  std::ofstream(dir.path() + "/ops.secret") << "from-a-file-0123456789\n";
  const std::string text = R"(# trainyard-controller --webhooks
[delivery]
timeout_s = 5
max_attempts = 7
max_age_hours = 2.5
backoff_initial_s = 0.5
backoff_max_s = 60
max_pending = 100

[[endpoint]]
name = "ops"
url = "https://hooks.example.com/trainyard?team=ml"
events = ["state_change", "stall", "preemption", "checkpoint", "restart"]
secret_file = "ops.secret"

[[endpoint]]
name = "alice-chat"
url = "http://127.0.0.1:9000/hook"
events = ["stall"]
owners = ["alice", "bob@example.com"]
secret = "0123456789abcdef-inline"
)";
  absl::StatusOr<WebhookConfig> c = ParseWebhookFile(text, dir.path() + "/w.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->delivery.timeout, absl::Seconds(5));
  EXPECT_EQ(c->delivery.max_attempts, 7);
  EXPECT_EQ(c->delivery.max_age, absl::Minutes(150));
  EXPECT_EQ(c->delivery.backoff_initial, absl::Milliseconds(500));
  EXPECT_EQ(c->delivery.backoff_max, absl::Seconds(60));
  EXPECT_EQ(c->delivery.max_pending, 100);
  ASSERT_EQ(c->endpoints.size(), 2u);
  EXPECT_EQ(c->endpoints[0].name, "ops");
  EXPECT_EQ(c->endpoints[0].kinds, kAllWebhookKinds);
  EXPECT_EQ(c->endpoints[0].secret, "from-a-file-0123456789");  // the newline is not part of it
  EXPECT_TRUE(c->endpoints[0].owners.empty());
  EXPECT_EQ(c->endpoints[1].kinds, static_cast<uint32_t>(kWebhookStall));
  EXPECT_EQ(c->endpoints[1].owners, (std::vector<std::string>{"alice", "bob@example.com"}));
  EXPECT_EQ(c->endpoints[1].secret, "0123456789abcdef-inline");
  EXPECT_EQ(WebhookKindNames(c->endpoints[0].kinds),
            (std::vector<std::string>{"state_change", "stall", "preemption", "checkpoint", "restart"}));
}

TEST(WebhookFileTest, DefaultsWithoutDelivery) {
  absl::StatusOr<WebhookConfig> c = ParseWebhookFile(Endpoint(""), "w.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->delivery.max_attempts, 20);
  EXPECT_EQ(c->delivery.timeout, absl::Seconds(10));
  EXPECT_EQ(c->delivery.max_pending, 10000);
}

TEST(WebhookFileTest, MissingFileAndNotToml) {
  absl::StatusOr<WebhookConfig> missing = LoadWebhookFile("/nonexistent/w.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("webhooks file '/nonexistent/w.toml'"));
  EXPECT_THAT(Error("[[endpoint]\nname = 1\n"), StartsWith("w.toml:1: syntax error"));
  EXPECT_THAT(Error("url = \"x\"\nname = \n"), StartsWith("w.toml:2: syntax error"));
}

TEST(WebhookFileTest, EmptyFileAndNoEndpoint) {
  EXPECT_THAT(Error(""), HasSubstr("w.toml:1: no [[endpoint]]"));
  EXPECT_THAT(Error("[delivery]\nmax_attempts = 3\n"), HasSubstr("no [[endpoint]]"));
  EXPECT_THAT(Error("endpoint = []\n"), HasSubstr("no [[endpoint]]"));
}

TEST(WebhookFileTest, HugeFileIsRefusedBeforeParsing) {
  const std::string huge(kMaxWebhookFileBytes + 1, '#');
  EXPECT_THAT(Error(huge), HasSubstr("more than the cap of"));
  testing::TempDir dir;
  const std::string path = dir.path() + "/huge.toml";
  std::ofstream(path) << huge;
  absl::StatusOr<WebhookConfig> c = LoadWebhookFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path + ":1: the webhooks file is "));
}

TEST(WebhookFileTest, InvalidUtf8NamesItsLine) {
  EXPECT_EQ(Error(Endpoint("# caf\xC3\n")), "w.toml:6: not valid UTF-8");
}

TEST(WebhookFileTest, UnknownKeysNameWhereAndWhatIsAllowed) {
  EXPECT_THAT(Error(Endpoint("evnets = []\n")),
              HasSubstr("w.toml:6: unknown key 'evnets' in [[endpoint]] (allowed: name, url, events, owners, "
                        "secret, secret_file)"));
  EXPECT_THAT(Error("[delivery]\nretries = 3\n" + Endpoint("")), StartsWith("w.toml:2: unknown key 'retries' in [delivery]"));
  EXPECT_THAT(Error("endpoints = 1\n" + Endpoint("")), StartsWith("w.toml:1: unknown key 'endpoints'"));
}

TEST(WebhookFileTest, DuplicateNames) {
  EXPECT_THAT(Error(Endpoint("") + Endpoint("")), HasSubstr("w.toml:7: duplicate endpoint 'ops' (first at line 2)"));
}

TEST(WebhookFileTest, BadNames) {
  EXPECT_THAT(Error(Endpoint("", "")), HasSubstr("w.toml:2: endpoint.name: must not be empty"));
  EXPECT_THAT(Error(Endpoint("", "a b")), HasSubstr("may hold only letters, digits, '_' and '-'"));
  EXPECT_THAT(Error(Endpoint("", std::string(65, 'a'))), HasSubstr("is 65 bytes, more than 64"));
  EXPECT_THAT(Error("[[endpoint]]\nurl = \"http://x/\"\nevents = [\"stall\"]\nsecret = \"" + std::string(kSecret) +
                    "\"\n"),
              HasSubstr("w.toml:1: [[endpoint]] has no name"));
}

TEST(WebhookFileTest, BadUrls) {
  auto with_url = [](const std::string& url) {
    return Error("[[endpoint]]\nname = \"a\"\nurl = \"" + url + "\"\nevents = [\"stall\"]\nsecret = \"" + kSecret +
                 "\"\n");
  };
  EXPECT_THAT(with_url(""), HasSubstr("w.toml:3: endpoint.url: must not be empty"));
  EXPECT_THAT(with_url("ftp://example.com/x"), HasSubstr("w.toml:3: endpoint.url"));
  EXPECT_THAT(with_url("file:///etc/passwd"), HasSubstr("w.toml:3: endpoint.url"));
  EXPECT_THAT(with_url("example.com/hook"), HasSubstr("w.toml:3: endpoint.url"));
  const std::string creds = with_url("https://user:hunter2@example.com/hook");
  EXPECT_THAT(creds, HasSubstr("w.toml:3: endpoint.url"));
  EXPECT_THAT(creds, Not(HasSubstr("hunter2")));
  EXPECT_THAT(with_url("https://example.com/" + std::string(3000, 'a')), HasSubstr("w.toml:3: endpoint.url"));
  EXPECT_THAT(Error("[[endpoint]]\nname = \"a\"\nurl = 7\nevents = [\"stall\"]\nsecret = \"" + std::string(kSecret) +
                    "\"\n"),
              HasSubstr("w.toml:3: endpoint.url: expected a string, got integer"));
}

TEST(WebhookFileTest, EventKinds) {
  auto with_events = [](const std::string& events) {
    return Error("[[endpoint]]\nname = \"a\"\nurl = \"http://x/\"\nevents = " + events + "\nsecret = \"" + kSecret +
                 "\"\n");
  };
  EXPECT_THAT(with_events("[\"state_change\", \"finished\"]"),
              HasSubstr("w.toml:4: endpoint.events: unknown event kind 'finished' (allowed: state_change, stall, "
                        "preemption, checkpoint, restart)"));
  EXPECT_THAT(with_events("[]"), HasSubstr("w.toml:4: endpoint.events: must name at least one of"));
  EXPECT_THAT(with_events("\"stall\""), HasSubstr("expected an array of strings, got string"));
  EXPECT_THAT(with_events("[\"stall\", \"stall\"]"), HasSubstr("'stall' is listed twice"));
  EXPECT_THAT(with_events("[1]"), HasSubstr("endpoint.events: expected a string, got integer"));
}

TEST(WebhookFileTest, OwnerFilterOddities) {
  EXPECT_THAT(Error(Endpoint("owners = []\n")), HasSubstr("w.toml:6: endpoint.owners: must name at least one owner"));
  EXPECT_THAT(Error(Endpoint("owners = [\"\"]\n")), HasSubstr("endpoint.owners: must not be empty"));
  EXPECT_THAT(Error(Endpoint("owners = [\"al ice\"]\n")), HasSubstr("'al ice' may hold only"));
  EXPECT_THAT(Error(Endpoint("owners = [\"*\"]\n")), HasSubstr("'*' may hold only"));
  EXPECT_THAT(Error(Endpoint("owners = [\"alice\", \"alice\"]\n")), HasSubstr("'alice' is listed twice"));
  EXPECT_THAT(Error(Endpoint("owners = [\"caf\xC3\xA9\"]\n")), HasSubstr("may hold only"));
  EXPECT_THAT(Error(Endpoint("owners = \"alice\"\n")), HasSubstr("expected an array of strings"));
}

TEST(WebhookFileTest, SecretsAreRequiredSizedAndNeverEchoed) {
  const std::string base = "[[endpoint]]\nname = \"a\"\nurl = \"http://x/\"\nevents = [\"stall\"]\n";
  EXPECT_THAT(Error(base), HasSubstr("w.toml:1: endpoint 'a' has no secret or secret_file"));
  EXPECT_THAT(Error(base + "secret = \"\"\n"), HasSubstr("w.toml:5: endpoint 'a': secret is 0 bytes; it must be 16"));
  const std::string short_secret = Error(base + "secret = \"tooshort\"\n");
  EXPECT_THAT(short_secret, HasSubstr("secret is 8 bytes"));
  EXPECT_THAT(short_secret, Not(HasSubstr("tooshort")));
  EXPECT_THAT(Error(base + "secret = \"" + kSecret + "\"\nsecret_file = \"s\"\n"),
              HasSubstr("secret and secret_file are both set"));
  EXPECT_THAT(Error(base + "secret_file = \"\"\n"), HasSubstr("endpoint.secret_file: must not be empty"));
  EXPECT_THAT(Error(base + "secret_file = \"/nonexistent/s\"\n"),
              HasSubstr("w.toml:5: endpoint 'a': secret_file '/nonexistent/s': no such file"));

  testing::TempDir dir;
  std::ofstream(dir.path() + "/empty") << "\n";
  EXPECT_THAT(Error(base + "secret_file = \"empty\"\n", dir.path() + "/w.toml"),
              HasSubstr("holds 0 bytes (trailing whitespace removed)"));
  std::ofstream(dir.path() + "/big") << std::string(kMaxWebhookSecretBytes + 10, 'x');
  EXPECT_THAT(Error(base + "secret_file = \"big\"\n", dir.path() + "/w.toml"), HasSubstr("more than 4096 bytes"));
  const std::string locked = dir.path() + "/locked";
  std::ofstream(locked) << kSecret;
  ::chmod(locked.c_str(), 0);
  if (::geteuid() != 0) {  // root reads it anyway
    EXPECT_THAT(Error(base + "secret_file = \"locked\"\n", dir.path() + "/w.toml"),
                HasSubstr("endpoint 'a': secret_file '" + locked + "': cannot open"));
  }
  EXPECT_THAT(Error(base + "secret_file = \".\"\n", dir.path() + "/w.toml"), HasSubstr("is a directory"));
}

TEST(WebhookFileTest, DeliveryRanges) {
  auto with = [](const std::string& line) { return Error("[delivery]\n" + line + "\n" + Endpoint("")); };
  EXPECT_THAT(with("timeout_s = 0"), HasSubstr("w.toml:2: delivery.timeout_s: 0 is out of range"));
  EXPECT_THAT(with("timeout_s = nan"), HasSubstr("delivery.timeout_s: nan is out of range"));
  EXPECT_THAT(with("timeout_s = inf"), HasSubstr("delivery.timeout_s: inf is out of range"));
  EXPECT_THAT(with("max_attempts = -1"), HasSubstr("delivery.max_attempts: -1 is out of range (1 to 1000)"));
  EXPECT_THAT(with("max_attempts = 1.5"), HasSubstr("expected an integer, got float"));
  EXPECT_THAT(with("max_age_hours = 0"), HasSubstr("delivery.max_age_hours: 0 is out of range"));
  EXPECT_THAT(with("max_pending = 0"), HasSubstr("delivery.max_pending: 0 is out of range"));
  EXPECT_THAT(with("max_pending = 99999999999"), HasSubstr("out of range"));
  EXPECT_THAT(Error("[delivery]\nbackoff_initial_s = 10\nbackoff_max_s = 5\n" + Endpoint("")),
              HasSubstr("w.toml:3: delivery.backoff_max_s: 5 is less than backoff_initial_s (10)"));
  EXPECT_THAT(Error("delivery = 3\n" + Endpoint("")), HasSubstr("delivery: expected a table"));
}

TEST(WebhookFileTest, TooManyEndpoints) {
  std::string text;
  for (size_t i = 0; i <= kMaxWebhookEndpoints; ++i) text += Endpoint("", "e" + std::to_string(i));
  EXPECT_THAT(Error(text), HasSubstr("33 endpoints, more than the cap of 32"));
}

TEST(WebhookFileTest, ReportsTheEarliestProblemAndCountsTheRest) {
  EXPECT_THAT(Error(Endpoint("bogus = 1\nother = 2\n")), HasSubstr("w.toml:6: unknown key 'bogus'"));
  EXPECT_THAT(Error(Endpoint("bogus = 1\nother = 2\n")), HasSubstr("(and 1 more problem)"));
}

}  // namespace
}  // namespace trainyard
