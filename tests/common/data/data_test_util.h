// What the common/data tests share: a fresh folder per test, flat token files written
// here, and Megatron indexed datasets written by the independent Python writer
// (write_indexed.py, TRAINYARD_DATA_WRITER, run by TRAINYARD_DATA_PYTHON: the tree's
// Python).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace trainyard::data::testing {

// A new empty folder under the test temp dir, named after the running test.
inline std::string FreshDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  const std::string dir = ::testing::TempDir() + "ty_data_" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Little-endian elements of `width` bytes.
inline std::string LittleEndian(const std::vector<std::uint64_t>& values, int width) {
  std::string s;
  for (std::uint64_t v : values) {
    for (int b = 0; b < width; ++b) s.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  }
  return s;
}

// Runs the Python writer on `spec_json` (its "prefix" names the files).
inline void WriteIndexed(const std::string& spec_json) {
  const std::string spec = ::testing::TempDir() + "ty_data_spec_" + std::to_string(::getpid()) + ".json";
  WriteBytes(spec, spec_json);
  const std::string cmd =
      std::string("'") + TRAINYARD_DATA_PYTHON + "' '" + TRAINYARD_DATA_WRITER + "' '" + spec + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " with " << spec_json;
}

// The status is an error whose message holds every one of `parts`.
inline ::testing::AssertionResult ErrorHas(const absl::Status& s, const std::vector<std::string>& parts) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error holding \"" << parts[0] << "\", got OK";
  const std::string m(s.message());
  for (const std::string& p : parts) {
    if (m.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "error \"" << m << "\" lacks \"" << p << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace trainyard::data::testing
