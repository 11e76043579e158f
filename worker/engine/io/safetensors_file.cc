#include "worker/engine/io/safetensors_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/base/file_io.h"

namespace trainyard::engine {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors is little-endian; this code copies raw bytes");

struct DtypeInfo {
  SafetensorsDtype dtype;
  c10::ScalarType type;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, c10::kDouble},    {SafetensorsDtype::kF32, c10::kFloat},
    {SafetensorsDtype::kF16, c10::kHalf},      {SafetensorsDtype::kBF16, c10::kBFloat16},
    {SafetensorsDtype::kI64, c10::kLong},      {SafetensorsDtype::kI32, c10::kInt},
    {SafetensorsDtype::kI16, c10::kShort},     {SafetensorsDtype::kI8, c10::kChar},
    {SafetensorsDtype::kU8, c10::kByte},       {SafetensorsDtype::kBool, c10::kBool},
};

const DtypeInfo* DtypeByType(c10::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

c10::ScalarType TorchType(SafetensorsDtype dtype) {
  for (const auto& d : kDtypes) {
    if (dtype == d.dtype) return d.type;
  }
  throw std::logic_error("safetensors: no torch type for " + std::string(SafetensorsDtypeName(dtype)));
}

[[noreturn]] void Fail(const std::string& path, const std::string& problem) { FailSafetensors(path, problem); }

std::string Errno() { return std::strerror(errno); }

// Closes the descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

void ReadAllAt(int fd, void* data, std::size_t n, std::uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) Fail(path, "read failed: " + Errno());
    if (r == 0) Fail(path, "file ended early (truncated while reading?)");
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

}  // namespace

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  WriteSafetensors(path, tensors, SafetensorsWriteOptions{});
}

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const SafetensorsWriteOptions& options) {
  // Validate and lay out everything before touching the filesystem.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<torch::Tensor> data;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") Fail(path, "invalid tensor name \"" + name + "\"");
    if (!names.insert(name).second) Fail(path, "duplicate tensor name \"" + name + "\"");
    if (!tensor.defined()) Fail(path, "tensor \"" + name + "\" is undefined");
    if (!tensor.device().is_cpu()) Fail(path, "tensor \"" + name + "\" is not on the CPU");
    const DtypeInfo* dtype = DtypeByType(tensor.scalar_type());
    if (dtype == nullptr) {
      Fail(path, "tensor \"" + name + "\": unsupported dtype " + std::string(c10::toString(tensor.scalar_type())));
    }
    torch::Tensor t = tensor.detach().contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * SafetensorsDtypeSize(dtype->dtype);
    header[name] = {{"dtype", SafetensorsDtypeName(dtype->dtype)},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [key, value] : options.metadata) header["__metadata__"][key] = value;
  std::string header_text = header.dump();
  // Pad with spaces so the buffer starts 8-byte aligned, as the reference writer does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const std::uint64_t n = header_text.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));

  // path.tmp, fsync, rename, fsync of the folder (common/base/file_io.h).
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(path);
  if (!out.ok()) Fail(path, std::string(out.status().message()));
  auto check = [&](const absl::Status& s) {
    if (!s.ok()) Fail(path, std::string(s.message()));
  };
  check(out->Append(len_bytes, sizeof(len_bytes)));
  check(out->Append(header_text));
  for (std::size_t i = 0; i < data.size(); ++i) {
    check(out->Append(data[i].data_ptr(), static_cast<std::size_t>(data[i].nbytes())));
    if (i == 0 && options.after_first_tensor) options.after_first_tensor();
  }
  check(out->Commit());
}

const SafetensorsEntry* SafetensorsHeader::Find(const std::string& name) const {
  for (const auto& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

SafetensorsHeader ReadSafetensorsHeader(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) Fail(path, "cannot open: " + Errno());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) Fail(path, "cannot stat: " + Errno());
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  unsigned char len_bytes[8] = {};
  if (file_size >= 8) ReadAllAt(fd.get(), len_bytes, 8, 0, path);
  const std::uint64_t n = SafetensorsHeaderLength(len_bytes, file_size, path);
  std::string header_text(n, '\0');
  ReadAllAt(fd.get(), header_text.data(), n, 8, path);
  SafetensorsHeader out;
  out.path = path;
  out.file_bytes = file_size;
  out.buffer_start = 8 + n;
  ParsedSafetensorsHeader parsed = ParseSafetensorsHeader(header_text, file_size - out.buffer_start, path);
  for (auto& e : parsed.tensors) {
    out.tensors.push_back({std::move(e.name), TorchType(e.dtype), std::move(e.shape), e.begin, e.end});
  }
  out.metadata = std::move(parsed.metadata);
  return out;
}

torch::Tensor ReadSafetensorsTensor(const SafetensorsHeader& header, const std::string& name) {
  const SafetensorsEntry* e = header.Find(name);
  if (e == nullptr) Fail(header.path, "no tensor \"" + name.substr(0, 100) + "\"");
  Fd fd(::open(header.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) Fail(header.path, "cannot open: " + Errno());
  torch::Tensor t = torch::empty(e->shape, torch::TensorOptions().dtype(e->dtype));
  ReadAllAt(fd.get(), t.data_ptr(), static_cast<std::size_t>(e->end - e->begin), header.buffer_start + e->begin,
            header.path);
  if (e->dtype == c10::kBool && t.numel() > 0 && t.view(c10::kByte).gt(1).any().item<bool>()) {
    Fail(header.path, "tensor \"" + e->name + "\": BOOL data holds bytes other than 0 and 1");
  }
  return t;
}

std::vector<std::pair<std::string, torch::Tensor>> ReadSafetensors(const std::string& path) {
  const SafetensorsHeader header = ReadSafetensorsHeader(path);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.reserve(header.tensors.size());
  for (const SafetensorsEntry& e : header.tensors) out.emplace_back(e.name, ReadSafetensorsTensor(header, e.name));
  return out;
}

}  // namespace trainyard::engine
