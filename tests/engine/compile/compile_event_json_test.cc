// CompileEventJson against the real proto: the JSON must parse as a
// trainyard.v1.CompileEvent with proto field names, and nothing may be dropped.
#include <gtest/gtest.h>
#include <google/protobuf/util/json_util.h>

#include "trainyard/v1/event.pb.h"
#include "worker/engine/compile/events/compile_event.h"

namespace trainyard::engine::compile {
namespace {

trainyard::v1::CompileEvent Parse(const nlohmann::json& j) {
  trainyard::v1::CompileEvent msg;
  google::protobuf::util::JsonParseOptions strict;  // unknown fields are an error
  const auto status = google::protobuf::util::JsonStringToMessage(j.dump(), &msg, strict);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << j.dump();
  return msg;
}

TEST(CompileEventJsonTest, UsesProtoFieldNamesAndKindName) {
  CompileEventRecord r;
  r.kind = CompileEventKind::kRecompileLimit;
  r.region = "attention{dim=256,n_heads=8,n_kv_heads=4,tp=1}";
  r.layers = {2, 5};
  r.reason = "recompile_limit (8) reached";
  r.compile_ms = 12.5;
  r.cache_entries = 8;
  const nlohmann::json j = CompileEventJson(r);

  EXPECT_EQ(j.at("kind"), "RECOMPILE_LIMIT");
  EXPECT_EQ(j.at("cache_entries"), 8);
  EXPECT_EQ(j.at("compile_ms"), 12.5);
  EXPECT_EQ(j.at("layers"), nlohmann::json::array({2, 5}));
  EXPECT_EQ(j.size(), 6u) << j.dump();

  const auto msg = Parse(j);
  EXPECT_EQ(msg.kind(), trainyard::v1::CompileEvent::RECOMPILE_LIMIT);
  EXPECT_EQ(msg.region(), r.region);
  ASSERT_EQ(msg.layers_size(), 2);
  EXPECT_EQ(msg.layers(0), 2);
  EXPECT_EQ(msg.layers(1), 5);
  EXPECT_EQ(msg.reason(), r.reason);
  EXPECT_EQ(msg.compile_ms(), 12.5);
  EXPECT_EQ(msg.cache_entries(), 8);
}

TEST(CompileEventJsonTest, EveryKindNameIsTheProtoEnumName) {
  for (int k = 1; k <= 7; ++k) {
    const auto kind = static_cast<CompileEventKind>(k);
    CompileEventRecord r;
    r.kind = kind;
    const auto msg = Parse(CompileEventJson(r));
    EXPECT_EQ(static_cast<int>(msg.kind()), k) << CompileEventKindName(kind);
    EXPECT_EQ(trainyard::v1::CompileEvent::Kind_Name(msg.kind()), CompileEventKindName(kind));
  }
}

}  // namespace
}  // namespace trainyard::engine::compile
