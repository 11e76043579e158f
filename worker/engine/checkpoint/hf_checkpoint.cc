#include "worker/engine/checkpoint/hf_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "common/base/file_io.h"
#include "common/base/text.h"
#include "common/spec/hf_config.h"
#include "worker/engine/checkpoint/checkpoint_index.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/export_names.h"
#include "worker/engine/io/safetensors_file.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

constexpr char kIndexName[] = "model.safetensors.index.json";
constexpr char kSingleName[] = "model.safetensors";
// An index lists names and file names only; a real one (DeepSeek-V3's 671B) is ~9 MB.
constexpr std::uint64_t kMaxIndexBytes = 64ull << 20;

[[noreturn]] void FailHf(const std::string& where, const std::string& problem) {
  throw std::runtime_error("Hugging Face model " + where + ": " + problem);
}

// One open shard: its validated header and a descriptor for the reads.
struct HfShard {
  SafetensorsHeader header;
  int fd = -1;
  ~HfShard() {
    if (fd >= 0) ::close(fd);
  }
};

// The folder's tensors: name -> (shard, entry), the shards opened as named.
class HfFolder {
 public:
  explicit HfFolder(const std::string& folder) : folder_(folder) {
    std::error_code ec;
    const fs::path index = fs::path(folder) / kIndexName;
    if (fs::exists(index, ec)) {
      ReadIndex(index.string());
    } else if (fs::exists(fs::path(folder) / kSingleName, ec)) {
      Open(kSingleName);
    } else {
      FailHf(folder, std::string("holds neither ") + kIndexName + " nor " + kSingleName);
    }
  }

  struct Found {
    HfShard* shard;
    const SafetensorsEntry* entry;
  };
  // The tensor `name`, or {nullptr, nullptr}.
  Found Find(const std::string& name) {
    auto it = where_.find(name);
    if (it == where_.end()) return {nullptr, nullptr};
    HfShard& shard = Open(it->second);
    const SafetensorsEntry* e = shard.header.Find(name);
    if (e == nullptr)
      FailHf(shard.header.path, "the index places \"" + Quote(name) + "\" here, but it holds no such tensor");
    return {&shard, e};
  }
  const std::map<std::string, std::string>& names() const { return where_; }

 private:
  void ReadIndex(const std::string& path) {
    absl::StatusOr<std::string> text = ReadFile(path, kMaxIndexBytes);
    if (!text.ok()) FailHf(path, std::string(text.status().message()));
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) FailHf(path, "is not a JSON object");
    auto map = j.find("weight_map");
    if (map == j.end() || !map->is_object()) FailHf(path, "has no \"weight_map\" object");
    for (const auto& [name, file] : map->items()) {
      if (!file.is_string()) FailHf(path, "weight_map[\"" + Quote(name) + "\"] is not a file name");
      const std::string f = file.get<std::string>();
      // A plain name inside the folder: an index must not reach outside it.
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        FailHf(path, "weight_map[\"" + Quote(name) + "\"] = \"" + Quote(f) + "\" is not a file in the folder");
      }
      where_[name] = f;
    }
    if (where_.empty()) FailHf(path, "weight_map lists no tensor");
  }

  HfShard& Open(const std::string& file) {
    auto it = shards_.find(file);
    if (it != shards_.end()) return *it->second;
    auto shard = std::make_unique<HfShard>();
    const std::string path = (fs::path(folder_) / file).string();
    shard->header = ReadSafetensorsHeader(path);
    shard->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (shard->fd < 0) FailHf(path, std::string("cannot open: ") + std::strerror(errno));
    if (where_.empty() || file == kSingleName) {
      for (const SafetensorsEntry& e : shard->header.tensors) where_[e.name] = file;
    }
    return *shards_.emplace(file, std::move(shard)).first->second;
  }

  std::string folder_;
  std::map<std::string, std::string> where_;
  std::map<std::string, std::unique_ptr<HfShard>> shards_;
};

void PreadAll(int fd, char* p, std::size_t n, std::uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) FailHf(path, "read failed at byte " + std::to_string(offset) + ": " + std::strerror(errno));
    if (r == 0) FailHf(path, "ended at byte " + std::to_string(offset) + " (truncated?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

bool IsFloat(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf || t == c10::kDouble;
}

// Copies the window [offsets, offsets + dst's shape) of HF tensor `f` (whose full shape
// must be `global`) into `dst`. `source_row` (when not empty) gives, for each global
// row of dim 0, the HF row holding it. Reads only the window's bytes: one pread for
// whole rows in order, else one per row.
void ReadWindow(const HfFolder::Found& f, const std::vector<int64_t>& global, const std::vector<int64_t>& offsets,
                const torch::Tensor& dst, const std::vector<int64_t>& source_row, const std::string& engine_name) {
  const SafetensorsEntry& e = *f.entry;
  const std::string& path = f.shard->header.path;
  const std::string where = path + " tensor \"" + Quote(e.name) + "\" (the engine's \"" + engine_name + "\")";
  if (e.shape != global) FailHf(where, "has shape " + ShapeText(e.shape) + ", the model needs " + ShapeText(global));
  if (!IsFloat(e.dtype)) FailHf(where, std::string("has dtype ") + c10::toString(e.dtype) + ", not a float type");
  if (global.size() > 2) FailHf(where, "has " + std::to_string(global.size()) + " dimensions; 1 or 2 expected");
  torch::Tensor tmp = torch::empty(dst.sizes(), torch::TensorOptions().dtype(e.dtype));
  const std::uint64_t item = static_cast<std::uint64_t>(c10::elementSize(e.dtype));
  const std::uint64_t base = f.shard->header.buffer_start + e.begin;
  char* out = static_cast<char*>(tmp.data_ptr());
  // A vector is read as rows of one element (its rows may be permuted too).
  const int64_t rows = global.empty() ? 1 : dst.size(0), cols = global.size() == 2 ? dst.size(1) : 1;
  const int64_t row_len = global.size() == 2 ? global[1] : 1, first_col = global.size() == 2 ? offsets[1] : 0;
  const int64_t first_row = global.empty() ? 0 : offsets[0];
  const std::uint64_t run = static_cast<std::uint64_t>(cols) * item;
  if (source_row.empty() && cols == row_len) {
    PreadAll(f.shard->fd, out, run * static_cast<std::uint64_t>(rows),
             base + static_cast<std::uint64_t>(first_row * row_len) * item, path);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = first_row + r;
      const int64_t src = source_row.empty() ? g : source_row.at(static_cast<size_t>(g));
      PreadAll(f.shard->fd, out + static_cast<std::uint64_t>(r) * run, run,
               base + static_cast<std::uint64_t>(src * row_len + first_col) * item, path);
    }
  }
  dst.copy_(tmp);
}

