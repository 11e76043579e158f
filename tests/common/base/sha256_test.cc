#include "common/base/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace trainyard {
namespace {

// FIPS 180-2 test vectors.
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 h;  // the same digest in pieces, and the object resets after HexDigest
  h.Update("ab");
  h.Update("c");
  EXPECT_EQ(h.HexDigest(), Sha256Hex("abc"));
  EXPECT_EQ(h.HexDigest(), Sha256Hex(""));
}

TEST(Sha256Test, FilesWholeAndPrefix) {
  const std::string path = ::testing::TempDir() + "/sha256_test.bin";
  std::string content(3 << 20, 'x');  // spans several read buffers
  content[12345] = 'y';
  std::ofstream(path, std::ios::binary) << content;
  EXPECT_EQ(Sha256File(path).value(), Sha256Hex(content));
  EXPECT_EQ(Sha256File(path, 1000).value(), Sha256Hex(content.substr(0, 1000)));
  EXPECT_EQ(Sha256File(path, 0).value(), Sha256Hex(""));
  EXPECT_EQ(Sha256File(path, (3 << 20) + 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Sha256File(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(Sha256Test, HexShape) {
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("abc")));
  EXPECT_FALSE(IsSha256Hex(""));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));  // uppercase is not the canonical form
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'g')));
}

}  // namespace
}  // namespace trainyard
