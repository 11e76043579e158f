#include "worker/engine/checkpoint/checkpoint_export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/file_io.h"
#include "common/base/text.h"
#include "worker/engine/checkpoint/checkpoint_pin.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;

std::string Errno() { return std::strerror(errno); }

// An error that already carries its status code (any other failure of an export is
// DATA_LOSS: the checkpoint code throws std::runtime_error for a damaged checkpoint).
struct ExportFailure {
  absl::Status status;
};

[[noreturn]] void Fail(absl::Status status) { throw ExportFailure{std::move(status)}; }

// A read-only descriptor closed on every way out.
class ReadFd {
 public:
  explicit ReadFd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) FailCheckpoint(path, "cannot open: " + Errno());
  }
  ~ReadFd() { ::close(fd_); }
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void ReadAt(int fd, char* p, std::size_t n, std::uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) FailCheckpoint(path, "read failed at byte " + std::to_string(offset) + ": " + Errno());
    if (r == 0) FailCheckpoint(path, "ended at byte " + std::to_string(offset) + " (truncated while exporting?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

void WriteAt(int fd, const char* p, std::size_t n, std::uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) Fail(absl::InternalError(path + ": write failed at byte " + std::to_string(offset) + ": " + Errno()));
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

// The output's temporary file: hidden, next to the output (so the rename stays in one
// filesystem), removed unless Commit renamed it into place.
class TempFile {
 public:
  explicit TempFile(const std::string& output) : output_(output) {
    const fs::path out(output);
    for (int n = 0; fd_ < 0; ++n) {
      path_ = (out.parent_path() /
               ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n)))
                  .string();
      // 0666 less the umask, as a plain create (and AtomicFileWriter) gives.
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || n >= 100)) Fail(absl::InternalError(path_ + ": cannot create: " + Errno()));
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // fsync, rename over the output, fsync of its folder.
  void Commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) Fail(absl::InternalError(path_ + ": close failed: " + Errno()));
    if (absl::Status s = RenameDurably(path_, output_); !s.ok()) {
      Fail(absl::InternalError(output_ + ": " + std::string(s.message())));
    }
    committed_ = true;
  }

 private:
  std::string output_, path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Copies the part of `slice` inside `t`'s window to its place in the output (whose data
