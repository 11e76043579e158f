// Checkpoints written by hand, without torch or the engine's writer, for the export
// tests (checkpoint_export_test, tests/client/cli/cli_export_test): rank files in the
// documented format (docs/checkpoints.md: safetensors with trainyard.checkpoint slice
// metadata, an RNG state) and a manifest, with each element's value a function of its
// tensor's name and global index, so a test computes the expected full tensor on its
// own; and a reader of any safetensors file (header + raw bytes). Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/io/safetensors_header.h"

namespace trainyard::engine::testing {

struct SyntheticSlice {
  std::string name;
  std::vector<int64_t> global_shape, offsets, shape;
};

// Element `i` (row-major global index) of tensor `name`: distinct per tensor and index.
inline float SyntheticValue(const std::string& name, int64_t i) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return static_cast<float>(h % 1000) + 0.25f * static_cast<float>(i % 100000) + static_cast<float>(i / 100000);
}

inline int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The full tensor `name` of `global_shape`, as SyntheticValue defines it (fp32 bytes).
inline std::string ExpectedBytes(const std::string& name, const std::vector<int64_t>& global_shape) {
  std::vector<float> v(Elements(global_shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = SyntheticValue(name, static_cast<int64_t>(i));
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// The slice's data: its elements of the global tensor, row-major.
inline std::vector<float> SliceData(const SyntheticSlice& s) {
  const size_t k = s.shape.size();
  std::vector<float> out;
  out.reserve(Elements(s.shape));
  std::vector<int64_t> idx(k, 0);
  for (int64_t n = 0; n < Elements(s.shape); ++n) {
    int64_t g = 0;
    for (size_t d = 0; d < k; ++d) g = g * s.global_shape[d] + s.offsets[d] + idx[d];
    out.push_back(SyntheticValue(s.name, g));
    for (size_t d = k; d-- > 0;) {
      if (++idx[d] < s.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Writes root/step-S-attempt-1/ with one file per entry of `ranks` (each its slices
// plus a U8 rng.cpu state) and the manifest (dp = ranks.size(), tp 1, ep `ep`).
// Returns the directory.
inline std::string WriteSyntheticCheckpoint(const std::string& root, int64_t step,
                                            const std::vector<std::vector<SyntheticSlice>>& ranks, int ep = 1,
                                            std::optional<CheckpointMetric> metric = std::nullopt) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::path(root) / CheckpointDirName(step, 1)).string();
  fs::create_directories(dir);
  CheckpointManifest m;
  m.step = step;
  m.attempt = 1;
  m.dp = static_cast<int>(ranks.size());
  m.ep = ep;
  m.optimizer_step = step;
  m.global_batch = 4;
  m.samples_consumed = step * 4;
  m.dataset = "synthetic";
  m.seed = 42;
  m.metric = metric;
  for (size_t r = 0; r < ranks.size(); ++r) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    nlohmann::json slices = nlohmann::json::object();
    std::string data;
    for (const SyntheticSlice& s : ranks[r]) {
      const std::vector<float> v = SliceData(s);
      const std::string key = s.name;
      header[key] = {{"dtype", "F32"}, {"shape", s.shape}, {"data_offsets", {data.size(), data.size() + v.size() * 4}}};
      data.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      slices[key] = {{"name", s.name}, {"global_shape", s.global_shape}, {"offsets", s.offsets}};
    }
    header["rng.cpu"] = {{"dtype", "U8"}, {"shape", {16}}, {"data_offsets", {data.size(), data.size() + 16}}};
    data.append(16, static_cast<char>(r + 1));
    const nlohmann::json meta = {{"format", kCheckpointFormat}, {"step", step}, {"attempt", 1}, {"rank", r},
                                 {"layout", {{"dp", m.dp}, {"tp", 1}, {"ep", ep}}}, {"optimizer_step", step},
                                 {"samples_consumed", step * 4}, {"slices", slices}, {"rng", {"rng.cpu"}}};
    header["__metadata__"] = {{"format", "pt"}, {"trainyard.checkpoint", meta.dump()}};
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    const std::string path = (fs::path(dir) / RankFileName(static_cast<int>(r))).string();
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << text << data;
    out.close();
    m.files.push_back({RankFileName(static_cast<int>(r)), static_cast<int>(r), static_cast<int64_t>(fs::file_size(path))});
    m.total_bytes += m.files.back().bytes;
  }
  WriteManifestAtomically(dir, m);
  return dir;
}

struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
struct RawSafetensors {
  std::vector<std::string> names;  // data-offset order
  std::map<std::string, RawTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Any safetensors file, checked by the torch-free header parser, with its raw bytes.
inline RawSafetensors ReadRawSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unsigned char len[8] = {};
  std::memcpy(len, all.data(), std::min<size_t>(8, all.size()));
  const uint64_t n = SafetensorsHeaderLength(len, all.size(), path);
  const ParsedSafetensorsHeader h = ParseSafetensorsHeader(all.substr(8, n), all.size() - 8 - n, path);
  RawSafetensors out;
  out.metadata = h.metadata;
  for (const SafetensorsHeaderEntry& e : h.tensors) {
    out.names.push_back(e.name);
    out.tensors[e.name] = {SafetensorsDtypeName(e.dtype), e.shape, all.substr(8 + n + e.begin, e.end - e.begin)};
  }
  return out;
}

}  // namespace trainyard::engine::testing
