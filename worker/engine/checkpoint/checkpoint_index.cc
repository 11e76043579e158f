#include "worker/engine/checkpoint/checkpoint_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/base/text.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<int64_t> IntArray(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) FailCheckpoint(where, std::string("\"") + key + "\" must be an array of integers");
  std::vector<int64_t> out;
  for (const auto& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      FailCheckpoint(where, std::string("\"") + key + "\" must hold non-negative integers, got " + Clip(it->dump()));
    }
    out.push_back(v.get<int64_t>());
  }
  return out;
}

int64_t Int(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) {
    FailCheckpoint(where, std::string("metadata field \"") + key + "\" must be an integer, got " +
                              (it == obj.end() ? std::string("nothing") : Clip(it->dump())));
  }
  return it->get<int64_t>();
}

// The header of a safetensors file, read with plain POSIX calls (no torch).
struct RawHeader {
  ParsedSafetensorsHeader parsed;
  std::uint64_t file_bytes = 0, buffer_start = 0;
};

RawHeader ReadRawHeader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) FailSafetensors(path, std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) FailSafetensors(path, std::string("cannot stat: ") + std::strerror(errno));
  RawHeader out;
  out.file_bytes = static_cast<std::uint64_t>(st.st_size);
  auto read_at = [&](void* data, std::size_t n, std::uint64_t offset) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) FailSafetensors(path, std::string("read failed: ") + std::strerror(errno));
      if (r == 0) FailSafetensors(path, "file ended early (truncated while reading?)");
      p += r;
      n -= static_cast<std::size_t>(r);
      offset += static_cast<std::uint64_t>(r);
    }
  };
  unsigned char len_bytes[8] = {};
  if (out.file_bytes >= 8) read_at(len_bytes, 8, 0);
  const std::uint64_t n = SafetensorsHeaderLength(len_bytes, out.file_bytes, path);
  std::string text(n, '\0');
  read_at(text.data(), n, 8);
  out.buffer_start = 8 + n;
  out.parsed = ParseSafetensorsHeader(text, out.file_bytes - out.buffer_start, path);
  return out;
}

// Checks a rank file's metadata against the manifest and adds its slices to `index`.
void IndexRankFile(const RawHeader& h, int file, CheckpointIndex& index) {
  const CheckpointManifest& m = index.manifest;
  CheckpointRankFile& rf = index.files[file];
  const std::string& where = rf.path;
  auto meta_it = h.parsed.metadata.find("trainyard.checkpoint");
  if (meta_it == h.parsed.metadata.end()) FailCheckpoint(where, "no trainyard.checkpoint metadata (not a checkpoint rank file)");
  const json meta = json::parse(meta_it->second, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) FailCheckpoint(where, "metadata trainyard.checkpoint is not a JSON object");
  const auto format = meta.find("format");
  if (format == meta.end() || !format->is_string() || format->get<std::string>() != kCheckpointFormat) {
    FailCheckpoint(where, std::string("metadata format is not ") + kCheckpointFormat);
  }
  const int64_t step = Int(meta, "step", where), attempt = Int(meta, "attempt", where);
  const int64_t file_rank = Int(meta, "rank", where);
  if (step != m.step || attempt != m.attempt || file_rank != rf.rank) {
    FailCheckpoint(where, "metadata says step " + std::to_string(step) + " attempt " + std::to_string(attempt) + " rank " +
                              std::to_string(file_rank) + ", the manifest step " + std::to_string(m.step) + " attempt " +
                              std::to_string(m.attempt) + " rank " + std::to_string(rf.rank));
  }
  auto layout = meta.find("layout");
  if (layout == meta.end() || !layout->is_object() || Int(*layout, "dp", where) != m.dp ||
      Int(*layout, "tp", where) != m.tp || Int(*layout, "ep", where) != m.ep) {
    FailCheckpoint(where, "metadata layout disagrees with the manifest's dp=" + std::to_string(m.dp) +
                              " tp=" + std::to_string(m.tp) + " ep=" + std::to_string(m.ep));
  }
  if (Int(meta, "optimizer_step", where) != m.optimizer_step) {
    FailCheckpoint(where, "metadata optimizer_step disagrees with the manifest's " + std::to_string(m.optimizer_step));
  }
  auto slices = meta.find("slices");
  if (slices == meta.end() || !slices->is_object()) FailCheckpoint(where, "metadata has no \"slices\" object");
  auto has_tensor = [&](const std::string& key) {
    return std::any_of(h.parsed.tensors.begin(), h.parsed.tensors.end(),
                       [&](const SafetensorsHeaderEntry& e) { return e.name == key; });
  };
  auto rng = meta.find("rng");
  if (rng != meta.end()) {
    if (!rng->is_array()) FailCheckpoint(where, "metadata \"rng\" must be an array of tensor names");
    for (const auto& r : *rng) {
      if (!r.is_string() || !has_tensor(r.get<std::string>())) {
        FailCheckpoint(where, "metadata \"rng\" names " + Clip(r.dump()) + ", which is not a tensor of the file");
      }
      rf.rng.push_back(r.get<std::string>());
    }
  }
  for (const SafetensorsHeaderEntry& e : h.parsed.tensors) {  // data-offset order
    auto it = slices->find(e.name);
    if (it == slices->end()) {
      if (std::find(rf.rng.begin(), rf.rng.end(), e.name) != rf.rng.end()) continue;
      FailCheckpoint(where, "tensor \"" + Quote(e.name) + "\" has no slice metadata");
    }
    const std::string tw = where + " tensor \"" + Quote(e.name) + "\"";
    if (!it->is_object() || !it->contains("name") || !(*it)["name"].is_string()) {
      FailCheckpoint(tw, "slice metadata must be {name, global_shape, offsets}");
    }
    CheckpointSlice s{file, e.name, e.dtype, e.shape, IntArray(*it, "offsets", tw), IntArray(*it, "global_shape", tw),
                      h.buffer_start + e.begin, e.end - e.begin};
    if (s.offsets.size() != s.shape.size() || s.global_shape.size() != s.shape.size()) {
      FailCheckpoint(tw, "offsets " + ShapeText(s.offsets) + " and global_shape " + ShapeText(s.global_shape) +
                             " must have one entry per dimension of its shape " + ShapeText(s.shape));
    }
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (s.offsets[d] + s.shape[d] > s.global_shape[d]) {
        FailCheckpoint(tw, "slice at offsets " + ShapeText(s.offsets) + " with shape " + ShapeText(s.shape) +
                               " lies outside global_shape " + ShapeText(s.global_shape));
      }
    }
    const std::string global = (*it)["name"].get<std::string>();
    auto& list = index.slices[global];
    if (list.empty()) index.names.push_back(global);
    list.push_back(std::move(s));
  }
}

}  // namespace