// for `t` starts at byte `out_begin`), through `buf`. Runs are the longest stretches
// contiguous in both the slice and the window; consecutive runs are read with one
// pread as far as the buffer allows.
void CopySlice(const CheckpointSlice& slice, int src_fd, const std::string& src_path, const ExportTensor& t,
               std::uint64_t out_begin, int out_fd, const std::string& out_path, std::vector<char>& buf) {
  const size_t k = slice.shape.size();
  const std::uint64_t item = SafetensorsDtypeSize(slice.dtype);
  std::vector<int64_t> lo(k), len(k);
  for (size_t d = 0; d < k; ++d) {
    lo[d] = std::max(slice.offsets[d], t.window_offsets[d]);
    const int64_t hi = std::min(slice.offsets[d] + slice.shape[d], t.window_offsets[d] + t.window_shape[d]);
    if (hi <= lo[d]) return;  // no overlap (or nothing to copy)
    len[d] = hi - lo[d];
  }
  // Row-major element strides of the slice (source) and the window (destination).
  std::vector<int64_t> ss(k, 1), ds(k, 1);
  for (size_t d = k; d-- > 1;) {
    ss[d - 1] = ss[d] * slice.shape[d];
    ds[d - 1] = ds[d] * t.window_shape[d];
  }
  // A run spans dims [j, k): those after j cover the slice's and the window's extent.
  size_t j = k == 0 ? 0 : k - 1;
  int64_t run = k == 0 ? 1 : len[k - 1];
  while (j > 0 && len[j] == slice.shape[j] && len[j] == t.window_shape[j]) run *= len[--j];
  const std::uint64_t run_bytes = static_cast<std::uint64_t>(run) * item;
  int64_t src_last = 0;  // element offset of the box's last element in the slice
  for (size_t d = 0; d < k; ++d) src_last += (lo[d] - slice.offsets[d] + len[d] - 1) * ss[d];
  const std::uint64_t span_end = slice.data_begin + static_cast<std::uint64_t>(src_last + 1) * item;
  std::vector<int64_t> idx(j, 0);  // the run's index over dims [0, j)
  std::uint64_t buf_lo = 0, buf_hi = 0;
  while (true) {
    int64_t src = 0, dst = 0;
    for (size_t d = 0; d < k; ++d) {
      const int64_t g = lo[d] + (d < j ? idx[d] : 0);
      src += (g - slice.offsets[d]) * ss[d];
      dst += (g - t.window_offsets[d]) * ds[d];
    }
    const std::uint64_t src_byte = slice.data_begin + static_cast<std::uint64_t>(src) * item;
    const std::uint64_t dst_byte = out_begin + static_cast<std::uint64_t>(dst) * item;
    if (run_bytes > buf.size()) {  // a run longer than the buffer: piece by piece
      for (std::uint64_t done = 0; done < run_bytes;) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), run_bytes - done));
        ReadAt(src_fd, buf.data(), n, src_byte + done, src_path);
        WriteAt(out_fd, buf.data(), n, dst_byte + done, out_path);
        done += n;
      }
    } else {
      if (src_byte < buf_lo || src_byte + run_bytes > buf_hi) {
        const std::uint64_t n = std::min<std::uint64_t>(buf.size(), span_end - src_byte);
        ReadAt(src_fd, buf.data(), static_cast<std::size_t>(n), src_byte, src_path);
        buf_lo = src_byte;
        buf_hi = src_byte + n;
      }
      WriteAt(out_fd, buf.data() + (src_byte - buf_lo), static_cast<std::size_t>(run_bytes), dst_byte, out_path);
    }
    size_t d = j;  // odometer over dims [0, j)
    while (d > 0 && ++idx[d - 1] == len[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
}

// The output's header: every tensor's entry in plan order, then __metadata__, padded
// with spaces to a multiple of 8 bytes (as the reference writer does).
std::string HeaderText(const std::vector<ExportTensor>& plan, const std::map<std::string, std::string>& metadata,
                       std::vector<std::uint64_t>* begins, std::uint64_t* buffer_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::uint64_t offset = 0;
  for (const ExportTensor& t : plan) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(NumElements(t.shape)) * SafetensorsDtypeSize(t.dtype);
    header[t.name] = {
        {"dtype", SafetensorsDtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    begins->push_back(offset);
    offset += bytes;
  }
  header["__metadata__"] = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metadata) header["__metadata__"][key] = value;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  *buffer_bytes = offset;
  return text;
}

// Qwen3MoeForCausalLM's router has no bias: the engine's aux-free one
// (model.load_balance_coeff > 0) cannot be carried, so the export leaves it out only
// while it is still all zero, and refuses otherwise (the HF model would route
// differently).
void DropZeroRouterBias(const CheckpointIndex& index, std::vector<ExportTensor>* plan) {
  const bool qwen = std::any_of(plan->begin(), plan->end(), [](const ExportTensor& t) {
    return t.name.find(".self_attn.k_norm.weight") != std::string::npos;
  });
  if (!qwen) return;
  std::vector<ExportTensor> kept;
  for (ExportTensor& t : *plan) {
    if (t.name.find(".mlp.gate.e_score_correction_bias") == std::string::npos) {
      kept.push_back(std::move(t));
      continue;
    }
    for (const CheckpointSlice& s : index.slices.at(t.source)) {
      const std::string& path = index.files[s.file].path;
      std::vector<char> bytes(static_cast<size_t>(NumElements(s.shape)) * SafetensorsDtypeSize(s.dtype));
      ReadAt(ReadFd(path).get(), bytes.data(), bytes.size(), s.data_begin, path);
      if (std::any_of(bytes.begin(), bytes.end(), [](char c) { return c != 0; })) {
        FailCheckpoint(index.dir + " tensor \"" + Quote(t.source) + "\"",
                       "is a router bias the job trained (model.load_balance_coeff > 0), which Qwen3MoeForCausalLM "
                       "has no place for; export with --names torchtitan, or train with load_balance_coeff = 0");
      }
    }
  }
  *plan = std::move(kept);
}

// A folder output is Hugging Face's layout; a file output (any name ending in
// .safetensors) is one file under either naming.
bool IsFolderOutput(const ExportOptions& o) {
  const std::string suffix = ".safetensors";
  return !(o.output.size() >= suffix.size() &&
           o.output.compare(o.output.size() - suffix.size(), suffix.size(), suffix) == 0);
}

void CheckOutput(const ExportOptions& o) {
  if (o.output.empty()) Fail(absl::InvalidArgumentError("no output file given"));
  std::error_code ec;
  const fs::path out(o.output);
  const fs::path folder = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(folder, ec)) {
    Fail(absl::NotFoundError("output folder " + Quoted(folder.string()) + " does not exist (create it first)"));
  }
  const bool folder_output = IsFolderOutput(o);
  if (folder_output && o.names != ExportNames::kHuggingFace) {
    Fail(absl::InvalidArgumentError("output " + Quoted(o.output) +
                                    " is a folder (no .safetensors suffix): a folder export is a Hugging Face model "
                                    "(--names hf); give a .safetensors file for torchtitan names"));
  }
  if (folder_output && o.hf_config_json.empty()) {
    Fail(
        absl::InvalidArgumentError("a Hugging Face model folder needs the model's config.json: export a job by its "
                                   "id, or give --job-file with --checkpoint"));
  }
  if (!folder_output && fs::is_directory(out, ec)) {
    Fail(absl::InvalidArgumentError("output " + Quoted(o.output) + " is a directory"));
  }
  if (fs::exists(fs::symlink_status(out, ec)) && !o.force) {
    Fail(absl::AlreadyExistsError("output " + Quoted(o.output) + " exists (give --force to replace it)"));
  }
}