// "model.layers.<i>.": the layer index, or -1.
int64_t HfLayer(const std::string& name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  int64_t layer = 0;
  size_t i = kPrefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < kPrefix.size() + 9; ++i) {
    layer = layer * 10 + (name[i] - '0');
  }
  return i > kPrefix.size() && i < name.size() && name[i] == '.' ? layer : -1;
}

}  // namespace

std::string LoadHuggingFaceWeights(const std::string& folder, const spec::ModelSpec& model,
                                   const std::vector<StateTensor>& state) {
  if (model.architecture != "deepseek_v3" && model.architecture != "qwen3_moe") {
    FailHf(folder, "model.architecture \"" + Quote(model.architecture) +
                       "\" has no Hugging Face model class; a Hugging Face folder loads into deepseek_v3 or qwen3_moe");
  }
  if (std::optional<spec::SpecError> e = spec::CheckAgainstHuggingFaceConfig(folder, model)) {
    FailHf(folder, e->ToString());
  }
  const HfFlavour flavour = model.qk_norm() ? HfFlavour::kQwen3Moe : HfFlavour::kDeepseekV3;
  const int64_t head_dim = model.head_dim();
  HfFolder hf(folder);
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;  // every HF name the whole model has, on any rank
  int64_t loaded = 0;
  for (const StateTensor& t : state) {
    const std::string where = folder + ": the engine's tensor \"" + t.name + "\"";
    if (IsGroupedExperts(t.name)) {
      if (t.global_shape.size() != 3) FailHf(where, "is a grouped expert tensor of shape " + ShapeText(t.global_shape));
      for (int64_t e = 0; e < t.global_shape[0]; ++e) expected.insert(HuggingFaceName(t.name, e, flavour));
      for (int64_t j = 0; j < t.local.size(0); ++j) {
        const std::string name = HuggingFaceName(t.name, t.offsets[0] + j, flavour);
        HfFolder::Found f = hf.Find(name);
        if (f.entry == nullptr)
          FailHf(where, "expert " + std::to_string(t.offsets[0] + j) + ": no tensor \"" + name + "\"");
        ReadWindow(f, {t.global_shape[1], t.global_shape[2]}, {t.offsets[1], t.offsets[2]}, t.local[j], {}, t.name);
        ++loaded;
      }
      continue;
    }
    const std::string name = HuggingFaceName(t.name, -1, flavour);
    if (name.empty()) FailHf(where, "has no Hugging Face name");
    HfFolder::Found f = hf.Find(name);
    if (f.entry == nullptr) {
      if (flavour == HfFlavour::kQwen3Moe && t.name.size() > 15 &&
          t.name.compare(t.name.size() - 15, 15, "moe.expert_bias") == 0) {
        t.local.zero_();  // Qwen3's router has no bias
        continue;
      }
      FailHf(where, "its Hugging Face tensor \"" + name + "\" is not in the folder");
    }
    expected.insert(name);
    std::vector<int64_t> source_row;
    if (HasRotateHalfRows(t.name, flavour)) {
      const std::vector<int64_t> order = RotateHalfRowOrder(t.global_shape.at(0), head_dim);
      if (static_cast<int64_t>(order.size()) != t.global_shape[0]) {
        FailHf(where,
               "has " + std::to_string(t.global_shape[0]) + " rows, not whole heads of " + std::to_string(head_dim));
      }
      source_row.resize(order.size());
      for (size_t k = 0; k < order.size(); ++k) source_row[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
    }
    ReadWindow(f, t.global_shape, t.offsets, t.local, source_row, t.name);
    ++loaded;
  }
  // Nothing in the folder may go unused: a tensor the model has no place for means
  // another model. DeepSeek-V3's multi-token-prediction layers come after the last
  // layer and are not trained here.
  int64_t skipped = 0;
  for (const auto& [name, file] : hf.names()) {
    if (expected.count(name) > 0) continue;
    if (HfLayer(name) >= model.n_layers) {
      ++skipped;
      continue;
    }
    FailHf(folder + "/" + file, "tensor \"" + Quote(name) + "\" has no place in the model (another architecture?)");
  }
  std::string text = "Hugging Face model " + folder + " (" + std::to_string(loaded) + " tensors read for this rank";
  if (skipped > 0) text += ", " + std::to_string(skipped) + " multi-token-prediction tensors skipped";
  return text + ")";
}

}  // namespace trainyard::engine
