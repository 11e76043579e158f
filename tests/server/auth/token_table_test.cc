// Token files against hostile and careless input (every problem names file:line, never
// holds a whole hash or any presented token), lookups, the Authorizer's bearer parsing,
// its role rules and its reload (a bad file keeps the old table), and the watcher cap.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/base/sha256.h"
#include "server/auth/authorizer.h"
#include "server/auth/token_table.h"
#include "server/auth/watcher_cap.h"
#include "tests/support/temp_dir.h"

namespace trainyard::testing {
namespace {

const std::string kAliceToken = "alice-s3cret-token";
const std::string kViewerToken = "viewer-token-0001";

std::string Line(const std::string& token, const std::string& role, const std::string& owner) {
  return Sha256Hex(token) + " " + role + " " + owner + "\n";
}

std::string GoodFile() {
  return "# trainyard tokens\n\n" + Line(kAliceToken, "submitter", "alice") +
         "   \t\n" + Line(kViewerToken, "viewer", "dash.board@ops") + "  # indented comment\n";
}

// Expects INVALID_ARGUMENT whose message starts with `prefix`, contains `part`, is
// short and holds no 64-hex hash.
void ExpectBad(const std::string& text, const std::string& prefix, const std::string& part) {
  auto table = TokenTable::Parse(text, "tokens");
  ASSERT_FALSE(table.ok()) << prefix;
  const std::string message(table.status().message());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument) << message;
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
  EXPECT_NE(message.find(part), std::string::npos) << message;
  EXPECT_LE(message.size(), 200u) << message;
  EXPECT_EQ(message.find(Sha256Hex(kAliceToken).substr(0, 16)), std::string::npos) << message;
}

TEST(TokenTableTest, ParsesLinesCommentsAndBlankLines) {
  auto table = TokenTable::Parse(GoodFile(), "tokens");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2u);
  auto alice = table->Lookup(kAliceToken);
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->role, Role::kSubmitter);
  EXPECT_EQ(alice->owner, "alice");
  auto viewer = table->Lookup(kViewerToken);
  ASSERT_TRUE(viewer.has_value());
  EXPECT_EQ(viewer->role, Role::kViewer);
  EXPECT_EQ(viewer->owner, "dash.board@ops");
}

TEST(TokenTableTest, OnlyTheExactTokenMatches) {
  auto table = TokenTable::Parse(GoodFile(), "tokens");
  ASSERT_TRUE(table.ok()) << table.status();
  std::string off_by_one = kAliceToken;
  off_by_one.back() ^= 1;
  EXPECT_FALSE(table->Lookup(off_by_one).has_value());
  EXPECT_FALSE(table->Lookup(kAliceToken.substr(1)).has_value());
  EXPECT_FALSE(table->Lookup(kAliceToken + " ").has_value());
  EXPECT_FALSE(table->Lookup("").has_value());
  // The hash itself is not a token.
  EXPECT_FALSE(table->Lookup(Sha256Hex(kAliceToken)).has_value());
  // The last entry matches as well as the first: the loop runs to the end.
  EXPECT_TRUE(table->Lookup(kViewerToken).has_value());
}

TEST(TokenTableTest, RefusesBadLinesNamingTheLine) {
  const std::string good = Line(kAliceToken, "submitter", "alice");
  const std::string hash = Sha256Hex(kAliceToken);
  ExpectBad(good + hash.substr(1) + " viewer bob\n", "tokens:2: ", "got 63 characters");
  ExpectBad(good + hash + "0 viewer bob\n", "tokens:2: ", "got 65 characters");
  std::string upper = Sha256Hex("x");
  upper[10] = 'A';
  ExpectBad(good + upper + " viewer bob\n", "tokens:2: ", "character 11 is 'A'");
  std::string not_hex = Sha256Hex("x");
  not_hex[0] = 'g';
  ExpectBad(not_hex + " viewer bob\n", "tokens:1: ", "character 1 is 'g'");
  ExpectBad(good + Line("x", "root", "bob"), "tokens:2: ", "unknown role 'root'");
  ExpectBad(good + Line("x", "Admin", "bob"), "tokens:2: ", "unknown role 'Admin'");
  ExpectBad(good + Line("x", "viewer", "bob smith"), "tokens:2: ", "got 4");
  ExpectBad(good + Line("x", "viewer", "bob/../x"), "tokens:2: ", "owner 'bob/../x' must be 1 to 64");
  ExpectBad(good + Line("x", "viewer", std::string(65, 'o')), "tokens:2: ", "must be 1 to 64");
  ExpectBad(good + Line("x", "viewer", std::string(300, 'o') + "!"), "tokens:2: ", "must be 1 to 64");
  ExpectBad(good + Sha256Hex("x") + " viewer\n", "tokens:2: ", "expected 3 fields");
  ExpectBad(good + Sha256Hex("x") + "\n", "tokens:2: ", "got 1");
  ExpectBad(good + Sha256Hex("x") + " viewer bob # a comment\n", "tokens:2: ", "got 6");
  ExpectBad("#\n#\n" + good + Line(kAliceToken, "admin", "mallory"), "tokens:4: ", "same token hash as line 3");
  ExpectBad(good + Sha256Hex("x") + " viewer bob\r\n", "tokens:2: ", "carriage return");
  ExpectBad(good + "# caf\xc3\x28\n", "tokens:2: ", "not valid UTF-8");
  ExpectBad(good + Sha256Hex("x") + " viewer b\xffob\n", "tokens:2: ", "not valid UTF-8");
  ExpectBad(good + Sha256Hex("x") + " viewer b\x01ob\n", "tokens:2: ", "control character '\\x01' at column 74");
  ExpectBad(good + std::string("x\0y viewer bob\n", 15), "tokens:2: ", "control character");
}