// Copies `t` out of the checkpoint into the output at `out_begin`: slice by slice, and
// for a row-permuted tensor row by row (each row a one-row window of its own).
void CopyTensor(const CheckpointIndex& index, const ExportTensor& t, std::uint64_t out_begin, int out_fd,
                const std::string& out_path, std::vector<std::unique_ptr<ReadFd>>& sources, std::vector<char>& buf) {
  auto copy = [&](const ExportTensor& window, std::uint64_t begin) {
    for (const CheckpointSlice& s : index.slices.at(window.source)) {
      const std::string& path = index.files[s.file].path;
      if (!sources[s.file]) sources[s.file] = std::make_unique<ReadFd>(path);
      CopySlice(s, sources[s.file]->get(), path, window, begin, out_fd, out_path, buf);
    }
  };
  if (t.row_order.empty()) {
    copy(t, out_begin);
    return;
  }
  ExportTensor row = t;
  row.row_order.clear();
  row.window_shape[0] = 1;
  const std::uint64_t row_bytes =
      static_cast<std::uint64_t>(NumElements(row.window_shape)) * SafetensorsDtypeSize(t.dtype);
  for (size_t r = 0; r < t.row_order.size(); ++r) {
    row.window_offsets[0] = t.window_offsets[0] + t.row_order[r];
    copy(row, out_begin + r * row_bytes);
  }
}

// Writes `plan` as the safetensors file `output` (a hidden temporary file renamed
// into place) and returns its size.
std::uint64_t WriteExportFile(const CheckpointIndex& index, const std::vector<ExportTensor>& plan,
                              const std::map<std::string, std::string>& metadata, const std::string& output) {
  std::vector<std::uint64_t> begins;
  std::uint64_t buffer_bytes = 0;
  const std::string header = HeaderText(plan, metadata, &begins, &buffer_bytes);
  const std::uint64_t start = 8 + header.size();
  TempFile tmp(output);
  if (::ftruncate(tmp.fd(), static_cast<off_t>(start + buffer_bytes)) != 0) {
    Fail(absl::InternalError(tmp.path() + ": cannot size to " + std::to_string(start + buffer_bytes) +
                             " bytes: " + Errno()));
  }
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  WriteAt(tmp.fd(), len_bytes, 8, 0, tmp.path());
  WriteAt(tmp.fd(), header.data(), header.size(), 8, tmp.path());
  std::vector<char> buf(kExportBufferBytes);
  std::vector<std::unique_ptr<ReadFd>> sources(index.files.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    CopyTensor(index, plan[i], start + begins[i], tmp.fd(), tmp.path(), sources, buf);
  }
  tmp.Commit();
  return start + buffer_bytes;
}

std::uint64_t TensorBytes(const ExportTensor& t) {
  return static_cast<std::uint64_t>(NumElements(t.shape)) * SafetensorsDtypeSize(t.dtype);
}

// A hidden folder next to the output, removed unless Commit renamed it into place.
class TempFolder {
 public:
  explicit TempFolder(const std::string& output) : output_(output) {
    const fs::path out(output);
    for (int n = 0;; ++n) {
      path_ = (out.parent_path() /
               ("." + out.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n)))
                  .string();
      if (::mkdir(path_.c_str(), 0777) == 0) break;
      if (errno != EEXIST || n >= 100) Fail(absl::InternalError(path_ + ": cannot create: " + Errno()));
    }
  }
  ~TempFolder() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const std::string& path() const { return path_; }

  // The folder's entries are durable first; an output being replaced (--force) is
  // moved aside, the new folder renamed into place, then the old one removed.
  void Commit() {
    if (absl::Status s = FsyncPath(path_, /*directory=*/true); !s.ok())
      Fail(absl::InternalError(std::string(s.message())));
    std::error_code ec;
    std::string aside;
    if (fs::exists(fs::symlink_status(output_, ec))) {
      aside = path_ + ".old";
      if (::rename(output_.c_str(), aside.c_str()) != 0) {
        Fail(absl::InternalError(output_ + ": cannot move the old output aside: " + Errno()));
      }
    }
    if (::rename(path_.c_str(), output_.c_str()) != 0) {
      const std::string why = Errno();
      if (!aside.empty()) ::rename(aside.c_str(), output_.c_str());
      Fail(absl::InternalError(output_ + ": cannot rename the export into place: " + why));
    }
    committed_ = true;
    (void)FsyncPath(DirectoryOf(output_), /*directory=*/true);
    if (!aside.empty()) fs::remove_all(aside, ec);
  }

 private:
  std::string output_, path_;
  bool committed_ = false;
};

