#include "worker/engine/checkpoint/checkpoint_loader.h"

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "worker/engine/base/torch_compat.h"
#include "common/base/text.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/io/safetensors_file.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Shape(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << c10::IntArrayRef(v);
  return os.str();
}

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

struct Slice {
  const SafetensorsHeader* file;
  std::string key;
  c10::ScalarType dtype;
  std::vector<int64_t> shape, offsets, global_shape;
};

struct RankFile {
  SafetensorsHeader header;
  std::vector<std::string> rng;  // tensor keys of RNG states
};

// Reads a rank file's header and checks its metadata against the manifest; adds its
// slices to `index` (global name -> slices).
void IndexRankFile(RankFile& rf, const CheckpointManifest& m, int rank, std::map<std::string, std::vector<Slice>>& index) {
  const SafetensorsHeader& h = rf.header;
  const std::string& where = h.path;
  auto meta_it = h.metadata.find("trainyard.checkpoint");
  if (meta_it == h.metadata.end()) FailCheckpoint(where, "no trainyard.checkpoint metadata (not a checkpoint rank file)");
  const json meta = json::parse(meta_it->second, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object()) FailCheckpoint(where, "metadata trainyard.checkpoint is not a JSON object");
  const auto format = meta.find("format");
  if (format == meta.end() || !format->is_string() || format->get<std::string>() != kCheckpointFormat) FailCheckpoint(where, std::string("metadata format is not ") + kCheckpointFormat);
  const int64_t step = Int(meta, "step", where), attempt = Int(meta, "attempt", where);
  const int64_t file_rank = Int(meta, "rank", where);
  if (step != m.step || attempt != m.attempt || file_rank != rank) {
    FailCheckpoint(where, "metadata says step " + std::to_string(step) + " attempt " + std::to_string(attempt) + " rank " +
                    std::to_string(file_rank) + ", the manifest step " + std::to_string(m.step) + " attempt " +
                    std::to_string(m.attempt) + " rank " + std::to_string(rank));
  }
  auto layout = meta.find("layout");
  if (layout == meta.end() || !layout->is_object() || Int(*layout, "dp", where) != m.dp ||
      Int(*layout, "tp", where) != m.tp || Int(*layout, "ep", where) != m.ep) {
    FailCheckpoint(where, "metadata layout disagrees with the manifest's dp=" + std::to_string(m.dp) + " tp=" +
                    std::to_string(m.tp) + " ep=" + std::to_string(m.ep));
  }
  if (Int(meta, "optimizer_step", where) != m.optimizer_step) {
    FailCheckpoint(where, "metadata optimizer_step disagrees with the manifest's " + std::to_string(m.optimizer_step));
  }
  auto slices = meta.find("slices");
  if (slices == meta.end() || !slices->is_object()) FailCheckpoint(where, "metadata has no \"slices\" object");
  auto rng = meta.find("rng");
  if (rng != meta.end()) {
    if (!rng->is_array()) FailCheckpoint(where, "metadata \"rng\" must be an array of tensor names");
    for (const auto& r : *rng) {
      if (!r.is_string() || h.Find(r.get<std::string>()) == nullptr) {
        FailCheckpoint(where, "metadata \"rng\" names " + Clip(r.dump()) + ", which is not a tensor of the file");
      }
      rf.rng.push_back(r.get<std::string>());
    }
  }
  for (const SafetensorsEntry& e : h.tensors) {
    auto it = slices->find(e.name);
    if (it == slices->end()) {
      if (std::find(rf.rng.begin(), rf.rng.end(), e.name) != rf.rng.end()) continue;
      FailCheckpoint(where, "tensor \"" + Quote(e.name) + "\" has no slice metadata");
    }
    const std::string tw = where + " tensor \"" + Quote(e.name) + "\"";
    if (!it->is_object() || !it->contains("name") || !(*it)["name"].is_string()) {
      FailCheckpoint(tw, "slice metadata must be {name, global_shape, offsets}");
    }
    Slice s{&h, e.name, e.dtype, e.shape, IntArray(*it, "offsets", tw), IntArray(*it, "global_shape", tw)};
    if (s.offsets.size() != s.shape.size() || s.global_shape.size() != s.shape.size()) {
      FailCheckpoint(tw, "offsets " + Shape(s.offsets) + " and global_shape " + Shape(s.global_shape) +
                   " must have one entry per dimension of its shape " + Shape(s.shape));
    }
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (s.offsets[d] + s.shape[d] > s.global_shape[d]) {
        FailCheckpoint(tw, "slice at offsets " + Shape(s.offsets) + " with shape " + Shape(s.shape) +
                     " lies outside global_shape " + Shape(s.global_shape));
      }
    }
    index[(*it)["name"].get<std::string>()].push_back(std::move(s));
  }
}

