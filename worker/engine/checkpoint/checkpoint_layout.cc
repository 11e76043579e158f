#include "worker/engine/checkpoint/checkpoint_layout.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/base/file_io.h"
#include "common/base/text.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t IntField(const json& obj, const char* key, int64_t lo, int64_t hi, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) FailCheckpoint(where, std::string("field \"") + key + "\" is missing");
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    FailCheckpoint(where, std::string("field \"") + key + "\" must be an integer, got " + Clip(it->dump()));
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    FailCheckpoint(where, std::string("field \"") + key + "\" must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + Clip(it->dump()));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    FailCheckpoint(where, std::string("field \"") + key + "\" must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got " + std::to_string(v));
  }
  return v;
}

std::string StringField(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    FailCheckpoint(where, std::string("field \"") + key + "\" must be a string" +
                    (it == obj.end() ? " (missing)" : ", got " + Clip(it->dump())));
  }
  return it->get<std::string>();
}

}  // namespace

void FsyncDirectory(const std::string& dir, const std::string& where) {
  if (absl::Status s = FsyncPath(dir, /*directory=*/true); !s.ok()) FailCheckpoint(where, std::string(s.message()));
}

void FailCheckpoint(const std::string& where, const std::string& problem) {
  throw std::runtime_error("checkpoint " + where + ": " + problem);
}


std::string RankFileName(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "rank-%05d.safetensors", rank);
  return buf;
}

std::string ManifestToJson(const CheckpointManifest& m) {
  json files = json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}});
  json j = {{"format", kCheckpointFormat},
            {"step", m.step},
            {"attempt", m.attempt},
            {"layout", {{"dp", m.dp}, {"tp", m.tp}, {"ep", m.ep}}},
            {"optimizer_step", m.optimizer_step},
            {"global_batch", m.global_batch},
            {"samples_consumed", m.samples_consumed},
            {"dataset", m.dataset},
            {"seed", m.seed},
            {"files", files},
            {"total_bytes", m.total_bytes}};
  // nlohmann writes a NaN or an infinity as null, which ParseManifest reads back as NaN.
  if (m.metric) j["metric"] = {{"name", m.metric->name}, {"value", m.metric->value}};
  return j.dump(2) + "\n";
}

CheckpointManifest ParseManifest(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) FailCheckpoint(where, "manifest is not valid JSON (" + std::to_string(text.size()) + " bytes)");
  if (!j.is_object()) FailCheckpoint(where, "manifest must be a JSON object, got " + Clip(j.dump()));
  const std::string format = StringField(j, "format", where);
  if (format != kCheckpointFormat) {
    FailCheckpoint(where, "format \"" + Quote(format) + "\" is not " + kCheckpointFormat);
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  CheckpointManifest m;
  m.step = IntField(j, "step", 1, kMax, where);
  m.attempt = static_cast<int>(IntField(j, "attempt", 0, 1000000000, where));
  auto layout = j.find("layout");
  if (layout == j.end() || !layout->is_object()) FailCheckpoint(where, "field \"layout\" must be an object {dp, tp, ep}");
  m.dp = static_cast<int>(IntField(*layout, "dp", 1, 1 << 20, where + " layout"));
  m.tp = static_cast<int>(IntField(*layout, "tp", 1, 1 << 20, where + " layout"));
  m.ep = static_cast<int>(IntField(*layout, "ep", 1, 1 << 20, where + " layout"));
  if (static_cast<int64_t>(m.dp) * m.tp > (1 << 20)) FailCheckpoint(where, "layout dp*tp is too large");
  m.optimizer_step = IntField(j, "optimizer_step", 0, kMax, where);
  m.global_batch = IntField(j, "global_batch", 1, kMax, where);
  m.samples_consumed = IntField(j, "samples_consumed", 0, kMax, where);
  int64_t expected = 0;
  if (__builtin_mul_overflow(m.step, m.global_batch, &expected) || expected != m.samples_consumed) {
    FailCheckpoint(where, "samples_consumed " + std::to_string(m.samples_consumed) + " is not step " + std::to_string(m.step) +
                    " x global_batch " + std::to_string(m.global_batch));
  }
  m.dataset = StringField(j, "dataset", where);
  auto seed = j.find("seed");
  if (seed == j.end() || !seed->is_number_unsigned()) {
    FailCheckpoint(where, "field \"seed\" must be a non-negative integer" +
                    (seed == j.end() ? std::string(" (missing)") : ", got " + Clip(seed->dump())));
  }
  m.seed = seed->get<uint64_t>();
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) FailCheckpoint(where, "field \"files\" must be an array");
  if (files->size() != static_cast<size_t>(m.world())) {
    FailCheckpoint(where, "files lists " + std::to_string(files->size()) + " entries, the layout dp*tp needs " +
                    std::to_string(m.world()));
  }
  int64_t total = 0;
  for (size_t i = 0; i < files->size(); ++i) {
    const json& f = (*files)[i];
    const std::string fw = where + " files[" + std::to_string(i) + "]";
    if (!f.is_object()) FailCheckpoint(fw, "must be an object {name, rank, bytes}");
    ManifestFile mf;
    mf.name = StringField(f, "name", fw);
    mf.rank = static_cast<int>(IntField(f, "rank", 0, m.world() - 1, fw));
    mf.bytes = IntField(f, "bytes", 8, kMax, fw);
    if (mf.rank != static_cast<int>(i) || mf.name != RankFileName(mf.rank)) {
      FailCheckpoint(fw, "expected rank " + std::to_string(i) + " named " + RankFileName(static_cast<int>(i)) + ", got rank " +
                   std::to_string(mf.rank) + " named \"" + Quote(mf.name) + "\"");
    }
    if (__builtin_add_overflow(total, mf.bytes, &total)) FailCheckpoint(fw, "bytes overflow the total");
    m.files.push_back(mf);
  }
  m.total_bytes = IntField(j, "total_bytes", 0, kMax, where);
  if (m.total_bytes != total) {
    FailCheckpoint(where, "total_bytes " + std::to_string(m.total_bytes) + " is not the sum of the files' bytes " +
                    std::to_string(total));
  }
  if (auto metric = j.find("metric"); metric != j.end()) {
    if (!metric->is_object()) FailCheckpoint(where, "field \"metric\" must be an object {name, value}");
    CheckpointMetric cm;
    cm.name = StringField(*metric, "name", where + " metric");
    if (cm.name.empty() || cm.name.size() > kMaxMetricNameBytes) {
      FailCheckpoint(where, "metric name must be 1 to " + std::to_string(kMaxMetricNameBytes) + " bytes, got \"" +
                                Quote(cm.name) + "\"");
    }
    auto value = metric->find("value");
    if (value == metric->end() || !(value->is_number() || value->is_null())) {
      FailCheckpoint(where, "metric value must be a number or null" +
                                (value == metric->end() ? std::string(" (missing)") : ", got " + Clip(value->dump())));
    }
    cm.value = value->is_null() ? std::numeric_limits<double>::quiet_NaN() : value->get<double>();
    m.metric = cm;
  }
  return m;
}