// Hugging Face's sharded layout: model-0000i-of-0000N.safetensors of at most
// max_shard_bytes of tensor data each (a bigger tensor alone in its shard), the index
// model.safetensors.index.json and config.json. Returns the bytes written.
std::uint64_t WriteHuggingFaceFolder(const CheckpointIndex& index, const std::vector<ExportTensor>& plan,
                                     const std::map<std::string, std::string>& metadata, const ExportOptions& o) {
  std::vector<std::vector<ExportTensor>> shards;
  std::uint64_t in_shard = 0, total = 0;
  for (const ExportTensor& t : plan) {
    const std::uint64_t bytes = TensorBytes(t);
    if (shards.empty() || (in_shard > 0 && in_shard + bytes > o.max_shard_bytes)) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  TempFolder folder(o.output);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::uint64_t written = 0;
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    written += WriteExportFile(index, shards[i], metadata, folder.path() + "/" + name);
    for (const ExportTensor& t : shards[i]) weight_map[t.name] = name;
  }
  nlohmann::ordered_json idx = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string idx_text = idx.dump(2) + "\n";
  for (const auto& [file, text] : {std::pair<std::string, std::string>{"model.safetensors.index.json", idx_text},
                                   {"config.json", o.hf_config_json}}) {
    if (absl::Status s = WriteFileAtomically(folder.path() + "/" + file, text); !s.ok()) {
      Fail(absl::InternalError(std::string(s.message())));
    }
    written += text.size();
  }
  folder.Commit();
  return written;
}

ExportResult Export(const ExportOptions& o) {
  CheckOutput(o);
  if (o.best && o.step) Fail(absl::InvalidArgumentError("--best and --step choose the checkpoint both; give one"));
  absl::StatusOr<std::string> dir =
      o.best ? SelectBestCheckpoint(o.checkpoint) : SelectCheckpoint(o.checkpoint, o.step);
  if (!dir.ok()) Fail(dir.status());
  absl::StatusOr<std::unique_ptr<CheckpointPin>> pin = CheckpointPin::Acquire(*dir, "export");
  if (!pin.ok() && pin.status().code() == absl::StatusCode::kNotFound) {
    Fail(absl::NotFoundError(std::string(pin.status().message()) + "; the job pruned it meanwhile, export again"));
  }
  std::error_code ec;
  if (fs::equivalent(fs::absolute(o.output).parent_path(), *dir, ec)) {
    Fail(absl::InvalidArgumentError("output " + Quoted(o.output) + " is inside the checkpoint it exports"));
  }
  const CheckpointIndex index = ReadCheckpointIndex(*dir);
  for (const std::string& name : index.names) {
    if (!IsTrainingOnlyTensor(name)) CheckExactCover(index.dir, name, index.slices.at(name), index);
  }
  std::vector<ExportTensor> plan;
  try {
    plan = PlanExport(index, o.names);
    if (IsFolderOutput(o)) DropZeroRouterBias(index, &plan);
  } catch (const std::runtime_error& e) {
    Fail(absl::InvalidArgumentError(e.what()));
  }
  if (plan.empty()) Fail(absl::DataLossError("checkpoint " + index.dir + ": holds no model tensor"));
  std::map<std::string, std::string> metadata = o.metadata;
  metadata["format"] = "pt";
  metadata["trainyard.step"] = std::to_string(index.manifest.step);
  metadata["trainyard.source"] = index.dir;
  metadata["trainyard.names"] = ExportNamesText(o.names);
  ExportResult r;
  r.bytes = IsFolderOutput(o) ? WriteHuggingFaceFolder(index, plan, metadata, o)
                              : WriteExportFile(index, plan, metadata, o.output);
  r.checkpoint_dir = index.dir;
  r.step = index.manifest.step;
  r.dp = index.manifest.dp;
  r.tp = index.manifest.tp;
  r.ep = index.manifest.ep;
  r.tensors = plan.size();
  r.metric = index.manifest.metric;
  return r;
}

}  // namespace

