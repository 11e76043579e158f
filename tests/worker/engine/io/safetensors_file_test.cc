#include "worker/engine/io/safetensors_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace trainyard::engine {
namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "safetensors_" + std::to_string(::getpid()) + "_" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string Le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file laid out by hand: length prefix, header, buffer.
std::string FileWithHeader(const std::string& header, const std::string& buffer) {
  return Le64(header.size()) + header + buffer;
}

std::string ReadError(const std::string& path) {
  try {
    ReadSafetensors(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

bool BitwiseEqual(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

TEST(SafetensorsTest, RoundTripIsBitwiseExactForEveryDtype) {
  torch::manual_seed(7);
  auto f32 = torch::randn({3, 5});
  f32[0][0] = -0.0f;  // signed zero and NaN must survive bit for bit
  f32[0][1] = std::numeric_limits<float>::quiet_NaN();
  Named tensors = {
      {"layers.0.attention.wq.weight", f32},
      {"f64", torch::randn({4}, torch::kFloat64)},
      {"f16", torch::randn({2, 3}).to(torch::kHalf)},
      {"bf16", torch::randn({2, 2, 2}).to(torch::kBFloat16)},
      {"i64", torch::tensor({INT64_MIN, int64_t{-1}, INT64_MAX})},
      {"i32", torch::arange(-6, 6, torch::kInt32).reshape({3, 4})},
      {"i16", torch::tensor({-32768, 0, 32767}, torch::kInt16)},
      {"i8", torch::tensor({-128, 5, 127}, torch::kInt8)},
      {"u8", torch::tensor({0, 128, 255}, torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5f)},
      {"empty", torch::zeros({0, 4})},
      {"transposed", torch::randn({4, 6}).t()},  // non-contiguous input
  };
  const std::string path = TempPath("roundtrip.safetensors");
  WriteSafetensors(path, tensors);
  const Named back = ReadSafetensors(path);
  ASSERT_EQ(back.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back[i].first, tensors[i].first);
    EXPECT_TRUE(BitwiseEqual(back[i].second, tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(access((path + ".tmp").c_str(), F_OK), -1) << "temporary file left behind";
}

// Checks the bytes we write against the spec, parsing them by hand.
TEST(SafetensorsTest, WrittenLayoutFollowsTheSpec) {
  const std::string path = TempPath("layout.safetensors");
  WriteSafetensors(path, {{"b", torch::tensor({1.0f, -2.0f})}, {"a", torch::tensor({int16_t{1}, int16_t{-1}}, torch::kInt16)}});
  const std::string bytes = Slurp(path);
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 4);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["b"]["dtype"], "F32");
  EXPECT_EQ(header["b"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(header["a"]["dtype"], "I16");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({8, 12}));
  EXPECT_TRUE(header["__metadata__"].is_object());
  const std::string buffer = bytes.substr(8 + n);
  // 1.0f = 0x3f800000, -2.0f = 0xc0000000, int16 1 and -1, all little-endian.
  const std::string expected("\x00\x00\x80\x3f\x00\x00\x00\xc0\x01\x00\xff\xff", 12);
  EXPECT_EQ(buffer, expected);
}

// A file made byte by byte from the spec (no writer involved) reads back correctly.
TEST(SafetensorsTest, ReadsAHandMadeFile) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("m":{"dtype":"BOOL","shape":[1,2],"data_offsets":[8,10]},)"
      R"("h":{"dtype":"BF16","shape":[],"data_offsets":[10,12]}})";
  // 0.5f = 0x3f000000, 3.0f = 0x40400000; bf16 1.0 = 0x3f80.
  const std::string buffer("\x00\x00\x00\x3f\x00\x00\x40\x40\x01\x00\x80\x3f", 12);
  const std::string path = TempPath("handmade.safetensors");
  WriteBytes(path, FileWithHeader(header, buffer));
  const Named t = ReadSafetensors(path);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].first, "w");
  EXPECT_EQ(t[0].second.scalar_type(), torch::kFloat);
  EXPECT_EQ(t[0].second[0].item<float>(), 0.5f);
  EXPECT_EQ(t[0].second[1].item<float>(), 3.0f);
  EXPECT_EQ(t[1].first, "m");
  EXPECT_EQ(t[1].second.sizes(), torch::IntArrayRef({1, 2}));
  EXPECT_TRUE(t[1].second[0][0].item<bool>());
  EXPECT_FALSE(t[1].second[0][1].item<bool>());
  EXPECT_EQ(t[2].first, "h");
  EXPECT_EQ(t[2].second.dim(), 0);
  EXPECT_EQ(t[2].second.item<float>(), 1.0f);
}

struct Corruption {
  const char* name;
  std::string bytes;
  const char* expected;
};

const std::string kEight("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // two floats

std::string OneF32(const std::string& offsets, const std::string& shape = "[2]", const std::string& dtype = "F32") {
  return R"({"x":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

TEST(SafetensorsTest, EveryCorruptionIsNamed) {
  const std::vector<Corruption> cases = {
      {"short", std::string("\x05\x00\x00", 3), "shorter than the 8-byte header length"},
      {"truncated_header", Le64(1000) + "{}", "truncated header: header length 1000"},
      {"huge_header", Le64(200'000'000) + "{}", "exceeds the cap"},
      {"not_json", FileWithHeader("{not json", ""), "header is not valid JSON"},
      {"not_object", FileWithHeader("[1,2]", ""), "header must be a JSON object"},
      {"bad_dtype", FileWithHeader(OneF32("[0,8]", "[2]", "F8"), kEight), "unsupported dtype \"F8\""},
      {"size_mismatch", FileWithHeader(OneF32("[0,8]", "[3]"), kEight), "needs 12"},
      {"out_of_range", FileWithHeader(OneF32("[0,8]"), kEight.substr(0, 4)), "out of range"},
      {"end_before_begin", FileWithHeader(OneF32("[8,0]"), kEight), "end before begin"},
      {"gap", FileWithHeader(OneF32("[4,12]"), kEight + kEight.substr(0, 4)), "not contiguous"},
      {"trailing", FileWithHeader(OneF32("[0,8]"), kEight + "xx"), "trailing bytes"},
      {"overlap",
       FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kEight),
       "overlaps"},
      {"duplicate",
       FileWithHeader(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kEight),
       "duplicate tensor name \"x\""},
      {"negative_dim", FileWithHeader(OneF32("[0,8]", "[-2]"), kEight), "expected a non-negative integer"},
      {"missing_offsets", FileWithHeader(R"({"x":{"dtype":"F32","shape":[2]}})", kEight), "data_offsets must be [begin, end]"},
      {"missing_dtype", FileWithHeader(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", kEight), "missing dtype"},
      {"bad_metadata", FileWithHeader(R"({"__metadata__":{"k":1}})", ""), "__metadata__.k: expected a string"},
      {"bad_bool", FileWithHeader(OneF32("[0,2]", "[2]", "BOOL"), "\x01\x07"), "bytes other than 0 and 1"},
  };
  for (const auto& c : cases) {
    const std::string path = TempPath(std::string(c.name) + ".safetensors");
    WriteBytes(path, c.bytes);
    const std::string error = ReadError(path);
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.name << ": " << error;
    EXPECT_NE(error.find(path), std::string::npos) << c.name << " does not name the path: " << error;
  }
  EXPECT_NE(ReadError(TempPath("does_not_exist")).find("cannot open"), std::string::npos);
}

TEST(SafetensorsTest, FailedWriteLeavesThePreviousFileIntact) {
  const std::string path = TempPath("intact.safetensors");
  const Named original = {{"w", torch::arange(6, torch::kFloat32)}};
  WriteSafetensors(path, original);
  const std::string before = Slurp(path);

  // The temporary file cannot be created (a directory is in the way): works as root too.
  ASSERT_EQ(::mkdir((path + ".tmp").c_str(), 0755), 0);
  try {
    WriteSafetensors(path, {{"w", torch::zeros({100})}});
    ADD_FAILURE() << "write through a blocked temporary file succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  ::rmdir((path + ".tmp").c_str());
  EXPECT_EQ(Slurp(path), before);

  // A tensor that cannot be stored fails before the file is touched.
  EXPECT_THROW(WriteSafetensors(path, {{"ok", torch::zeros({2})}, {"c", torch::zeros({2}, torch::kComplexFloat)}}),
               std::runtime_error);
  EXPECT_THROW(WriteSafetensors(path, {{"w", torch::zeros({2})}, {"w", torch::zeros({2})}}), std::runtime_error);
  EXPECT_EQ(Slurp(path), before);

  // A missing directory is an error naming the path.
  const std::string missing = TempPath("no_such_dir") + "/x.safetensors";
  try {
    WriteSafetensors(missing, original);
    ADD_FAILURE() << "write into a missing directory succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_TRUE(BitwiseEqual(ReadSafetensors(path)[0].second, original[0].second));
}

}  // namespace
}  // namespace trainyard::engine
