// Points the fake NVML (tests/fakes/fake_nvml) at a config file the test writes, and
// opens it through the real loader.
#pragma once

#include <stdlib.h>

#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include "worker/gpu/nvml_library.h"

namespace trainyard::testing {

class FakeNvmlConfig {
 public:
  // Writes `text` as the config and sets FAKE_NVML_CONFIG (unset again on destruction).
  explicit FakeNvmlConfig(const std::string &text) : path_(dir_.path() + "/fake_nvml.conf") {
    Write(text);
    setenv("FAKE_NVML_CONFIG", path_.c_str(), 1);
  }
  ~FakeNvmlConfig() { unsetenv("FAKE_NVML_CONFIG"); }
  // Replaces the config; the fake reads it again on its next call.
  void Write(const std::string &text) const {
    std::ofstream out(path_ + ".tmp");
    out << text;
    out.close();
    std::rename((path_ + ".tmp").c_str(), path_.c_str());
  }
  const std::string &path() const { return path_; }

 private:
  TempDir dir_;
  std::string path_;
};

// The fake, opened; fails the test when it cannot be.
inline std::unique_ptr<NvmlLibrary> OpenFakeNvml() {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(TRAINYARD_FAKE_NVML);
  EXPECT_TRUE(lib.ok()) << lib.status();
  return lib.ok() ? std::move(*lib) : nullptr;
}

}  // namespace trainyard::testing