// Copies the parts of `slices` that overlap this rank's shard into it; throws unless
// they cover it completely.
void Assemble(const StateTensor& t, const std::vector<Slice>& slices, const std::string& dir) {
  const std::string where = dir + " tensor \"" + t.name + "\"";
  auto mask = torch::zeros(t.local.sizes(), torch::kBool);
  const auto local_shape = t.local.sizes().vec();
  for (const Slice& s : slices) {
    if (s.global_shape != t.global_shape) {
      FailCheckpoint(where, "has global shape " + Shape(s.global_shape) + " in " + s.file->path + ", the model needs " +
                      Shape(t.global_shape));
    }
    if (s.dtype != t.local.scalar_type()) {
      FailCheckpoint(where, std::string("has dtype ") + c10::toString(s.dtype) + " in " + s.file->path + ", the model needs " +
                      c10::toString(t.local.scalar_type()));
    }
    std::vector<int64_t> lo(local_shape.size()), len(local_shape.size());
    bool overlaps = true;
    for (size_t d = 0; d < local_shape.size(); ++d) {
      lo[d] = std::max(t.offsets[d], s.offsets[d]);
      const int64_t hi = std::min(t.offsets[d] + local_shape[d], s.offsets[d] + s.shape[d]);
      len[d] = hi - lo[d];
      if (len[d] <= 0) overlaps = false;
    }
    if (!overlaps) continue;
    torch::Tensor src = ReadSafetensorsTensor(*s.file, s.key);
    torch::Tensor dst = t.local, covered = mask;
    for (size_t d = 0; d < local_shape.size(); ++d) {
      src = src.narrow(d, lo[d] - s.offsets[d], len[d]);
      dst = dst.narrow(d, lo[d] - t.offsets[d], len[d]);
      covered = covered.narrow(d, lo[d] - t.offsets[d], len[d]);
    }
    dst.copy_(src);
    covered.fill_(true);
  }
  const int64_t have = mask.sum().item<int64_t>();
  if (have != mask.numel()) {
    FailCheckpoint(where, "the checkpoint's slices cover " + std::to_string(have) + " of the " + std::to_string(mask.numel()) +
                    " elements of this rank's shard (offsets " + Shape(t.offsets) + ", shape " +
                    Shape(local_shape) + ")");
  }
}

}  // namespace

CheckpointManifest LoadCheckpoint(const std::string& dir, const std::vector<StateTensor>& state, int rank,
                                  const CheckpointExpectations& expect) {
  const CheckpointManifest m = ReadVerifiedManifest(dir);
  if (m.global_batch != expect.global_batch) {
    FailCheckpoint(dir, "was written with " + std::to_string(m.global_batch) +
                  " samples per step (batch_size x dp x grad_accum_steps) but this run takes " +
                  std::to_string(expect.global_batch) + "; resuming would not continue the same data order");
  }
  if (m.dataset != expect.dataset || m.seed != expect.seed) {
    FailCheckpoint(dir, "was written for dataset \"" + Quote(m.dataset) + "\" seed " + std::to_string(m.seed) +
                  ", this run reads dataset \"" + Quote(expect.dataset) + "\" seed " + std::to_string(expect.seed));
  }
  std::vector<std::unique_ptr<RankFile>> files;
  std::map<std::string, std::vector<Slice>> index;
  for (const ManifestFile& f : m.files) {
    files.push_back(std::make_unique<RankFile>());
    files.back()->header = ReadSafetensorsHeader((fs::path(dir) / f.name).string());
    IndexRankFile(*files.back(), m, f.rank, index);
  }
  torch::NoGradGuard no_grad;
  std::map<std::string, const StateTensor*> wanted;
  for (const StateTensor& t : state) wanted[t.name] = &t;
  for (const auto& [name, slices] : index) {
    if (wanted.count(name) == 0) {
      FailCheckpoint(slices.front().file->path, "tensor \"" + Quote(name) + "\" is not in the model (another model shape?)");
    }
  }
  for (const StateTensor& t : state) {
    auto it = index.find(t.name);
    if (it == index.end()) FailCheckpoint(dir, "tensor \"" + t.name + "\" is missing (no rank file holds a slice of it)");
    Assemble(t, it->second, dir);
  }
  const RankFile& own = *files[rank < static_cast<int>(files.size()) ? rank : 0];
  for (const std::string& key : own.rng) {
    torch::Tensor s = ReadSafetensorsTensor(own.header, key);
    if (s.scalar_type() != torch::kByte) FailCheckpoint(own.header.path, "RNG state \"" + key + "\" must be U8");
    compat::SetRngState(key.substr(4), s);  // a generator this process lacks is skipped
  }
  return m;
}

}  // namespace trainyard::engine
