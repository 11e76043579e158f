#include "worker/engine/checkpoint/checkpoint_loader.h"

#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/base/text.h"
#include "common/spec/hf_config.h"
#include "worker/engine/base/torch_compat.h"
#include "worker/engine/checkpoint/checkpoint_export.h"
#include "worker/engine/checkpoint/checkpoint_index.h"
#include "worker/engine/checkpoint/export_names.h"
#include "worker/engine/checkpoint/hf_checkpoint.h"
#include "worker/engine/io/safetensors_file.h"
#include "worker/engine/io/state_dict_io.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

// LoadInitialWeights' own errors, told apart from the invalid_argument of LoadFullState
// that it wraps.
struct InitialWeightsError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The index with each rank file's torch-side header (for reading slices as tensors).
struct OpenCheckpoint {
  CheckpointIndex index;
  std::vector<SafetensorsHeader> headers;  // one per file, index.files' order
};

OpenCheckpoint Open(const std::string& dir) {
  OpenCheckpoint c{ReadCheckpointIndex(dir), {}};
  for (const CheckpointRankFile& f : c.index.files) c.headers.push_back(ReadSafetensorsHeader(f.path));
  return c;
}

// Copies the parts of `slices` that overlap this rank's shard into it; throws unless
// they cover it completely.
void Assemble(const StateTensor& t, const std::vector<CheckpointSlice>& slices, const OpenCheckpoint& c) {
  const std::string where = c.index.dir + " tensor \"" + t.name + "\"";
  auto mask = torch::zeros(t.local.sizes(), torch::kBool);
  const auto local_shape = t.local.sizes().vec();
  for (const CheckpointSlice& s : slices) {
    const SafetensorsHeader& file = c.headers[s.file];
    if (s.global_shape != t.global_shape) {
      FailCheckpoint(where, "has global shape " + ShapeText(s.global_shape) + " in " + file.path +
                                ", the model needs " + ShapeText(t.global_shape));
    }
    const c10::ScalarType dtype = file.Find(s.key)->dtype;
    if (dtype != t.local.scalar_type()) {
      FailCheckpoint(where, std::string("has dtype ") + c10::toString(dtype) + " in " + file.path +
                                ", the model needs " + c10::toString(t.local.scalar_type()));
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
    torch::Tensor src = ReadSafetensorsTensor(file, s.key);
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
    FailCheckpoint(where, "the checkpoint's slices cover " + std::to_string(have) + " of the " +
                              std::to_string(mask.numel()) + " elements of this rank's shard (offsets " +
                              ShapeText(t.offsets) + ", shape " + ShapeText(local_shape) + ")");
  }
}

// Every tensor of `state` from `c`. With `weights_only` the checkpoint's optimizer
// moments are not asked for; any other name the model lacks is an error.
void LoadTensors(const OpenCheckpoint& c, const std::vector<StateTensor>& state, bool weights_only) {
  torch::NoGradGuard no_grad;
  std::map<std::string, const StateTensor*> wanted;
  for (const StateTensor& t : state) wanted[t.name] = &t;
  for (const auto& [name, slices] : c.index.slices) {
    if (wanted.count(name) == 0 && !(weights_only && IsTrainingOnlyTensor(name))) {
      FailCheckpoint(c.index.files[slices.front().file].path,
                     "tensor \"" + Quote(name) + "\" is not in the model (another model shape?)");
    }
  }
  for (const StateTensor& t : state) {
    auto it = c.index.slices.find(t.name);
    if (it == c.index.slices.end()) {
      FailCheckpoint(c.index.dir, "tensor \"" + t.name + "\" is missing (no rank file holds a slice of it)");
    }
    Assemble(t, it->second, c);
  }
}

}  // namespace

