#include <cmath>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/engine/train/event_writer.h"

namespace trainyard::engine {
namespace {

TEST(EventWriterTest, WritesOneProtoJsonEventPerLine) {
  std::ostringstream out;
  EventWriter w(out, 1, 3, [] { return std::string("2026-11-29T18:40:19.123Z"); });
  w.Log("info", "hello");
  StepMetrics m;
  m.step = 5;
  m.loss = 2.5;
  m.expert_load = {1, 2, 3};
  m.imbalance = 1.5;
  m.grad_norm = std::nan("");
  w.Step(m);

  std::istringstream in(out.str());
  std::string line1, line2, extra;
  ASSERT_TRUE(std::getline(in, line1));
  ASSERT_TRUE(std::getline(in, line2));
  EXPECT_FALSE(std::getline(in, extra));
  auto a = nlohmann::json::parse(line1), b = nlohmann::json::parse(line2);
  EXPECT_EQ(a["rank"], 1);
  EXPECT_EQ(a["attempt"], 3);
  EXPECT_EQ(a["source_seq"], 1);
  EXPECT_EQ(a["time"], "2026-11-29T18:40:19.123Z");
  EXPECT_EQ(a["log"]["level"], "info");
  EXPECT_EQ(a["log"]["message"], "hello");
  EXPECT_EQ(b["source_seq"], 2);
  EXPECT_EQ(b["step_metrics"]["step"], 5);
  EXPECT_EQ(b["step_metrics"]["expert_load"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(b["step_metrics"]["grad_norm"], "NaN");
  EXPECT_FALSE(b.contains("log"));
}

TEST(EventWriterTest, NowIsRfc3339Utc) {
  const std::string t = EventWriter::NowRfc3339();
  ASSERT_EQ(t.size(), 24u) << t;
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t[19], '.');
  EXPECT_EQ(t.back(), 'Z');
}

}  // namespace
}  // namespace trainyard::engine