absl::StatusOr<std::string> SelectCheckpoint(const std::string& path, std::optional<int64_t> step) {
  std::error_code ec;
  if (path.empty()) return absl::InvalidArgumentError("no checkpoint folder given");
  if (!fs::exists(path, ec)) return absl::NotFoundError("checkpoint folder " + Quoted(path) + " does not exist");
  if (!fs::is_directory(path, ec)) return absl::InvalidArgumentError(Quoted(path) + " is not a directory");
  if (fs::exists(fs::path(path) / kManifestName, ec)) {
    int64_t dir_step = 0;
    int attempt = 0;
    const std::string name = fs::path(path).lexically_normal().filename().string();
    if (step && spec::ParseCheckpointDirName(name, &dir_step, &attempt) && dir_step != *step) {
      return absl::NotFoundError(Quoted(path) + " is the checkpoint of step " + std::to_string(dir_step) + ", not " +
                                 std::to_string(*step));
    }
    return path;
  }
  int64_t own_step = 0;
  int own_attempt = 0;
  if (spec::ParseCheckpointDirName(fs::path(path).lexically_normal().filename().string(), &own_step, &own_attempt)) {
    return absl::NotFoundError(Quoted(path) + " is incomplete: no manifest.json (a write that never finished)");
  }
  const std::vector<CheckpointDirEntry> dirs = ListCheckpointDirs(path);
  std::vector<std::string> steps, incomplete;
  for (const auto& d : dirs) {
    if (!d.complete) {
      incomplete.push_back(fs::path(d.path).filename().string());
    } else if (steps.empty() || steps.back() != std::to_string(d.step)) {
      steps.push_back(std::to_string(d.step));
    }
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  };
  const std::string skipped = incomplete.empty() ? "" : "; incomplete (no manifest.json): " + join(incomplete);
  // Newest first; with `step`, only that step's (its newest attempt first).
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (it->complete && (!step || it->step == *step)) return it->path;
  }
  if (step) {
    return absl::NotFoundError("no complete checkpoint of step " + std::to_string(*step) + " under " + Quoted(path) +
                               "; steps present: " + (steps.empty() ? "none" : join(steps)) + skipped);
  }
  return absl::NotFoundError("no complete checkpoint under " + Quoted(path) + " (no step-*-attempt-*/manifest.json)" +
                             skipped);
}

absl::StatusOr<std::string> SelectBestCheckpoint(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return absl::InvalidArgumentError("no checkpoint folder given");
  if (!fs::is_directory(path, ec)) return absl::NotFoundError("checkpoint folder " + Quoted(path) + " does not exist");
  if (fs::exists(fs::path(path) / kManifestName, ec)) {
    return absl::InvalidArgumentError(Quoted(path) +
                                      " is one checkpoint; --best chooses among a folder of them (the job's)");
  }
  // The metric of the newest scored checkpoint names the ranking: a folder reused
  // after best_metric changed holds values of another metric, which are not compared.
  std::vector<std::pair<std::string, CheckpointMetric>> scored;
  int complete = 0, unscored = 0;
  for (const CheckpointDirEntry& d : ListCheckpointDirs(path)) {  // oldest first: `<=` keeps the newest of a tie
    if (!d.complete) continue;
    ++complete;
    CheckpointManifest m;
    try {
      m = ReadVerifiedManifest(d.path);
    } catch (const std::exception&) {
      continue;  // damaged: not a candidate
    }
    if (!m.metric || !std::isfinite(m.metric->value)) {
      ++unscored;
      continue;
    }
    scored.emplace_back(d.path, *m.metric);
  }
  std::string best;
  CheckpointMetric best_metric;
  for (const auto& [dir, metric] : scored) {
    if (metric.name != scored.back().second.name) continue;
    if (best.empty() || metric.value <= best_metric.value) {
      best = dir;
      best_metric = metric;
    }
  }
  if (best.empty()) {
    return absl::NotFoundError("no checkpoint under " + Quoted(path) + " has a metric to rank by (" +
                               std::to_string(complete) + " complete, " + std::to_string(unscored) +
                               " without a finite metric); checkpoint.keep_best records one");
  }
  return best;
}

absl::StatusOr<ExportResult> ExportCheckpoint(const ExportOptions& options) {
  try {
    return Export(options);
  } catch (const ExportFailure& f) {
    return f.status;
  } catch (const std::runtime_error& e) {
    return absl::DataLossError(e.what());
  }
}

}  // namespace trainyard::engine
