#include "worker/engine/compile/region/region_key.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace trainyard::engine::compile {
namespace {

TEST(RegionKeyTest, StringFormKeepsFieldOrder) {
  RegionKey k("attention", {{"dim", 256}, {"n_heads", 8}, {"n_kv_heads", int64_t{4}}, {"tp", 1}});
  EXPECT_EQ(k.str(), "attention{dim=256,n_heads=8,n_kv_heads=4,tp=1}");
  EXPECT_EQ(k.kind(), "attention");
}

TEST(RegionKeyTest, ValuesOfEveryTypeAreExact) {
  RegionKey k("ffn", {{"eps", 1e-6}, {"scale", 0.1}, {"bias", false}, {"act", "silu"}, {"n", size_t{3}}});
  EXPECT_EQ(k.str(), "ffn{eps=1e-06,scale=0.1,bias=false,act=silu,n=3}");
  // Doubles one ulp apart are different code (a baked-in constant), so different keys.
  EXPECT_NE(RegionKey("n", {{"eps", 0.1}}), RegionKey("n", {{"eps", std::nextafter(0.1, 1.0)}}));
}

TEST(RegionKeyTest, EqualityIsStructural) {
  EXPECT_EQ(RegionKey("moe", {{"experts", 8}}), RegionKey(std::string("moe"), {{"experts", 8}}));
  EXPECT_NE(RegionKey("moe", {{"experts", 8}}), RegionKey("moe", {{"experts", 16}}));
  EXPECT_NE(RegionKey("moe", {{"a", 1}, {"b", 2}}), RegionKey("moe", {{"b", 2}, {"a", 1}}));
}

TEST(RegionKeyTest, RejectsAmbiguousKeys) {
  EXPECT_THROW(RegionKey("", {}), std::invalid_argument);
  EXPECT_THROW(RegionKey("a", {{"", 1}}), std::invalid_argument);
  EXPECT_THROW(RegionKey("a", {{"x", 1}, {"x", 2}}), std::invalid_argument);
  EXPECT_THROW(RegionKey("a", {{"x", "1,y=2"}}), std::invalid_argument);
  EXPECT_THROW(RegionKey("a{", {}), std::invalid_argument);
}

}  // namespace
}  // namespace trainyard::engine::compile
