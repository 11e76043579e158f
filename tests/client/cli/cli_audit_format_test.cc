// `trainyard audit`'s --since and its table, and `trainyard get`'s who-stopped-it lines:
// pure functions on plain values.
#include <gtest/gtest.h>

#include "client/cli/audit_format.h"
#include "google/protobuf/util/time_util.h"

namespace trainyard::cli {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1796554037);  // 2026-12-06T10:47:17Z

TEST(AuditSinceTest, TakesATimeOrAnAgeAndRefusesTheRest) {
  auto t = ParseSince("2026-12-06T10:00:00Z", kNow);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(absl::ToUnixSeconds(*t), 1796554037 - 47 * 60 - 17);
  EXPECT_EQ(*ParseSince("90m", kNow), kNow - absl::Minutes(90));
  EXPECT_EQ(*ParseSince("7d", kNow), kNow - absl::Hours(168));
  for (const char* bad : {"", "garbage", "-5h", "5x", "h", "9999999999d", "2026-13-01T00:00:00Z", "\xff\xfe"}) {
    auto r = ParseSince(bad, kNow);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(std::string(r.status().message()).rfind("--since ", 0), 0u) << r.status();
  }
  auto future = ParseSince("2027-01-01T00:00:00Z", kNow);
  EXPECT_NE(future.status().message().find("in the future"), absl::string_view::npos) << future.status();
  EXPECT_NE(ParseSince("-5h", kNow).status().message().find("negative"), absl::string_view::npos);
}

TEST(AuditFormatTest, NamesWhoStoppedAJob) {
  v1::AuditRecord cancel;
  cancel.set_identity("alice");
  cancel.set_role("submitter");
  cancel.set_action("cancel");
  cancel.set_via("web");
  cancel.set_reason("wrong data");
  *cancel.mutable_time() = google::protobuf::util::TimeUtil::SecondsToTimestamp(1796554037);
  v1::AuditRecord drain = cancel;
  drain.set_identity("root");
  drain.set_role("admin");
  drain.set_action("drain");
  drain.set_target("w1");
  drain.set_via("grpc");
  drain.clear_reason();
  EXPECT_EQ(FormatStoppedBy({cancel, drain}),
            "cancelled by alice (submitter) at 2026-12-06 10:47:17Z via web: wrong data\n"
            "drained from w1 by root (admin) at 2026-12-06 10:47:17Z via grpc\n");
  EXPECT_EQ(FormatStoppedBy({}), "");
  EXPECT_EQ(FormatAuditTable({}), "no audit rows\n");
  const std::string table = FormatAuditTable({cancel});
  EXPECT_NE(table.find("alice (submitter)"), std::string::npos) << table;
  EXPECT_NE(table.find("    reason: wrong data"), std::string::npos) << table;
}

}  // namespace
}  // namespace trainyard::cli