TEST(TokenTableTest, RefusesAFileWithoutTokensAndAnOversizedOne) {
  ExpectBad("", "tokens: ", "holds no tokens");
  ExpectBad("# only a comment\n\n", "tokens: ", "holds no tokens");
  std::string big = GoodFile();
  while (big.size() <= TokenTable::kMaxFileBytes) big += "# padding padding padding padding padding\n";
  ExpectBad(big, "tokens: ", "at most");
}

TEST(TokenTableTest, AnErrorNeverHoldsMoreThanAHundredCharactersOfAField) {
  const std::string role(100000, 'r');
  auto table = TokenTable::Parse(Sha256Hex("x") + " " + role + " bob\n", "tokens");
  ASSERT_FALSE(table.ok());
  EXPECT_LE(table.status().message().size(), 250u);
}

TEST(TokenTableTest, ReadFileRefusesMissingWorldWritableAndNonRegularFiles) {
  TempDir dir;
  const std::string path = dir.path() + "/tokens";
  EXPECT_EQ(TokenTable::ReadFile(path).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(path) << GoodFile();
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto table = TokenTable::ReadFile(path);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 2u);

  ASSERT_EQ(chmod(path.c_str(), 0646), 0);
  auto writable = TokenTable::ReadFile(path);
  EXPECT_EQ(writable.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(writable.status().message().find("world-writable"), std::string::npos);

  auto directory = TokenTable::ReadFile(dir.path());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kFailedPrecondition);

  const std::string big = dir.path() + "/big";
  std::ofstream(big) << GoodFile() << std::string(TokenTable::kMaxFileBytes, '#');
  auto oversized = TokenTable::ReadFile(big);
  EXPECT_EQ(oversized.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(oversized.status().message().rfind(big + ": is more than 1048576 bytes", 0), 0u)
      << oversized.status();

  const std::string bad = dir.path() + "/bad";
  std::ofstream(bad) << GoodFile() << "zz viewer bob\n";
  auto refused = TokenTable::ReadFile(bad);
  EXPECT_EQ(refused.status().message().rfind(bad + ":7: ", 0), 0u) << refused.status();
}

std::unique_ptr<Authorizer> AuthorizerFor(const TempDir& dir, const std::string& text) {
  const std::string path = dir.path() + "/tokens";
  std::ofstream(path) << text;
  auto authz = Authorizer::FromFile(path);
  EXPECT_TRUE(authz.ok()) << authz.status();
  return authz.ok() ? std::move(*authz) : nullptr;
}

TEST(AuthorizerTest, ReadsBearerTokensAndNeverEchoesThem) {
  TempDir dir;
  auto authz = AuthorizerFor(dir, GoodFile());
  ASSERT_NE(authz, nullptr);
  EXPECT_TRUE(authz->enabled());
  auto alice = authz->AuthenticateValues({"Bearer " + kAliceToken});
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->owner, "alice");
  EXPECT_EQ(alice->role, Role::kSubmitter);
  EXPECT_TRUE(authz->AuthenticateValues({"bearer  " + kAliceToken}).ok());

  auto expect = [&](const std::vector<std::string_view>& values, const std::string& message) {
    auto caller = authz->AuthenticateValues(values);
    ASSERT_FALSE(caller.ok()) << message;
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(caller.status().message(), message);
  };
  expect({}, "no bearer token");
  expect({"Bearer "}, "no bearer token");
  expect({"Bearer"}, "no bearer token");
  std::string wrong = kAliceToken;
  wrong[3] = 'X';
  expect({"Bearer " + wrong}, "unknown token");
  expect({"Basic " + kAliceToken}, "the authorization metadata is not a bearer token");
  expect({"Bearer" + kAliceToken}, "the authorization metadata is not a bearer token");
  expect({"Bearer " + kAliceToken, "Bearer " + kViewerToken}, "more than one authorization metadata entry");
}