CheckpointManifest ReadVerifiedManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) FailCheckpoint(dir, "is not a directory");
  if (!fs::exists(path, ec)) {
    FailCheckpoint(dir, "incomplete: no manifest.json (a write that never finished; it cannot be loaded)");
  }
  absl::StatusOr<std::string> text = ReadFile(path, kMaxManifestBytes);
  if (!text.ok()) FailCheckpoint(path, "cannot read: " + std::string(text.status().message()));
  CheckpointManifest m = ParseManifest(*text, path);
  int64_t step = 0;
  int attempt = 0;
  const std::string name = fs::path(dir).lexically_normal().filename().string().empty()
                               ? fs::path(dir).lexically_normal().parent_path().filename().string()
                               : fs::path(dir).lexically_normal().filename().string();
  if (!spec::ParseCheckpointDirName(name, &step, &attempt) || step != m.step || attempt != m.attempt) {
    FailCheckpoint(path, "holds step " + std::to_string(m.step) + " attempt " + std::to_string(m.attempt) +
                   " but its directory is named \"" + Quote(name) + "\" (expected " +
                   CheckpointDirName(m.step, m.attempt) + ")");
  }
  for (const auto& f : m.files) {
    const std::string fp = (fs::path(dir) / f.name).string();
    const auto size = fs::file_size(fp, ec);
    if (ec) FailCheckpoint(fp, "listed in the manifest but missing: " + ec.message());
    if (static_cast<int64_t>(size) != f.bytes) {
      FailCheckpoint(fp, "is " + std::to_string(size) + " bytes, the manifest lists " + std::to_string(f.bytes) +
                   (static_cast<int64_t>(size) < f.bytes ? " (truncated)" : ""));
    }
  }
  return m;
}

void WriteManifestAtomically(const std::string& dir, const CheckpointManifest& m) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  if (absl::Status s = WriteFileAtomically(path, ManifestToJson(m)); !s.ok()) {
    FailCheckpoint(path, std::string(s.message()));
  }
}

std::vector<CheckpointDirEntry> ListCheckpointDirs(const std::string& root) {
  std::vector<CheckpointDirEntry> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    CheckpointDirEntry e;
    if (!entry.is_directory(ec) || !spec::ParseCheckpointDirName(entry.path().filename().string(), &e.step, &e.attempt)) continue;
    e.path = entry.path().string();
    e.complete = fs::exists(entry.path() / kManifestName, ec);
    out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const CheckpointDirEntry& a, const CheckpointDirEntry& b) {
    return a.step != b.step ? a.step < b.step : a.attempt < b.attempt;
  });
  return out;
}

std::string FindLatestCheckpoint(const std::string& root) {
  const auto dirs = ListCheckpointDirs(root);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (!it->complete) continue;
    try {
      ReadVerifiedManifest(it->path);
      return it->path;
    } catch (const std::exception&) {
      // Damaged: try the next older one.
    }
  }
  return "";
}

int NextCheckpointAttempt(const std::string& root) {
  int highest = 0;
  for (const auto& d : ListCheckpointDirs(root)) highest = std::max(highest, d.attempt);
  return highest + 1;
}

}  // namespace trainyard::engine