CheckpointManifest LoadCheckpoint(const std::string& dir, const std::vector<StateTensor>& state, int rank,
                                  const CheckpointExpectations& expect) {
  // The data position first: a checkpoint of another run is refused before its files
  // are read.
  const CheckpointManifest m = ReadVerifiedManifest(dir);
  if (m.global_batch != expect.global_batch) {
    FailCheckpoint(dir, "was written with " + std::to_string(m.global_batch) +
                            " samples per step (batch_size x dp x grad_accum_steps) but this run takes " +
                            std::to_string(expect.global_batch) + "; resuming would not continue the same data order");
  }
  if (m.dataset != expect.dataset || m.seed != expect.seed) {
    FailCheckpoint(dir, "was written for dataset \"" + Quote(m.dataset) + "\" seed " + std::to_string(m.seed) +
                            ", this run reads dataset \"" + Quote(expect.dataset) + "\" seed " +
                            std::to_string(expect.seed));
  }
  const OpenCheckpoint c = Open(dir);
  LoadTensors(c, state, /*weights_only=*/false);
  const size_t own = rank < static_cast<int>(c.index.files.size()) ? static_cast<size_t>(rank) : 0;
  for (const std::string& key : c.index.files[own].rng) {
    torch::Tensor s = ReadSafetensorsTensor(c.headers[own], key);
    if (s.scalar_type() != torch::kByte) FailCheckpoint(c.headers[own].path, "RNG state \"" + key + "\" must be U8");
    compat::SetRngState(key.substr(4), s);  // a generator this process lacks is skipped
  }
  return c.index.manifest;
}

CheckpointManifest LoadCheckpointWeights(const std::string& dir, const std::vector<StateTensor>& state) {
  const OpenCheckpoint c = Open(dir);
  LoadTensors(c, state, /*weights_only=*/true);
  return c.index.manifest;
}

std::string LoadInitialWeights(const std::string& path, TransformerModelImpl& model) {
  auto fail = [&](const std::string& problem) -> void {
    throw InitialWeightsError("initial weights " + Quoted(path) + ": " + problem);
  };
  if (path.empty()) fail("no path given");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory &&
      ec != std::errc::permission_denied) {
    // EIO, ESTALE, ...: the filesystem, not the path; may pass on a retry.
    throw std::runtime_error("initial weights " + Quoted(path) + ": cannot stat: " + ec.message());
  }
  if (ec == std::errc::permission_denied) fail("cannot be reached: " + ec.message());
  if (!fs::exists(st)) fail("does not exist");
  std::string loaded;
  try {
    if (fs::is_regular_file(st)) {
      // An export under Hugging Face names would fail below naming the first tensor;
      // say why instead.
      const SafetensorsHeader header = ReadSafetensorsHeader(path);
      auto names = header.metadata.find("trainyard.names");
      if (names != header.metadata.end() && names->second != "torchtitan") {
        fail("was exported with --names " + Quote(names->second) +
             "; initial weights take torchtitan names (export with --names torchtitan)");
      }
      const NamedTensors tensors = ReadSafetensors(path);
      LoadFullState(model, tensors);
      loaded = "safetensors file " + path + " (" + std::to_string(tensors.size()) + " tensors)";
    } else if (spec::IsHuggingFaceFolder(path)) {
      loaded = LoadHuggingFaceWeights(path, model.config(), CollectModelState(model));
    } else if (fs::is_directory(st)) {
      absl::StatusOr<std::string> dir = SelectCheckpoint(path, std::nullopt);
      if (!dir.ok()) fail(std::string(dir.status().message()));
      const CheckpointManifest m = LoadCheckpointWeights(*dir, CollectModelState(model));
      loaded = "checkpoint " + *dir + " (step " + std::to_string(m.step) +
               ", written under dp=" + std::to_string(m.dp) + " tp=" + std::to_string(m.tp) +
               " ep=" + std::to_string(m.ep) + ")";
    } else {
      fail("is neither a safetensors file nor a checkpoint directory");
    }
  } catch (const InitialWeightsError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;  // memory, not the weights
  } catch (const c10::Error&) {
    throw;  // a device error (CUDA out of memory) while copying
  } catch (const std::exception& e) {
    // A malformed file, a checkpoint missing a rank's file, a tensor of another shape:
    // the weights named are wrong.
    fail(e.what());
  }
  return loaded;
}

}  // namespace trainyard::engine