std::string ShapeText(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

CheckpointIndex ReadCheckpointIndex(const std::string& dir) {
  CheckpointIndex index;
  index.dir = dir;
  index.manifest = ReadVerifiedManifest(dir);
  for (const ManifestFile& f : index.manifest.files) {
    CheckpointRankFile rf;
    rf.path = (fs::path(dir) / f.name).string();
    rf.rank = f.rank;
    index.files.push_back(rf);
  }
  for (size_t i = 0; i < index.files.size(); ++i) {
    const RawHeader h = ReadRawHeader(index.files[i].path);
    index.files[i].file_bytes = h.file_bytes;
    IndexRankFile(h, static_cast<int>(i), index);
  }
  return index;
}

void CheckExactCover(const std::string& where, const std::string& name, const std::vector<CheckpointSlice>& slices,
                     const CheckpointIndex& index) {
  const std::string tw = where + " tensor \"" + Quote(name) + "\"";
  if (slices.empty()) FailCheckpoint(tw, "has no slices");
  const CheckpointSlice& first = slices.front();
  const std::string& first_path = index.files[first.file].path;
  int64_t covered = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const CheckpointSlice& s = slices[i];
    const std::string& path = index.files[s.file].path;
    if (s.global_shape != first.global_shape) {
      FailCheckpoint(tw, "has global shape " + ShapeText(s.global_shape) + " in " + path + " but " +
                             ShapeText(first.global_shape) + " in " + first_path);
    }
    if (s.dtype != first.dtype) {
      FailCheckpoint(tw, std::string("has dtype ") + SafetensorsDtypeName(s.dtype) + " in " + path + " but " +
                             SafetensorsDtypeName(first.dtype) + " in " + first_path);
    }
    for (size_t j = 0; j < i; ++j) {
      const CheckpointSlice& o = slices[j];
      bool overlaps = NumElements(s.shape) > 0 && NumElements(o.shape) > 0;
      for (size_t d = 0; d < s.shape.size() && overlaps; ++d) {
        overlaps = std::max(s.offsets[d], o.offsets[d]) < std::min(s.offsets[d] + s.shape[d], o.offsets[d] + o.shape[d]);
      }
      if (overlaps) {
        FailCheckpoint(tw, "slices overlap: offsets " + ShapeText(s.offsets) + " shape " + ShapeText(s.shape) + " in " +
                               path + " and offsets " + ShapeText(o.offsets) + " shape " + ShapeText(o.shape) + " in " +
                               index.files[o.file].path);
      }
    }
    covered += NumElements(s.shape);
  }
  const int64_t total = NumElements(first.global_shape);
  if (covered != total) {
    FailCheckpoint(tw, "the checkpoint's slices cover " + std::to_string(covered) + " of its " + std::to_string(total) +
                           " elements (global shape " + ShapeText(first.global_shape) + ")");
  }
}

}  // namespace trainyard::engine