TEST(AuthorizerTest, OffEveryCallerIsTheLocalAdmin) {
  auto authz = Authorizer::FromFile("");
  ASSERT_TRUE(authz.ok());
  EXPECT_FALSE((*authz)->enabled());
  for (const std::vector<std::string_view>& values :
       {std::vector<std::string_view>{}, std::vector<std::string_view>{"Bearer whatever"}}) {
    auto caller = (*authz)->AuthenticateValues(values);
    ASSERT_TRUE(caller.ok());
    EXPECT_EQ(caller->role, Role::kAdmin);
    EXPECT_EQ(caller->owner, "local");
  }
  EXPECT_TRUE((*authz)->Reload().ok());
}

TEST(AuthorizerTest, ABadFileOnReloadKeepsTheOldTable) {
  TempDir dir;
  auto authz = AuthorizerFor(dir, GoodFile());
  ASSERT_NE(authz, nullptr);
  const std::string path = dir.path() + "/tokens";

  std::ofstream(path) << GoodFile() << "not-a-hash admin mallory\n";
  const absl::Status bad = authz->Reload();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message().rfind(path + ":7: ", 0), 0u) << bad;
  EXPECT_TRUE(authz->AuthenticateValues({"Bearer " + kAliceToken}).ok());
  EXPECT_EQ(authz->token_count(), 2u);

  ASSERT_EQ(std::remove(path.c_str()), 0);
  EXPECT_EQ(authz->Reload().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(authz->AuthenticateValues({"Bearer " + kAliceToken}).ok());

  // A good file replaces the table: alice's token is revoked, a new admin appears.
  std::ofstream(path) << Line("new-admin-token", "admin", "ops");
  ASSERT_TRUE(authz->Reload().ok());
  EXPECT_EQ(authz->AuthenticateValues({"Bearer " + kAliceToken}).status().message(), "unknown token");
  auto admin = authz->AuthenticateValues({"Bearer new-admin-token"});
  ASSERT_TRUE(admin.ok()) << admin.status();
  EXPECT_EQ(admin->role, Role::kAdmin);
  EXPECT_EQ(authz->token_count(), 1u);
}

TEST(AuthorizerTest, RoleMatrix) {
  const Caller viewer{Role::kViewer, "v"};
  const Caller alice{Role::kSubmitter, "alice"};
  const Caller admin{Role::kAdmin, "root"};
  EXPECT_FALSE(Authorizer::CanSubmit(viewer));
  EXPECT_TRUE(Authorizer::CanSubmit(alice));
  EXPECT_TRUE(Authorizer::CanSubmit(admin));

  EXPECT_TRUE(Authorizer::CanSee(viewer, "bob"));
  EXPECT_TRUE(Authorizer::CanSee(alice, "alice"));
  EXPECT_FALSE(Authorizer::CanSee(alice, "bob"));
  EXPECT_FALSE(Authorizer::CanSee(alice, "alice2"));
  EXPECT_TRUE(Authorizer::CanSee(admin, "bob"));

  EXPECT_FALSE(Authorizer::CanCancel(viewer, "v"));
  EXPECT_TRUE(Authorizer::CanCancel(alice, "alice"));
  EXPECT_FALSE(Authorizer::CanCancel(alice, "bob"));
  EXPECT_TRUE(Authorizer::CanCancel(admin, "bob"));

  EXPECT_TRUE(Authorizer::CanSeeFleet(viewer));
}

TEST(WatcherCapTest, CountsPerOwnerAndReleasesOnDestruction) {
  WatcherCap cap(2);
  auto a1 = cap.Acquire("alice");
  auto a2 = cap.Acquire("alice");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = cap.Acquire("alice");
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a3.status().message(),
            "owner alice already has 2 watch streams open (WatchJob and WatchJobBatched together), the most one "
            "identity may; end one first");
  EXPECT_TRUE(cap.Acquire("bob").ok());  // released at once, bob's own count
  EXPECT_EQ(cap.Open("bob"), 0);
  EXPECT_EQ(cap.Open("alice"), 2);
  a1->reset();
  EXPECT_EQ(cap.Open("alice"), 1);
  EXPECT_TRUE(cap.Acquire("alice").ok());
}

TEST(WatcherCapTest, ALeaseMayOutliveTheCap) {
  std::unique_ptr<WatcherCap::Lease> lease;
  {
    WatcherCap cap(1);
    auto l = cap.Acquire("alice");
    ASSERT_TRUE(l.ok());
    lease = std::move(*l);
  }
  lease.reset();  // no use after free (ASan would say)
}

}  // namespace
}  // namespace trainyard::testing
